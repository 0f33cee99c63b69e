package view

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"slices"
	"time"
	"unsafe"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// A snapshot file holds the whole view (tombstones included), the
// per-origin high-water marks and the log position it covers, so that a
// restart loads it and replays only the log from that position on.
//
//	 0                       8           12          16                      24
//	+-----------------------+-----------+-----------+-----------------------+
//	| magic "CCSNAP01"      | version   | reserved  | covers (int64): every |
//	|                       | (u32) = 1 | (u32) = 0 | record before it is in|
//	+-----------------------+-----------+-----------+-----------------------+
//	24                      32                      40                      48
//	| marks (u64)           | topics (u64)          | entries (u64)         |
//	+-----------------------+-----------------------+-----------------------+
//	48: `marks` marks, ascending and distinct origins (16 bytes each)
//	+-----------------------+-----------------------+
//	| origin (u64) != 0     | highest seq applied   |
//	+-----------------------+-----------------------+
//	then `topics` topics, ascending and distinct names, each followed by its
//	entries (at least one) in ascending and distinct key order
//	+-----------------------+----------+------------+
//	| entries (u64) >= 1    | len (u16)| name       |
//	+-----------------------+----------+------------+
//	+-------+---------+---------+-----------+--------+--------+--------+-----+-----+-------+
//	| flags | key len | tag len | value len | origin |  seq   |  hlc   | key | tag | value |
//	| (u8)  | (u16)   | (u16)   | (u32)     | (u64)  | (u64)  | (u64)  |     |     |       |
//	+-------+---------+---------+-----------+--------+--------+--------+-----+-----+-------+
//	  flags: bit 0 = tombstone (then tag and value are empty); other bits 0.
//	  key len >= 1, origin and seq != 0. The entry counts add up to `entries`.
//
// Version 2 is written when the view holds a record with a time field
// (an expiry, an effective time, a cancel); otherwise the file is version
// 1, which older builds read. In version 2 an entry's flags have three more
// bits: 2 = timed (16 bytes follow the fixed part, before the key:
// effective_at u64 and expires u64, Unix ms, 0 for none), 4 = scheduled
// (effective_at is set), 8 = cancel (effective_at set, no tag or value);
// and a key with a timeline (see "Time" in package store's view) is
// written as all its records, ascending in (effective time, HLC, origin),
// so a topic's keys ascend but may repeat. A value whose expiry has passed
// when the snapshot is written is written as a tombstone that keeps its
// stamp, effective time and expiry: an expired value is never in a
// snapshot.
//
// Version 3 is written when the view holds an expiry change's mark (see
// expiry.go: the change in force for a key's version, which a later
// change of that version must beat). It is version 2 with, in each topic
// between its name and its entries, that topic's marks, ascending and
// distinct keys:
//
//	+-------------------+----------+-----+---------------+---------------+
//	| marks (u64)       | key len  | key | target origin | target seq    |
//	|                   | (u16)>=1 |     | (u64) != 0    | (u64) != 0    |
//	+-------------------+----------+-----+---------------+---------------+
//	+---------------+---------------+---------------+
//	| target hlc    | change hlc    | change origin |   (for each mark)
//	| (u64)         | (u64)         | (u64) != 0    |
//	+---------------+---------------+---------------+
//
// Version 4 is written when the view holds a counter (counter.go: the
// increments counted on a key's version). It is version 3 with, after each
// topic's marks, that topic's counters, ascending and distinct keys:
//
//	+-----------------+----------+-----+---------------+---------------+---------------+
//	| counters (u64)  | key len  | key | target origin | target seq    | target hlc    |
//	|                 | (u16)>=1 |     | (u64) != 0    | (u64) != 0    | (u64)         |
//	+-----------------+----------+-----+---------------+---------------+---------------+
//	+---------------+-------+-----------+------+-------------+
//	| target eff    | known | base len  | base | origins     |   (for each counter)
//	| (u64, Unix ms)| (u8)  | (u32)     |      | (u32) >= 1  |
//	+---------------+-------+-----------+------+-------------+
//	+---------------+---------------+---------------+---------------+-------+
//	| origin (u64)  | last seq (u64)| integers (i64)| floats (f64   | float |  (each
//	| != 0, ascending| != 0         |               |  bits)        | (u8)  |  origin)
//	+---------------+---------------+---------------+---------------+-------+
//
// known is 1 when the base (the version's own value) is known, 0 (and no
// base) while the version has not come.
//
// Version 5 is written when the view holds a counter on the absence of a
// key's value (record version 5): version 4 where each counter's known
// has bit 2 set for such a counter, and 16 bytes follow it, gone (u64:
// the target's expiry when it expired, 0: deleted) and horizon (u64, a
// genesis counter's least horizon, Unix ms); a genesis counter's target
// is record.Genesis.
//
// Version 6 is written when the view holds an expiry change of a
// counter's revival (record version 6), as its mark or as a counter on
// an absence that counts nothing yet, which such a change started. It is
// version 5 where such a counter has 0 origins, and where each expiry
// mark is followed by 9 bytes: absent (u8, 1 for a change of the revival
// of the absence after the target, else 0) and gone (u64, that
// absence's; 0 unless absent).
//
//	+-----------------------------+
//	| crc32c (u32) of every byte  |  the last 4 bytes of the file
//	| before it                   |
//	+-----------------------------+
//
// All integers are little endian; nothing is aligned: the file is read and
// written as a stream through bufio, never held in memory.
//
// The file is replaced atomically: written to a temporary file in the same
// directory (named <base>.*.tmp; one left by a crash can be deleted), synced,
// renamed over the old one, and the directory synced. A reader rejects
// anything that does not follow the layout above exactly, or whose CRC does
// not match, with an error wrapping record.ErrCorrupt; every count and length is
// checked against the bytes left in the file before anything is allocated.
const (
	snapMagic      = "CCSNAP01"
	snapVersion    = 1
	snapVersion2   = 2
	snapVersion3   = 3
	snapVersion4   = 4
	snapVersion5   = 5
	snapVersion6   = 6
	snapMarksSize  = 8  // marks u64
	snapExpMark    = 42 // key len u16, target origin, seq, hlc, change hlc, origin (u64 each)
	snapTimedSize  = 16 // effective_at u64, expires u64
	snapHeaderSize = 48
	snapMarkSize   = 16
	// snapMarkAbsence is an expiry mark's absence in version 6: absent
	// u8, gone u64.
	snapMarkAbsence = 9
	snapTopicSize   = 10 // entries u64 + name len u16
	snapEntrySize   = 33 // flags .. hlc
	snapTrailer     = 4

	snapFlagTombstone = 1
	snapFlagTimed     = 2
	snapFlagScheduled = 4
	snapFlagCancel    = 8

	// snapBufSize is the bufio buffer of the writer and the reader.
	snapBufSize = 1 << 20
)

