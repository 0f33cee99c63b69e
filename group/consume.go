package group

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// Delivery is one message handed to a member.
type Delivery struct {
	// ID identifies the message for Ack.
	ID ID
	// Topic is the group's topic (also for a message replayed from the
	// dead-letter topic, whose record names the retry topic).
	Topic string
	// Queue is the message's queue.
	Queue int
	// Attempt is 1 at the first delivery, n at the (n-1)th retry.
	Attempt int
	// Offset is the message's offset on this node, in the group's topic
	// or, for a replayed one, in its retry topic.
	Offset uint64
	// Record is the message.
	Record record.Record
}

// Member is one consumer of a group on this node: a subscription stream.
type Member struct {
	// ID is unique on this node.
	ID uint64

	owner string // Owner.Name of who joined
	g     *group
	max   int
	wake  chan struct{}

	// guarded by g.mu
	queues   []int
	inflight int
	pending  []Delivery
	gone     bool
}

// Next returns the deliveries waiting for the member, waiting for one
// until ctx ends or the member is closed (ErrClosed).
func (mb *Member) Next(ctx context.Context) ([]Delivery, error) {
	for {
		mb.g.mu.Lock()
		if mb.gone {
			mb.g.mu.Unlock()
			return nil, ErrClosed
		}
		if len(mb.pending) > 0 {
			ds := mb.pending
			mb.pending = nil
			mb.g.mu.Unlock()
			return ds, nil
		}
		mb.g.mu.Unlock()
		select {
		case <-mb.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close removes the member from its group: what it holds unacknowledged
// goes to the others (or, when it was the last, stays for the node that
// takes the queues over).
func (mb *Member) Close() {
	mb.g.removeMember(mb)
}

func (mb *Member) signal() {
	select {
	case mb.wake <- struct{}{}:
	default:
	}
}

// flight is a message delivered and not yet settled.
type flight struct {
	id      ID
	q       *queue
	src     int
	offset  uint64
	rec     record.Record
	attempt int     // deliveries made
	gen     uint64  // bumped at each delivery: a timeout is for one delivery
	member  *Member // holding it; nil while it waits for (re)delivery
	owner   string  // the owner of the member it was last delivered to
	due     time.Time
	reason  string // why the last attempt failed
	failed  int    // attempts that failed
	dying   bool   // being written to the dead-letter topic
	parked  bool   // waiting for its first delivery: the member was full
}

// queue is one queue this node owns.
type queue struct {
	n      int
	member *Member
	// pos is what is handled (delivered or skipped) so far; it starts at
	// the committed position.
	pos position
	// out holds, per source and origin, the seqs delivered and not yet
	// settled, ascending.
	out [nSources]map[uint64][]uint64
	// failed holds the flights with a failed attempt, written with the
	// position (pos.Failed keeps the counts loaded with it until their
	// messages are read).
	failed map[ID]*flight
	// written is the position last written to OffsetsTopic.
	written []byte
	// draining: the allocation moved the queue to another live node;
	// nothing new is delivered, and once its members settled what they
	// hold (or at drainUntil) the position is written with no owner and
	// the queue dropped.
	draining   bool
	drainUntil time.Time
}

func (q *queue) addOut(src int, id ID) {
	q.out[src][id.Origin] = append(q.out[src][id.Origin], id.Seq)
}

// takeFailed returns and forgets the failed attempts the loaded position
// counts for a message.
func (q *queue) takeFailed(src int, id ID) int {
	if len(q.pos.Failed) == 0 {
		return 0
	}
	k := failedKey(src, id)
	n := q.pos.Failed[k]
	delete(q.pos.Failed, k)
	return n
}

func (q *queue) removeOut(src int, id ID) {
	s := q.out[src][id.Origin]
	if i, ok := slices.BinarySearch(s, id.Seq); ok {
		s = slices.Delete(s, i, i+1)
	}
	if len(s) == 0 {
		delete(q.out[src], id.Origin)
	} else {
		q.out[src][id.Origin] = s
	}
}

// counters of a group on this node.
type counters struct {
	delivered, acked, retries, deadLetters uint64
}

// group is one consumer group's part on this node.
type group struct {
	m      *Manager
	topic  string
	name   string
	topics [nSources]string
	tags   []string
	born   time.Time

	// commitMu orders position writes: one computed later is written
	// later.
	commitMu sync.Mutex

	mu       sync.Mutex
	members  []*Member // by ID
	queues   map[int]*queue
	gaining  map[int]time.Time // queues allocated here, waiting for their release since
	readers  [nSources]TopicReader
	held     [nSources]*store.Delivery
	passed   [nSources]vector // highest seq read per origin since the reader started
	flights  map[ID]*flight
	waiting  []*flight      // to (re)deliver, by due
	parked   int            // flights in waiting never delivered (their member was full)
	timeouts []timeoutEntry // delivered, by deadline
	dead     []*flight      // to write to the dead-letter topic
	deadAt   time.Time      // not before: after a failed write
	stats    counters
	closed   bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	// ctx is cancelled by shutdown: the group's writes (commits, claims,
	// dead letters) give up their wait for the replica then, so that a
	// stop is not held up by one.
	ctx    context.Context
	cancel context.CancelFunc
}

type timeoutEntry struct {
	f        *flight
	gen      uint64
	deadline time.Time
}

func newGroup(m *Manager, topic, name string, tags []string) *group {
	g := &group{
		m: m, topic: topic, name: name, tags: tags, born: time.Now(),
		topics:  [nSources]string{topic, RetryTopic(topic, name)},
		queues:  make(map[int]*queue),
		gaining: make(map[int]time.Time),
		flights: make(map[ID]*flight),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	for i := range g.passed {
		g.passed[i] = vector{}
	}
	return g
}

func (g *group) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// serves reports whether queue n is served here.
func (g *group) serves(n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[n]
	return q != nil && !q.draining
}

func (g *group) memberCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.members)
}

func (g *group) addMember(mb *Member) {
	g.mu.Lock()
	g.members = append(g.members, mb)
	g.assignLocked()
	g.mu.Unlock()
	g.signal()
}

// removeMember takes mb out; its flights wait for redelivery at once, and
// do not count as an attempt (they got no verdict). The last member out
// closes the group here.
func (g *group) removeMember(mb *Member) {
	g.mu.Lock()
	if mb.gone {
		g.mu.Unlock()
		return
	}
	mb.gone = true
	g.members = slices.DeleteFunc(g.members, func(x *Member) bool { return x == mb })
	now := time.Now()
	for _, f := range g.flights {
		if f.member == mb {
			f.member = nil
			f.attempt--
			f.due = now
			g.wait(f)
		}
	}
	mb.signal()
	last := len(g.members) == 0
	if !last {
		g.assignLocked()
	}
	g.mu.Unlock()
	if last {
		g.m.leave(g)
		g.shutdown()
		return
	}
	g.signal()
}

// shutdown writes the group's positions and stops its loop.
func (g *group) shutdown() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		<-g.done
		return
	}
	g.closed = true
	for _, mb := range g.members {
		mb.gone = true
		mb.signal()
	}
	g.mu.Unlock()
	g.cancel()
	close(g.stop)
	<-g.done
	// The last write is the stop's own, so the stop does not cancel it;
	// Config.Write bounds its wait (the daemon waits for its replica at
	// most --replica-timeout).
	g.commit(context.Background(), nil, true)
}

