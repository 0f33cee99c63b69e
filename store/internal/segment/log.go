package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// Log is the log itself: segments written and read through their maps.
//
// Concurrency: one writer (the store's write lock serializes reserve,
// commit, rollback and recycle) and any number of readers. Readers see
// only [oldest, end); end is published after the bytes under it are
// written, so a reader never sees a half-written record. The segment
// table and the maps are guarded by mu; a pinned segment stays mapped.
type Log struct {
	dir       string
	segSize   int64
	slots     int64 // segments a file holds (Meta.Slots)
	fileSize  int64 // slots * segSize
	maxMapped int
	meta      *Meta
	log       *zap.Logger

	mu    sync.Mutex
	segs  map[int64]*segment // by segment index (base / segSize)
	files map[int64]*segFile // the open files, by their first position
	maps  []*segment         // the mapped ones
	last  int64              // index of the newest segment in segs
	tick  uint64
	free  []*segFile // recycled files waiting for reuse (ring.go)
	// retiring are segments the log no longer holds, for the preparer to
	// unmap, and retiringFiles their files, to keep for reuse after
	// (ring.go).
	retiring      []*segment
	retiringFiles []*segFile
	releasing     []releaseRange // the preparer's scratch (release.go)
	// releases is whether the mapped segments may hold more than
	// ReleaseAbove bytes, and so written pages are released (release.go).
	releases bool
	// makingFile is the first position of the file being made, -1 if
	// none: the writer and the preparer never make the same one.
	makingFile int64
	// ready are the next segments, in order, made ahead by the preparer
	// goroutine: at most maxReady of them.
	ready     []*segment
	maxReady  int
	preparing int64 // base of the segment being made, -1 if none
	prepCond  *sync.Cond
	unpinned  *sync.Cond // a segment being recycled lost its last pin

	// Writer state, touched only under the store's write lock.
	cur  *segment
	wpos int64
	// crossed are the segments the writer left since the last commit or
	// rollback, oldest first. They keep the writer's pin until then, so
	// that eviction cannot unmap one a rollback must zero and go back to.
	crossed []*segment

	dirDirty atomic.Bool // a segment file was made or renamed since the last directory sync

	end     atomic.Int64 // readers may read below this
	oldest  atomic.Int64 // and at or above this
	flushed atomic.Int64 // durable below this

	// checkedFrom and checkedTo are the range recover checked record by
	// record in this Open: reads there skip the records' CRCs (the
	// store's replay reads it again at once), and the preparer releases
	// no written pages (release.go), until ForgetChecked.
	checkedFrom, checkedTo atomic.Int64

	// markedFrom is where marked records begin: every record at or after
	// it carries its segment's mark, those before it (written before
	// marks existed) zero.
	markedFrom int64

	// window is how far the preparer allocates and faults pages in ahead
	// of the writer; growMu serializes the growth of a segment's alloc
	// (the preparer's, or the writer's when it is ahead of it).
	window int64
	growMu sync.Mutex
	prepAt atomic.Int64 // the writer kicks the preparer once its end passes this
	// switcher kicks the preparer a while after a segment switch
	// (switch.go).
	switcher switchTimer

	evict func() // evictLocked's work (newEvict)

	prepKick chan struct{}
	restKick chan struct{} // Rest's (release.go)
	done     chan struct{}
	wg       sync.WaitGroup
}

// PrefaultWindow bounds what the preparer makes ready ahead of the writer:
// allocated, and faulted in writable. It bounds, too, what a new segment
// costs before anything is written into it (an idle node holds two such
// windows, its current segment's and the next one's, not two whole
// segments), while keeping ahead of a writer copying at memory speed.
const PrefaultWindow = 4 << 20

// ReadyAhead bounds the bytes of the segments the preparer makes ahead of
// the writer's (allocated, mapped, and faulted in up to a window each):
// one segment of 1 MiB or more, several smaller ones.
const ReadyAhead = 1 << 20

// End is the end of the committed log: readers may read below it.
func (l *Log) End() int64 { return l.end.Load() }

// Oldest is the oldest position the log retains.
func (l *Log) Oldest() int64 { return l.oldest.Load() }

// Flushed is the end of the durable log.
func (l *Log) Flushed() int64 { return l.flushed.Load() }

// WritePos is where the next record goes (past End while a write is
// reserved and not committed). Writer only.
func (l *Log) WritePos() int64 { return l.wpos }

// SegmentSize is the size of every segment file, fixed for the life of
// the directory.
func (l *Log) SegmentSize() int64 { return l.segSize }

// RetainedAfter is how many bytes the log would hold, from its oldest
// retained position to where the next record goes, once a record of size
// bytes is appended: the tail of the segment it skips when it does not
// fit counts too. Writer only.
func (l *Log) RetainedAfter(size int) int64 {
	padded := entrySize(size)
	need := l.wpos + padded - l.oldest.Load()
	if off := l.wpos % l.segSize; off+padded > l.segSize {
		need += l.segSize - off // the skipped tail
	}
	return need
}

// SegmentPath is the path of the segment file that holds position pos.
func (l *Log) SegmentPath(pos int64) string {
	return filepath.Join(l.dir, segmentName(l.fileBase(pos)))
}

// FileOffset is the offset of position pos in its segment file.
func (l *Log) FileOffset(pos int64) int64 { return pos - l.fileBase(pos) }

// fileBase is the first position of the file holding pos.
func (l *Log) fileBase(pos int64) int64 { return pos - pos%l.fileSize }

