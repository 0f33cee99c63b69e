// Package index holds the indexes the store keeps beside its log, both
// derived from the log and rebuilt from it when damaged: per topic (offset
// -> record, RocketMQ's ConsumeQueue) and per origin (seq -> record), each
// an array of fixed-size entries in memory-mapped chunk files.
package index

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// The store keeps two kinds of index next to the log, both arrays of
// fixed-size entries in chunk files (see array) and both derived from the
// log, so they can always be rebuilt from it:
//
//	<topic dir>/<escaped topic>/<20-digit first offset>   topic index chunks
//	<origin dir>/<16 hex digits>/<20-digit first seq>     origin index chunks
//
// The topic index is RocketMQ's ConsumeQueue: entry n of topic t describes
// the n-th message of t this node holds (its offset), so a reader walks a
// topic, filters on the tag hash and starts anywhere without touching the
// log. A topic index entry is 24 bytes, little endian:
//
//	0                               8               12              16                              24
//	+-------------------------------+---------------+---------------+-------------------------------+
//	|     pos + 1 (uint64)          |  size (u32)   | tag hash (u32)|          hlc (uint64)         |
//	+-------------------------------+---------------+---------------+-------------------------------+
//
// pos is the record's log position; it is stored plus one so that an
// all-zero entry still means "nothing written". size is the record's
// unpadded size, tag hash is TagHash of its tag.
//
// The origin index maps (origin, seq) to the record's log position, for
// deduplication and for serving one origin's records to a peer. Entry seq
// of origin o is 8 bytes: pos + 1 (uint64, little endian). Its chunks are
// numbered by seq, so the first chunk's name is the first seq retained.
//
// The escaped topic is the topic with every byte outside [A-Za-z0-9_.-]
// (and a leading '.') written as %XX; a topic whose escaped form is longer
// than maxTopicDirName is stored under "#" + hex(SHA-256(topic)) and its
// name kept in the file "#<hex>.name" beside the directory.
//
// Both index sets follow the array's concurrency contract: one writer
// (append or put, truncate, dropBefore, close), any number of readers (get,
// entry, len, first, searchHLC, last, vector, topics, lastPos), and sync
// from any goroutine.

// Entry is one entry of a topic index.
type Entry struct {
	Pos     int64  // log position of the record
	Size    uint32 // unpadded record size
	TagHash uint32 // TagHash of the record's tag
	HLC     uint64 // the record's HLC
}

const (
	topicEntrySize  = 24
	originEntrySize = 8

	// maxTopicDirName bounds the escaped topic used as a directory name,
	// well under the usual 255-byte limit of a file name.
	maxTopicDirName = 200

	topicNameSuffix = ".name"
)

func encodeIndexEntry(b []byte, e Entry) {
	_ = b[topicEntrySize-1]
	binary.LittleEndian.PutUint64(b[0:], uint64(e.Pos)+1)
	binary.LittleEndian.PutUint32(b[8:], e.Size)
	binary.LittleEndian.PutUint32(b[12:], e.TagHash)
	binary.LittleEndian.PutUint64(b[16:], e.HLC)
}

// decodeIndexEntry reads an entry; a zero position field (a hole left by a
// crash, never written) is ErrCorrupt.
func decodeIndexEntry(b []byte) (Entry, error) {
	_ = b[topicEntrySize-1]
	p := binary.LittleEndian.Uint64(b[0:])
	if p == 0 {
		return Entry{}, fmt.Errorf("%w: empty index entry", record.ErrCorrupt)
	}
	return Entry{
		Pos:     int64(p - 1),
		Size:    binary.LittleEndian.Uint32(b[8:]),
		TagHash: binary.LittleEndian.Uint32(b[12:]),
		HLC:     binary.LittleEndian.Uint64(b[16:]),
	}, nil
}

// entryPos reads the log position of entry i of an index array (both kinds
// keep it in the first 8 bytes).
func entryPos(a *array, i uint64) (int64, error) {
	var buf [topicEntrySize]byte
	if err := a.read(i, buf[:a.entrySize]); err != nil {
		return 0, err
	}
	p := binary.LittleEndian.Uint64(buf[:8])
	if p == 0 {
		return 0, fmt.Errorf("%w: empty index entry %d in %s", record.ErrCorrupt, i, a.dir)
	}
	return int64(p - 1), nil
}

