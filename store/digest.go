package store

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cachecast/cachecast/store/view"
)

// View digests (GET /v1/status, GET /v1/verify, the consistency
// observer). A digest hashes every entry of the view (view.View.Digest):
// about 150 ns of CPU a key (46-50 ms at 300,000 keys, 0.6 s of wall time
// on a loaded machine: BENCHMARKS.md, "Status, verify and the view
// digest"). The store keeps the last one it took with the view's Moment
// and gives it again, with the vector of the moment it is asked, while
// the view holds it (no
// change since, no instant come): the same digest a new hash would give,
// for the price of a copy of the vector. One hash runs at a time; a
// caller that finds one under way waits for it and, most often, takes
// its result. ViewDigests is exact; RecentViewDigests (status) bounds
// the hashing its callers cause, whoever calls and how often.

// ViewDigest is the view's digest per topic (as view.View.Digest, topic
// by topic) and the version vector of exactly the records it holds.
type ViewDigest struct {
	Vector map[uint64]uint64
	Topics map[string][32]byte
	// At is when it was taken: the view's digest as at that moment.
	At time.Time
}

// statusHashShare bounds the hashing RecentViewDigests causes: it hashes
// only when the last hash ended at least statusHashShare times as long
// ago as that hash took, so that callers who loop on it (a read-only
// user polling status) keep it under 1/(statusHashShare+1) of a core.
const statusHashShare = 19

// digests is the store's last view digest and who is hashing; hashes
// and hashTime count the hashes taken and their time (DigestStats).
type digests struct {
	hashing  sync.Mutex // held by the one hash under way
	last     atomic.Pointer[takenDigest]
	hashes   atomic.Uint64
	hashTime atomic.Int64 // ns
}

// DigestStats returns how many hashes of the whole view the store took
// for digests since it opened, and their time in all.
func (s *Store) DigestStats() (hashes uint64, took time.Duration) {
	return s.digests.hashes.Load(), time.Duration(s.digests.hashTime.Load())
}

// takenDigest is a digest taken, the Moment of the view it holds for,
// and how long its hash took (took, ended: the time it ended).
type takenDigest struct {
	ViewDigest
	moment view.Moment
	took   time.Duration
	ended  time.Time
}

// ViewDigests returns the view's digest per topic with the vector it
// covers, taken together under the write lock: the digest the last call
// took when the view holds it still, otherwise a new hash (after the
// lock).
func (s *Store) ViewDigests() ViewDigest {
	s.digests.hashing.Lock()
	defer s.digests.hashing.Unlock()
	return s.viewDigestsLocked()
}

// RecentViewDigests is ViewDigests for callers that may call it in a
// loop (GET /v1/status): when the view no longer holds the last digest
// and another hash is under way, or the last one ended too recently
// (statusHashShare), it returns the last digest with the vector and time
// it was taken at (its At is then older than the call) instead of
// hashing. The first call on a store hashes.
func (s *Store) RecentViewDigests() ViewDigest {
	last := s.digests.last.Load()
	if last == nil {
		return s.ViewDigests()
	}
	if !s.digests.hashing.TryLock() {
		return last.clone()
	}
	defer s.digests.hashing.Unlock()
	if d, ok := s.heldDigest(); ok || time.Since(last.ended) < statusHashShare*last.took {
		if ok {
			return d
		}
		return last.clone()
	}
	return s.viewDigestsLocked()
}

// viewDigestsLocked is ViewDigests for a caller holding digests.hashing.
func (s *Store) viewDigestsLocked() ViewDigest {
	if d, ok := s.heldDigest(); ok {
		return d
	}
	frozen, vec, at := s.freezeView()
	start := time.Now()
	topics, moment := frozen.Hash()
	ended := time.Now()
	t := &takenDigest{ViewDigest: ViewDigest{Vector: vec, Topics: topics, At: at},
		moment: moment, took: ended.Sub(start), ended: ended}
	s.digests.last.Store(t)
	s.digests.hashes.Add(1)
	s.digests.hashTime.Add(int64(t.took))
	return t.clone()
}

// heldDigest returns the last digest with the vector of now when the
// view holds it still. The caller holds digests.hashing.
func (s *Store) heldDigest() (ViewDigest, bool) {
	last := s.digests.last.Load()
	if last == nil {
		return ViewDigest{}, false
	}
	s.wmu.Lock()
	held := s.view.Holds(last.moment)
	var vec map[uint64]uint64
	if held {
		vec = s.origins.Vector()
	}
	s.wmu.Unlock()
	if !held {
		return ViewDigest{}, false
	}
	t := *last
	t.Vector, t.At = vec, time.Now()
	s.digests.last.Store(&t) // RecentViewDigests' stale answer: the latest vector known to hold
	return t.clone(), true
}

// freezeView freezes the view and takes the vector it covers under the
// write lock, which a defer releases (a panic's path too).
func (s *Store) freezeView() (view.Frozen, map[uint64]uint64, time.Time) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.view.Freeze(), s.origins.Vector(), time.Now()
}

// clone is t's digest for a caller: maps of its own.
func (t *takenDigest) clone() ViewDigest {
	return ViewDigest{Vector: maps.Clone(t.Vector), Topics: maps.Clone(t.Topics), At: t.At}
}