// MaxFreeSegments is how many recycled files are kept for reuse; more are
// deleted so that retention gives the space back.
const MaxFreeSegments = 2

// Open opens (creating if needed) the segments in dir and recovers
// the tail: it checks every record from the committed position on,
// truncates at the first bad or torn one (copying the damaged bytes aside
// first) and leaves the log ready to append. It reports where the
// recovered log ends.
func Open(dir string, m *Meta, maxMapped int, log *zap.Logger) (*Log, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fsys.FileError("mkdir", dir, err)
	}
	l := &Log{
		dir:        dir,
		segSize:    m.segSize,
		slots:      m.slots,
		fileSize:   m.slots * m.segSize,
		maxMapped:  max(maxMapped, 2),
		meta:       m,
		log:        log,
		segs:       make(map[int64]*segment),
		files:      make(map[int64]*segFile),
		prepKick:   make(chan struct{}, 1),
		restKick:   make(chan struct{}, 1),
		done:       make(chan struct{}),
		preparing:  -1,
		makingFile: -1,
		window:     min(m.segSize, PrefaultWindow),
	}
	l.releases = int64(l.maxMapped)*l.segSize > ReleaseAbove
	// Segments ahead, by bytes (ReadyAhead), so that a writer outrunning
	// the preparer for a while still finds its next segment made; at
	// most half the maps, at least one.
	l.maxReady = int(max(1, min(ReadyAhead/m.segSize, int64(l.maxMapped/2))))
	if from := m.Get(OffMarkedFrom); from != 0 {
		l.markedFrom = int64(from - 1)
	} else {
		// A directory made before marks existed: its records carry none.
		// Marks begin where its recovered log ends.
		l.markedFrom = math.MaxInt64
	}
	l.prepCond = sync.NewCond(&l.mu)
	l.unpinned = sync.NewCond(&l.mu)
	l.evict = l.newEvict()
	if err := l.load(); err != nil {
		l.closeFiles()
		return nil, err
	}
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, err
	}
	l.newSwitchTimer()
	l.wg.Add(1)
	go l.prepareLoop()
	l.kickPrepare()
	return l, nil
}

// load opens the segment files of the directory: a contiguous run of
// segments from the oldest retained one (every slot of a file from it on:
// recovery drops those after the end). Free files join the free list;
// temp files are removed; anything else is warned about and left alone.
func (l *Log) load() error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fsys.FileError("readdir", l.dir, err)
	}
	var bases []int64
	for _, e := range entries {
		name := e.Name()
		if base, ok := parseSegmentName(name); ok {
			if base%l.fileSize != 0 {
				l.log.Warn("ignoring segment file not on a file boundary", zap.String("segment-path", filepath.Join(l.dir, name)))
				continue
			}
			bases = append(bases, base)
			continue
		}
		switch {
		case strings.HasSuffix(name, freeSuffix):
			l.free = append(l.free, &segFile{path: filepath.Join(l.dir, name)})
		case strings.HasSuffix(name, ".tmp"):
			os.Remove(filepath.Join(l.dir, name))
		default:
			l.log.Warn("unexpected file in the log directory", zap.String("path", filepath.Join(l.dir, name)))
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })

	oldest := l.meta.Pos(OffReading)
	for _, fb := range bases {
		path := filepath.Join(l.dir, segmentName(fb))
		if fb+l.fileSize <= oldest {
			// Recycled: free for reuse (or deleted, when enough are).
			l.keepFree(&segFile{path: path})
			continue
		}
		file, err := openExisting(path, l.fileSize)
		if err != nil {
			return err
		}
		l.files[fb] = file
		for base := fb; base < fb+l.fileSize; base += l.segSize {
			if base+l.segSize > oldest {
				file.refs++
				l.segs[base/l.segSize] = &segment{base: base, mark: markOf(base, l.segSize), file: file, off: base - fb, path: path}
			}
		}
	}
	if len(l.segs) == 0 {
		// A new log, or one whose every segment is gone: start at the
		// oldest position the metafile knows, on a segment boundary.
		base := oldest - oldest%l.segSize
		s, err := l.newFileSegment(base)
		if err != nil {
			return err
		}
		l.segs[base/l.segSize] = s
		oldest = base
	}
	first := l.firstIndex()
	if oldest < first*l.segSize {
		oldest = first * l.segSize
	}
	// The run must be contiguous: a gap means lost files, and what lies
	// after the gap cannot be trusted to follow what lies before it.
	for i := first; ; i++ {
		if _, ok := l.segs[i]; !ok {
			aside := map[string]bool{}
			for j, s := range l.segs {
				if j > i {
					l.closeSegment(s)
					delete(l.segs, j)
					aside[s.path] = true
				}
			}
			for path := range aside {
				l.log.Error("segment file after a gap in the log, setting it aside", zap.String("segment-path", path))
				if err := os.Rename(path, path+".orphan"); err != nil {
					return fsys.FileError("rename", path, err)
				}
			}
			break
		}
	}
	l.last = -1
	for i := range l.segs {
		l.last = max(l.last, i)
	}
	l.oldest.Store(oldest)
	return nil
}

func (l *Log) firstIndex() int64 {
	first := int64(-1)
	for i := range l.segs {
		if first < 0 || i < first {
			first = i
		}
	}
	return first
}

// lastIndex is the index of the newest segment in segs. Guarded by mu
// once the preparer runs.
func (l *Log) lastIndex() int64 { return l.last }

