// Package view is a node's key -> latest value view: every keyed record of
// the log applied by the (HLC, origin) rule, with its digest and its
// snapshot file (snapshot.go), which a restart loads before it replays the
// log from the position the snapshot covers.
//
// Tombstones (gc.go): a delete's tombstone is collected once every live
// node holds it and a grace has passed since its stamp. What could bring
// the key back, and why it does not: an older write some live node lacks
// has waited longer than the grace (links deliver in seconds); a node away
// longer than the grace allows starts over from a peer instead of
// offering its old log (the daemon's --tombstone-grace); a snapshot holds
// no collected tombstone, and the digest leaves out the entries that serve
// no value, so that nodes collecting at their own moments still hash
// alike. A partition longer than the grace is not covered (DESIGN.md,
// "Tombstones").
//
// # Why it is this large
//
// About 5,600 lines, each file one concern: the rule, the layout and the
// reads (view.go), time (viewtime.go), counters (counter.go), expiry
// changes (expiry.go), tombstone collection (gc.go), the point-get index
// (keyindex.go), the values kept in the shared view file only (file.go)
// and the snapshot's format, writer and loader (snapshot.go, 1,160
// lines). It stays one package because every one of
// them reads and changes the same unexported items, timelines and
// per-topic indexes under the view's one write lock, and the snapshot
// cuts its entries from the view's own slabs: a package boundary between
// them would export that layout, which the memory figures above depend on
// being free to change. The record format it applies is package
// store/record.
package view

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"iter"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cachecast/cachecast/store/internal/btree"

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
// key back; Get, Keys, Len and Topics do not see them. A tombstone every
// live node holds is collected after a grace period (gc.go).
//
// Time (viewtime.go, and "Time" in DESIGN.md): a record may carry an
// expiry and an effective time; a key's records are then ordered by
// (effective time, HLC, origin), an ordinary write's effective time being
// its stamp's wall time (for ordinary writes that is the rule above). A key
// with a scheduled record or a cancel keeps a timeline beside its entry:
// byKey holds a timedEntry for it (a copy of the entry, flagged timed,
// with the entry itself and the timeline), so that a write or a read
// finds the timeline with the one lookup of the entry and a key's first
// timeline inserts into no second index; the topic lists its timelines
// for the listings and the frozen copies (topicView.tls). A read takes
// the entry while it is known to be in force (see current) and resolves
// the timeline at its own instant otherwise, and RunTimes settles the
// entry at each instant for the followers. An expiry change (EXPIRE,
// PERSIST: expiry.go) gives one version of a key a new expiry and does
// nothing to any other. An expired value becomes a
// tombstone. An item is 48 bytes, 64 with an effective time or an expiry
// of its own (a wideItem); a timeline with two records inline is 56 (a
// 64-byte allocation); a key's first timeline is one allocation with its
// first record (128 bytes), and with its placeholder when nothing is in
// force (176; see firstTimeline), and its timedEntry another (80).
//
// Layout, chosen for memory (10 million keys is the design point): per topic
// a hash index for point gets (keyIndex: 9 bytes a slot, the entry's
// pointer and a tag of the key's hash) and a B-tree (store/internal/btree,
// a fork of github.com/google/btree that splits a node at its end when an
// insert goes past its last item, so that keys arriving in order fill its
// nodes) for ordered listing, both pointing at the same item. An item is 48 bytes (64 with times of its own, see viewItem) plus
// one allocation holding key, tag and value back to back; the index and
// the B-tree's ordering both read the key inside that allocation, so a
// key is stored once. With the shared view file, an item whose value the
// daemon's mirror wrote there keeps key and tag only and reads its value
// from the file (file.go: 96 heap bytes a key fewer at 100-byte values).
// Measured with 10 million 14-byte keys and 16-byte
// values (BenchmarkViewGet): 116 heap bytes per key (132 with every item
// 64 bytes, 160 with a map[string]*viewItem for the index, issue 34), 0
// allocations per Get. Without the index it would be about 95 bytes per
// key but about 4.5 us and one allocation per Get (a B-tree descent is ~25
// key compares, each a cache miss at this size), hence the index. Entries read from a
// snapshot (a restart, a bootstrap) are cut from slabs of 1,024 items (of
// each kind) and 256 KiB of data instead (snapshot.go), so that loading millions of them
// is a few hundred allocations for the garbage collector to mark; a slab
// is freed once every entry cut from it has been written over.
//
// Digest and the snapshot writer work on a lazy copy-on-write clone of the
// B-trees (btree.Clone, by freeze) without holding the lock while they
// read, so an item a clone may hold is never modified: an update makes a
// new item and swaps the pointers in the index and the B-tree (a descent of
// ~20 key compares). An item made since the last freeze is in no clone,
// though: an ordinary update of its key (no timeline) copies the new
// record into it, under the write lock, and leaves the B-tree alone, which
// saves the descent on every write of a key but the first after a freeze.
// The data buffer is never reused (readers hold its value after the lock).

