package index

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// An array is an append-only sequence of fixed-size entries kept in a
// directory of memory-mapped chunk files; both indexes are built on it. It
// holds nothing per entry in the Go heap, so an index of a billion entries
// costs the page cache, not the heap.
//
// On disk, a chunk holds entries of entrySize bytes, back to back, no
// header; its size says how many. An array's first chunk holds
// firstChunkEntries, each next one twice as many as the one before, up to
// chunkEntries, so that an index of a few entries (a new topic, an origin
// that wrote once) costs a few kilobytes of disk, not a full chunk:
//
//	<dir>/00000000000000000000   entries [0, f)        (f = firstChunkEntries;
//	<dir>/0000000000000000000f   entries [f, 3f)        a name is the number
//	<dir>/000000000000000000(3f) entries [3f, 7f)       of the first entry, in
//	...                                                 20 zero-padded digits)
//
//	chunk file:
//	+-----------+-----------+-----+-------------------+-----------+
//	| entry b+0 | entry b+1 | ... | entry b+len-1     | 0 0 0 ... |
//	+-----------+-----------+-----+-------------------+-----------+
//
// Chunk names are the number of their first entry; the chunks of an array
// follow each other without a gap, so the first chunk's name is the first
// retained entry and its entry numbers need not start at zero (the origin
// index numbers entries by sequence number). A chunk is preallocated
// (fallocate) before it is mapped, so a full disk shows as ErrDiskFull when
// a chunk is made and never as a fault on a page. An all-zero entry means
// "nothing written here": a fresh chunk reads as empty, and on open the
// length is found by a binary search of the last chunk for its first zero
// entry (entries are written in order). Users must therefore never store
// an all-zero entry; append refuses one.
//
// Making a chunk (a file created, fallocated, mapped and renamed into the
// directory, then the directory fsynced) takes milliseconds, and on every
// node of a fleet at the same record, since the nodes' indexes cross
// their boundaries at the same entries. An array given a preparer
// (arrayConfig.prep) therefore has its chunks made ahead, off the
// writer's path and at no boundary: at the writer's second entry in a
// chunk (half way into the first chunk, see setPrepAt) it asks the
// preparer (a slice append, once a chunk), which keeps aheadChunks chunks
// made ahead (next), under their final names, their pages faulted in; the
// writer crossing into one swaps a pointer. The preparer makes them at a
// random moment up to prepLater after the ask (preparer.go), not at the
// ask, so that no record of the fleet finds every node making a chunk;
// at once only when the writer would get there first (askNow: the
// preparer is behind, or the writer is fast). A writer that gets there
// first, or a preparer that failed, makes the chunk itself.
// The directory fsync is on no writer's or preparer's path: sync syncs
// the directory first when a chunk file was renamed into it since
// (syncDir), so no entry of a chunk is durable before the chunk's file is.
//
// The files of the chunks dropped below first (dropChunksBefore) are not
// deleted but renamed <name>.free and kept (up to maxFreeChunks) for the
// next chunks of their size, which are then made by zeroing the file
// (fsys.ZeroBeforeRename: a crash never shows a reused file's old entries
// under its new name) and renaming it: no file created, no block
// allocated. A .free file is nobody's chunk: openArray keeps it for
// reuse (or removes it, beyond maxFreeChunks or of another size), close
// removes it.
//
// A chunk made ahead and never written is an all-zero file after a last
// chunk that is not full: openArray removes it (and any after it; a crash
// left them), close removes it, and truncate removes it before anything
// else, so that the chunks on disk stay contiguous.
//
// Concurrency: one writer, many readers. The writer calls append,
// truncate, dropChunksBefore and close, one call at a time; prepareNext
// runs on the preparer's goroutine concurrently with all of them. sync
// may run from another goroutine concurrently with the writer and the
// readers (not with close). Readers call read, len and first from any
// goroutine; they see entries below the published length only, which the
// writer stores (atomically) after the entry's bytes are in the map.
//
// At most maxMapped chunks are mapped at once; the least recently used is
// unmapped when another must be mapped. The last chunk (the one appended
// to) always stays mapped, so the writer's fast path takes no lock.
type array struct {
	dir          string
	entrySize    int
	chunkEntries uint64 // the most entries a new chunk holds
	firstChunk   uint64 // entries of the first chunk of an empty array
	maxMapped    int
	log          *zap.Logger

	length     atomic.Uint64 // entries [first, length) are readable
	firstEntry atomic.Uint64 // first retained entry: the first chunk's base
	synced     atomic.Uint64 // entries below are durable (msync'd)
	clock      atomic.Uint64 // use counter for the LRU
	closed     atomic.Bool

	// prep makes the next chunks ahead (nil: never; a chunk is made when
	// the writer crosses into it). The writer asks it once its length
	// passes prepAt (math.MaxUint64 once asked, until the writer crosses).
	prep   *preparer
	prepAt atomic.Uint64
	// askedAt and askedN are when the writer last asked (or opened or
	// truncated the array) and its length then, for askNow. Writer only.
	askedAt time.Time
	askedN  uint64

	// prepMu guards next, the chunks made ahead of the writer, in order
	// after the last of chunks: mapped, their files all zeros under their
	// final names, not in chunks yet; making, set while the preparer makes
	// the chunk after next's last without the lock (grow, truncate and
	// close wait for it on prepCond, so that a chunk is never made twice
	// and next is never dropped half made); and free, the files of dropped
	// chunks kept for reuse. The writer's grow holds it while it makes a
	// chunk itself. Lock order: prepMu, syncMu, mu.
	prepMu   sync.Mutex
	prepCond sync.Cond
	next     []*arrayChunk
	making   bool
	free     []string     // paths of <name>.free files of chunkEntries entries
	ahead    atomic.Int32 // len(next), for the writer's ask
	// dropped are the chunks dropped below first whose files are still
	// under their names, in order, for the preparer to rename free or
	// delete once asked to (reapDropped; close at the latest); reaping is
	// set while it does that without prepMu, and close waits for it on
	// prepCond. reapTo is the greatest position asked for (askReap).
	dropped []droppedChunk
	reaping bool
	reapTo  atomic.Int64

	// dirMu is held while the directory is synced; dirDirty says a chunk
	// file was renamed into it since (createChunk).
	dirMu    sync.Mutex
	dirDirty atomic.Bool

	// syncMu serialises sync with truncate and close, which move synced.
	syncMu sync.Mutex

	// mu guards chunks, the chunks' data fields and mapped. Readers copy
	// an entry out under the read lock, so no map is unmapped under them;
	// mapping, unmapping and changing the chunk list take the write lock.
	// The writer reads chunks and the last chunk's data without the lock:
	// only it changes them (under the write lock).
	mu     sync.RWMutex
	chunks []*arrayChunk // in order, contiguous; never empty once written
	mapped int
}