// assignLocked divides the owned queues among the members, averaged over
// the members in ID order.
func (g *group) assignLocked() {
	owned := make([]int, 0, len(g.queues))
	for n, q := range g.queues {
		if !q.draining {
			owned = append(owned, n)
		}
	}
	sort.Ints(owned)
	for _, mb := range g.members {
		mb.queues = mb.queues[:0]
	}
	for i, mb := range g.members {
		for _, j := range allocate(len(owned), len(g.members), i) {
			q := g.queues[owned[j]]
			q.member = mb
			mb.queues = append(mb.queues, q.n)
		}
	}
	if len(g.members) == 0 {
		for _, q := range g.queues {
			if !q.draining {
				q.member = nil
			}
		}
	}
}

// wait puts f in the waiting list, ordered by due.
func (g *group) wait(f *flight) {
	i := sort.Search(len(g.waiting), func(i int) bool { return g.waiting[i].due.After(f.due) })
	g.waiting = slices.Insert(g.waiting, i, f)
}

// queueOf is the queue of a record.
func (g *group) queueOf(r record.Record) int {
	return queueOf(r.Key(), r.Seq(), g.m.cfg.Queues)
}

// queueOf is the queue of a message: its key's hash, or for a message
// without a key its origin seq, round robin.
func queueOf(key []byte, seq uint64, queues int) int {
	if len(key) == 0 {
		return int(seq % uint64(queues))
	}
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32() % uint32(queues))
}

