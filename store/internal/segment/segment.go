// Package segment owns the log's bytes on disk: the segment files, their
// maps and their preparation ahead of the writer, the metafile that roots
// recovery, and the recovery of the log's tail. The store coordinates it
// (one writer under the store's write lock, any number of readers) through
// Log's methods; the record format is package record's.
package segment

import (
	"math"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/store/internal/fsys"
)

// A segment is one fixed-size file of the log, named by the log position of
// its first byte in 20 decimal digits (like RocketMQ's CommitLog files), so
// that names sort in log order. Recycled files wait for reuse under the
// name "<position>.free".
type segment struct {
	base int64
	mark uint32 // the mark of this use's records (markOf)
	path string
	f    *os.File
	data []byte // the map; nil while unmapped

	// alloc is how many bytes from the start are allocated (fallocated, or
	// written): the writer writes only below it, so that a full disk is an
	// ErrDiskFull from an allocation, never a fault on a page. The writer
	// reads it; growing it takes Log.growMu.
	alloc     atomic.Int64
	populated int64 // bytes from the start faulted in writable ahead of the writer; the preparer's

	// Guarded by Log.mu.
	pins    int    // readers and the writer using data right now
	used    uint64 // last use, for choosing which map to drop
	isReady bool   // made ahead, not the writer's yet: never unmapped
}

// markOf is the mark of the records of the segment at base: its number
// plus one, never zero (zero is the mark of records written before marks
// existed). A file is reused only for a segment after every segment it
// held before, so a stale record left in it carries another mark (the
// marks repeat after 2^32-1 segments: 256 TiB of log at the smallest
// segment size).
func markOf(base, segSize int64) uint32 { return uint32(base/segSize%(1<<32-1)) + 1 }

const freeSuffix = ".free"

// segmentName formats the file name of the segment starting at base.
func segmentName(base int64) string { return fsys.NumberName(uint64(base)) }

// parseSegmentName is segmentName's inverse; ok is false for any other name.
func parseSegmentName(name string) (base int64, ok bool) {
	n, ok := fsys.ParseNumberName(name)
	return int64(n), ok && n <= math.MaxInt64
}

// createSegment makes the file for the segment at base. A free file,
// when one is given, is renamed and kept as it is: its blocks are written
// already, so the writer's page faults convert no extents, and recovery
// tells its stale records by their mark; only a hole it may have is
// allocated. Else a new file of size bytes is made sparse and its first
// window bytes allocated; the rest is allocated ahead of the writer (see
// Log.grow), so that a full disk shows as ErrDiskFull at an allocation,
// never as a fault on a page of the map (window is at most size). The
// directory is not synced here: the next flush does it, once for every
// file made since (Log.dirDirty).
func createSegment(dir string, base, size, window int64, free string) (*segment, error) {
	path := filepath.Join(dir, segmentName(base))
	s := &segment{base: base, mark: markOf(base, size), path: path}
	var err error
	if free != "" {
		if err = os.Rename(free, path); err != nil {
			return nil, fsys.FileError("rename", free, err)
		}
		if s.f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			return nil, fsys.FileError("open", path, err)
		}
		if err = fsys.Allocate(s.f, size); err == nil {
			s.alloc.Store(size)
		}
	} else {
		if s.f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640); err != nil {
			return nil, fsys.FileError("create", path, err)
		}
		if window < size {
			if err = s.f.Truncate(size); err != nil {
				err = fsys.FileError("truncate", path, err)
			}
		}
		// A first window that is the whole segment sets the file's size
		// as it allocates it (fallocate without KEEP_SIZE, or the zeros
		// written without fallocate): no truncate, one system call fewer
		// for each new small segment.
		if err == nil {
			if err = fsys.AllocateRange(s.f, 0, window); err == nil {
				s.alloc.Store(window)
			}
		}
	}
	if err != nil {
		s.f.Close()
		if free == "" {
			os.Remove(path)
		}
		return nil, err
	}
	return s, nil
}

// openSegment opens an existing segment file and checks its size. Its
// allocation is unknown: alloc stays zero, and the writer allocates what
// it writes into (a sealed segment is only read).
func openSegment(dir string, base, size int64) (*segment, error) {
	path := filepath.Join(dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fsys.FileError("open", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsys.FileError("stat", path, err)
	}
	if st.Size() < size {
		// A segment cut short (a crash while it was being made, or a file
		// system that lost its size): give it its size again; what it
		// lacks reads as zeros.
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fsys.FileError("truncate", path, err)
		}
	}
	return &segment{base: base, mark: markOf(base, size), path: path, f: f}, nil
}

// mapIn maps the segment.
func (s *segment) mapIn(size int64) error {
	b, err := unix.Mmap(int(s.f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fsys.FileError("mmap", s.path, err)
	}
	s.data = b
	return nil
}

// populate faults the pages of [from, to) of the map in, writable, ahead
// of the writer (fsys.PopulateWrite). The range must be allocated.
func (s *segment) populate(from, to int64) {
	from &^= int64(fsys.PageSize) - 1
	if from >= to {
		return
	}
	fsys.PopulateWrite(s.data[from:to])
}

func (s *segment) unmap() error {
	err := fsys.Unmap(s.data)
	s.data = nil
	return err
}

func (s *segment) close() error {
	err := s.unmap()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = fsys.FileError("close", s.path, cerr)
	}
	return err
}
