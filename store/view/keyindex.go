package view

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

// keyIndex is a topic's point-get index, key -> entry (topicView.byKey),
// in 10.6 to 17 bytes a key (12.5 at 1M keys) where a
// map[string]*viewItem took about 56 (issue 34): the key is the
// entry's own (viewItem.key), so a slot is
// the entry's pointer and a one-byte tag of the key's hash, 9 bytes.
//
// It is extendible hashing over small open-addressing tables (linear
// probing, at most 7/8 full): the top bits of a key's hash pick its
// table in a directory, the low 32 bits (scaled to the table's size,
// which need not be a power of two) its first slot, 8 more bits its tag
// (an empty slot's tag is 0), so that a probe reads a key only where
// the tag matches. The price against a map: a lookup's cache misses are
// the slot, the entry, then the key, one after the other (a map's slot
// holds the key's string header and reaches key and entry at once);
// BENCHMARKS.md (issue 34) has what that costs a Get. A table doubles
// up to keyTableMax slots, then splits in two by one more bit of the
// hash, so that a growth rehashes at most keyTableMax*7/8 keys (the
// write lock is held for that; a map the size of the view, doubled at
// once, would hold it for all of them). The split makes two tables
// sized for their keys at 70% full (keySplitFill), which double to
// keyTableMax once before they split again: 1.1 to 1.8 slots a key
// where tables of keyTableMax after the split took up to 2.3, for one
// more rehash of each key per doubling of the index (BENCHMARKS.md: no
// cost measured on a load or a Get). A delete shifts the following
// slots back (no deleted marks to sweep).
//
// The zero keyIndex is empty and ready to use. Readers may call get and
// all at the same time; set, delete and grown need the caller alone (the
// view's read and write lock).
type keyIndex struct {
	dir   []*keyTable // by the top depth bits of the hash
	depth uint8
	n     int
}

// keyTable is one table of a keyIndex: it holds the keys whose hash's
// top depth bits are its own (it is in 1<<(index depth - depth)
// consecutive places of the directory).
type keyTable struct {
	depth uint8
	n     int
	tags  []uint8 // 0: an empty slot
	items []*viewItem
}

// keyTableMin and keyTableMax bound a table's slots.
const (
	keyTableMin = 8
	keyTableMax = 1024
)

// keySplitFill is how full the two tables a split makes are: 70%,
// where two tables of keyTableMax slots would be 44% full (and were, at
// 1M keys: 19 bytes a key, 12.5 now).
var keySplitFill = struct{ num, den int }{7, 10}

// keySeed seeds the hash of every keyIndex of the process.
var keySeed = maphash.MakeSeed()

func keyHash(k string) uint64 { return maphash.String(keySeed, k) }

// keyTag is the tag of hash h: bits 32-39, 1 in place of 0.
func keyTag(h uint64) uint8 {
	if t := uint8(h >> 32); t != 0 {
		return t
	}
	return 1
}

func newKeyTable(depth uint8, slots int) *keyTable {
	return &keyTable{depth: depth, tags: make([]uint8, slots), items: make([]*viewItem, slots)}
}

// newKeyIndex is an empty index with room for hint keys before it grows.
func newKeyIndex(hint int) keyIndex {
	slots := max(keyTableMin, 1<<bits.Len(uint(hint*8/7)))
	if slots <= keyTableMax {
		return keyIndex{dir: []*keyTable{newKeyTable(0, slots)}}
	}
	depth := uint8(bits.Len(uint((slots - 1) / keyTableMax)))
	x := keyIndex{dir: make([]*keyTable, 1<<depth), depth: depth}
	for i := range x.dir {
		x.dir[i] = newKeyTable(depth, keyTableMax)
	}
	return x
}

// table is the table of hash h.
func (x *keyIndex) table(h uint64) *keyTable {
	return x.dir[h>>(64-x.depth)] // a shift by 64 is 0: one table
}

// home is the first slot of hash h: its low 32 bits scaled to the
// table's slots (a table's size need not be a power of two).
func (t *keyTable) home(h uint64) int {
	return int(uint64(uint32(h)) * uint64(len(t.tags)) >> 32)
}

// next is the slot after i, the first after the last.
func (t *keyTable) next(i int) int {
	if i++; i == len(t.tags) {
		return 0
	}
	return i
}

// find is the slot of k (true) or the empty slot that ends its probe.
func (t *keyTable) find(h uint64, k string) (int, bool) {
	tag := keyTag(h)
	for i := t.home(h); ; i = t.next(i) {
		switch t.tags[i] {
		case 0:
			return i, false
		case tag:
			if t.items[i].key() == k {
				return i, true
			}
		}
	}
}

// len is the number of keys.
func (x *keyIndex) len() int { return x.n }

// get is the entry of k, nil if none.
func (x *keyIndex) get(k string) *viewItem {
	if x.n == 0 {
		return nil
	}
	return x.getHashed(k, keyHash(k))
}

// getHashed is get for a caller that has k's hash h already.
func (x *keyIndex) getHashed(k string, h uint64) *viewItem {
	if x.n == 0 {
		return nil
	}
	t := x.table(h)
	if i, ok := t.find(h, k); ok {
		return t.items[i]
	}
	return nil
}