// Entry is the view's value for one (topic, key).
type Entry struct {
	// Value is shared with the view and with every other reader: callers
	// must not modify it. It is nil for an empty value.
	Value []byte
	// Tag is the message's tag; often empty.
	Tag string
	// record.Stamp is the identity of the message that set the value.
	Stamp record.Stamp
	// ExpiresAt is when the value stops being served, in Unix
	// milliseconds (0: never).
	ExpiresAt int64
	// Base is, for a counter (a key INCR and its kin counted on), the
	// value of the version counted on, without the increments: what an
	// expiry change of that version carries. nil for any other key, and
	// from GetMany.
	Base []byte
	// Absence is, for a counter created on a key without a value (its
	// revival, see Absence), the absence its increments count after;
	// from Counting, for a key without a value, what it had last. nil
	// otherwise, and from GetMany.
	Absence *Absence
	// EffectiveAt is when a scheduled message took (or takes) effect, in
	// Unix milliseconds; 0 for an ordinary write.
	EffectiveAt int64
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
// index and one B-tree update, so readers never wait long.
type View struct {
	mu     sync.RWMutex
	topics map[string]*topicView
	live   int // live keys over all topics
	// touched sums what touchLocked loads, so that its loads are kept.
	touched uint64
	// timed counts the items and timelines that use a time field (the
	// snapshot is written in version 1 while there are none).
	timed int
	// follow, when set, sees every change put makes, under the write lock;
	// followEnd, when set, is called once those made under one hold of
	// the lock (or between Hold and Release) are all told. told says some
	// were since; holds counts the Holds not released yet.
	follow    func(Change)
	followEnd func()
	told      bool
	holds     int
	// now is the local wall clock in Unix milliseconds.
	now func() int64
	// times holds the instants at which an entry changes by itself (an
	// expiry, a scheduled record taking effect), timeKeys their keys;
	// guarded by mu.
	times    instants
	timeKeys keyArena
	// topicList is every topic by its index (topicView.index): a view
	// never drops a topic.
	topicList []*topicView
	// wake tells RunTimes that an instant before timerAt was added;
	// timerAt is the instant RunTimes' timer is set for (0: none), guarded
	// by mu.
	wake    chan struct{}
	timerAt int64
	// events keeps the last changes no record brought (Cause set), for
	// TimeEvents.
	events timeEvents
	// dropped counts the values dropped at their expiry: a snapshot
	// written before holds them, so the store writes a new one.
	dropped atomic.Uint64
	// collected counts the tombstones CollectTombstones dropped (gc.go).
	collected atomic.Uint64
	// horizon is the latest cutoff CollectTombstones collected below
	// (Unix ms): a counter created here on a key without a version
	// names it (see Absence).
	horizon atomic.Int64
	// epoch counts the freezes (from 1, wrapping; see freezeLocked): an
	// item whose epoch is the view's is in no frozen clone, and may be
	// updated in place.
	epoch uint16
	// settledAt is the latest instant a writer read the clock at (clock):
	// every entry was settled at or before it. Guarded by mu.
	settledAt int64
	// batchNow is the instant of the ApplyBatch under way (inBatch), once
	// read. Guarded by mu.
	batchNow int64
	inBatch  bool
	// file is where the values of the items inFile are (file.go), nil
	// while there are none. Guarded by mu; shared is the same for
	// readers without the lock (frozen clones).
	file   ValueFile
	shared sharedFile
	// gen counts the holds of the write lock that may have changed what
	// Digest hashes (unlock moves it): a digest holds while gen has not
	// moved and no instant has come (Moment).
	gen atomic.Uint64
}

// Dropped counts the expired values the view has dropped: when it moves,
// the last snapshot holds a value that has expired since.
func (v *View) Dropped() uint64 { return v.dropped.Load() }

// Change is one change of the view, as a follower (Store.FollowView)
// sees it: the entry (topic, key) holds from now on, or its tombstone.
type Change struct {
	Topic string
	Key   string
	// Entry is what the key holds now; Value is shared with the view
	// (callers must not modify it). For a tombstone only record.Stamp is set.
	Entry
	// Deleted is true for a tombstone (and for an expired value).
	Deleted bool
	// Cause is why the key changed without a record arriving: "" (a
	// record), CauseExpired or CauseEffective.
	Cause string
	// item is the entry the change made, when it may keep its value in
	// the file once written there (FileWritten).
	item *viewItem
}

// The causes of a Change that no record brought.
const (
	// CauseExpired: the value's expiry came.
	CauseExpired = "expired"
	// CauseEffective: a scheduled record took effect (or a cancel made
	// the one below it come back).
	CauseEffective = "effective"
)

// change is the item as a Change of topic, its value read from f when
// it is there.
func (it *viewItem) change(f *sharedFile, topic string) Change {
	c := Change{Topic: topic, Key: it.key(), Deleted: it.isTomb()}
	c.Stamp = it.stamp
	c.ExpiresAt, c.EffectiveAt = it.expiry(), it.scheduledAt()
	if !it.isTomb() {
		c.Value, c.Tag = it.valueIn(f, topic), it.tag()
	}
	return c
}

// topicView holds one topic's items.
type topicView struct {
	name  string
	index uint32                   // in View.topicList
	byKey keyIndex                 // point gets
	order *btree.BTreeG[*viewItem] // ordered listing, Digest, snapshots
	live  int                      // items that are not tombstones
	// writes counts the changes to byKey, so that a snapshot being
	// applied knows whether anything but itself wrote the topic.
	writes uint64
	// tls lists a timeline for each key with a scheduled record, a
	// cancel, or a scheduled value in force, in no order (a timeline's
	// slot is its index), for the listings and the frozen copies: a
	// write finds its key's timeline through the entry (timedEntry).
	// Such a key always has an entry too (its value in force when last
	// settled, or a placeholder). A frozen copy reads the first shared
	// slots without the lock: they are copied before one is written
	// (ownTimelines), once a freeze at most.
	tls    []*timeline
	shared int
	// marks holds, for each key an expiry change reached, the change in
	// force (expiry.go); nil until the first. A frozen copy shares it
	// while marksShared: setMark copies it first.
	marks       map[string]expiryMark
	marksShared bool
	// counts holds, for each key an increment reached, its counter
	// (counter.go); nil until the first. A frozen copy shares it while
	// countsShared: setCount copies it first.
	counts       map[string]*counter
	countsShared bool
}

// ownTimelines makes slot i of tv.tls (len(tv.tls) for an append)
// writable: a frozen copy reads the first tv.shared, which are copied
// first. The caller holds the write lock.
func (tv *topicView) ownTimelines(i int) {
	if i < tv.shared {
		tv.tls = slices.Clone(tv.tls)
		tv.shared = 0
	}
}

// addTimeline lists tl, the first timeline of its key.
func (tv *topicView) addTimeline(tl *timeline) {
	tv.ownTimelines(len(tv.tls))
	tl.slot = len(tv.tls)
	tv.tls = append(tv.tls, tl)
}

// replaceTimeline lists tl, a new timeline of its key, in old's place.
func (tv *topicView) replaceTimeline(old, tl *timeline) {
	tv.ownTimelines(old.slot)
	tl.slot = old.slot
	tv.tls[tl.slot] = tl
}

// removeTimeline takes tl, its key's last timeline, off the list: the
// last one listed takes its slot.
func (tv *topicView) removeTimeline(tl *timeline) {
	tv.ownTimelines(tl.slot)
	last := len(tv.tls) - 1
	m := tv.tls[last]
	m.slot = tl.slot
	tv.tls[tl.slot] = m
	tv.tls[last] = nil
	tv.tls = tv.tls[:last]
}

// viewItem is one (topic, key) entry, or one record of a timeline. It is
// not modified once in the view, but by View.update (see the epoch).
//
// An item is 48 bytes when its times are what an ordinary write's are
// (no expiry, its effective time its stamp's wall time), the usual case;
// an item with other times is the first field of a wideItem (64 bytes),
// flagged itemWide, and effAt and expiry read them there (issue 34: 16
// bytes a key of the heap view). A whole item is copied with assign, or
// into a wideItem with set: a plain copy of the struct would carry the
// flag without the times.
type viewItem struct {
	// body is key | tag | value in one allocation, made from a []byte the
	// view owns and never writes again, so that the key and tag can be
	// handed out as strings and the value as a []byte without a copy;
	// key | tag only while the value is in the shared view file (state
	// inFile: see file.go). It is read and swapped atomically: a frozen
	// clone may read an item whose value is copied back meanwhile.
	body  unsafe.Pointer
	stamp record.Stamp
	// vlen is the value's length, wherever the value is.
	vlen uint32
	// state says where the value is (onHeap, inFile, retired), and
	// where the file had it at its last read; read and written
	// atomically (see file.go).
	state uint32
	klen  uint16
	tlen  uint16
	flags uint8
	// timed says that the item is the first field of a timedEntry, what
	// byKey holds for a key with a timeline (settle keeps it exact): the
	// key's timeline is found through it (timedOf). It fills what was
	// padding. No item of the B-tree or of a timeline has it set.
	timed bool
	// epoch is the view's epoch when the item was installed by an
	// ordinary write (0: never to be updated in place); it fills what
	// was padding, the item stays 48 bytes.
	epoch uint16
}

// wideItem is an item with its times: what an item flagged itemWide is
// the first field of.
type wideItem struct {
	viewItem
	// eff is the effective time (Unix ms): the record's effective_at, or
	// its stamp's wall time for an ordinary write. (eff, HLC, origin)
	// orders a key's records.
	eff int64
	// expires is the expiry (Unix ms), 0 for none.
	expires int64
}

// wide is the wideItem it is the first field of; it must be flagged
// itemWide.
func (it *viewItem) wide() *wideItem { return (*wideItem)(unsafe.Pointer(it)) }

// effAt is the item's effective time: its own when wide, else its
// stamp's wall time.
func (it *viewItem) effAt() int64 {
	if it.flags&itemWide != 0 {
		return it.wide().eff
	}
	return record.HLCMillis(it.stamp.HLC)
}

// expiry is the item's expiry (Unix ms), 0 for none.
func (it *viewItem) expiry() int64 {
	if it.flags&itemWide != 0 {
		return it.wide().expires
	}
	return 0
}

// narrow reports whether the item's times are those of a 48-byte item.
func (it *viewItem) narrow() bool {
	return it.expiry() == 0 && it.effAt() == record.HLCMillis(it.stamp.HLC)
}

// set makes w a copy of src, flagged itemWide.
func (w *wideItem) set(src *viewItem) {
	eff, expires := src.effAt(), src.expiry()
	w.viewItem = *src
	w.flags |= itemWide
	w.eff, w.expires = eff, expires
}

// assign copies src into dst, an item the view owns, keeping dst's
// kind: dst must be of the kind src's times make (fits).
func assign(dst, src *viewItem) {
	if dst.flags&itemWide != 0 {
		dst.wide().set(src)
		return
	}
	*dst = *src
	dst.flags &^= itemWide
}

// fits reports whether dst, updated in place with src (assign), is of
// the kind copyItem would make for src: wide exactly when src has times
// of its own. A wide item that takes a write without times is replaced
// by a narrow one instead, so that a key that once had an expiry does
// not keep 16 bytes for it for good.
func (dst *viewItem) fits(src *viewItem) bool { return dst.flags&itemWide != 0 != src.narrow() }

// copyItem is a new heap copy of it: 48 bytes when its times allow, 64
// otherwise.
func copyItem(it *viewItem) *viewItem {
	if it.narrow() {
		n := new(viewItem)
		*n = *it
		n.flags &^= itemWide
		return n
	}
	w := new(wideItem)
	w.set(it)
	return &w.viewItem
}

// Item flags.
const (
	itemTomb        = 1 << iota // a tombstone (or an expired value, whose bytes are dropped)
	itemScheduled               // eff is an effective_at: a cancel may void it
	itemCancel                  // a cancel: never in force, voids scheduled records of its eff
	itemPlaceholder             // nothing in force: the key is held for its timeline
	itemWide                    // the first field of a wideItem (its times)
)

func (it *viewItem) isTomb() bool      { return it.flags&(itemTomb|itemPlaceholder|itemCancel) != 0 }
func (it *viewItem) scheduled() bool   { return it.flags&itemScheduled != 0 }
func (it *viewItem) cancel() bool      { return it.flags&itemCancel != 0 }
func (it *viewItem) placeholder() bool { return it.flags&itemPlaceholder != 0 }

// timedFields reports whether the item uses a time field.
func (it *viewItem) timedFields() bool {
	return it.expiry() != 0 || it.flags&(itemScheduled|itemCancel) != 0
}

// scheduledAt is the item's effective_at, 0 for an ordinary write.
func (it *viewItem) scheduledAt() int64 {
	if it.scheduled() || it.cancel() {
		return it.effAt()
	}
	return 0
}

// liveAt reports whether the item serves a value at now (Unix ms).
func (it *viewItem) liveAt(now int64) bool {
	exp := it.expiry()
	return !it.isTomb() && (exp == 0 || exp > now)
}

// after reports whether it comes after o in (eff, HLC, origin) order: the
// rule by which the greatest effective record is in force. Equal means
// the same message.
func (it *viewItem) after(o *viewItem) bool {
	if a, b := it.effAt(), o.effAt(); a != b {
		return a > b
	}
	return beats(it.stamp.HLC, it.stamp.Origin, o.stamp)
}

// clone is a copy of the item without the view's own marks (epoch,
// timed): an item of another view's frozen copy, which that view may set
// timed on meanwhile (see timed), read field by field.
// Its value is read from f when it is there (of topic); the clone's is
// on the heap.
func (it *viewItem) clone(f *sharedFile, topic string) wideItem {
	w := wideItem{viewItem: viewItem{stamp: it.stamp, vlen: it.vlen, klen: it.klen, tlen: it.tlen, flags: it.flags | itemWide},
		eff: it.effAt(), expires: it.expiry()}
	w.body = it.heapBody(f, topic)
	return w
}

// entry is the item as an Entry of topic, its value read from f when it
// is there (held: the caller holds f's RLock).
func (it *viewItem) entry(f ValueFile, topic string, held bool) Entry {
	v, _ := it.valueOf(nil, f, topic, held)
	return it.entryWith(v)
}

// entryWith is the item as an Entry with value as its value.
func (it *viewItem) entryWith(value []byte) Entry {
	return Entry{Value: value, Tag: it.tag(), Stamp: it.stamp, ExpiresAt: it.expiry(), EffectiveAt: it.scheduledAt()}
}

// makeViewItem copies key, tag and value into one new allocation. A
// tombstone keeps only its key: nothing reads its tag or value. The item
// is a wideItem value, flagged so; the view keeps a copy (copyItem).
func makeViewItem(key, tag, value []byte, st record.Stamp, flags uint8, eff, expires int64) wideItem {
	if flags&(itemTomb|itemCancel|itemPlaceholder) != 0 {
		tag, value = nil, nil
	}
	// A Builder grown once allocates without zeroing what the copies
	// overwrite at once (make did: a tenth of a recovery's CPU with 8 KB
	// values).
	var buf strings.Builder
	buf.Grow(len(key) + len(tag) + len(value))
	buf.Write(key)
	buf.Write(tag)
	buf.Write(value)
	return wideItem{
		viewItem: viewItem{
			body:  keyBody(buf.String()), // key | tag | value
			vlen:  uint32(len(value)),
			stamp: st,
			klen:  uint16(len(key)),
			tlen:  uint16(len(tag)),
			flags: flags | itemWide,
		},
		eff:     eff,
		expires: expires,
	}
}

// recordItemValue is the item for a keyed record, as a value (the caller
// copies it to the heap if the view keeps it as a new item).
func recordItemValue(r record.Record) wideItem {
	var flags uint8
	st := r.Stamp()
	switch r.Kind() {
	case record.KindTombstone:
		flags = itemTomb
	case record.KindCancel:
		flags = itemCancel
	case record.KindExpiry:
		st = r.Target() // the version it changes, with its new expiry (expiry.go)
	}
	if r.EffectiveAt() != 0 && r.Kind() != record.KindCancel {
		flags |= itemScheduled
	}
	return makeViewItem(r.Key(), r.Tag(), r.Value(), st, flags, int64(r.Effective()), int64(r.ExpiresAt()))
}

// expired is the item with its value dropped: a tombstone that keeps its
// place in the order (its stamp, effective time and expiry), so that no
// older record comes back.
func (it *viewItem) expired() *viewItem {
	w := &wideItem{viewItem: viewItem{body: keyBody(it.key()), stamp: it.stamp, klen: it.klen, flags: it.flags&itemScheduled | itemTomb | itemWide},
		eff: it.effAt(), expires: it.expiry()}
	return &w.viewItem
}

// placeholderItem holds a key that has a timeline but nothing in force.
func placeholderItem(key string) *viewItem {
	return &viewItem{body: keyBody(key), klen: uint16(len(key)), flags: itemPlaceholder}
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

// New returns an empty view on the wall clock.
func New() *View {
	return &View{
		topics: make(map[string]*topicView),
		now:    wallMilli,
		wake:   make(chan struct{}, 1),
		epoch:  1,
	}
}

// SetClock makes now the view's wall clock.
func (v *View) SetClock(now func() time.Time) {
	if now != nil {
		v.now = func() int64 { return now().UnixMilli() }
	}
}

// addTopic makes a new topic of v, with room for sizeHint keys. The
// caller holds the write lock or owns v alone.
func (v *View) addTopic(name string, sizeHint int) *topicView {
	tv := &topicView{
		name:  name,
		index: uint32(len(v.topicList)),
		byKey: newKeyIndex(sizeHint),
		order: btree.NewG(btreeDegree, itemLess),
	}
	v.topics[name] = tv
	v.topicList = append(v.topicList, tv)
	return tv
}

// Apply applies a record to the view and reports whether the view changed.
// A record without a key (a plain stream message) is ignored. The view
// copies what it keeps, so r may be a slice of a mapped file.
func (v *View) Apply(r record.Record) bool {
	key := r.Key()
	if len(key) == 0 {
		return false
	}
	if r.Kind() == record.KindExpiry {
		return v.applyExpiry(r)
	}
	if r.Kind() == record.KindCounter {
		return v.applyCounter(r)
	}
	topic := r.Topic()
	// An ordinary write, with an expiry or not: neither scheduled nor a
	// cancel, which may matter below the entry.
	ordinary := r.EffectiveAt() == 0 && r.Kind() != record.KindCancel

	// A cheap check under the read lock keeps a replayed or superseded
	// record from allocating and from taking the write lock. The entry it
	// finds is the key's still if nothing wrote the topic meanwhile (every
	// change of byKey counts in writes), so that the write lock does not
	// look the key up again: at a million keys that lookup is a hash and a
	// probe the update pays twice otherwise (BenchmarkPublishRandom1M).
	var (
		seenTopic *topicView
		seenOld   *viewItem
		seen      uint64
	)
	if ordinary {
		st := r.Stamp()
		eff := int64(r.Effective())
		v.mu.RLock()
		if tv := v.topics[string(topic)]; tv != nil {
			// The key's bytes as a string without a copy: get keeps none.
			if old := tv.byKey.get(unsafe.String(unsafe.SliceData(key), len(key))); old == nil || !old.timed {
				if old != nil && !(&wideItem{viewItem: viewItem{stamp: st, flags: itemWide}, eff: eff}).after(old) {
					v.mu.RUnlock()
					return false
				}
				seenTopic, seenOld, seen = tv, old, tv.writes
			}
		}
		v.mu.RUnlock()
	}

	// Copy outside the lock: readers wait only for the swap. The item
	// itself is allocated only when it is not copied into the one it
	// updates (see update); the copy is ApplyBatch's scratch, a value
	// here escaped (64 bytes of garbage a record).
	sc := getBatchScratch(1)
	defer sc.release()
	sc.items = append(sc.items, recordItemValue(r))
	it := &sc.items[0]

	v.mu.Lock()
	defer v.unlock()
	tv, old := seenTopic, seenOld
	var te *timedEntry
	if tv == nil || tv.writes != seen {
		// A timeline that came for the key meanwhile changed byKey, and
		// counts in writes too.
		tv = v.topicLocked(topic)
		old, te = tv.lookup(it.key())
	}
	return v.applyLocked(tv, old, te, &it.viewItem)
}

// lookup is the entry of key k (nil: none) and, for a key with a
// timeline, its timedEntry (nil: none), which holds the timeline: one
// index lookup whatever the key holds.
func (tv *topicView) lookup(k string) (*viewItem, *timedEntry) {
	it := tv.byKey.get(k)
	if it != nil && it.timed {
		te := timedOf(it)
		return te.cur, te
	}
	return it, nil
}

// touchLocked loads, before ApplyBatch applies rs (whose keyed records
// are items), what the lookup of each key will read: its index slot, the
// entry the slot names, the entry's key. It goes level by level over
// touchStep keys at a time, every key's slot first, then every entry,
// then every key, so that the cache misses of a level overlap instead of
// coming three a key, one after another (a lookup's loads depend on each
// other). It decides nothing on what it loads and changes nothing. The
// caller holds the write lock.
func (v *View) touchLocked(rs []record.Record, items []wideItem) {
	var ts [touchStep]touchKey
	n, j := 0, 0
	var tv *topicView
	for _, r := range rs {
		if len(r.Key()) == 0 {
			continue
		}
		k := items[j].key()
		j++
		if topic := r.Topic(); tv == nil || tv.name != string(topic) {
			if tv = v.topics[string(topic)]; tv == nil {
				continue
			}
		}
		if tv.byKey.n == 0 {
			continue
		}
		h := keyHash(k)
		ts[n] = touchKey{t: tv.byKey.table(h), h: h}
		if n++; n == len(ts) {
			v.touched += touchEntries(ts[:n])
			n = 0
		}
	}
	v.touched += touchEntries(ts[:n])
}

// touchReads is touchLocked for GetMany's keys, for a caller that holds
// the read lock: it finds each key's topic and hash (sc.keys) for the
// lookups that follow, and keeps the sum of what it loads in
// sc.touched, where the compiler must keep it. When the view has a file,
// sc.ats gets the place of every entry reached whose value is there
// (warmReads).
func (v *View) touchReads(topics, keys []string, sc *manyScratch) {
	var ts [touchStep]touchKey
	n, sum := 0, uint64(0)
	sc.ats = sc.ats[:0]
	step := func() {
		sum += touchEntries(ts[:n])
		if v.file != nil {
			for _, t := range ts[:n] {
				if s := t.state(); s&stateMask == inFile {
					sc.ats = append(sc.ats, s>>stateBits)
				}
			}
		}
		n = 0
	}
	var tv *topicView
	for i, k := range keys {
		if tv == nil || tv.name != topics[i] {
			tv = v.topics[topics[i]]
		}
		sc.keys[i].tv = tv
		if tv == nil || tv.byKey.n == 0 {
			continue
		}
		h := keyHash(k)
		sc.keys[i].hash = h
		ts[n] = touchKey{t: tv.byKey.table(h), h: h}
		if n++; n == len(ts) {
			step()
		}
	}
	step()
	sc.touched = sum
}

// lookup is GetMany's current for keys[i], after touchReads.
func (sc *manyScratch) lookup(v *View, keys []string, i int, now func() int64) *viewItem {
	k := &sc.keys[i]
	if k.tv == nil {
		return nil
	}
	return v.currentOf(k.tv.byKey.getHashed(keys[i], k.hash), now)
}

// touchStep is how many keys touchLocked takes a level at a time: a
// pipeline of 16 SETs is one step.
const touchStep = 16

// touchKey is touchLocked's scratch for one key: its table, its hash,
// then the entry its probe reaches.
type touchKey struct {
	t  *keyTable
	h  uint64
	it *viewItem
}

// state is the state word of the entry t's probe reached, 0 (onHeap)
// for none.
func (t *touchKey) state() uint32 {
	if t.it == nil {
		return 0
	}
	return atomic.LoadUint32(&t.it.state)
}

// touchEntries is touchLocked's levels for ts, whose tables and hashes
// are known: it loads every key's first slot (its tag and entry
// pointer), then probes each key's table by tag to the entry a lookup
// would compare first, loads every such entry, then every entry's key.
// Each level is a short loop of its own, so that all of its loads are in
// flight together. It returns the sum of what it loaded.
func touchEntries(ts []touchKey) uint64 {
	sum := uint64(0)
	for i := range ts {
		t := ts[i].t
		s := t.home(ts[i].h)
		sum += uint64(t.tags[s])
		ts[i].it = t.items[s]
	}
	for i := range ts {
		t, tag := ts[i].t, keyTag(ts[i].h)
		ts[i].it = nil
		for s := t.home(ts[i].h); t.tags[s] != 0; s = t.next(s) {
			if t.tags[s] == tag {
				ts[i].it = t.items[s]
				break
			}
		}
	}
	for i := range ts {
		if it := ts[i].it; it != nil {
			sum += uint64(it.klen)
		}
	}
	for i := range ts {
		if it := ts[i].it; it != nil && it.klen > 0 {
			sum += uint64(it.key()[0])
		}
	}
	return sum
}

// topicLocked is the view of topic, made if it has none. The caller
// holds the write lock.
func (v *View) topicLocked(topic []byte) *topicView {
	tv := v.topics[string(topic)]
	if tv == nil {
		tv = v.addTopic(string(topic), 0)
	}
	return tv
}

// applyLocked gives tv the item it (a value: copied to the heap only when
// the view keeps it as an item of its own, not into old, the key's entry,
// nor into the pending record it supersedes) and reports whether the view
// changed; te holds the key's timeline (tv.lookup). The caller holds the
// write lock.
func (v *View) applyLocked(tv *topicView, old *viewItem, te *timedEntry, it *viewItem) bool {
	tl := te.timeline()
	if tv.marks != nil && tl == nil && old != nil && !it.scheduled() && !it.cancel() && it.after(old) {
		// An ordinary write over the version an expiry change reached:
		// nothing brings that version back, so its mark goes.
		tv.dropMark(it.key())
	}
	if old != nil && v.updatable(tl, old, it) {
		v.update(tv, old, it)
		return true
	}
	if i := tl.replaceable(it); i >= 0 && tl.recs[i] != old && tl.recs[i].epoch == v.epoch && tl.recs[i].fits(it) {
		// Rescheduled, the record it supersedes in no frozen clone (its
		// epoch) and not the entry: it is copied over that record, no
		// new item, no new timeline.
		r := tl.recs[i]
		assign(r, it)
		r.epoch = v.epoch
		now := v.clock()
		if r.effAt() > now {
			// Pending still, as the record it superseded: nothing in
			// force changes, and the instant is queued already.
			return false
		}
		return v.settle(tv, r.key(), old, te, tl, now, CauseEffective)
	}
	if tl == nil && (it.scheduled() || it.cancel()) {
		return v.putFirst(tv, old, it) // copied into the timeline's allocation
	}
	return v.put(tv, old, te, copyItem(it))
}

// ApplyBatch applies rs in order, as Apply applies each, under one hold
// of the write lock: a reader sees all of them or none (a batch's records
// together), and the follower gets them as one group. It reports how many
// changed the view. It skips Apply's read-locked check, which keeps a
// replayed record from allocating: meant for the store's own new records
// (a publish), which nearly always win, and for a batch whose last record
// came. For a pipeline of 16 SETs that is one lock round trip instead of
// 17, and no read lock (BenchmarkPublishSET10k).
func (v *View) ApplyBatch(rs []record.Record) int {
	// Copy outside the lock, into items that are values: an item is
	// allocated only when it is not copied into the one it updates. The
	// items are scratch (applyLocked copies what it keeps), reused from
	// batchItems: a new slice each batch was a third of a SET's garbage.
	sc := getBatchScratch(len(rs))
	defer sc.release()
	items := sc.items
	for _, r := range rs {
		if len(r.Key()) > 0 {
			items = append(items, recordItemValue(r))
		}
	}
	sc.items = items
	if len(items) == 0 {
		return 0 // messages without a key: nothing to take, and no change (gen)
	}
	changed := 0
	v.mu.Lock()
	defer v.unlock()
	// One instant for the whole batch: one clock read, not one a record
	// with a time field.
	v.batchNow, v.inBatch = 0, true
	defer func() { v.batchNow, v.inBatch = 0, false }()
	if len(items) > 1 {
		v.touchLocked(rs, items)
	}
	var tv *topicView
	j := 0
	for _, r := range rs {
		if len(r.Key()) == 0 {
			continue
		}
		it := &items[j].viewItem
		j++
		if topic := r.Topic(); tv == nil || tv.name != string(topic) {
			tv = v.topicLocked(topic)
		}
		if r.Kind() == record.KindExpiry {
			st := r.Stamp()
			if v.markedLocked(tv, it, expiryMark{target: it.stamp, hlc: st.HLC, origin: st.Origin, absent: r.Absent(), gone: r.Gone()}) {
				changed++
			}
			continue
		}
		if r.Kind() == record.KindCounter {
			if v.counterLocked(tv, r) {
				changed++
			}
			continue
		}
		if old, te := tv.lookup(it.key()); v.applyLocked(tv, old, te, it) {
			changed++
		}
	}
	return changed
}

// batchItems holds ApplyBatch's scratch between batches (*batchScratch).
var batchItems sync.Pool

// maxPooledBatch is the most items a scratch batchItems keeps may hold
// (256 KiB): a rare huge batch does not stay allocated.
const maxPooledBatch = 4096

// batchScratch is ApplyBatch's copy of a batch's records as items.
type batchScratch struct{ items []wideItem }

// getBatchScratch is a scratch whose items are empty, with room for n.
func getBatchScratch(n int) *batchScratch {
	sc, _ := batchItems.Get().(*batchScratch)
	if sc == nil {
		sc = new(batchScratch)
	}
	if cap(sc.items) < n {
		sc.items = make([]wideItem, 0, max(n, 16))
	}
	sc.items = sc.items[:0]
	return sc
}

// release clears the items (their bodies are the view's now, or
// garbage) and keeps the scratch for the next batch.
func (sc *batchScratch) release() {
	if cap(sc.items) > maxPooledBatch {
		return
	}
	clear(sc.items)
	sc.items = sc.items[:0]
	batchItems.Put(sc)
}

// updatable reports whether put would update old, the entry of a key
// whose timeline is tl, with it in place: an
// ordinary write (no timeline) that wins over old, made since the last
// freeze, without an expiry or with one whose instant is queued already
// (old's, which comes first: see put).
func (v *View) updatable(tl *timeline, old, it *viewItem) bool {
	if old.epoch != v.epoch || it.scheduled() || it.cancel() || tl != nil || !it.after(old) || !old.fits(it) {
		return false
	}
	if it.expiry() == 0 {
		return true
	}
	now := v.clock()
	return it.expiry() > now && !old.isTomb() && now < old.expiry() && old.expiry() <= it.expiry()
}

// put adds it to what tv knows of its key, whose entry is old and
// timeline te's (as the caller found them: the key is looked up once a
// write), and reports whether the entry in force changed. The caller
// holds the write lock.
func (v *View) put(tv *topicView, old *viewItem, te *timedEntry, it *viewItem) bool {
	k := it.key()
	tl := te.timeline()
	if tl == nil && !it.scheduled() && !it.cancel() {
		// The common case: an ordinary write to a key with no timeline.
		if old != nil && !it.after(old) {
			return false
		}
		if it.expiry() != 0 {
			now := v.clock()
			switch {
			case it.expiry() <= now:
				it = it.expired() // expired before it arrived: never served
				v.dropped.Add(1)
			case old != nil && !old.isTomb() && now < old.expiry() && old.expiry() <= it.expiry():
				// The instant of old's expiry is queued, and comes first:
				// settle queues this one then. A key written again and
				// again keeps one instant queued, not one a write.
			default:
				v.queue(it.expiry(), tv, k)
			}
		}
		if old != nil && old.epoch == v.epoch && old.fits(it) {
			v.update(tv, old, it)
			return true
		}
		it.epoch = v.epoch
		v.install(tv, k, old, it, nil, "")
		return true
	}
	if tl == nil {
		return v.putFirst(tv, old, it)
	}
	// it goes into the key's timeline, and is in no frozen clone: its
	// epoch says so (see applyLocked).
	it.epoch = v.epoch
	var ntl *timeline
	if i := tl.replaceable(it); i >= 0 && tl.epoch() == v.epoch {
		tl.recs[i] = it // rescheduled: no new timeline while no clone holds it
		ntl = tl
	} else {
		var added bool
		if ntl, added = tl.with(it); !added {
			return false
		}
		ntl.setEpoch(v.epoch)
	}
	return v.settle(tv, k, old, te, ntl, v.clock(), timedCause(it))
}

// timedCause is the cause of the change a record that goes into a
// timeline makes at once: none for a write in force at once (its record
// tells it), CauseEffective for a late scheduled record or a cancel.
func timedCause(it *viewItem) string {
	if it.scheduled() || it.cancel() {
		return CauseEffective
	}
	return ""
}

// putFirst is put of it, a scheduled record or a cancel, to a key without
// a timeline (old its entry): the key's first timeline. it is copied, not
// kept: the timeline, the record and, when nothing is in force, the
// placeholder that holds the key are one allocation (a firstTimeline),
// and one of another size class than the entries; the key's timedEntry
// is another (see firstTimeline).
func (v *View) putFirst(tv *topicView, old, it *viewItem) bool {
	if old != nil && !old.scheduled() && !old.placeholder() && !it.after(old) {
		// Below an ordinary write, which nothing voids: never in force.
		return false
	}
	var have [1]*viewItem
	recs := have[:0]
	if old != nil && !old.placeholder() {
		recs = append(recs, old)
	}
	now := v.clock()
	var (
		ntl *timeline
		rec *viewItem
	)
	te := new(timedEntry)
	if (old == nil || old.placeholder()) && (it.cancel() || it.effAt() > now) {
		// Nothing in force: settle installs the block's placeholder,
		// which the new timedEntry shows (cur) meanwhile.
		b := &firstTimelineHeld{}
		b.hold = viewItem{body: keyBody(it.key()), klen: it.klen, flags: itemPlaceholder}
		te.cur = &b.hold
		b.rec.set(it)
		ntl, rec = &b.tl, &b.rec.viewItem
	} else {
		b := &firstTimeline{}
		b.rec.set(it)
		ntl, rec = &b.tl, &b.rec.viewItem
	}
	// rec goes into the key's timeline, and is in no frozen clone: its
	// epoch says so (see applyLocked).
	rec.epoch = v.epoch
	if _, added := withRecord(recs, 0, rec, ntl); !added {
		return false
	}
	ntl.setEpoch(v.epoch)
	v.timed++
	return v.settle(tv, rec.key(), old, te, ntl, now, timedCause(rec))
}

// clock is the view's wall clock for a writer, under the write lock: read
// once for a whole ApplyBatch (its records apply at one instant), and the
// latest reading kept in settledAt, for the readers (see current).
func (v *View) clock() int64 {
	if v.batchNow != 0 {
		return v.batchNow
	}
	t := v.now()
	if t > v.settledAt {
		v.settledAt = t
	}
	if v.inBatch {
		v.batchNow = t
	}
	return t
}

// install makes it the entry of (tv, k) (nil: none) in place of old, the
// key's entry as the caller found it (its write looks the key up once),
// and tells the follower. byKey gets te showing it when te is not nil
// (the key has a timeline), it otherwise. The caller holds the write
// lock.
func (v *View) install(tv *topicView, k string, old, it *viewItem, te *timedEntry, cause string) {
	if tv.counts != nil {
		it = v.counted(tv, k, it)
	}
	v.place(tv, k, old, it, te, cause)
}

// place is install of it as it is (counted already).
func (v *View) place(tv *topicView, k string, old, it *viewItem, te *timedEntry, cause string) {
	tv.writes++
	if old != nil {
		if it != nil && te == nil {
			it.keepAt(old)
		}
		v.retire(tv.name, old) // before the follower hears of the change
		if !old.isTomb() {
			tv.live--
			v.live--
		}
		if old.timedFields() {
			v.timed--
		}
	}
	if it == nil {
		tv.byKey.delete(k)
		tv.order.Delete(old)
		if old != nil && !old.isTomb() && (v.follow != nil || cause != "") {
			c := Change{Topic: tv.name, Key: k, Deleted: true, Cause: cause}
			c.Stamp = old.stamp
			v.tell(c)
			v.events.add(c)
		}
		return
	}
	mapped := it
	if te != nil {
		te.set(it)
		mapped = &te.wideItem.viewItem
	}
	tv.byKey.set(mapped)
	tv.order.ReplaceOrInsert(it)
	if !it.isTomb() {
		tv.live++
		v.live++
	}
	if it.timedFields() {
		v.timed++
	}
	if (v.follow != nil || cause != "") && !(it.placeholder() && (old == nil || old.isTomb())) {
		c := it.change(&v.shared, tv.name)
		c.Cause = cause
		if te == nil {
			c.item = it
		}
		v.tell(c)
		v.events.add(c)
	}
}

// tell gives c to the follower, if any. The caller holds the write lock.
func (v *View) tell(c Change) {
	if v.follow != nil {
		v.follow(c)
		v.told = true
	}
}

// unlock releases the write lock after a change (it moves gen), first
// telling the follower that the changes made under it are all told,
// unless a Hold keeps them open.
func (v *View) unlock() {
	v.gen.Add(1)
	v.release()
}

// release is unlock for a hold of the lock that changed nothing a digest
// hashes.
func (v *View) release() {
	if v.told && v.holds == 0 {
		v.told = false
		if v.followEnd != nil {
			v.followEnd()
		}
	}
	v.mu.Unlock()
}

// Hold makes the changes of the calls until Release one group for the
// follower (FollowFrom's end is called once, at Release): the store holds
// the records of one publish together. Every Hold needs its Release.
func (v *View) Hold() {
	v.mu.Lock()
	v.holds++
	v.mu.Unlock()
}

// Release ends what Hold started.
func (v *View) Release() {
	v.mu.Lock()
	v.holds--
	v.release()
}

// update copies it, an ordinary write of old's key of old's kind (fits),
// into old, which no frozen clone holds, and tells the follower: install
// without the B-tree's descent. The caller holds the write lock.
func (v *View) update(tv *topicView, old, it *viewItem) {
	if tv.counts != nil {
		if it = v.counted(tv, old.key(), it); !old.fits(it) {
			// A counter's revival, whose times are not the record's:
			// counted made a new item of its kind.
			it.epoch = v.epoch
			v.place(tv, it.key(), old, it, nil, "")
			return
		}
	}
	if !old.isTomb() {
		tv.live--
		v.live--
	}
	if old.timedFields() {
		v.timed--
	}
	tv.writes++
	it.epoch = old.epoch
	it.keepAt(old)
	assign(old, it)
	if !old.isTomb() {
		tv.live++
		v.live++
	}
	if old.timedFields() {
		v.timed++
	}
	if v.follow != nil {
		c := old.change(&v.shared, tv.name)
		c.item = old
		v.tell(c)
	}
}

// settle brings the entry of (tv, k) to what is in force at now: the
// timeline's winner, its value dropped once expired, and prunes the
// timeline. It reports whether the entry changed. old is the key's entry
// and te what held its timeline (nil: none), as the caller found them,
// or putFirst's new timedEntry (no timeline yet, and the placeholder
// made with it as cur when nothing is in force); tl is the key's
// timeline now (te's, or put's new one, which settle lists): the key is
// looked up once a write. The caller holds the write lock.
func (v *View) settle(tv *topicView, k string, old *viewItem, te *timedEntry, tl *timeline, now int64, cause string) bool {
	var want *viewItem
	if tl == nil {
		if old != nil && !old.isTomb() && old.expiry() > now {
			// An earlier item's instant: queue this one's.
			v.queue(old.expiry(), tv, k)
			return false
		}
		if old == nil || old.isTomb() || old.expiry() == 0 {
			return false
		}
		want = old.expired()
		v.dropped.Add(1)
		v.install(tv, k, old, want, nil, CauseExpired)
		return true
	}
	held := te.tl
	w := tl.resolve(now)
	if ntl := tl.prune(); ntl != tl {
		if ntl == nil {
			v.timed--
		} else {
			ntl.setEpoch(v.epoch)
		}
		tl = ntl
	}
	switch {
	case tl == held:
	case tl == nil:
		tv.removeTimeline(held)
	case held == nil:
		tv.addTimeline(tl)
	default:
		tv.replaceTimeline(held, tl)
	}
	te.tl = tl
	switch {
	case w == nil && tl == nil:
		want = nil // a cancel took out the only record: nothing left
	case w == nil && te.cur != nil && te.cur.placeholder():
		want = te.cur // nothing in force still, or putFirst's placeholder
	case w == nil:
		want = placeholderItem(k)
	case w.expiry() != 0 && w.expiry() <= now:
		want = w.expired()
		if old != nil && old.isTomb() && old.stamp == w.stamp && old.effAt() == w.effAt() {
			want = old // expired already
		} else {
			v.dropped.Add(1)
		}
	default:
		want = w
	}
	if next := tl.next(now, w); next != 0 && (tl == nil || tl.queued() <= now || next < tl.queued()) {
		// Queued once: the timer settles the key then and queues the
		// next instant (tl.queued() keeps a key written again and again
		// to one queued instant).
		v.queue(next, tv, k)
		if tl != nil {
			tl.setQueued(next)
		}
	}
	if tl == nil {
		te = nil // byKey holds the entry itself from now on
	}
	if want == old || want != nil && old != nil && want.placeholder() && old.placeholder() {
		if (held == nil) != (te == nil) {
			// The key's first timeline over an entry that stays, or its
			// last one gone: byKey changes, not the entry (nor the
			// B-tree, which holds the entry itself).
			mapped := old
			if te != nil {
				v.retire(tv.name, old) // it goes into the timeline
				te.set(old)
				mapped = &te.wideItem.viewItem
			}
			tv.byKey.set(mapped)
			tv.writes++
		}
		return false
	}
	if want != nil && old != nil && want.isTomb() && !old.isTomb() && want.stamp == old.stamp && want.effAt() == old.effAt() {
		cause = CauseExpired // the value in force reached its expiry
	}
	v.install(tv, k, old, want, te, cause)
	return true
}

// insertNew stores it in tv, which holds nothing for its key yet (the
// snapshot reader's entries are sorted and distinct), without looking the
// key up, and tells the follower. The caller holds the write lock or owns
// v alone.
func (v *View) insertNew(tv *topicView, it *viewItem) {
	tv.order.ReplaceOrInsert(it)
	v.addNew(tv, it)
}

// insertFresh is insertNew of each item (of distinct keys), with the
// B-tree filled by a goroutine of its own meanwhile: the index's inserts
// and the B-tree's descents are each bound by memory latency, and a bulk
// load (a bootstrap's snapshot) takes about the time of the slower.
func (v *View) insertFresh(tv *topicView, items []*viewItem) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, it := range items {
			tv.order.ReplaceOrInsert(it)
		}
	}()
	for _, it := range items {
		v.addNew(tv, it)
	}
	<-done
}

