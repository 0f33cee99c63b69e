package index

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// firstIndexChunkEntries sizes the first index file of a topic (12 KiB)
// and of an origin (4 KiB); each next file doubles, up to the store's
// IndexChunkEntries. A topic that holds a few records costs a few pages of
// disk, not a full chunk.
const firstIndexChunkEntries = 512

// one is what every index of a set has: its array, and the log position
// of its last entry (-1 if none), which the writer keeps so that it never
// reads the map to check an append.
type one struct {
	arr  *array
	last atomic.Int64
}

// member is an index of a set: a *Topic or an *originIndex.
type member interface {
	comparable
	base() *one
	label() string // names it in errors: topic "x", origin 00ab...
}

// set is the set of indexes of one kind, by key (a topic, an origin), in
// one directory with a subdirectory per index. Topics and Origins are
// sets; what they share lives here once.
//
// Concurrency: one writer (Append or Put, Truncate, DropBefore, Reset,
// Close), any number of readers (Get and the members' methods, LastPos,
// Vector, Names), and Sync from any goroutine. The writer adds a member
// under mu, so readers see it only once it holds its first entry; it reads
// m without the lock (only it changes m).
type set[K comparable, M member] struct {
	dir    string
	cfg    arrayConfig // cfg.prep is the set's preparer, from init to Close
	log    *zap.Logger
	closed atomic.Bool

	mu sync.RWMutex
	m  map[K]M
}

// init readies an empty set of entrySize-byte entries in dir, making dir
// if needed. chunkEntries is the most entries per chunk file (0: 1<<20;
// the first files are smaller, see firstIndexChunkEntries); maxMapped
// bounds the chunks mapped at once per index.
func (s *set[K, M]) init(dir string, entrySize, chunkEntries, maxMapped int, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	if chunkEntries < 0 {
		return fmt.Errorf("%w: %d index entries per chunk", record.ErrInvalid, chunkEntries)
	}
	s.dir, s.log, s.m = dir, log, make(map[K]M)
	s.cfg = arrayConfig{entrySize: entrySize, chunkEntries: uint64(chunkEntries),
		firstChunkEntries: firstIndexChunkEntries, maxMapped: maxMapped}
	if err := makeIndexDir(dir); err != nil {
		return err
	}
	s.cfg.prep = newPreparer(prepLater)
	return nil
}

// load opens the index in every subdirectory of the set's directory that
// key names (ok false: not an index; key logs why); an empty one (a crash
// right after it was made) is removed. wrap makes the member.
func (s *set[K, M]) load(key func(os.DirEntry) (K, bool), wrap func(K, *array) M) error {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return fsys.FileError("readdir", s.dir, err)
	}
	for _, de := range des {
		k, ok := key(de)
		if !ok {
			continue
		}
		dir := filepath.Join(s.dir, de.Name())
		if empty, err := removeIfEmpty(dir); err != nil || empty {
			if err != nil {
				s.Close()
				return err
			}
			continue
		}
		a, err := openArray(dir, 0, s.cfg, s.log)
		if err != nil {
			s.Close()
			return err
		}
		last, err := lastEntryPos(a)
		if err != nil {
			a.close()
			s.Close()
			return err
		}
		m := wrap(k, a)
		m.base().last.Store(last)
		s.m[k] = m
	}
	return nil
}

// create makes the (empty) array of a new index in the subdirectory name,
// its first entry numbered start.
func (s *set[K, M]) create(name string, start uint64) (*array, error) {
	dir := filepath.Join(s.dir, name)
	if err := makeIndexDir(dir); err != nil {
		return nil, err
	}
	return openArray(dir, start, s.cfg, s.log)
}

// publish makes m visible to readers under k. Writer only.
func (s *set[K, M]) publish(k K, m M) {
	s.mu.Lock()
	s.m[k] = m
	s.mu.Unlock()
}

// lookup returns the index of k, the zero M if there is none. Safe from
// any goroutine.
func (s *set[K, M]) lookup(k K) M {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[k]
}

// each calls fn for every index, in no order, under the read lock.
func (s *set[K, M]) each(fn func(M) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var errList []error
	for _, m := range s.m {
		if err := fn(m); err != nil {
			errList = append(errList, fmt.Errorf("%s: %w", m.label(), err))
		}
	}
	return errors.Join(errList...)
}

// Truncate drops, in every index, the entries whose position is at or
// after pos: recovery cut the log there. An index keeps its first entry
// number even when it empties. Writer only.
func (s *set[K, M]) Truncate(pos int64) error {
	if s.closed.Load() {
		return errs.ErrClosed
	}
	return s.each(func(m M) error {
		b := m.base()
		last, err := truncateIndex(b.arr, pos)
		if err == nil {
			b.last.Store(last)
		}
		return err
	})
}

// DropBefore removes, in every index, the chunks whose entries all lie
// before pos: the log no longer holds those records. Retention works by
// whole chunks, and the last chunk of an index always stays. Writer only.
func (s *set[K, M]) DropBefore(pos int64) error {
	if s.closed.Load() {
		return errs.ErrClosed
	}
	return s.each(func(m M) error { return dropIndexBefore(m.base().arr, pos) })
}

// RemoveDropped asks the set's preparer to rename free or delete the
// files of the chunks DropBefore dropped for positions up to upTo, and
// sync their directories. The store asks once the log's oldest position
// upTo is durable in the metafile, so that no crash finds the log holding
// records whose index chunks are gone (see array.dropChunksBefore). Safe
// from any goroutine.
func (s *set[K, M]) RemoveDropped(upTo int64) {
	if s.closed.Load() {
		return
	}
	s.each(func(m M) error {
		m.base().arr.askReap(upTo)
		return nil
	})
}

// LastPos is the greatest position indexed in any index of the set, -1 if
// none. After a crash, indexes may have been synced to different points;
// a caller re-indexing the log should start from a position it knows all
// indexes were synced through, and the appends skip (ErrDuplicate) what
// is there.
func (s *set[K, M]) LastPos() int64 {
	last := int64(-1)
	s.each(func(m M) error {
		last = max(last, m.base().last.Load())
		return nil
	})
	return last
}

// Sync makes every entry written so far durable. Safe concurrently with
// the writer and readers.
func (s *set[K, M]) Sync() error {
	if s.closed.Load() {
		return errs.ErrClosed
	}
	return s.each(func(m M) error { return m.base().arr.sync() })
}

// Close stops the set's preparer, then syncs and unmaps every index.
func (s *set[K, M]) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cfg.prep.stop()
	return s.each(func(m M) error { return m.base().arr.close() })
}

// makeIndexDir makes dir and makes its entry in the parent durable.
func makeIndexDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fsys.FileError("mkdir", dir, err)
	}
	return fsys.SyncDir(filepath.Dir(dir))
}

func removeIfEmpty(dir string) (bool, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return false, fsys.FileError("readdir", dir, err)
	}
	if len(des) > 0 {
		return false, nil
	}
	if err := os.Remove(dir); err != nil {
		return false, fsys.FileError("remove", dir, err)
	}
	return true, nil
}
