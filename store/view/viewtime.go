package view

import (
	"encoding/binary"
	"math/bits"
	"sort"
	"time"
	"unsafe"
)

// Time in the view (see "Time" in DESIGN.md). A key's records are ordered
// by (effective time, HLC, origin); the one in force at t is the greatest
// that is not cancelled and is effective by t: an ordinary write from the
// moment the node has it, a scheduled one from its effective time on. A
// key that has only ordinary writes keeps the greatest alone, as before.
// A key with a scheduled record or a cancel keeps a timeline: its records
// from the greatest ordinary write on (nothing voids an ordinary write, so
// nothing below it can be in force again), pending ones and cancels
// included. A point read takes the entry while it is known to be in force
// (View.current) and otherwise resolves the timeline at the instant of
// the read; RunTimes settles the entry at each instant, for the followers
// and the listings.

// timeline is the records of one key that are still needed, ascending in
// (eff, HLC, origin) order. Once a frozen copy of the view may hold it
// (its epoch is not the view's) it is immutable, a change makes a new
// one, so that the copy can read it without the lock.
type timeline struct {
	recs []*viewItem
	// mark is two fields in one word, so that a timeline with its two
	// records inline and its slot takes 56 bytes (a 64-byte allocation,
	// not 80): the high 48 bits are the earliest instant queued for the
	// key (Unix ms, 0: none), kept across the timeline's versions, guarded
	// by the view's write lock and never read by frozen copies; the low 16
	// the view's epoch when the timeline was made (0: unknown), which says
	// that no frozen clone holds it, so that put may replace a record of
	// it in place.
	mark uint64
	// inline holds recs when they are two or fewer (a value in force and
	// one pending, the usual case): one allocation for the timeline.
	inline [2]*viewItem
	// slot is the timeline's index in its topic's list (topicView.tls)
	// while it is the key's. Guarded by the view's write lock, never read
	// by frozen copies.
	slot int
}

// key is the key of the timeline's records (it has one at least).
func (tl *timeline) key() string { return tl.recs[0].key() }

// timedEntry is what byKey holds for a key with a timeline: a copy of
// the key's entry, its timed flag set, so that a read of the entry while
// it is in force takes it from there as from a plain one (View.current);
// the entry itself (cur), the item the B-tree holds; and the timeline. A
// *viewItem whose timed is set points at the first field of one
// (timedOf), so the key's timeline is found through its entry, with no
// second map to look up or insert into on a write. It is only read
// under the view's lock: frozen copies read the B-tree's items and the
// topic's list of timelines, never a timedEntry.
type timedEntry struct {
	wideItem
	cur *viewItem
	tl  *timeline
}

// timedOf is the timedEntry of it, an entry whose timed is set.
func timedOf(it *viewItem) *timedEntry { return (*timedEntry)(unsafe.Pointer(it)) }

// timeline is te's timeline, nil for a nil te.
func (te *timedEntry) timeline() *timeline {
	if te == nil {
		return nil
	}
	return te.tl
}

// set makes te show it, the key's entry from now on.
func (te *timedEntry) set(it *viewItem) {
	te.wideItem.set(it)
	te.timed = true
	te.cur = it
}

func (tl *timeline) queued() int64      { return int64(tl.mark >> 16) }
func (tl *timeline) setQueued(at int64) { tl.mark = uint64(at)<<16 | tl.mark&0xffff }
func (tl *timeline) epoch() uint16      { return uint16(tl.mark) }
func (tl *timeline) setEpoch(e uint16)  { tl.mark = tl.mark&^0xffff | uint64(e) }

// newTimeline is an empty timeline with room for n records.
func newTimeline(n int, queued int64) *timeline {
	tl := &timeline{}
	tl.init(n, queued)
	return tl
}

// init makes tl, a zero timeline, an empty one with room for n records.
func (tl *timeline) init(n int, queued int64) {
	tl.setQueued(queued)
	if n <= len(tl.inline) {
		tl.recs = tl.inline[:0]
	} else {
		tl.recs = make([]*viewItem, 0, n)
	}
}

// firstTimeline is a key's first timeline made together with the record
// that made it (View.putFirst): one 128-byte allocation instead of two of
// 64, the same bytes. firstTimelineHeld also holds the placeholder that
// holds the key while nothing is in force (176 bytes, not three
// allocations); once the record is in force the placeholder's 48 bytes
// stay with the timeline until the key's next timeline replaces it.
// Of another size class than the entries, so that these stay together in
// memory whatever is scheduled between them (a read of a key with a value
// pending misses less). The key's timedEntry, which a read takes, is an
// allocation of its own for the same reason: inside the block, a Get of a
// key of a sale was +24% (p=0.04, 6 rounds taking turns, loaded) over
// the entries lying together, and a sale's apply did not gain (the
// 80-byte timedEntries lie together in their own size class).
type firstTimeline struct {
	tl  timeline
	rec wideItem
}

