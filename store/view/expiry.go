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

// expiryMark is the expiry change in force for a key's version: the
// version's stamp and the change's own (HLC, origin), which a later
// change of that version must beat.
type expiryMark struct {
	target      record.Stamp
	hlc, origin uint64
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

// applyExpiry is Apply of an expiry change r.
func (v *View) applyExpiry(r record.Record) bool {
	it := recordItemValue(r)
	st := r.Stamp()
	v.mu.Lock()
	defer v.unlock()
	return v.expiryLocked(v.topicLocked(r.Topic()), &it.viewItem, st.HLC, st.Origin)
}

// expiryLocked applies an expiry change stamped (hlc, origin) whose item
// is it: its target version with the new expiry (recordItemValue). It
// reports whether the entry in force changed. The caller holds the write
// lock.
func (v *View) expiryLocked(tv *topicView, it *viewItem, hlc, origin uint64) bool {
	k := it.key()
	if m, ok := tv.marks[k]; ok && m.target == it.stamp && !m.beatenBy(hlc, origin) {
		return false // an older change of this version, or this one again
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
			keys = append(keys, KeyedEntry{Key: strings.Clone(k), Entry: cur.entry(v.file, topic, false, 0)})
		}
		return true
	})
	if more {
		next = strings.Clone(last)
	}
	return keys, walked, next
}
