// Package view is a node's key -> latest value view: every keyed record of
// the log applied by the (HLC, origin) rule, with its digest and its
// snapshot file (snapshot.go), which a restart loads before it replays the
// log from the position the snapshot covers.
package view

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"iter"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/google/btree"

	"github.com/cachecast/cachecast/store/record"
)

// The view is the store's answer to "what is the latest value of (topic,
// key)": every keyed record of the log applied by the (HLC, origin) rule.
//
// The rule: a record replaces what the view holds for its (topic, key) when
// its (HLC, origin) pair is greater, comparing HLC first and the origin ID
// second. An equal pair is the same message arriving again and changes
// nothing. Because the rule depends only on the records, never on their
// arrival order, two nodes that applied the same set of records hold the same
// view; Digest lets them check it.
//
// A delete is a tombstone record. The view keeps tombstones as entries, so
// an older put that arrives after the delete loses to it and cannot bring the
// key back; Get, Keys, Len and Topics do not see them. Tombstones are not
// collected yet: a deleted key costs its key bytes and one entry for good.
//
// Layout, chosen for memory (10 million keys is the design point): per topic
// a map for point gets and a B-tree (github.com/google/btree) for ordered
// listing, both pointing at the same immutable item. An item is 48 bytes plus
// one allocation holding key, tag and value back to back; the map's key
// string and the B-tree's ordering both use the key inside that allocation,
// so a key is stored once. Measured with 10 million 14-byte keys and 16-byte
// values (BenchmarkViewGet): about 144 heap bytes per key (item 48, key and
// value 32, map about 50, B-tree about 14) and about 0.5 us per Get, 0
// allocations. Without the map it would be about 95 bytes per key but about
// 4.5 us and one allocation per Get (a B-tree descent is ~25 key compares,
// each a cache miss at this size), hence the map.
//
// Items are never modified once in the view: an update makes a new item
// and swaps the pointers, which is what lets Digest and the snapshot writer
// work on a lazy copy-on-write clone of the B-trees (btree.Clone) without
// holding the lock while they read.

// Entry is the view's value for one (topic, key).
type Entry struct {
	// Value is shared with the view and with every other reader: callers
	// must not modify it. It is nil for an empty value.
	Value []byte
	// Tag is the message's tag; often empty.
	Tag string
	// Stamp is the identity of the message that set the value.
	Stamp record.Stamp
}

// TopicInfo describes one topic of the view.
type TopicInfo struct {
	// Name is the topic.
	Name string
	// Keys is the number of live (not deleted) keys.
	Keys int
	// Messages is the number of messages the log holds for the topic. The
	// view does not know it and leaves it zero; the store fills it in.
	Messages uint64
}

// View maps (topic, key) to the latest value. One goroutine applies records
// (Apply is not meant to be called concurrently with itself, though it is
// safe); any number read at the same time. A writer holds the lock for one
// map and one B-tree update, so readers never wait long.
type View struct {
	mu     sync.RWMutex
	topics map[string]*topicView
	live   int // live keys over all topics
	// follow, when set, sees every change put makes, under the write lock.
	follow func(Change)
}

// Change is one change of the view, as a follower (Store.FollowView)
// sees it: the entry (topic, key) holds from now on, or its tombstone.
type Change struct {
	Topic string
	Key   string
	// Entry is what the key holds now; Value is shared with the view
	// (callers must not modify it). For a tombstone only Stamp is set.
	Entry
	// Deleted is true for a tombstone.
	Deleted bool
}

func (it *viewItem) change(topic string) Change {
	c := Change{Topic: topic, Key: it.key(), Deleted: it.tomb}
	c.Stamp = it.stamp
	if !it.tomb {
		c.Value, c.Tag = it.value(), it.tag()
	}
	return c
}

// topicView holds one topic's items.
type topicView struct {
	name  string
	byKey map[string]*viewItem     // point gets
	order *btree.BTreeG[*viewItem] // ordered listing, Digest, snapshots
	live  int                      // items that are not tombstones
}

