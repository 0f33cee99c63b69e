package view

import (
	"sync/atomic"
	"unsafe"

	"github.com/cachecast/cachecast/store/record"
)

// Values in the shared view file (issue 34). The daemon's mirror writes
// every change of the view into the shared view file (--view-file), which
// then holds each live key's value, stamp and tag. An item whose value the
// mirror has written keeps only key | tag on the heap and reads its value
// from the file: the two-state item. Its state says where the value is:
//
//   - onHeap: the body holds key | tag | value (every item starts so);
//   - inFile: the body holds key | tag, the value is the file's record of
//     the key, which holds the item's stamp;
//   - retired: onHeap, and not inFile again while it is not its key's
//     entry alone (replaced, or its key has a timeline; or the mirror
//     let the file go, Unfile, and has not loaded it again).
//
// An item goes inFile only under the write lock, once the mirror reports
// it wrote its change (FileWritten), or wrote it when it loaded the view
// into a new file (FileLoaded: a restart's snapshot and replay), and
// only when it is its key's entry alone, of a topic without counters, a
// value an ordinary write made (with an expiry or not; not scheduled,
// not in a timeline), and the body the mirror wrote is still its own.
// An expiring value's record is the file's until its expiry's change,
// which install makes after it copied the value back (retire). The file's record of the key changes only by
// a later change of the key, which the view makes first, under the write
// lock: install retires the item it replaces and copies its value back
// to the heap before the follower hears of the change, and update (an
// item no frozen clone holds) gives the item its new value on the heap.
// So a reader holding the read lock finds the item's value in the file.
// A frozen clone (Digest, the snapshot writer, FollowFrom) reads without
// the lock, and may hold an item that goes inFile after the clone was
// taken: it reads the state, the body and the state again (the marking
// stores the state first, then the body), takes the view's file
// (View.shared) before the state, checks the stamp of the record it read
// and, when the record was rewritten, finds the value copied back (the
// copy came first), or finds that the view changed files meanwhile (an
// Unfile and a load into a new file, which may take the item again
// before its record there is written), and reads again. A growth of the file moves
// records, which readers find by key; the file keeps its old mapping
// until no read is under way in it (the writer's business). When the
// mirror stops writing the file (a write error, a restart, Close),
// Unfile copies every value back first.
//
// An item inFile also keeps where its key was in the file at its last
// read (the file's answer, see ValueFile.AppendValue: its record's
// offset / 8), so that the next read goes to the record without the
// file's hash and probe. The item's 48 bytes are full, and the state needs 2 bits: the
// two share the state word, the place in its upper 30 bits (0: unknown),
// so that a reader stores it with one compare-and-swap, which fails when
// the state moved meanwhile. A new item of the key takes the place of
// the one it replaces (keepAt), which it keeps on the heap until it goes
// inFile; retire drops it. It is a hint: the file checks it at every use
// (a growth moves every key), and a wrong one costs the lookup it would
// have spared.
const (
	onHeap uint32 = iota
	inFile
	retired

	stateBits = 2
	stateMask = 1<<stateBits - 1
)

// ValueFile is where the view reads the values it keeps out of the heap:
// the shared view file, as its writer maps it (localview.Writer). Its
// methods are safe for concurrent use with each other and with the
// file's writer.
type ValueFile interface {
	// RLock keeps the file's current mapping until RUnlock, for WarmAt
	// and AppendValue; a goroutine does not RLock twice.
	RLock()
	RUnlock()
	// WarmAt loads what AppendValue will for each key whose place (its
	// answer, or 0) is in ats, every key's first load before any second,
	// so that the misses of all the keys overlap (GetMany).
	WarmAt(ats []uint32)
	// AppendValue appends to dst the value of (topic, key) when the file
	// holds the version stamped st, and reports whether it did and where
	// the key is (0 when it did not): at, its answer for the key before
	// (or 0), spares the lookup when the key is still there.
	AppendValue(dst []byte, topic, key string, st record.Stamp, at uint32) ([]byte, uint32, bool)
}

