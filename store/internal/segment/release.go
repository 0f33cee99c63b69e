package segment

import (
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/fsys"
)

// The log's written pages leave the process's resident set once the
// writer is a window past them (issue 34): the writer never goes back to
// them, and only readers behind the live tail (catch-up, followers,
// snapshots, backup) read them. The preparer drops them (fsys.Release)
// from its maps, which keep mapping them: they stay in the page cache,
// where a read faults them back in. A page not yet flushed stays dirty
// there (the map's dirty bit goes to the page), and the flusher's msync,
// a sync of the file's range, writes it back all the same: waiting for
// the flush would keep a writer faster than the disk resident up to the
// mapped segments (a GiB at the defaults). A page is dropped once it lies
// a window (PrefaultWindow, or the segment) behind the committed end, so
// that a reader just behind the writer still finds it mapped:
//
//   - in the writer's segment, a window at a time, from where the last
//     release ended;
//   - a sealed segment, the rest of it, once it is not in use;
//   - and again from a segment's start when a reader used it since its
//     last release (pin marks its use), since it may have mapped pages.
//
// The preparer does this each round (every half window the writer writes,
// and at each segment change), not while the store's replay reads what
// recovery checked (ForgetChecked); on an idle log the pages read
// meanwhile stay until the writer moves on. A log whose mapped segments hold at most
// ReleaseAbove bytes (small segments: eviction bounds them) releases
// nothing: there a release per segment costs the writer more (a system
// call and a TLB flush a segment, measured +30% an 8 KB append at 128 KB
// segments on ext4) than the few MiB it gives back.

// ReleaseAbove is the bound on the mapped segments' bytes
// (MaxMappedSegments x SegmentSize) above which the log releases its
// written pages.
const ReleaseAbove = 64 << 20

// releaseRange is a part of a mapped segment to drop, pinned meanwhile,
// and what s.released and s.populated become once it is dropped.
type releaseRange struct {
	s                   *segment
	from, to            int64
	released, populated int64
}

// releaseWritten drops the pages of the mapped segments that lie a window
// behind the committed end (see above). The preparer's.
func (l *Log) releaseWritten() {
	edge := l.end.Load() - l.window
	l.releaseEach(func(s *segment) (releaseRange, bool) { return l.releasableLocked(s, edge) })
}

// releaseEach drops, of each mapped segment, the part pick reports (under
// mu; the segment is pinned meanwhile), and notes what each has
// released; it reports whether it looked. The preparer's.
func (l *Log) releaseEach(pick func(*segment) (releaseRange, bool)) bool {
	if !l.releases || l.replaying() {
		// Not under the store's replay after recovery either: it reads
		// every page recovery just read, which a release would make it
		// fault in again (a tenth of an Open's CPU, 1 GiB recovered).
		return false
	}
	l.mu.Lock()
	jobs := l.releasing[:0]
	for _, s := range l.maps {
		if j, ok := pick(s); ok {
			s.pins++
			jobs = append(jobs, j)
		}
	}
	l.mu.Unlock()
	for _, j := range jobs {
		if err := fsys.Release(j.s.data[j.from:j.to]); err != nil {
			l.log.Warn("releasing a segment's pages failed", zap.String("segment-path", j.s.path), zap.Error(err))
		}
	}
	l.mu.Lock()
	for i, j := range jobs {
		l.tick++
		j.s.releasedAt = l.tick
		j.s.released, j.s.populated = j.released, j.populated
		j.s.pins--
		jobs[i] = releaseRange{}
	}
	l.releasing = jobs[:0]
	if len(jobs) > 0 {
		l.unpinned.Broadcast() // a Recycle may wait for these pins
	}
	l.mu.Unlock()
	return true
}

// releasableLocked reports the part of s to drop below edge, if any:
// from where its last release ended (from its start when a reader used it
// since) to edge, window-aligned, for the writer's segment once that is a
// window more or a reader used it; all of a sealed one not in use. Under
// mu.
func (l *Log) releasableLocked(s *segment, edge int64) (releaseRange, bool) {
	if s.isReady || s.data == nil || s.base > l.cur.base || s.base+l.window > edge {
		return releaseRange{}, false
	}
	j := releaseRange{s: s, from: s.released, to: l.segSize, released: l.segSize, populated: s.populated}
	read := s.used > s.releasedAt
	if read {
		j.from = 0
	}
	if s == l.cur {
		j.to = min((edge-s.base)/l.window*l.window, l.segSize)
		j.released = max(s.released, j.to)
		return j, j.to-s.released >= l.window || read
	}
	return j, s.base+l.segSize <= edge && s.pins == 0 && (s.released < l.segSize || read)
}

// At rest (the store calls Rest once the writer has been quiet a while,
// see Store.housekeeping) the preparer drops the rest too: the writer's
// segment up to its end and the window faulted in ahead of it, the first
// window of the segments made ahead, and the sealed segments a reader
// mapped again. What a writer that comes back finds is then in the page
// cache, not mapped: its first commit kicks the preparer (prepAt), which
// faults a window ahead of it in again; until then its pages cost it a
// minor fault each (4 KiB of records). Each Rest drops only what was
// mapped since the last one (read, written or faulted in ahead), so a
// store that stays quiet asks it every round for nearly nothing.

// Rest asks the preparer to drop from the resident set what it keeps
// there for the writer (see above). It does not block; safe from any
// goroutine.
func (l *Log) Rest() {
	select {
	case l.restKick <- struct{}{}:
	default:
	}
}

// releaseAtRest is Rest's work, the preparer's.
func (l *Log) releaseAtRest() {
	end := l.end.Load()
	if l.releaseEach(func(s *segment) (releaseRange, bool) { return l.restingLocked(s, end) }) {
		// The writer's next commit past end kicks the preparer, which
		// readies its window again.
		l.prepAt.Store(end)
	}
}

// restingLocked reports the part of s to drop at rest with the log ending
// at end, if any: of the writer's segment, from where its last release
// ended (its start if a reader used it since), once it was written,
// read or faulted in ahead since; of a segment made ahead, all once its
// first window was faulted in; of a sealed one not in use, what
// releasableLocked would drop with nothing kept behind the end. Under
// mu.
func (l *Log) restingLocked(s *segment, end int64) (releaseRange, bool) {
	if s.data == nil {
		return releaseRange{}, false
	}
	page := int64(fsys.PageSize)
	read := s.used > s.releasedAt
	switch {
	case s.isReady:
		return releaseRange{s: s, to: l.segSize}, s.populated > 0
	case s == l.cur:
		// To the segment's end: an madvise costs next to nothing where
		// nothing is mapped, and the kernel may map a page or two past
		// what it was asked to fault in.
		kept := (end - s.base) &^ (page - 1)
		j := releaseRange{s: s, from: s.released, to: l.segSize, released: kept, populated: kept}
		if read {
			j.from = 0
		}
		return j, read || s.released != kept || s.populated > kept
	}
	return l.releasableLocked(s, end+l.segSize)
}
