package localview

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The byte layout is drawn in doc.go; these constants are its offsets.
const (
	// magic opens every view file.
	magic = "CCVIEW\x00\x01"
	// formatVersion is the layout's version; a reader refuses others.
	// Version 2 put the topic and key before the tag and value, so that a
	// record's cache lines are all known from its offset alone. Version 3
	// numbers a record's versions by the writer's write count and adds
	// the committed word, for GetMany's batches.
	formatVersion = 3
	// headerSize is the header's size, one page: the slot table starts
	// right after it.
	headerSize = 4096

	offMagic      = 0
	offVersion    = 8
	offHeaderSize = 12
	offFileSize   = 16
	offGeneration = 24
	offSlotsOff   = 32
	offSlotCount  = 40
	offArenaOff   = 48
	offArenaSize  = 56
	offState      = 64 // alone on its cache line: read by every Get
	offHeartbeat  = 128
	offWriterPID  = 136
	offCreated    = 144
	offCommitted  = 152 // the last write of a whole batch: read by GetMany
	offMetaSeq    = 192 // seqlock over the fields from here to the origins
	offLiveKeys   = 200
	offChanges    = 208
	offLastChange = 216
	offAlive      = 224
	offMembers    = 228
	offOrigins    = 232 // count u32, reserved u32, then the pairs
	offOriginList = 240

	// MaxOrigins is how many (origin, HLC) pairs the header holds.
	MaxOrigins = (headerSize - offOriginList) / 16

	// State bits.
	stateReady      = 1
	stateSuperseded = 2
	stateClosed     = 4

	// recordHeader is the fixed part of a record in the arena.
	recordHeader = 48
	recVersion   = 0
	recHLC       = 8
	recOrigin    = 16
	recSeq       = 24
	recValueLen  = 32
	recTagLen    = 36
	recFlags     = 38
	recCap       = 40
	recTopicLen  = 44
	recKeyLen    = 46

	flagDeleted = 1

	// maxFileSize: a slot names its record by offset/8 in 32 bits.
	maxFileSize = 8 << 32
)

// Sentinel errors of the package.
var (
	// ErrNotFound means the view holds no live value for (topic, key).
	ErrNotFound = errors.New("localview: not found")
	// ErrNotReady means the daemon has not finished loading the view,
	// has stopped, or lost it (readers fall back to the socket).
	ErrNotReady = errors.New("localview: view not ready")
	// ErrAway means the daemon's node left its cluster, out of contact
	// with its fleet for too long (more than half of --tombstone-grace):
	// the file is not ready and its header counts no alive member of
	// those known. A read that fails so wraps ErrNotReady as well.
	ErrAway = errors.New("localview: the node left its cluster (out of contact with its fleet too long; restart it with --start-over)")
	// ErrStale means the daemon's heartbeat is older than asked (Fresh):
	// the daemon is gone, stuck or behind.
	ErrStale = errors.New("localview: view is stale")
	// ErrCorrupt means the file breaks the format: an offset or length
	// points outside the mapping, or the header is not a view's.
	ErrCorrupt = errors.New("localview: view file corrupt")
	// ErrBusy means an entry stayed half-written for longer than a reader
	// waits (the writer died in the middle of an update, or is stuck). A
	// read that fails so wraps ErrNotReady as well: the view is not
	// current, fall back to the socket.
	ErrBusy = errors.New("localview: entry being written")
	// ErrInvalid means a call's arguments do not fit together.
	ErrInvalid = errors.New("localview: invalid argument")
	// ErrClosed is returned by a closed Reader or Writer.
	ErrClosed = errors.New("localview: closed")
	// ErrTooLarge means the view would outgrow the format (32 GiB).
	ErrTooLarge = errors.New("localview: view too large")
)

// Stamp is the identity of the message that set a value: its origin node,
// the origin's sequence number and its HLC timestamp.
type Stamp struct {
	HLC    uint64
	Origin uint64
	Seq    uint64
}

// Time is the wall-clock part of the stamp's HLC, to the millisecond (an
// HLC is wall milliseconds << 16 | a logical counter, as in package store).
func (s Stamp) Time() time.Time { return time.UnixMilli(int64(s.HLC >> 16)) }

// crcTables are the slicing-by-8 tables of CRC-32 (IEEE): hash/crc32 is
// fast for long inputs only, and a hash of a short key is most of a Get.
var crcTables = func() (t [8][256]uint32) {
	t[0] = *crc32.MakeTable(crc32.IEEE)
	for i := range 256 {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xff] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}()