// arrayChunk is one chunk file, of entries [base, base+entries); data is
// its map, nil while unmapped.
type arrayChunk struct {
	base    uint64
	entries uint64
	data    []byte
	used    atomic.Uint64
	// releasedAt and releasedTo are the array's clock and length at the
	// chunk's last release from the resident set (release.go).
	releasedAt, releasedTo atomic.Uint64
}

// droppedChunk is a chunk dropped below the first entry whose file is
// still under its name: dropped for the log position pos (the log's
// oldest then).
type droppedChunk struct {
	c   *arrayChunk
	pos int64
}

// end is the entry after the chunk's last.
func (c *arrayChunk) end() uint64 { return c.base + c.entries }

// arrayConfig sizes an array.
type arrayConfig struct {
	entrySize    int
	chunkEntries uint64 // most entries per chunk file; 0 means defaultChunkEntries
	// firstChunkEntries sizes the first chunk; each next chunk doubles, up
	// to chunkEntries. 0 means chunkEntries: every chunk the same size.
	firstChunkEntries uint64
	maxMapped         int // chunks mapped at once; at least 2 are used
	// prep makes each next chunk ahead of the writer; nil: the writer
	// makes it when it crosses into it.
	prep *preparer
}

const (
	// defaultChunkEntries is the number of entries per chunk: 24 MiB
	// chunks for the topic index, 8 MiB for the origin index.
	defaultChunkEntries = 1 << 20

	// aheadChunks is how many chunks the preparer keeps made ahead of
	// the writer: with two, the one it makes is needed two chunks on, a
	// chunk and a half at least after the ask (see prepLater).
	aheadChunks = 2

	// maxFreeChunks bounds the files of dropped chunks an array keeps for
	// reuse; the others are deleted, so that retention gives space back.
	maxFreeChunks = 2

	// freeSuffix ends the name of a dropped chunk's file kept for reuse.
	freeSuffix = ".free"
)

// openArray opens the array in dir, which must exist. An array without
// chunks starts empty at entry start (its first chunk will be named
// start); an existing one ignores start. Existing chunk files keep their
// size whatever cfg says; new chunks follow cfg.
func openArray(dir string, start uint64, cfg arrayConfig, log *zap.Logger) (*array, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.entrySize <= 0 {
		return nil, fmt.Errorf("%w: array entry size %d", record.ErrInvalid, cfg.entrySize)
	}
	if cfg.chunkEntries == 0 {
		cfg.chunkEntries = defaultChunkEntries
	}
	if cfg.chunkEntries > (1<<40)/uint64(cfg.entrySize) {
		return nil, fmt.Errorf("%w: %d entries per chunk", record.ErrInvalid, cfg.chunkEntries)
	}
	if cfg.firstChunkEntries == 0 || cfg.firstChunkEntries > cfg.chunkEntries {
		cfg.firstChunkEntries = cfg.chunkEntries
	}
	a := &array{
		dir:          dir,
		entrySize:    cfg.entrySize,
		chunkEntries: cfg.chunkEntries,
		firstChunk:   cfg.firstChunkEntries,
		maxMapped:    max(cfg.maxMapped, 2),
		log:          log,
		prep:         cfg.prep,
	}
	a.prepCond.L = &a.prepMu
	a.prepAt.Store(math.MaxUint64) // set when the writer has a chunk
	chunks, err := a.scanDir()
	if err != nil {
		return nil, err
	}
	if len(chunks) == 0 {
		a.firstEntry.Store(start)
		a.length.Store(start)
		a.synced.Store(start)
		a.askedAt, a.askedN = time.Now(), start
		return a, nil
	}
	for i, c := range chunks {
		if i > 0 && c.base != chunks[i-1].end() {
			return nil, fmt.Errorf("%w: index chunks %s (of %d entries) and %s of %s are not adjacent",
				record.ErrCorrupt, fsys.NumberName(chunks[i-1].base), chunks[i-1].entries, fsys.NumberName(c.base), dir)
		}
	}
	if chunks, err = a.dropUnused(chunks); err != nil {
		return nil, err
	}
	a.chunks = chunks
	last := a.chunks[len(a.chunks)-1]
	if err := a.mapChunk(last); err != nil {
		return nil, err
	}
	a.mapped = 1
	n, err := a.scanLength(last)
	if err != nil {
		a.unmapAll()
		return nil, err
	}
	a.firstEntry.Store(chunks[0].base)
	a.length.Store(n)
	a.synced.Store(n)
	a.askedAt, a.askedN = time.Now(), n
	a.setPrepAt(last)
	return a, nil
}