// run delivers: new messages as they arrive, retries when due, and writes
// positions that moved without acks every CommitInterval.
func (g *group) run() {
	defer g.m.wg.Done()
	defer close(g.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lastCommit := time.Now()
	for {
		changed := g.m.st.Changed()
		now := time.Now()
		g.mu.Lock()
		next := g.pump(now)
		var dead []*flight
		if !now.Before(g.deadAt) {
			dead, g.dead = g.dead, nil
		} else if next.IsZero() || g.deadAt.Before(next) {
			next = g.deadAt
		}
		drained, drainNext := g.drainedLocked(now)
		g.mu.Unlock()
		if len(dead) > 0 {
			g.bury(dead)
		}
		if len(drained) > 0 {
			g.handOver(drained)
		}
		if !drainNext.IsZero() && (next.IsZero() || drainNext.Before(next)) {
			next = drainNext
		}
		if now.Sub(lastCommit) >= g.m.cfg.CommitInterval {
			g.commit(g.ctx, nil, false)
			lastCommit = now
		}
		wait := g.m.cfg.CommitInterval
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(now), time.Millisecond))
		}
		timer.Reset(wait)
		select {
		case <-changed:
		case <-g.wake:
		case <-timer.C:
		case <-g.stop:
			return
		}
	}
}

// pump times out, redelivers and delivers what it can; it returns when
// the next timer is due (zero: none).
func (g *group) pump(now time.Time) (next time.Time) {
	for len(g.timeouts) > 0 {
		te := g.timeouts[0]
		f := te.f
		if f.member == nil || f.gen != te.gen || g.flights[f.id] != f {
			g.timeouts = g.timeouts[1:] // settled or redelivered since
			continue
		}
		if te.deadline.After(now) {
			next = te.deadline
			break
		}
		g.timeouts = g.timeouts[1:]
		g.fail(f, "timeout", now)
	}
	// One pass over the waiting list, keeping what cannot go yet; it stops
	// at the first flight not due, or once every member is full.
	room := 0
	for _, mb := range g.members {
		if mb.inflight < mb.max {
			room++
		}
	}
	kept := g.waiting[:0]
	for i, f := range g.waiting {
		if g.flights[f.id] != f || f.member != nil || f.dying {
			continue // settled or taken since
		}
		if f.due.After(now) || room == 0 {
			if f.due.After(now) && (next.IsZero() || f.due.Before(next)) {
				next = f.due
			}
			kept = append(kept, g.waiting[i:]...)
			break
		}
		mb := f.q.member
		if f.q.draining || mb == nil || mb.inflight >= mb.max {
			kept = append(kept, f)
			continue
		}
		g.deliver(f, mb, now)
		if mb.inflight >= mb.max {
			room--
		}
	}
	clear(g.waiting[len(kept):])
	g.waiting = kept
	polled, cancel := context.WithCancel(context.Background())
	cancel()
	for src, r := range g.readers {
		if r == nil {
			continue
		}
		for {
			d := g.held[src]
			g.held[src] = nil
			if d == nil {
				x, err := r.Next(polled)
				if err != nil {
					if !errors.Is(err, context.Canceled) && !errors.Is(err, store.ErrClosed) {
						g.m.log.Error("reading a group's topic", zap.String("topic", g.topics[src]), zap.Error(err))
					}
					break
				}
				d = &x
			}
			if !g.offer(src, d, now) {
				g.held[src] = d
				break
			}
		}
	}
	return next
}

