package broadcast

import (
	"context"
	"errors"
	"io"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/digest"
	"github.com/cachecast/cachecast/broadcast/internal/originset"
	"github.com/cachecast/cachecast/broadcast/wire"
)

// A link is this node's outbound connection to one peer, opened when
// there is something to send (records to push, a pull, an exchange, or
// the peer is the replica), closed after IdleTimeout with nothing to do,
// and redialed with backoff after a failure while still needed. Each
// connection is a session (session.go): its writer pushes this node's
// records, the pull requests and the exchanges' frames; its reader takes
// the peer's acks, exchange answers and the records it pulled. The link
// holds what outlasts a connection: what the peer holds, the pulls in
// flight, the exchange and the snapshot asked for.
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
		healthy, err := l.connect()
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

// releasePulls forgets this link's pulls in flight. Called with mu held.
func (l *link) releasePulls() {
	for o := range l.pulling {
		l.n.pullDone(o)
	}
	clear(l.pulling)
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
