// Package fsys holds the few file-system and map operations every file of
// the store uses: preallocation, mapping, syncing, atomic file creation, the
// guard that turns a fault on a mapped page into an error, and the
// fault-injecting hook the tests use. Errors are wrapped with the store's
// sentinels (errs.ErrIO, errs.ErrDiskFull).
package fsys

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/store/internal/errs"
)

// Allocate reserves size bytes for f so that no later write through a map
// can fail for want of space (a SIGBUS). Blocks already allocated stay as
// they are (written ones keep their bytes). Space errors become
// ErrDiskFull.
func Allocate(f *os.File, size int64) error { return allocate(f, 0, size, true) }

// AllocateRange is Allocate for [off, off+n) of a file whose size covers
// it already and that holds nothing there yet (a new segment, allocated
// ahead of its writer window by window).
func AllocateRange(f *os.File, off, n int64) error { return allocate(f, off, n, false) }

func allocate(f *os.File, off, n int64, whole bool) error {
	if err := injectedFault("allocate"); err != nil {
		return FileError("allocate", f.Name(), err)
	}
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EOPNOTSUPP {
			// A file system without fallocate: write zeros, which
			// allocates the blocks the slow way (past the file's end only,
			// for a whole file, so as not to overwrite what it holds).
			from := off
			if whole {
				st, err := f.Stat()
				if err != nil {
					return FileError("stat", f.Name(), err)
				}
				from = max(from, st.Size())
			}
			return writeZeros(f, from, off+n)
		}
		return FileError("allocate", f.Name(), err)
	}
}

// writeZeros writes zeros over [from, to) of f.
func writeZeros(f *os.File, from, to int64) error {
	zeros := make([]byte, min(to-from, 1<<20))
	for o := from; o < to; {
		m := min(int64(len(zeros)), to-o)
		if _, err := f.WriteAt(zeros[:m], o); err != nil {
			return FileError("zero", f.Name(), err)
		}
		o += m
	}
	return nil
}

// Discard makes [off, off+n) of f read as zeros and gives its blocks back
// (FALLOC_FL_PUNCH_HOLE); allocated reports whether the range is still
// allocated (a file system that cannot punch holes zeroes the range in
// place instead, see ZeroRange). Not durable until f is synced.
func Discard(f *os.File, off, n int64) (allocated bool, err error) {
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return false, nil
	}
	if err != unix.EOPNOTSUPP && err != unix.EINVAL {
		return false, FileError("punch", f.Name(), err)
	}
	return true, ZeroRange(f, off, n)
}

// ZeroRange makes [off, off+n) of f read as zeros while keeping its blocks
// allocated, so a recycled segment reads as empty.
func ZeroRange(f *os.File, off, n int64) error {
	_, err := zeroRange(f, off, n)
	return err
}

// ZeroBeforeRename is ZeroRange for a file about to be renamed to a name
// where its old bytes must never show (a dropped index chunk's file made
// the next chunk): once the rename is durable, so are the zeros. A
// fallocate is a metadata change the file system's journal orders before
// the rename; zeros written where fallocate cannot are fsynced first.
func ZeroBeforeRename(f *os.File, off, n int64) error {
	wrote, err := zeroRange(f, off, n)
	if err == nil && wrote {
		if err = f.Sync(); err != nil {
			err = FileError("fsync", f.Name(), err)
		}
	}
	return err
}

// zeroRange is ZeroRange; wrote says it wrote zeros (the file system has
// no fallocate for it) rather than changed the file's metadata.
func zeroRange(f *os.File, off, n int64) (wrote bool, err error) {
	fd := int(f.Fd())
	err = unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return false, nil
	}
	if err == unix.EOPNOTSUPP || err == unix.EINVAL {
		// Punch a hole (reads as zeros) and allocate it again.
		if err = unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err == nil {
			err = unix.Fallocate(fd, 0, off, n)
		}
	}
	if err == unix.EOPNOTSUPP || err == unix.EINVAL {
		return true, writeZeros(f, off, off+n)
	}
	if err != nil {
		return false, FileError("zero", f.Name(), err)
	}
	return false, nil
}