// WriteSnapshot writes the view, the position it covers and the per-origin
// marks to path, atomically.
//
// The view is cloned (copy-on-write, O(1) per topic) under its lock at the
// start; the file is written from the clone while Apply goes on. So the
// snapshot may hold records applied after covers and marks were taken, never
// fewer: the caller takes covers and marks first (or at the same moment),
// and a restart that replays the log from covers applies some records twice,
// which the view's rule makes harmless.
func WriteSnapshot(path string, v *View, covers int64, marks map[uint64]uint64) error {
	if err := checkSnapshotArgs(covers, marks); err != nil {
		return err
	}
	return fsys.CreateAtomic(path, func(f *os.File) error {
		if err := EncodeSnapshot(f, v, covers, marks); err != nil {
			return fsys.FileError("write", f.Name(), err)
		}
		if err := f.Sync(); err != nil {
			return fsys.FileError("fsync", f.Name(), err)
		}
		return nil
	})
}

// EncodeSnapshot streams a snapshot of v, the position it covers and the
// per-origin marks to w, as WriteSnapshot does to a file: a node streams
// it to a peer that bootstraps, with no file between (the view is cloned
// at the start; Apply goes on meanwhile).
func EncodeSnapshot(w io.Writer, v *View, covers int64, marks map[uint64]uint64) error {
	return EncodeSnapshotUpTo(w, v, covers, marks, snapVersion6)
}

// ErrSnapshotTooNew means the view needs a newer snapshot version than
// the reader takes (a time field, for a build before version 2).
var ErrSnapshotTooNew = errors.New("view: the view holds time fields or expiry changes, which a snapshot of the version asked for cannot carry")

// EncodeSnapshotUpTo is EncodeSnapshot for a reader of snapshot versions
// up to maxVersion: ErrSnapshotTooNew, and nothing written, when the view
// needs a newer one.
func EncodeSnapshotUpTo(w io.Writer, v *View, covers int64, marks map[uint64]uint64, maxVersion int) error {
	if err := checkSnapshotArgs(covers, marks); err != nil {
		return err
	}
	topics, entries, version, ok := v.freezeSnapshot(maxVersion)
	if !ok {
		return fmt.Errorf("%w: it needs version %d, the peer reads up to %d", ErrSnapshotTooNew, version, maxVersion)
	}
	return encodeSnapshot(w, topics, entries, covers, marks, version)
}

func checkSnapshotArgs(covers int64, marks map[uint64]uint64) error {
	if covers < 0 {
		return fmt.Errorf("%w: snapshot covers negative position %d", record.ErrInvalid, covers)
	}
	if _, ok := marks[0]; ok {
		return fmt.Errorf("%w: snapshot mark for origin 0", record.ErrInvalid)
	}
	return nil
}

// freezeSnapshot is freeze, with the snapshot version the view needs:
// version 1 (which every build reads) unless it holds a time field (2),
// an expiry change's mark (3), a counter (4), one on an absence (5), or
// a change of a revival (6). ok is false, and nothing frozen, when that
// is above maxVersion.
func (v *View) freezeSnapshot(maxVersion int) (topics []frozenTopic, entries, version int, ok bool) {
	v.mu.Lock()
	version = snapVersion
	if v.timed > 0 {
		version = snapVersion2
	}
	for _, tv := range v.topics {
		if version == snapVersion6 {
			break
		}
		for _, m := range tv.marks {
			version = max(version, snapVersion3)
			if m.absent {
				version = snapVersion6
				break
			}
		}
		for _, c := range tv.counts {
			version = max(version, snapVersion4)
			if c.absent {
				version = max(version, snapVersion5)
			}
			if len(c.counts) == 0 {
				version = snapVersion6
				break
			}
		}
	}
	if version > maxVersion {
		v.mu.Unlock()
		return nil, 0, version, false
	}
	topics = v.freezeLocked()
	v.mu.Unlock()
	return topics, indexFrozen(topics), version, true
}

// crcWriter passes writes through and keeps the CRC-32C of what it passed.
type crcWriter struct {
	w   io.Writer
	crc uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, fsys.Castagnoli, p[:n])
	return n, err
}

