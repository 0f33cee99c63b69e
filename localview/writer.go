package localview

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// WriterOptions are the Writer's settings.
type WriterOptions struct {
	// GID, when not -1, is the group every file the writer makes is given
	// (the daemon passes its socket's group); -1 keeps the process's.
	GID int
	// Keys and Bytes size the first generation (how many keys, how many
	// bytes of topic, key, tag and value); later ones grow from what is in
	// the view. Zero is fine: the file grows.
	Keys  int
	Bytes int64
}

// Writer maintains a view file: the one writer of the format. It is not
// safe for concurrent use: one goroutine owns it (the daemon's mirror).
// Readers in any process read the file while it writes.
type Writer struct {
	path string
	gid  int

	f    *os.File
	m    []byte // the whole file, mapped read-write
	gen  uint64
	mask int // slot count - 1

	arenaOff, arenaEnd int
	used               int // next free arena byte
	slotsUsed          int // slots pointing at a record, live or deleted
	live               int // live keys
	liveBytes          int // arena bytes of live records
	state              uint64

	changes     uint64
	metaChanges uint64 // changes as of the last meta write
	lastChange  int64
	origins     map[uint64]uint64 // origin -> greatest HLC applied
	// The origin of the last change and its greatest HLC, folded into
	// origins at each meta write or when a change comes from another
	// origin: most changes come from the origin of the one before.
	origin, originHLC uint64
	haveOrigin        bool
	alive             uint32
	members           uint32
	metaDirty         bool

	topics topicCache

	// writes numbers the record writes (a record's version is twice the
	// number of its last write); committed is the last write of a whole
	// batch, as the header's committed word says; inBatch is true between
	// BeginBatch and EndBatch.
	writes, committed uint64
	inBatch           bool

	// sink keeps Touch's loads from being dropped; touch is its
	// scratch, kept for the next call.
	sink  uint64
	touch []touchSlot

	// smallKeys and smallBytes: below these a new generation doubles;
	// tests shrink them to make small files.
	smallKeys, smallBytes int

	// mine reads the current generation for AppendValue and WarmAt,
	// which other goroutines call while the writer writes (holding
	// RLock); nil once closed. rmu guards it: a new generation is put in
	// place, and the old one unmapped, under its write lock, once no
	// reader holds RLock.
	rmu  sync.RWMutex
	mine *ownGen
	// starts is the current generation's record starts (ownGen.starts).
	starts []uint64
}

// ownGen is the writer's current generation as AppendValue and WarmAt
// read it: its mapping, and a bitmap of where its records start, bit
// (off - arena) / 8 set for the record at off (set before the slot that
// publishes the record), which tells a record's offset kept from an
// earlier read (AppendValue's at) from any other place in the arena.
// It costs one bit for every 8 bytes of the arena (2.9 MB at 1M keys of
// 100-byte values), in the writer's process only.
type ownGen struct {
	Reader
	starts []uint64
}

// isStart reports whether a record of the generation starts at off, an
// 8-aligned offset inside its arena.
func (g *ownGen) isStart(off int) bool {
	i := (off - g.arena) / 8
	return atomic.LoadUint64(&g.starts[i/64])&(1<<(i%64)) != 0
}

// markStart records that a record starts at off of the arena that
// begins at arena.
func markStart(starts []uint64, arena, off int) {
	i := (off - arena) / 8
	atomic.OrUint64(&starts[i/64], 1<<(i%64))
}

// Create makes a new generation of the view file at path, empty and not
// ready, and puts it in place atomically. A view file already at path
// (left by an earlier daemon, maybe killed) is first marked not ready,
// then superseded, so that its readers move to the new one by themselves.
// Anything else at path that is not a regular file is refused.
func Create(path string, opts WriterOptions) (*Writer, error) {
	return create(path, opts, 1<<16, 8<<20)
}