// viewItem is one (topic, key) entry. It is immutable once in the view.
type viewItem struct {
	// data is key | tag | value in one allocation, made from a []byte the
	// view owns and never writes again, so that the key and tag can be
	// handed out as strings and the value as a []byte without a copy.
	data  string
	stamp record.Stamp
	klen  uint16
	tlen  uint16
	tomb  bool
}

func (it *viewItem) key() string { return it.data[:it.klen] }
func (it *viewItem) tag() string { return it.data[it.klen : int(it.klen)+int(it.tlen)] }

// value returns the value bytes without a copy (nil when empty). The bytes
// were a []byte before they became it.data, and nothing writes them again.
func (it *viewItem) value() []byte {
	v := it.data[int(it.klen)+int(it.tlen):]
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(v), len(v))
}

// newViewItem copies key, tag and value into one new allocation. A
// tombstone keeps only its key: nothing reads its tag or value.
func newViewItem(key, tag, value []byte, st record.Stamp, tomb bool) *viewItem {
	if tomb {
		tag, value = nil, nil
	}
	buf := make([]byte, len(key)+len(tag)+len(value))
	n := copy(buf, key)
	n += copy(buf[n:], tag)
	copy(buf[n:], value)
	return &viewItem{
		data:  unsafe.String(unsafe.SliceData(buf), len(buf)),
		stamp: st,
		klen:  uint16(len(key)),
		tlen:  uint16(len(tag)),
		tomb:  tomb,
	}
}

// beats reports whether a message stamped (hlc, origin) wins over the one
// that set st: the greater HLC wins, then the greater origin. Equal means
// the same message.
func beats(hlc, origin uint64, st record.Stamp) bool {
	if hlc != st.HLC {
		return hlc > st.HLC
	}
	return origin > st.Origin
}

// btreeDegree trades node size against depth. 32 (up to 63 items, a 504
// byte array of pointers per node) keeps 10 million keys five levels deep.
const btreeDegree = 32

func itemLess(a, b *viewItem) bool { return a.key() < b.key() }

func New() *View {
	return &View{topics: make(map[string]*topicView)}
}

func newTopicView(name string, sizeHint int) *topicView {
	return &topicView{
		name:  name,
		byKey: make(map[string]*viewItem, sizeHint),
		order: btree.NewG(btreeDegree, itemLess),
	}
}

// Apply applies a record to the view and reports whether the view changed.
// A record without a key (a plain stream message) is ignored. The view
// copies what it keeps, so r may be a slice of a mapped file.
func (v *View) Apply(r record.Record) bool {
	key := r.Key()
	if len(key) == 0 {
		return false
	}
	topic, st := r.Topic(), r.Stamp()

	// A cheap check under the read lock keeps a replayed or superseded
	// record from allocating and from taking the write lock.
	v.mu.RLock()
	if tv := v.topics[string(topic)]; tv != nil {
		if old := tv.byKey[string(key)]; old != nil && !beats(st.HLC, st.Origin, old.stamp) {
			v.mu.RUnlock()
			return false
		}
	}
	v.mu.RUnlock()

	// Allocate outside the lock: readers wait only for the swap.
	it := newViewItem(key, r.Tag(), r.Value(), st, r.Kind() == record.KindTombstone)

	v.mu.Lock()
	defer v.mu.Unlock()
	tv := v.topics[string(topic)]
	if tv == nil {
		tv = newTopicView(string(topic), 0)
		v.topics[tv.name] = tv
	}
	return v.put(tv, it)
}

// put stores it in tv if it beats what tv holds for its key. The caller
// holds the write lock.
func (v *View) put(tv *topicView, it *viewItem) bool {
	k := it.key()
	old := tv.byKey[k]
	if old != nil {
		if !beats(it.stamp.HLC, it.stamp.Origin, old.stamp) {
			return false
		}
		if !old.tomb {
			tv.live--
			v.live--
		}
	}
	// Assigning to an existing string key also stores the new key string
	// (the runtime updates string keys on overwrite), so the map does not
	// keep the old item's data alive.
	tv.byKey[k] = it
	tv.order.ReplaceOrInsert(it)
	if !it.tomb {
		tv.live++
		v.live++
	}
	if v.follow != nil {
		v.follow(it.change(tv.name))
	}
	return true
}