// encodeSnapshot streams the snapshot of the frozen topics (holding entries
// entries in all) to w.
func encodeSnapshot(w io.Writer, topics []frozenTopic, entries int, covers int64, marks map[uint64]uint64, version int) error {
	cw := &crcWriter{w: w}
	bw := bufio.NewWriterSize(cw, snapBufSize)
	var b [snapHeaderSize]byte

	copy(b[0:], snapMagic)
	binary.LittleEndian.PutUint32(b[8:], uint32(version))
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], uint64(covers))
	binary.LittleEndian.PutUint64(b[24:], uint64(len(marks)))
	binary.LittleEndian.PutUint64(b[32:], uint64(len(topics)))
	binary.LittleEndian.PutUint64(b[40:], uint64(entries))
	bw.Write(b[:snapHeaderSize])

	for _, origin := range slices.Sorted(maps.Keys(marks)) {
		binary.LittleEndian.PutUint64(b[0:], origin)
		binary.LittleEndian.PutUint64(b[8:], marks[origin])
		bw.Write(b[:snapMarkSize])
	}

	for _, ft := range topics {
		binary.LittleEndian.PutUint64(b[0:], uint64(ft.entries()))
		binary.LittleEndian.PutUint16(b[8:], uint16(len(ft.name)))
		bw.Write(b[:snapTopicSize])
		bw.WriteString(ft.name)
		if version >= snapVersion3 {
			writeExpiryMarks(bw, ft.marks, version)
		}
		if version >= snapVersion4 {
			writeCounters(bw, ft.counts, version)
		}
		var val []byte
		ft.records(func(it *viewItem) bool {
			b[0] = 0
			if it.flags&itemTomb != 0 {
				b[0] = snapFlagTombstone
			}
			timed := version >= snapVersion2 && it.timedFields()
			if timed {
				b[0] |= snapFlagTimed
				if it.scheduled() {
					b[0] |= snapFlagScheduled
				}
				if it.cancel() {
					b[0] |= snapFlagCancel
				}
			}
			binary.LittleEndian.PutUint16(b[1:], it.klen)
			binary.LittleEndian.PutUint16(b[3:], it.tlen)
			binary.LittleEndian.PutUint32(b[5:], it.vlen)
			binary.LittleEndian.PutUint64(b[9:], it.stamp.Origin)
			binary.LittleEndian.PutUint64(b[17:], it.stamp.Seq)
			binary.LittleEndian.PutUint64(b[25:], it.stamp.HLC)
			bw.Write(b[:snapEntrySize])
			if timed {
				binary.LittleEndian.PutUint64(b[0:], uint64(it.scheduledAt()))
				binary.LittleEndian.PutUint64(b[8:], uint64(it.expiry()))
				bw.Write(b[:snapTimedSize])
			}
			// key, tag and value, the value read from the file when it
			// is there.
			bw.WriteString(it.key())
			bw.WriteString(it.tag())
			val = it.appendValue(val[:0], ft.file, ft.name)
			_, err := bw.Write(val)
			return err == nil
		})
	}
	// bufio keeps the first write error; Flush reports it.
	if err := bw.Flush(); err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(b[0:], cw.crc)
	_, err := w.Write(b[:snapTrailer])
	return err
}

// ReadSnapshot loads the snapshot at path. A missing file is reported with
// an error satisfying errors.Is(err, fs.ErrNotExist); a malformed one with
// record.ErrCorrupt; a failed read with errs.ErrIO.
func ReadSnapshot(path string, now func() time.Time) (v *View, covers int64, marks map[uint64]uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, nil, err
		}
		return nil, 0, nil, fsys.FileError("open", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, nil, fsys.FileError("stat", path, err)
	}
	v, covers, marks, err = decodeSnapshot(f, st.Size(), now)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return v, covers, marks, nil
}

