package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// The metafile is one page, mapped, updated in place. It begins with the
// seed design's 80 bytes: a version, four positions as (segment ID, offset
// in the segment) and the capacity; cachecast's own fields follow.
//
//	 0        8        16       24       32       40       48       56       64       72       80
//	+--------+--------+--------+--------+--------+--------+--------+--------+--------+--------+
//	|version |  writing        |  watermark      |  committed      |  reading        |capacity|
//	|        |  ID    | offset |  ID    | offset |  ID    | offset |  ID    | offset |        |
//	+--------+--------+--------+--------+--------+--------+--------+--------+--------+--------+
//	80       88       96       104      112      120      128               144
//	|segsize | origin |last hlc|created |indexed | open   | boot ID (16 B)  | zero to the end
//	+--------+--------+--------+--------+--------+--------+-----------------+
//
// All fields are little-endian uint64. A segment ID is the segment's first
// log position divided by the segment size; the position it stands for is
// ID*segsize+offset.
//
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
//
// The metafile is written through its map and synced after the data it
// describes, so each position in it is at most, never beyond, the truth;
// a stale value only makes recovery scan more.
const (
	metaVersion = 1
	metaSize    = 4096

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
)

type meta struct {
	f       *os.File
	b       []byte
	segSize int64
}

// openMeta maps the metafile at path, creating it (with a new random
// origin) when it does not exist. segSize is used only for a new file.
func openMeta(path string, segSize int64, created int64) (*meta, bool, error) {
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
	b, err := mapFile(f, metaSize)
	if err != nil {
		f.Close()
		return nil, false, err
	}
	m := &meta{f: f, b: b}
	if fresh {
		origin, err := newOrigin()
		if err != nil {
			m.close()
			return nil, false, err
		}
		m.put(metaOffVersion, metaVersion)
		m.put(metaOffSegSize, uint64(segSize))
		m.put(metaOffOrigin, origin)
		m.put(metaOffCreated, uint64(created))
		if err := m.sync(); err != nil {
			m.close()
			return nil, false, err
		}
	}
	if v := m.get(metaOffVersion); v != metaVersion {
		m.close()
		return nil, false, fmt.Errorf("%w: metafile %s has version %d, want %d", ErrCorrupt, path, v, metaVersion)
	}
	m.segSize = int64(m.get(metaOffSegSize))
	if m.segSize <= 0 || m.segSize%int64(pageSize) != 0 || m.get(metaOffOrigin) == 0 {
		m.close()
		return nil, false, fmt.Errorf("%w: metafile %s: segment size %d, origin %x", ErrCorrupt, path, m.segSize, m.get(metaOffOrigin))
	}
	return m, fresh, nil
}

func (m *meta) get(off int) uint64    { return binary.LittleEndian.Uint64(m.b[off:]) }
func (m *meta) put(off int, v uint64) { binary.LittleEndian.PutUint64(m.b[off:], v) }

// pos reads a (segment ID, offset) pair as a log position.
func (m *meta) pos(off int) int64 {
	return int64(m.get(off))*m.segSize + int64(m.get(off+8))
}

// setPos writes a log position as a (segment ID, offset) pair.
func (m *meta) setPos(off int, pos int64) {
	m.put(off, uint64(pos/m.segSize))
	m.put(off+8, uint64(pos%m.segSize))
}

func (m *meta) sync() error { return syncRange(m.b, 0, metaSize) }

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

func (m *meta) close() error {
	err := unmap(m.b)
	m.b = nil
	if cerr := m.f.Close(); err == nil && cerr != nil {
		err = fileError("close", m.f.Name(), cerr)
	}
	return err
}
