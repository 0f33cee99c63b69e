package broadcast

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/digest"
	"github.com/cachecast/cachecast/broadcast/internal/originset"
	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/store"
)

// A link is this node's outbound connection to one peer, opened when
// there is something to send (records to push, a pull, an exchange, or
// the peer is the replica), closed after IdleTimeout with nothing to do,
// and redialed with backoff after a failure while still needed. Its
// writer goroutine pushes this node's records, the pull requests and the
// exchanges' vectors; its reader goroutine takes the peer's acks, vectors
// and the records it pulled.
type link struct {
	n    *Node
	peer Peer
	log  *zap.Logger

	open      atomic.Bool   // a connection is open now
	reachable atomic.Bool   // the last connection worked, and no dial failed since
	proto     atomic.Uint32 // the protocol version of the last connection
	heldBack  atomic.Uint64 // the first own seq too new for the peer's protocol (0: none)
	retryIn   atomic.Int64  // the wait before the latest redial (time.Duration)
	active    atomic.Int64  // when the connection last did something (unix ns)
	pushedAt  atomic.Int64  // when the open connection last pushed records (unix ns; 0: not yet)
	tree      atomic.Bool   // the peer is a neighbour on the relay tree (see relayed)

	mu    sync.Mutex
	holds map[uint64]uint64 // the peer's vector, as it reported it
	// check are the origins merged into holds since afterAck last
	// looked, ahead those the peer held more of than this node then:
	// afterAck looks at those only, not at every origin.
	check, ahead map[uint64]bool
	aheadPeak    int // (compacted)
	// seen is, per set of the digest index's sums (digest.Step.sums), the
	// change up to which holds has every entry of them (the root's sums
	// were equal then): a later exchange merges only what changed since.
	seen      map[uint64]uint64
	seenEpoch uint64          // counts the times holds was replaced (seen cleared)
	pulling   map[uint64]bool // origins with a pull in flight on this link
	pulls     []wire.PullReq  // pull requests waiting to be written
	ackCh     chan struct{}   // closed and replaced when holds grows
	// retiredHolds is what the peer holds of the retired origins, as of
	// the last exchange: its retired list, or this node's own when the
	// two retired digests matched.
	retiredHolds map[uint64]uint64

	wantExchange bool // an exchange's vector waits to be written
	sendRetired  bool // this node's retired list waits to be written

	// digestOut: frames of a digest exchange wait to be written.
	digestOut []digest.Frame

	// holding: the peer lacks more than BootstrapRecords of this node's
	// records, so the writer pushes none until it holds more (writeLoop).
	holding bool

	// To a neighbour on the relay tree (tree, Config.Tree) the writer
	// pushes every origin's records it lacks (relayDirty), not only this
	// node's. relayed is, per other origin, the highest seq pushed to it
	// or known to be held there; dirty the origins with records it may
	// lack; sentHere the highest seq of each origin the peer pushed here.
	relayed  map[uint64]uint64
	dirty    map[uint64]bool
	sentHere map[uint64]uint64
	// unacked is, per origin relayed since the last connection began,
	// the first seq pushed (rewindRelay).
	unacked map[uint64]uint64

	wantSnap bool // a snapshot request waits to be written
	snapping bool // a snapshot is on its way (this link holds Node.booting)
	// snapIn is where the snapshot being received goes: a pipe to the
	// store's Bootstrap, which applies it on a goroutine of its own as it
	// arrives and hands its result to snapDone. Only the reader goroutine
	// touches them, outside mu.
	snapIn   *io.PipeWriter
	snapDone chan snapResult
	// snapBegan and snapBytes time and count the snapshot being received.
	snapBegan time.Time
	snapBytes int64

	kick    chan struct{} // wakes the writer
	stopped chan struct{}

	stopOnce sync.Once
}

func newLink(n *Node, p Peer) *link {
	return &link{
		n:        n,
		peer:     p,
		log:      n.log.With(zap.String("peer", p.Name), zap.String("peer-addr", p.Addr)),
		holds:    map[uint64]uint64{},
		check:    map[uint64]bool{},
		ahead:    map[uint64]bool{},
		seen:     map[uint64]uint64{},
		pulling:  map[uint64]bool{},
		relayed:  map[uint64]uint64{},
		dirty:    map[uint64]bool{},
		sentHere: map[uint64]uint64{},
		unacked:  map[uint64]uint64{},
		ackCh:    make(chan struct{}),
		kick:     make(chan struct{}, 1),
		stopped:  make(chan struct{}),
	}
}