// dropUnused removes the chunks made ahead of the writer and never
// written: while the last chunk is empty and the one before it is not
// full, the last one was made ahead (the writer crosses into a chunk only
// once the one before is full). An empty last chunk after a full one is
// the writer's next, and stays: it carries the array's length.
func (a *array) dropUnused(chunks []*arrayChunk) ([]*arrayChunk, error) {
	removed := false
	for len(chunks) > 1 {
		last, prev := chunks[len(chunks)-1], chunks[len(chunks)-2]
		if n, err := a.lengthOf(last); err != nil || n > last.base {
			if err != nil {
				return nil, err
			}
			break
		}
		if n, err := a.lengthOf(prev); err != nil || n == prev.end() {
			if err != nil {
				return nil, err
			}
			break
		}
		p := a.chunkPath(last.base)
		a.log.Info("removing an index chunk made ahead and never written", zap.String("path", p))
		if err := os.Remove(p); err != nil {
			return nil, fsys.FileError("remove", p, err)
		}
		chunks, removed = chunks[:len(chunks)-1], true
	}
	if !removed {
		return chunks, nil
	}
	return chunks, fsys.SyncDir(a.dir)
}

// lengthOf maps c for as long as scanLength takes to find its length.
func (a *array) lengthOf(c *arrayChunk) (uint64, error) {
	if err := a.mapChunk(c); err != nil {
		return 0, err
	}
	n, err := a.scanLength(c)
	if uerr := fsys.Unmap(c.data); err == nil && uerr != nil {
		err = uerr
	}
	c.data = nil
	return n, err
}

// setPrepAt makes the writer ask for the chunk after c at its second
// entry in c, or, if c is the array's first chunk, once c is half full: a
// chunk made ahead later than that was not ready in time for a writer
// appending back to back (BenchmarkPublishIndexBoundaries), and an index
// of a few entries (a topic or an origin written a few times) gets none
// made ahead. The second, as an ask may wake the preparer (askNow) and
// the first pays for the crossing. Without a preparer, it never asks.
func (a *array) setPrepAt(c *arrayChunk) {
	if a.prep == nil {
		return
	}
	at := c.base + min(2, c.entries)
	if c.base == a.firstEntry.Load() {
		at = c.base + c.entries/2
	}
	a.prepAt.Store(at)
}

// scanDir lists the chunk files in order, removes leftovers of an
// interrupted chunk creation and checks that each chunk is a whole number
// of entries.
func (a *array) scanDir() ([]*arrayChunk, error) {
	des, err := os.ReadDir(a.dir)
	if err != nil {
		return nil, fsys.FileError("readdir", a.dir, err)
	}
	var chunks []*arrayChunk
	for _, de := range des {
		name := de.Name()
		if a.keepFree(de) {
			continue
		}
		if strings.HasSuffix(name, fsys.TmpSuffix) || strings.HasSuffix(name, freeSuffix) {
			p := filepath.Join(a.dir, name)
			a.log.Info("removing a leftover index chunk", zap.String("path", p))
			if err := os.Remove(p); err != nil {
				return nil, fsys.FileError("remove", p, err)
			}
			continue
		}
		base, ok := fsys.ParseNumberName(name)
		if !ok || !de.Type().IsRegular() {
			a.log.Warn("unexpected file in an index directory", zap.String("path", filepath.Join(a.dir, name)))
			continue
		}
		info, err := de.Info()
		if err != nil {
			return nil, fsys.FileError("stat", filepath.Join(a.dir, name), err)
		}
		if info.Size()%int64(a.entrySize) != 0 || info.Size() == 0 {
			return nil, fmt.Errorf("%w: index chunk %s of %d bytes is not a whole number of %d-byte entries",
				record.ErrCorrupt, filepath.Join(a.dir, name), info.Size(), a.entrySize)
		}
		chunks = append(chunks, &arrayChunk{base: base, entries: uint64(info.Size()) / uint64(a.entrySize)})
	}
	slices.SortFunc(chunks, func(x, y *arrayChunk) int { return cmp.Compare(x.base, y.base) })
	return chunks, nil
}