// insertNew stores it in tv, which holds nothing for its key yet (the
// snapshot reader's entries are sorted and distinct). The caller holds the
// write lock or owns v alone.
func (v *View) insertNew(tv *topicView, it *viewItem) {
	tv.byKey[it.key()] = it
	tv.order.ReplaceOrInsert(it)
	if !it.tomb {
		tv.live++
		v.live++
	}
}

// Get returns the live value of (topic, key). A deleted or unknown key
// reports false. Entry.Value is shared: do not modify it.
func (v *View) Get(topic, key string) (Entry, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	tv := v.topics[topic]
	if tv == nil {
		return Entry{}, false
	}
	it := tv.byKey[key]
	if it == nil || it.tomb {
		return Entry{}, false
	}
	return Entry{Value: it.value(), Tag: it.tag(), Stamp: it.stamp}, true
}

// Keys lists the live keys of topic that start with prefix and sort after
// after, in ascending byte order, at most limit of them (limit <= 0: no
// limit). To page through a topic, pass the last key of a page as after.
func (v *View) Keys(topic, prefix, after string, limit int) []string {
	start := prefix
	if after > start {
		start = after
	}
	if len(prefix) > record.MaxKeyBytes {
		return nil
	}
	// No key is longer than MaxKeyBytes; starting from a longer after's first
	// MaxKeyBytes bytes only visits a few keys more, which the loop skips.
	probe := &viewItem{data: start, klen: uint16(min(len(start), record.MaxKeyBytes))}
	var keys []string
	v.mu.RLock()
	defer v.mu.RUnlock()
	tv := v.topics[topic]
	if tv == nil {
		return nil
	}
	tv.order.AscendGreaterOrEqual(probe, func(it *viewItem) bool {
		k := it.key()
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		if it.tomb || k <= after {
			return true
		}
		// A copy: the caller may keep the keys longer than the item.
		keys = append(keys, strings.Clone(k))
		return limit <= 0 || len(keys) < limit
	})
	return keys
}