func (l *link) stop() { l.stopOnce.Do(func() { close(l.stopped) }) }

func (l *link) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// errIdle ends a connection that had nothing to do for IdleTimeout.
var errIdle = errors.New("broadcast: connection idle")

// run waits until the link has something to do, dials, serves the
// connection until it fails or goes idle, and again.
func (l *link) run() {
	defer l.n.wg.Done()
	defer func() {
		l.mu.Lock()
		l.endSnap()
		l.releasePulls()
		l.mu.Unlock()
		l.dropSnap()
	}()
	backoff := l.n.minBackoff
	for {
		if !l.waitNeeded() {
			return
		}
		healthy, err := l.session()
		l.open.Store(false)
		l.pushedAt.Store(0)
		l.rewindRelay()
		select {
		case <-l.stopped:
			return
		case <-l.n.ctx.Done():
			return
		default:
		}
		if errors.Is(err, errIdle) {
			l.n.idleCloses.Add(1)
			backoff = l.n.minBackoff
			continue
		}
		l.reachable.Store(false)
		l.mu.Lock()
		// Pulls queued for this connection go to whichever link reaches
		// a peer that has the records, at the next exchange; the exchange
		// is given up, so that the next round picks another peer.
		l.releasePulls()
		l.pulls = l.pulls[:0]
		l.wantExchange = false
		l.endSnap() // another link may take a snapshot meanwhile
		l.mu.Unlock()
		l.dropSnap()
		if healthy {
			// The peer was up and talking: this is a new failure, not the
			// same one again, so the redial starts from the shortest wait.
			backoff = l.n.minBackoff
		}
		l.retryIn.Store(int64(backoff))
		if l.n.stalled(err) {
			l.log.Warn("data link down: the peer stopped reading or went silent",
				zap.Duration("timeout", l.n.cfg.PeerTimeout), zap.Duration("retry-in", backoff))
		} else if err != nil {
			l.log.Debug("data link down", zap.Error(err), zap.Duration("retry-in", backoff))
		}
		select {
		case <-time.After(backoff):
		case <-l.stopped:
			return
		case <-l.n.ctx.Done():
			return
		}
		backoff = min(backoff*2, l.n.maxBackoff)
	}
}

// pushes says whether this node pushes its own records to the peer: to
// every peer with the direct fan-out, to the tree neighbours and the
// replica with the relay tree, to the replica only under NATS.
func (l *link) pushes() bool {
	if l.n.replica.Load() == l.peer.ID {
		return true
	}
	if l.n.treeOn.Load() {
		return l.tree.Load()
	}
	return l.n.nats == nil
}

// needed says whether the link has something to do: it is the replica's,
// or it has an exchange, a pull or a snapshot to ask for or wait on, or
// records to push that the peer has not acknowledged.
func (l *link) needed() bool {
	if l.n.replica.Load() == l.peer.ID {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wantExchange || l.sendRetired || l.wantSnap || l.snapping || len(l.pulls) > 0 || len(l.pulling) > 0 || len(l.dirty) > 0 {
		return true
	}
	return l.pushes() && l.n.st.LogLast(l.n.self) > l.holds[l.n.self]
}

// waitNeeded waits until the link is needed; false when it stopped first.
func (l *link) waitNeeded() bool {
	for {
		var changed <-chan struct{}
		if l.pushes() {
			changed = l.n.st.OwnChanged()
		}
		if l.needed() {
			return true
		}
		select {
		case <-changed:
		case <-l.kick:
		case <-l.stopped:
			return false
		case <-l.n.ctx.Done():
			return false
		}
	}
}

// exchange asks the link for an anti-entropy exchange; false when one is
// waiting already.
func (l *link) exchange() bool {
	l.mu.Lock()
	if l.wantExchange {
		l.mu.Unlock()
		return false
	}
	l.wantExchange = true
	l.mu.Unlock()
	l.wake()
	return true
}

// exchangePending says whether an exchange waits to be sent.
func (l *link) exchangePending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wantExchange
}

// heardFrom is the link to note the peer's records on (heard) as they
// come in, while the relay tree is in use; nil otherwise (a switch to
// the tree starts each neighbour past what this node stores: setTree).
func (l *link) heardFrom() *link {
	if l.n.treeOn.Load() {
		return l
	}
	return nil
}