// keepFree keeps de, if it is a dropped chunk's file of chunkEntries
// entries and fewer than maxFreeChunks are kept, for reuse (scanDir's).
func (a *array) keepFree(de os.DirEntry) bool {
	if !strings.HasSuffix(de.Name(), freeSuffix) || len(a.free) >= maxFreeChunks || !de.Type().IsRegular() {
		return false
	}
	info, err := de.Info()
	if err != nil || info.Size() != int64(a.chunkEntries)*int64(a.entrySize) {
		return false
	}
	a.free = append(a.free, filepath.Join(a.dir, de.Name()))
	return true
}

// scanLength finds the first zero entry of the last chunk by binary
// search; entries are written in order, so the written ones form a prefix.
func (a *array) scanLength(c *arrayChunk) (uint64, error) {
	var n uint64
	err := fsys.Guard(func() error {
		lo, hi := uint64(0), c.entries
		for lo < hi {
			mid := lo + (hi-lo)/2
			if fsys.IsZero(c.data[mid*uint64(a.entrySize) : (mid+1)*uint64(a.entrySize)]) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		n = c.base + lo
		return nil
	})
	return n, err
}

func (a *array) chunkPath(base uint64) string { return filepath.Join(a.dir, fsys.NumberName(base)) }

// mapChunk maps c's file; the descriptor is closed at once, the map keeps
// the file.
func (a *array) mapChunk(c *arrayChunk) error {
	path := a.chunkPath(c.base)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fsys.FileError("open", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fsys.FileError("stat", path, err)
	}
	size := int(c.entries) * a.entrySize
	if st.Size() != int64(size) {
		return fmt.Errorf("%w: index chunk %s has %d bytes, want %d", record.ErrCorrupt, path, st.Size(), size)
	}
	b, err := fsys.Map(f, size)
	if err != nil {
		return err
	}
	c.data = b
	c.used.Store(a.clock.Add(1))
	return nil
}

// makeChunk makes and maps the chunk of entries starting at base: from
// free, the path of a dropped chunk's file of that size, when it is set,
// else a new file. A new file is prepared (fallocated) under a temporary
// name and renamed, so a crash never leaves a chunk of the wrong size;
// the directory is left for syncDir (sync's), so that neither the writer
// nor the preparer waits for its fsync. ahead is the preparer's way: its
// pages are faulted in writable too, so that the writer takes no fault in
// them.
func (a *array) makeChunk(base, entries uint64, free string, ahead bool) (*arrayChunk, error) {
	c := &arrayChunk{base: base, entries: entries}
	size := int(entries) * a.entrySize
	fill := func(f *os.File) (err error) {
		if c.data, err = fsys.Map(f, size); err == nil && ahead {
			fsys.PopulateWrite(c.data)
		}
		return err
	}
	var err error
	if free != "" {
		if err = a.reuseFile(free, a.chunkPath(base), int64(size), fill); err != nil {
			a.log.Warn("reusing a dropped index chunk's file failed", zap.String("path", free), zap.Error(err))
			os.Remove(free)
			free = ""
		}
	}
	if free == "" {
		err = fsys.CreateRenamed(a.chunkPath(base), func(f *os.File) error {
			// Zeros, preallocated: nothing to fsync (see fsys.CreateAtomic).
			if err := fsys.Allocate(f, int64(size)); err != nil {
				return err
			}
			return fill(f)
		})
	}
	if err != nil {
		fsys.Unmap(c.data)
		return nil, err
	}
	a.dirDirty.Store(true)
	c.used.Store(a.clock.Add(1))
	return c, nil
}

// reuseFile makes the dropped chunk's file free (of size bytes) the file
// at path: zeroed, renamed, and given to fill.
func (a *array) reuseFile(free, path string, size int64, fill func(*os.File) error) error {
	f, err := os.OpenFile(free, os.O_RDWR, 0)
	if err != nil {
		return fsys.FileError("open", free, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fsys.FileError("stat", free, err)
	}
	if st.Size() != size {
		return fmt.Errorf("%w: index chunk file %s to reuse has %d bytes, want %d", errs.ErrIO, free, st.Size(), size)
	}
	if err := fsys.ZeroBeforeRename(f, 0, size); err != nil {
		return err
	}
	if err := os.Rename(free, path); err != nil {
		return fsys.FileError("rename", free, err)
	}
	return fill(f)
}

// syncDir makes the chunk files renamed into the directory since the last
// time durable, if any were; a caller that finds another syncing waits
// for it.
func (a *array) syncDir() error {
	a.dirMu.Lock()
	defer a.dirMu.Unlock()
	if !a.dirDirty.Load() {
		return nil
	}
	if err := fsys.SyncDir(a.dir); err != nil {
		return err
	}
	a.dirDirty.Store(false)
	return nil
}

// len is the number of the entry the next append writes: entries below it
// exist (those below first were dropped).
func (a *array) len() uint64 { return a.length.Load() }

// first is the first retained entry.
func (a *array) first() uint64 { return a.firstEntry.Load() }

// append writes entry (entrySize bytes, not all zero) at len() and
// publishes it. Writer only.
func (a *array) append(entry []byte) error {
	if len(entry) != a.entrySize {
		return fmt.Errorf("%w: index entry of %d bytes, want %d", record.ErrInvalid, len(entry), a.entrySize)
	}
	return a.appendAll(entry)
}

// appendAll writes entries (entrySize bytes each, back to back, none all
// zero) from len() on and publishes them with one store of the length:
// the entries of a publish wait once for their writes to the mapped
// chunk, where a store after each entry waited for each (the indexes'
// share of a pipelined SET, BenchmarkPublishSET10k). On an error the
// entries written before it are published (the store's undo truncates
// them). Writer only.
func (a *array) appendAll(entries []byte) error {
	if len(entries) == 0 || len(entries)%a.entrySize != 0 {
		return fmt.Errorf("%w: index entries of %d bytes, want a multiple of %d", record.ErrInvalid, len(entries), a.entrySize)
	}
	for off := 0; off < len(entries); off += a.entrySize {
		if fsys.IsZero(entries[off : off+a.entrySize]) {
			return fmt.Errorf("%w: all-zero index entry", record.ErrInvalid)
		}
	}
	if a.closed.Load() {
		return errs.ErrClosed
	}
	start := a.length.Load()
	n := start
	defer func() {
		if n != start {
			a.length.Store(n)
			if n >= a.prepAt.Load() {
				a.prepAt.Store(math.MaxUint64)
				a.prep.request(a, a.askNow(n))
			}
		}
	}()
	for len(entries) > 0 {
		var c *arrayChunk
		if k := len(a.chunks); k > 0 {
			c = a.chunks[k-1]
		}
		if c == nil || n >= c.end() {
			var err error
			if c, err = a.grow(n); err != nil {
				return err
			}
		}
		off := int(n-c.base) * a.entrySize
		k := min(len(entries), int(c.end()-n)*a.entrySize)
		if err := fsys.Guard(func() error {
			copy(c.data[off:off+k], entries[:k])
			return nil
		}); err != nil {
			return fmt.Errorf("%w (index %s, entry %d)", err, a.dir, n)
		}
		n += uint64(k / a.entrySize)
		entries = entries[k:]
	}
	return nil
}

// askNow says whether the writer, asking at length n, wants its next
// chunks made at once rather than within the preparer's delay: when none
// is made ahead past the first chunk (the preparer is behind), or when
// the entries ready (the rest of its chunk and those made ahead) would
// last it less than twice the delay at its rate since its last ask (at
// 2,000 a second the first chunk's 256 last 128 ms; back to back, 0.14 ms:
// BenchmarkPublishIndexBoundaries). Writer only.
func (a *array) askNow(n uint64) bool {
	now := time.Now()
	took, wrote := now.Sub(a.askedAt), n-a.askedN
	a.askedAt, a.askedN = now, n
	last := a.chunks[len(a.chunks)-1]
	made := a.ahead.Load()
	if made == 0 && last.base != a.firstEntry.Load() {
		return true
	}
	ready, size := last.end()-n, last.entries
	for range made {
		size = min(2*size, a.chunkEntries)
		ready += size
	}
	// The ready entries last ready/wrote times what the last ones took.
	return float64(ready)*float64(took) < 2*float64(a.prep.delay)*float64(wrote)
}

// grow adds the chunk starting at n, which must follow the last one (see
// nextChunk): the first one made ahead (waiting for the preparer if it is
// making it), or one made here. Writer only.
func (a *array) grow(n uint64) (*arrayChunk, error) {
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	for a.making && len(a.next) == 0 {
		a.prepCond.Wait()
	}
	var c *arrayChunk
	if len(a.next) > 0 {
		c = a.next[0]
		a.next = slices.Delete(a.next, 0, 1)
		a.ahead.Store(int32(len(a.next)))
	}
	if c == nil {
		base, entries := a.nextChunk()
		if base != n {
			return nil, fmt.Errorf("%w: index %s grows at entry %d, its chunks end at %d", record.ErrInvalid, a.dir, n, base)
		}
		var err error
		if c, err = a.makeChunk(base, entries, a.takeFree(entries), false); err != nil {
			return nil, err
		}
	} else if c.base != n {
		return nil, fmt.Errorf("%w: index %s grows at entry %d, its next chunk starts at %d", record.ErrInvalid, a.dir, n, c.base)
	}
	a.mu.Lock()
	a.chunks = append(a.chunks, c)
	a.mapped++
	a.evictLocked(nil)
	a.mu.Unlock()
	a.setPrepAt(c)
	return c, nil
}

// nextChunk is where the chunk after the last one (of chunks, then next)
// starts and how many entries it holds: the first of an empty array holds
// firstChunk entries, each next one twice as many as the last, up to
// chunkEntries. The caller holds prepMu (only grow and truncate, which
// hold it, change the last chunk).
func (a *array) nextChunk() (base, entries uint64) {
	if k := len(a.next); k > 0 {
		last := a.next[k-1]
		return last.end(), min(2*last.entries, a.chunkEntries)
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	k := len(a.chunks)
	if k == 0 {
		return a.length.Load(), a.firstChunk
	}
	last := a.chunks[k-1]
	return last.end(), min(2*last.entries, a.chunkEntries)
}

// takeFree takes a dropped chunk's file to make a chunk of entries
// entries from, "" if there is none. prepMu is held.
func (a *array) takeFree(entries uint64) string {
	if entries != a.chunkEntries || len(a.free) == 0 {
		return ""
	}
	p := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	return p
}

// prepareNext makes chunks ahead of the writer until want are made ahead,
// unless the array is closed. It makes each without prepMu (making set),
// so that the writer crossing into a chunk made before takes it meanwhile.
// A failure is logged only: the writer makes the chunk itself when it gets
// there, and meets the error then. The preparer's goroutine calls it.
func (a *array) prepareNext(want int) {
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	for !a.closed.Load() && !a.making && len(a.next) < want {
		base, entries := a.nextChunk()
		free := a.takeFree(entries)
		a.making = true
		a.prepMu.Unlock()
		c, err := a.makeChunk(base, entries, free, true)
		a.prepMu.Lock()
		a.making = false
		a.prepCond.Broadcast()
		if err != nil {
			a.log.Warn("making an index chunk ahead of the writer failed", zap.String("path", a.chunkPath(base)), zap.Error(err))
			return
		}
		a.next = append(a.next, c)
		a.ahead.Store(int32(len(a.next)))
	}
}

// waitMakingLocked waits until the preparer is not making a chunk. prepMu
// is held.
func (a *array) waitMakingLocked() {
	for a.making {
		a.prepCond.Wait()
	}
}

// dropNextLocked removes the chunks made ahead, newest first: truncate
// moves the end of the array away from where they start, and close leaves
// the files as they were without them. durable syncs the directory after
// the removal (truncate's need: it removes chunks before them next);
// without it, a crash may bring the files back, and openArray removes
// them. prepMu is held, and no chunk is being made.
func (a *array) dropNextLocked(durable bool) error {
	if len(a.next) == 0 {
		return nil
	}
	next := a.next
	a.next = nil
	a.ahead.Store(0)
	var err error
	for i := len(next) - 1; i >= 0; i-- {
		c := next[i]
		if uerr := fsys.Unmap(c.data); err == nil {
			err = uerr
		}
		c.data = nil
		p := a.chunkPath(c.base)
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fsys.FileError("remove", p, rerr)
		}
	}
	if durable {
		return fsys.SyncDir(a.dir)
	}
	return err
}

// dropFreeLocked deletes the files kept for reuse (close's). prepMu is
// held.
func (a *array) dropFreeLocked() error {
	var err error
	for _, p := range a.free {
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = fsys.FileError("remove", p, rerr)
		}
	}
	a.free = nil
	return err
}

// evictLocked unmaps the least recently used chunks, never the last one
// nor keep, while more than maxMapped are mapped. A chunk with entries not
// yet synced is synced first: munmap alone does not make them durable.
func (a *array) evictLocked(keep *arrayChunk) {
	fsys.EvictLRU(
		func() bool { return a.mapped > a.maxMapped },
		func() []*arrayChunk { return a.chunks[:len(a.chunks)-1] },
		func(c *arrayChunk) bool { return c.data != nil && c != keep },
		func(c *arrayChunk) uint64 { return c.used.Load() },
		func(c *arrayChunk) bool {
			if from, to := a.dirtyRange(c); from < to {
				if err := fsys.SyncRange(c.data, from, to); err != nil {
					// Keep it mapped; the next sync reports the error.
					a.log.Warn("syncing an index chunk before unmapping it failed",
						zap.String("path", a.chunkPath(c.base)), zap.Error(err))
					return false
				}
			}
			if err := fsys.Unmap(c.data); err != nil {
				a.log.Warn("unmapping an index chunk failed", zap.String("path", a.chunkPath(c.base)), zap.Error(err))
			}
			c.data = nil
			a.mapped--
			return true
		})
}

// dirtyRange is the byte range of c holding entries written but not yet
// synced.
func (a *array) dirtyRange(c *arrayChunk) (from, to int) {
	lo := max(a.synced.Load(), c.base)
	hi := min(a.length.Load(), c.end())
	if lo >= hi {
		return 0, 0
	}
	return int(lo-c.base) * a.entrySize, int(hi-c.base) * a.entrySize
}

// read copies entry i into dst (entrySize bytes). It returns ErrRecycled
// below first(), ErrBeyondEnd at or after len(), ErrIO if the page faults.
// Safe from any goroutine.
func (a *array) read(i uint64, dst []byte) error {
	a.mu.RLock()
	c, err := a.chunkLocked(i)
	if err != nil || c.data == nil {
		a.mu.RUnlock()
		if err != nil {
			return err
		}
		return a.readMapping(i, dst)
	}
	err = a.copyOut(c, i, dst)
	a.mu.RUnlock()
	return err
}

// readMapping is read's slow path: the chunk must be mapped first.
func (a *array) readMapping(i uint64, dst []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.chunkLocked(i) // the chunk list may have changed
	if err != nil {
		return err
	}
	if c.data == nil {
		if err := a.mapChunk(c); err != nil {
			return err
		}
		a.mapped++
		a.evictLocked(c)
	}
	return a.copyOut(c, i, dst)
}

// chunkLocked finds the chunk holding entry i; mu must be held.
func (a *array) chunkLocked(i uint64) (*arrayChunk, error) {
	if a.closed.Load() {
		return nil, errs.ErrClosed
	}
	if first := a.firstEntry.Load(); i < first {
		return nil, fmt.Errorf("%w: index entry %d, first is %d", errs.ErrRecycled, i, first)
	}
	if n := a.length.Load(); i >= n {
		return nil, fmt.Errorf("%w: index entry %d, length is %d", errs.ErrBeyondEnd, i, n)
	}
	// Chunks differ in size (they grow): a binary search finds the one.
	k, _ := slices.BinarySearchFunc(a.chunks, i, func(c *arrayChunk, i uint64) int {
		switch {
		case c.end() <= i:
			return -1
		case c.base > i:
			return 1
		}
		return 0
	})
	return a.chunks[k], nil
}

func (a *array) copyOut(c *arrayChunk, i uint64, dst []byte) error {
	c.used.Store(a.clock.Add(1))
	off := int(i-c.base) * a.entrySize
	err := fsys.Guard(func() error {
		copy(dst[:a.entrySize], c.data[off:off+a.entrySize])
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w (index %s, entry %d)", err, a.dir, i)
	}
	return nil
}

// dropChunksBefore removes every chunk whose entries all lie below i,
// oldest first, but never the last chunk: it carries the array's length
// across a restart; pos is the log position they were dropped for (all
// their entries point below it). The files of the last ones of
// chunkEntries entries are renamed <name>.free and kept for reuse (up to
// maxFreeChunks), the others deleted, and the directory synced: when the
// array has a preparer, by the preparer once asked to for a position at
// or past pos (askReap: once the log's oldest position is durable in the
// metafile), so that the writer's path renames, deletes and fsyncs
// nothing; at once when not. Writer only.
//
// A crash before the files are seen to finds the dropped chunks under
// their names, and the array opens with them: then the metafile may still
// count the log's segments they point into retained (the log reads them
// again, and the chunks are theirs); if it does not, the store drops them
// again at Open (Store.open). No reuse of their files can have happened:
// a file is reused only once renamed free.
func (a *array) dropChunksBefore(i uint64, pos int64) error {
	a.mu.Lock()
	if a.closed.Load() {
		a.mu.Unlock()
		return errs.ErrClosed
	}
	var drop []droppedChunk
	for len(a.chunks) > 1 && a.chunks[0].end() <= i {
		c := a.chunks[0]
		if c.data != nil {
			// Dropped entries need no sync.
			if err := fsys.Unmap(c.data); err != nil {
				a.log.Warn("unmapping an index chunk failed", zap.String("path", a.chunkPath(c.base)), zap.Error(err))
			}
			c.data = nil
			a.mapped--
		}
		drop = append(drop, droppedChunk{c, pos})
		a.chunks = slices.Delete(a.chunks, 0, 1)
	}
	if len(a.chunks) > 0 {
		a.firstEntry.Store(a.chunks[0].base)
	}
	a.mu.Unlock()
	if len(drop) == 0 {
		return nil
	}
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	a.dropped = append(a.dropped, drop...)
	if a.prep != nil {
		return nil
	}
	return a.removeDroppedLocked(len(a.dropped))
}

// askReap asks the preparer to see to the files of the chunks dropped
// for positions up to upTo (see dropChunksBefore). It does not block.
// Safe from any goroutine.
func (a *array) askReap(upTo int64) {
	for {
		old := a.reapTo.Load()
		if upTo <= old || a.reapTo.CompareAndSwap(old, upTo) {
			break
		}
	}
	a.prepMu.Lock()
	due := len(a.dropped) > 0 && a.dropped[0].pos <= upTo && a.prep != nil
	a.prepMu.Unlock()
	if due {
		a.prep.reap(a)
	}
}

// reapDropped renames free or deletes the files of the dropped chunks
// asked for (askReap), without prepMu. The preparer's goroutine calls
// it.
func (a *array) reapDropped() {
	a.prepMu.Lock()
	if a.closed.Load() || a.reaping {
		a.prepMu.Unlock()
		return
	}
	n := a.due()
	if n == 0 {
		a.prepMu.Unlock()
		return
	}
	drop, keep := a.dropped[:n:n], maxFreeChunks-len(a.free)
	a.dropped, a.reaping = a.dropped[n:], true
	a.prepMu.Unlock()
	done, kept, err := a.removeDropped(drop, keep)
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	a.reaping = false
	a.prepCond.Broadcast()
	a.free = append(a.free, kept...)
	a.dropped = append(drop[done:], a.dropped...) // tried again when next asked, or at close
	if err != nil {
		a.log.Warn("removing the files of dropped index chunks failed", zap.String("dir", a.dir), zap.Error(err))
	}
}

// due is how many of the dropped chunks, from the first, were asked to
// be seen to. prepMu is held.
func (a *array) due() int {
	upTo := a.reapTo.Load()
	n := 0
	for n < len(a.dropped) && a.dropped[n].pos <= upTo {
		n++
	}
	return n
}

// removeDroppedLocked sees to the files of the first n dropped chunks at
// once (an array with no preparer, close). prepMu is held and no reap
// runs.
func (a *array) removeDroppedLocked(n int) error {
	done, kept, err := a.removeDropped(a.dropped[:n], maxFreeChunks-len(a.free))
	a.free = append(a.free, kept...)
	a.dropped = a.dropped[done:]
	return err
}

// removeDropped renames the files of the last keep chunks of drop that
// are of chunkEntries entries <name>.free (kept, their paths) and deletes
// the others, oldest first, so that a crash leaves the chunks contiguous,
// then syncs the directory. done is how many of drop it saw to; on an
// error the rest stay under their names.
func (a *array) removeDropped(drop []droppedChunk, keep int) (done int, kept []string, err error) {
	for k, d := range drop {
		p := a.chunkPath(d.c.base)
		if len(drop)-k <= keep && d.c.entries == a.chunkEntries {
			if err := os.Rename(p, p+freeSuffix); err != nil {
				return k, kept, fsys.FileError("rename", p, err)
			}
			kept = append(kept, p+freeSuffix)
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return k, kept, fsys.FileError("remove", p, err)
		}
	}
	if len(drop) == 0 {
		return 0, nil, nil
	}
	return len(drop), kept, fsys.SyncDir(a.dir)
}

// truncate drops entries n and after; n below first() is taken as first(),
// so the array never forgets where it starts. Later chunks are removed,
// the rest of the chunk holding n is zeroed, and both are made durable at
// once, since truncation is part of recovery. Writer only.
func (a *array) truncate(n uint64) error {
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	a.waitMakingLocked()
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return errs.ErrClosed
	}
	n = max(n, a.firstEntry.Load())
	old := a.length.Load()
	if n >= old || len(a.chunks) == 0 {
		return nil
	}
	// The chunks made ahead go first: they follow the last chunk, which
	// may go now.
	if err := a.dropNextLocked(true); err != nil {
		return err
	}
	// Newest first, so a crash leaves the chunks contiguous. The first
	// chunk stays even when it empties: its name is the array's start.
	removed := false
	for len(a.chunks) > 1 && a.chunks[len(a.chunks)-1].base >= n {
		c := a.chunks[len(a.chunks)-1]
		if c.data != nil {
			fsys.Unmap(c.data)
			c.data = nil
			a.mapped--
		}
		a.chunks = a.chunks[:len(a.chunks)-1]
		p := a.chunkPath(c.base)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.length.Store(c.base)
			return fsys.FileError("remove", p, err)
		}
		removed = true
	}
	if removed {
		if err := fsys.SyncDir(a.dir); err != nil {
			return err
		}
	}
	c := a.chunks[len(a.chunks)-1]
	if c.data == nil {
		if err := a.mapChunk(c); err != nil {
			return err
		}
		a.mapped++
		a.evictLocked(c)
	}
	from := int(n-c.base) * a.entrySize
	to := int(min(old, c.end())-c.base) * a.entrySize
	a.length.Store(n)
	if a.synced.Load() > n {
		a.synced.Store(n)
	}
	c.releasedTo.Store(min(c.releasedTo.Load(), n)) // what is written next was not released
	a.askedAt, a.askedN = time.Now(), n
	a.setPrepAt(c)
	err := fsys.Guard(func() error {
		clear(c.data[from:to])
		return nil
	})
	if err == nil {
		err = fsys.SyncRange(c.data, from, to)
	}
	if err != nil {
		return fmt.Errorf("%w (truncating index %s at %d)", err, a.dir, n)
	}
	return nil
}

