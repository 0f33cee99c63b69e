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

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/store/internal/fsys"
)

// A segment is one fixed-size file of the log, named by the log position of
// its first byte in 20 decimal digits (like RocketMQ's CommitLog files), so
// that names sort in log order. Recycled files wait for reuse under the
// name "<position>.free".
type segment struct {
	base int64
	path string
	f    *os.File
	data []byte // the map; nil while unmapped

	// Guarded by Log.mu.
	pins int    // readers and the writer using data right now
	used uint64 // last use, for choosing which map to drop
}

const freeSuffix = ".free"

// segmentName formats the file name of the segment starting at base.
func segmentName(base int64) string { return fsys.NumberName(uint64(base)) }

// parseSegmentName is segmentName's inverse; ok is false for any other name.
func parseSegmentName(name string) (base int64, ok bool) {
	n, ok := fsys.ParseNumberName(name)
	return int64(n), ok && n <= math.MaxInt64
}

// createSegment makes the file for the segment at base: it reuses a free
// file when one is given (renamed and zeroed), else creates and
// preallocates a new one, so that a full disk shows here and never as a
// fault on a page of the map. The directory is not synced here: the next
// flush does it, once for every file made since (Log.dirDirty).
func createSegment(dir string, base, size int64, free string) (*segment, error) {
	path := filepath.Join(dir, segmentName(base))
	var f *os.File
	var err error
	if free != "" {
		if err = os.Rename(free, path); err != nil {
			return nil, fsys.FileError("rename", free, err)
		}
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			return nil, fsys.FileError("open", path, err)
		}
		err = fsys.ZeroRange(f, 0, size)
	} else {
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640); err != nil {
			return nil, fsys.FileError("create", path, err)
		}
		err = fsys.Allocate(f, size)
	}
	if err != nil {
		f.Close()
		if free == "" {
			os.Remove(path)
		}
		return nil, err
	}
	return &segment{base: base, path: path, f: f}, nil
}

// openSegment opens an existing segment file and checks its size.
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
		// system that lost the allocation): allocate the rest again.
		if err := fsys.Allocate(f, size); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &segment{base: base, path: path, f: f}, nil
}

// mapIn maps the segment. populate also faults its pages in, writable,
// ahead of use (MADV_POPULATE_WRITE; kernels before 5.14 lack it, and
// MADV_WILLNEED reads the pages ahead instead): the segment preparer does
// it so that the writer takes no page faults. The pages it dirties are zeros the writer
// overwrites; at worst they are written back once.
func (s *segment) mapIn(size int64, populate bool) error {
	b, err := unix.Mmap(int(s.f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fsys.FileError("mmap", s.path, err)
	}
	if populate {
		if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); err != nil {
			// An old kernel: fault the pages in for reading at least.
			_ = unix.Madvise(b, unix.MADV_WILLNEED)
		}
	}
	s.data = b
	return nil
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