type firstTimelineHeld struct {
	tl   timeline
	rec  wideItem
	hold viewItem
}

// with is the timeline with it added; false when it changes nothing (it
// holds it already, or a greater record of the same kind and instant).
//
// Of the scheduled values of one instant only the greatest can be in
// force (a cancel that voids it voids the smaller ones too), and of the
// cancels of one instant only the greatest matters: the others are
// dropped, so a key scheduled again and again for one instant keeps two
// records there, not one a write, whatever order they came in.
func (tl *timeline) with(it *viewItem) (*timeline, bool) {
	ntl, added := withRecord(tl.recs, tl.queued(), it, nil)
	if !added {
		return tl, false
	}
	return ntl, true
}

// withRecord is timeline.with on the records have (nil and false when
// it changes nothing), so that a key's first timeline is made without
// one for its entry alone. It fills ntl, a zero timeline, when not nil,
// and a new one otherwise.
func withRecord(have []*viewItem, queued int64, it *viewItem, ntl *timeline) (*timeline, bool) {
	i := sort.Search(len(have), func(i int) bool { return !it.after(have[i]) })
	if i < len(have) && !have[i].after(it) {
		return nil, false // the same message again
	}
	same := func(r *viewItem) bool {
		return r.effAt() == it.effAt() && r.cancel() == it.cancel() && r.scheduled() == it.scheduled()
	}
	timed := it.scheduled() || it.cancel()
	n := len(have) + 1
	if timed {
		for _, r := range have[i:] {
			if r.effAt() != it.effAt() {
				break
			}
			if same(r) {
				return nil, false // a greater one of the same instant and kind
			}
		}
		for _, r := range have[:i] {
			if same(r) {
				n-- // a smaller one of the same kind goes
			}
		}
	}
	if ntl == nil {
		ntl = &timeline{}
	}
	ntl.init(n, queued)
	for _, r := range have[:i] {
		if !timed || !same(r) {
			ntl.recs = append(ntl.recs, r)
		}
	}
	ntl.recs = append(ntl.recs, it)
	ntl.recs = append(ntl.recs, have[i:]...)
	return ntl, true
}

// replaceable is the index of the record that it, a scheduled record or
// a cancel, supersedes, when that one is of its instant and kind and
// right below it (a key scheduled again for one instant): with would
// give the timeline with it in that record's place. -1 otherwise, and
// for a nil timeline.
func (tl *timeline) replaceable(it *viewItem) int {
	if tl == nil || !it.scheduled() && !it.cancel() {
		return -1
	}
	have := tl.recs
	i := sort.Search(len(have), func(i int) bool { return !it.after(have[i]) })
	if i == 0 || i < len(have) && !have[i].after(it) {
		return -1
	}
	// with keeps one record of an instant and kind: with a smaller one
	// below it there is no greater one.
	if r := have[i-1]; r.effAt() != it.effAt() || r.cancel() != it.cancel() || r.scheduled() != it.scheduled() {
		return -1
	}
	return i - 1
}

// voided reports whether the record at i is cancelled: it is scheduled
// and a cancel of its effective time comes after it.
func (tl *timeline) voided(i int) bool {
	r := tl.recs[i]
	if !r.scheduled() {
		return false
	}
	for _, c := range tl.recs[i+1:] {
		if c.effAt() != r.effAt() {
			break
		}
		if c.cancel() {
			return true
		}
	}
	return false
}

// inForce reports whether the record at i may be in force at now.
func (tl *timeline) inForce(i int, now int64) bool {
	r := tl.recs[i]
	return !r.cancel() && (!r.scheduled() || r.effAt() <= now) && !tl.voided(i)
}

// resolve is the record in force at now, nil when none is.
func (tl *timeline) resolve(now int64) *viewItem {
	for i := len(tl.recs) - 1; i >= 0; i-- {
		if tl.inForce(i, now) {
			return tl.recs[i]
		}
	}
	return nil
}

// prune drops the records below the greatest ordinary write, which is in
// force from the moment it is here and is never voided. It returns nil
// when that write is all that is left (the key needs no timeline then).
func (tl *timeline) prune() *timeline {
	floor := -1
	for i := len(tl.recs) - 1; i >= 0; i-- {
		if r := tl.recs[i]; !r.scheduled() && !r.cancel() {
			floor = i
			break
		}
	}
	switch {
	case floor < 0 || floor == 0 && len(tl.recs) > 1:
		return tl
	case floor == len(tl.recs)-1:
		return nil
	}
	ntl := newTimeline(len(tl.recs)-floor, tl.queued())
	ntl.recs = append(ntl.recs, tl.recs[floor:]...)
	return ntl
}