// addNew is insertNew but for the B-tree.
func (v *View) addNew(tv *topicView, it *viewItem) {
	tv.writes++
	tv.byKey.set(it)
	if !it.isTomb() {
		tv.live++
		v.live++
	}
	if it.timedFields() {
		v.timed++
	}
	if it.expiry() != 0 && !it.isTomb() {
		v.queue(it.expiry(), tv, it.key())
	}
	if v.follow != nil && !it.placeholder() {
		v.tell(it.change(&v.shared, tv.name))
	}
}

// Get returns the live value of (topic, key). A deleted or unknown key
// reports false. Entry.Value is shared: do not modify it.
func (v *View) Get(topic, key string) (Entry, bool) {
	e, _, ok := v.GetInto(nil, topic, key)
	return e, ok
}

// GetInto is Get for a caller that is done with the value before its
// next read, and keeps a buffer for the values: a value the view keeps
// in the shared view file only (see file.go) is read into buf, from its
// start (grown when short), instead of a new allocation. It returns the
// buffer to pass next time; until then Entry.Value may be a slice of it.
// Any other value is shared with the view, as Get's.
func (v *View) GetInto(buf []byte, topic, key string) (Entry, []byte, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.getLocked(buf, topic, key)
}

// getLocked is GetInto. The caller holds the read lock.
func (v *View) getLocked(buf []byte, topic, key string) (Entry, []byte, bool) {
	tv := v.topics[topic]
	if tv == nil {
		return Entry{}, buf, false
	}
	it := v.current(tv, key, v.now)
	if it == nil {
		return Entry{}, buf, false
	}
	f := v.file
	if f != nil {
		f.RLock()
		defer f.RUnlock()
	}
	value, buf := it.valueOf(buf, f, topic, true)
	e := it.entryWith(value)
	if tv.counts != nil {
		e.Base, e.Absence = v.countedBase(tv, key, it)
	}
	return e, buf, true
}