// recover finds the end of the log, starting from the committed position
// in the metafile (everything before it was flushed and checked when it
// was written) and checking each record after it.
func (l *Log) recover() error {
	start := max(l.meta.Pos(OffCommitted), l.oldest.Load())
	lastSeg := l.lastIndex()
	if start >= (lastSeg+1)*l.segSize {
		start = lastSeg * l.segSize
	}
	start -= start % record.Align
	pos := start
	var bad error
	for {
		idx := pos / l.segSize
		s := l.segs[idx]
		if s.data == nil {
			if err := s.mapIn(l.segSize); err != nil {
				return err
			}
			l.noteMapped(s)
		}
		off := pos - s.base
		next, err := l.scanSegment(s, off)
		if err != nil && !errors.Is(err, record.ErrCorrupt) {
			return err
		}
		pos = s.base + next
		if err != nil {
			bad = err
			break
		}
		// The written part of this segment ends at next: nothing of this
		// use of the file there (zeros, or stale bytes), or its end.
		// The log goes on in the next segment only if the writer moved
		// there (movedOn): the next segment's first record is valid, of
		// this use, and did not fit here; else what follows is a hole or
		// stale bytes (a lost page) and the log ends here.
		nextSeg := l.segs[idx+1]
		if nextSeg == nil {
			break
		}
		if nextSeg.data == nil {
			if err := nextSeg.mapIn(l.segSize); err != nil {
				return err
			}
			l.noteMapped(nextSeg)
		}
		moved, err := l.movedOn(s, next, nextSeg)
		if err != nil {
			return err
		}
		if !moved {
			break
		}
		pos = nextSeg.base
	}
	if err := l.truncate(pos, bad); err != nil {
		return err
	}
	// Everything kept is made durable before anything new is acknowledged.
	for i := start / l.segSize; i <= pos/l.segSize; i++ {
		if s := l.segs[i]; s != nil && s.data != nil {
			hi := min(pos-s.base, l.segSize)
			if err := fsys.SyncRange(s.data, 0, int(hi)); err != nil {
				return err
			}
		}
	}
	l.checkedFrom.Store(start)
	l.checkedTo.Store(pos)
	if l.markedFrom == math.MaxInt64 {
		l.markedFrom = pos
	}
	l.meta.Put(OffMarkedFrom, uint64(l.markedFrom)+1)
	l.wpos = pos
	l.cur = l.segs[pos/l.segSize]
	l.cur.pins++
	l.prepAt.Store(pos) // the preparer's first round readies the window
	l.end.Store(pos)
	l.flushed.Store(pos)
	l.meta.SetPos(OffWriting, pos)
	l.meta.SetPos(OffCommitted, pos)
	l.meta.SetPos(OffReading, l.oldest.Load())
	if l.dirDirty.Swap(false) {
		if err := fsys.SyncDir(l.dir); err != nil {
			return err
		}
	}
	return l.meta.Sync()
}

// movedOn reports whether a writer at offset off of s went on to next, the
// segment after it: next's first record is valid and of this use, and it
// would not have fit in the space left at off (the writer moves on only
// then), where no record's prefix is (a record there whose header reads
// as zeros is damage, not the end). The end marker the writer leaves at
// off is what readers go by; recovery does not need it.
func (l *Log) movedOn(s *segment, off int64, next *segment) (bool, error) {
	var moved bool
	err := fsys.Guard(func() error {
		first, _, err := l.decodeAt(next, 0)
		if err != nil || first == nil {
			return err
		}
		if !l.framed(s, off) {
			moved = int64(record.Padded(first.Size())) > l.segSize-off
		} else {
			// Not on the end marker alone: a damaged record's prefix may
			// read as one. (Stray bytes may be on it, too.)
			moved = entrySize(first.Size()) > l.segSize-off && !l.prefixed(s, off, kindRecord)
		}
		return nil
	})
	if err != nil && !errors.Is(err, record.ErrCorrupt) {
		return false, err
	}
	return moved, nil
}

// scanSegment walks the records of s from off and returns the offset of the
// first position that does not hold a valid record of this use of the
// file: the end of the data (nothing there, or stale bytes of an earlier
// use: nil error) or a bad record (an error wrapping ErrCorrupt).
func (l *Log) scanSegment(s *segment, off int64) (end int64, err error) {
	err = fsys.Guard(func() error {
		for {
			r, next, err := l.decodeAt(s, off)
			if err != nil {
				return fmt.Errorf("%w (segment %s, offset %d)", err, s.path, off)
			}
			if r == nil {
				return nil
			}
			off = next
		}
	})
	return off, err
}

// The log frames each record with a prefix of its own, which is not part
// of the record (the record's bytes are the wire's):
//
//	0               4               8
//	+---------------+---------------+------------------------------+
//	| mark (u32)    | kind (u32)    | record, padded to 8 bytes    |
//	+---------------+---------------+------------------------------+
//
// mark is the segment's (markOf): it tells a record written since a file
// was reused from a stale one of the file's earlier use, so that a reused
// file needs no zeroing. kind is 1 for a record, 2 for the end marker the
// writer leaves where a segment's records end when it moves to the next
// segment (no record follows it). A zero prefix (a zeroed page, a hole)
// and one with another mark (stale) both mean "nothing of this use here".
// Records before markedFrom, written before the prefix existed, have none.
const (
	prefixSize = 8
	kindRecord = 1
	kindEnd    = 2
)

// framed reports whether the entry at offset off of s has a prefix.
func (l *Log) framed(s *segment, off int64) bool { return s.base+off >= l.markedFrom }