// next is the next instant after now at which the key changes by itself
// (a scheduled record takes effect, the value in force w expires); 0 for
// none. tl may be nil.
func (tl *timeline) next(now int64, w *viewItem) int64 {
	var next int64
	if w != nil && w.expiry() > now {
		next = w.expiry()
	}
	if tl != nil {
		for _, r := range tl.recs {
			if r.scheduled() && r.effAt() > now && (next == 0 || r.effAt() < next) {
				next = r.effAt()
			}
		}
	}
	return next
}

// instant is a moment at which an entry may change by itself: 16 bytes
// and no pointer, so that the garbage collector never scans the queue
// (100,000 keys with an expiry queue 100,000 instants) and a queued
// instant keeps nothing alive (it held the key's first data, value
// included, while the key was written again and again). ref is where the
// key and its topic are in the view's keyArena.
type instant struct {
	at  int64 // Unix ms
	ref uint64
}

// instants is a min-heap of instants by at, typed (a push does not box
// its instant as container/heap would) and in pages of instantPage: it
// grows a page at a time, so that a queue filling up neither copies what
// it holds (append would, again and again: at 10 million keys 160 MB
// under the write lock) nor allocates more than it holds.
type instants struct {
	pages []*[instantPage]instant
	n     int
}

// instantPage is the instants of a page: 64 KiB.
const instantPage = 4096

func (h *instants) len() int { return h.n }

// at is the instant at i < h.len().
func (h *instants) at(i int) *instant { return &h.pages[i/instantPage][i%instantPage] }

// first is the earliest instant's at; h is not empty.
func (h *instants) first() int64 { return h.pages[0][0].at }

// due reports whether an instant at or before t is queued.
func (h *instants) due(t int64) bool { return h.n > 0 && h.pages[0][0].at <= t }

// push adds in.
func (h *instants) push(in instant) {
	if h.n == len(h.pages)*instantPage {
		h.pages = append(h.pages, new([instantPage]instant))
	}
	i := h.n
	h.n++
	*h.at(i) = in
	for i > 0 {
		p := (i - 1) / 2
		pi, ci := h.at(p), h.at(i)
		if pi.at <= ci.at {
			break
		}
		*pi, *ci = *ci, *pi
		i = p
	}
}

// pop removes and returns the earliest instant; h is not empty. It
// frees a page once two are empty, not at each crossing of a page's end.
func (h *instants) pop() instant {
	top := *h.at(0)
	h.n--
	n := h.n
	*h.at(0) = *h.at(n)
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h.at(l).at < h.at(m).at {
			m = l
		}
		if r := l + 1; r < n && h.at(r).at < h.at(m).at {
			m = r
		}
		if m == i {
			break
		}
		mi, ii := h.at(m), h.at(i)
		*mi, *ii = *ii, *mi
		i = m
	}
	if k := len(h.pages); n <= (k-2)*instantPage {
		h.pages[k-1] = nil
		h.pages = h.pages[:k-1]
	}
	return top
}

// keyArena holds the keys of the queued instants, each as topic index
// u32 | key length u16 | key, in slots of bytes without pointers. Slots
// of one size class are cut from chunks of 64 KiB, and the slot of an
// instant that came is the next one its class gives out (a free list
// through the slots themselves): the arena holds about what its instants
// held at most since the queue was last empty, whatever order they come
// in, and never copies what it holds. An instant's ref is its chunk's
// index (high 32 bits) and its slot's offset there. A key is read in
// place (get) only until its instant is dropped.
type keyArena struct {
	chunks  [][]byte
	classes [arenaClasses]struct {
		cur  int    // chunk being cut, plus 1 (0: none)
		free uint64 // first free slot's ref, plus 1 (0: none)
	}
	live int // entries held
	// spare is the chunk kept when the queue empties, so that a queue
	// that comes and goes (a key written with an expiry now and then)
	// does not make a chunk each time.
	spare []byte
}

// arenaChunk is the size of a chunk: 1,600 slots of 40 bytes (a 30-byte key).
const arenaChunk = 64 << 10

// arenaClasses is the number of slot sizes (slotClass).
const arenaClasses = 32 + 9