// searchPos returns the first entry of a whose position is at least pos
// (len() if none). Positions increase along an index.
func searchPos(a *array, pos int64) (uint64, error) {
	lo, hi := a.first(), a.len()
	for lo < hi {
		mid := lo + (hi-lo)/2
		p, err := entryPos(a, mid)
		if err != nil {
			return 0, err
		}
		if p >= pos {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// lastEntryPos is the position of a's last entry, -1 if it has none.
func lastEntryPos(a *array) (int64, error) {
	n := a.len()
	if n == a.first() {
		return -1, nil
	}
	return entryPos(a, n-1)
}

// truncateIndex drops the entries of a at or after log position pos and
// returns the new last position.
func truncateIndex(a *array, pos int64) (int64, error) {
	k, err := searchPos(a, pos)
	if err != nil {
		return 0, err
	}
	if err := a.truncate(k); err != nil {
		return 0, err
	}
	return lastEntryPos(a)
}

// dropIndexBefore drops the chunks of a whose entries all lie before log
// position pos.
func dropIndexBefore(a *array, pos int64) error {
	k, err := searchPos(a, pos)
	if err != nil {
		return err
	}
	return a.dropChunksBefore(k)
}

// topicDirName is the directory name of a topic's index.
func topicDirName(topic string) string {
	var sb strings.Builder
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '-' || c == '.' && i > 0 {
			sb.WriteByte(c)
		} else {
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	if sb.Len() > maxTopicDirName {
		sum := sha256.Sum256([]byte(topic))
		return "#" + hex.EncodeToString(sum[:])
	}
	return sb.String()
}

// parseTopicDirName is topicDirName's inverse for escaped names; hashed
// names ("#...") are resolved by the caller through their name file.
func parseTopicDirName(name string) (string, bool) {
	if name == "" || strings.HasPrefix(name, "#") {
		return "", false
	}
	var b []byte
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b = append(b, name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	topic := string(b)
	if topicDirName(topic) != name {
		return "", false // not in canonical form: not ours
	}
	return topic, true
}

// firstIndexChunkEntries sizes the first index file of a topic (12 KiB)
// and of an origin (4 KiB); each next file doubles, up to the store's
// IndexChunkEntries. A topic that holds a few records costs a few pages of
// disk, not a full chunk.
const firstIndexChunkEntries = 512

// Topics is the set of topic indexes of a store.
type Topics struct {
	dir    string
	cfg    arrayConfig
	log    *zap.Logger
	closed atomic.Bool

	// mu guards m against readers while the writer adds a topic; the
	// writer itself reads m without it (only it changes m).
	mu sync.RWMutex
	m  map[string]*Topic
}

// Topic is the index of one topic. Its methods are safe concurrently
// with the writer appending to it.
type Topic struct {
	name string
	arr  *array
	last atomic.Int64 // position of the last entry, -1 if none
}

// OpenTopics opens (creating if needed) the topic indexes in dir
// (the store's <data>/index/topic). chunkEntries is the most entries per
// chunk file (0: 1<<20, 24 MiB; the first files are smaller, see
// firstIndexChunkEntries); maxMapped bounds the chunks mapped at once per
// topic.
func OpenTopics(dir string, chunkEntries, maxMapped int, log *zap.Logger) (*Topics, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if chunkEntries < 0 {
		return nil, fmt.Errorf("%w: %d index entries per chunk", record.ErrInvalid, chunkEntries)
	}
	t := &Topics{
		dir: dir,
		cfg: arrayConfig{entrySize: topicEntrySize, chunkEntries: uint64(chunkEntries),
			firstChunkEntries: firstIndexChunkEntries, maxMapped: maxMapped},
		log: log,
		m:   make(map[string]*Topic),
	}
	if err := makeIndexDir(t.dir); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(t.dir)
	if err != nil {
		return nil, fsys.FileError("readdir", t.dir, err)
	}
	for _, de := range des {
		name := de.Name()
		if !de.IsDir() {
			if !strings.HasSuffix(name, topicNameSuffix) && !strings.HasSuffix(name, fsys.TmpSuffix) {
				log.Warn("unexpected file in the topic index directory", zap.String("path", filepath.Join(t.dir, name)))
			}
			continue
		}
		topic, ok := parseTopicDirName(name)
		if strings.HasPrefix(name, "#") {
			b, err := os.ReadFile(filepath.Join(t.dir, name+topicNameSuffix))
			ok = err == nil && len(b) > 0 && topicDirName(string(b)) == name
			topic = string(b)
		}
		if !ok {
			log.Warn("unexpected directory in the topic index directory", zap.String("path", filepath.Join(t.dir, name)))
			continue
		}
		ti, err := t.openTopic(topic, filepath.Join(t.dir, name))
		if err != nil {
			t.Close()
			return nil, err
		}
		if ti != nil {
			t.m[topic] = ti
		}
	}
	return t, nil
}

// openTopic opens one topic's index; an empty directory (a crash right
// after it was made) is removed and nil returned.
func (t *Topics) openTopic(topic, dir string) (*Topic, error) {
	if empty, err := removeIfEmpty(dir); err != nil || empty {
		return nil, err
	}
	a, err := openArray(dir, 0, t.cfg, t.log)
	if err != nil {
		return nil, err
	}
	ti := &Topic{name: topic, arr: a}
	last, err := lastEntryPos(a)
	if err != nil {
		a.close()
		return nil, err
	}
	ti.last.Store(last)
	return ti, nil
}

// makeIndexDir makes dir and makes its entry in the parent durable.
func makeIndexDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fsys.FileError("mkdir", dir, err)
	}
	return fsys.SyncDir(filepath.Dir(dir))
}

func removeIfEmpty(dir string) (bool, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return false, fsys.FileError("readdir", dir, err)
	}
	if len(des) > 0 {
		return false, nil
	}
	if err := os.Remove(dir); err != nil {
		return false, fsys.FileError("remove", dir, err)
	}
	return true, nil
}

// Append adds e to the index of topic and returns its offset in the topic.
// Positions must increase along a topic: an entry at or before the topic's
// last position is refused with ErrDuplicate (so that re-indexing the log
// from an earlier point skips what is already indexed). It does not
// allocate unless the topic is new. Writer only.
func (t *Topics) Append(topic []byte, e Entry) (uint64, error) {
	if t.closed.Load() {
		return 0, errs.ErrClosed
	}
	if e.Pos < 0 {
		return 0, fmt.Errorf("%w: index entry at position %d", record.ErrInvalid, e.Pos)
	}
	ti := t.m[string(topic)]
	created := false
	if ti == nil {
		var err error
		if ti, err = t.create(string(topic)); err != nil {
			return 0, err
		}
		created = true
	}
	if last := ti.last.Load(); e.Pos <= last {
		return 0, fmt.Errorf("%w: topic %q already indexed up to position %d, got %d", errs.ErrDuplicate, ti.name, last, e.Pos)
	}
	var buf [topicEntrySize]byte
	encodeIndexEntry(buf[:], e)
	off := ti.arr.len()
	if err := ti.arr.append(buf[:]); err != nil {
		if created {
			ti.arr.close()
		}
		return 0, err
	}
	ti.last.Store(e.Pos)
	if created {
		// Readers see a new topic only once it has its first entry.
		t.mu.Lock()
		t.m[ti.name] = ti
		t.mu.Unlock()
	}
	return off, nil
}

// create makes the index of a new topic.
func (t *Topics) create(topic string) (*Topic, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: empty topic", record.ErrInvalid)
	}
	name := topicDirName(topic)
	if strings.HasPrefix(name, "#") {
		if err := fsys.CreateAtomic(filepath.Join(t.dir, name+topicNameSuffix), fsys.WriteSynced([]byte(topic))); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(t.dir, name)
	if err := makeIndexDir(dir); err != nil {
		return nil, err
	}
	a, err := openArray(dir, 0, t.cfg, t.log)
	if err != nil {
		return nil, err
	}
	ti := &Topic{name: topic, arr: a}
	ti.last.Store(-1)
	return ti, nil
}

// Get returns the index of topic, nil if the topic has none. Safe from any
// goroutine.
func (t *Topics) Get(topic string) *Topic {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[topic]
}

// Names lists the indexed topics, sorted.
func (t *Topics) Names() []string {
	t.mu.RLock()
	names := make([]string, 0, len(t.m))
	for name := range t.m {
		names = append(names, name)
	}
	t.mu.RUnlock()
	slices.Sort(names)
	return names
}

// each calls fn for every topic index, in no order, under the read lock.
func (t *Topics) each(fn func(*Topic) error) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var errs []error
	for _, ti := range t.m {
		if err := fn(ti); err != nil {
			errs = append(errs, fmt.Errorf("topic %q: %w", ti.name, err))
		}
	}
	return errors.Join(errs...)
}

// Truncate drops, in every topic, the entries whose position is at or
// after pos: recovery cut the log there. Writer only.
func (t *Topics) Truncate(pos int64) error {
	if t.closed.Load() {
		return errs.ErrClosed
	}
	return t.each(func(ti *Topic) error {
		last, err := truncateIndex(ti.arr, pos)
		if err == nil {
			ti.last.Store(last)
		}
		return err
	})
}

// DropBefore removes, in every topic, the chunks whose entries all lie
// before pos: the log no longer holds those records. Retention works by
// whole chunks, and the last chunk of a topic always stays. Writer only.
func (t *Topics) DropBefore(pos int64) error {
	if t.closed.Load() {
		return errs.ErrClosed
	}
	return t.each(func(ti *Topic) error { return dropIndexBefore(ti.arr, pos) })
}

// LastPos is the greatest position indexed in any topic, -1 if none. After
// a crash, topics may have been synced to different points; a caller
// re-indexing the log should start from a position it knows all indexes
// were synced through, and append skips (ErrDuplicate) what is there.
func (t *Topics) LastPos() int64 {
	last := int64(-1)
	t.each(func(ti *Topic) error {
		last = max(last, ti.last.Load())
		return nil
	})
	return last
}

// Sync makes every entry appended so far durable. Safe concurrently with
// the writer and readers.
func (t *Topics) Sync() error {
	if t.closed.Load() {
		return errs.ErrClosed
	}
	return t.each(func(ti *Topic) error { return ti.arr.sync() })
}

// Close syncs and unmaps every index.
func (t *Topics) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	return t.each(func(ti *Topic) error { return ti.arr.close() })
}