func create(path string, opts WriterOptions, smallKeys, smallBytes int) (*Writer, error) {
	w := &Writer{topics: topicCache{n: -1}, path: path, gid: opts.GID, origins: make(map[uint64]uint64), smallKeys: smallKeys, smallBytes: smallBytes}
	old, oldGen := openOld(path)
	if old != nil {
		defer old.release()
		old.clearReady()
	}
	if tmps, _ := filepath.Glob(path + ".*.tmp"); len(tmps) > 0 {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	w.gen = oldGen
	if err := w.build(opts.Keys, int(opts.Bytes)); err != nil {
		return nil, err
	}
	if old != nil {
		old.supersede()
	}
	return w, nil
}

// oldFile is the header page of a view file this writer replaces.
type oldFile struct {
	f *os.File
	m []byte
}

// openOld maps the header of a view file at path, if there is a valid one.
func openOld(path string) (*oldFile, uint64) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < headerSize {
		return nil, 0
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, headerSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil || string(m[:8]) != magic {
		if err == nil {
			unix.Munmap(m)
		}
		f.Close()
		return nil, 0
	}
	return &oldFile{f: f, m: m}, le64(m, offGeneration)
}

func (o *oldFile) clearReady() { orState(o.m, stateReady, 0) }
func (o *oldFile) supersede()  { orState(o.m, stateSuperseded, stateReady) }
func (o *oldFile) release() {
	unix.Munmap(o.m)
	o.f.Close()
}

// orState sets the bits set and clears the bits clear of a header's state.
// Only the writer changes the state, so a load and a store suffice.
func orState(m []byte, set, clear uint64) {
	store64(m, offState, load64(m, offState)&^clear|set)
}

// Path is the file the writer maintains.
func (w *Writer) Path() string { return w.path }

// Generation is the number of the file currently at Path.
func (w *Writer) Generation() uint64 { return w.gen }

// Linked reports whether the path still names the writer's file: false
// once someone unlinked it or put another file there (the runtime
// directory deleted, say), which readers opening the path cannot find.
// Two system calls: the daemon asks every heartbeat.
func (w *Writer) Linked() bool {
	if w.m == nil {
		return false
	}
	var mine, there unix.Stat_t
	if unix.Fstat(int(w.f.Fd()), &mine) != nil || unix.Stat(w.path, &there) != nil {
		return false
	}
	return mine.Dev == there.Dev && mine.Ino == there.Ino
}

// Len is the number of live keys.
func (w *Writer) Len() int { return w.live }

// Size is the size of the current file in bytes.
func (w *Writer) Size() int { return len(w.m) }

// SetReady marks the view ready (it reflects the store) or not.
func (w *Writer) SetReady(ready bool) {
	if ready {
		w.state |= stateReady
	} else {
		w.state &^= stateReady
	}
	if w.m != nil {
		w.storeState()
	}
}

// storeState writes w.state, keeping a superseded bit another writer set
// (a restarted mirror's Create superseding this file before Close).
func (w *Writer) storeState() {
	store64(w.m, offState, load64(w.m, offState)&stateSuperseded|w.state)
}

// SetGroup gives the current file, and every later one, the group gid.
func (w *Writer) SetGroup(gid int) error {
	w.gid = gid
	if err := w.f.Chown(-1, gid); err != nil {
		return fmt.Errorf("localview: %w", err)
	}
	return nil
}

// SetCluster records the cluster state readers see: alive members (this
// node included) out of the members known.
func (w *Writer) SetCluster(alive, members int) {
	w.alive, w.members = uint32(alive), uint32(members)
	w.metaDirty = true
}

// Heartbeat stores asOf as the time up to which the view is known to be
// current (every change made before it is in the file), and publishes the
// counters and the per-origin HLCs changed since the last call. The
// daemon calls it after each batch of changes, with the time it took the
// batch, and every 50ms.
func (w *Writer) Heartbeat(asOf time.Time) {
	if w.m == nil {
		return
	}
	if w.metaDirty {
		w.writeMeta(w.m)
		w.metaDirty = false
	}
	store64(w.m, offHeartbeat, uint64(asOf.UnixNano()))
}

// writeMeta writes the fields under the header's seqlock. The time of
// the last change is taken here, once for all the changes since the last
// meta write (a clock read a change was a tenth of the writer's cost), so
// it is the time of the last change to within the heartbeat's period.
func (w *Writer) writeMeta(m []byte) {
	w.foldOrigin()
	if w.changes != w.metaChanges {
		w.metaChanges, w.lastChange = w.changes, time.Now().UnixNano()
	}
	v := load64(m, offMetaSeq)
	store64(m, offMetaSeq, v+1)
	store64(m, offLiveKeys, uint64(w.live))
	store64(m, offChanges, w.changes)
	store64(m, offLastChange, uint64(w.lastChange))
	store64(m, offAlive, uint64(w.alive)|uint64(w.members)<<32)
	type pair struct{ origin, hlc uint64 }
	ps := make([]pair, 0, len(w.origins))
	for o, h := range w.origins {
		ps = append(ps, pair{o, h})
	}
	if len(ps) > MaxOrigins {
		// Keep the origins heard from most recently.
		sort.Slice(ps, func(i, j int) bool { return ps[i].hlc > ps[j].hlc })
		ps = ps[:MaxOrigins]
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].origin < ps[j].origin })
	store64(m, offOrigins, uint64(len(ps)))
	for i, p := range ps {
		store64(m, offOriginList+16*i, p.origin)
		store64(m, offOriginList+16*i+8, p.hlc)
	}
	store64(m, offMetaSeq, v+2)
}

