// Package memstore is an in-memory store for the unit tests of package
// broadcast, as hashicorp/raft's InmemStore is for raft's: it holds each
// origin's records in a slice and applies them to a view of package
// store/view (the same rule, the same digest and snapshots as a store on
// disk), with no files, no flushes and no recovery. It keeps the rules a
// Node relies on (each origin gap-free, a duplicate or a record past a
// gap refused with the store's sentinel errors, a bootstrap from a peer's
// snapshot moving origins on) and nothing a Node does not need: no
// retention (nothing is ever recycled), no damaged records, no clock
// bound on a peer's stamps. What needs files (a restart of the process,
// recycling, a crash) is tested on package store.
package memstore

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// Store is an in-memory store of one node. Safe for concurrent use.
type Store struct {
	origin uint64
	clock  *record.Clock
	view   *view.View

	mu   sync.Mutex
	logs map[uint64]*originLog
	// changed and own are closed and replaced at each write, and at
	// each of this node's own (Changed, OwnChanged).
	changed, own chan struct{}
}

// originLog is one origin's records: seqs base+1 to base+len(recs). A
// bootstrap moves base on past what the snapshot covers.
type originLog struct {
	base uint64
	recs []record.Record
}

// New returns an empty store whose own origin is a random ID, as a new
// store on disk gets.
func New() *Store {
	return &Store{
		origin:  rand.Uint64() | 1,
		clock:   record.NewClock(time.Now),
		view:    view.New(),
		logs:    map[uint64]*originLog{},
		changed: make(chan struct{}),
		own:     make(chan struct{}),
	}
}

// Origin is this node's origin ID.
func (s *Store) Origin() uint64 { return s.origin }

// LastSeq is the highest seq of origin held, 0 if none.
func (s *Store) LastSeq(origin uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastLocked(origin)
}

func (s *Store) lastLocked(origin uint64) uint64 {
	l := s.logs[origin]
	if l == nil {
		return 0
	}
	return l.base + uint64(len(l.recs))
}

// Vector is LastSeq of every origin held.
func (s *Store) Vector() map[uint64]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := make(map[uint64]uint64, len(s.logs))
	for o := range s.logs {
		if last := s.lastLocked(o); last > 0 {
			v[o] = last
		}
	}
	return v
}

// LogLast is LastSeq: no record is ever set aside as damaged here.
func (s *Store) LogLast(origin uint64) uint64 { return s.LastSeq(origin) }

// LogVector is Vector, likewise.
func (s *Store) LogVector() map[uint64]uint64 { return s.Vector() }