// slotClass is the size class of an entry of n bytes (7 to 6+65,535) and
// its slot's size: 8-byte steps to 256 bytes, powers of two above. A slot
// holds a free-list link (8 bytes) once free.
func slotClass(n int) (class, size int) {
	if n <= 256 {
		c := (n + 7) / 8
		return c - 1, c * 8
	}
	b := bits.Len(uint(n - 1))
	return 32 + b - 9, 1 << b
}

// add stores (topic, key) and returns its ref.
func (a *keyArena) add(topic uint32, key string) uint64 {
	c, size := slotClass(6 + len(key))
	cl := &a.classes[c]
	var ref uint64
	if cl.free != 0 {
		ref = cl.free - 1
		cl.free = binary.LittleEndian.Uint64(a.slot(ref))
	} else {
		if cl.cur == 0 || len(a.chunks[cl.cur-1])+size > cap(a.chunks[cl.cur-1]) {
			chunk := a.spare
			if a.spare = nil; size > arenaChunk || chunk == nil {
				chunk = make([]byte, 0, max(size, arenaChunk))
			}
			a.chunks = append(a.chunks, chunk)
			cl.cur = len(a.chunks)
		}
		i := cl.cur - 1
		off := len(a.chunks[i])
		a.chunks[i] = a.chunks[i][:off+size]
		ref = uint64(i)<<32 | uint64(off)
	}
	sl := a.slot(ref)
	binary.LittleEndian.PutUint32(sl, topic)
	binary.LittleEndian.PutUint16(sl[4:], uint16(len(key)))
	copy(sl[6:], key)
	a.live++
	return ref
}

// slot is the bytes from ref's slot on.
func (a *keyArena) slot(ref uint64) []byte { return a.chunks[ref>>32][uint32(ref):] }

// get is the topic index and the key of ref. The key's bytes are the
// arena's: the caller does not keep them past drop.
func (a *keyArena) get(ref uint64) (topic uint32, key string) {
	sl := a.slot(ref)
	klen := int(binary.LittleEndian.Uint16(sl[4:]))
	return binary.LittleEndian.Uint32(sl), unsafe.String(&sl[6], klen)
}

// drop gives ref's slot back, its instant come. With nothing left the
// arena is emptied but for a spare chunk.
func (a *keyArena) drop(ref uint64) {
	sl := a.slot(ref)
	c, _ := slotClass(6 + int(binary.LittleEndian.Uint16(sl[4:])))
	binary.LittleEndian.PutUint64(sl, a.classes[c].free)
	a.classes[c].free = ref + 1
	if a.live--; a.live == 0 {
		spare := a.chunks[0][:0]
		if cap(spare) != arenaChunk {
			spare = nil
		}
		*a = keyArena{spare: spare}
	}
}

// queue adds the instant at which (tv, key) may change by itself, and
// wakes RunTimes when it comes before the instant its timer is set for
// (only then: a schedule of many keys for one instant wakes it once). The
// caller holds the write lock.
func (v *View) queue(at int64, tv *topicView, key string) {
	v.times.push(instant{at: at, ref: v.timeKeys.add(tv.index, key)})
	if v.timerAt == 0 || at < v.timerAt {
		v.timerAt = at
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
}

// Pending lists the records of topic not in force yet (scheduled ones
// whose instant is ahead, and cancels of such instants), by key then
// effective time, for keys after after, at most limit keys (<= 0: all).
func (v *View) Pending(topic, after string, limit int) []PendingRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	tv := v.topics[topic]
	if tv == nil || len(tv.tls) == 0 {
		return nil
	}
	now := v.now()
	tls := make([]*timeline, 0, len(tv.tls))
	for _, tl := range tv.tls {
		if tl.key() > after {
			tls = append(tls, tl)
		}
	}
	sort.Slice(tls, func(i, j int) bool { return tls[i].key() < tls[j].key() })
	var out []PendingRecord
	n := 0
	for _, tl := range tls {
		before := len(out)
		if out = tl.pending(tl.key(), now, out); len(out) > before {
			if n++; limit > 0 && n >= limit {
				break
			}
		}
	}
	return out
}

// PendingKey lists the records of (topic, key) not in force yet, by
// effective time.
func (v *View) PendingKey(topic, key string) []PendingRecord {
	v.mu.RLock()
	defer v.mu.RUnlock()
	tv := v.topics[topic]
	if tv == nil {
		return nil
	}
	_, te := tv.lookup(key)
	if te == nil {
		return nil
	}
	return te.tl.pending(key, v.now(), nil)
}

// pending appends the timeline's records not in force at now to out,
// but those a cancel voids.
func (tl *timeline) pending(key string, now int64, out []PendingRecord) []PendingRecord {
	for i, r := range tl.recs {
		if (r.scheduled() || r.cancel()) && r.effAt() > now && !tl.voided(i) {
			out = append(out, PendingRecord{Key: key, Entry: r.entry(nil, "", false), Delete: r.flags&itemTomb != 0, Cancel: r.cancel()})
		}
	}
	return out
}