// GetMany looks up several keys of one instant: under one hold of the read
// lock, so that a batch applied meanwhile is seen whole or not at all,
// and at one reading of the clock, so that keys scheduled for one instant
// are all before it or all after it. found[i] says whether keys[i] has a
// live value; entries[i] is it. The caller gives both, of len(keys) at
// least, and buf, which the values the view keeps in the file only are
// read into (from its start, grown when short); it returns buf, to pass
// next time (a reader that reuses all three allocates nothing). Until
// then the values may be slices of it; the others are shared, as Get's.
func (v *View) GetMany(topics, keys []string, entries []Entry, found []bool, buf []byte) []byte {
	entries, found = entries[:len(keys)], found[:len(keys)]
	clear(entries)
	clear(found)
	var at int64 // read once, when the first key with a time field needs it
	now := func() int64 {
		if at == 0 {
			at = v.now()
		}
		return at
	}
	sc := getManyScratch(len(keys))
	defer sc.release()
	v.mu.RLock()
	defer v.mu.RUnlock()
	f := v.file
	if f == nil {
		v.touchReads(topics, keys, sc)
		for i := range keys {
			if it := sc.lookup(v, keys, i, now); it != nil {
				entries[i], found[i] = it.entry(nil, topics[i], false), true
			}
		}
		return buf
	}
	// Every key's entry in the index and the records in the file of the
	// values there (warmReads), then the lookups, then the values in the
	// file, copied into buf.
	f.RLock()
	defer f.RUnlock()
	v.warmReads(f, topics, keys, sc)
	size, filed := 0, false
	for i := range keys {
		it := sc.lookup(v, keys, i, now)
		if it != nil && it.inFile() { // no write changes it under the read lock
			found[i], size, filed = true, size+int(it.vlen), true
			sc.keys[i].filed = it
			continue
		}
		if it != nil {
			entries[i], found[i] = it.entryWith(it.heapValue(it.loadBody())), true
		}
	}
	if !filed {
		return buf
	}
	if cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	buf = buf[:0]
	for i := range keys {
		if it := sc.keys[i].filed; it != nil {
			n := len(buf)
			buf = it.appendHeld(buf, f, topics[i])
			entries[i] = it.entryWith(buf[n:len(buf):len(buf)])
		}
	}
	return buf
}