// keyBody is s's own bytes as an item's body: key | tag | value made as
// one string, or the key alone (a tombstone, a placeholder, a probe).
func keyBody(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func (it *viewItem) loadBody() unsafe.Pointer { return atomic.LoadPointer(&it.body) }

func (it *viewItem) key() string { return unsafe.String((*byte)(it.loadBody()), int(it.klen)) }

func (it *viewItem) tag() string {
	if it.tlen == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(it.loadBody(), it.klen)), int(it.tlen))
}

// inFile reports whether the item's value is in the file.
func (it *viewItem) inFile() bool { return atomic.LoadUint32(&it.state)&stateMask == inFile }

// at is where the file had the item's key at its last read (0: unknown).
func (it *viewItem) at() uint32 { return atomic.LoadUint32(&it.state) >> stateBits }

// keepAt gives it, a new item of the key of old (which it replaces or
// updates in place; no reader has it yet), old's place in the file: the
// file rewrites a key's record in place while the new value fits, and
// the place rides along in the state word's upper bits, on the heap,
// until the item goes inFile. The caller holds the write lock.
func (it *viewItem) keepAt(old *viewItem) {
	atomic.StoreUint32(&it.state, atomic.LoadUint32(&it.state)&stateMask|old.at()<<stateBits)
}

// remember keeps at, the file's answer to a read of the item made while
// its state word was s, for the next read: when it fits, and the word is
// still s (inFile, the place it had).
func (it *viewItem) remember(s, at uint32) {
	if s&stateMask == inFile && at != s>>stateBits && at < 1<<(32-stateBits) {
		atomic.CompareAndSwapUint32(&it.state, s, inFile|at<<stateBits)
	}
}

// heapBodyNow is the item's body when its value is on the heap (true):
// the state, the body, the state again, so that a reader without the
// view's lock (a frozen clone) does not take the key | tag body of an
// item FileWritten moves into the file meanwhile (it stores the state
// first, then the body).
func (it *viewItem) heapBodyNow() (unsafe.Pointer, bool) {
	if it.inFile() {
		return nil, false
	}
	b := it.loadBody()
	return b, !it.inFile()
}

// sharedFile is the view's file (View.file) as readers without the
// view's lock (frozen clones) find it: set before an item goes inFile in
// it, cleared once every item is back on the heap, each time a new
// pointer, so that a reader that took it before it found an item inFile
// and then failed to read the item there knows whether the view changed
// files meanwhile (missing).
type sharedFile struct{ p atomic.Pointer[ValueFile] }

// read is the file a reader without the view's lock reads an item's
// value from: the view's file as loaded before the item's state (the token),
// which missing checks the reader's failure against.
func (s *sharedFile) read() (ValueFile, *ValueFile) {
	p := s.p.Load()
	if p == nil {
		return nil, nil
	}
	return *p, p
}

// missing is, for a reader without the view's lock whose read of it from
// the file of token (sharedFile.read, loaded before the item's state)
// failed, whether to read again: yes when the item left the file, or
// when the view changed files meanwhile (an Unfile, then a load into a
// new file, which may take a retired item again: the reader may have
// looked in the new file before the item's record was written there).
// An item still in the same file whose record does not hold it is a bug
// (nothing rewrites a record before its item has its value back), and a
// wrong value would be worse than the crash.
func (it *viewItem) missing(src *sharedFile, token *ValueFile, topic string) {
	if it.inFile() && src.p.Load() == token {
		panic("view: a value the shared view file should hold is not there: " + topic + " " + it.key())
	}
}

// setFile makes f the view's file (nil: none). The caller holds the
// write lock.
func (v *View) setFile(f ValueFile) {
	v.file = f
	if f == nil {
		v.shared.p.Store(nil)
	} else {
		v.shared.p.Store(&f)
	}
}

// heapValue is the value of a body holding key | tag | value, without a
// copy (nil when empty): the bytes were a []byte before they became the
// body, and nothing writes them again.
func (it *viewItem) heapValue(body unsafe.Pointer) []byte {
	if it.vlen == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(body, int(it.klen)+int(it.tlen))), it.vlen)
}