// maxParked bounds the messages a group holds on a node for members that
// are full: past it the reader waits.
const maxParked = 10000

// offer handles a message read from source src. A message for a member at
// its max_inflight is parked in the waiting list (behind the queue's
// earlier ones, so a key's order holds) and the reader goes on for the
// other members; false means too much is parked and the reader must wait.
func (g *group) offer(src int, d *store.Delivery, now time.Time) bool {
	r := d.Record
	id := ID{r.Origin(), r.Seq()}
	q := g.queues[g.queueOf(r)]
	switch {
	case q == nil, q.draining, id.Seq <= q.pos.Done[src][id.Origin], r.HLC() < q.pos.From:
		// Another node's queue, or handled already.
	case g.flights[id] != nil:
		// In flight already (a rewound reader meets it again).
	default:
		full := q.member == nil || q.member.inflight >= q.member.max
		if full && g.parked >= maxParked {
			return false
		}
		f := &flight{id: id, q: q, src: src, offset: d.Offset, rec: r}
		g.flights[id] = f
		q.pos.Done[src][id.Origin] = id.Seq
		q.addOut(src, id)
		if n := q.takeFailed(src, id); n > 0 {
			// It failed n times under the queue's last owner: the count
			// goes on, after the back-off of the last failure.
			f.attempt, f.failed = n, n
			q.failed[id] = f
			f.due = now.Add(g.backoff(n))
			g.wait(f)
		} else if full {
			f.due = now
			f.parked = true
			g.parked++
			g.wait(f)
		} else {
			g.deliver(f, q.member, now)
		}
	}
	g.passed[src][id.Origin] = max(g.passed[src][id.Origin], id.Seq)
	return true
}

func (g *group) deliver(f *flight, mb *Member, now time.Time) {
	g.unpark(f)
	f.attempt++
	f.gen++
	f.member = mb
	f.owner = mb.owner
	mb.inflight++
	mb.pending = append(mb.pending, Delivery{ID: f.id, Topic: g.topic, Queue: f.q.n, Attempt: f.attempt, Offset: f.offset, Record: f.rec})
	if len(g.timeouts) > 2*len(g.flights)+1024 {
		// Settled entries wait behind an older one: sweep them out.
		g.timeouts = slices.DeleteFunc(g.timeouts, func(te timeoutEntry) bool {
			return te.f.member == nil || te.f.gen != te.gen || g.flights[te.f.id] != te.f
		})
	}
	g.timeouts = append(g.timeouts, timeoutEntry{f: f, gen: f.gen, deadline: now.Add(g.m.cfg.AckTimeout)})
	g.stats.delivered++
	if f.attempt > 1 {
		g.stats.retries++
	}
	mb.signal()
}

// release takes f from its member.
func (g *group) release(f *flight) {
	if f.member != nil {
		f.member.inflight--
		f.member = nil
		g.signal() // room for more
	}
}

// fail handles an attempt that failed: a retry after the back-off, or the
// dead-letter topic once the retries are spent.
func (g *group) fail(f *flight, reason string, now time.Time) {
	g.release(f)
	f.reason = reason
	f.failed = f.attempt
	f.q.failed[f.id] = f
	if f.attempt > g.m.cfg.MaxRetries {
		f.dying = true
		g.dead = append(g.dead, f)
		g.signal()
		return
	}
	f.due = now.Add(g.backoff(f.attempt))
	g.wait(f)
}

// backoff is the wait after the n-th failed attempt.
func (g *group) backoff(n int) time.Duration {
	b := g.m.cfg.Backoff
	return b[min(n-1, len(b)-1)]
}