// ReadOrigin calls fn with origin's records from seq from to seq to, in
// order, stopping at the last one held; a seq a bootstrap moved past is
// store.ErrRecycled. fn must not call the store.
func (s *Store) ReadOrigin(origin, from, to uint64, fn func(record.Record) error) (next uint64, err error) {
	if from == 0 {
		return from, fmt.Errorf("%w: seq 0", store.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logs[origin]
	last := min(to, s.lastLocked(origin))
	for next = from; next <= last; next++ {
		if next <= l.base {
			return next, fmt.Errorf("%w: origin %016x seq %d", store.ErrRecycled, origin, next)
		}
		if err := fn(l.recs[next-l.base-1]); err != nil {
			return next, err
		}
	}
	return next, nil
}

// AppendRecord appends a record another node stamped: store.ErrDuplicate
// for a seq held already, store.ErrOutOfOrder for one past a gap.
func (s *Store) AppendRecord(raw []byte) (store.Result, error) {
	r, err := record.Decode(raw)
	if err != nil {
		return store.Result{}, err
	}
	if r == nil || len(r) != len(raw) && len(raw) != record.Padded(len(r)) {
		return store.Result{}, fmt.Errorf("%w: record of %d bytes in %d", store.ErrInvalid, len(r), len(raw))
	}
	if r.Kind() == record.KindLost {
		return store.Result{}, fmt.Errorf("%w: a lost record's placeholder never travels", store.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch last := s.lastLocked(r.Origin()); {
	case r.Seq() <= last:
		return store.Result{}, fmt.Errorf("%w: origin %016x seq %d (held up to %d)", store.ErrDuplicate, r.Origin(), r.Seq(), last)
	case r.Seq() != last+1:
		return store.Result{}, fmt.Errorf("%w: origin %016x seq %d after %d", store.ErrOutOfOrder, r.Origin(), r.Seq(), last)
	}
	s.clock.Observe(r.HLC())
	s.appendLocked(record.Record(append([]byte(nil), r...)), false)
	return store.Result{Stamp: record.Stamp{Origin: r.Origin(), Seq: r.Seq(), HLC: r.HLC()}, Durable: true}, nil
}

// Publish stamps m with this node's origin, its next seq and the clock,
// and appends it.
func (s *Store) Publish(m *record.Message) (store.Result, error) {
	if err := m.Validate(); err != nil {
		return store.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := record.Stamp{Origin: s.origin, Seq: s.lastLocked(s.origin) + 1, HLC: s.clock.Now()}
	b := make([]byte, m.EncodedSize())
	s.appendLocked(record.Record(b[:record.Encode(b, m, st)]), true)
	return store.Result{Stamp: st, Durable: true}, nil
}

// appendLocked appends r, the next record of its origin, applies it to
// the view and wakes the waiters of Changed (and of OwnChanged, own).
func (s *Store) appendLocked(r record.Record, own bool) {
	l := s.logs[r.Origin()]
	if l == nil {
		l = &originLog{}
		s.logs[r.Origin()] = l
	}
	l.recs = append(l.recs, r)
	s.view.Apply(r)
	s.notifyLocked(own)
}

func (s *Store) notifyLocked(own bool) {
	close(s.changed)
	s.changed = make(chan struct{})
	if own {
		close(s.own)
		s.own = make(chan struct{})
	}
}

// Changed is closed at the next write.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// OwnChanged is closed at the next of this node's own records.
func (s *Store) OwnChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.own
}

// SnapshotToVersion streams the view's snapshot, marked with the vector,
// in a version a peer of record version maxVersion reads.
func (s *Store) SnapshotToVersion(w io.Writer, maxVersion int) error {
	marks := s.Vector()
	return view.EncodeSnapshotUpTo(w, s.view, 0, marks, maxVersion)
}

// Bootstrap applies a peer's snapshot as it is read and moves every
// origin it covers beyond what this store holds on to its mark: the
// records before it are then not held (store.ErrRecycled), as on a store
// on disk. It returns the origins it moved.
func (s *Store) Bootstrap(r io.Reader) (map[uint64]uint64, error) {
	marks, maxHLC, err := s.view.ApplySnapshot(r)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock.Observe(maxHLC)
	moved := map[uint64]uint64{}
	for o, m := range marks {
		if m > s.lastLocked(o) {
			s.logs[o] = &originLog{base: m}
			moved[o] = m
		}
	}
	s.notifyLocked(false)
	return moved, nil
}

// ViewFromPeer is false, false: an in-memory view is never lost at start.
func (s *Store) ViewFromPeer() (lost, pending bool) { return false, false }

// Digest is the view's digest (store.Store.Digest).
func (s *Store) Digest() [32]byte { return s.view.Digest() }

// Get is the view's entry of (topic, key).
func (s *Store) Get(topic, key string) (view.Entry, bool) { return s.view.Get(topic, key) }

// Keys lists a topic's keys as store.Store.Keys does.
func (s *Store) Keys(topic, prefix, after string, limit int) []string {
	return s.view.Keys(topic, prefix, after, limit)
}

// Topics lists the view's topics.
func (s *Store) Topics() []view.TopicInfo { return s.view.Topics() }

// Close releases nothing: there is nothing to release. It keeps the
// signature of store.Store.Close, so that tests close either alike.
func (s *Store) Close() error { return nil }