// Entry returns the entry at offset off: ErrRecycled below first(),
// ErrBeyondEnd at or after len(), ErrCorrupt for a hole.
func (ti *Topic) Entry(off uint64) (Entry, error) {
	var buf [topicEntrySize]byte
	if err := ti.arr.read(off, buf[:]); err != nil {
		return Entry{}, err
	}
	e, err := decodeIndexEntry(buf[:])
	if err != nil {
		return e, fmt.Errorf("%w (topic %q, offset %d)", err, ti.name, off)
	}
	return e, nil
}

// Len is the offset the topic's next message will get.
func (ti *Topic) Len() uint64 { return ti.arr.len() }

// First is the first offset the index still holds.
func (ti *Topic) First() uint64 { return ti.arr.first() }

// SearchHLC returns the first offset whose entry's HLC is at least h, by
// binary search. The answer is approximate: entries follow log order, and
// records from other origins may arrive with older HLCs than those
// before them, so HLCs along a topic are nearly, not strictly, ordered.
// Callers start there and scan on (a reader starting from a time delivers
// what follows, filtering nothing). On a read error it returns first(), so
// the caller's own scan meets the error.
func (ti *Topic) SearchHLC(h uint64) uint64 {
	first := ti.arr.first()
	lo, hi := first, ti.arr.len()
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := ti.Entry(mid)
		if err != nil {
			if errors.Is(err, errs.ErrRecycled) {
				// Retention dropped chunks under us: search what is left.
				lo = max(lo, ti.arr.first())
				continue
			}
			return first
		}
		if e.HLC >= h {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// SearchPos returns the first offset whose record lies at or after log
// position pos (Len() if none): positions increase along a topic.
func (ti *Topic) SearchPos(pos int64) (uint64, error) { return searchPos(ti.arr, pos) }

// Origins is the set of origin indexes of a store.
type Origins struct {
	dir    string
	cfg    arrayConfig
	log    *zap.Logger
	closed atomic.Bool

	// mu guards m against readers while the writer adds an origin; the
	// writer itself reads m without it.
	mu sync.RWMutex
	m  map[uint64]*originIndex
}

// originIndex is the index of one origin: entry seq holds the position of
// the record (origin, seq) plus one.
type originIndex struct {
	origin uint64
	arr    *array
	last   atomic.Int64 // position of the last entry, -1 if none
}

// originDirName and parseOriginDirName name an origin's index directory.
func originDirName(origin uint64) string { return fmt.Sprintf("%016x", origin) }

func parseOriginDirName(name string) (uint64, bool) {
	if len(name) != 16 || strings.Trim(name, "0123456789abcdef") != "" {
		return 0, false
	}
	o, err := strconv.ParseUint(name, 16, 64)
	return o, err == nil && o != 0
}

// OpenOrigins opens (creating if needed) the origin indexes in dir
// (the store's <data>/index/origin). chunkEntries is the most entries per
// chunk file (0: 1<<20, 8 MiB; the first files are smaller, see
// firstIndexChunkEntries); maxMapped bounds the chunks mapped at once per
// origin.
func OpenOrigins(dir string, chunkEntries, maxMapped int, log *zap.Logger) (*Origins, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if chunkEntries < 0 {
		return nil, fmt.Errorf("%w: %d index entries per chunk", record.ErrInvalid, chunkEntries)
	}
	o := &Origins{
		dir: dir,
		cfg: arrayConfig{entrySize: originEntrySize, chunkEntries: uint64(chunkEntries),
			firstChunkEntries: firstIndexChunkEntries, maxMapped: maxMapped},
		log: log,
		m:   make(map[uint64]*originIndex),
	}
	if err := makeIndexDir(o.dir); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(o.dir)
	if err != nil {
		return nil, fsys.FileError("readdir", o.dir, err)
	}
	for _, de := range des {
		origin, ok := parseOriginDirName(de.Name())
		if !ok || !de.IsDir() {
			log.Warn("unexpected file in the origin index directory", zap.String("path", filepath.Join(o.dir, de.Name())))
			continue
		}
		dir := filepath.Join(o.dir, de.Name())
		if empty, err := removeIfEmpty(dir); err != nil || empty {
			if err != nil {
				o.Close()
				return nil, err
			}
			continue
		}
		a, err := openArray(dir, 0, o.cfg, log)
		if err != nil {
			o.Close()
			return nil, err
		}
		oi := &originIndex{origin: origin, arr: a}
		last, err := lastEntryPos(a)
		if err != nil {
			a.close()
			o.Close()
			return nil, err
		}
		oi.last.Store(last)
		o.m[origin] = oi
	}
	return o, nil
}

// Put records that (origin, seq) is at log position pos. seq must be
// last(origin)+1; an origin not seen before accepts any seq >= 1 as its
// first (a node bootstrapped from a snapshot starts mid-sequence). A seq
// already held gives ErrDuplicate, one that skips ahead ErrOutOfOrder. It
// does not allocate unless the origin is new. Writer only.
func (o *Origins) Put(origin, seq uint64, pos int64) error {
	if o.closed.Load() {
		return errs.ErrClosed
	}
	if origin == 0 || seq == 0 || pos < 0 {
		return fmt.Errorf("%w: origin index entry (%016x, %d) at position %d", record.ErrInvalid, origin, seq, pos)
	}
	oi := o.m[origin]
	created := false
	if oi == nil {
		var err error
		if oi, err = o.create(origin, seq); err != nil {
			return err
		}
		created = true
	}
	switch next := oi.arr.len(); {
	case seq < next:
		return fmt.Errorf("%w: origin %016x seq %d (held up to %d)", errs.ErrDuplicate, origin, seq, next-1)
	case seq > next:
		return fmt.Errorf("%w: origin %016x seq %d, expected %d", errs.ErrOutOfOrder, origin, seq, next)
	}
	if last := oi.last.Load(); pos <= last {
		return fmt.Errorf("%w: origin %016x seq %d at position %d, not after %d", record.ErrInvalid, origin, seq, pos, last)
	}
	var buf [originEntrySize]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(pos)+1)
	if err := oi.arr.append(buf[:]); err != nil {
		if created {
			o.forget(oi)
		}
		return err
	}
	oi.last.Store(pos)
	if created {
		// Readers see a new origin only once it holds its first seq.
		o.mu.Lock()
		o.m[origin] = oi
		o.mu.Unlock()
	}
	return nil
}

// create makes the (empty) index of a new origin starting at seq.
func (o *Origins) create(origin, seq uint64) (*originIndex, error) {
	dir := filepath.Join(o.dir, originDirName(origin))
	if err := makeIndexDir(dir); err != nil {
		return nil, err
	}
	a, err := openArray(dir, seq, o.cfg, o.log)
	if err != nil {
		return nil, err
	}
	oi := &originIndex{origin: origin, arr: a}
	oi.last.Store(-1)
	return oi, nil
}

// forget removes the files of a new origin whose first put failed, so that
// the next put may start it at another seq.
func (o *Origins) forget(oi *originIndex) {
	oi.arr.close()
	dir := filepath.Join(o.dir, originDirName(oi.origin))
	if err := os.RemoveAll(dir); err != nil {
		o.log.Warn("removing an unused origin index failed", zap.String("path", dir), zap.Error(err))
	}
}

func (o *Origins) lookup(origin uint64) *originIndex {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.m[origin]
}

// Get returns the log position of (origin, seq); ok is false if the index
// does not hold it (never seen, or dropped by retention). Safe from any
// goroutine.
func (o *Origins) Get(origin, seq uint64) (pos int64, ok bool) {
	oi := o.lookup(origin)
	if oi == nil {
		return 0, false
	}
	p, err := entryPos(oi.arr, seq)
	if err != nil {
		return 0, false
	}
	return p, true
}

// Last is the highest seq of origin the index holds, 0 if none. An origin
// whose entries were all dropped keeps reporting the seq before the first
// one it retained: those records were held once.
func (o *Origins) Last(origin uint64) uint64 {
	oi := o.lookup(origin)
	if oi == nil {
		return 0
	}
	return oi.arr.len() - 1
}

// Vector returns origin -> last(origin) for every origin with a last seq.
func (o *Origins) Vector() map[uint64]uint64 {
	o.mu.RLock()
	defer o.mu.RUnlock()
	v := make(map[uint64]uint64, len(o.m))
	for origin, oi := range o.m {
		if last := oi.arr.len() - 1; last > 0 {
			v[origin] = last
		}
	}
	return v
}

func (o *Origins) each(fn func(*originIndex) error) error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var errs []error
	for _, oi := range o.m {
		if err := fn(oi); err != nil {
			errs = append(errs, fmt.Errorf("origin %016x: %w", oi.origin, err))
		}
	}
	return errors.Join(errs...)
}