// unpark takes f out of the parked count.
func (g *group) unpark(f *flight) {
	if f.parked {
		f.parked = false
		g.parked--
	}
}

// finish settles f for good.
func (g *group) finish(f *flight) {
	g.unpark(f)
	g.release(f)
	delete(g.flights, f.id)
	delete(f.q.failed, f.id)
	f.q.removeOut(f.src, f.id)
}

// bury writes dead letters, then settles them; a failed write is tried
// again a second later (they are not delivered again meanwhile).
func (g *group) bury(dead []*flight) {
	now := time.Now()
	msgs := make([]record.Message, 0, len(dead))
	for _, f := range dead {
		dl := deadLetterFrom(g.topic, g.name, f, f.reason, now)
		b, err := encodeDeadLetter(dl)
		if err != nil {
			g.m.log.Error("encoding a dead letter", zap.Error(err))
			continue
		}
		msgs = append(msgs, record.Message{Topic: DeadLetterTopic(g.topic, g.name), Key: dl.ID, Tag: dl.Tag, Value: b})
	}
	err := g.m.write(g.ctx, msgs)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.m.log.Error("writing dead letters: trying again", zap.String("topic", g.topic),
			zap.String("group", g.name), zap.Int("messages", len(dead)), zap.Error(err))
		g.dead = append(g.dead, dead...)
		g.deadAt = now.Add(time.Second)
		return
	}
	for _, f := range dead {
		if g.flights[f.id] == f {
			g.finish(f)
			g.stats.deadLetters++
		}
	}
	g.m.log.Info("messages dead-lettered", zap.String("topic", g.topic), zap.String("group", g.name), zap.Int("messages", len(dead)))
}

// settle applies acks and nacks, then writes the positions that moved.
func (g *group) settle(ctx context.Context, by Owner, ack, nack []ID) (acked, nacked, unknown int, err error) {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	g.mu.Lock()
	if err := g.settlesLocked(by, ack, nack); err != nil {
		g.mu.Unlock()
		return 0, 0, 0, err
	}
	now := time.Now()
	for _, id := range ack {
		f := g.flights[id]
		if f == nil || f.dying {
			unknown++
			continue
		}
		g.finish(f)
		g.stats.acked++
		acked++
	}
	for _, id := range nack {
		f := g.flights[id]
		if f == nil || f.dying || f.member == nil {
			unknown++
			continue
		}
		g.fail(f, "nack", now)
		nacked++
	}
	msgs, qs := g.positionsLocked(nil, false)
	g.mu.Unlock()
	if nacked > 0 {
		g.signal()
	}
	return acked, nacked, unknown, g.writePositions(ctx, msgs, qs)
}

// commit writes the positions that moved, of the queues in only (all when
// nil); release writes them with no owner.
func (g *group) commit(ctx context.Context, only []*queue, release bool) {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	g.mu.Lock()
	msgs, qs := g.positionsLocked(only, release)
	g.mu.Unlock()
	if err := g.writePositions(ctx, msgs, qs); err != nil {
		g.m.log.Warn("writing a group's positions", zap.String("topic", g.topic), zap.String("group", g.name), zap.Error(err))
	}
}

// positionsLocked builds the OffsetsTopic records of the queues whose
// position moved since it was last written. A queue's position per origin
// is one below its lowest unsettled seq, or else the furthest it or the
// reader got (a draining queue's reader progress is not its own). With
// release the positions name no owner.
func (g *group) positionsLocked(only []*queue, release bool) ([]record.Message, []*queue) {
	if only == nil {
		for _, q := range g.queues {
			only = append(only, q)
		}
	}
	var msgs []record.Message
	var qs []*queue
	for _, q := range only {
		p := position{Epoch: q.pos.Epoch, From: q.pos.From, Owner: g.m.self}
		if release {
			p.Owner = 0
		}
		for src := range nSources {
			v := vector{}
			for o, s := range q.pos.Done[src] {
				v[o] = s
			}
			if !q.draining {
				for o, s := range g.passed[src] {
					v[o] = max(v[o], s)
				}
			}
			for o, out := range q.out[src] {
				v[o] = out[0] - 1
			}
			p.Done[src] = v
		}
		for k, n := range q.pos.Failed {
			// Counts loaded with the position, of messages not read yet;
			// those settled since are covered by Done.
			if src, id, ok := parseFailedKey(k); ok && id.Seq > p.Done[src][id.Origin] {
				p.setFailed(k, n)
			}
		}
		for _, f := range q.failed {
			p.setFailed(failedKey(f.src, f.id), f.failed)
		}
		b, err := encodePosition(p)
		if err != nil || slices.Equal(b, q.written) {
			continue
		}
		msgs = append(msgs, record.Message{Topic: OffsetsTopic, Key: offsetsKey(g.topic, g.name, q.n), Value: b})
		qs = append(qs, q)
	}
	return msgs, qs
}