// entrySize is the log bytes a record of size bytes takes, framed.
func entrySize(size int) int64 { return prefixSize + int64(record.Padded(size)) }

// EntrySize is the log bytes the next record of size bytes will take.
func (l *Log) EntrySize(size int) int64 { return entrySize(size) }

// prefixed reports whether s holds a prefix of this use of kind at off.
// Under a fault guard.
func (l *Log) prefixed(s *segment, off int64, kind uint32) bool {
	return off+prefixSize <= l.segSize &&
		binary.LittleEndian.Uint32(s.data[off:]) == s.mark && binary.LittleEndian.Uint32(s.data[off+4:]) == kind
}

// putPrefix writes s's prefix of kind at off. Writer only, under a fault
// guard.
func (l *Log) putPrefix(s *segment, off int64, kind uint32) {
	binary.LittleEndian.PutUint32(s.data[off:], s.mark)
	binary.LittleEndian.PutUint32(s.data[off+4:], kind)
}

// ForgetChecked ends what the store's replay of the range recover checked
// needs (it calls it once the replay is done): reads there check the
// records' CRCs again, and the preparer releases the written pages again.
func (l *Log) ForgetChecked() {
	l.checkedTo.Store(l.checkedFrom.Load())
	l.kickPrepare()
}

// replaying reports whether the store's replay may still read the range
// recover checked (ForgetChecked not yet called).
func (l *Log) replaying() bool { return l.checkedTo.Load() > l.checkedFrom.Load() }

// decodeAt checks the entry at offset off of s: the record (nil: nothing
// of this use is there) and the offset of the next entry. The CRC of a
// record recover checked is not checked again until ForgetChecked.
func (l *Log) decodeAt(s *segment, off int64) (record.Record, int64, error) {
	decode := record.Decode
	if pos := s.base + off; pos >= l.checkedFrom.Load() && pos < l.checkedTo.Load() {
		decode = record.DecodeChecked
	}
	if !l.framed(s, off) {
		if off+record.HeaderSize > l.segSize {
			return nil, off, nil
		}
		r, err := decode(s.data[off:])
		if err != nil || r == nil {
			return nil, off, err
		}
		return r, off + int64(record.Padded(r.Size())), nil
	}
	if off+prefixSize+record.HeaderSize > l.segSize || !l.prefixed(s, off, kindRecord) {
		return nil, off, nil
	}
	r, err := decode(s.data[off+prefixSize:])
	if err != nil || r == nil {
		// A prefix whose record did not make it (a torn write): the end.
		return nil, off, err
	}
	return r, off + entrySize(r.Size()), nil
}

// truncate makes pos the end of the log: it copies damaged bytes aside
// (when cause says the end is a bad record), zeroes the rest of the
// segment, and deletes every segment after it.
func (l *Log) truncate(pos int64, cause error) error {
	idx := pos / l.segSize
	s := l.segs[idx]
	off := pos - s.base
	if cause != nil {
		aside, err := l.copyAside(s, off)
		if err != nil {
			return err
		}
		l.log.Warn("truncated the log at a bad record",
			zap.String("segment-path", s.path), zap.Int64("offset", off),
			zap.String("copied-to", aside), zap.Error(cause))
	}
	if off < l.segSize {
		// Discard what follows even after a clean end: bytes of this use
		// of the file after a hole would otherwise read as records again
		// behind the ones written next. What is discarded reads as zeros
		// and is allocated again ahead of the writer.
		page := int64(fsys.PageSize)
		pageEnd := min((off+page-1)&^(page-1), l.segSize)
		if off < pageEnd {
			// The rest of the page holding the last record's end: zeroed
			// in place (it is allocated, the record's bytes are in it).
			if err := fsys.Guard(func() error { clear(s.data[off:pageEnd]); return nil }); err != nil {
				return err
			}
			if err := fsys.SyncRange(s.data, int(off), int(pageEnd)); err != nil {
				return err
			}
		}
		s.alloc.Store(pageEnd)
		if pageEnd < l.segSize {
			allocated, err := fsys.Discard(s.file.f, s.off+pageEnd, l.segSize-pageEnd)
			if err != nil {
				return err
			}
			if err := s.file.f.Sync(); err != nil {
				return fsys.FileError("fsync", s.path, err)
			}
			if allocated {
				s.alloc.Store(l.segSize)
			}
		}
	}
	// Later segments are discarded, their files deleted, not kept for
	// reuse: a file is reused only for segments after every one it held,
	// so that its stale records never carry the mark of its next use.
	later := map[string]bool{}
	for i, t := range l.segs {
		if i > idx {
			l.noteUnmapped(t)
			l.closeSegment(t)
			delete(l.segs, i)
			if t.file != s.file {
				later[t.path] = true
			}
		}
	}
	if next := s.off + l.segSize; next < l.fileSize {
		// The slots after s in its file: they may hold records of this
		// use written after the end (behind a torn record).
		if _, err := fsys.Discard(s.file.f, next, l.fileSize-next); err != nil {
			return err
		}
		if err := s.file.f.Sync(); err != nil {
			return fsys.FileError("fsync", s.path, err)
		}
	}
	for path := range later {
		if err := os.Remove(path); err != nil {
			return fsys.FileError("remove", path, err)
		}
	}
	l.last = idx
	return nil
}

// copyAside saves the bytes of s from off to the end of its non-zero data
// into <dir>/corrupt/, so that a truncation never destroys the evidence.
func (l *Log) copyAside(s *segment, off int64) (string, error) {
	var data []byte
	if err := fsys.Guard(func() error {
		end := l.segSize
		for end > off && s.data[end-1] == 0 {
			end--
		}
		data = append([]byte(nil), s.data[off:end]...)
		return nil
	}); err != nil {
		return "", err
	}
	return l.saveAside(s.base, off, data)
}

