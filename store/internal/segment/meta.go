package segment

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// The metafile is one page, mapped, holding two 2 KiB copies of the state,
// A and B, as the cursors file does. Each copy begins with the seed
// design's 80 bytes: a version, four positions as (segment ID, offset in
// the segment) and the capacity; cachecast's own fields follow, then the
// copy's generation, and its CRC-32C at its end.
//
//	 0        8        16       24       32       40       48       56       64       72       80
//	+--------+--------+--------+--------+--------+--------+--------+--------+--------+--------+
//	|version |  writing        |  watermark      |  committed      |  reading        |capacity|
//	|        |  ID    | offset |  ID    | offset |  ID    | offset |  ID    | offset |        |
//	+--------+--------+--------+--------+--------+--------+--------+--------+--------+--------+
//	80       88       96       104      112      120      128               144      152      160      168     2044   2048
//	|segsize | origin |last hlc|created |indexed | open   | boot ID (16 B)  |  gen   |marked  | slots  |  zero  | crc32c |
//	|        |        |        |        |        |        |                 |        |from + 1|        |        |        |
//	+--------+--------+--------+--------+--------+--------+-----------------+--------+--------+--------+--------+--------+
//
// All fields are little-endian uint64 (the CRC a uint32 covering bytes
// [0, 2044) of its copy). A segment ID is the segment's first log position
// divided by the segment size; the position it stands for is
// ID*segsize+offset.
//
//   - version: the directory's format, 3 or 4. Version 4 is version 3
//     with segment files of several segments (slots, below): a build that
//     knows only version 3 would take each file for one segment and lose
//     the rest, so it refuses the directory (ErrNewerFormat). A directory
//     of one segment a file (all made before version 4, and those with
//     segments of 8 MiB or more) stays version 3. Version 3 is version 2 with
//     the log's entries framed (marked from, below): a build that knows
//     only version 2 finds no valid copy and refuses to open the directory
//     rather than take framed entries for damaged records and set them
//     aside. A copy read as version 2 is written back as version 3 by the
//     next sync. A valid copy of a version newer than this build's is
//     ErrNewerFormat, before anything else is read (version 1 is the old
//     single-copy file, below).
//   - writing: the end of the written log, where the next record goes.
//   - watermark: the log position the view snapshot covers; a restart
//     replays the log from here.
//   - committed: the end of the flushed (durable) log; recovery checks
//     records from here on.
//   - reading: the oldest record the log retains.
//   - capacity: the byte bound on the log in force (0: none).
//   - segsize: the segment size the log was created with. It is fixed for
//     the life of the directory: a different size in the options is
//     ignored with a warning.
//   - origin: this node's origin ID, random, made with the directory.
//   - last hlc: the greatest HLC the node has stamped or seen, so that the
//     clock never goes backwards across restarts.
//   - created: when the directory was made, Unix seconds.
//   - indexed: a log position below which every index entry is durable;
//     a restart re-indexes the log from here.
//   - open: 1 while a process has the store open, 0 after a clean Close.
//   - boot ID: the kernel's boot ID (/proc/sys/kernel/random/boot_id) of
//     the process that last opened the store. Found open after a reboot,
//     the store may have lost unflushed records that peers already hold,
//     so the node takes a new origin ID (see Open).
//   - gen: the copy's generation; the valid copy with the higher one is
//     the state.
//   - marked from + 1: the log position from which every record carries
//     its segment's mark (see Log), plus one; 0 in a file written before
//     marks existed, whose log's records carry none: the first open marks
//     from where the recovered log ends.
//   - slots: how many segments a segment file holds, fixed when the
//     directory is made (SlotsFor); read only from a version 4 copy
//     (before, every file held one segment).
//
// The fields live in memory; a sync writes them, with the next generation
// and a new CRC, into the copy that is not current and msyncs it, so the
// current copy is never touched while a crash could tear the other: a torn
// or corrupt copy is ignored with a warning and the other one is the
// state. Both bad is ErrCorrupt naming the file. A file of the old single
// copy (version 1 at offset 0, no CRC, copy B all zero) is read as it is
// and upgraded by the next sync, which writes copy B.
//
// The metafile is synced after the data it describes, so each position in
// it is at most, never beyond, the truth; a stale value only makes
// recovery scan more.
// The metafile's layout; the Off constants are the offsets of its fields
// within a copy, for Get, Put, Pos and SetPos.
const (
	metaVersion       = 4 // the newest format this build reads and writes
	metaVersionSlots1 = 3 // the format of one segment a file, which this build writes for such directories
	metaVersionFramed = 2 // the format before the version marked framing; read, upgraded on sync
	MetaVersionSingle = 1 // the old single-copy file
	MetaSize          = 4096
	MetaCopySize      = MetaSize / 2
	metaCRCOff        = MetaCopySize - 4

	OffVersion    = 0
	OffWriting    = 8
	OffWatermark  = 24
	OffCommitted  = 40
	OffReading    = 56
	OffCapacity   = 72
	OffSegSize    = 80
	OffOrigin     = 88
	OffLastHLC    = 96
	OffCreated    = 104
	OffIndexed    = 112
	OffOpen       = 120
	OffBootID     = 128
	OffGen        = 144
	OffMarkedFrom = 152
	OffSlots      = 160
)

