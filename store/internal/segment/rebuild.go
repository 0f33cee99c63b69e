package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// Found is what a log's segment files say of it that its metafile says
// too: how many segments a file holds and where its oldest file starts.
// FindLog reads it when the metafile was deleted or emptied, so that the
// metafile is rebuilt around the log (Meta.Adopt) instead of a new one
// taking the log for damage and setting all of it aside.
type Found struct {
	Slots  int64 // segments a file, the files' size over the segment size
	Oldest int64 // the oldest file's first position: recovery checks every record from it
}

// MetaLost reports whether the metafile at path is missing or empty, as
// OpenMeta finds a new directory's.
func MetaLost(path string) (bool, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true, nil
	case err != nil:
		return false, fsys.FileError("stat", path, err)
	}
	return st.Size() == 0, nil
}

// FindLog reads the segment files of the log directory dir, for a
// metafile that is missing or empty; ok is false when there are none (a
// new log). The files must be one size, a whole number of segments of
// segSize (the --segment-size the directory was made with: the metafile
// said it), and the oldest file's records must say the same (checkSize):
// when they do not (a log written in segments of another size, or
// before marks existed), the error says so, and nothing is changed.
func FindLog(dir string, segSize int64) (f Found, ok bool, err error) {
	bases, size, err := segmentFiles(dir)
	if err != nil || len(bases) == 0 {
		return Found{}, false, err
	}
	if size <= 0 || size%segSize != 0 {
		return Found{}, false, fmt.Errorf("the segment files are %d bytes, not a whole number of segments of %d bytes", size, segSize)
	}
	oldest := slices.Min(bases)
	if oldest%size != 0 {
		return Found{}, false, fmt.Errorf("the oldest segment file starts at %d, not at a multiple of its size %d", oldest, size)
	}
	data, done, err := mapSegmentFile(dir, oldest, size)
	if err != nil {
		return Found{}, false, err
	}
	defer done()
	var next []byte
	if slices.Contains(bases, oldest+size) {
		var doneNext func()
		if next, doneNext, err = mapSegmentFile(dir, oldest+size, size); err != nil {
			return Found{}, false, err
		}
		defer doneNext()
	}
	path := filepath.Join(dir, segmentName(oldest))
	if err := fsys.GuardDoing("reading", path, func() error { return checkSize(data, next, markOf(oldest, segSize), segSize) }); err != nil {
		return Found{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return Found{Slots: size / segSize, Oldest: oldest}, true, nil
}

// segmentFiles lists the bases of the segment files in dir, and their
// size, which must be one.
func segmentFiles(dir string) (bases []int64, size int64, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	} else if err != nil {
		return nil, 0, fsys.FileError("readdir", dir, err)
	}
	size = -1
	for _, e := range entries {
		base, isSeg := parseSegmentName(e.Name())
		if !isSeg {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, 0, fsys.FileError("stat", filepath.Join(dir, e.Name()), err)
		}
		if size >= 0 && info.Size() != size {
			return nil, 0, fmt.Errorf("the segment files are not all one size (%d and %d bytes)", size, info.Size())
		}
		size = info.Size()
		bases = append(bases, base)
	}
	return bases, size, nil
}

// checkSize checks segSize against the records of data, a segment file
// from its first segment, whose mark is mark, and of next, the file after
// it (nil: none): that segment's records (read as recovery reads them,
// each checked) must end before segSize, and when the writer left it (its
// end marker), the next segment's first record must be at segSize: the
// first page-aligned offset after the end marker that holds a valid
// record with the next mark (between them lie zeros or stale bytes of the
// file's earlier use, whose marks are older), or, when data holds none,
// next's first. Nothing written (zeros) fits any size, and so does a
// segment the writer has not left yet, or left before its next record.
func checkSize(data, next []byte, mark uint32, segSize int64) error {
	size := int64(len(data))
	off := int64(0)
	for n, ok := validAt(data, 0, mark); ok; n, ok = validAt(data, off, mark) {
		off += n
	}
	switch m, k := prefixAt(data, off); {
	case off == 0 && m == 0 && k == 0:
		return nil // nothing written
	case off == 0:
		return fmt.Errorf("its first record does not read with mark %d: the log was written before marks, or in segments of another size than %d bytes", mark, segSize)
	case off > segSize:
		return fmt.Errorf("its first segment's records run to offset %d, past a segment of %d bytes: the log was written in larger segments", off, segSize)
	case m != mark || k != kindEnd:
		return nil // the writer is still in the first segment, or its end was lost with its tail
	}
	page := int64(fsys.PageSize)
	for at := (off + prefixSize + page - 1) &^ (page - 1); at < size; at += page {
		if _, ok := validAt(data, at, mark+1); !ok {
			continue
		}
		if at != segSize {
			return fmt.Errorf("its second segment begins at offset %d, not %d: the log was written in segments of %d bytes", at, segSize, at)
		}
		return nil
	}
	if _, ok := validAt(next, 0, mark+1); ok && segSize != size {
		return fmt.Errorf("its second segment is the next file's first: the log was written in segments of %d bytes, not %d", size, segSize)
	}
	return nil
}

// prefixAt is the mark and kind of the entry at off of b (see putPrefix);
// zeros past its end.
func prefixAt(b []byte, off int64) (mark, kind uint32) {
	if off+prefixSize > int64(len(b)) {
		return 0, 0
	}
	return binary.LittleEndian.Uint32(b[off:]), binary.LittleEndian.Uint32(b[off+4:])
}

// validAt reports whether b holds a valid record with mark at off, and
// the log bytes it takes.
func validAt(b []byte, off int64, mark uint32) (int64, bool) {
	if m, k := prefixAt(b, off); m != mark || k != kindRecord || off+prefixSize+record.HeaderSize > int64(len(b)) {
		return 0, false
	}
	r, err := record.Decode(b[off+prefixSize:])
	if err != nil || r == nil {
		return 0, false
	}
	return entrySize(r.Size()), true
}

// mapSegmentFile maps the segment file at base in dir, size bytes, read
// only; done unmaps and closes it.
func mapSegmentFile(dir string, base, size int64) (data []byte, done func(), err error) {
	path := filepath.Join(dir, segmentName(base))
	file, err := os.Open(path)
	if err != nil {
		return nil, nil, fsys.FileError("open", path, err)
	}
	data, err = unix.Mmap(int(file.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		file.Close()
		return nil, nil, fsys.FileError("mmap", path, err)
	}
	return data, func() { fsys.Unmap(data); file.Close() }, nil
}

// Adopt makes m, a metafile just made (OpenMeta found it missing or
// empty), the metafile of the log f describes: its files' segments, every
// record from the oldest file on marked and checked again by recovery (no
// position said flushed), the indexes fed again from there. The rest is a
// new metafile's: a new origin, so that no (origin, seq) of the lost one
// is used again; the clock's floor is the records' (the store's replay).
// m's segment size must be the one FindLog read f with.
func (m *Meta) Adopt(f Found) error {
	m.slots = f.Slots
	m.Put(OffSlots, uint64(f.Slots))
	m.Put(OffMarkedFrom, uint64(f.Oldest)+1)
	for _, off := range []int{OffWriting, OffWatermark, OffCommitted, OffReading} {
		m.SetPos(off, f.Oldest)
	}
	return m.Sync()
}