// ApplySnapshot puts the entries of the snapshot read from r (a peer's,
// streamed as it arrives, for a bootstrap) into v by the usual rule as
// it reads them, without building a second view and without a file: the
// snapshot is held once in memory, as v's entries. It reads r to its end,
// which must come right after the trailer; the CRC is checked on the way,
// and the entries go in batches under v's lock, readers and Apply going on
// between them. It returns the snapshot's marks and the greatest HLC among
// its entries. On a damaged or cut-off snapshot (an error wrapping
// record.ErrCorrupt, or errs.ErrIO for a failed read) the entries read
// before the damage stay in v: each is a record of the peer's put by the
// rule, as a pull would bring it, and no marks are returned, so the
// caller moves no origin on.
func (v *View) ApplySnapshot(r io.Reader) (marks map[uint64]uint64, maxHLC uint64, err error) {
	d := &snapDecoder{into: v}
	if _, _, marks, err = d.decode(r, -1, nil); err != nil {
		return nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	return marks, d.maxHLC, nil
}

// snapDecoder reads a snapshot. From a file it counts the bytes left, so
// that no length is believed before it is known to fit; from a stream
// (sized false) it allocates no more than a constant times what has
// arrived (streamHint, readData).
type snapDecoder struct {
	br    *bufio.Reader
	cr    *crcReader // under br
	sized bool
	left  int64 // bytes of the body left; of a stream, math.MaxInt64 less what was read
	buf   [snapHeaderSize]byte

	// into, when set, is a live view the entries go into (ApplySnapshot),
	// a batch at a time; maxHLC is the greatest HLC among them.
	into   *View
	batch  []*viewItem
	maxHLC uint64
	// fresh says the topic being read was empty when it began, and
	// writes is its count of writes after the last batch (flush).
	fresh  bool
	writes uint64
	// count is the entries of the topic being read; hint what its index
	// was made for, when fresh (grown in flush, for a stream).
	count, hint int

	// marks are the expiry marks of the topic being read (version 3).
	marks map[string]expiryMark
	// counts are the counters of the topic being read (version 4).
	counts map[string]*counter

	// items, wides and data are the unused rest of the slabs the
	// entries are cut from (newItem, newWide, newData).
	items []viewItem
	wides []wideItem
	data  []byte
}

// Entries are cut from slabs, not allocated one by one: a million
// entries are then a few hundred allocations instead of two million,
// which the garbage collector marks in a fraction of the time (loading
// 1M entries took 2-3x longer with one allocation each). A slab lives
// while any entry cut from it is in the view or a clone, so a view
// loaded from a snapshot holds at most the snapshot's own bytes beyond
// its live entries, until its keys are written again.
const (
	slabItems = 1024    // items per slab (48 KiB; 64 KiB of wide items)
	slabBytes = 1 << 18 // data bytes per slab
	// slabLargest is the largest entry cut from a data slab; a larger
	// one gets an allocation of its own, so a slab wastes little.
	slabLargest = slabBytes / 8
)

// newItem returns a zero item from the item slab.
func (d *snapDecoder) newItem() *viewItem {
	if len(d.items) == 0 {
		d.items = make([]viewItem, slabItems)
	}
	it := &d.items[0]
	d.items = d.items[1:]
	return it
}

// newWide returns a zero wide item from the wide item slab, flagged so.
func (d *snapDecoder) newWide() *wideItem {
	if len(d.wides) == 0 {
		d.wides = make([]wideItem, slabItems)
	}
	w := &d.wides[0]
	d.wides = d.wides[1:]
	w.flags = itemWide
	return w
}

// newData returns n bytes from the data slab, which are never written
// again once filled.
func (d *snapDecoder) newData(n int) []byte {
	if n > slabLargest {
		return make([]byte, n)
	}
	if n > len(d.data) {
		d.data = make([]byte, slabBytes)
	}
	b := d.data[:n:n]
	d.data = d.data[n:]
	return b
}

// applyBatchSize is how many entries ApplySnapshot puts under one hold
// of the view's lock.
const applyBatchSize = 4096

// flush puts the batched entries into d.into.
func (d *snapDecoder) flush(tv *topicView) {
	if len(d.batch) == 0 {
		return
	}
	v := d.into
	v.mu.Lock()
	// While nothing but this snapshot wrote the topic since it was empty,
	// the entries' keys are new to it (a version 1 snapshot's keys are
	// distinct): no lookup, no rule to apply.
	d.fresh = d.fresh && tv.writes == d.writes
	if n := tv.byKey.len() + len(d.batch); d.fresh && n > d.hint && d.hint < d.count {
		// A stream's topic index is made for streamHint entries and grown
		// here sixteenfold at a time to its count (one copy of a
		// sixteenth of the entries in all, where the index's own growth
		// rehashes each entry again and again).
		d.hint = min(d.count, streamGrowth*n)
		tv.byKey = tv.byKey.grown(d.hint)
	}
	for _, it := range d.batch {
		d.maxHLC = max(d.maxHLC, it.stamp.HLC)
		if m, ok := markOf(d.marks, d.counts, it); ok {
			// The version (or revival) an expiry change reached: merged
			// as that change.
			v.markedLocked(tv, it, m)
		} else if d.fresh {
			it.epoch = v.epoch
		} else {
			old, te := tv.lookup(it.key())
			v.put(tv, old, te, it)
		}
	}
	if d.fresh {
		v.insertFresh(tv, d.batch)
	}
	d.writes = tv.writes
	v.unlock()
	clear(d.batch)
	d.batch = d.batch[:0]
}

// next reads the next n (<= snapHeaderSize) bytes into d.buf.
func (d *snapDecoder) next(n int, what string) ([]byte, error) {
	if int64(n) > d.left {
		return nil, fmt.Errorf("%w: %s needs %d bytes, %d left", record.ErrCorrupt, what, n, d.left)
	}
	return d.buf[:n], d.fill(d.buf[:n])
}

func (d *snapDecoder) fill(p []byte) error {
	if err := d.read(p); err != nil {
		return err
	}
	d.left -= int64(len(p))
	return nil
}

// crcReader passes reads through and keeps the CRC-32C of what it passed
// but the last snapTrailer bytes: once the stream has ended right after
// the trailer (decode checks that), the CRC of the body, found without
// knowing where the body ends.
type crcReader struct {
	r    io.Reader
	crc  uint32
	tail [2 * snapTrailer]byte
	held int // bytes of tail not in crc yet, at most snapTrailer between reads
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if b := p[:n]; len(b) >= snapTrailer {
		c.crc = crc32.Update(c.crc, fsys.Castagnoli, c.tail[:c.held])
		c.crc = crc32.Update(c.crc, fsys.Castagnoli, b[:len(b)-snapTrailer])
		c.held = copy(c.tail[:], b[len(b)-snapTrailer:])
	} else {
		c.held += copy(c.tail[c.held:], b)
		if k := c.held - snapTrailer; k > 0 {
			c.crc = crc32.Update(c.crc, fsys.Castagnoli, c.tail[:k])
			c.held = copy(c.tail[:], c.tail[k:c.held])
		}
	}
	return n, err
}

// read reads len(p) bytes, an end of file (a file that shrank under us,
// a stream cut short) being a corrupt snapshot.
func (d *snapDecoder) read(p []byte) error {
	if _, err := io.ReadFull(d.br, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: unexpected end of file", record.ErrCorrupt)
		}
		return fmt.Errorf("%w: read snapshot: %v", errs.ErrIO, err)
	}
	return nil
}

// readData reads the next n bytes (an entry's key, tag and value) into a
// slab or an allocation of their own. From a stream, a large entry's
// allocation grows as its bytes arrive: its length is not believed
// before they are there.
func (d *snapDecoder) readData(n int) ([]byte, error) {
	if d.sized || n <= streamChunk {
		buf := d.newData(n)
		return buf, d.fill(buf)
	}
	buf := make([]byte, 0, streamChunk)
	for len(buf) < n {
		c := min(n-len(buf), max(len(buf), streamChunk))
		buf = slices.Grow(buf, c)
		if err := d.fill(buf[len(buf) : len(buf)+c]); err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+c]
	}
	return buf, nil
}

// From a stream: a topic's index is made for at most streamHint entries
// and grown streamGrowth times at a time as its entries arrive (flush);
// an entry's bytes are allocated streamChunk at a time beyond that size.
const (
	streamHint   = 1 << 16
	streamGrowth = 16
	streamChunk  = 1 << 20
)

// decodeSnapshot reads a snapshot of size bytes from r (size < 0: a
// stream, see decode). now is the clock the view gets (nil: time.Now).
func decodeSnapshot(r io.Reader, size int64, now func() time.Time) (*View, int64, map[uint64]uint64, error) {
	return new(snapDecoder).decode(r, size, now)
}

