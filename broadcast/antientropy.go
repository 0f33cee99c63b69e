package broadcast

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// antiEntropyLoop starts Fanout exchanges every SyncInterval and keeps the
// retired origins up to date.
func (n *Node) antiEntropyLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.rounds.Add(1)
		n.retireAbsent(time.Now())
		n.startExchanges()
	}
}

// startExchanges keeps Fanout exchanges going: those asked for and not
// yet sent (the link is dialing) count, and links picked at random make up
// the rest. So a node has at most Fanout exchanges in flight, however slow
// its peers; one whose dial fails is given up at once (see link.run).
func (n *Node) startExchanges() {
	n.mu.Lock()
	ls := make([]*link, 0, len(n.links))
	for _, l := range n.links {
		ls = append(ls, l)
	}
	n.mu.Unlock()
	picked := 0
	for _, l := range ls {
		if l.exchangePending() {
			picked++
		}
	}
	rand.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
	for _, l := range ls {
		if picked >= n.cfg.Fanout {
			break
		}
		if l.exchange() {
			picked++
		}
	}
}

// retireAbsent retires the origins this node holds records of that have
// not been peers for RetireAfter (the clock of an origin starts when this
// node first sees it absent).
func (n *Node) retireAbsent(now time.Time) {
	vec := n.st.Vector()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rmu.Lock()
	defer n.rmu.Unlock()
	for o := range vec {
		if o == n.self || n.links[o] != nil {
			delete(n.absentSince, o)
			delete(n.retired, o)
			continue
		}
		since, ok := n.absentSince[o]
		if !ok {
			n.absentSince[o] = now
			continue
		}
		if !n.retired[o] && now.Sub(since) >= n.cfg.RetireAfter {
			n.retireLocked(o, "absent", now.Sub(since))
		}
	}
}

// retireLocked retires origin o; called with mu and rmu held.
func (n *Node) retireLocked(o uint64, why string, absent time.Duration) {
	n.retired[o] = true
	if _, ok := n.absentSince[o]; !ok {
		n.absentSince[o] = time.Now()
	}
	// What the links know of it is no longer compared entry by entry.
	for _, l := range n.links {
		l.mu.Lock()
		if l.holds[o] <= n.st.LastSeq(o) {
			delete(l.holds, o)
		}
		l.mu.Unlock()
	}
	n.log.Info("retired an origin from the vectors", zap.String("origin", fmt.Sprintf("%016x", o)),
		zap.String("why", why), zap.Duration("absent", absent))
}

// adoptRetired takes the retirements of a peer that says it has retired
// these origins: those that are not peers here are retired here too, so
// that the fleet's retired sets (and so their digests) agree. (The caller
// still pulls what the peer holds beyond this node of them.)
func (n *Node) adoptRetired(entries map[uint64]uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rmu.Lock()
	defer n.rmu.Unlock()
	for o := range entries {
		if o == n.self || n.links[o] != nil || n.retired[o] {
			continue
		}
		n.retireLocked(o, "a peer retired it", 0)
	}
}

// vectorToSend is this node's vector as a vector frame carries it, and
// the retired origins with their seqs.
func (n *Node) vectorToSend() (vectorMsg, map[uint64]uint64) {
	live := n.st.Vector()
	retired := map[uint64]uint64{}
	n.rmu.Lock()
	for o := range n.retired {
		if s, ok := live[o]; ok {
			retired[o] = s
			delete(live, o)
		}
	}
	n.rmu.Unlock()
	return vectorMsg{live: live, retired: uint32(len(retired)), digest: retiredDigest(retired)}, retired
}

// LiveVector is the store's version vector without the retired origins:
// what peers are compared on entry by entry (PeerStatus.Holds leaves the
// retired ones out too).
func (n *Node) LiveVector() map[uint64]uint64 {
	v, _ := n.vectorToSend()
	return v.live
}

// Retired returns the origins this node has retired from its vectors.
func (n *Node) Retired() []uint64 {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	out := make([]uint64, 0, len(n.retired))
	for o := range n.retired {
		out = append(out, o)
	}
	return out
}

// Stats are the data port's counters since New, for the metrics and the
// fleet harness (see "Counters" in the package doc).
type Stats struct {
	// VectorEntriesSent and VectorEntriesReceived count (origin, seq)
	// entries in acks, vectors and retired lists.
	VectorEntriesSent, VectorEntriesReceived uint64
	// BytesSent and BytesReceived count every byte of the data port's
	// handshakes and frames, both ways, records included (TLS's own bytes
	// are not counted).
	BytesSent, BytesReceived uint64
	// OpenOutbound and OpenInbound are the data-port connections open
	// now: dialed by this node, and accepted from peers.
	OpenOutbound, OpenInbound int
	// Rounds counts the anti-entropy rounds (one a SyncInterval, when the
	// machine keeps up), Exchanges the exchanges this node started (at
	// most Fanout a round), Dials the connections it opened, IdleCloses
	// those it closed for having nothing to do.
	Rounds, Exchanges, Dials, IdleCloses uint64
	// Retired is how many origins this node leaves out of its vectors.
	Retired int
}

// Stats returns the data port's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	in := len(n.conns)
	n.mu.Unlock()
	n.rmu.Lock()
	retired := len(n.retired)
	n.rmu.Unlock()
	return Stats{
		VectorEntriesSent:     n.entriesSent.Load(),
		VectorEntriesReceived: n.entriesReceived.Load(),
		BytesSent:             n.wireSent.Load(),
		BytesReceived:         n.wireReceived.Load(),
		OpenOutbound:          int(n.openOut.Load()),
		OpenInbound:           in,
		Rounds:                n.rounds.Load(),
		Exchanges:             n.exchanges.Load(),
		Dials:                 n.dials.Load(),
		IdleCloses:            n.idleCloses.Load(),
		Retired:               retired,
	}
}

// ackFrame encodes an ack (or a retired list) and counts its entries.
func (n *Node) ackFrame(v map[uint64]uint64) []byte {
	n.entriesSent.Add(uint64(len(v)))
	return encodeAck(v)
}

// vectorFrame encodes a vector frame and counts its entries.
func (n *Node) vectorFrame(m vectorMsg) []byte {
	n.entriesSent.Add(uint64(len(m.live)))
	return encodeVector(m)
}

// readAck decodes an ack (or a retired list) and counts its entries.
func (n *Node) readAck(p []byte) (map[uint64]uint64, error) {
	v, err := decodeAck(p)
	n.entriesReceived.Add(uint64(len(v)))
	return v, err
}

// readVector decodes a vector frame and counts its entries.
func (n *Node) readVector(p []byte) (vectorMsg, error) {
	m, err := decodeVector(p)
	n.entriesReceived.Add(uint64(len(m.live)))
	return m, err
}

// handshakeBytes is what one handshake writes and reads, each way.
const handshakeBytes = helloSize + macSize