// sync makes every entry appended so far durable. It may run concurrently
// with the writer and readers.
func (a *array) sync() error {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	if a.closed.Load() {
		return errs.ErrClosed
	}
	return a.syncLocked()
}

func (a *array) syncLocked() error {
	// The chunks first: no entry is durable before its chunk's file is.
	if err := a.syncDir(); err != nil {
		return err
	}
	to := a.length.Load()
	if a.synced.Load() >= to {
		return nil
	}
	a.mu.RLock()
	var err error
	for _, c := range a.chunks {
		if c.end() <= a.synced.Load() || c.base >= to || c.data == nil {
			continue // clean, or unmapped (synced when it was unmapped)
		}
		lo := max(a.synced.Load(), c.base) - c.base
		hi := min(to, c.end()) - c.base
		if err = fsys.SyncRange(c.data, int(lo)*a.entrySize, int(hi)*a.entrySize); err != nil {
			err = fmt.Errorf("%w (index chunk %s)", err, a.chunkPath(c.base))
			break
		}
	}
	a.mu.RUnlock()
	if err != nil {
		return err
	}
	a.synced.Store(to)
	return nil
}

// close syncs and unmaps everything, and removes the chunks made ahead
// and the files kept for reuse. Reads after close return ErrClosed.
func (a *array) close() error {
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	a.waitMakingLocked()
	for a.reaping {
		a.prepCond.Wait()
	}
	rerr := a.removeDroppedLocked(len(a.dropped))
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	if a.closed.Load() {
		return nil
	}
	err := a.syncLocked()
	a.mu.Lock()
	a.closed.Store(true)
	if uerr := a.unmapAll(); err == nil {
		err = uerr
	}
	if derr := a.dropNextLocked(false); err == nil {
		err = derr
	}
	if ferr := a.dropFreeLocked(); err == nil {
		err = ferr
	}
	a.mu.Unlock()
	return cmp.Or(err, rerr)
}

func (a *array) unmapAll() error {
	var err error
	for _, c := range a.chunks {
		if c.data != nil {
			if uerr := fsys.Unmap(c.data); err == nil {
				err = uerr
			}
			c.data = nil
		}
	}
	a.mapped = 0
	return err
}