func (l *link) touch() { l.active.Store(time.Now().UnixNano()) }

// idle says whether the open connection has had nothing to do for
// IdleTimeout and has nothing to do now.
func (l *link) idle() bool {
	return time.Since(time.Unix(0, l.active.Load())) >= l.n.cfg.IdleTimeout && !l.needed()
}

// merge takes entries of the peer's vector (the highest of each).
func (l *link) merge(v map[uint64]uint64) {
	l.mu.Lock()
	resume := l.mergeLocked(v)
	l.mu.Unlock()
	if resume {
		l.wake() // the held writer looks again at what the peer holds
	}
}

// mergeLocked is merge under mu; it says whether the held writer should
// look again.
func (l *link) mergeLocked(v map[uint64]uint64) bool {
	resume := l.holding && v[l.n.self] > l.holds[l.n.self]
	for o, s := range v {
		l.holds[o] = max(l.holds[o], s)
		l.check[o] = true // held less here since? (afterAck)
	}
	return resume
}

// seenMarks is a copy of seen, for the digest index, and the holds it
// is for (seenEpoch).
func (l *link) seenMarks() (map[uint64]uint64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.seen), l.seenEpoch
}

// seenKeep bounds the marks a link keeps: the live vector's sums and
// the kept cuts', with room for those rebuilt meanwhile.
const seenKeep = 2 * (digest.CutKeep + 1)

// mergeDigest merges what a step of a digest exchange learned, and notes
// (seen) when it learned the whole of a set of sums.
func (l *link) mergeDigest(st digest.Step, epoch uint64) {
	l.mu.Lock()
	resume := l.mergeLocked(st.Learned)
	if st.Whole && st.Gen > l.seen[st.Sums] && epoch == l.seenEpoch {
		l.seen[st.Sums] = st.Gen
		for len(l.seen) > seenKeep {
			oldest := st.Sums
			for id := range l.seen {
				oldest = min(oldest, id)
			}
			delete(l.seen, oldest)
		}
	}
	l.mu.Unlock()
	if resume {
		l.wake()
	}
}

// session runs one connection to the peer. healthy says the connection
// worked: past the handshake and the first vector, the peer sent more.
func (l *link) session() (healthy bool, err error) {
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

	id, keys, err := wire.DialHandshake(c, l.n.self, l.n.currentKeys(), l.n.protos, l.n.cfg.HandshakeTimeout)
	if err != nil {
		l.n.rejected.Add(1)
		l.log.Warn("data handshake failed", zap.Error(err))
		return false, err
	}
	if id != l.peer.ID {
		return false, fmt.Errorf("%w: %s is node %016x, membership says %016x", wire.ErrHandshake, l.peer.Addr, id, l.peer.ID)
	}
	l.proto.Store(uint32(keys.Proto))
	if keys.Proto >= ProtocolTimed {
		l.heldBack.Store(0) // upgraded: it reads everything
	}
	l.n.wireSent.Add(wire.HandshakeBytes)
	l.n.wireReceived.Add(wire.HandshakeBytes)

	// The peer sends an ack every SyncInterval: a read that waits longer
	// than PeerTimeout means it is stopped or gone.
	fr := wire.NewReader(c, keys.ListenerToDialer, l.n.cfg.PeerTimeout, &l.n.wireReceived)
	if err := l.firstAck(fr, keys.Proto); err != nil {
		return false, err
	}

	var talked atomic.Bool // a frame came in after the first vector
	readErr := make(chan error, 1)
	go func() {
		err := l.readLoop(fr, &talked, keys.Proto)
		cancel() // a dead connection ends the session: the writer must not wait on it
		readErr <- err
	}()
	w := wire.NewWriter(c, keys.DialerToListener, l.n.cfg.PeerTimeout, &l.n.wireSent)
	werr := l.writeLoop(ctx, w, keys.Proto)
	cancel()
	rerr := <-readErr
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return talked.Load() || errors.Is(werr, errIdle), werr
	}
	return talked.Load(), rerr
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