// Put makes (topic, key) hold tag and value, set by the message stamped st.
// The writer trusts its feed: the store's view has already decided that
// this message wins.
func (w *Writer) Put(topic, key, tag string, value []byte, st Stamp) error {
	return w.apply(topic, key, tag, value, st, false, true)
}

// Delete removes (topic, key); st is the tombstone's stamp.
func (w *Writer) Delete(topic, key string, st Stamp) error {
	return w.apply(topic, key, "", nil, st, true, true)
}

// TryPut is Put when it needs no new generation; otherwise it changes
// nothing and reports false. A caller that must not wait for a rebuild
// (one holding a lock others wait on) uses it, and leaves the change to
// Put on another goroutine when it reports false.
func (w *Writer) TryPut(topic, key, tag string, value []byte, st Stamp) (bool, error) {
	err := w.apply(topic, key, tag, value, st, false, false)
	if err == errWouldGrow {
		return false, nil
	}
	return err == nil, err
}

// errWouldGrow is set's answer, with grow false, to a change that needs a
// new generation.
var errWouldGrow = errors.New("localview: a new generation is needed")

func (w *Writer) apply(topic, key, tag string, value []byte, st Stamp, del, grow bool) error {
	if w.m == nil {
		return ErrClosed
	}
	if len(topic) > 0xffff || len(key) > 0xffff || len(tag) > 0xffff || int64(len(value)) > 1<<31 {
		return fmt.Errorf("%w: topic %d, key %d, tag %d, value %d bytes", ErrTooLarge, len(topic), len(key), len(tag), len(value))
	}
	if err := w.set(topic, key, tag, value, st, del, grow); err != nil {
		return err
	}
	w.changes++
	if !w.inBatch {
		w.commit()
	}
	if !w.haveOrigin || st.Origin != w.origin {
		w.foldOrigin()
		w.origin, w.originHLC, w.haveOrigin = st.Origin, w.origins[st.Origin], true
	}
	w.originHLC = max(w.originHLC, st.HLC)
	w.metaDirty = true
	return nil
}

// Touch loads the cache lines the Puts of n keys (key(i) is the i-th
// topic and key) read and write: each key's slot, and every line of the
// record the slot names when its hash is the key's. It changes nothing.
// A caller with many changes at hand touches them all before it puts
// them (the daemon's mirror, for each publish). It goes level by level,
// every key's hash, then every slot, then every record's first line,
// then their other lines, each level a short loop, so that the cache
// misses of a level overlap instead of coming one after another. The
// record's lines past its first matter most: update's last version
// store is a locked instruction, which waits until every store before it
// is done, so a store of the value that misses the cache is waited for
// there, once a record.
func (w *Writer) Touch(n int, key func(i int) (topic, key string)) {
	if w.m == nil {
		return
	}
	ts := w.touch[:0]
	for i := range n {
		ts = append(ts, touchSlot{hash: w.topics.hash(key(i))})
	}
	w.touch = ts
	for i := range ts {
		ts[i].slot = le64(w.m, headerSize+8*(int(ts[i].hash)&w.mask))
	}
	sink := w.sink
	for i := range ts {
		if uint32(ts[i].slot>>32) != ts[i].hash {
			ts[i].off = -1
			continue
		}
		ts[i].off = int(uint32(ts[i].slot)) * 8
		sink += uint64(w.m[ts[i].off])
	}
	for _, t := range ts {
		if t.off < 0 {
			continue
		}
		end := min(t.off+recordSize(le32(w.m, t.off+recCap), le16(w.m, t.off+recTopicLen), le16(w.m, t.off+recKeyLen)), len(w.m))
		for o := t.off + cacheLine; o < end; o += cacheLine {
			sink += uint64(w.m[o])
		}
		sink += uint64(w.m[end-1])
	}
	w.sink = sink
}