// valueIn is the item's value: shared with its body when on the heap, a
// copy read from src's file (the file its topic's values are in)
// otherwise.
func (it *viewItem) valueIn(src *sharedFile, topic string) []byte {
	body, v := it.read(nil, src, topic)
	if body != nil {
		return it.heapValue(body)
	}
	if len(v) == 0 {
		return nil
	}
	return v
}

// read is, for a reader without the view's lock, the item's body when
// its value is on the heap, or else dst with the value appended, read
// from src's file (again when it failed there: missing).
func (it *viewItem) read(dst []byte, src *sharedFile, topic string) (body unsafe.Pointer, v []byte) {
	for {
		f, token := src.read()
		if b, ok := it.heapBodyNow(); ok {
			return b, nil
		}
		if v, ok := it.fileValue(dst, f, topic, false); ok {
			return nil, v
		}
		it.missing(src, token, topic)
	}
}

// valueOf is valueIn for a caller holding the view's lock, which reads
// from f (the view's file), whose RLock it holds as well (held) or not.
// A value in the file is read into buf from its start (grown when short:
// nil makes one of the value's size); it returns buf, grown, as well.
func (it *viewItem) valueOf(buf []byte, f ValueFile, topic string, held bool) (value, grown []byte) {
	for {
		if b, ok := it.heapBodyNow(); ok {
			return it.heapValue(b), buf
		}
		if v, ok := it.fileValue(buf[:0], f, topic, held); ok {
			if len(v) == 0 {
				return nil, v
			}
			return v[:len(v):len(v)], v
		}
		it.missingHeld(topic)
	}
}

// appendValue appends the item's value to dst.
func (it *viewItem) appendValue(dst []byte, src *sharedFile, topic string) []byte {
	body, v := it.read(dst, src, topic)
	if body != nil {
		return append(dst, it.heapValue(body)...)
	}
	return v
}

// appendHeld appends the value of it, in f, to dst, for a caller that
// holds the view's read lock (it stays inFile) and f's RLock.
func (it *viewItem) appendHeld(dst []byte, f ValueFile, topic string) []byte {
	v, ok := it.fileValue(dst, f, topic, true)
	if !ok {
		it.missingHeld(topic)
	}
	return v
}

// missingHeld is missing for a reader that holds the view's lock: the
// item cannot leave the file under it, nor the view change files.
func (it *viewItem) missingHeld(topic string) {
	if it.inFile() {
		panic("view: a value the shared view file should hold is not there: " + topic + " " + it.key())
	}
}

// fileValue appends the value of it, inFile when last looked at, from f
// (whose RLock the caller holds when held), where the item's last read
// found its key first (remember): false when the record no longer holds
// it, which a frozen clone may find (the key rewritten since: the item
// is on the heap again, the copy came first), and the caller checks the
// item (missing, missingHeld).
func (it *viewItem) fileValue(dst []byte, f ValueFile, topic string, held bool) ([]byte, bool) {
	if f == nil {
		return dst, false
	}
	if !held {
		f.RLock()
	}
	s := atomic.LoadUint32(&it.state)
	v, at, ok := f.AppendValue(dst, topic, it.key(), it.stamp, s>>stateBits)
	if !held {
		f.RUnlock()
	}
	if ok {
		it.remember(s, at)
		return v, true
	}
	return dst, false
}

// heapBody is a body holding key | tag | value for the item: its own
// when on the heap, else a new one with the value read from src's file.
func (it *viewItem) heapBody(src *sharedFile, topic string) unsafe.Pointer {
	// key | tag: the same in either body.
	n := int(it.klen) + int(it.tlen)
	b := make([]byte, n, n+int(it.vlen))
	copy(b, unsafe.String((*byte)(it.loadBody()), n))
	body, v := it.read(b, src, topic)
	if body != nil {
		return body
	}
	return unsafe.Pointer(unsafe.SliceData(v)) // a key is never empty
}

