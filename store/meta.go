package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"
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
//	80       88       96       104      112      120      128               144      152     2044   2048
//	|segsize | origin |last hlc|created |indexed | open   | boot ID (16 B)  |  gen   |  zero  | crc32c |
//	+--------+--------+--------+--------+--------+--------+-----------------+--------+--------+--------+
//
// All fields are little-endian uint64 (the CRC a uint32 covering bytes
// [0, 2044) of its copy). A segment ID is the segment's first log position
// divided by the segment size; the position it stands for is
// ID*segsize+offset.
//
//   - version: 2 (version 1 is the old single-copy file, below).
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
const (
	metaVersion       = 2
	metaVersionSingle = 1 // the old single-copy file
	metaSize          = 4096
	metaCopySize      = metaSize / 2
	metaCRCOff        = metaCopySize - 4

	metaOffVersion   = 0
	metaOffWriting   = 8
	metaOffWatermark = 24
	metaOffCommitted = 40
	metaOffReading   = 56
	metaOffCapacity  = 72
	metaOffSegSize   = 80
	metaOffOrigin    = 88
	metaOffLastHLC   = 96
	metaOffCreated   = 104
	metaOffIndexed   = 112
	metaOffOpen      = 120
	metaOffBootID    = 128
	metaOffGen       = 144
)

// meta is the open metafile. Its methods are safe for concurrent use.
type meta struct {
	path    string
	f       *os.File
	data    []byte // the map: copy A | copy B
	segSize int64  // fixed after open

	mu  sync.Mutex
	b   [metaCopySize]byte // the current state, the fields at their offsets
	gen uint64             // generation of the current copy
	cur int                // copy holding the current state; -1: none yet

	syncMu sync.Mutex // one sync at a time, so that one copy is always whole
}

// openMeta maps the metafile at path, creating it (with a new random
// origin) when it does not exist. segSize is used only for a new file.
func openMeta(path string, segSize int64, created int64, log *zap.Logger) (*meta, bool, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, false, fileError("open", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, fileError("stat", path, err)
	}
	fresh := st.Size() == 0
	if !fresh && st.Size() != metaSize {
		f.Close()
		return nil, false, fmt.Errorf("%w: metafile %s is %d bytes, want %d", ErrCorrupt, path, st.Size(), metaSize)
	}
	if fresh {
		if err := allocate(f, metaSize); err != nil {
			f.Close()
			return nil, false, err
		}
	}
	data, err := mapFile(f, metaSize)
	if err != nil {
		f.Close()
		return nil, false, err
	}
	m := &meta{path: path, f: f, data: data, cur: -1}
	if fresh {
		origin, err := newOrigin()
		if err != nil {
			m.close()
			return nil, false, err
		}
		m.put(metaOffSegSize, uint64(segSize))
		m.put(metaOffOrigin, origin)
		m.put(metaOffCreated, uint64(created))
		if err := m.sync(); err != nil {
			m.close()
			return nil, false, err
		}
		if err := syncDir(filepath.Dir(path)); err != nil {
			m.close()
			return nil, false, err
		}
	} else if err := guardFaultDoing("reading", path, func() error { return m.load(log) }); err != nil {
		m.close()
		return nil, false, err
	}
	m.segSize = int64(m.get(metaOffSegSize))
	if m.segSize <= 0 || m.segSize%int64(pageSize) != 0 || m.get(metaOffOrigin) == 0 {
		m.close()
		return nil, false, fmt.Errorf("%w: metafile %s: segment size %d, origin %x", ErrCorrupt, path, m.segSize, m.get(metaOffOrigin))
	}
	return m, fresh, nil
}

// metaCopyValid reports whether b (one copy) has version 2 and its CRC.
func metaCopyValid(b []byte) bool {
	return binary.LittleEndian.Uint64(b[metaOffVersion:]) == metaVersion &&
		crc32.Checksum(b[:metaCRCOff], castagnoli) == binary.LittleEndian.Uint32(b[metaCRCOff:])
}