// touchSlot is Touch's scratch for one key: its hash, its first slot,
// and the offset of the record the slot names (-1: none of the key's).
type touchSlot struct {
	hash uint32
	slot uint64
	off  int
}

// cacheLine is the size of a CPU cache line, the step of Touch.
const cacheLine = 64

// BeginBatch starts a batch: the changes until EndBatch are seen by a
// reader's GetMany all together or not at all (a reader of single keys
// sees each as it is written). A change outside a batch is a batch of
// its own. A batch may span a rebuild (a Put that needs a new
// generation): the new file holds it open too.
func (w *Writer) BeginBatch() { w.inBatch = true }

// EndBatch ends the batch BeginBatch started: one atomic store of the
// header's committed word makes all of it visible to GetMany at once.
func (w *Writer) EndBatch() {
	w.inBatch = false
	w.commit()
}

// commit stores the committed word: every write so far is of a whole
// batch.
func (w *Writer) commit() {
	if w.committed != w.writes && w.m != nil {
		w.committed = w.writes
		store64(w.m, offCommitted, w.committed)
	}
}

// foldOrigin puts the current origin's greatest HLC into origins.
func (w *Writer) foldOrigin() {
	if w.haveOrigin && w.originHLC > w.origins[w.origin] {
		w.origins[w.origin] = w.originHLC
	}
}

// set stores the change, rebuilding the file first when it is full.
func (w *Writer) set(topic, key, tag string, value []byte, st Stamp, del, grow bool) error {
	h := w.topics.hash(topic, key)
	slot, off := w.find(h, topic, key)
	need := len(tag) + len(value)
	if off == 0 && del {
		return nil // nothing to delete
	}
	if off != 0 {
		capacity := le32(w.m, off+recCap)
		size := recordSize(capacity, len(topic), len(key))
		wasLive := le16(w.m, off+recFlags)&flagDeleted == 0
		switch {
		case del:
			w.update(off, "", nil, st, flagDeleted)
			if wasLive {
				w.live--
				w.liveBytes -= size
			}
			return nil
		case need <= capacity:
			w.update(off, tag, value, st, 0)
			if !wasLive {
				w.live++
				w.liveBytes += size
			}
			return nil
		}
		// It does not fit: a new record, and the old one is garbage.
		newSize := recordSize(align8(need), len(topic), len(key))
		if w.used+newSize > w.arenaEnd {
			if !grow {
				return errWouldGrow
			}
			if err := w.rebuild(0, newSize); err != nil {
				return err
			}
			return w.set(topic, key, tag, value, st, del, grow)
		}
		rec := w.add(topic, key, tag, value, st)
		store64(w.m, slot, uint64(h)<<32|uint64(rec/8))
		if wasLive {
			w.liveBytes -= size
		} else {
			w.live++
		}
		w.liveBytes += newSize
		return nil
	}
	size := recordSize(align8(need), len(topic), len(key))
	if w.used+size > w.arenaEnd || (w.slotsUsed+1)*4 > (w.mask+1)*3 {
		if !grow {
			return errWouldGrow
		}
		if err := w.rebuild(1, size); err != nil {
			return err
		}
		return w.set(topic, key, tag, value, st, del, grow)
	}
	rec := w.add(topic, key, tag, value, st)
	// The slot's store publishes the record: it is complete before it.
	store64(w.m, slot, uint64(h)<<32|uint64(rec/8))
	w.slotsUsed++
	w.live++
	w.liveBytes += size
	return nil
}