// retire makes it, which stops being its key's entry alone (the caller
// replaces it, or gives its key a timeline), never inFile again, with
// its value copied back to the heap first when it is in the file: a
// frozen clone or a timeline may read it after the file's record is
// rewritten. The caller holds the write lock.
func (v *View) retire(topic string, it *viewItem) {
	switch atomic.LoadUint32(&it.state) & stateMask {
	case inFile:
		// The body first, then the state: a reader that sees the state
		// finds the value in the body.
		atomic.StorePointer(&it.body, it.heapBody(&v.shared, topic))
		atomic.StoreUint32(&it.state, retired)
	case onHeap:
		atomic.StoreUint32(&it.state, retired)
	}
}

// FileWritten tells the view that the changes cs (as its follower got
// them) are in f now, the file whose values it may read from then on:
// the items they came from keep their values there instead of the heap
// when nothing else may hold them (see inFile). The caller is the
// follower's end (Store.FollowView), which runs under the write lock.
func (v *View) FileWritten(f ValueFile, cs []Change) { v.fileChanges(f, cs, false) }

// FileLoaded is FileWritten for changes of FollowFrom's iteration (the
// view as it stood when the follower began: a restart's snapshot and
// replay), which the follower wrote into f; it takes the write lock. An
// item of theirs is marked only while it is its key's entry alone, as it
// was told (not rewritten since).
func (v *View) FileLoaded(f ValueFile, cs []Change) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fileChanges(f, cs, true)
}

// fileChanges is FileWritten (loaded false) and FileLoaded. An item goes
// inFile when it is an ordinary write's value (an expiry allowed, no
// other flag) of a topic without counters, not in a
// timeline, and still holds the body its change carried (an update in
// place gives it another): install's items are their keys' entries
// alone until install retires them; a loaded item must be its key's
// entry now, and may have been retired by an Unfile (a mirror starting
// over). A frozen clone may hold the item: it reads the state before
// and after the body (heapBodyNow) and finds the file through
// View.shared.
func (v *View) fileChanges(f ValueFile, cs []Change, loaded bool) {
	if v.file != f {
		v.unfileLocked()
		v.setFile(f)
	}
	for i := range cs {
		it := cs[i].item
		if it == nil || it.flags&^itemWide != 0 || it.timed || it.vlen == 0 {
			continue
		}
		if st := atomic.LoadUint32(&it.state) & stateMask; st != onHeap && !(loaded && st == retired) ||
			unsafe.SliceData(cs[i].Value) != unsafe.SliceData(it.heapValue(it.body)) {
			continue
		}
		if tv := v.topics[cs[i].Topic]; tv == nil || tv.counts != nil || loaded && tv.byKey.get(cs[i].Key) != it {
			continue
		}
		n := int(it.klen) + int(it.tlen)
		kt := make([]byte, n)
		copy(kt, unsafe.String((*byte)(it.body), n))
		// The state first, then the body: a reader without the lock that
		// took the whole body finds the state moved (heapBodyNow), and
		// the value is in the file already.
		atomic.StoreUint32(&it.state, inFile|it.at()<<stateBits)
		atomic.StorePointer(&it.body, unsafe.Pointer(unsafe.SliceData(kt)))
	}
}

// FileWrittenLater is FileWritten for a caller that does not hold the
// lock (the mirror, after it wrote changes it had queued).
func (v *View) FileWrittenLater(f ValueFile, cs []Change) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.FileWritten(f, cs)
}

// ValuesInFile is how many of the view's entries keep their value in the
// file only.
func (v *View) ValuesInFile() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for _, tv := range v.topics {
		tv.order.Ascend(func(it *viewItem) bool {
			if it.inFile() {
				n++
			}
			return true
		})
	}
	return n
}

// Unfile copies every value the view keeps in its file back to the heap
// and forgets the file: the mirror calls it before it stops writing the
// file (a write error, Close). The heap grows by the values.
func (v *View) Unfile() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.unfileLocked()
}

// unfileLocked is Unfile under the write lock. Every item inFile is its
// key's entry, in the B-tree.
func (v *View) unfileLocked() {
	if v.file == nil {
		return
	}
	for _, tv := range v.topics {
		tv.order.Ascend(func(it *viewItem) bool {
			if it.inFile() {
				v.retire(tv.name, it)
			}
			return true
		})
	}
	v.setFile(nil)
}