// Map maps size bytes of f shared, read and write.
func Map(f *os.File, size int) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, FileError("mmap", f.Name(), err)
	}
	return b, nil
}

// Unmap releases a map made by Map.
func Unmap(b []byte) error {
	if b == nil {
		return nil
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("%w: munmap: %v", errs.ErrIO, err)
	}
	return nil
}

// PopulateWrite faults the pages of b (part of a map, allocated) in,
// writable, ahead of a writer (MADV_POPULATE_WRITE; kernels before 5.14
// lack it, and MADV_WILLNEED reads the pages ahead instead), so that the
// writer takes no page faults there. b starts on a page. The pages
// it dirties are the writer's to overwrite; at worst they are written
// back once.
func PopulateWrite(b []byte) {
	if len(b) == 0 {
		return
	}
	if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); err != nil {
		// An old kernel: fault the pages in for reading at least.
		_ = unix.Madvise(b, unix.MADV_WILLNEED)
	}
}

// Release drops the pages of b (part of a shared file map, starting on a
// page) from the process's resident set (MADV_DONTNEED): they stay in the
// page cache, dirty ones too (a shared map's dirty bit goes to the page),
// and a later access maps them again from there, a minor fault. What the
// kernel must keep resident for the process shrinks; nothing is lost.
func Release(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("%w: madvise DONTNEED: %v", errs.ErrIO, err)
	}
	return nil
}

// SyncRange writes the pages of b[from:to] back to the file and waits for
// the device (msync MS_SYNC). The range is widened to whole pages.
func SyncRange(b []byte, from, to int) error {
	if to <= from {
		return nil
	}
	from &^= PageSize - 1
	if err := injectedFault("sync"); err != nil {
		return fmt.Errorf("%w: msync: %v", errs.ErrIO, err)
	}
	if err := unix.Msync(b[from:to], unix.MS_SYNC); err != nil {
		return fmt.Errorf("%w: msync: %v", errs.ErrIO, err)
	}
	return nil
}

// SyncFileRange is SyncRange for [off, off+n) of f, for a range not
// mapped now (the pages a dropped map dirtied stay dirty in the page
// cache until written back): it maps the range only to msync it, which
// faults nothing in, so that only the range is written back, not every
// dirty page of f as fdatasync would (in a file of several segments, the
// pages faulted in ahead of the writer in its later ones).
func SyncFileRange(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	start := off &^ int64(PageSize-1)
	b, err := unix.Mmap(int(f.Fd()), start, int(off+n-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return FileError("mmap", f.Name(), err)
	}
	if err = SyncRange(b, 0, len(b)); err != nil {
		err = fmt.Errorf("%w (%s, bytes %d to %d, not mapped)", err, f.Name(), off, off+n)
	}
	if uerr := Unmap(b); err == nil {
		err = uerr
	}
	return err
}

// PageSize is the size of a memory page, the unit of a map and a sync.
var PageSize = os.Getpagesize()

// FaultHook, when set (only by tests), is asked before each allocation
// ("allocate"), flush ("sync") and directory sync ("syncdir") and fails it
// with the error it returns: the store's fault-injecting file layer.
var FaultHook atomic.Pointer[func(op string) error]

func injectedFault(op string) error {
	if h := FaultHook.Load(); h != nil {
		return (*h)(op)
	}
	return nil
}

// FileError wraps a system call error with the file and the store's
// sentinel for its class: ErrDiskFull for space, ErrIO for the rest. An
// os error names its own operation and file, which are used instead, so
// the message says them once ("mkdir /d: not a directory", not
// "mkdir /d: mkdir /d: not a directory").
func FileError(op, path string, err error) error {
	if err == nil {
		return nil
	}
	if pe, ok := err.(*os.PathError); ok {
		op, path, err = pe.Op, pe.Path, pe.Err
	}
	if isSpaceError(err) {
		return fmt.Errorf("%w: %s %s: %v", errs.ErrDiskFull, op, path, err)
	}
	return fmt.Errorf("%w: %s %s: %v", errs.ErrIO, op, path, err)
}

func isSpaceError(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}

// Guard runs fn with SetPanicOnFault on, so that a fault on a mapped
// page (an I/O error under the map, a truncated file) comes back as an
// ErrIO instead of killing the process. The goroutine keeps the setting
// only for the call.
func Guard(fn func() error) error { return GuardDoing("on a mapped page", "", fn) }

// GuardDoing is Guard whose error says what fn was doing, and to
// which file when path is not empty: "fault reading <path> at 0x...". It
// is the one place the store turns faults into errors; the strings are
// joined only when a fault happened, so the hot paths (append, read) pay
// no allocation for them.
func GuardDoing(doing, path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if re, ok := r.(interface{ Addr() uintptr }); ok {
				if path != "" {
					doing += " " + path
				}
				err = fmt.Errorf("%w: fault %s at %#x", errs.ErrIO, doing, re.Addr())
				return
			}
			panic(r)
		}
	}()
	return fn()
}