// find returns the offset of the slot holding (topic, key) and its record's
// offset, or the first empty slot on the key's probe path and 0.
func (w *Writer) find(h uint32, topic, key string) (slot, rec int) {
	for i := int(h) & w.mask; ; i = (i + 1) & w.mask {
		so := headerSize + 8*i
		s := load64(w.m, so)
		if s == 0 {
			return so, 0
		}
		if uint32(s>>32) != h {
			continue
		}
		off := int(uint32(s)) * 8
		tl, kl := le16(w.m, off+recTopicLen), le16(w.m, off+recKeyLen)
		k := off + recordHeader
		if tl == len(topic) && kl == len(key) && string(w.m[k:k+tl]) == topic && string(w.m[k+tl:k+tl+kl]) == key {
			return so, off
		}
	}
}

// update rewrites the mutable part of the record at off under its seqlock:
// odd while the words change, even (twice the write's number) once they
// are all written.
func (w *Writer) update(off int, tag string, value []byte, st Stamp, flags uint16) {
	m := w.m
	data := dataAt(off, le16(m, off+recTopicLen), le16(m, off+recKeyLen))
	// The version is twice the write's number: greater than any the
	// record had (it only grows), so that GetMany can tell a write of an
	// unfinished batch (above the committed word) from one before it.
	w.writes++
	v := 2 * w.writes
	store64(m, off, v-1)
	if tso {
		// The two version stores are locked instructions (full fences):
		// every plain store between them is seen after the first and
		// before the second.
		binary.LittleEndian.PutUint64(m[off+recHLC:], st.HLC)
		binary.LittleEndian.PutUint64(m[off+recOrigin:], st.Origin)
		binary.LittleEndian.PutUint64(m[off+recSeq:], st.Seq)
		binary.LittleEndian.PutUint64(m[off+recValueLen:], uint64(len(value))|uint64(len(tag))<<32|uint64(flags)<<48)
		d := data + copy(m[data:], tag)
		d += copy(m[d:], value)
		clear(m[d:align8(d)])
	} else {
		store64(m, off+recHLC, st.HLC)
		store64(m, off+recOrigin, st.Origin)
		store64(m, off+recSeq, st.Seq)
		store64(m, off+recValueLen, uint64(len(value))|uint64(len(tag))<<32|uint64(flags)<<48)
		storeConcat(m, data, tag, value)
	}
	store64(m, off, v)
}

// add writes a new record at the end of the arena and returns its offset.
// No reader can reach it before its slot is stored, so plain copies do.
func (w *Writer) add(topic, key, tag string, value []byte, st Stamp) int {
	off := w.used
	capacity := align8(len(tag) + len(value))
	m := w.m
	w.writes++
	binary.LittleEndian.PutUint64(m[off+recVersion:], 2*w.writes)
	binary.LittleEndian.PutUint64(m[off+recHLC:], st.HLC)
	binary.LittleEndian.PutUint64(m[off+recOrigin:], st.Origin)
	binary.LittleEndian.PutUint64(m[off+recSeq:], st.Seq)
	binary.LittleEndian.PutUint32(m[off+recValueLen:], uint32(len(value)))
	binary.LittleEndian.PutUint16(m[off+recTagLen:], uint16(len(tag)))
	binary.LittleEndian.PutUint16(m[off+recFlags:], 0)
	binary.LittleEndian.PutUint32(m[off+recCap:], uint32(capacity))
	binary.LittleEndian.PutUint16(m[off+recTopicLen:], uint16(len(topic)))
	binary.LittleEndian.PutUint16(m[off+recKeyLen:], uint16(len(key)))
	d := off + recordHeader
	d += copy(m[d:], topic)
	d += copy(m[d:], key)
	data := dataAt(off, len(topic), len(key))
	clear(m[d:data])
	d = data + copy(m[data:], tag)
	d += copy(m[d:], value)
	end := data + capacity
	clear(m[d:end])
	w.used = end
	markStart(w.starts, w.arenaOff, off)
	return off
}

