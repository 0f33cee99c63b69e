package broadcast

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cachecast/cachecast/broadcast/wire"
	"go.uber.org/zap"
)

// inbound is the listener's side of one link after its handshake: the
// frames a dialer sends, read in one loop (run), each type answered by a
// method of its own. It writes from two goroutines, the loop and the
// keepalive ticker, so every write goes through send (or holds wmu).
type inbound struct {
	n     *Node
	c     net.Conn
	peer  uint64
	proto uint8
	log   *zap.Logger

	wmu sync.Mutex // the keepalive ticker and the frame loop both write
	w   *wire.Writer
	fr  *wire.Reader

	// exchanges: protocol 3 and later send the dialer what it needs to
	// push (the seq held of its own origin), an empty ack every
	// SyncInterval to say this side is alive, and the whole vector only
	// when the dialer asks (an exchange); protocol 2 sends the whole
	// vector at once and every SyncInterval on every connection: N
	// entries to each of N-1 dialers.
	exchanges bool
	// touched holds the ack owed for the records frames read since the
	// last ack: one ack for the frames that came in together.
	touched map[uint64]uint64
	done    chan struct{} // closed when the link ends: its goroutines stop
}

func newInbound(n *Node, c net.Conn, peer uint64, keys wire.Session) *inbound {
	in := &inbound{
		n: n, c: c, peer: peer, proto: keys.Proto,
		log:       n.log.With(zap.String("peer", fmt.Sprintf("%016x", peer))),
		w:         wire.NewWriter(c, keys.ListenerToDialer, n.cfg.PeerTimeout, &n.wireSent),
		exchanges: keys.Proto >= 3,
		touched:   map[uint64]uint64{},
		done:      make(chan struct{}),
	}
	// No read deadline on this side: the dialer sends only when it has
	// records, pulls or an exchange, and closes the connection when idle.
	// A stopped dialer is let go when membership drops it (SetPeers) or a
	// write to it times out.
	in.fr = wire.NewReader(c, keys.DialerToListener, 0, &n.wireReceived)
	return in
}

// send writes one frame; a failed write closes the connection, which ends
// the frame loop's read too.
func (in *inbound) send(typ byte, p []byte) error {
	in.wmu.Lock()
	defer in.wmu.Unlock()
	err := in.w.WriteFrame(typ, p)
	in.stalled(err)
	if err != nil {
		in.c.Close()
	}
	return err
}

// stalled logs a write that timed out on a peer that stopped reading.
func (in *inbound) stalled(err error) {
	if in.n.stalled(err) {
		in.log.Warn("closing a data connection: the peer stopped reading", zap.Duration("timeout", in.n.cfg.PeerTimeout))
	}
}

// bad counts and logs a frame that ends the link, and returns err.
func (in *inbound) bad(what string, err error) error {
	in.n.badFrames.Add(1)
	in.log.Warn("closing a data connection on "+what, zap.Error(err))
	return err
}

// vector is the periodic ack: the whole vector for protocol 2, nil (a
// keepalive) from 3 on.
func (in *inbound) vector() []byte {
	if in.exchanges {
		return nil
	}
	return in.n.ackFrame(in.n.st.Vector())
}

// run sends the first ack, starts the keepalive and reads frames until the
// connection ends or a frame is bad.
func (in *inbound) run() {
	first := in.vector()
	if in.exchanges {
		first = in.n.ackFrame(map[uint64]uint64{in.peer: in.n.st.LastSeq(in.peer)})
	}
	if err := in.send(wire.FrameAck, first); err != nil {
		return
	}
	in.n.wg.Add(1)
	go in.keepalive()
	for {
		typ, p, err := in.fr.Next()
		if err != nil {
			if errors.Is(err, wire.ErrBadFrame) {
				in.bad("a bad frame", err)
			}
			return
		}
		if typ != wire.FrameRecords && len(in.touched) > 0 {
			// The ack held back for the records frames before this one.
			if err := in.ack(); err != nil {
				return
			}
		}
		if err := in.handle(typ, p); err != nil {
			return
		}
	}
}