// set makes it the entry of its key.
func (x *keyIndex) set(it *viewItem) {
	if x.dir == nil {
		x.dir = []*keyTable{newKeyTable(0, keyTableMin)}
	}
	k := it.key()
	h := keyHash(k)
	for {
		t := x.table(h)
		i, ok := t.find(h, k)
		if ok {
			t.items[i] = it
			return
		}
		if (t.n+1)*8 <= len(t.tags)*7 {
			t.tags[i], t.items[i] = keyTag(h), it
			t.n++
			x.n++
			return
		}
		x.grow(t, h)
	}
}

// grow makes room in t, the table of hash h: it doubles t (up to
// keyTableMax slots), or splits it once it has keyTableMax slots, into
// two tables sized for their keys at keySplitFill.
func (x *keyIndex) grow(t *keyTable, h uint64) {
	var hashes [keyTableMax]uint64
	hs := t.hashes(hashes[:0])
	if len(t.tags) < keyTableMax {
		n := newKeyTable(t.depth, min(2*len(t.tags), keyTableMax))
		t.moveTo(hs, func(uint64) *keyTable { return n })
		t.tags, t.items, t.n = n.tags, n.items, n.n
		return
	}
	if t.depth == x.depth {
		dir := make([]*keyTable, 2*len(x.dir))
		for i := range dir {
			dir[i] = x.dir[i/2]
		}
		x.dir, x.depth = dir, x.depth+1
	}
	span := 1 << (x.depth - t.depth)
	lo := int(h>>(64-x.depth)) &^ (span - 1)
	bit := 63 - t.depth
	ones := 0
	for _, h := range hs {
		ones += int(h >> bit & 1)
	}
	a := newKeyTable(t.depth+1, splitSlots(len(hs)-ones))
	b := newKeyTable(t.depth+1, splitSlots(ones))
	t.moveTo(hs, func(h uint64) *keyTable {
		if h>>bit&1 == 0 {
			return a
		}
		return b
	})
	for i := range span {
		x.dir[lo+i] = a
		if i >= span/2 {
			x.dir[lo+i] = b
		}
	}
}

// splitSlots is the size of a table split off with n keys: n at
// keySplitFill, a multiple of 8 slots, at least keyTableMin.
func splitSlots(n int) int {
	return max(keyTableMin, (n*keySplitFill.den/keySplitFill.num+7)&^7)
}

// hashes appends the hash of each of t's keys, in slot order, to dst.
func (t *keyTable) hashes(dst []uint64) []uint64 {
	for i, it := range t.items {
		if t.tags[i] != 0 {
			dst = append(dst, keyHash(it.key()))
		}
	}
	return dst
}

// moveTo puts each key of t, whose hashes are hs (hashes), into the
// table to picks for its hash, which holds none of them and has room.
func (t *keyTable) moveTo(hs []uint64, to func(h uint64) *keyTable) {
	k := 0
	for i, it := range t.items {
		if t.tags[i] == 0 {
			continue
		}
		h := hs[k]
		k++
		n := to(h)
		j, _ := n.find(h, it.key())
		n.tags[j], n.items[j] = t.tags[i], it
		n.n++
	}
}

// delete removes k's entry, if any.
func (x *keyIndex) delete(k string) {
	if x.n == 0 {
		return
	}
	h := keyHash(k)
	t := x.table(h)
	i, ok := t.find(h, k)
	if !ok {
		return
	}
	// Each following key of the probe moves back into the hole when the
	// hole is between its first slot and its place.
	for j := t.next(i); t.tags[j] != 0; j = t.next(j) {
		if t.dist(t.home(keyHash(t.items[j].key())), j) >= t.dist(i, j) {
			t.tags[i], t.items[i] = t.tags[j], t.items[j]
			i = j
		}
	}
	t.tags[i], t.items[i] = 0, nil
	t.n--
	x.n--
}

// dist is how many slots a probe from slot i takes to reach slot j.
func (t *keyTable) dist(i, j int) int {
	if j < i {
		return j + len(t.tags) - i
	}
	return j - i
}

// all yields every entry, in no order.
func (x *keyIndex) all() iter.Seq[*viewItem] {
	return func(yield func(*viewItem) bool) {
		for i := 0; i < len(x.dir); i += 1 << (x.depth - x.dir[i].depth) {
			t := x.dir[i]
			for j, it := range t.items {
				if t.tags[j] != 0 && !yield(it) {
					return
				}
			}
		}
	}
}

// grown is x with room for n keys, or x itself when it has as many
// slots already: the snapshot reader sizes a fresh topic's index to the
// entries it announces, growing once where the index would split its
// tables again and again.
func (x *keyIndex) grown(n int) keyIndex {
	slots := 0
	for i := 0; i < len(x.dir); i += 1 << (x.depth - x.dir[i].depth) {
		slots += len(x.dir[i].tags)
	}
	if n*8 <= slots*7 {
		return *x
	}
	m := newKeyIndex(n)
	for it := range x.all() {
		m.set(it)
	}
	return m
}