// storeConcat stores a‖b at off (8-aligned) one atomic 64-bit word at a
// time, zero-filling the last word.
func storeConcat(m []byte, off int, a string, b []byte) {
	n := len(a) + len(b)
	for i := 0; i < n; i += 8 {
		var x uint64
		switch {
		case i+8 <= len(a):
			x = binary.LittleEndian.Uint64([]byte(a[i : i+8]))
		case i >= len(a) && i+8-len(a) <= len(b):
			x = binary.LittleEndian.Uint64(b[i-len(a):])
		default:
			for j := 0; j < 8 && i+j < n; j++ {
				var c byte
				if i+j < len(a) {
					c = a[i+j]
				} else {
					c = b[i+j-len(a)]
				}
				x |= uint64(c) << (8 * j)
			}
		}
		store64(m, off+i, x)
	}
}

// Growth: a new generation has room for this many more keys and bytes
// than the live ones: double while small (few rebuilds), an eighth once
// large (a bounded file: the arena is at most 1.125x the live records).
func grown(n, small int) int {
	if n < small {
		return 2*n + small/8
	}
	return n + n/8
}

// rebuild makes a new generation holding the live records, with room for
// extraKeys more keys and extraBytes more arena bytes, and swaps it in.
func (w *Writer) rebuild(extraKeys, extraBytes int) error {
	return w.build(w.live+extraKeys, w.liveBytes+extraBytes)
}

// build writes a new generation sized for keys keys and bytes arena bytes,
// copies the live records of the current one into it, renames it onto the
// path and marks the old one superseded. On an error the current file
// stays as it is.
func (w *Writer) build(keys, bytes int) error {
	capKeys := grown(keys, w.smallKeys)
	slots := 1 << bits.Len(uint(capKeys*4/3)) // load <= 3/4
	slots = max(slots, 16)
	arena := align8(grown(bytes, w.smallBytes))
	size := headerSize + 8*slots + arena
	size = (size + 4095) &^ 4095
	if size > hugePage {
		// Whole huge pages: on a tmpfs mounted huge=within_size (or
		// always) every byte is then backed by one, the tail too, and a
		// mapping of the file is PMD-mapped to its end.
		size = (size + hugePage - 1) &^ (hugePage - 1)
	}
	if size > maxFileSize {
		return fmt.Errorf("%w: a generation for %d keys and %d bytes needs %d bytes", ErrTooLarge, keys, bytes, size)
	}
	gen := w.gen + 1
	tmp := fmt.Sprintf("%s.%d.tmp", w.path, gen)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return fmt.Errorf("localview: %w", err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Chmod(0o640); err != nil { // the umask may have taken bits
		return fail(fmt.Errorf("localview: %w", err))
	}
	if w.gid != -1 {
		if err := f.Chown(-1, w.gid); err != nil {
			return fail(fmt.Errorf("localview: %w", err))
		}
	}
	// fallocate, not ftruncate: a full tmpfs is an error here, never a
	// SIGBUS on a page later.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		return fail(fmt.Errorf("localview: allocate %d bytes for %s: %w", size, tmp, err))
	}
	m, err := mapFile(int(f.Fd()), size, unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return fail(fmt.Errorf("localview: mmap %s: %w", tmp, err))
	}
	copy(m[offMagic:], magic)
	binary.LittleEndian.PutUint32(m[offVersion:], formatVersion)
	binary.LittleEndian.PutUint32(m[offHeaderSize:], headerSize)
	binary.LittleEndian.PutUint64(m[offFileSize:], uint64(size))
	binary.LittleEndian.PutUint64(m[offGeneration:], gen)
	binary.LittleEndian.PutUint64(m[offSlotsOff:], headerSize)
	binary.LittleEndian.PutUint64(m[offSlotCount:], uint64(slots))
	arenaOff := headerSize + 8*slots
	binary.LittleEndian.PutUint64(m[offArenaOff:], uint64(arenaOff))
	binary.LittleEndian.PutUint64(m[offArenaSize:], uint64(size-arenaOff))
	binary.LittleEndian.PutUint64(m[offWriterPID:], uint64(os.Getpid()))
	binary.LittleEndian.PutUint64(m[offCreated:], uint64(time.Now().UnixNano()))
	binary.LittleEndian.PutUint64(m[offCommitted:], w.committed)

	nw := Writer{m: m, mask: slots - 1, arenaOff: arenaOff, arenaEnd: size, used: arenaOff,
		starts: make([]uint64, (size-arenaOff)/8/64+1)}
	if w.m != nil {
		w.copyLive(&nw)
		binary.LittleEndian.PutUint64(m[offHeartbeat:], le64(w.m, offHeartbeat))
	}
	w.live, w.liveBytes = nw.live, nw.liveBytes
	w.writeMeta(m)
	store64(m, offState, w.state)

	if err := os.Rename(tmp, w.path); err != nil {
		unix.Munmap(m)
		return fail(fmt.Errorf("localview: %w", err))
	}
	w.rmu.Lock()
	w.mine = &ownGen{Reader{m: m, mask: slots - 1, slots: headerSize, arena: arenaOff, end: size}, nw.starts}
	w.rmu.Unlock()
	if w.m != nil {
		orState(w.m, stateSuperseded, 0)
		unix.Munmap(w.m)
		w.f.Close()
	}
	w.f, w.m, w.gen = f, m, gen
	w.mask, w.arenaOff, w.arenaEnd, w.used = nw.mask, nw.arenaOff, nw.arenaEnd, nw.used
	w.slotsUsed, w.starts = nw.slotsUsed, nw.starts
	return nil
}