// CreateAtomic makes the file at path whole or not at all (raft's
// file snapshots, etcd's wal do the same): fill writes the file under a
// temporary name beside it (path + tmpSuffix: a crash's leftover is
// recognised by the suffix and removed or ignored), which is closed and
// renamed over path, and the directory is fsynced. fill must fsync what it
// wrote when the bytes must survive a crash (a metadata-only change, such
// as a preallocation, is ordered before the rename by the file system's
// journal and needs none). On an error path is untouched and the temporary
// file removed. The file's mode is 0640, as every file of the store.
func CreateAtomic(path string, fill func(f *os.File) error) error {
	if err := CreateRenamed(path, fill); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// CreateRenamed is CreateAtomic without the fsync of the directory: the
// file is whole or absent, but may be absent after a crash until the
// caller syncs the directory (SyncDir), which it must do before it counts
// on the file (an index chunk made ahead of its writer: the directory is
// synced off the writer's path, and before any entry in it is synced).
func CreateRenamed(path string, fill func(f *os.File) error) error {
	tmp := path + TmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return FileError("create", tmp, err)
	}
	err = fill(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = FileError("close", tmp, cerr)
	}
	if err == nil {
		if rerr := os.Rename(tmp, path); rerr != nil {
			err = FileError("rename", tmp, rerr)
		}
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// WriteSynced is a fill for CreateAtomic: b, fsynced.
func WriteSynced(b []byte) func(f *os.File) error {
	return func(f *os.File) error {
		if _, err := f.Write(b); err != nil {
			return FileError("write", f.Name(), err)
		}
		if err := f.Sync(); err != nil {
			return FileError("fsync", f.Name(), err)
		}
		return nil
	}
}

// SyncDir makes a rename or a new file in dir durable.
func SyncDir(dir string) error {
	if err := injectedFault("syncdir"); err != nil {
		return FileError("fsync", dir, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return FileError("open", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return FileError("fsync", dir, err)
	}
	return nil
}

// TmpSuffix ends the name of a file being made by CreateAtomic; a file so
// named is a crash's leftover.
const TmpSuffix = ".tmp"

// Castagnoli is the CRC-32C table of every checksum the store's files
// carry, built once.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// IsZero reports whether every byte of b is zero.
func IsZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// NumberName is the file name of a file named by a number (a segment by
// its first log position, an index chunk by its first entry): 20 decimal
// digits, so that names sort in number order (as RocketMQ's CommitLog
// files and etcd's WAL files do).
func NumberName(n uint64) string { return fmt.Sprintf("%020d", n) }

// ParseNumberName is NumberName's inverse; ok is false for any other name.
func ParseNumberName(name string) (n uint64, ok bool) {
	if len(name) != 20 || strings.Trim(name, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(name, 10, 64)
	return n, err == nil
}