// decode reads a snapshot from r into a new view, or into d.into when
// set: size bytes of it (a file), or, when size < 0, a stream up to its
// end, which must come right after the trailer.
func (d *snapDecoder) decode(r io.Reader, size int64, now func() time.Time) (*View, int64, map[uint64]uint64, error) {
	if err := d.open(r, size); err != nil {
		return nil, 0, nil, err
	}
	h, err := d.readHeader()
	if err != nil {
		return nil, 0, nil, err
	}
	marks, err := d.readOriginMarks(h.marks)
	if err != nil {
		return nil, 0, nil, err
	}
	v := d.into
	if v == nil {
		v = New()
		v.SetClock(now)
	}
	remaining := h.entries
	prevTopic := ""
	for i := uint64(0); i < h.topics; i++ {
		name, count, err := d.readTopicHeader(remaining, i, prevTopic)
		if err != nil {
			return nil, 0, nil, err
		}
		remaining -= count
		prevTopic = name
		if err := d.readTopic(v, name, count, h.version); err != nil {
			return nil, 0, nil, fmt.Errorf("topic %q: %w", name, err)
		}
	}
	if remaining != 0 {
		return nil, 0, nil, fmt.Errorf("%w: header counts %d entries, topics hold %d", record.ErrCorrupt, h.entries, h.entries-remaining)
	}
	if err := d.readTrailer(); err != nil {
		return nil, 0, nil, err
	}
	return v, h.covers, marks, nil
}

// open sets d to read size bytes of r (a file), or r up to its end when
// size < 0 (a stream).
func (d *snapDecoder) open(r io.Reader, size int64) error {
	d.sized, d.left = size >= 0, math.MaxInt64
	bufSize := snapBufSize
	if d.sized {
		if size < snapHeaderSize+snapTrailer {
			return fmt.Errorf("%w: %d bytes is too short for a snapshot", record.ErrCorrupt, size)
		}
		d.left = size - snapTrailer
		bufSize = int(min(size, snapBufSize))
		r = io.LimitReader(r, size)
	}
	d.cr = &crcReader{r: r}
	d.br = bufio.NewReaderSize(d.cr, bufSize)
	return nil
}

// snapHeader is a snapshot's header, read and checked.
type snapHeader struct {
	version                uint32
	covers                 int64
	marks, topics, entries uint64
}

// readHeader reads the header and checks its counts against the bytes
// left, so that a huge count fails before any allocation.
func (d *snapDecoder) readHeader() (snapHeader, error) {
	le := binary.LittleEndian
	b, err := d.next(snapHeaderSize, "header")
	if err != nil {
		return snapHeader{}, err
	}
	if string(b[:8]) != snapMagic {
		return snapHeader{}, fmt.Errorf("%w: bad magic %q", record.ErrCorrupt, b[:8])
	}
	h := snapHeader{version: le.Uint32(b[8:]), covers: int64(le.Uint64(b[16:])),
		marks: le.Uint64(b[24:]), topics: le.Uint64(b[32:]), entries: le.Uint64(b[40:])}
	if h.version < snapVersion || h.version > snapVersion6 {
		return snapHeader{}, fmt.Errorf("%w: unknown snapshot version %d", record.ErrCorrupt, h.version)
	}
	if res := le.Uint32(b[12:]); res != 0 {
		return snapHeader{}, fmt.Errorf("%w: reserved header field %#x", record.ErrCorrupt, res)
	}
	switch {
	case h.covers < 0:
		return snapHeader{}, fmt.Errorf("%w: covers negative position %d", record.ErrCorrupt, h.covers)
	case h.marks > uint64(d.left)/snapMarkSize:
		return snapHeader{}, fmt.Errorf("%w: %d marks in %d bytes", record.ErrCorrupt, h.marks, d.left)
	case h.topics > uint64(d.left)/(snapTopicSize+1):
		return snapHeader{}, fmt.Errorf("%w: %d topics in %d bytes", record.ErrCorrupt, h.topics, d.left)
	case h.entries > uint64(d.left)/(snapEntrySize+1):
		return snapHeader{}, fmt.Errorf("%w: %d entries in %d bytes", record.ErrCorrupt, h.entries, d.left)
	case h.topics > h.entries:
		return snapHeader{}, fmt.Errorf("%w: %d topics for %d entries", record.ErrCorrupt, h.topics, h.entries)
	}
	return h, nil
}

// readOriginMarks reads the n per-origin high-water marks, ascending and
// distinct origins.
func (d *snapDecoder) readOriginMarks(n uint64) (map[uint64]uint64, error) {
	le := binary.LittleEndian
	marks := make(map[uint64]uint64, min(n, streamHint))
	var prevOrigin uint64
	for i := uint64(0); i < n; i++ {
		m, err := d.next(snapMarkSize, "mark")
		if err != nil {
			return nil, err
		}
		origin := le.Uint64(m[0:])
		if origin <= prevOrigin {
			return nil, fmt.Errorf("%w: mark for origin %016x after %016x", record.ErrCorrupt, origin, prevOrigin)
		}
		marks[origin] = le.Uint64(m[8:])
		prevOrigin = origin
	}
	return marks, nil
}

// readTopicHeader reads the i-th topic's entry count and name, which
// must come after prev; remaining is the entries the header has left.
func (d *snapDecoder) readTopicHeader(remaining, i uint64, prev string) (string, uint64, error) {
	le := binary.LittleEndian
	th, err := d.next(snapTopicSize, "topic header")
	if err != nil {
		return "", 0, err
	}
	count, nameLen := le.Uint64(th[0:]), int64(le.Uint16(th[8:]))
	if count == 0 || count > remaining {
		return "", 0, fmt.Errorf("%w: topic of %d entries with %d left", record.ErrCorrupt, count, remaining)
	}
	if nameLen == 0 || nameLen > d.left {
		return "", 0, fmt.Errorf("%w: topic name of %d bytes with %d left", record.ErrCorrupt, nameLen, d.left)
	}
	name := make([]byte, nameLen)
	if err := d.fill(name); err != nil {
		return "", 0, err
	}
	if i > 0 && string(name) <= prev {
		return "", 0, fmt.Errorf("%w: topic %q after %q", record.ErrCorrupt, name, prev)
	}
	return string(name), count, nil
}

// readTopic reads the rest of a topic of count entries: its expiry marks
// (version 3), its counters (version 4) and its entries, into v.
func (d *snapDecoder) readTopic(v *View, name string, count uint64, version uint32) error {
	d.count, d.hint = int(count), int(count)
	if !d.sized {
		d.hint = min(d.hint, streamHint)
	}
	tv := d.topic(v, name, version)
	var err error
	d.marks = nil
	if version >= snapVersion3 {
		if d.marks, err = d.readExpiryMarks(version); err != nil {
			return err
		}
	}
	d.counts = nil
	if version >= snapVersion4 {
		if d.counts, err = d.readCounters(version); err != nil {
			return err
		}
	}
	return d.readEntries(v, tv, count, version)
}