// crcUpdate continues the (inverted) CRC c over s.
func crcUpdate(c uint32, s string) uint32 {
	t := &crcTables
	for len(s) >= 8 {
		c ^= uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
		c = t[7][c&0xff] ^ t[6][c>>8&0xff] ^ t[5][c>>16&0xff] ^ t[4][c>>24] ^
			t[3][s[4]] ^ t[2][s[5]] ^ t[1][s[6]] ^ t[0][s[7]]
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		c = t[0][byte(c)^s[i]] ^ c>>8
	}
	return c
}

// Hash is the table's hash of (topic, key): CRC-32 (IEEE, as zlib.crc32)
// over the topic's length as two little-endian bytes, the topic and the
// key, then the murmur3 finalizer; 0 becomes 1 (0 marks an empty slot).
func Hash(topic, key string) uint32 { return hashKey(topicCRC(topic), key) }

// topicCRC is the running CRC over the topic's length and the topic: the
// part of Hash a Reader keeps for the topic it last read.
func topicCRC(topic string) uint32 {
	t := &crcTables[0]
	h := ^uint32(0)
	h = t[byte(h)^byte(len(topic))] ^ h>>8
	h = t[byte(h)^byte(len(topic)>>8)] ^ h>>8
	return crcUpdate(h, topic)
}

// topicCache keeps the running CRC of the topic last hashed (most callers
// use one topic, and its part of the hash is most of the hash). It keeps
// a copy of the topic's bytes, not the string: a caller may pass a string
// over a buffer it reuses.
type topicCache struct {
	buf [64]byte
	n   int // len(topic); -1: nothing kept
	crc uint32
}

// hash is Hash(topic, key).
func (c *topicCache) hash(topic, key string) uint32 {
	if c.n != len(topic) || string(c.buf[:max(c.n, 0)]) != topic {
		crc := topicCRC(topic)
		if len(topic) > len(c.buf) {
			return hashKey(crc, key)
		}
		c.n, c.crc = copy(c.buf[:], topic), crc
	}
	return hashKey(c.crc, key)
}

// hashKey finishes Hash from the topic's running CRC.
func hashKey(topicCRC uint32, key string) uint32 {
	h := ^crcUpdate(topicCRC, key)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	if h == 0 {
		h = 1
	}
	return h
}

// align8 rounds n up to a multiple of 8.
func align8(n int) int { return (n + 7) &^ 7 }

// recordSize is the arena bytes of a record with room for capacity bytes
// of tag and value.
func recordSize(capacity, topicLen, keyLen int) int {
	return recordHeader + align8(topicLen+keyLen) + capacity
}

// dataAt is where a record's tag and value start: after the fixed
// fields, the topic and the key.
func dataAt(off, topicLen, keyLen int) int { return off + recordHeader + align8(topicLen+keyLen) }

// tso is true on CPUs whose stores are seen in program order and whose
// loads are not reordered with other loads (x86's total store order):
// there the writer stores a record's data with plain stores between the
// two atomic stores of its version. Elsewhere (arm64) every store of a
// record is an atomic (release) store, which orders it.
const tso = runtime.GOARCH == "amd64" || runtime.GOARCH == "386"

// word returns a pointer to the 8-aligned uint64 at off of m. The caller
// has checked that off+8 <= len(m) and off%8 == 0.
func word(m []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m[off])) }

func load64(m []byte, off int) uint64 { return atomic.LoadUint64(word(m, off)) }

func store64(m []byte, off int, v uint64) { atomic.StoreUint64(word(m, off), v) }

func le16(m []byte, off int) int    { return int(binary.LittleEndian.Uint16(m[off:])) }
func le32(m []byte, off int) int    { return int(binary.LittleEndian.Uint32(m[off:])) }
func le64(m []byte, off int) uint64 { return binary.LittleEndian.Uint64(m[off:]) }

// hugePage is the size of an x86 and arm64 (4 KiB granule) huge page: a
// file larger than one is sized in whole huge pages.
const hugePage = 2 << 20

// mapFile maps size bytes of the file fd (MAP_SHARED) and asks for huge
// pages on the mapping. A random read of a large view is two dependent
// cache misses, each with a TLB miss and its page walk on 4 KiB pages; a
// file on a tmpfs mounted huge=within_size (or always) is PMD-mapped, and
// a walk is then one level shorter with far more of the file in the TLB
// (BENCHMARKS.md). The kernel aligns a tmpfs mapping to huge pages by
// itself; madvise(MADV_HUGEPAGE) asks for them where the mount leaves it
// to the mapping (huge=advise, a file system with large folios), and its
// failure (no transparent huge pages) changes nothing.
func mapFile(fd, size, prot int) ([]byte, error) {
	m, err := unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
	if err == nil && size >= hugePage {
		unix.Madvise(m, unix.MADV_HUGEPAGE)
	}
	return m, err
}