// saveAside writes data, the bytes at offset off of the segment at base,
// to a new file in <dir>/corrupt/, durably: the file, the directory and
// the new corrupt/ directory's entry are synced before it returns, so
// that a crash after the caller overwrites the original never loses both.
func (l *Log) saveAside(base, off int64, data []byte) (string, error) {
	dir := filepath.Join(filepath.Dir(l.dir), "corrupt")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fsys.FileError("mkdir", dir, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s.%d.%d.bad", segmentName(base), off, time.Now().Unix()))
	if err := fsys.CreateAtomic(path, fsys.WriteSynced(data)); err != nil {
		return "", err
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil { // the new corrupt/ directory
		return "", err
	}
	return path, nil
}

// prepareLoop keeps the writer from system calls and page faults: each
// round it readies a window ahead of the writer in its segment (allocated
// and faulted in, see ahead), and makes the next segment (created or
// reused, mapped, its first window readied; maxReady of them), so that
// moving to it is a pointer swap, not a file creation; last, it drops the
// written pages behind the writer from the resident set (release.go). The
// writer kicks it when it passes prepAt, and at every segment switch.
func (l *Log) prepareLoop() {
	defer l.wg.Done()
	for {
		select {
		case <-l.done:
			return
		case <-l.restKick:
			l.releaseAtRest()
			continue
		case <-l.prepKick:
		}
		l.retireQueued()
		l.mu.Lock()
		cur := l.cur
		cur.pins++ // not unmapped under ahead
		l.mu.Unlock()
		if err := l.ahead(cur, l.end.Load()-cur.base+l.window); err != nil {
			l.log.Warn("readying the writer's next pages failed", zap.String("segment-path", cur.path), zap.Error(err))
		}
		l.unpin(cur)

		for l.prepareNext() {
		}
		l.prepareFileAhead()
		l.releaseWritten()
	}
}

// prepareNext makes the next segment after the ready ones, unless
// maxReady are ready already (or one is being made), and reports whether
// it made one.
func (l *Log) prepareNext() bool {
	l.mu.Lock()
	if len(l.ready) > 0 && l.ready[0].base != (l.lastIndex()+1)*l.segSize {
		// Left over from a rollback that moved the writer back.
		l.dropReadyLocked()
	}
	want := (l.lastIndex() + 1 + int64(len(l.ready))) * l.segSize
	if len(l.ready) >= l.maxReady || l.preparing >= 0 {
		l.evictLocked()
		l.mu.Unlock()
		return false
	}
	select {
	case <-l.done:
		l.mu.Unlock()
		return false
	default:
	}
	l.preparing = want
	l.mu.Unlock()

	s, err := l.makeSegment(want, l.window)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.preparing = -1
	if err == nil {
		s.isReady = true
		l.ready = append(l.ready, s)
	} else {
		l.log.Warn("preparing the next segment failed", zap.Int64("base", want), zap.Error(err))
	}
	l.prepCond.Broadcast()
	l.evictLocked()
	return err == nil
}

// ahead readies [0, to) of s for the writer: allocated (by whole windows,
// see grow) and faulted in writable, and sets the writer's next kick at
// half a window before what is ready. s is pinned (mapped).
func (l *Log) ahead(s *segment, to int64) error {
	to = min(to, l.segSize)
	if err := l.grow(s, to); err != nil {
		return err
	}
	// From where the writer is, never behind it: its pages there are
	// written, and may have been released (release.go) since this
	// segment's last round, when the writer outran the preparer into it;
	// faulting them in again would put them back in the resident set.
	from := max(s.populated, s.released) // the preparer's alone: no lock
	if w := l.end.Load() - s.base; w > from {
		from = min(w, to)
	}
	if from < to {
		if err := fsys.Guard(func() error { s.populate(from, to); return nil }); err != nil {
			return err
		}
		s.populated = to
	}
	if s == l.curSnapshot() {
		at := s.base + to - l.window/2
		if to == l.segSize {
			// All of the segment is ready: the next kick is the
			// writer's switch to the next one.
			at = s.base + l.segSize
		}
		l.prepAt.Store(at)
	}
	return nil
}

// curSnapshot is the writer's segment, read under mu.
func (l *Log) curSnapshot() *segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// grow allocates s up to at least need bytes from its start, a window at
// a time, so that the writer never writes into unallocated space: a full
// disk is an ErrDiskFull here, never a SIGBUS on a page.
func (l *Log) grow(s *segment, need int64) error {
	if s.alloc.Load() >= need {
		return nil
	}
	l.growMu.Lock()
	defer l.growMu.Unlock()
	from := s.alloc.Load()
	if from >= need {
		return nil
	}
	to := min((need+l.window-1)/l.window*l.window, l.segSize)
	if err := fsys.AllocateRange(s.file.f, s.off+from, to-from); err != nil {
		return err
	}
	s.alloc.Store(to)
	return nil
}

// makeSegment makes the segment at base in its file (made, or a free one
// reused, when none holds base yet: see fileFor), maps it, and readies
// its first ready bytes for the writer (see ahead).
func (l *Log) makeSegment(base, ready int64) (*segment, error) {
	s, err := l.newFileSegment(base)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	err = s.mapIn(l.segSize)
	l.mu.Unlock()
	if err == nil && ready > 0 {
		err = l.ahead(s, ready) // s is not in maps yet: not evicted
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.closeSegment(s)
		return nil, err
	}
	l.noteMapped(s)
	return s, nil
}

// newFileSegment makes the segment at base in its file (fileFor),
// allocated for the writer (newSegment), not mapped.
func (l *Log) newFileSegment(base int64) (*segment, error) {
	file, err := l.fileFor(base)
	if err != nil {
		return nil, err
	}
	s, err := newSegment(file, base, base-l.fileBase(base), l.segSize, l.window)
	if err != nil {
		l.mu.Lock()
		file.refs-- // the file stays, open, for the next try
		l.mu.Unlock()
		return nil, err
	}
	return s, nil
}

// closeSegment closes s (see segment.close) and forgets its file with its
// last segment; it reports whether s was that. Under mu once the log runs.
func (l *Log) closeSegment(s *segment) bool {
	last, err := s.close()
	if err != nil {
		l.log.Warn("closing a segment failed", zap.String("segment-path", s.path), zap.Error(err))
	}
	if last {
		delete(l.files, s.base-s.off)
	}
	return last
}

// dropReadyLocked gives the ready segments up (retireLocked): they were
// made for positions the writer no longer goes to next.
func (l *Log) dropReadyLocked() {
	for _, p := range l.ready {
		if err := l.retireLocked(p, true); err != nil {
			l.log.Warn("retiring a prepared segment failed", zap.Error(err))
		}
	}
	l.ready = nil
}

// Prepared reports whether the preparer has made every segment it keeps
// ready and is making no segment or file now: until the writer moves on,
// it changes no file. For tests that change the log's files under it.
func (l *Log) Prepared() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ready) >= l.maxReady && l.preparing < 0 && l.makingFile < 0
}