// topic returns v's topic name: made for d.hint entries when it is new;
// in a live view (d.into), the one there already, if any, whose
// freshness and writes d notes (see flush).
func (d *snapDecoder) topic(v *View, name string, version uint32) *topicView {
	if d.into == nil {
		return v.addTopic(name, d.hint)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	tv := v.topics[name]
	if tv == nil {
		tv = v.addTopic(name, d.hint)
		v.gen.Add(1) // a topic Digests lists
	} else {
		d.hint = 0 // made by someone else: grown at the first batch
	}
	d.fresh = version == snapVersion && tv.byKey.len() == 0 && len(tv.tls) == 0
	d.writes = tv.writes
	return tv
}

// readTrailer reads the trailer, which must end the input, and checks
// the CRC of the body against it.
func (d *snapDecoder) readTrailer() error {
	if d.sized && d.left != 0 {
		return fmt.Errorf("%w: %d bytes after the last entry", record.ErrCorrupt, d.left)
	}
	var t [snapTrailer]byte
	if err := d.read(t[:]); err != nil {
		return fmt.Errorf("trailer: %w", err)
	}
	if _, err := d.br.ReadByte(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("%w: read snapshot: %v", errs.ErrIO, err)
		}
		return fmt.Errorf("%w: bytes after the trailer", record.ErrCorrupt)
	}
	// The stream ended with the trailer: the CRC reader holds it back.
	if got, want := d.cr.crc, binary.LittleEndian.Uint32(t[:]); got != want {
		return fmt.Errorf("%w: crc %08x, trailer says %08x", record.ErrCorrupt, got, want)
	}
	return nil
}

// readEntries reads count entries of tv and puts them into v.
func (d *snapDecoder) readEntries(v *View, tv *topicView, count uint64, version uint32) error {
	// prev is a copy of the entry before: the entry itself may be in the
	// live view already (ApplySnapshot), where a writer may update it in
	// place.
	var prev wideItem
	for j := uint64(0); j < count; j++ {
		it, err := d.readEntry(version)
		if err != nil {
			return err
		}
		if j > 0 {
			pk, k := prev.key(), it.key()
			// Version 1: keys ascend and are distinct. Version 2: a key's
			// records may repeat it, ascending in (eff, HLC, origin).
			if k < pk || k == pk && (version == snapVersion || !it.after(&prev.viewItem)) {
				return fmt.Errorf("%w: key %q after %q", record.ErrCorrupt, k, pk)
			}
		}
		prev.set(it)
		switch {
		case d.into != nil:
			if d.batch = append(d.batch, it); len(d.batch) == applyBatchSize {
				d.flush(tv)
			}
		case version == snapVersion:
			v.insertNew(tv, it)
		default:
			old, te := tv.lookup(it.key())
			v.put(tv, old, te, it) // by the rule: a key's records rebuild its timeline
		}
	}
	d.endTopic(tv)
	return nil
}

// endTopic puts what is left of a topic into the view: the last batch,
// and the topic's expiry marks and counters.
func (d *snapDecoder) endTopic(tv *topicView) {
	if d.into == nil {
		for k, m := range d.marks {
			tv.setMark(k, m)
		}
		for k, c := range d.counts {
			tv.setCount(k, c)
		}
		return
	}
	d.flush(tv)
	d.into.mu.Lock()
	for k, c := range d.counts {
		tv.mergeCounter(k, c)
		d.into.recount(tv, k)
	}
	d.into.unlock()
}

// readEntry reads and checks one entry of a snapshot of version: its
// fixed part, its times if it has any, and its key, tag and value.
func (d *snapDecoder) readEntry(version uint32) (*viewItem, error) {
	le := binary.LittleEndian
	known := uint8(snapFlagTombstone)
	if version >= snapVersion2 {
		known |= snapFlagTimed | snapFlagScheduled | snapFlagCancel
	}
	e, err := d.next(snapEntrySize, "entry")
	if err != nil {
		return nil, err
	}
	flags := e[0]
	klen, tlen, vlen := le.Uint16(e[1:]), le.Uint16(e[3:]), le.Uint32(e[5:])
	st := record.Stamp{Origin: le.Uint64(e[9:]), Seq: le.Uint64(e[17:]), HLC: le.Uint64(e[25:])}
	tomb := flags&snapFlagTombstone != 0
	switch {
	case flags&^known != 0:
		return nil, fmt.Errorf("%w: entry flags %#x", record.ErrCorrupt, flags)
	case klen == 0:
		return nil, fmt.Errorf("%w: entry without a key", record.ErrCorrupt)
	case (tomb || flags&snapFlagCancel != 0) && (tlen != 0 || vlen != 0):
		return nil, fmt.Errorf("%w: tombstone or cancel with a tag or value", record.ErrCorrupt)
	case vlen > record.MaxValueBytes:
		return nil, fmt.Errorf("%w: value of %d bytes", record.ErrCorrupt, vlen)
	case st.Origin == 0 || st.Seq == 0:
		return nil, fmt.Errorf("%w: entry with zero origin or seq", record.ErrCorrupt)
	case flags&(snapFlagScheduled|snapFlagCancel) != 0 && flags&snapFlagTimed == 0,
		flags&snapFlagScheduled != 0 && flags&snapFlagCancel != 0,
		flags&snapFlagCancel != 0 && tomb:
		return nil, fmt.Errorf("%w: entry flags %#x", record.ErrCorrupt, flags)
	}
	var it *viewItem
	if flags&snapFlagTimed != 0 {
		w := d.newWide()
		w.stamp, w.klen, w.tlen, w.eff = st, klen, tlen, record.HLCMillis(st.HLC)
		if tomb {
			w.flags |= itemTomb
		}
		if err := d.readEntryTimes(w, flags); err != nil {
			return nil, err
		}
		it = &w.viewItem
	} else {
		it = d.newItem()
		*it = viewItem{stamp: st, klen: klen, tlen: tlen}
		if tomb {
			it.flags = itemTomb
		}
	}
	n := int64(klen) + int64(tlen) + int64(vlen)
	if n > d.left {
		return nil, fmt.Errorf("%w: entry of %d bytes with %d left", record.ErrCorrupt, n, d.left)
	}
	buf, err := d.readData(int(n))
	if err != nil {
		return nil, err
	}
	it.body, it.vlen = unsafe.Pointer(unsafe.SliceData(buf)), vlen
	return it, nil
}

