package view

import (
	"maps"
	"strings"

	"github.com/cachecast/cachecast/store/record"
)

// Expiry changes (record.KindExpiry; "Time" in DESIGN.md). EXPIRE,
// PERSIST and the like change the expiry of one version of a key, the one
// the node that took the command held, and of no other: the record names
// that version by its stamp and carries its tag and value, so that it
// can only ever give that version the new expiry. Applied here:
//
//   - to the version in force (or expired) here: the entry gets the new
//     expiry, its stamp and value unchanged;
//   - to a version not here yet (after the entry by the rule): the
//     record brings the version itself, with the new expiry, as the
//     version's own record would (which, when it comes, is the same
//     message again and changes nothing);
//   - to a version superseded here (before the entry): nothing.
//
// Several changes of one version: the greatest own (HLC, origin) wins.
// The winner's stamp is kept per key (topicView.marks, only for keys
// whose version an expiry change reached, until an ordinary write
// supersedes it), so that an older change that comes later loses, on
// every node and after a restart (snapshot version 3 holds the marks). A key with a timeline (a scheduled record, a cancel) has the
// version's record replaced in its timeline, so that every instant
// settles it with the new expiry.
//
// An expiry change of a counter's revival (record version 6) names the
// absence the revival serves, the version's and its gone (counter.go),
// and applies to that absence only, by the counters' order
// (revivalExpiryLocked): to the absence counted here, it gives the
// revival the new expiry; to one after it (its increments have not come
// yet, or the key counts on the version or an earlier absence), it
// starts that absence's counter, from 0, and serves its revival with the
// expiry, as the node that took the command did; to one before it (the
// key counts on a later absence or a later version), it does nothing.
// A change of a version whose absence the key's last change reached
// loses (the absence comes after the version), whatever its stamp. A
// version 3 change of a revival, which builds before version 6 write,
// names the version only and is applied as a change of the version.

// expiryMark is the expiry change in force for a key's version: the
// version's stamp and the change's own (HLC, origin), which a later
// change of that version must beat.
type expiryMark struct {
	target      record.Stamp
	hlc, origin uint64
	// absent says that the change was of the revival of the absence
	// after target, deleted or expired at gone (record version 6;
	// snapshot version 6 holds it).
	absent bool
	gone   int64
}

// ofAbsence reports whether m is a change of the revival of the absence
// a (counter.go).
func (m expiryMark) ofAbsence(a *counter) bool {
	return m.absent && m.target == a.target && m.gone == a.gone
}

// beatenBy reports whether the change stamped (hlc, origin) wins over m.
func (m expiryMark) beatenBy(hlc, origin uint64) bool {
	return beats(hlc, origin, record.Stamp{HLC: m.hlc, Origin: m.origin})
}

// setMark records m for key k. A frozen copy shares the map (see
// freezeLocked): it is copied before the first write after a freeze.
// The caller holds the write lock.
func (tv *topicView) setMark(k string, m expiryMark) {
	if tv.marks == nil || tv.marksShared {
		tv.marks = maps.Clone(tv.marks)
		if tv.marks == nil {
			tv.marks = make(map[string]expiryMark)
		}
		tv.marksShared = false
	}
	tv.marks[k] = m
}

// dropMark forgets key k's expiry mark: an ordinary write superseded
// its version (nothing voids an ordinary write, so the version never
// comes back), or its tombstone is collected (a change that comes later
// is as late as any record after the grace). The caller holds the
// write lock.
func (tv *topicView) dropMark(k string) {
	if _, ok := tv.marks[k]; !ok {
		return
	}
	if tv.marksShared {
		tv.marks = maps.Clone(tv.marks)
		tv.marksShared = false
	}
	delete(tv.marks, k)
}

// ExpiryChange is the message that gives e, the version of (topic, key)
// this node holds, the expiry at (0: none) and changes nothing else: an
// expiry change bound to e's stamp (record.KindExpiry), which no node
// applies to any other version, so it never brings an older value back
// (DESIGN.md, "Expiry changes"). It carries e's value and tag as that
// version's (a counter's base, not its count), never as a write of its
// own. For a counter's revival (e.Absence) it names the absence the
// revival serves (record version 6), so that no node gives the expiry to
// another absence of the version, nor to the version itself. Its
// strings and bytes are its own.
func ExpiryChange(topic, key string, e Entry, at int64) record.Message {
	v := e.Value
	if e.Base != nil {
		v = e.Base
	}
	m := record.Message{Topic: strings.Clone(topic), Key: strings.Clone(key), Tag: strings.Clone(e.Tag),
		Value: append([]byte(nil), v...), EffectiveAt: e.EffectiveAt, ExpiresAt: at, ExpiryOf: e.Stamp}
	if e.Absence != nil {
		m.ExpiryAbsent, m.Gone = true, e.Absence.Gone
	}
	return m
}

