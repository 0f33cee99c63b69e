package view

import "github.com/cachecast/cachecast/store/record"

// Tombstone collection ("Tombstones" in DESIGN.md has the whole argument).
//
// A tombstone is kept so that an older write of its key, arriving late,
// loses to it. Once every live node holds the tombstone (their vectors
// cover its origin's seq) and a grace period has passed since its stamp,
// the tombstone is dropped from the view, and so from every later
// snapshot: a late older write can then only come from a node that has
// been out of contact for longer than the grace, and such a node starts
// over from a peer's snapshot instead of offering its old view or log
// (the daemon's --tombstone-grace). Within the grace a tombstone always
// wins, whatever the vectors say.
//
// Nodes collect at their own moments, so whether a node still holds a
// tombstone is not part of the digest: Digest leaves out every entry that
// serves no value and has no timeline (see Digest). A key with a timeline
// is never collected: its records are settled by the timer.

// collectChunk bounds how many tombstones one hold of the write lock
// drops, so that a writer waits for a short walk, not a whole collection.
const collectChunk = 1024

// CollectTombstones drops the tombstones stamped before cutoff (Unix
// milliseconds of the stamp's HLC, and of the expiry for an expired value)
// that covered says every live node holds, and returns how many it
// dropped. The candidates are found on a frozen clone without the lock;
// the write lock is taken per chunk, and a tombstone replaced meanwhile is
// left alone.
func (v *View) CollectTombstones(cutoff int64, covered func(origin, seq uint64) bool) int {
	topics, _ := v.freeze()
	type cand struct {
		topic string
		it    *viewItem
	}
	var cands []cand
	for _, ft := range topics {
		ft.items.Ascend(func(it *viewItem) bool {
			if collectable(it, ft.times[it.key()] != nil, cutoff) && covered(it.stamp.Origin, it.stamp.Seq) {
				cands = append(cands, cand{ft.name, it})
			}
			return true
		})
	}
	n := 0
	for len(cands) > 0 {
		chunk := cands[:min(len(cands), collectChunk)]
		cands = cands[len(chunk):]
		v.mu.Lock()
		for _, c := range chunk {
			tv := v.topics[c.topic]
			// A timeline that came since the clone put a timedEntry in
			// byKey, not c.it.
			if tv == nil || tv.byKey.get(c.it.key()) != c.it {
				continue // written again since the clone
			}
			tv.byKey.delete(c.it.key())
			tv.dropMark(c.it.key())
			tv.setCount(c.it.key(), nil) // a counter of the expired version, or of its absence expired
			tv.writes++
			tv.order.Delete(c.it)
			if c.it.timedFields() {
				v.timed--
			}
			n++
		}
		v.gen.Add(1) // Digest leaves these entries out; moved all the same, so that Holds rests on no such proof
		v.mu.Unlock()
	}
	v.collected.Add(uint64(n))
	v.RaiseHorizon(cutoff)
	return n
}

// RaiseHorizon makes at (Unix ms) the view's horizon, when it is later
// than the one it has: the instant before which this node may have
// collected tombstones, which a counter increment of a key it holds
// nothing of names (see Absence). CollectTombstones raises it to its
// cutoff; the daemon raises it to now less the grace when it starts, as
// its peers may have collected before then what its snapshot lacks.
func (v *View) RaiseHorizon(at int64) {
	for h := v.horizon.Load(); h < at && !v.horizon.CompareAndSwap(h, at); h = v.horizon.Load() {
	}
}

// collectable reports whether it is a tombstone (or an expired value)
// older than cutoff, of a key without a timeline.
func collectable(it *viewItem, timeline bool, cutoff int64) bool {
	if timeline || it.placeholder() || it.cancel() || !it.isTomb() {
		return false
	}
	return record.HLCMillis(it.stamp.HLC) < cutoff && it.expiry() < cutoff && it.effAt() < cutoff
}

// Collected counts the tombstones CollectTombstones has dropped.
func (v *View) Collected() uint64 { return v.collected.Load() }

// Tombstones is the number of entries that serve no value: tombstones,
// expired values, and the placeholders of keys with only pending records.
func (v *View) Tombstones() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for _, tv := range v.topics {
		n += tv.byKey.len() - tv.live
	}
	return n
}