// load reads the current state from the map: the valid copy with the
// higher generation, or an old single-copy file.
func (m *meta) load(log *zap.Logger) error {
	var valid [2]bool
	for k := range valid {
		b := m.data[k*metaCopySize : (k+1)*metaCopySize]
		valid[k] = metaCopyValid(b)
		if gen := binary.LittleEndian.Uint64(b[metaOffGen:]); valid[k] && (m.cur < 0 || gen > m.gen) {
			m.cur, m.gen = k, gen
		}
	}
	if m.cur >= 0 {
		if other := 1 - m.cur; !valid[other] && !isZero(m.data[other*metaCopySize:(other+1)*metaCopySize]) {
			log.Warn("ignoring a damaged copy of the metafile (torn write?)",
				zap.String("path", m.path), zap.String("copy", "AB"[other:other+1]))
		}
		copy(m.b[:], m.data[m.cur*metaCopySize:])
		return nil
	}
	if v := binary.LittleEndian.Uint64(m.data[metaOffVersion:]); v == metaVersionSingle {
		// The old single-copy file: A is the state, and the next sync
		// writes B (cur stays -1 for A, so that B goes first).
		if !isZero(m.data[metaCopySize:]) {
			log.Warn("ignoring a damaged copy of the metafile (torn upgrade?)",
				zap.String("path", m.path), zap.String("copy", "B"))
		}
		copy(m.b[:], m.data[:metaCopySize])
		clear(m.b[metaOffGen:])
		m.cur = 0
		return nil
	}
	return fmt.Errorf("%w: metafile %s: both copies damaged (bad checksum or version); restore it from a backup or move the data directory aside",
		ErrCorrupt, m.path)
}

func (m *meta) get(off int) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return binary.LittleEndian.Uint64(m.b[off:])
}

func (m *meta) put(off int, v uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	binary.LittleEndian.PutUint64(m.b[off:], v)
}

// pos reads a (segment ID, offset) pair as a log position.
func (m *meta) pos(off int) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(binary.LittleEndian.Uint64(m.b[off:]))*m.segSize + int64(binary.LittleEndian.Uint64(m.b[off+8:]))
}

// setPos writes a log position as a (segment ID, offset) pair.
func (m *meta) setPos(off int, pos int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	binary.LittleEndian.PutUint64(m.b[off:], uint64(pos/m.segSize))
	binary.LittleEndian.PutUint64(m.b[off+8:], uint64(pos%m.segSize))
}

// bootID returns the boot ID field.
func (m *meta) bootID() (id [16]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(id[:], m.b[metaOffBootID:])
	return id
}

// setBootID writes the boot ID field.
func (m *meta) setBootID(id [16]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.b[metaOffBootID:], id[:])
}

// sync writes the state into the copy that is not current, with the next
// generation, and makes it durable; only then is it the current copy.
func (m *meta) sync() error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	k := 0
	if m.cur == 0 {
		k = 1
	}
	dst := m.data[k*metaCopySize : (k+1)*metaCopySize]
	m.mu.Lock()
	gen := m.gen + 1
	binary.LittleEndian.PutUint64(m.b[metaOffVersion:], metaVersion)
	binary.LittleEndian.PutUint64(m.b[metaOffGen:], gen)
	binary.LittleEndian.PutUint32(m.b[metaCRCOff:], crc32.Checksum(m.b[:metaCRCOff], castagnoli))
	err := guardFaultDoing("writing", m.path, func() error { copy(dst, m.b[:]); return nil })
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := syncRange(m.data, k*metaCopySize, (k+1)*metaCopySize); err != nil {
		return fmt.Errorf("%w (metafile %s)", err, m.path)
	}
	m.mu.Lock()
	m.cur, m.gen = k, gen
	m.mu.Unlock()
	return nil
}

// newOrigin returns a random, nonzero origin ID.
func newOrigin() (uint64, error) {
	var id [8]byte
	for binary.LittleEndian.Uint64(id[:]) == 0 {
		if _, err := rand.Read(id[:]); err != nil {
			return 0, fmt.Errorf("store: origin id: %w", err)
		}
	}
	return binary.LittleEndian.Uint64(id[:]), nil
}

// bootID reads the kernel's boot ID; ok is false where there is none.
func bootID() (id [16]byte, ok bool) {
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

// close unmaps and closes the file; what was not synced is lost.
func (m *meta) close() error {
	err := unmap(m.data)
	m.data = nil
	if cerr := m.f.Close(); err == nil && cerr != nil {
		err = fileError("close", m.f.Name(), cerr)
	}
	return err
}