// handle answers one frame; an error ends the link.
func (in *inbound) handle(typ byte, p []byte) error {
	switch typ {
	case wire.FrameRecords:
		return in.records(p)
	case wire.FramePull:
		return in.pull(p)
	case wire.FrameSnapReq:
		return in.snapshot()
	case wire.FrameVector:
		return in.exchange(p)
	case wire.FrameSums, wire.FrameEntries:
		// A step of a digest exchange the peer started (package digest).
		out, err := in.n.digestAnswer(in.n.linkTo(in.peer), typ, p, in.proto)
		if err != nil {
			return in.bad("a bad digest frame", err)
		}
		return in.n.sendDigest(out, in.send)
	case wire.FrameRetired:
		v, err := in.n.readAck(p)
		if err != nil {
			return in.bad("a bad retired list", err)
		}
		in.n.adoptRetired(v)
		in.n.learned(in.peer, v)
		return nil
	default:
		return in.bad("an unexpected frame", fmt.Errorf("frame type %d", typ))
	}
}

// keepalive sends the periodic ack every SyncInterval until the link ends.
// Not on every change: under NATS every node's store changes with
// everyone's records, and a vector to every peer on each change costs
// O(nodes²) per node.
func (in *inbound) keepalive() {
	defer in.n.wg.Done()
	t := time.NewTicker(in.n.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-in.done:
			return
		case <-in.n.ctx.Done():
			return
		case <-t.C:
		}
		p := in.vector()
		if p == nil {
			p = wire.EncodeAck(nil)
		}
		if err := in.send(wire.FrameAck, p); err != nil {
			return
		}
	}
}

// ack sends the ack owed for the records frames read since the last one.
func (in *inbound) ack() error {
	err := in.send(wire.FrameAck, in.n.ackFrame(in.touched))
	clear(in.touched)
	return err
}

// records appends a records frame the dialer pushed, and acks it unless
// the next frame is here whole already: one ack for the records frames
// that came in together.
func (in *inbound) records(p []byte) error {
	from := in.n.treeLink(in.peer)
	if err := in.n.appendAll(p, in.touched, false, wire.MaxRecordVersion(in.proto), from); err != nil {
		return in.bad("bad records", err)
	}
	if from != nil {
		from.pullIfAhead(in.touched)
	}
	if in.fr.Waiting() {
		return nil
	}
	return in.ack()
}

// pull answers the dialer's pull with the records it asked for and the
// pull's end.
func (in *inbound) pull(p []byte) error {
	req, err := wire.DecodePull(p)
	if err != nil {
		return in.bad("a bad pull", err)
	}
	in.wmu.Lock()
	end, held, err := in.n.servePull(in.w, req, wire.MaxRecordVersion(in.proto))
	if err == nil && !held {
		err = in.w.WriteFrame(wire.FramePullEnd, end)
	}
	in.wmu.Unlock()
	if held {
		// What the peer asked for goes on with a record its protocol
		// cannot carry. An older build asks again as soon as this pull
		// ends: end it a SyncInterval later, so that the asking stays
		// that slow.
		in.n.wg.Add(1)
		go in.endPullLater(end)
	}
	in.stalled(err)
	return err
}

// endPullLater sends a held pull's end a SyncInterval from now, unless the
// link or the node ends first.
func (in *inbound) endPullLater(end []byte) {
	defer in.n.wg.Done()
	t := time.NewTimer(in.n.cfg.SyncInterval)
	defer t.Stop()
	select {
	case <-t.C:
		in.send(wire.FramePullEnd, end)
	case <-in.done:
	case <-in.n.ctx.Done():
	}
}

// snapshot streams this node's view snapshot to a fresh dialer.
func (in *inbound) snapshot() error {
	in.wmu.Lock()
	err := in.n.serveSnapshot(in.w, in.proto)
	in.wmu.Unlock()
	if err != nil {
		in.n.stalled(err)
		in.log.Warn("sending a snapshot failed", zap.Error(err))
	}
	return err
}

// exchange answers a vector exchange: learn what the dialer holds (this
// node's own link to it pulls what it lacks) and answer with this node's
// vector, and its retired list when the two retired sets differ.
func (in *inbound) exchange(p []byte) error {
	theirs, err := in.n.readVector(p)
	if err != nil {
		return in.bad("a bad vector", err)
	}
	in.n.learned(in.peer, theirs.Live)
	mine, retired := in.n.vectorToSend()
	if err := in.send(wire.FrameVector, in.n.vectorFrame(mine)); err != nil {
		return err
	}
	if !mine.SameRetired(theirs) {
		return in.send(wire.FrameRetired, in.n.ackFrame(retired))
	}
	return nil
}