// FileTarget is the size SlotsFor aims segment files at: a file is made
// (an inode allocated, a directory entry written) once for every 8 MiB of
// log, however small the segments.
const FileTarget = 8 << 20

// SlotsFor is how many segments of segSize bytes a segment file of a new
// directory holds: as many as fit in FileTarget, and in an eighth of
// retention when there is one (0: none), since the recycled segments of a
// file still written keep their space until the whole file is recycled;
// at least one.
func SlotsFor(segSize, retention int64) int64 {
	target := int64(FileTarget)
	if retention > 0 {
		target = min(target, retention/8)
	}
	return max(1, target/segSize)
}

// Meta is the open metafile. Its methods are safe for concurrent use.
type Meta struct {
	path    string
	f       *os.File
	data    []byte // the map: copy A | copy B
	segSize int64  // fixed after open
	slots   int64  // segments a segment file holds, fixed after open

	mu  sync.Mutex
	b   [MetaCopySize]byte // the current state, the fields at their offsets
	gen uint64             // generation of the current copy
	cur int                // copy holding the current state; -1: none yet

	syncMu sync.Mutex // one sync at a time, so that one copy is always whole
}

// OpenMeta maps the metafile at path, creating it (with a new random
// origin) when it does not exist. segSize and slots (segments a file) are
// used only for a new file.
func OpenMeta(path string, segSize, slots int64, created int64, log *zap.Logger) (*Meta, bool, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, false, fsys.FileError("open", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, fsys.FileError("stat", path, err)
	}
	fresh := st.Size() == 0
	if !fresh && st.Size() != MetaSize {
		f.Close()
		return nil, false, fmt.Errorf("%w: metafile %s is %d bytes, want %d", record.ErrCorrupt, path, st.Size(), MetaSize)
	}
	if fresh {
		if err := fsys.Allocate(f, MetaSize); err != nil {
			f.Close()
			return nil, false, err
		}
	}
	data, err := fsys.Map(f, MetaSize)
	if err != nil {
		f.Close()
		return nil, false, err
	}
	m := &Meta{path: path, f: f, data: data, cur: -1}
	if fresh {
		origin, err := NewOrigin()
		if err != nil {
			m.Close()
			return nil, false, err
		}
		m.Put(OffSegSize, uint64(segSize))
		m.Put(OffSlots, uint64(max(slots, 1)))
		m.slots = max(slots, 1) // the version Sync writes
		m.Put(OffOrigin, origin)
		m.Put(OffCreated, uint64(created))
		if err := m.Sync(); err != nil {
			m.Close()
			return nil, false, err
		}
		if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
			m.Close()
			return nil, false, err
		}
	} else if err := fsys.GuardDoing("reading", path, func() error { return m.load(log) }); err != nil {
		m.Close()
		return nil, false, err
	}
	m.segSize = int64(m.Get(OffSegSize))
	if m.Get(OffVersion) == metaVersion {
		m.slots = max(int64(m.Get(OffSlots)), 1)
	} else {
		m.slots = 1 // the layout before version 4
	}
	if m.segSize <= 0 || m.segSize%int64(fsys.PageSize) != 0 || m.Get(OffOrigin) == 0 || m.slots > math.MaxInt64/m.segSize {
		m.Close()
		return nil, false, fmt.Errorf("%w: metafile %s: segment size %d, %d segments a file, origin %x", record.ErrCorrupt, path, m.segSize, m.slots, m.Get(OffOrigin))
	}
	return m, fresh, nil
}

// MetaCopyValid reports whether b (one copy) has its CRC and a version
// this build reads (2 to 4).
func MetaCopyValid(b []byte) bool {
	v := binary.LittleEndian.Uint64(b[OffVersion:])
	return (v == metaVersion || v == metaVersionSlots1 || v == metaVersionFramed) && metaCopyCRC(b)
}

// metaCopyCRC reports whether b (one copy) holds its own CRC.
func metaCopyCRC(b []byte) bool {
	return crc32.Checksum(b[:metaCRCOff], fsys.Castagnoli) == binary.LittleEndian.Uint32(b[metaCRCOff:])
}