// firstAck reads the session's first frame, an ack: the peer's whole
// vector (protocol 2), or the seq it holds of this node's origin (3): it
// says where to start pushing. Then the link is open.
func (l *link) firstAck(fr *wire.Reader, proto uint8) error {
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
	if proto < 3 {
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
// pull requests and the exchanges' vectors, until the connection fails,
// goes idle or the link stops.
func (l *link) writeLoop(ctx context.Context, w *wire.Writer, proto uint8) error {
	f := &pushFrame{l: l, w: w}
	self := l.n.self
	l.mu.Lock()
	next := l.holds[self] + 1 // where the peer said it stands
	l.mu.Unlock()
	idleCheck := time.NewTicker(max(l.n.cfg.IdleTimeout/4, time.Millisecond))
	defer idleCheck.Stop()
	for {
		// Only this node's own records are pushed: other origins' records
		// arriving must not wake every link's writer.
		changed := l.n.st.OwnChanged()
		t := l.takeTurn(proto, next)
		next = t.next
		if t.wantSnap {
			if err := w.WriteFrame(wire.FrameSnapReq, nil); err != nil {
				return err
			}
			l.touch()
		}
		if err := l.writeExchange(w, proto, t.exchange, t.sendRetired); err != nil {
			return err
		}
		for _, r := range t.pulls {
			if err := w.WriteFrame(wire.FramePull, wire.EncodePull(r)); err != nil {
				return err
			}
			l.n.pulls.Add(1)
			l.touch()
		}
		if !t.push {
			changed = nil // nothing to push to this peer: wake on kicks only
		}
		var err error
		if next, err = l.pushOwn(f, next, proto, t.push); err != nil {
			return err
		}
		if err := l.relayDirty(f, proto); err != nil {
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

// turn is what a writer's turn has to send, taken from the link under its
// lock at the turn's start.
type turn struct {
	pulls                           []wire.PullReq
	wantSnap, exchange, sendRetired bool
	push                            bool   // push this node's own records to the peer
	next                            uint64 // the first own seq the peer lacks
}

// takeTurn takes what the writer's turn sends on a connection of protocol
// proto, next being where its pushes stand.
func (l *link) takeTurn(proto uint8, next uint64) turn {
	self := l.n.self
	l.mu.Lock()
	defer l.mu.Unlock()
	t := turn{
		pulls:       append([]wire.PullReq(nil), l.pulls...),
		wantSnap:    l.wantSnap,
		exchange:    l.wantExchange && proto >= 3,
		sendRetired: l.sendRetired && proto >= 3,
	}
	l.pulls = l.pulls[:0]
	l.wantSnap, l.wantExchange, l.sendRetired = false, false, false
	// A peer that bootstrapped from a snapshot holds more than was
	// pushed to it: go on from what it holds.
	t.next = max(next, l.holds[self]+1)
	// Under NATS only the replica is pushed to. A peer that lacks
	// more than BootstrapRecords of this node's records chooses, on
	// its own vector, between a snapshot and pulls (wantsSnapshot);
	// until it holds all but BootstrapRecords of them, whichever it
	// chose, nothing is pushed to it. The choice is not guessed here
	// from the peer's vector as last learned: that may be old, or
	// torn by the bootstrap in progress (it moves the origins on one
	// at a time), and a peer seen holding as much as it lacked was
	// pushed every record while it took the snapshot.
	push := l.pushes()
	last := l.n.st.LogLast(self)
	l.holding = push && last >= t.next && last-t.next+1 > l.n.cfg.BootstrapRecords
	t.push = push && !l.holding
	return t
}

// pushOwn gathers into f what the peer lacks of this node's own records
// from seq next on (when push), and returns the seq it goes on from.
// f is flushed whenever full, so all of them go out in frames of up to
// batchRecords records and frameBytes bytes: one write (and one ack back)
// a turn for whatever is new, of every origin (relayDirty adds the other
// origins' on the relay tree). Up to the log's end, not LastSeq, and past
// an own record set aside as damaged (ErrLost): it must not hold the new
// ones back. A peer that holds it (or its placeholder: it lost it too)
// takes them; one that lacks it drops them (seqs go in order) and waits
// for it, as for any gap.
func (l *link) pushOwn(f *pushFrame, next uint64, proto uint8, push bool) (uint64, error) {
	self := l.n.self
	for push && next <= l.n.st.LogLast(self) {
		if err := f.flushIfFull(); err != nil {
			return next, err
		}
		mark := f.mark()
		end, err := f.read(self, next, proto)
		if errors.Is(err, store.ErrRecycled) {
			// The peer needs records this node no longer has: its own
			// pulls find that out and it bootstraps from a snapshot;
			// pushing resumes from what it then holds.
			f.undo(mark)
			break
		}
		lost, tooNew := errors.Is(err, store.ErrLost), errors.Is(err, errTooNew)
		if err != nil && !lost && !tooNew {
			return next, err
		}
		f.own += len(f.buf) - mark.bytes
		if len(f.recs) == mark.recs && !lost && !tooNew {
			break
		}
		next = end
		if tooNew {
			l.holdBack(end, proto)
			break
		}
		if lost {
			next++ // pushed past: see above
		}
	}
	return next, nil
}

// pushFrame gathers what a link's writer pushes in one turn, records of
// any origins, into frames of up to batchRecords records and frameBytes
// bytes. On the relay tree a node forwards many origins' records to each
// neighbour: a frame per origin would cost a write, and an ack back, for
// each of them.
type pushFrame struct {
	l    *link
	w    *wire.Writer
	buf  []byte
	recs [][]byte
	own  int // bytes of this node's own records in the frame (Node.BytesSent)
}

// frameMark is how far a frame was filled, to tell what a read added.
type frameMark struct{ bytes, recs int }

func (f *pushFrame) mark() frameMark { return frameMark{len(f.buf), len(f.recs)} }

// undo drops what was read since m.
func (f *pushFrame) undo(m frameMark) { f.buf, f.recs = f.buf[:m.bytes], f.recs[:m.recs] }

// read adds origin's records from seq from on, as many as the frame has
// room for (readBatch: end is the seq after the last one read).
func (f *pushFrame) read(origin, from uint64, proto uint8) (end uint64, err error) {
	f.buf, f.recs, end, err = readBatch(f.l.n.st, origin, from, batchRecords-len(f.recs), frameBytes, wire.MaxRecordVersion(proto), f.buf, f.recs)
	return end, err
}

// flushIfFull sends the frame when it has no room for another record.
func (f *pushFrame) flushIfFull() error {
	if len(f.recs) < batchRecords && len(f.buf) < frameBytes {
		return nil
	}
	return f.flush()
}

// flush sends the records gathered, if any, as one frame.
func (f *pushFrame) flush() error {
	if len(f.recs) == 0 {
		return nil
	}
	err := f.w.WriteRecords(f.recs)
	if err == nil {
		f.l.n.bytesSent.Add(uint64(f.own))
		f.l.n.pushFrames.Add(1)
		f.l.pushedNow()
		f.l.touch()
	}
	f.buf, f.recs, f.own = f.buf[:0], f.recs[:0], 0
	return err
}

// readLoop takes the peer's acks and the records it sends for pulls on a
// connection of protocol proto; it sets talked once a frame has come in.
func (l *link) readLoop(fr *wire.Reader, talked *atomic.Bool, proto uint8) error {
	// ackPending: acks came in and afterAck has not looked at them yet.
	// It looks once for the acks that came in together (it copies this
	// node's vector), before the reader waits on the peer.
	ackPending := false
	for {
		if ackPending && !fr.Waiting() {
			l.afterAck()
			ackPending = false
		}
		typ, p, err := fr.Next()
		if err == nil {
			talked.Store(true)
		}
		if err != nil {
			if errors.Is(err, wire.ErrBadFrame) {
				l.n.badFrames.Add(1)
				l.log.Warn("closing a data link on a bad frame", zap.Error(err))
			}
			return err
		}
		if err := l.handle(typ, p, proto, &ackPending); err != nil {
			return err
		}
	}
}

// handle takes one frame the peer sent on a connection of protocol proto;
// an error ends the session. An ack sets ackPending, for the loop to look
// at once the acks that came in together are read.
func (l *link) handle(typ byte, p []byte, proto uint8, ackPending *bool) error {
	switch typ {
	case wire.FrameAck:
		v, err := l.n.readAck(p)
		if err != nil {
			l.n.badFrames.Add(1)
			return err
		}
		l.merge(v) // a restarted peer opens a new session
		*ackPending = true
	case wire.FrameVector:
		return l.exchangeAnswer(p)
	case wire.FrameSums, wire.FrameEntries:
		// A step of this node's digest exchange (package digest).
		l.touch()
		out, err := l.n.digestAnswer(l, typ, p, proto)
		if err != nil {
			l.n.badFrames.Add(1)
			return err
		}
		l.queueDigest(out)
	case wire.FrameRetired:
		v, err := l.n.readAck(p)
		if err != nil {
			l.n.badFrames.Add(1)
			return err
		}
		l.touch()
		l.n.adoptRetired(v)
		l.merge(v)
		l.mu.Lock()
		l.retiredHolds = v
		l.mu.Unlock()
		l.afterAck()
	case wire.FrameRecords:
		l.touch()
		touched := map[uint64]uint64{}
		if err := l.n.appendAll(p, touched, true, wire.MaxRecordVersion(proto), l.heardFrom()); err != nil {
			l.n.badFrames.Add(1)
			return err
		}
	case wire.FramePullEnd:
		return l.pullEnd(p)
	case wire.FrameSnapData:
		l.touch()
		return l.snapWrite(p)
	case wire.FrameSnapEnd:
		if err := l.bootstrap(); err != nil {
			return err
		}
		l.afterAck()
	default:
		l.n.badFrames.Add(1)
		return fmt.Errorf("%w: unexpected type %d", wire.ErrBadFrame, typ)
	}
	return nil
}

// exchangeAnswer takes the peer's answer to this node's exchange: its
// vector, and whether its retired list is the same as this node's.
func (l *link) exchangeAnswer(p []byte) error {
	theirs, err := l.n.readVector(p)
	if err != nil {
		l.n.badFrames.Add(1)
		return err
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

// pullEnd takes the end of a pull: done, or the peer recycled what this
// node lacks and a snapshot is asked for instead.
func (l *link) pullEnd(p []byte) error {
	l.touch()
	e, err := wire.DecodePullEnd(p)
	if err != nil {
		l.n.badFrames.Add(1)
		return err
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

// snapResult is what the store's Bootstrap of a received snapshot did.
type snapResult struct {
	moved map[uint64]uint64
	err   error
}

// errSnapCut ends the stream of a snapshot whose connection went.
var errSnapCut = errors.New("broadcast: the connection went before the snapshot's end")

// snapWrite hands the bytes of a snapshot on its way to the store, which
// applies them as they arrive (the first bytes start its Bootstrap). It
// returns once the store has taken them in, so that receiving the next
// frame overlaps applying these.
func (l *link) snapWrite(p []byte) error {
	l.mu.Lock()
	ok := l.snapping
	l.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: snapshot data not asked for", wire.ErrBadFrame)
	}
	if l.snapIn == nil {
		pr, pw := io.Pipe()
		done := make(chan snapResult, 1)
		go func() {
			moved, err := l.n.st.Bootstrap(pr)
			pr.CloseWithError(err) // a refused snapshot stops the writes
			done <- snapResult{moved, err}
		}()
		l.snapIn, l.snapDone = pw, done
		l.snapBegan, l.snapBytes = time.Now(), 0
	}
	l.snapBytes += int64(len(p))
	if _, err := l.snapIn.Write(p); err != nil {
		l.snapIn = nil
		if res := <-l.snapDone; res.err != nil {
			err = res.err
		}
		return fmt.Errorf("bootstrap from %s: %w", l.peer.Name, err)
	}
	return nil
}

// bootstrap ends a complete snapshot's stream, waits for the store to
// have applied it and resumes pulling.
func (l *link) bootstrap() error {
	in, done := l.snapIn, l.snapDone
	l.snapIn = nil
	l.mu.Lock()
	ok := l.snapping
	l.releasePulls()
	l.mu.Unlock()
	if !ok || in == nil {
		if in != nil {
			in.CloseWithError(fmt.Errorf("%w: snapshot end not asked for", wire.ErrBadFrame))
			<-done
		}
		return fmt.Errorf("%w: snapshot end without a snapshot", wire.ErrBadFrame)
	}
	defer func() {
		l.mu.Lock()
		l.endSnap()
		l.mu.Unlock()
	}()
	received := time.Since(l.snapBegan)
	in.Close()
	res := <-done
	if res.err != nil {
		return fmt.Errorf("bootstrap from %s: %w", l.peer.Name, res.err)
	}
	l.n.boots.Add(1)
	l.log.Info("bootstrapped from the peer's snapshot", zap.Int("origins-moved", len(res.moved)),
		zap.Int64("bytes", l.snapBytes), zap.Duration("receive-took", received), zap.Duration("took", time.Since(l.snapBegan)))
	return nil
}

// startSnap makes this link the one taking a snapshot, unless it or
// another link already is. Called with mu held.
func (l *link) startSnap() bool {
	if l.snapping || !l.n.booting.CompareAndSwap(false, true) {
		return false
	}
	l.wantSnap, l.snapping = true, true
	return true
}

// endSnap ends this link's snapshot, if it was taking one. Called with
// mu held.
func (l *link) endSnap() {
	if l.snapping {
		l.n.booting.Store(false)
	}
	l.wantSnap, l.snapping = false, false
}

// releasePulls forgets this link's pulls in flight. Called with mu held.
func (l *link) releasePulls() {
	for o := range l.pulling {
		l.n.pullDone(o)
	}
	clear(l.pulling)
}

// dropSnap ends the stream of a half-received snapshot and waits for the
// store to give it up (no origin moves). Called by the link's goroutines
// when no reader runs.
func (l *link) dropSnap() {
	if l.snapIn != nil {
		l.snapIn.CloseWithError(errSnapCut)
		if res := <-l.snapDone; res.err != nil {
			l.log.Info("a snapshot cut off on its way was given up", zap.Error(res.err))
		}
		l.snapIn = nil
	}
}

// afterAck wakes replica waiters and asks for what the peer holds and
// this node lacks.
func (l *link) afterAck() {
	l.mu.Lock()
	close(l.ackCh)
	l.ackCh = make(chan struct{})
	if l.n.booting.Load() {
		l.mu.Unlock() // a snapshot is on its way: it brings what pulls would
		return
	}
	if _, pending := l.n.st.ViewFromPeer(); pending && l.startSnap() {
		l.log.Info("this node's view was lost at start (a damaged snapshot past a recycled log): asking for the peer's snapshot")
		l.mu.Unlock()
		l.wake()
		return
	}
	// Only the origins whose holds grew, and those the peer was ahead
	// of, can be ahead now (an origin this node loses a record of
	// differs at the next exchange, which merges it again).
	for o := range l.check {
		l.ahead[o] = true
	}
	l.check = originset.Drained(l.check)
	l.ahead = originset.Compacted(l.ahead, &l.aheadPeak)
	var lacks uint64
	for o := range l.ahead {
		theirs, mine := l.holds[o], l.n.st.LastSeq(o)
		if theirs <= mine {
			delete(l.ahead, o)
			continue
		}
		lacks += theirs - mine
	}
	if lacks > l.n.cfg.BootstrapRecords && l.n.wantsSnapshot(l.n.st.Vector(), l.holds) && l.startSnap() {
		l.log.Info("this node lacks most of what the peer holds: asking for its snapshot")
		l.mu.Unlock()
		l.wake()
		return
	}
	var want bool
	for o := range l.ahead {
		if l.pulling[o] {
			continue
		}
		if theirs, mine := l.holds[o], l.n.st.LastSeq(o); theirs > mine && l.n.mayPull(o) {
			l.pulls = append(l.pulls, wire.PullReq{Origin: o, From: mine + 1, To: min(theirs, mine+l.n.cfg.MaxPull)})
			l.pulling[o] = true
			want = true
		}
	}
	l.mu.Unlock()
	if want {
		l.wake()
	}
}

// waitAcked returns once the peer holds origin's seq.
func (l *link) waitAcked(ctx context.Context, origin, seq uint64) error {
	for {
		l.mu.Lock()
		ok := l.holds[origin] >= seq
		ch := l.ackCh
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.stopped:
			return ErrNoPeer
		}
	}
}

func (l *link) holdsCopy() map[uint64]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.holds)
}

// holdBack notes that the peer's connection (of protocol proto) cannot
// carry this node's record seq, of a newer record version: nothing of
// this node's own records from seq on is pushed to it (its origin must
// stay gap-free) until it runs a build that reads them. Logged once per
// seq held at.
func (l *link) holdBack(seq uint64, proto uint8) {
	if l.heldBack.Swap(seq) == seq {
		return
	}
	l.log.Warn("holding back records from a peer of an older protocol: it cannot read a record with time fields; upgrade it",
		zap.Uint64("from-seq", seq), zap.Uint8("peer-protocol", proto), zap.Uint8("needs-protocol", ProtocolTimed))
}