// Truncate drops, in every origin, the entries whose position is at or
// after pos. An origin keeps its first seq even when it empties. Writer
// only.
func (o *Origins) Truncate(pos int64) error {
	if o.closed.Load() {
		return errs.ErrClosed
	}
	return o.each(func(oi *originIndex) error {
		last, err := truncateIndex(oi.arr, pos)
		if err == nil {
			oi.last.Store(last)
		}
		return err
	})
}

// DropBefore removes, in every origin, the chunks whose entries all lie
// before pos. Writer only.
func (o *Origins) DropBefore(pos int64) error {
	if o.closed.Load() {
		return errs.ErrClosed
	}
	return o.each(func(oi *originIndex) error { return dropIndexBefore(oi.arr, pos) })
}

// LastPos is the greatest position indexed for any origin, -1 if none.
func (o *Origins) LastPos() int64 {
	last := int64(-1)
	o.each(func(oi *originIndex) error {
		last = max(last, oi.last.Load())
		return nil
	})
	return last
}

// Sync makes every entry put so far durable. Safe concurrently with the
// writer and readers.
func (o *Origins) Sync() error {
	if o.closed.Load() {
		return errs.ErrClosed
	}
	return o.each(func(oi *originIndex) error { return oi.arr.sync() })
}

// Close syncs and unmaps every index.
func (o *Origins) Close() error {
	if o.closed.Swap(true) {
		return nil
	}
	return o.each(func(oi *originIndex) error { return oi.arr.close() })
}

// Reset makes origin's index start over at seq next, holding nothing: the
// node took the records before next from a peer's snapshot instead of
// from their records. The empty first chunk is made at once, so the start
// survives a restart. Writer only.
func (o *Origins) Reset(origin, next uint64) error {
	if o.closed.Load() {
		return errs.ErrClosed
	}
	dir := filepath.Join(o.dir, originDirName(origin))
	if old := o.m[origin]; old != nil {
		o.mu.Lock()
		delete(o.m, origin)
		o.mu.Unlock()
		old.arr.close()
		if err := os.RemoveAll(dir); err != nil {
			return fsys.FileError("remove", dir, err)
		}
	}
	oi, err := o.create(origin, next)
	if err != nil {
		return err
	}
	if _, err := oi.arr.grow(next); err != nil {
		o.forget(oi)
		return err
	}
	o.mu.Lock()
	o.m[origin] = oi
	o.mu.Unlock()
	return nil
}