// WarmReads loads what reads of (topics[i], keys[i]) that follow soon
// will load (a pipeline's run of GETs through the Redis door): each
// key's index slot, entry and key, and the record in the view file of
// an entry whose value is there (warmReads), so that the cache misses of
// all the keys overlap instead of coming one read after another. It
// decides nothing and changes nothing.
func (v *View) WarmReads(topics, keys []string) {
	sc := getManyScratch(len(keys))
	defer sc.release()
	v.mu.RLock()
	defer v.mu.RUnlock()
	f := v.file
	if f == nil {
		v.touchReads(topics, keys, sc)
		return
	}
	f.RLock()
	defer f.RUnlock()
	v.warmReads(f, topics, keys, sc)
}

// warmReads is touchReads, then WarmAt of the places in the file of the
// entries whose values are there, from where each entry's last read
// found its key: the entries each key's probe reaches first (its own
// but for a tag shared with another key, which costs a useless load).
// The caller holds the read lock and f's RLock; f is the view's file.
func (v *View) warmReads(f ValueFile, topics, keys []string, sc *manyScratch) {
	v.touchReads(topics, keys, sc)
	if len(sc.ats) > 0 {
		f.WarmAt(sc.ats)
	}
}

// manyScratch is GetMany's scratch, which manyScratches keeps: the
// places in the file for WarmAt (which an interface call would otherwise
// allocate each time), and what it found of each key.
type manyScratch struct {
	ats  []uint32
	keys []manyKey
	// touched keeps what touchReads loaded.
	touched uint64
}