// PendingRecord is a record of the view not in force yet.
type PendingRecord struct {
	Key string
	// Entry is the record: its value, tag, stamp, effective time and
	// expiry. Value is shared with the view: do not modify it.
	Entry
	// Delete: a scheduled tombstone. Cancel: a cancel of the key's
	// scheduled records at its EffectiveAt.
	Delete, Cancel bool
}

// timePoll bounds how long RunTimes sleeps while an instant is due, so
// that an injected clock that jumps is noticed soon.
const timePoll = 20 * time.Millisecond

// settleBatch bounds the entries settled under one hold of the lock.
const settleBatch = 256

// RunTimes settles each entry at its instants (expiries, scheduled
// records taking effect) until done closes: it drops an expired value,
// moves a scheduled record into the entry, and tells the follower.
func (v *View) RunTimes(done <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := v.settleDue()
		if wait < time.Hour {
			wait = min(wait, timePoll)
		}
		t.Reset(wait)
		select {
		case <-done:
			return
		case <-t.C:
		case <-v.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}

// settleDue settles every entry whose instant has come, a batch at a time
// under the lock, and returns how long until the next instant (an hour
// when there is none).
func (v *View) settleDue() time.Duration {
	for {
		v.mu.Lock()
		now := v.clock()
		settled := v.times.due(now)
		for n := 0; v.times.due(now) && n < settleBatch; n++ {
			in := v.times.pop()
			topic, key := v.timeKeys.get(in.ref)
			tv := v.topicList[topic]
			old, te := tv.lookup(key)
			v.timeKeys.drop(in.ref)
			// A key without an entry has no timeline either (a timeline's
			// key has an entry): nothing to settle. The entry's key is
			// the one settle keeps, not the arena's bytes.
			if old != nil {
				v.settle(tv, old.key(), old, te, te.timeline(), now, CauseEffective)
			}
		}
		wait := time.Hour
		more := false
		v.timerAt = 0
		if v.times.len() > 0 {
			first := v.times.first()
			wait = time.Duration(first-now) * time.Millisecond
			more = first <= now
			v.timerAt = first
		}
		if settled {
			v.unlock()
		} else {
			v.release() // the timer's poll: nothing came
		}
		if !more {
			return wait
		}
	}
}

// timeEventsKept is how many of the last time events TimeEvents can
// still return, at least.
const timeEventsKept = 1 << 16

// timeEvents are the last changes with a cause (an expiry, a scheduled
// record taking effect), numbered from 1: events[i] is number first+i.
// They grow as they come (no 9 MB ring made at the first one) and drop the
// oldest half past twice timeEventsKept. Guarded by the view's lock.
type timeEvents struct {
	events []Change
	first  uint64
	// notify, when set, is called after each event (under the lock).
	notify func()
}

// next is the number the next event gets.
func (e *timeEvents) next() uint64 {
	if e.first == 0 {
		return 1
	}
	return e.first + uint64(len(e.events))
}

func (e *timeEvents) add(c Change) {
	if c.Cause == "" {
		return
	}
	if e.first == 0 {
		e.first = 1
	}
	if len(e.events) >= 2*timeEventsKept {
		n := copy(e.events, e.events[len(e.events)-timeEventsKept:])
		clear(e.events[n:])
		e.events = e.events[:n]
		e.first += 2*timeEventsKept - timeEventsKept
	}
	e.events = append(e.events, c)
	if e.notify != nil {
		e.notify()
	}
}

// OnTimeEvent makes fn run after each time event, under the view's lock:
// it must be quick (the store wakes its followers).
func (v *View) OnTimeEvent(fn func()) {
	v.mu.Lock()
	v.events.notify = fn
	v.mu.Unlock()
}

// TimeEvents calls fn for each time event (a change with a Cause) from
// number from on, and returns the number of the next one. Pass 0 to start
// at the next event to come. lost counts the events between from and the
// first one still kept, which a follower that fell that far behind
// missed. fn runs under the view's read lock and must not call the view;
// a Change's Value is shared with the view.
func (v *View) TimeEvents(from uint64, fn func(Change)) (next, lost uint64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e := &v.events
	if from == 0 {
		return e.next(), 0
	}
	if e.first == 0 {
		return max(from, 1), 0
	}
	if from < e.first {
		lost, from = e.first-from, e.first
	}
	for ; from < e.next(); from++ {
		fn(e.events[from-e.first])
	}
	return e.next(), lost
}