// markOf is the expiry mark of it, an entry of another view whose marks
// and counters are marks and counts (a peer's, for Merge and
// ApplySnapshot), when that mark gave it its expiry: the mark names its
// version, and, for a change of a revival, the key still counts on the
// absence the change is of. A revival of a later absence has the same
// stamp but not the change's expiry (counted), which markedLocked would
// take for the change's: the entry goes by the rule then, and the
// peer's counter of the later absence, merged after it, serves it.
func markOf(marks map[string]expiryMark, counts map[string]*counter, it *viewItem) (expiryMark, bool) {
	m, ok := marks[it.key()]
	if !ok || m.target != it.stamp {
		return m, false
	}
	if c := counts[it.key()]; m.absent && c != nil && c.absent && c.target == m.target && c.gone != m.gone {
		return m, false
	}
	return m, true
}

// applyExpiry is Apply of an expiry change r.
func (v *View) applyExpiry(r record.Record) bool {
	it := recordItemValue(r)
	st := r.Stamp()
	v.mu.Lock()
	defer v.unlock()
	return v.markedLocked(v.topicLocked(r.Topic()), &it.viewItem, expiryMark{target: it.stamp, hlc: st.HLC, origin: st.Origin, absent: r.Absent(), gone: r.Gone()})
}

// markedLocked applies the expiry change m whose item is it (its target
// version with the new expiry: a record's, recordItemValue, or the entry
// of a view or snapshot whose mark m is), of the revival of an absence
// (revivalExpiryLocked) or of a version (expiryLocked), and reports
// whether the entry in force changed. The caller holds the write lock.
func (v *View) markedLocked(tv *topicView, it *viewItem, m expiryMark) bool {
	if m.absent {
		return v.revivalExpiryLocked(tv, it, m.gone, m.hlc, m.origin)
	}
	return v.expiryLocked(tv, it, m.hlc, m.origin)
}

// revivalExpiryLocked applies an expiry change stamped (hlc, origin) of
// the revival of the absence after it's version, deleted or expired at
// gone (record version 6; it is the version with the new expiry and the
// base, recordItemValue), by the counters' order, and reports whether the
// entry in force changed. A key with a timeline takes the change as
// expiryLocked does. The caller holds the write lock.
func (v *View) revivalExpiryLocked(tv *topicView, it *viewItem, gone int64, hlc, origin uint64) bool {
	k := it.key()
	a := &counter{target: it.stamp, eff: it.effAt(), absent: true, gone: gone, base: []byte("0"), known: true}
	old, te := tv.lookup(k)
	c := tv.counts[k]
	if te.timeline() != nil {
		return v.expiryMarked(tv, it, hlc, origin, a)
	}
	switch m, marked := tv.marks[k]; {
	case c != nil && c.after(a):
		return false // an ended revival: a later absence or version counts
	case old != nil && !old.placeholder() && a.supersededBy(old):
		return false // a later version is in force
	case c == nil || !c.same(a):
		// Its increments have not come: the absence is counted from
		// here on, from 0 (or with the genesis' counts, see moved).
		if n := c.moved(a); n != nil {
			a = n
		}
		tv.setCount(k, a)
		c = a
	case marked && m.ofAbsence(a) && !m.beatenBy(hlc, origin):
		return false // an older change of this revival, or this one again
	}
	rv := c.revival(k, nil)
	rv.expires, rv.flags = it.expiry(), rv.flags|it.flags&itemScheduled
	// The mark first: counted, which install calls, keeps the expiry of
	// a revival of the marked absence only.
	tv.setMark(k, expiryMark{target: it.stamp, hlc: hlc, origin: origin, absent: true, gone: gone})
	if old == nil {
		v.put(tv, nil, nil, copyItem(&rv.viewItem))
	} else {
		v.reexpire(tv, old, &rv.viewItem)
	}
	return true
}

// expiryMarked is expiryLocked of a change of the revival of the
// absence a, marked as one.
func (v *View) expiryMarked(tv *topicView, it *viewItem, hlc, origin uint64, a *counter) bool {
	k := it.key()
	if m, ok := tv.marks[k]; ok && m.absent && m.target == a.target {
		if m.gone > a.gone || m.gone == a.gone && !m.beatenBy(hlc, origin) {
			return false // a change of a later absence, or an older one of this
		}
		tv.dropMark(k) // a change of an earlier absence: this one wins
	}
	changed := v.expiryLocked(tv, it, hlc, origin)
	if m, ok := tv.marks[k]; ok && m.target == it.stamp && m.hlc == hlc && m.origin == origin {
		m.absent, m.gone = true, a.gone
		tv.setMark(k, m)
	}
	return changed
}

