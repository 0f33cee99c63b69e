package broadcast

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/digest"
	"github.com/cachecast/cachecast/broadcast/wire"
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
			if n.retired[o] {
				n.digests.Retire(o, false)
			}
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
	n.digests.Retire(o, true)
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
func (n *Node) vectorToSend() (wire.VectorMsg, map[uint64]uint64) {
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
	return wire.VectorMsg{Live: live, Retired: uint32(len(retired)), Digest: wire.RetiredDigest(retired)}, retired
}

// LiveVector is the store's version vector without the retired origins:
// what peers are compared on entry by entry (PeerStatus.Holds leaves the
// retired ones out too).
func (n *Node) LiveVector() map[uint64]uint64 {
	v, _ := n.vectorToSend()
	return v.Live
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

// openingFrame is the first frame of a digest exchange on a connection
// of protocol proto: the sum of the whole live vector (at a cut from
// now, on ProtocolCut) and the retired summary.
func (n *Node) openingFrame(proto uint8) digest.Frame {
	hasCut, cut := proto >= ProtocolCut, uint64(digest.NoCut)
	if now := time.Now(); hasCut && !n.digests.HeadsFirst(now, n.cfg.SyncInterval) {
		cut = digest.CutAt(now, n.cfg.SyncInterval)
	}
	return n.digests.Opening(hasCut, cut)
}

// stampOf is the stamp of origin o's record seq: 0 (old) when it cannot
// be read (recycled, or lost: the records a cut can reach are young, and
// those are kept), digest.NoCut (young) when it is not committed yet.
func (n *Node) stampOf(o, seq uint64) uint64 { return digest.StampIn(n.st, o, seq) }

// digestAnswer takes a sums or entries frame from peer (l is this node's
// link to it, nil when it is not a member here) on a connection of
// protocol proto: what it learns goes into the link's view of the peer
// (which then pulls what this node lacks), and it returns the frames
// that answer it.
func (n *Node) digestAnswer(l *link, typ byte, p []byte, proto uint8) ([]digest.Frame, error) {
	if proto < ProtocolDigest {
		return nil, fmt.Errorf("%w: a digest frame (type %d) on a connection of protocol %d", wire.ErrBadFrame, typ, proto)
	}
	var seen map[uint64]uint64
	var epoch uint64
	if l != nil {
		seen, epoch = l.seenMarks()
	}
	st, got, err := n.digests.Answer(typ, p, proto >= ProtocolCut, seen)
	n.entriesReceived.Add(uint64(got))
	n.exchangeEntries.Add(uint64(got))
	if err != nil {
		return nil, err
	}
	if l != nil {
		if st.SameRetired {
			l.mu.Lock()
			l.retiredHolds = st.Retired // the same origins at the same seqs
			l.mu.Unlock()
		}
		l.mergeDigest(st, epoch)
		l.afterAck()
	}
	return st.Out, nil
}

// sendDigest writes the frames of a digest exchange with send, counting
// their entries.
func (n *Node) sendDigest(out []digest.Frame, send func(byte, []byte) error) error {
	for _, f := range out {
		if err := send(f.Type, f.Payload); err != nil {
			return err
		}
		n.entriesSent.Add(uint64(f.Entries))
		if f.Type != wire.FrameRetired {
			n.exchangeEntries.Add(uint64(f.Entries))
		}
	}
	return nil
}

// linkTo is this node's link to peer, nil when it is not a member.
func (n *Node) linkTo(peer uint64) *link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[peer]
}

// queueDigest hands frames of a digest exchange to the link's writer.
func (l *link) queueDigest(out []digest.Frame) {
	if len(out) == 0 {
		return
	}
	l.mu.Lock()
	l.digestOut = append(l.digestOut, out...)
	l.mu.Unlock()
	l.wake()
}

// writeExchange writes what the link's writer has of the exchanges: on
// protocol 5 the digest frames queued and, when exchange, an opening; on
// 3 and 4 the whole vector when exchange and the retired list when
// sendRetired.
func (l *link) writeExchange(w *wire.Writer, proto uint8, exchange, sendRetired bool) error {
	l.mu.Lock()
	queued := l.digestOut
	l.digestOut = nil
	l.mu.Unlock()
	if proto < ProtocolDigest {
		queued = nil // from a connection of protocol 5 gone since: the exchange is over
	}
	if !exchange && !sendRetired && len(queued) == 0 {
		return nil
	}
	defer l.touch()
	if exchange && proto >= ProtocolDigest {
		queued = append(queued, l.n.openingFrame(proto))
		l.n.exchanges.Add(1)
	}
	if err := l.n.sendDigest(queued, w.WriteFrame); err != nil {
		return err
	}
	if proto >= ProtocolDigest {
		return nil
	}
	mine, retired := l.n.vectorToSend()
	if exchange {
		if err := w.WriteFrame(wire.FrameVector, l.n.vectorFrame(mine)); err != nil {
			return err
		}
		l.n.exchanges.Add(1)
	}
	if sendRetired {
		if err := w.WriteFrame(wire.FrameRetired, l.n.ackFrame(retired)); err != nil {
			return err
		}
	}
	return nil
}