func (l *Log) kickPrepare() {
	select {
	case l.prepKick <- struct{}{}:
	default:
	}
}

// advance moves the writer to the next segment (the one the preparer
// made, or one made here if the preparer failed or is not there yet),
// leaving the end marker behind. Under a fault guard.
func (l *Log) advance() error {
	if off := l.wpos - l.cur.base; off+prefixSize <= l.segSize {
		if err := l.grow(l.cur, off+prefixSize); err != nil {
			return err
		}
		l.putPrefix(l.cur, off, kindEnd)
	}
	base := l.cur.base + l.segSize
	idx := base / l.segSize
	l.mu.Lock()
	var s *segment
	for {
		if s = l.segs[idx]; s != nil { // still there after a rollback
			break
		}
		if len(l.ready) > 0 && l.ready[0].base == base {
			s, l.ready = l.ready[0], l.ready[1:]
			s.isReady = false
			break
		}
		if l.preparing != base {
			break
		}
		l.prepCond.Wait()
	}
	if s == nil {
		l.dropReadyLocked()
		l.preparing = base // keeps the preparer off this one
		l.mu.Unlock()
		var err error
		// Faulted in here by one call, not page by page as the writer
		// first touches each: a fraction of the cost (up to ReadyAhead:
		// the preparer goes on from there).
		s, err = l.makeSegment(base, min(l.window, ReadyAhead))
		l.mu.Lock()
		l.preparing = -1
		if err != nil {
			l.mu.Unlock()
			return err
		}
	}
	if s.data == nil {
		if err := s.mapIn(l.segSize); err != nil {
			l.mu.Unlock()
			return err
		}
		l.noteMapped(s)
	}
	l.segs[idx] = s
	l.last = max(l.last, idx)
	s.pins++
	l.crossed = append(l.crossed, l.cur) // pinned until commit or rollback
	l.cur.sealed = time.Now()
	l.cur = s
	// The preparer unmaps what is over the bound (munmap of a big segment
	// takes milliseconds, which the writer should not wait for) and makes
	// the next segment: soon, or at once if the writer is close.
	l.kickAtSwitch(s)
	l.mu.Unlock()
	l.wpos = base
	return nil
}

// Reserve returns the bytes of the map where a record of size bytes goes
// and its log position. Nothing is visible to readers until commit.
func (l *Log) Reserve(size int) ([]byte, int64, error) {
	padded := entrySize(size)
	if padded > l.segSize {
		return nil, 0, fmt.Errorf("%w: record of %d bytes, segment of %d", record.ErrTooLarge, size, l.segSize)
	}
	if l.wpos-l.cur.base+padded > l.segSize {
		if err := l.advance(); err != nil {
			return nil, 0, err
		}
	}
	off := l.wpos - l.cur.base
	if off+padded > l.cur.alloc.Load() {
		// Ahead of the preparer: allocate here.
		if err := l.grow(l.cur, off+padded); err != nil {
			return nil, 0, err
		}
	}
	pos := l.wpos
	l.wpos += padded
	l.putPrefix(l.cur, off, kindRecord)
	return l.cur.data[off+prefixSize : off+prefixSize+int64(size)], pos, nil
}

// Commit makes everything reserved so far visible to readers.
func (l *Log) Commit() {
	if len(l.crossed) > 0 {
		l.mu.Lock()
		l.releaseCrossedLocked()
		l.mu.Unlock()
	}
	l.end.Store(l.wpos)
	l.meta.SetPos(OffWriting, l.wpos)
	if l.wpos >= l.prepAt.Load() {
		l.kickPrepare()
	}
}

