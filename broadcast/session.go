package broadcast

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/wire"
)

// A session is one connection of a link, from its dial to its end (it
// failed, went idle, or the link stopped). Its writer (writeLoop, on the
// link's goroutine) pushes records and sends the pulls and the
// exchanges' frames; its reader (readLoop, a goroutine of its own) takes
// what the peer sends, each frame type by a method of its own. What
// lasts from one connection to the next (what the peer holds, the pulls
// in flight, a snapshot on its way) is the link's.
type session struct {
	l     *link
	proto uint8 // the connection's protocol version
	// talked: a frame came in after the first ack: the connection worked.
	talked atomic.Bool
	// ackPending: acks came in and afterAck has not looked at them yet.
	// It looks once for the acks that came in together (it copies this
	// node's vector), before the reader waits on the peer. The reader's.
	ackPending bool
}

// connect runs one session with the peer. healthy says the connection
// worked: past the handshake and the first ack, the peer sent more.
func (l *link) connect() (healthy bool, err error) {
	ctx, cancel := context.WithCancel(l.n.ctx)
	defer cancel()
	go func() {
		select {
		case <-l.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := l.dial(ctx)
	if err != nil {
		return false, err
	}
	defer l.n.openOut.Add(-1)
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()

	keys, err := l.handshake(c)
	if err != nil {
		return false, err
	}
	s := &session{l: l, proto: keys.Proto}
	// The peer sends an ack every SyncInterval: a read that waits longer
	// than PeerTimeout means it is stopped or gone.
	fr := wire.NewReader(c, keys.ListenerToDialer, l.n.cfg.PeerTimeout, &l.n.wireReceived)
	if err := s.firstAck(fr); err != nil {
		return false, err
	}
	readErr := make(chan error, 1)
	go func() {
		err := s.readLoop(fr)
		cancel() // a dead connection ends the session: the writer must not wait on it
		readErr <- err
	}()
	w := wire.NewWriter(c, keys.DialerToListener, l.n.cfg.PeerTimeout, &l.n.wireSent)
	werr := s.writeLoop(ctx, w)
	cancel()
	rerr := <-readErr
	// A reader that waited past PeerTimeout closed the connection under
	// the writer: the stall is the cause, whatever the writer then saw.
	if werr != nil && !errors.Is(werr, context.Canceled) && !errors.Is(rerr, os.ErrDeadlineExceeded) {
		return s.talked.Load() || errors.Is(werr, errIdle), werr
	}
	return s.talked.Load(), rerr
}

// dial opens the connection to the peer, with TLS when the node has it; a
// connection it returns is counted open (Node.openOut) until the caller
// takes it back.
func (l *link) dial(ctx context.Context) (net.Conn, error) {
	dctx, dcancel := context.WithTimeout(ctx, l.n.cfg.HandshakeTimeout)
	c, err := l.n.cfg.Dial(dctx, l.peer.Addr)
	dcancel()
	if err != nil {
		return nil, err
	}
	l.n.dials.Add(1)
	if l.n.cfg.TLS != nil {
		tc := tls.Client(c, l.n.cfg.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("tls: %w", err)
		}
		c = tc
	}
	l.n.openOut.Add(1)
	return c, nil
}

// handshake runs the dialer's side of the handshake on c and checks that
// the peer is the node membership says is at its address.
func (l *link) handshake(c net.Conn) (wire.Session, error) {
	id, keys, err := wire.DialHandshake(c, l.n.self, l.n.currentKeys(), l.n.protos, l.n.cfg.HandshakeTimeout)
	if err != nil {
		l.n.rejected.Add(1)
		l.log.Warn("data handshake failed", zap.Error(err))
		return keys, err
	}
	if id != l.peer.ID {
		return keys, fmt.Errorf("%w: %s is node %016x, membership says %016x", wire.ErrHandshake, l.peer.Addr, id, l.peer.ID)
	}
	l.proto.Store(uint32(keys.Proto))
	if keys.Proto >= ProtocolTimed {
		l.heldBack.Store(0) // upgraded: it reads everything
	}
	l.n.wireSent.Add(wire.HandshakeBytes)
	l.n.wireReceived.Add(wire.HandshakeBytes)
	return keys, nil
}

// firstAck reads the session's first frame, an ack: the peer's whole
// vector (protocol 2), or the seq it holds of this node's origin (3): it
// says where to start pushing. Then the link is open.
func (s *session) firstAck(fr *wire.Reader) error {
	l := s.l
	typ, p, err := fr.Next()
	if err != nil {
		return err
	}
	if typ != wire.FrameAck {
		return fmt.Errorf("%w: first frame of type %d", wire.ErrBadFrame, typ)
	}
	v, err := l.n.readAck(p)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if s.proto < 3 {
		l.holds = v
		l.wantExchange = false // the whole vector came: that was the exchange
		clear(l.seen)          // holds is new: its marks are gone
		l.seenEpoch++
		for o := range v {
			l.check[o] = true
		}
	} else {
		// A restarted peer may hold less of this node's records than it
		// acknowledged before; the rest stays as last reported.
		l.holds[l.n.self] = v[l.n.self]
		l.check[l.n.self] = true
	}
	l.releasePulls() // pulls of an earlier connection are gone with it
	l.pulls = l.pulls[:0]
	l.endSnap()
	l.mu.Unlock()
	l.dropSnap()
	l.open.Store(true)
	l.reachable.Store(true)
	l.touch()
	l.afterAck()
	return nil
}

// writeLoop pushes this node's records as they are written and sends the
// pull requests and the exchanges' frames, until the connection fails,
// goes idle or the link stops.
func (s *session) writeLoop(ctx context.Context, w *wire.Writer) error {
	l := s.l
	f := &pushFrame{l: l, w: w}
	l.mu.Lock()
	next := l.holds[l.n.self] + 1 // where the peer said it stands
	l.mu.Unlock()
	idleCheck := time.NewTicker(max(l.n.cfg.IdleTimeout/4, time.Millisecond))
	defer idleCheck.Stop()
	for {
		// Only this node's own records are pushed: other origins' records
		// arriving must not wake every link's writer.
		changed := l.n.st.OwnChanged()
		t := l.takeTurn(s.proto, next)
		if err := s.writeRequests(w, t); err != nil {
			return err
		}
		if !t.push {
			changed = nil // nothing to push to this peer: wake on kicks only
		}
		var err error
		if next, err = l.pushOwn(f, t.next, s.proto, t.push); err != nil {
			return err
		}
		if err := l.relayDirty(f, s.proto); err != nil {
			return err
		}
		if err := f.flush(); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-l.kick:
		case <-idleCheck.C:
			if l.idle() {
				return errIdle
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// writeRequests writes what a writer's turn asks of the peer: a
// snapshot, the exchange's frames, the pulls.
func (s *session) writeRequests(w *wire.Writer, t turn) error {
	l := s.l
	if t.wantSnap {
		if err := w.WriteFrame(wire.FrameSnapReq, nil); err != nil {
			return err
		}
		l.touch()
	}
	if err := l.writeExchange(w, s.proto, t.exchange, t.sendRetired); err != nil {
		return err
	}
	for _, r := range t.pulls {
		if err := w.WriteFrame(wire.FramePull, wire.EncodePull(r)); err != nil {
			return err
		}
		l.n.pulls.Add(1)
		l.touch()
	}
	return nil
}

// readLoop takes the frames the peer sends until the connection ends or
// a frame is bad; it sets talked once a frame has come in.
func (s *session) readLoop(fr *wire.Reader) error {
	for {
		if s.ackPending && !fr.Waiting() {
			s.l.afterAck()
			s.ackPending = false
		}
		typ, p, err := fr.Next()
		if err != nil {
			if errors.Is(err, wire.ErrBadFrame) {
				s.l.n.badFrames.Add(1)
				s.l.log.Warn("closing a data link on a bad frame", zap.Error(err))
			}
			return err
		}
		s.talked.Store(true)
		if err := s.handle(typ, p); err != nil {
			return err
		}
	}
}

// handle takes one frame the peer sent; an error ends the session.
func (s *session) handle(typ byte, p []byte) error {
	switch typ {
	case wire.FrameAck:
		return s.ack(p)
	case wire.FrameVector:
		return s.vector(p)
	case wire.FrameSums, wire.FrameEntries:
		return s.digest(typ, p)
	case wire.FrameRetired:
		return s.retired(p)
	case wire.FrameRecords:
		return s.records(p)
	case wire.FramePullEnd:
		return s.pullEnd(p)
	case wire.FrameSnapData:
		s.l.touch()
		return s.l.snapWrite(p)
	case wire.FrameSnapEnd:
		if err := s.l.bootstrap(); err != nil {
			return err
		}
		s.l.afterAck()
		return nil
	default:
		return s.bad(fmt.Errorf("%w: unexpected type %d", wire.ErrBadFrame, typ))
	}
}

// bad counts a frame that ends the session, and returns err.
func (s *session) bad(err error) error {
	s.l.n.badFrames.Add(1)
	return err
}

// ack takes an ack: what the peer holds now. The loop looks at the acks
// that came in together once they are read (ackPending).
func (s *session) ack(p []byte) error {
	v, err := s.l.n.readAck(p)
	if err != nil {
		return s.bad(err)
	}
	s.l.merge(v) // a restarted peer opens a new session
	s.ackPending = true
	return nil
}

// vector takes the peer's answer to this node's exchange of whole
// vectors (protocols 3 and 4): its vector, and whether its retired list
// is the same as this node's.
func (s *session) vector(p []byte) error {
	l := s.l
	theirs, err := l.n.readVector(p)
	if err != nil {
		return s.bad(err)
	}
	l.touch()
	l.merge(theirs.Live)
	mine, retired := l.n.vectorToSend()
	same := mine.SameRetired(theirs)
	l.mu.Lock()
	if same {
		l.retiredHolds = retired // the same origins at the same seqs
	} else {
		l.sendRetired = true
	}
	l.mu.Unlock()
	if !same {
		l.wake()
	}
	l.afterAck()
	return nil
}

// digest takes a step of this node's digest exchange (package digest)
// and queues the frames that answer it for the writer.
func (s *session) digest(typ byte, p []byte) error {
	s.l.touch()
	out, err := s.l.n.digestAnswer(s.l, typ, p, s.proto)
	if err != nil {
		return s.bad(err)
	}
	s.l.queueDigest(out)
	return nil
}

// retired takes the peer's retired list: what it holds of the origins it
// retired, which this node retires too unless they are its peers.
func (s *session) retired(p []byte) error {
	l := s.l
	v, err := l.n.readAck(p)
	if err != nil {
		return s.bad(err)
	}
	l.touch()
	l.n.adoptRetired(v)
	l.merge(v)
	l.mu.Lock()
	l.retiredHolds = v
	l.mu.Unlock()
	l.afterAck()
	return nil
}

// records appends the records the peer sent for a pull.
func (s *session) records(p []byte) error {
	s.l.touch()
	touched := map[uint64]uint64{}
	if err := s.l.n.appendAll(p, touched, true, wire.MaxRecordVersion(s.proto), s.l.heardFrom()); err != nil {
		return s.bad(err)
	}
	return nil
}

// pullEnd takes the end of a pull: done, or the peer recycled what this
// node lacks and a snapshot is asked for instead.
func (s *session) pullEnd(p []byte) error {
	l := s.l
	l.touch()
	e, err := wire.DecodePullEnd(p)
	if err != nil {
		return s.bad(err)
	}
	l.mu.Lock()
	if e.Status == wire.PullRecycled && l.startSnap() {
		l.log.Info("peer has recycled records this node lacks: asking for its snapshot",
			zap.String("origin", fmt.Sprintf("%016x", e.Origin)), zap.Uint64("seq", e.Next))
		l.mu.Unlock()
		l.wake()
		return nil // pulls resume after the bootstrap
	}
	delete(l.pulling, e.Origin)
	l.n.pullDone(e.Origin)
	l.mu.Unlock()
	l.afterAck() // still behind? ask again
	return nil
}