// Topics lists the topics the view holds, sorted by name, with their live
// key counts. A topic whose keys were all deleted is listed with zero keys.
// Messages is left zero.
func (v *View) Topics() []TopicInfo {
	v.mu.RLock()
	out := make([]TopicInfo, 0, len(v.topics))
	for _, tv := range v.topics {
		out = append(out, TopicInfo{Name: tv.name, Keys: tv.live})
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Len is the number of live keys over all topics.
func (v *View) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.live
}

// frozenTopic is a read-only copy-on-write clone of one topic's B-tree.
type frozenTopic struct {
	name  string
	items *btree.BTreeG[*viewItem]
}

// freeze clones every topic's B-tree (lazily: O(1) per topic) under the
// write lock and returns the clones sorted by topic name. The clones can be
// read without any lock while Apply goes on with the originals: the trees
// copy a shared node before changing it, and items are never modified.
func (v *View) freeze() (topics []frozenTopic, entries int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.freezeLocked()
}

// freezeLocked is freeze for a caller holding the write lock.
func (v *View) freezeLocked() (topics []frozenTopic, entries int) {
	topics = make([]frozenTopic, 0, len(v.topics))
	for _, tv := range v.topics {
		c := tv.order.Clone()
		topics = append(topics, frozenTopic{name: tv.name, items: c})
		entries += c.Len()
	}
	sort.Slice(topics, func(i, j int) bool { return topics[i].name < topics[j].name })
	return topics, entries
}

// FollowFrom makes fn see every later change (nil stops it) and returns
// the view as it is at that moment, with nothing in between.
func (v *View) FollowFrom(fn func(Change)) iter.Seq[Change] {
	v.mu.Lock()
	v.follow = fn
	topics, _ := v.freezeLocked()
	v.mu.Unlock()
	return func(yield func(Change) bool) {
		for _, ft := range topics {
			ok := true
			ft.items.Ascend(func(it *viewItem) bool {
				ok = yield(it.change(ft.name))
				return ok
			})
			if !ok {
				return
			}
		}
	}
}

// Digest is a SHA-256 over every entry of the view, tombstones included, in
// (topic, key) order. Two views that hold the same entries have the same
// digest, whatever order their records arrived in. Each entry is hashed as
//
//	topic len u16 | topic | key len u16 | key | tag len u16 | tag |
//	value len u32 | value | origin u64 | seq u64 | hlc u64 | tombstone u8
//
// (little endian), so no two different views hash the same bytes. Digest
// works on a clone of the view and does not block Apply while it hashes.
func (v *View) Digest() [32]byte {
	topics, _ := v.freeze()
	h := sha256.New()
	var buf []byte
	for _, ft := range topics {
		buf = ft.hash(h, buf)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// Frozen is a read-only, copy-on-write clone of the view (Freeze), to
// be hashed without holding the view's lock.
type Frozen struct{ topics []frozenTopic }

// Freeze clones the view (lazily: O(1) per topic) so that a caller can
// take the clone together with other state under its own lock and hash it
// afterwards (Frozen.Digests).
func (v *View) Freeze() Frozen {
	topics, _ := v.freeze()
	return Frozen{topics: topics}
}

// Digests is Digest for each topic of the frozen view alone.
func (f Frozen) Digests() map[string][32]byte { return digestTopics(f.topics) }

// digestTopics is Digest for each topic alone: the same bytes hashed,
// topic by topic.
func digestTopics(topics []frozenTopic) map[string][32]byte {
	out := make(map[string][32]byte, len(topics))
	h := sha256.New()
	var buf []byte
	for _, ft := range topics {
		h.Reset()
		buf = ft.hash(h, buf)
		var sum [32]byte
		h.Sum(sum[:0])
		out[ft.name] = sum
	}
	return out
}

// hash writes every entry of the topic into h, as Digest describes; buf
// is scratch space, returned for reuse.
func (ft frozenTopic) hash(h hash.Hash, buf []byte) []byte {
	ft.items.Ascend(func(it *viewItem) bool {
		buf = buf[:0]
		buf = binary.LittleEndian.AppendUint16(buf, uint16(len(ft.name)))
		buf = append(buf, ft.name...)
		buf = binary.LittleEndian.AppendUint16(buf, it.klen)
		buf = append(buf, it.key()...)
		buf = binary.LittleEndian.AppendUint16(buf, it.tlen)
		buf = append(buf, it.tag()...)
		val := it.data[int(it.klen)+int(it.tlen):]
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(val)))
		buf = append(buf, val...)
		buf = binary.LittleEndian.AppendUint64(buf, it.stamp.Origin)
		buf = binary.LittleEndian.AppendUint64(buf, it.stamp.Seq)
		buf = binary.LittleEndian.AppendUint64(buf, it.stamp.HLC)
		var tomb byte
		if it.tomb {
			tomb = 1
		}
		buf = append(buf, tomb)
		h.Write(buf)
		return true
	})
	return buf
}

// Merge puts every entry of other into v by the usual rule (greatest
// (HLC, origin) wins) and returns how many changed v and the greatest HLC
// it saw. Items are immutable, so v and other may share them.
func (v *View) Merge(other *View) (changed int, maxHLC uint64) {
	topics, _ := other.freeze()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ft := range topics {
		tv := v.topics[ft.name]
		if tv == nil {
			tv = newTopicView(ft.name, ft.items.Len())
			v.topics[tv.name] = tv
		}
		ft.items.Ascend(func(it *viewItem) bool {
			maxHLC = max(maxHLC, it.stamp.HLC)
			if v.put(tv, it) {
				changed++
			}
			return true
		})
	}
	return changed, maxHLC
}