// readEntryTimes reads a timed entry's effective time and expiry into it
// and checks them against the entry's flags.
func (d *snapDecoder) readEntryTimes(it *wideItem, flags uint8) error {
	le := binary.LittleEndian
	t, err := d.next(snapTimedSize, "entry times")
	if err != nil {
		return err
	}
	at, expires := int64(le.Uint64(t[0:])), int64(le.Uint64(t[8:]))
	scheduled := flags&(snapFlagScheduled|snapFlagCancel) != 0
	switch {
	case at < 0 || expires < 0, scheduled != (at != 0), flags&snapFlagCancel != 0 && expires != 0,
		at == 0 && expires == 0, at != 0 && expires != 0 && expires <= at:
		return fmt.Errorf("%w: entry times %d, %d with flags %#x", record.ErrCorrupt, at, expires, flags)
	}
	if at != 0 {
		it.eff = at
	}
	it.expires = expires
	if flags&snapFlagScheduled != 0 {
		it.flags |= itemScheduled
	}
	if flags&snapFlagCancel != 0 {
		it.flags = itemCancel | itemWide
	}
	return nil
}

// writeExpiryMarks writes a topic's expiry marks as version 3 lays them
// out, ascending by key.
func writeExpiryMarks(bw *bufio.Writer, marks map[string]expiryMark, version int) {
	var b [snapExpMark + snapMarkAbsence]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(len(marks)))
	bw.Write(b[:snapMarksSize])
	for _, k := range slices.Sorted(maps.Keys(marks)) {
		m := marks[k]
		binary.LittleEndian.PutUint16(b[0:], uint16(len(k)))
		binary.LittleEndian.PutUint64(b[2:], m.target.Origin)
		binary.LittleEndian.PutUint64(b[10:], m.target.Seq)
		binary.LittleEndian.PutUint64(b[18:], m.target.HLC)
		binary.LittleEndian.PutUint64(b[26:], m.hlc)
		binary.LittleEndian.PutUint64(b[34:], m.origin)
		bw.Write(b[:2])
		bw.WriteString(k)
		bw.Write(b[2:snapExpMark])
		if version >= snapVersion6 {
			b[0] = 0
			if m.absent {
				b[0] = 1
			}
			binary.LittleEndian.PutUint64(b[1:], uint64(m.gone))
			bw.Write(b[:snapMarkAbsence])
		}
	}
}

// readExpiryMarks reads a topic's expiry marks (version 3; with their
// absence from version 6).
func (d *snapDecoder) readExpiryMarks(version uint32) (map[string]expiryMark, error) {
	le := binary.LittleEndian
	h, err := d.next(snapMarksSize, "expiry marks")
	if err != nil {
		return nil, err
	}
	n := le.Uint64(h)
	if n > uint64(d.left)/(snapExpMark+1) {
		return nil, fmt.Errorf("%w: %d expiry marks in %d bytes", record.ErrCorrupt, n, d.left)
	}
	marks := make(map[string]expiryMark, min(n, streamHint))
	prev := ""
	for i := uint64(0); i < n; i++ {
		l, err := d.next(2, "expiry mark")
		if err != nil {
			return nil, err
		}
		klen := int64(le.Uint16(l))
		if klen == 0 || klen > d.left {
			return nil, fmt.Errorf("%w: expiry mark key of %d bytes with %d left", record.ErrCorrupt, klen, d.left)
		}
		key := make([]byte, klen)
		if err := d.fill(key); err != nil {
			return nil, err
		}
		if i > 0 && string(key) <= prev {
			return nil, fmt.Errorf("%w: expiry mark %q after %q", record.ErrCorrupt, key, prev)
		}
		prev = string(key)
		f, err := d.next(snapExpMark-2, "expiry mark")
		if err != nil {
			return nil, err
		}
		m := expiryMark{target: record.Stamp{Origin: le.Uint64(f[0:]), Seq: le.Uint64(f[8:]), HLC: le.Uint64(f[16:])},
			hlc: le.Uint64(f[24:]), origin: le.Uint64(f[32:])}
		if m.target.Origin == 0 || m.target.Seq == 0 || m.origin == 0 {
			return nil, fmt.Errorf("%w: expiry mark of %q with a zero origin or seq", record.ErrCorrupt, key)
		}
		if version >= snapVersion6 {
			a, err := d.next(snapMarkAbsence, "expiry mark absence")
			if err != nil {
				return nil, err
			}
			m.absent, m.gone = a[0] == 1, int64(le.Uint64(a[1:]))
			if a[0] > 1 || m.gone < 0 || m.gone != 0 && !m.absent {
				return nil, fmt.Errorf("%w: expiry mark of %q with a bad absence", record.ErrCorrupt, key)
			}
		}
		marks[prev] = m
	}
	return marks, nil
}

// Counters' sizes in a version 4 snapshot, and the flag of a counter on
// an absence (version 5).
const (
	snapCounterAbsent = 2

	snapCounterHead   = 2 + 8 + 8 + 8 + 8 + 1 + 4 // key len, target, eff, known, base len
	snapCounterOrigin = 8 + 8 + 8 + 8 + 1
)