// expiryLocked applies an expiry change stamped (hlc, origin) whose item
// is it: its target version with the new expiry (recordItemValue). It
// reports whether the entry in force changed. The caller holds the write
// lock.
func (v *View) expiryLocked(tv *topicView, it *viewItem, hlc, origin uint64) bool {
	k := it.key()
	if m, ok := tv.marks[k]; ok && m.target == it.stamp && (m.absent || !m.beatenBy(hlc, origin)) {
		// An older change of this version, or this one again; or the
		// version's absence has a change.
		return false
	}
	old, te := tv.lookup(k)
	tl := te.timeline()
	var changed bool
	switch {
	case tl != nil:
		var ok bool
		if changed, ok = v.expiryTimed(tv, old, te, tl, it); !ok {
			return false
		}
	case old == nil || it.after(old):
		// The version has not come yet: it comes now, with its expiry
		// (a scheduled one makes the key's timeline).
		heap := copyItem(it)
		changed = v.put(tv, old, nil, heap)
	case old.stamp == it.stamp && old.effAt() == it.effAt():
		v.reexpire(tv, old, it)
		changed = true
	default:
		return false // a version superseded here: nothing
	}
	tv.setMark(k, expiryMark{target: it.stamp, hlc: hlc, origin: origin})
	return changed
}

// reexpire makes it, the version of old (the key's entry, no timeline)
// with a new expiry, the key's entry. The caller holds the write lock.
func (v *View) reexpire(tv *topicView, old, it *viewItem) {
	k := it.key()
	if it.expiry() != 0 {
		if now := v.clock(); it.expiry() <= now {
			it = it.expired()
			if !old.isTomb() {
				v.dropped.Add(1)
			}
		} else {
			v.queue(it.expiry(), tv, k)
		}
	}
	heap := copyItem(it)
	heap.epoch = v.epoch
	v.install(tv, k, old, heap, nil, "")
}

// expiryTimed is expiryLocked for a key with a timeline tl (te's; old
// the entry): the version's record in the timeline is replaced by it, or
// it joins the timeline when the version has not come yet. ok is false
// when the version is superseded here (nothing done).
func (v *View) expiryTimed(tv *topicView, old *viewItem, te *timedEntry, tl *timeline, it *viewItem) (changed, ok bool) {
	heap := copyItem(it)
	heap.epoch = v.epoch
	for i, r := range tl.recs {
		if r.stamp == it.stamp && r.effAt() == it.effAt() {
			ntl := newTimeline(len(tl.recs), tl.queued())
			ntl.recs = append(ntl.recs, tl.recs...)
			ntl.recs[i] = heap
			ntl.setEpoch(v.epoch)
			return v.settle(tv, it.key(), old, te, ntl, v.clock(), ""), true
		}
	}
	if old != nil && !old.placeholder() && !it.after(old) {
		return false, false // below what is in force: superseded
	}
	return v.put(tv, old, te, heap), true
}

// KeyedEntry is a key of a topic and its entry.
type KeyedEntry struct {
	Key string
	// Entry's Value is shared with the view: do not modify it.
	Entry
}

// Expiring walks the keys of topic that sort after after, in byte order,
// at most scan of them, and returns those whose value in force now
// expires, with how many keys it walked and the key to pass as after to
// go on ("" once the walk reached the topic's end). It holds the read
// lock for its walk only: scan bounds what one call costs the writers.
func (v *View) Expiring(topic, after string, scan int) (keys []KeyedEntry, walked int, next string) {
	probe := &viewItem{body: keyBody(after), klen: uint16(min(len(after), record.MaxKeyBytes))}
	v.mu.RLock()
	defer v.mu.RUnlock()
	tv := v.topics[topic]
	if tv == nil {
		return nil, 0, ""
	}
	now := v.now()
	at := func() int64 { return now }
	last, more := "", false
	tv.order.AscendGreaterOrEqual(probe, func(it *viewItem) bool {
		k := it.key()
		if k <= after {
			return true
		}
		if walked == scan {
			more = true
			return false
		}
		walked++
		last = k
		if cur := v.current(tv, k, at); cur != nil && cur.expiry() != 0 {
			keys = append(keys, KeyedEntry{Key: strings.Clone(k), Entry: cur.entry(v.file, topic, false)})
		}
		return true
	})
	if more {
		next = strings.Clone(last)
	}
	return keys, walked, next
}