func (g *group) writePositions(ctx context.Context, msgs []record.Message, qs []*queue) error {
	if len(msgs) == 0 {
		return nil
	}
	// A reset seen since: its position must not be overwritten.
	for i := 0; i < len(msgs); {
		if g.m.position(g.topic, g.name, qs[i].n).Epoch > qs[i].pos.Epoch {
			msgs, qs = slices.Delete(msgs, i, i+1), slices.Delete(qs, i, i+1)
			g.m.Kick()
			continue
		}
		i++
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := g.m.write(ctx, msgs); err != nil {
		return err
	}
	g.mu.Lock()
	for i, q := range qs {
		q.written = msgs[i].Value
	}
	g.mu.Unlock()
	return nil
}

// rebalance makes the node serve exactly want. A queue it loses drains:
// nothing new is delivered, and it is handed over (position written with
// no owner) once its members settled what they hold, or after
// Config.Handover. A queue it gains starts at its committed position once
// its last owner released it or is dead (or after Config.Handover and a
// second, when the release never comes), the readers rewinding as far as
// that needs; its claim is written at once. A queue whose epoch a reset
// raised starts over at the new position.
func (g *group) rebalance(want []int, nodes int, alive map[uint64]bool) {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	// The committed positions, read outside the lock.
	fresh := make(map[int]position, len(want))
	for _, n := range want {
		fresh[n] = g.m.position(g.topic, g.name, n)
	}

	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	now := time.Now()
	keep := make(map[int]bool, len(want))
	for _, n := range want {
		keep[n] = true
	}
	for n := range g.gaining {
		if !keep[n] {
			delete(g.gaining, n)
		}
	}
	var lost, gained []*queue
	for n, q := range g.queues {
		if !keep[n] && !q.draining {
			g.drainLocked(q, now)
			lost = append(lost, q)
		}
	}
	for _, n := range want {
		p := fresh[n]
		q := g.queues[n]
		if q != nil {
			if q.draining || p.Epoch <= q.pos.Epoch {
				continue // a drained queue is gained anew once released
			}
			g.m.log.Info("group reset", zap.String("topic", g.topic), zap.String("group", g.name), zap.Int("queue", n), zap.Uint64("epoch", p.Epoch))
			g.dropLocked(q)
		} else if p.Owner != 0 && p.Owner != g.m.self && alive[p.Owner] {
			since, ok := g.gaining[n]
			if !ok {
				g.gaining[n] = now
				continue
			}
			if now.Sub(since) < g.m.cfg.Handover+time.Second {
				continue
			}
			g.m.log.Warn("taking a queue over without its release", zap.String("topic", g.topic), zap.String("group", g.name),
				zap.Int("queue", n), zap.String("owner", fmt.Sprintf("%016x", p.Owner)))
		}
		delete(g.gaining, n)
		q = &queue{n: n, pos: p, failed: map[ID]*flight{}}
		for src := range nSources {
			q.out[src] = map[uint64][]uint64{}
		}
		g.queues[n] = q
		gained = append(gained, q)
	}
	if len(lost) == 0 && len(gained) == 0 {
		g.mu.Unlock()
		return
	}
	var serving []int
	for n, q := range g.queues {
		if !q.draining {
			serving = append(serving, n)
		}
	}
	sort.Ints(serving)
	g.m.log.Info("group rebalanced", zap.String("topic", g.topic), zap.String("group", g.name),
		zap.Int("nodes", nodes), zap.Ints("queues", want), zap.Ints("serving", serving), zap.Int("draining", len(lost)))
	g.assignLocked()
	g.rewindLocked(gained)
	msgs, qs := g.positionsLocked(gained, false) // the claims
	g.mu.Unlock()
	g.signal()
	if err := g.writePositions(g.ctx, msgs, qs); err != nil {
		g.m.log.Warn("writing the claims of queues taken over", zap.String("topic", g.topic), zap.String("group", g.name), zap.Error(err))
	}
}

// drainLocked starts handing q over: what its members were given but have
// not read yet is taken back (it goes to the next owner).
func (g *group) drainLocked(q *queue, now time.Time) {
	q.draining = true
	q.drainUntil = now.Add(g.m.cfg.Handover)
	for _, mb := range g.members {
		mb.pending = slices.DeleteFunc(mb.pending, func(d Delivery) bool {
			if d.Queue != q.n {
				return false
			}
			if f := g.flights[d.ID]; f != nil && f.member == mb {
				g.release(f)
				f.attempt--
				f.due = now
				g.wait(f)
			}
			return true
		})
	}
	g.signal()
}

// drainedLocked returns the draining queues ready to hand over: nothing
// held by a member, or past their deadline; next is the earliest deadline
// of the others.
func (g *group) drainedLocked(now time.Time) (done []*queue, next time.Time) {
	held := map[*queue]bool{}
	any := false
	for _, q := range g.queues {
		any = any || q.draining
	}
	if !any {
		return nil, time.Time{}
	}
	for _, f := range g.flights {
		if f.member != nil && f.q.draining {
			held[f.q] = true
		}
	}
	for _, q := range g.queues {
		switch {
		case !q.draining:
		case !held[q] || !now.Before(q.drainUntil):
			done = append(done, q)
		case next.IsZero() || q.drainUntil.Before(next):
			next = q.drainUntil
		}
	}
	return done, next
}

// handOver writes the drained queues' positions with no owner, then drops
// them.
func (g *group) handOver(qs []*queue) {
	g.commit(g.ctx, qs, true)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range qs {
		if g.queues[q.n] == q {
			g.dropLocked(q)
		}
	}
	g.m.Kick() // the next owner may be this node again
}

// dropLocked gives up queue q: its flights are forgotten, undelivered ones
// taken back from the members.
func (g *group) dropLocked(q *queue) {
	for id, f := range g.flights {
		if f.q == q {
			g.unpark(f)
			g.release(f)
			delete(g.flights, id)
		}
	}
	for _, mb := range g.members {
		mb.pending = slices.DeleteFunc(mb.pending, func(d Delivery) bool { return d.Queue == q.n })
	}
	delete(g.queues, q.n)
}

// rewindLocked moves the readers back to where the gained queues resume.
func (g *group) rewindLocked(gained []*queue) {
	if len(gained) == 0 {
		return
	}
	for src := range nSources {
		from := ^uint64(0)
		for _, q := range gained {
			from = min(from, g.m.st.ResumeOffset(g.topics[src], q.pos.Done[src]))
		}
		r := g.readers[src]
		if r != nil {
			cur := r.Offset()
			if d := g.held[src]; d != nil {
				cur = d.Offset
			}
			if from >= cur {
				continue
			}
			r.Close()
		}
		if from == ^uint64(0) {
			from = 0
		}
		nr, err := g.m.st.NewTopicReader(g.topics[src], store.Start{From: store.FromOffset, Offset: from}, g.tags)
		if err != nil {
			g.m.log.Error("opening a group's reader", zap.String("topic", g.topics[src]), zap.Error(err))
			continue
		}
		g.readers[src] = nr
		g.held[src] = nil
		g.passed[src] = vector{}
	}
}
