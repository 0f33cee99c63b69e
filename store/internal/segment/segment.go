// Package segment owns the log's bytes on disk: the segment files, their
// maps and their preparation ahead of the writer, the metafile that roots
// recovery, and the recovery of the log's tail. The store coordinates it
// (one writer under the store's write lock, any number of readers) through
// Log's methods; the record format is package record's.
//
// # Why it is this large
//
// About 2,700 lines, of which log.go is 1,340: the writer's path, the
// recovery of the tail and the preparer that keeps file work and page
// faults off that path share the log's lock and its segment table, and
// splitting them would put that table behind an API used by one caller.
// The metafile (meta.go), the file ring (ring.go), the release of written
// pages (release.go), the repair reads (repair.go), the switch's kick
// (switch.go) and the reading of a log whose metafile was lost
// (rebuild.go) are files of their own.
package segment

import (
	"math"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/store/internal/fsys"
)

// A segment is one fixed-size piece of the log: a slot of a segment file.
// A file holds Log.slots consecutive segments (one in directories made
// before format version 4, and with segments of 8 MiB or more) and is
// named by the log position of its first byte in 20 decimal digits (like
// RocketMQ's CommitLog files), so that names sort in log order. A
// recycled file waits for reuse under the name "<position>.free", open
// (ring.go).
type segment struct {
	base int64
	mark uint32 // the mark of this use's records (markOf)
	file *segFile
	off  int64  // the segment's offset in its file
	path string // its file's, for messages
	data []byte // its slot of its file's map; nil while unmapped

	// alloc is how many bytes from the start are allocated (fallocated, or
	// written): the writer writes only below it, so that a full disk is an
	// ErrDiskFull from an allocation, never a fault on a page. The writer
	// reads it; growing it takes Log.growMu.
	alloc     atomic.Int64
	populated int64 // bytes from the start faulted in writable ahead of the writer; the preparer's

	// Guarded by Log.mu.
	pins    int       // readers and the writer using data right now
	used    uint64    // last use, for choosing which map to drop
	isReady bool      // made ahead, not the writer's yet: never unmapped
	sealed  time.Time // when the writer left it, in this process
	// released is how far from the start the pages were dropped from the
	// resident set, and releasedAt the tick of that release (0: none), to
	// tell whether a reader used the segment since (release.go).
	released   int64
	releasedAt uint64
}

// A segFile is an open segment file, shared by the segments of its slots
// that are open (refs); it is closed with the last. It is mapped whole
// while any of its segments is mapped (mapped of them), so that moving to
// the next slot maps nothing and dropping one unmaps nothing. refs,
// mapped and data are guarded by Log.mu once the log runs.
type segFile struct {
	path   string
	f      *os.File
	size   int64
	refs   int
	mapped int
	data   []byte
	reused bool // a recycled file: its blocks are allocated already
}

// markOf is the mark of the records of the segment at base: its number
// plus one, never zero (zero is the mark of records written before marks
// existed). A file is reused only for segments after every segment it
// held before, so a stale record left in it carries another mark (the
// marks repeat after 2^32-1 segments: 256 TiB of log at the smallest
// segment size).
func markOf(base, segSize int64) uint32 { return uint32(base/segSize%(1<<32-1)) + 1 }

const freeSuffix = ".free"

// segmentName formats the file name of the file starting at base.
func segmentName(base int64) string { return fsys.NumberName(uint64(base)) }

// parseSegmentName is segmentName's inverse; ok is false for any other name.
func parseSegmentName(name string) (base int64, ok bool) {
	n, ok := fsys.ParseNumberName(name)
	return int64(n), ok && n <= math.MaxInt64
}

