package broadcast

import "github.com/cachecast/cachecast/broadcast/wire"

// The data port's counters (see "Counters" in the package doc), and the
// encoders and decoders of acks and vectors that count the entries they
// carry.

// Stats are the data port's counters since New, for the metrics and the
// fleet harness (see "Counters" in the package doc).
type Stats struct {
	// VectorEntriesSent and VectorEntriesReceived count (origin, seq)
	// entries in acks, vectors, retired lists and entries frames, and
	// the digest tree's nodes in sums and entries frames (one each).
	VectorEntriesSent, VectorEntriesReceived uint64
	// ExchangeEntries is the part of both that the exchanges' vector,
	// sums and entries frames carried (the rest: acks and retired lists).
	ExchangeEntries uint64
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
		ExchangeEntries:       n.exchangeEntries.Load(),
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

// BytesSent counts the bytes of this node's own records it has sent:
// pushed to peers and published to NATS (not pulls it served).
func (n *Node) BytesSent() uint64 { return n.bytesSent.Load() }

// NATSDisconnects counts disconnections from NATS; zero without NATS.
func (n *Node) NATSDisconnects() uint64 {
	if n.nats == nil {
		return 0
	}
	return n.nats.Disconnects()
}

// NATSErrors counts NATS errors (slow consumer and the like).
func (n *Node) NATSErrors() uint64 {
	if n.nats == nil {
		return 0
	}
	return n.nats.Errors()
}

// Rejected counts peers refused at the handshake.
func (n *Node) Rejected() uint64 { return n.rejected.Load() }

// Stalls counts connections closed because the peer stopped reading or
// went silent for longer than PeerTimeout.
func (n *Node) Stalls() uint64 { return n.stalls.Load() }

// BadFrames counts connections closed for a malformed frame or record.
func (n *Node) BadFrames() uint64 { return n.badFrames.Load() }

// Bootstraps counts the times this node took a peer's snapshot because
// the records it needed were recycled everywhere.
func (n *Node) Bootstraps() uint64 { return n.boots.Load() }

// VectorEntries counts the version vector entries (one per origin) this
// node has sent and received in acks, vectors and retired lists (Stats
// splits them): the anti-entropy's cost, which the
// fleet harness (internal/fleet) measures against the fleet's size.
func (n *Node) VectorEntries() uint64 { return n.entriesSent.Load() + n.entriesReceived.Load() }

// Pulls counts the anti-entropy pull requests this node has sent.
func (n *Node) Pulls() uint64 { return n.pulls.Load() }

// ackFrame encodes an ack (or a retired list) and counts its entries.
func (n *Node) ackFrame(v map[uint64]uint64) []byte {
	n.entriesSent.Add(uint64(len(v)))
	return wire.EncodeAck(v)
}

// vectorFrame encodes a vector frame and counts its entries.
func (n *Node) vectorFrame(m wire.VectorMsg) []byte {
	n.entriesSent.Add(uint64(len(m.Live)))
	n.exchangeEntries.Add(uint64(len(m.Live)))
	return wire.EncodeVector(m)
}

// readAck decodes an ack (or a retired list) and counts its entries.
func (n *Node) readAck(p []byte) (map[uint64]uint64, error) {
	v, err := wire.DecodeAck(p)
	n.entriesReceived.Add(uint64(len(v)))
	return v, err
}

// readVector decodes a vector frame and counts its entries.
func (n *Node) readVector(p []byte) (wire.VectorMsg, error) {
	m, err := wire.DecodeVector(p)
	n.entriesReceived.Add(uint64(len(m.Live)))
	n.exchangeEntries.Add(uint64(len(m.Live)))
	return m, err
}