// load reads the current state from the map: the valid copy with the
// higher generation, or an old single-copy file.
func (m *Meta) load(log *zap.Logger) error {
	var valid [2]bool
	for k := range valid {
		b := m.data[k*MetaCopySize : (k+1)*MetaCopySize]
		if v := binary.LittleEndian.Uint64(b[OffVersion:]); v > metaVersion && metaCopyCRC(b) {
			// Either copy: the other may be an older state of the same
			// newer build, and reading it would undo that build's work.
			return fmt.Errorf("%w: metafile %s has format version %d, this build reads versions up to %d: run the build that wrote it (or a newer one), or move the data directory aside",
				errs.ErrNewerFormat, m.path, v, metaVersion)
		}
		valid[k] = MetaCopyValid(b)
		if gen := binary.LittleEndian.Uint64(b[OffGen:]); valid[k] && (m.cur < 0 || gen > m.gen) {
			m.cur, m.gen = k, gen
		}
	}
	if m.cur >= 0 {
		if other := 1 - m.cur; !valid[other] && !fsys.IsZero(m.data[other*MetaCopySize:(other+1)*MetaCopySize]) {
			log.Warn("ignoring a damaged copy of the metafile (torn write?)",
				zap.String("path", m.path), zap.String("copy", "AB"[other:other+1]))
		}
		copy(m.b[:], m.data[m.cur*MetaCopySize:])
		return nil
	}
	if v := binary.LittleEndian.Uint64(m.data[OffVersion:]); v == MetaVersionSingle {
		// The old single-copy file: A is the state, and the next sync
		// writes B (cur stays -1 for A, so that B goes first).
		if !fsys.IsZero(m.data[MetaCopySize:]) {
			log.Warn("ignoring a damaged copy of the metafile (torn upgrade?)",
				zap.String("path", m.path), zap.String("copy", "B"))
		}
		copy(m.b[:], m.data[:MetaCopySize])
		clear(m.b[OffGen:])
		m.cur = 0
		return nil
	}
	return fmt.Errorf("%w: metafile %s: both copies damaged (bad checksum or version); restore it from a backup or move the data directory aside",
		record.ErrCorrupt, m.path)
}

// Get reads the field at off (one of the Off constants).
func (m *Meta) Get(off int) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return binary.LittleEndian.Uint64(m.b[off:])
}

// Put writes the field at off; the next Sync makes it durable.
func (m *Meta) Put(off int, v uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	binary.LittleEndian.PutUint64(m.b[off:], v)
}

// Pos reads a (segment ID, offset) pair as a log position.
func (m *Meta) Pos(off int) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(binary.LittleEndian.Uint64(m.b[off:]))*m.segSize + int64(binary.LittleEndian.Uint64(m.b[off+8:]))
}

// SetPos writes a log position as a (segment ID, offset) pair.
func (m *Meta) SetPos(off int, pos int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	binary.LittleEndian.PutUint64(m.b[off:], uint64(pos/m.segSize))
	binary.LittleEndian.PutUint64(m.b[off+8:], uint64(pos%m.segSize))
}

// BootID returns the boot ID field.
func (m *Meta) BootID() (id [16]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(id[:], m.b[OffBootID:])
	return id
}

// SetBootID writes the boot ID field.
func (m *Meta) SetBootID(id [16]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.b[OffBootID:], id[:])
}

// Sync writes the state into the copy that is not current, with the next
// generation, and makes it durable; only then is it the current copy.
func (m *Meta) Sync() error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	k := 0
	if m.cur == 0 {
		k = 1
	}
	dst := m.data[k*MetaCopySize : (k+1)*MetaCopySize]
	m.mu.Lock()
	gen := m.gen + 1
	version := uint64(metaVersion)
	if m.slots <= 1 {
		version = metaVersionSlots1
	}
	binary.LittleEndian.PutUint64(m.b[OffVersion:], version)
	binary.LittleEndian.PutUint64(m.b[OffGen:], gen)
	binary.LittleEndian.PutUint32(m.b[metaCRCOff:], crc32.Checksum(m.b[:metaCRCOff], fsys.Castagnoli))
	err := fsys.GuardDoing("writing", m.path, func() error { copy(dst, m.b[:]); return nil })
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := fsys.SyncRange(m.data, k*MetaCopySize, (k+1)*MetaCopySize); err != nil {
		return fmt.Errorf("%w (metafile %s)", err, m.path)
	}
	m.mu.Lock()
	m.cur, m.gen = k, gen
	m.mu.Unlock()
	return nil
}

// NewOrigin returns a random, nonzero origin ID.
func NewOrigin() (uint64, error) {
	var id [8]byte
	for binary.LittleEndian.Uint64(id[:]) == 0 {
		if _, err := rand.Read(id[:]); err != nil {
			return 0, fmt.Errorf("store: origin id: %w", err)
		}
	}
	return binary.LittleEndian.Uint64(id[:]), nil
}

// KernelBootID reads the kernel's boot ID; ok is false where there is none.
func KernelBootID() (id [16]byte, ok bool) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id, false
	}
	h := strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")
	if n, err := hex.Decode(id[:], []byte(h)); err != nil || n != 16 {
		return id, false
	}
	return id, true
}

// Close unmaps and closes the file; what was not synced is lost.
func (m *Meta) Close() error {
	err := fsys.Unmap(m.data)
	m.data = nil
	if cerr := m.f.Close(); err == nil && cerr != nil {
		err = fsys.FileError("close", m.f.Name(), cerr)
	}
	return err
}

// SegmentSize is the segment size the directory was made with.
func (m *Meta) SegmentSize() int64 { return m.segSize }

// Slots is how many segments a segment file of the directory holds.
func (m *Meta) Slots() int64 { return m.slots }