// writeCounters writes a topic's counters as version (4 or 5) lays them
// out, ascending by key.
func writeCounters(bw *bufio.Writer, counts map[string]*counter, version int) {
	le := binary.LittleEndian
	var b [snapCounterHead]byte
	le.PutUint64(b[0:], uint64(len(counts)))
	bw.Write(b[:8])
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		c := counts[k]
		le.PutUint16(b[0:], uint16(len(k)))
		bw.Write(b[:2])
		bw.WriteString(k)
		le.PutUint64(b[0:], c.target.Origin)
		le.PutUint64(b[8:], c.target.Seq)
		le.PutUint64(b[16:], c.target.HLC)
		le.PutUint64(b[24:], uint64(c.eff))
		b[32] = 0
		if c.known {
			b[32] = 1
		}
		if c.absent {
			b[32] |= snapCounterAbsent
		}
		if version >= snapVersion5 {
			bw.Write(b[:33])
			le.PutUint64(b[0:], uint64(c.gone))
			le.PutUint64(b[8:], uint64(c.horizon))
			bw.Write(b[:16])
			le.PutUint32(b[0:], uint32(len(c.base)))
			bw.Write(b[:4])
		} else {
			le.PutUint32(b[33:], uint32(len(c.base)))
			bw.Write(b[:37])
		}
		bw.Write(c.base)
		le.PutUint32(b[0:], uint32(len(c.counts)))
		bw.Write(b[:4])
		for _, o := range slices.Sorted(maps.Keys(c.counts)) {
			oc := c.counts[o]
			le.PutUint64(b[0:], o)
			le.PutUint64(b[8:], oc.seq)
			le.PutUint64(b[16:], uint64(oc.n))
			le.PutUint64(b[24:], math.Float64bits(oc.f))
			b[32] = 0
			if oc.float {
				b[32] = 1
			}
			bw.Write(b[:snapCounterOrigin])
		}
	}
}

// readCounters reads a topic's counters (version 4 or 5).
func (d *snapDecoder) readCounters(version uint32) (map[string]*counter, error) {
	le := binary.LittleEndian
	h, err := d.next(8, "counters")
	if err != nil {
		return nil, err
	}
	n := le.Uint64(h)
	if n > uint64(d.left)/(snapCounterHead+1+snapCounterOrigin) {
		return nil, fmt.Errorf("%w: %d counters in %d bytes", record.ErrCorrupt, n, d.left)
	}
	counts := make(map[string]*counter, min(n, streamHint))
	prev := ""
	for i := uint64(0); i < n; i++ {
		key, err := d.counterKey(i, prev)
		if err != nil {
			return nil, err
		}
		prev = key
		c, err := d.readCounter(key, version)
		if err != nil {
			return nil, err
		}
		counts[key] = c
	}
	return counts, nil
}

// counterKey reads the key of the i-th counter, which must sort after
// prev.
func (d *snapDecoder) counterKey(i uint64, prev string) (string, error) {
	l, err := d.next(2, "counter")
	if err != nil {
		return "", err
	}
	klen := int64(binary.LittleEndian.Uint16(l))
	if klen == 0 || klen > d.left {
		return "", fmt.Errorf("%w: counter key of %d bytes with %d left", record.ErrCorrupt, klen, d.left)
	}
	key := make([]byte, klen)
	if err := d.fill(key); err != nil {
		return "", err
	}
	if i > 0 && string(key) <= prev {
		return "", fmt.Errorf("%w: counter %q after %q", record.ErrCorrupt, key, prev)
	}
	return string(key), nil
}

// readCounter reads the rest of the counter of key.
func (d *snapDecoder) readCounter(key string, version uint32) (*counter, error) {
	le := binary.LittleEndian
	f, err := d.next(snapCounterHead-2-4, "counter")
	if err != nil {
		return nil, err
	}
	flags := f[32]
	c := &counter{target: record.Stamp{Origin: le.Uint64(f[0:]), Seq: le.Uint64(f[8:]), HLC: le.Uint64(f[16:])},
		eff: int64(le.Uint64(f[24:])), known: flags&1 == 1, absent: flags&snapCounterAbsent != 0}
	if version >= snapVersion5 {
		g, err := d.next(16, "counter absence")
		if err != nil {
			return nil, err
		}
		c.gone, c.horizon = int64(le.Uint64(g[0:])), int64(le.Uint64(g[8:]))
	}
	l, err := d.next(4, "counter base")
	if err != nil {
		return nil, err
	}
	blen := int64(le.Uint32(l))
	switch {
	case c.target.Origin == 0 || c.target.Seq == 0 || c.eff < 0 || flags&^(1|snapCounterAbsent) != 0 ||
		version < snapVersion5 && c.absent || c.gone < 0 || c.horizon < 0 || !c.absent && (c.gone != 0 || c.horizon != 0):
		return nil, fmt.Errorf("%w: counter of %q with a zero origin or seq, or bad fields", record.ErrCorrupt, key)
	case blen > d.left || !c.known && blen != 0:
		return nil, fmt.Errorf("%w: counter base of %d bytes with %d left", record.ErrCorrupt, blen, d.left)
	}
	c.base = make([]byte, blen)
	if err := d.fill(c.base); err != nil {
		return nil, err
	}
	o, err := d.next(4, "counter origins")
	if err != nil {
		return nil, err
	}
	norigins := uint64(le.Uint32(o))
	if norigins == 0 && (version < snapVersion6 || !c.absent) || norigins > uint64(d.left)/snapCounterOrigin {
		return nil, fmt.Errorf("%w: counter of %q with %d origins in %d bytes", record.ErrCorrupt, key, norigins, d.left)
	}
	c.counts = make(map[uint64]originCount, norigins)
	var last uint64
	for j := uint64(0); j < norigins; j++ {
		e, err := d.next(snapCounterOrigin, "counter origin")
		if err != nil {
			return nil, err
		}
		origin := le.Uint64(e[0:])
		oc := originCount{seq: le.Uint64(e[8:]), n: int64(le.Uint64(e[16:])), f: math.Float64frombits(le.Uint64(e[24:])), float: e[32] == 1}
		if origin <= last || oc.seq == 0 || e[32] > 1 || math.IsNaN(oc.f) || math.IsInf(oc.f, 0) {
			return nil, fmt.Errorf("%w: counter of %q: origin %d after %d, or bad fields", record.ErrCorrupt, key, origin, last)
		}
		last = origin
		c.counts[origin] = oc
	}
	return c, nil
}