// manyKey is what GetMany found of one key: its topic (nil: none) and
// hash (touchReads), and its entry when the entry's value is in the file.
type manyKey struct {
	tv    *topicView
	hash  uint64
	filed *viewItem
}

var manyScratches sync.Pool

// getManyScratch is a scratch for n keys, its keys zero.
func getManyScratch(n int) *manyScratch {
	sc, _ := manyScratches.Get().(*manyScratch)
	if sc == nil {
		sc = new(manyScratch)
	}
	if cap(sc.keys) < n {
		sc.ats, sc.keys = make([]uint32, 0, max(n, 16)), make([]manyKey, max(n, 16))
	}
	sc.keys = sc.keys[:n]
	return sc
}

// release keeps the scratch for the next GetMany, what it found let go,
// unless a rare huge one grew it past maxPooledBatch.
func (sc *manyScratch) release() {
	if cap(sc.keys) <= maxPooledBatch {
		clear(sc.keys)
		manyScratches.Put(sc)
	}
}

// current is the item of tv that serves key's value now, nil when it has
// none. The clock is read only when the key may have a time field. The
// caller holds the read lock.
//
// A key's entry is what its timeline held in force when a writer last
// settled it, and stays so until the key's next instant (a scheduled
// record taking effect, an expiry), which is queued: so from the latest
// settling (settledAt) to the earliest instant queued, every entry is in
// force, and a read takes it without looking its timeline up.
func (v *View) current(tv *topicView, key string, now func() int64) *viewItem {
	return v.currentOf(tv.byKey.get(key), now)
}