// Rollback drops everything reserved after pos (which must be at or after
// the committed end): the bytes are zeroed and the writer goes back to
// pos. Every segment the write crossed into is still pinned (crossed), so
// it is still mapped, even when the write crossed a segment's end and
// then failed (a full disk at the next window or index chunk). The writer
// goes back even when zeroing faults, so that the next record is written
// where this one failed.
func (l *Log) Rollback(pos int64) error {
	if pos >= l.wpos {
		return nil
	}
	from := l.wpos
	err := fsys.Guard(func() error {
		for base := pos - pos%l.segSize; base < from; base += l.segSize {
			s := l.segs[base/l.segSize]
			if s == nil || s.data == nil {
				return fmt.Errorf("%w: rolling back to %d, the segment at %d is not mapped", errs.ErrIO, pos, base)
			}
			lo := max(pos, base) - base
			hi := min(from, base+l.segSize) - base
			clear(s.data[lo:hi])
		}
		return nil
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if back := l.segs[pos/l.segSize]; back != l.cur {
		if back == nil || back.data == nil {
			// Not one the writer crossed from: it cannot go back there.
			return errors.Join(err, fmt.Errorf("%w: rolling back to %d, its segment is not mapped", errs.ErrIO, pos))
		}
		back.pins++
		l.cur.pins--
		l.cur = back
	}
	l.releaseCrossedLocked()
	l.wpos = pos
	return err
}

// releaseCrossedLocked drops the writer's pins on the segments it left.
func (l *Log) releaseCrossedLocked() {
	for i, s := range l.crossed {
		s.pins--
		l.crossed[i] = nil
	}
	l.crossed = l.crossed[:0]
}

// pin returns the mapped segment holding pos, mapping it if needed; unpin
// must follow.
func (l *Log) pin(pos int64) (*segment, error) {
	idx := pos / l.segSize
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.segs[idx]
	if s == nil || pos < l.oldest.Load() {
		if pos < l.oldest.Load() {
			return nil, fmt.Errorf("%w: position %d", errs.ErrRecycled, pos)
		}
		return nil, fmt.Errorf("%w: position %d", errs.ErrBeyondEnd, pos)
	}
	s.pins++
	l.tick++
	s.used = l.tick
	if s.data == nil {
		if err := s.mapIn(l.segSize); err != nil {
			s.pins--
			return nil, err
		}
		l.noteMapped(s)
		l.evictLocked()
	}
	return s, nil
}

// pinFile returns the segment holding pos pinned, and its map if it has
// one now (kept while pinned), without mapping it if not: the file stays
// open. unpin must follow.
func (l *Log) pinFile(pos int64) (*segment, []byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.segs[pos/l.segSize]
	if s == nil || pos < l.oldest.Load() {
		if pos < l.oldest.Load() {
			return nil, nil, fmt.Errorf("%w: position %d", errs.ErrRecycled, pos)
		}
		return nil, nil, fmt.Errorf("%w: position %d", errs.ErrBeyondEnd, pos)
	}
	s.pins++
	return s, s.data, nil
}

func (l *Log) unpin(s *segment) {
	l.mu.Lock()
	s.pins--
	if s.pins == 0 && s.base < l.oldest.Load() {
		l.unpinned.Broadcast()
	}
	l.mu.Unlock()
}

// evictLocked unmaps the least recently used unpinned segments while more
// than maxMapped are mapped.
func (l *Log) evictLocked() {
	if len(l.maps) > l.maxMapped {
		l.evict()
	}
}

// newEvict makes the log's evictor once, so that eviction allocates
// nothing.
func (l *Log) newEvict() func() {
	over := func() bool { return len(l.maps) > l.maxMapped }
	candidates := func() []*segment { return l.maps }
	mayGo := func(s *segment) bool { return s.pins == 0 && !s.isReady }
	used := func(s *segment) uint64 { return s.used }
	drop := func(s *segment) bool {
		l.noteUnmapped(s)
		if err := s.unmap(); err != nil {
			l.log.Warn("unmapping a segment failed", zap.String("segment-path", s.path), zap.Error(err))
		}
		return true
	}
	return func() { fsys.EvictLRU(over, candidates, mayGo, used, drop) }
}

// noteMapped and noteUnmapped keep the list of mapped segments, so that
// eviction looks at the few maps, not at every retained segment.
func (l *Log) noteMapped(s *segment) { l.maps = append(l.maps, s) }

func (l *Log) noteUnmapped(s *segment) {
	for i, m := range l.maps {
		if m == s {
			l.maps = append(l.maps[:i], l.maps[i+1:]...)
			return
		}
	}
}

// Read calls fn with the record at pos, straight out of the map, and
// returns the position of the next record. The record is valid only while
// fn runs. A position at the unused tail of a segment moves on to the
// next segment.
func (l *Log) Read(pos int64, fn func(record.Record) error) (next int64, err error) {
	return l.ReadAt(pos, func(r record.Record, _ int64) error { return fn(r) })
}

// ReadAt is Read, with fn told where the record lies: pos, or the start
// of a later segment when pos was a segment's unused tail.
func (l *Log) ReadAt(pos int64, fn func(r record.Record, at int64) error) (next int64, err error) {
	for {
		if pos < l.oldest.Load() {
			return pos, fmt.Errorf("%w: position %d, oldest %d", errs.ErrRecycled, pos, l.oldest.Load())
		}
		if pos >= l.end.Load() {
			return pos, errs.ErrBeyondEnd
		}
		if pos%record.Align != 0 {
			return pos, fmt.Errorf("%w: %d", errs.ErrBadPosition, pos)
		}
		s, err := l.pin(pos)
		if err != nil {
			return pos, err
		}
		next, skip, err := l.readPinned(s, pos, fn)
		l.unpin(s)
		if !skip || err != nil {
			return next, err
		}
		pos = next
	}
}

func (l *Log) readPinned(s *segment, pos int64, fn func(record.Record, int64) error) (next int64, skip bool, err error) {
	next = pos
	err = fsys.GuardDoing("reading", s.path, func() error {
		off := pos - s.base
		if l.framed(s, off) && off+prefixSize+record.HeaderSize <= l.segSize &&
			!l.prefixed(s, off, kindRecord) && !l.prefixed(s, off, kindEnd) {
			// Below the end, something of this use must be here: a page
			// damaged after recovery (or stray bytes over the end marker,
			// which ReadExact's callers tell apart).
			return fmt.Errorf("%w: %w: no record at offset %d of segment %s", record.ErrCorrupt, ErrNothingHere, off, s.path)
		}
		r, end, err := l.decodeAt(s, off)
		if err != nil {
			return fmt.Errorf("%w (segment %s, offset %d)", err, s.path, off)
		}
		if r == nil {
			// The unused tail of a segment (its end marker, or too little
			// room for a record): the log goes on in the next one.
			next, skip = s.base+l.segSize, true
			return nil
		}
		next = s.base + end
		return fn(r, pos)
	})
	return next, skip, err
}

// SyncTo makes the log durable up to to (a committed position) and records
// that in the metafile. Only the flusher and Close call it.
func (l *Log) SyncTo(to int64) error {
	from := l.flushed.Load()
	if to <= from {
		return nil
	}
	if l.dirDirty.Swap(false) {
		if err := fsys.SyncDir(l.dir); err != nil {
			l.dirDirty.Store(true)
			return err
		}
	}
	for pos := from; pos < to; {
		if oldest := l.oldest.Load(); pos < oldest {
			pos = min(oldest, to) // recycled meanwhile
			continue
		}
		s, data, err := l.pinFile(pos)
		if err != nil {
			return err
		}
		var hi int64
		if data != nil {
			hi = min(to, s.base+l.segSize)
			err = fsys.SyncRange(data, int(pos-s.base), int(hi-s.base))
		} else {
			// Unmapped since it was written (small segments, a flusher
			// behind the evictions): one sync of the range from here to
			// the end of the file (or to), whatever of it is mapped.
			fb := s.base - s.off
			hi = min(to, fb+l.fileSize)
			err = fsys.SyncFileRange(s.file.f, pos-fb, hi-pos)
		}
		l.unpin(s)
		if err != nil {
			return err
		}
		pos = hi
	}
	l.flushed.Store(to)
	l.meta.SetPos(OffCommitted, to)
	return nil
}

// Recycle retires every segment wholly before upTo (never the writer's)
// and returns the new oldest position. Readers that hold a segment pinned
// finish their read first; new readers are turned away by oldest. The
// segments' maps are the preparer's to drop (ring.go).
func (l *Log) Recycle(upTo int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest := l.oldest.Load()
	defer l.kickPrepare()
	for idx := oldest / l.segSize; ; idx++ {
		s := l.segs[idx]
		if s == nil || s == l.cur || s.base+l.segSize > upTo {
			break
		}
		oldest = s.base + l.segSize
		l.oldest.Store(oldest)
		l.meta.SetPos(OffReading, oldest)
		for s.pins > 0 {
			l.unpinned.Wait()
		}
		delete(l.segs, idx)
		if err := l.retireLocked(s, false); err != nil {
			return oldest, err
		}
	}
	return oldest, nil
}

// Sealed returns, for each retained segment before the writer's, its
// base and the time it was last written, oldest first.
func (l *Log) Sealed() []Sealed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Sealed
	for _, s := range l.segs {
		if s == l.cur || s.base >= l.cur.base {
			continue
		}
		written := s.sealed
		if written.IsZero() {
			// Sealed before this process: its file's time, which its
			// later slots may have moved on.
			if st, err := s.file.f.Stat(); err == nil {
				written = st.ModTime()
			}
		}
		out = append(out, Sealed{Base: s.base, Written: written})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Base < out[j].Base })
	return out
}