// openFile opens the segment file at path with flags, by one system call
// (os.OpenFile adds four for the poller, useless for a regular file).
func openFile(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// createFile makes the segment file of size bytes at path. A free file,
// when one is given, is renamed and kept as it is (open already, unless
// it was found free at Open): its blocks are written already, so the
// writer's page faults convert no extents, its pages may still be in
// the page cache, and recovery tells its stale records by their mark.
// Else a new file is made sparse (its slots are allocated as they are
// used, see newSegment); a file whose size first bytes are allocated at
// once (window) gets its size from that allocation, one system call
// fewer. The directory is not synced here: the next flush does it, once
// for every file made since (Log.dirDirty).
func createFile(path string, size, window int64, free *segFile) (*segFile, error) {
	if free != nil {
		if err := os.Rename(free.path, path); err != nil {
			free.closeFD()
			return nil, fsys.FileError("rename", free.path, err)
		}
		f := free.f
		if f == nil {
			var err error
			if f, err = openFile(path, unix.O_RDWR); err != nil {
				return nil, fsys.FileError("open", path, err)
			}
		}
		return &segFile{path: path, f: f, size: size, reused: true}, nil
	}
	f, err := openFile(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL)
	if err != nil {
		return nil, fsys.FileError("create", path, err)
	}
	if window < size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			os.Remove(path)
			return nil, fsys.FileError("truncate", path, err)
		}
	}
	return &segFile{path: path, f: f, size: size}, nil
}

// closeFD closes the file, if it is open, and reports the error.
func (f *segFile) closeFD() error {
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	if err != nil {
		return fsys.FileError("close", f.path, err)
	}
	return nil
}

// newSegment makes the segment at base in slot off of file and allocates
// it for the writer: all of it in a reused file (only a hole it may have
// costs anything), else its first window bytes; the rest is allocated
// ahead of the writer (see Log.grow), so that a full disk shows as
// ErrDiskFull at an allocation, never as a fault on a page of the map
// (window is at most size).
func newSegment(file *segFile, base, off, size, window int64) (*segment, error) {
	s := &segment{base: base, mark: markOf(base, size), file: file, off: off, path: file.path}
	n := window
	if file.reused {
		n = size
	}
	if err := fsys.AllocateRange(file.f, off, n); err != nil {
		return nil, err
	}
	s.alloc.Store(n)
	return s, nil
}

// openExisting opens the existing segment file at path and checks its
// size.
func openExisting(path string, size int64) (*segFile, error) {
	f, err := openFile(path, unix.O_RDWR)
	if err != nil {
		return nil, fsys.FileError("open", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsys.FileError("stat", path, err)
	}
	if st.Size() < size {
		// A file cut short (a crash while it was being made, or a file
		// system that lost its size): give it its size again; what it
		// lacks reads as zeros.
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fsys.FileError("truncate", path, err)
		}
	}
	return &segFile{path: path, f: f, size: size}, nil
}

// mapIn maps the segment: its slot of its file's map, made with the first
// of the file's segments mapped. Under Log.mu once the log runs.
func (s *segment) mapIn(size int64) error {
	f := s.file
	if f.data == nil {
		b, err := unix.Mmap(int(f.f.Fd()), 0, int(f.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fsys.FileError("mmap", s.path, err)
		}
		f.data = b
	}
	f.mapped++
	s.data = f.data[s.off : s.off+size : s.off+size]
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

// unmap drops the segment's map, and its file's with the last of the
// file's segments mapped. Under Log.mu once the log runs.
func (s *segment) unmap() error {
	if s.data == nil {
		return nil
	}
	s.data = nil
	f := s.file
	if f.mapped--; f.mapped > 0 {
		return nil
	}
	err := fsys.Unmap(f.data)
	f.data = nil
	return err
}

// close unmaps the segment and lets go of its file, closing the file with
// its last segment; last reports that it was. Under Log.mu once the log
// runs.
func (s *segment) close() (last bool, err error) {
	err = s.unmap()
	if s.file.refs--; s.file.refs > 0 {
		return false, err
	}
	if cerr := s.file.closeFD(); err == nil {
		err = cerr
	}
	return true, err
}
