package index

import (
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/fsys"
)

// An index's chunks leave the process's resident set as the log's written
// pages do (segment's release.go, issue 34): each mapping keeps its
// chunks, whose pages stay in the page cache, dirty ones too, and a read
// of a dropped page faults it back from there (fsys.Release); the array's
// sync (msync of the written range) writes back a dropped dirty page all
// the same. Two moments:
//
//   - While the writer writes, once a chunk, the preparer drops the full
//     chunks behind the one before the writer's (releaseBehind), those
//     written since their last release: a consumer just behind the writer
//     still finds the chunk before the writer's mapped, and a chunk a
//     reader maps again stays until the array rests or evicts it, so that
//     a catch-up reader is not made to fault its chunk in twice.
//   - At rest (the store's housekeeping finds the log's end where it was a
//     round ago), every mapped chunk written or read since its last
//     release, the writer's too, and the chunks made ahead (faulted in
//     for the writer) go (Rest): a writer that comes back faults its
//     chunk's pages in again, a minor fault each (170 topic entries).
//
// A chunk's releasedAt (the array's clock at its last release) tells a
// read since (used is later), releasedTo (the array's length then) a
// write since.

// releaseBehind drops the full chunks behind the one before the writer's
// that were written since their last release. The preparer's, once a
// chunk (after prepareNext).
func (a *array) releaseBehind() {
	a.mu.RLock() // no chunk is unmapped meanwhile
	defer a.mu.RUnlock()
	if a.closed.Load() {
		return
	}
	n := a.length.Load()
	for _, c := range a.chunks[:max(len(a.chunks)-2, 0)] {
		if c.data != nil && c.releasedTo.Load() < c.end() {
			a.release(c, n)
		}
	}
}

// releaseAtRest drops every mapped chunk written or read since its last
// release, and the chunks made ahead (see above). Safe from any
// goroutine.
func (a *array) releaseAtRest() {
	a.prepMu.Lock() // next does not change meanwhile
	defer a.prepMu.Unlock()
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed.Load() {
		return
	}
	n := a.length.Load()
	for _, c := range a.chunks {
		if c.data != nil && (c.used.Load() > c.releasedAt.Load() || c.releasedTo.Load() < min(n, c.end())) {
			a.release(c, n)
		}
	}
	for _, c := range a.next {
		if c.used.Load() > c.releasedAt.Load() {
			a.release(c, n)
		}
	}
}

// release drops c's pages, the array's length being n. mu is held (c
// stays mapped).
func (a *array) release(c *arrayChunk, n uint64) {
	c.releasedAt.Store(a.clock.Add(1))
	c.releasedTo.Store(n)
	if err := fsys.Release(c.data); err != nil {
		a.log.Warn("releasing an index chunk's pages failed", zap.String("path", a.chunkPath(c.base)), zap.Error(err))
	}
}

// Rest drops the pages of the set's indexes from the resident set, the
// store being at rest (see above). Safe from any goroutine.
func (s *set[K, M]) Rest() {
	if s.closed.Load() {
		return
	}
	s.each(func(m M) error {
		m.base().arr.releaseAtRest()
		return nil
	})
}
