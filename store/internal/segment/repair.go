package segment

import (
	"errors"
	"fmt"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// Repairing a damaged record in place (the store's repair.go decides what
// to write): the bytes of a record's slot are copied aside, then the slot
// is overwritten with a placeholder of the same size, and later with the
// record itself, pulled back from a peer. Both run under the store's
// write lock, which keeps the slot's segment from being recycled
// meanwhile; readers may read the slot at the same time and see either
// version or a torn mix, which fails its CRC (they ask again).

// ErrNothingHere means ReadExact found no record where one may be, with
// the log going on after it: a zero header with written bytes after it
// in the segment (a page lost to zeros), or, for a framed entry, a prefix
// that is neither a record's nor the end marker, or a record's prefix
// before a zero header. It is either damage or (no record there in the
// indexes, MovedOnAt) stray bytes in the unused tail of a segment.
var ErrNothingHere = errors.New("store: nothing written at the position, with records after it")

// ReadExact is ReadAt, except that what ReadAt takes for the unused tail
// of a segment (a zero header) is ErrNothingHere when written bytes
// follow it in the segment (up to the log's end), or when a framed
// entry's prefix is a record's; next is then the next segment's start.
// The store tells a damaged record from stray bytes in a segment's unused
// tail by its indexes and MovedOnAt.
func (l *Log) ReadExact(pos int64, fn func(r record.Record, at int64) error) (next int64, err error) {
	if pos < l.oldest.Load() || pos >= l.end.Load() || pos%record.Align != 0 {
		return l.ReadAt(pos, fn) // its errors
	}
	s, err := l.pin(pos)
	if err != nil {
		return pos, err
	}
	off := pos - s.base
	framed := l.framed(s, off)
	next, skip, err := l.readPinned(s, pos, fn)
	if skip && err == nil {
		// A zero header: the segment's unused tail, or a zeroed record
		// when written bytes follow.
		err = fsys.GuardDoing("reading", s.path, func() error {
			if framed {
				// The end marker, or too little room, unless a record's
				// prefix is there: the writer writes its header with it.
				if l.prefixed(s, off, kindRecord) {
					return fmt.Errorf("%w: a record's prefix with a zero header (segment %s, offset %d)", ErrNothingHere, s.path, off)
				}
				return nil
			}
			if !fsys.IsZero(s.data[off:min(l.segSize, l.end.Load()-s.base)]) {
				return fmt.Errorf("%w (segment %s, offset %d)", ErrNothingHere, s.path, off)
			}
			return nil
		})
	}
	l.unpin(s)
	if skip && err == nil && framed {
		// An end marker is one only where the writer went on (a damaged
		// record's prefix may read as one).
		moved, merr := l.MovedOnAt(pos)
		switch {
		case merr != nil:
			return pos, merr
		case !moved:
			err = fmt.Errorf("%w: an end marker where the log goes on (segment %s, offset %d)", ErrNothingHere, s.path, off)
		}
	}
	if errors.Is(err, ErrNothingHere) {
		next = s.base + l.segSize
	}
	if !skip || err != nil {
		return next, err
	}
	return l.ReadAt(next, fn) // on to the next segment, as Read does
}

// MovedOnAt reports whether the writer went on to the next segment at
// pos (as recovery decides where the log goes on): zeros there, and
// whatever stray bytes follow them, are the segment's unused tail unless
// something else (the indexes) knows a record at pos.
func (l *Log) MovedOnAt(pos int64) (bool, error) {
	base := pos - pos%l.segSize + l.segSize
	if base >= l.end.Load() {
		return false, nil // the log ends in pos's segment: no tail here
	}
	s, err := l.pin(pos)
	if err != nil {
		return false, err
	}
	defer l.unpin(s)
	next, err := l.pin(base)
	if err != nil {
		return false, err
	}
	defer l.unpin(next)
	return l.movedOn(s, pos%l.segSize, next)
}

// CopyAside saves the n bytes of the record slot of the entry at
// committed position pos to a new file in <dir>/corrupt/, durably (the
// file and the directory synced), and returns its path. (A framed entry's
// record begins after its prefix, see Log.)
func (l *Log) CopyAside(pos int64, n int) (string, error) {
	s, off, err := l.pinSlot(pos, n)
	if err != nil {
		return "", err
	}
	defer l.unpin(s)
	var data []byte
	if err := fsys.GuardDoing("reading", s.path, func() error {
		data = append([]byte(nil), s.data[off:off+int64(n)]...)
		return nil
	}); err != nil {
		return "", err
	}
	return l.saveAside(s.base, off, data)
}

// Overwrite writes b over the committed record slot of the entry at pos
// (its prefix written again too, when it has one: the damage may be
// there) and syncs them. b must fit in the segment; the caller keeps
// records whole (it writes a record's slot, padding included).
func (l *Log) Overwrite(pos int64, b []byte) error {
	s, off, err := l.pinSlot(pos, len(b))
	if err != nil {
		return err
	}
	defer l.unpin(s)
	from := off
	if err := fsys.GuardDoing("writing", s.path, func() error {
		if l.framed(s, pos-s.base) {
			from = pos - s.base
			l.putPrefix(s, from, kindRecord)
		}
		copy(s.data[off:], b)
		return nil
	}); err != nil {
		return err
	}
	return fsys.SyncRange(s.data, int(from), int(off)+len(b))
}

// pinSlot pins the segment of the record slot of n committed bytes of the
// entry at pos, which must lie in one segment, and returns the slot's
// offset in it.
func (l *Log) pinSlot(pos int64, n int) (*segment, int64, error) {
	var skip int64
	if pos >= l.markedFrom {
		skip = prefixSize
	}
	if pos < 0 || pos%8 != 0 || n <= 0 || pos+skip+int64(n) > l.end.Load() || pos/l.segSize != (pos+skip+int64(n)-1)/l.segSize {
		return nil, 0, fmt.Errorf("%w: %d bytes at %d (log end %d)", errs.ErrBadPosition, n, pos, l.end.Load())
	}
	s, err := l.pin(pos)
	if err != nil {
		return nil, 0, err
	}
	return s, pos - s.base + skip, nil
}