// copyLive copies w's live records into nw, compacting their capacity.
// w is not changing (one writer), so plain copies do.
func (w *Writer) copyLive(nw *Writer) {
	m := w.m
	for i := 0; i <= w.mask; i++ {
		s := le64(m, headerSize+8*i)
		if s == 0 {
			continue
		}
		off := int(uint32(s)) * 8
		if le16(m, off+recFlags)&flagDeleted != 0 {
			continue
		}
		n := le32(m, off+recValueLen) + le16(m, off+recTagLen)
		tl, kl := le16(m, off+recTopicLen), le16(m, off+recKeyLen)
		capacity := align8(n)
		rec := nw.used
		size := recordSize(capacity, tl, kl)
		// Fixed fields, topic, key and the data, which follows them.
		// The version comes along: GetMany compares it with the
		// committed word, which the new file keeps too.
		copy(nw.m[rec:rec+size], m[off:dataAt(off, tl, kl)+n])
		binary.LittleEndian.PutUint32(nw.m[rec+recCap:], uint32(capacity))
		markStart(nw.starts, nw.arenaOff, rec)
		nw.used += size
		// The new table has no deleted slots and every key once: the
		// first empty slot on the probe path is the key's.
		j := int(s>>32) & nw.mask
		for le64(nw.m, headerSize+8*j) != 0 {
			j = (j + 1) & nw.mask
		}
		binary.LittleEndian.PutUint64(nw.m[headerSize+8*j:], s&^0xffffffff|uint64(rec/8))
		nw.slotsUsed++
		nw.live++
		nw.liveBytes += size
	}
}

// Reserve makes room for keys keys holding bytes bytes of topic, key, tag
// and value in all, building a bigger generation now if the current one
// has not that room, so that loading a large view grows the file once.
func (w *Writer) Reserve(keys int, bytes int64) error {
	if w.m == nil {
		return ErrClosed
	}
	need := int(bytes) + keys*(recordHeader+14) // alignment, on average
	if (w.slotsUsed+keys)*4 <= (w.mask+1)*3 && w.used+need <= w.arenaEnd {
		return nil
	}
	return w.build(w.live+keys, w.liveBytes+need)
}

// Compact rebuilds the file now with only the live records (the writer
// also does it by itself when the arena or the table fills up).
func (w *Writer) Compact() error {
	if w.m == nil {
		return ErrClosed
	}
	return w.rebuild(0, 0)
}

// Close marks the file closed and not ready (readers report ErrNotReady:
// the daemon stopped) and releases it. The file stays for the next writer
// to supersede.
func (w *Writer) Close() error {
	if w.m == nil {
		return ErrClosed
	}
	w.state = w.state&^stateReady | stateClosed
	w.storeState()
	w.rmu.Lock()
	w.mine = nil
	w.rmu.Unlock()
	err := unix.Munmap(w.m)
	w.m = nil
	return errors.Join(err, w.f.Close())
}