// currentOf is current for it, a key's entry in byKey (nil: none).
func (v *View) currentOf(it *viewItem, now func() int64) *viewItem {
	if it == nil {
		return nil
	}
	// The entry first: its cache miss is then under way while the clock
	// is read (a key of a topic with timelines, loaded after the clock,
	// was +44% over a plain one in BenchmarkViewGetTime, +7% so).
	if it.expiry() == 0 && !it.timed {
		if it.isTomb() {
			return nil
		}
		return it
	}
	t := now()
	if it.timed && (t < v.settledAt || v.times.due(t)) {
		if it = timedOf(it).tl.resolve(t); it == nil {
			return nil
		}
	}
	if !it.liveAt(t) {
		return nil
	}
	return it
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
	// No key is longer than record.MaxKeyBytes; starting from a longer after's first
	// record.MaxKeyBytes bytes only visits a few keys more, which the loop skips.
	probe := &viewItem{body: keyBody(start), klen: uint16(min(len(start), record.MaxKeyBytes))}
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
		if k <= after || v.current(tv, k, v.now) == nil {
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

// frozenTopic is a read-only copy-on-write clone of one topic's B-tree,
// with its list of timelines (which are immutable) as they were, by key
// once indexed (index), and the instant of the clone.
type frozenTopic struct {
	name  string
	items *btree.BTreeG[*viewItem]
	tls   []*timeline
	times map[string]*timeline
	// marks is the topic's expiry marks (topicView.marks), shared.
	marks map[string]expiryMark
	// counts is the topic's counters (topicView.counts), shared.
	counts map[string]*counter
	now    int64
	// file is the view's file as readers without the lock find it, which
	// its items' values may be in.
	file *sharedFile
}

// index fills ft.times from ft.tls, without the view's lock: the
// listing is the view's, frozen, and its timelines are immutable.
func (ft *frozenTopic) index() {
	if len(ft.tls) == 0 {
		return
	}
	ft.times = make(map[string]*timeline, len(ft.tls))
	for _, tl := range ft.tls {
		ft.times[tl.key()] = tl
	}
}

// records calls fn for each record the frozen topic holds, in key order:
// for a key with a timeline its records (pending ones and cancels
// included), else its entry, as a tombstone once expired. Placeholders
// are not records.
func (ft *frozenTopic) records(fn func(it *viewItem) bool) {
	ft.items.Ascend(func(it *viewItem) bool {
		if tl := ft.times[it.key()]; tl != nil {
			for _, r := range tl.recs {
				if r.expiry() != 0 && r.expiry() <= ft.now && !r.isTomb() {
					r = r.expired()
				}
				if !fn(r) {
					return false
				}
			}
			return true
		}
		if it.expiry() != 0 && it.expiry() <= ft.now && !it.isTomb() {
			it = it.expired()
		}
		return fn(it)
	})
}

// entries is how many records records yields.
func (ft *frozenTopic) entries() int {
	n := ft.items.Len()
	for _, tl := range ft.tls {
		n += len(tl.recs) - 1
	}
	return n
}

// freeze clones every topic's B-tree (lazily: O(1) per topic) under the
// write lock and returns the clones sorted by topic name, their
// timelines indexed by key (after the lock) and how many records they
// hold. The clones can be read without any lock while Apply goes on with
// the originals: the trees copy a shared node before changing it, and
// the items they hold are not modified (the epoch moves: see
// View.update).
func (v *View) freeze() (topics []frozenTopic, entries int) {
	v.mu.Lock()
	topics = v.freezeLocked()
	v.mu.Unlock()
	return topics, indexFrozen(topics)
}

// indexFrozen indexes the timelines of each frozen topic (index) and
// returns how many records the topics hold.
func indexFrozen(topics []frozenTopic) (entries int) {
	for i := range topics {
		topics[i].index()
		entries += topics[i].entries()
	}
	return entries
}

// freezeLocked is freeze for a caller holding the write lock, without
// the index. It moves the epoch, so that no item or timeline the clones
// hold is updated in place, and shares each topic's list of timelines
// (see topicView.tls). When the epoch wraps, every item and timeline is
// marked as made before it (once in 65,535 freezes, a walk of the indexes).
func (v *View) freezeLocked() []frozenTopic {
	if v.epoch++; v.epoch == 0 {
		for _, tv := range v.topics {
			for it := range tv.byKey.all() {
				it.epoch = 0
				if it.timed {
					timedOf(it).cur.epoch = 0
				}
			}
			for _, tl := range tv.tls {
				tl.setEpoch(0)
				for _, r := range tl.recs {
					r.epoch = 0
				}
			}
		}
		v.epoch = 1
	}
	topics := make([]frozenTopic, 0, len(v.topics))
	now := v.now()
	for _, tv := range v.topics {
		topics = append(topics, frozenTopic{name: tv.name, items: tv.order.Clone(), tls: tv.tls, marks: tv.marks, counts: tv.counts, now: now, file: &v.shared})
		tv.shared = len(tv.tls)
		tv.marksShared = tv.marks != nil
		tv.countsShared = tv.counts != nil
	}
	sort.Slice(topics, func(i, j int) bool { return topics[i].name < topics[j].name })
	return topics
}

// FollowFrom makes fn see every later change (nil stops it) and returns
// the view as it is at that moment, with nothing in between. end, when
// not nil, is called after the changes made under one hold of the write
// lock are all given to fn (those of one record, of a batch, or of the
// records between Hold and Release): a follower that keeps them together
// shows a batch whole.
func (v *View) FollowFrom(fn func(Change), end func()) iter.Seq[Change] {
	v.mu.Lock()
	v.follow, v.followEnd, v.told = fn, end, false
	topics := v.freezeLocked()
	v.mu.Unlock()
	return func(yield func(Change) bool) {
		for _, ft := range topics {
			ok := true
			ft.items.Ascend(func(it *viewItem) bool {
				if !it.placeholder() {
					c := it.change(ft.file, ft.name)
					c.item = it // for FileLoaded
					ok = yield(c)
				}
				return ok
			})
			if !ok {
				return
			}
		}
	}
}

// Digest is a SHA-256 over every entry of the view that serves a value or
// has a timeline, in (topic, key) order: a tombstone (or an expired value)
// without a timeline is left out, because nodes collect tombstones at
// their own moments (gc.go); a value a tombstone superseded on one node
// and not on another still shows. Two views that hold the same entries have the same
// digest, whatever order their records arrived in. Each entry is hashed as
//
//	topic len u16 | topic | key len u16 | key | tag len u16 | tag |
//	value len u32 | value | origin u64 | seq u64 | hlc u64 | tombstone u8
//
// and, for an entry with a time field only, effective_at u64 | expires
// u64 | flags u8 (little endian), so no two different views hash the same
// bytes. A key with a timeline is hashed as what is in force at the moment
// of the digest (an expired value as a tombstone), then its pending
// records: the digest does not depend on when a node's timer ran. Digest
// works on a clone of the view and does not block Apply while it hashes.
func (v *View) Digest() [32]byte {
	topics, _ := v.freeze()
	h := sha256.New()
	var buf []byte
	until := int64(math.MaxInt64) // Digest keeps no Moment
	for _, ft := range topics {
		buf = ft.hash(h, buf, &until)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// Frozen is a read-only, copy-on-write clone of the view (Freeze), to
// be hashed without holding the view's lock.
type Frozen struct {
	topics []frozenTopic
	gen    uint64 // View.gen at the freeze
}

// Freeze clones the view (lazily: O(1) per topic) so that a caller can
// take the clone together with other state under its own lock and hash it
// afterwards (Frozen.Digests).
func (v *View) Freeze() Frozen {
	v.mu.Lock()
	topics := v.freezeLocked()
	gen := v.gen.Load()
	v.mu.Unlock()
	indexFrozen(topics)
	return Frozen{topics: topics, gen: gen}
}

// Moment is where digests of a frozen view (Frozen.Hash) hold: the view
// as it was (no change since) over the span of its wall clock from the
// freeze to the first instant after it at which one of the entries
// hashed would hash otherwise (a value's expiry, a scheduled record or a
// cancel coming into force). A digest is defined as of the moment it is
// taken; within its Moment a digest taken again hashes the same bytes,
// so a caller may keep one (View.Holds).
type Moment struct {
	gen         uint64 // View.gen at the freeze
	from, until int64  // [from, until) in the view's Unix ms
}

// Holds reports whether a digest taken within m is the view's digest now:
// nothing changed the view since and its clock is still within m.
func (v *View) Holds(m Moment) bool {
	if v.gen.Load() != m.gen {
		return false
	}
	now := v.now()
	return m.from <= now && now < m.until
}

// Digests is Digest for each topic of the frozen view alone.
func (f Frozen) Digests() map[string][32]byte {
	d, _ := f.Hash()
	return d
}

// Hash is Digests, and the Moment they hold for.
func (f Frozen) Hash() (map[string][32]byte, Moment) {
	out := make(map[string][32]byte, len(f.topics))
	m := Moment{gen: f.gen, from: math.MinInt64, until: math.MaxInt64}
	h := sha256.New()
	var buf []byte
	for _, ft := range f.topics {
		h.Reset()
		buf = ft.hash(h, buf, &m.until)
		var sum [32]byte
		h.Sum(sum[:0])
		out[ft.name] = sum
		m.from = ft.now
	}
	return out, m
}

// hash writes every entry of the topic into h, as Digest describes, and
// lowers *until to the first instant after ft.now at which an entry it
// hashed would hash otherwise (see Moment); buf is scratch space,
// returned for reuse.
func (ft frozenTopic) hash(h hash.Hash, buf []byte, until *int64) []byte {
	later := func(at int64) bool {
		if at > ft.now {
			*until = min(*until, at)
			return true
		}
		return false
	}
	ft.items.Ascend(func(it *viewItem) bool {
		tl := ft.times[it.key()]
		if tl == nil {
			if !it.isTomb() && (it.expiry() == 0 || later(it.expiry())) {
				buf = ft.hashItem(h, buf, it)
			}
			return true
		}
		// What is in force now, then what is pending: the same on every
		// node that holds the same records, whenever its timer ran.
		if w := tl.resolve(ft.now); w != nil {
			if w.expiry() != 0 && !later(w.expiry()) {
				w = w.expired()
			}
			buf = ft.hashItem(h, buf, w)
		}
		for _, r := range tl.recs {
			if (r.scheduled() || r.cancel()) && later(r.effAt()) {
				buf = ft.hashItem(h, buf, r)
			}
		}
		return true
	})
	return buf
}

// hashItem hashes one entry as Digest describes.
func (ft frozenTopic) hashItem(h hash.Hash, buf []byte, it *viewItem) []byte {
	buf = buf[:0]
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(ft.name)))
	buf = append(buf, ft.name...)
	buf = binary.LittleEndian.AppendUint16(buf, it.klen)
	buf = append(buf, it.key()...)
	buf = binary.LittleEndian.AppendUint16(buf, it.tlen)
	buf = append(buf, it.tag()...)
	buf = binary.LittleEndian.AppendUint32(buf, it.vlen)
	buf = it.appendValue(buf, ft.file, ft.name)
	buf = binary.LittleEndian.AppendUint64(buf, it.stamp.Origin)
	buf = binary.LittleEndian.AppendUint64(buf, it.stamp.Seq)
	buf = binary.LittleEndian.AppendUint64(buf, it.stamp.HLC)
	var tomb byte
	if it.isTomb() {
		tomb = 1
	}
	buf = append(buf, tomb)
	if it.timedFields() {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(it.scheduledAt()))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(it.expiry()))
		buf = append(buf, it.flags&^itemWide) // the kind of allocation is no part of the entry
	}
	h.Write(buf)
	return buf
}

// merge puts every entry of other into v by the usual rule (greatest
// (HLC, origin) wins) and returns how many changed v and the greatest HLC
// it saw. v gets copies of other's items (sharing their immutable data),
// since v may update its own in place.
func (v *View) Merge(other *View) (changed int, maxHLC uint64) {
	topics, _ := other.freeze()
	v.mu.Lock()
	defer v.unlock()
	for _, ft := range topics {
		tv := v.topics[ft.name]
		if tv == nil {
			tv = v.addTopic(ft.name, ft.items.Len())
		}
		ft.records(func(it *viewItem) bool {
			maxHLC = max(maxHLC, it.stamp.HLC)
			own := it.clone(ft.file, ft.name)
			if m, ok := markOf(ft.marks, ft.counts, &own.viewItem); ok {
				if v.markedLocked(tv, &own.viewItem, m) { // the version (or revival) an expiry change reached
					changed++
				}
			} else if old, te := tv.lookup(own.key()); v.applyLocked(tv, old, te, &own.viewItem) {
				changed++
			}
			return true
		})
		for k, c := range ft.counts {
			tv.mergeCounter(k, c)
			if v.recount(tv, k) {
				changed++
			}
		}
	}
	return changed, maxHLC
}