// Sealed is a segment the writer has left: its first log position and
// when it was last written (when the writer left it, or for one left
// before the log was opened, its file's modification time).
type Sealed struct {
	Base    int64
	Written time.Time
}

// Counts reports how many segments the log retains (written or being
// written: those in its table) and how many segments are mapped. The
// next ones the preparer made ready ahead of the writer are mapped but
// not yet the log's, so mapped may pass segments by them (a fresh log:
// 1 segment, 2 mapped).
func (l *Log) Counts() (segments, mapped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs), len(l.maps)
}

// Close stops the preparer and closes every file. The caller flushed.
func (l *Log) Close() error {
	l.switcher.t.Stop()
	close(l.done)
	l.wg.Wait()
	return l.closeFiles()
}

func (l *Log) closeFiles() error {
	l.retireQueued()
	var first error
	for _, s := range l.segs {
		if _, err := s.close(); err != nil && first == nil {
			first = err
		}
	}
	for _, p := range l.ready {
		p.close()
	}
	for _, f := range l.files { // those made ahead, with no segment
		f.closeFD()
	}
	for _, f := range l.free {
		f.closeFD()
	}
	for _, f := range l.retiringFiles { // left under their names: the next Open sees to them
		f.closeFD()
	}
	l.retiringFiles = nil
	l.files = map[int64]*segFile{}
	l.ready = nil
	l.free = nil
	l.segs = map[int64]*segment{}
	return first
}