// RLock keeps the current generation mapped (a new one waits to unmap
// it) until RUnlock, for AppendValue and WarmAt. Unlike the Writer's
// other methods these are safe to call from any goroutine while the
// writer writes: the daemon's view reads the values it keeps out of its
// heap so (store/view's ValueFile). A goroutine must not RLock twice.
func (w *Writer) RLock() { w.rmu.RLock() }

// RUnlock ends what RLock started.
func (w *Writer) RUnlock() { w.rmu.RUnlock() }

// WarmAt loads the record at each of ats (AppendValue's answers, 0 for
// none), and the word of ownGen.starts that tells it, so that the cache
// misses of all the keys overlap instead of coming one after another in
// AppendValue (the view's GetMany). It changes nothing. The caller holds
// RLock.
func (w *Writer) WarmAt(ats []uint32) {
	g := w.mine
	if g == nil {
		return
	}
	for _, at := range ats {
		if off := int(at) * 8; off >= g.arena && off <= g.end-recordHeader {
			g.isStart(off)
			g.touchRecord(off)
		}
	}
}

// touchRecord loads the cache lines of the record at off, the first
// touchLines from the one its offset is in, so that the misses of its
// version, key and value come while the caller does other work
// (WarmAt: the other keys' loads), not one after another in AppendValue.
// The loads are atomic, which the compiler keeps although nothing uses
// them; they decide nothing.
func (r *Reader) touchRecord(off int) {
	for l := off &^ 63; l < off&^63+64*touchLines && l <= r.end-8; l += 64 {
		_ = load64(r.m, l)
	}
}

// touchLines is how many lines touchRecord loads: every line of a record
// of a 16-byte key and a 100-byte value (168 bytes) wherever it starts.
const touchLines = 4

// AppendValue appends to dst the value of (topic, key) when the current
// generation holds the version stamped st, and reports whether it did
// (false for another version, a deleted or unknown key, or a closed
// writer) and where the key's record is (0 when it did not): the caller
// keeps that (the daemon's view, in the key's item) and passes it back as
// at for the key's next read, which then goes to the record there without
// the key's hash and probe. The caller holds RLock. The record is read
// under its seqlock, as a Reader reads it.
//
// The place is the record's offset / 8, and is checked at every use: a
// record of the current generation must start there (ownGen.starts: a
// place kept from an earlier generation may be anywhere in this one's
// records, the bytes of a value included), hold the key, and hold the
// version asked for (a record the key left for a bigger one holds an
// older version); else (0, or a stale place) the read hashes and probes.
func (w *Writer) AppendValue(dst []byte, topic, key string, st Stamp, at uint32) ([]byte, uint32, bool) {
	g := w.mine
	if g == nil {
		return dst, 0, false
	}
	if off := int(at) * 8; off >= g.arena && off <= g.end-recordHeader && g.isStart(off) {
		if v, ok := g.appendAt(dst, off, topic, key, st); ok {
			return v, at, true
		}
	}
	off, _, err := g.lookup(Hash(topic, key), topic, key)
	if err != nil {
		return dst, 0, false
	}
	v, ok := g.appendAt(dst, off, topic, key, st)
	if !ok {
		return dst, 0, false
	}
	return v, uint32(off / 8), true
}

// appendAt appends to dst the value of the record at off when it is a
// record of (topic, key) holding the version stamped st.
func (r *Reader) appendAt(dst []byte, off int, topic, key string, st Stamp) ([]byte, bool) {
	c := r.keyRecord(off, topic, key)
	if c < 0 {
		return dst, false
	}
	n := len(dst)
	value, tag, got, _, err := r.readRecord(off, c, dataAt(off, len(topic), len(key)), &dst, n)
	if err != nil || got != st {
		return dst[:n], false
	}
	dst = dst[:n+len(value)]
	if len(tag) > 0 {
		copy(dst[n:], value) // over the tag, which came first
	}
	return dst, true
}
