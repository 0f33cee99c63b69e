package view

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/store/record"
)

// Counters (record.KindCounter; "Counters" in DESIGN.md). INCR and its
// kin add to one version of a key, the one the node that took the
// command held, and to no other: the record names that version by its
// stamp and carries the increment. The view keeps, per key that an
// increment reached (topicView.counts, nil until the first), the counted
// version, that version's own value (the base) and the sum of each
// origin's increments with the last seq counted. The key's entry serves
// base + the sums: every node counts the same increments once each,
// whatever order they came in, so every node serves the same value.
//
//   - An increment of the version in force is counted, and the entry
//     gets the new value (same stamp, expiry and tag).
//   - An increment of a version not here yet (after the entry by the
//     rule) is counted and waits: when that version is put in force, by
//     its own record or an expiry change, its value is the base.
//   - An increment of a version older than the one counted or in force
//     does nothing: a later SET (or DEL, or a scheduled value in force)
//     resets the counter by the ordinary rule, on every node.
//
// Integers are summed as int64 (an overflow, which the node that took
// the command refuses, makes the sum a float on a node that meets it
// after convergence); a float increment (INCRBYFLOAT) makes the value a
// float. Floats are summed per origin in seq order and then over the
// origins in ascending order, so that every node adds them in the same
// order.

// counter is what a key's increments counted: an immutable value (a
// change makes a new one), so that a frozen copy may share it.
type counter struct {
	target record.Stamp // the counted version (record.Genesis: none)
	eff    int64        // its effective time
	// absent says that the increments count on the absence after the
	// target (record version 5), from 0: the target deleted, or expired
	// at gone. Such a counter's value is served as a version of its own,
	// the revival: the target's stamp, no tag, no expiry of its own.
	absent bool
	gone   int64
	// horizon is, for a counter on the genesis (absent, target
	// record.Genesis, gone 0), the least horizon of its increments:
	// whether they count after a tombstone this node holds (see
	// joinsAt). One an expiry change of the revival started counts
	// nothing yet and has none: its first increment's is its own.
	horizon int64
	base    []byte // its own value, once known
	known   bool
	counts  map[uint64]originCount
}

// originCount is one origin's increments of a counter.
type originCount struct {
	seq   uint64  // the last counted
	n     int64   // integer increments
	f     float64 // float increments (and n's overflow), in seq order
	float bool    // a float increment or an overflow was counted
}

// version is the counted version as an item, for the rule's order.
func (c *counter) version() *viewItem {
	return &(&wideItem{viewItem: viewItem{stamp: c.target, flags: itemWide}, eff: c.eff}).viewItem
}

// of reports whether it is the counted version.
func (c *counter) of(it *viewItem) bool {
	return it != nil && it.stamp == c.target && it.effAt() == c.eff && !it.placeholder()
}

// genesis reports whether c counts on the absence of a key its nodes
// held nothing of.
func (c *counter) genesis() bool { return c.absent && c.target == record.Genesis && c.gone == 0 }

// after reports whether c counts on a later version than d, in the
// rule's order: a version's absence comes right after the version (and
// one that expired later after one that expired sooner).
func (c *counter) after(d *counter) bool {
	if c.target != d.target || c.eff != d.eff {
		return c.version().after(d.version())
	}
	if c.absent != d.absent {
		return c.absent
	}
	return c.gone > d.gone
}

// same reports whether c and d count on the same version (or absence).
func (c *counter) same(d *counter) bool {
	return c.target == d.target && c.eff == d.eff && c.absent == d.absent && c.gone == d.gone
}

// supersededBy reports whether it, an entry of the key, comes after what c
// counts on: a later version (after the counted one, or another than the
// one whose absence c counts on).
func (c *counter) supersededBy(it *viewItem) bool {
	if c.absent && c.of(it) {
		return false
	}
	return it.after(c.version())
}

// collectableAt reports whether the absence of c's target is one a node
// whose horizon is h may have collected (gc.go's collectable at cutoff
// h): then an increment made there of a key it held nothing of counts
// on that absence as well.
func (c *counter) collectableAt(h int64) bool {
	return record.HLCMillis(c.target.HLC) < h && c.gone < h && c.eff < h
}

// absenceOf is the counter that counts on the absence after it, the key's
// entry: deleted, or expired at its expiry (which it may not have reached
// yet where the entry is read; a revival past its own expiry too).
func absenceOf(it *viewItem) *counter {
	c := &counter{target: it.stamp, eff: it.effAt(), absent: true, base: []byte("0"), known: true}
	if !it.isTomb() || it.expiry() != 0 {
		c.gone = it.expiry()
	}
	return c
}

// joinsAt is inc, an increment's counter of the genesis with horizon h,
// as this node counts it: the absence after the key's entry old (or the
// counter c in force) when its node may have collected that entry's
// tombstone, which it then never saw; else the genesis, before every
// version.
func joinsAt(inc *counter, h int64, old *viewItem, c *counter) *counter {
	if old != nil && !old.placeholder() && (old.isTomb() || old.expiry() != 0) {
		if a := absenceOf(old); (c == nil || !c.after(a)) && a.collectableAt(h) {
			return a
		}
	}
	if c != nil && c.absent && c.collectableAt(h) {
		return c
	}
	return inc
}

// moved is c's counts on the absence a when c counts on the genesis and
// a is one its increments' nodes may have collected (joinsAt's rule for
// each of them, by the least horizon), else nil.
func (c *counter) moved(a *counter) *counter {
	if c == nil || !c.genesis() || !a.absent || a.genesis() || !a.collectableAt(c.horizon) {
		return nil
	}
	n := *a
	n.counts = c.counts
	return &n
}

// with is c with the increment delta of origin's seq counted.
func (c *counter) with(origin, seq uint64, delta []byte) *counter {
	n := *c
	n.counts = maps.Clone(c.counts)
	if n.counts == nil {
		n.counts = make(map[uint64]originCount, 1)
	}
	o := n.counts[origin]
	o.seq = seq
	d, f, isFloat, _ := record.Delta(delta)
	switch {
	case isFloat:
		o.f += f
		o.float = true
	case d > 0 && o.n > math.MaxInt64-d, d < 0 && o.n < math.MinInt64-d:
		o.f += float64(o.n) + float64(d)
		o.n, o.float = 0, true
	default:
		o.n += d
	}
	n.counts[origin] = o
	return &n
}

// value is base plus every origin's increments, in decimal: an integer
// while the base and every increment are integers and the sum fits,
// else a float. A base that is no number is served as it is.
func (c *counter) value() []byte {
	origins := slices.Sorted(maps.Keys(c.counts))
	if n, err := strconv.ParseInt(string(c.base), 10, 64); err == nil {
		sum, ok := n, true
		for _, o := range origins {
			oc := c.counts[o]
			if oc.float || oc.n > 0 && sum > math.MaxInt64-oc.n || oc.n < 0 && sum < math.MinInt64-oc.n {
				ok = false
				break
			}
			sum += oc.n
		}
		if ok {
			return strconv.AppendInt(nil, sum, 10)
		}
	}
	f, err := strconv.ParseFloat(string(c.base), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return bytes.Clone(c.base)
	}
	for _, o := range origins {
		oc := c.counts[o]
		f += float64(oc.n) + oc.f
	}
	return strconv.AppendFloat(nil, f, 'f', -1, 64)
}

// setCount records c for key k (nil: none). A frozen copy shares the
// map (see freezeLocked): it is copied before the first write after a
// freeze. The caller holds the write lock.
func (tv *topicView) setCount(k string, c *counter) {
	if tv.counts == nil && c == nil {
		return
	}
	if tv.counts == nil || tv.countsShared {
		tv.counts = maps.Clone(tv.counts)
		if tv.counts == nil {
			tv.counts = make(map[string]*counter)
		}
		tv.countsShared = false
	}
	if c == nil {
		delete(tv.counts, k)
		return
	}
	tv.counts[k] = c
}

// applyCounter is Apply of a counter increment r.
func (v *View) applyCounter(r record.Record) bool {
	v.mu.Lock()
	defer v.unlock()
	return v.counterLocked(v.topicLocked(r.Topic()), r)
}

// recordCounter is the counter an increment r counts on, empty, and the
// horizon of a genesis increment.
func recordCounter(r record.Record) (c *counter, horizon int64) {
	c = &counter{target: r.Target(), eff: int64(r.Effective())}
	if !r.Absent() {
		return c, 0
	}
	c.absent, c.gone, c.base, c.known = true, int64(r.ExpiresAt()), []byte("0"), true
	if c.target.Origin == 0 {
		horizon = record.HLCMillis(c.target.HLC)
		c.target, c.eff, c.horizon = record.Genesis, 0, horizon
	}
	return c, horizon
}

// counterLocked counts the increment r and reports whether the entry in
// force changed. The caller holds the write lock.
func (v *View) counterLocked(tv *topicView, r record.Record) bool {
	k := string(r.Key())
	inc, horizon := recordCounter(r)
	old, _ := tv.lookup(k)
	c := tv.counts[k]
	if inc.genesis() {
		inc = joinsAt(inc, horizon, old, c)
	}
	switch {
	case c != nil && c.same(inc):
		if c.genesis() && (horizon < c.horizon || len(c.counts) == 0) {
			n := *c
			n.horizon = horizon
			c = &n
		}
	case c != nil && !inc.after(c):
		return false // a version older than the one counted
	case old != nil && !old.placeholder() && inc.supersededBy(old):
		return false // a version older than the one in force
	default:
		if m := c.moved(inc); m != nil {
			inc = m // the genesis' increments count on this absence too
		} else if !inc.absent && inc.of(old) && !old.isTomb() {
			inc.base, inc.known = old.valueIn(&v.shared, tv.name), true
		}
		c = inc
	}
	st := r.Stamp()
	if st.Seq <= c.counts[st.Origin].seq {
		return false // counted already
	}
	tv.setCount(k, c.with(st.Origin, st.Seq, r.Value()))
	return v.recount(tv, k)
}

// recount gives key k's entry its counted value, when the entry is the
// version its counter counts on (or that version's absence: the
// revival), and reports whether it changed. The caller holds the write
// lock.
func (v *View) recount(tv *topicView, k string) bool {
	old, te := tv.lookup(k)
	c := tv.counts[k]
	if c == nil || !c.known {
		return false
	}
	var it wideItem
	switch {
	case c.absent && (old == nil || old.placeholder()):
		it = c.revival(k, nil)
	case c.absent && !c.of(old):
		if c.supersededBy(old) {
			return false
		}
		it = c.revival(k, nil) // the absence after a version not here (yet)
	case !c.of(old) || !c.absent && old.isTomb():
		return false
	default:
		it = old.clone(&v.shared, tv.name)
	}
	n := v.counted(tv, k, &it.viewItem)
	if old != nil && n.stamp == old.stamp && n.isTomb() == old.isTomb() && n.expiry() == old.expiry() &&
		bytes.Equal(n.valueIn(&v.shared, tv.name), old.valueIn(&v.shared, tv.name)) {
		return false
	}
	if old != nil && te == nil && old.epoch == v.epoch && old.fits(&it.viewItem) {
		v.update(tv, old, &it.viewItem)
		return true
	}
	heap := copyItem(&it.viewItem)
	heap.epoch = v.epoch
	v.install(tv, k, old, heap, te, "")
	return true
}

// revival is the entry that serves an absent counter's value: the
// target's stamp, the expiry of it (an entry at the target version) when
// that is not the one the counter counts after, no tag.
func (c *counter) revival(k string, it *viewItem) wideItem {
	var expires int64
	var flags uint8
	if it != nil {
		if it.expiry() != c.gone {
			expires = it.expiry()
		}
		flags = it.flags & itemScheduled
	}
	return makeViewItem([]byte(k), nil, c.value(), c.target, flags, c.eff, expires)
}

// counted is it as the entry of key k: with the counted value when it is
// the version the key's increments count on (whose base it gives when
// not known yet), the revival when they count on that version's
// absence (with it's expiry, but for one of a revival of another
// absence). A later version ends the count. An item it makes is of the
// kind its times make (copyItem). The caller holds the write lock.
func (v *View) counted(tv *topicView, k string, it *viewItem) *viewItem {
	c := tv.counts[k]
	if c == nil || it == nil || it.placeholder() {
		return it
	}
	if !c.of(it) {
		if c.supersededBy(it) {
			if m := c.moved(absenceOf(it)); m != nil && (it.isTomb() || it.expiry() != 0) {
				tv.setCount(k, m) // the genesis' increments count after it
				n := m.revival(k, it)
				return copyItem(&n.viewItem)
			}
			tv.setCount(k, nil) // a SET, a DEL or a scheduled value reset it
		}
		return it
	}
	if c.absent {
		if it.isTomb() && it.expiry() > c.gone {
			// The revival, expired. A tomb gone before the absence
			// (the delete, 0; an earlier revival) is an earlier state of
			// the key, which a node holding it alone never saw revived.
			return it
		}
		n := c.revival(k, it)
		if m, ok := tv.marks[k]; ok && m.absent && m.target == c.target && m.gone != c.gone {
			// it is the revival of another absence, whose expiry is
			// that absence's change's, none of this one's (a node that
			// counted on this absence first drops that change).
			n.expires = 0
		}
		n.epoch = it.epoch
		return copyItem(&n.viewItem)
	}
	if it.isTomb() {
		return it
	}
	if !c.known {
		n := *c
		n.base, n.known = bytes.Clone(it.valueIn(&v.shared, tv.name)), true
		c = &n
		tv.setCount(k, c)
	}
	val := c.value()
	if bytes.Equal(val, it.valueIn(&v.shared, tv.name)) {
		return it
	}
	n := makeViewItem([]byte(it.key()), []byte(it.tag()), val, it.stamp, it.flags, it.effAt(), it.expiry())
	n.epoch = it.epoch
	return copyItem(&n.viewItem)
}

// countedBase is the base of the counter of key k when it is its counted
// version (nil otherwise): the version's own value, which an expiry
// change of it carries ("0" for a revival), and, for a revival, the
// absence its increments count after. The caller holds the read lock.
func (v *View) countedBase(tv *topicView, k string, it *viewItem) ([]byte, *Absence) {
	c := tv.counts[k]
	if c == nil || !c.known || !c.of(it) {
		return nil, nil
	}
	if !c.absent {
		return c.base, nil
	}
	a := &Absence{Of: c.target, EffectiveAt: it.scheduledAt(), Gone: c.gone}
	if c.genesis() {
		a = &Absence{Horizon: v.horizon.Load()}
	}
	return c.base, a
}

// Absence is what a key without a value had last, on this node: a
// counter increment of it counts on the absence after that (record
// version 5, "Counters" in DESIGN.md), so that increments of a key no
// node had a value of, made on several nodes at once, all count.
type Absence struct {
	// Of is the key's last version, deleted or expired at Gone; zero
	// when the node holds nothing of the key (never written, or its
	// tombstone collected): then Horizon is the instant (Unix ms)
	// before which it may have collected tombstones (0: none).
	Of          record.Stamp
	EffectiveAt int64 // Of's effective_at, 0 for an ordinary write
	Gone        int64
	Horizon     int64
}

// Counting is Get for a counter command: when the key has no value,
// the entry's Absence says what it had last (see Absence). Both are
// read under one hold of the lock: an increment that lands in between
// may make the entry a revival, whose absence is not the one it
// serves (a revival of the absence after an expiry has no expiry of
// its own).
func (v *View) Counting(topic, key string) (Entry, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if e, _, ok := v.getLocked(nil, topic, key); ok {
		return e, true
	}
	a := &Absence{Horizon: v.horizon.Load()}
	if tv := v.topics[topic]; tv != nil {
		if it, _ := tv.lookup(key); it != nil && !it.placeholder() {
			n := absenceOf(it)
			a = &Absence{Of: n.target, EffectiveAt: it.scheduledAt(), Gone: n.gone}
		}
	}
	return Entry{Absence: a}, false
}

// mergeCounter merges another view's counter c of key k into tv's (the
// counts of each origin with the greater seq), keeping the one of the
// later version when they count on different ones. The caller holds the
// write lock.
func (tv *topicView) mergeCounter(k string, c *counter) {
	mine := tv.counts[k]
	switch {
	case mine == nil || c.after(mine):
		if m := mine.moved(c); m != nil {
			c = mergeCounts(m, c)
		}
		tv.setCount(k, c)
	case mine.same(c):
		tv.setCount(k, mergeCounts(mine, c))
	default:
		if m := c.moved(mine); m != nil {
			tv.setCount(k, mergeCounts(mine, m))
		}
	}
}

// mergeCounts is mine with the counts of c (of the same version) whose
// seq is greater, and c's base if mine has none.
func mergeCounts(mine, c *counter) *counter {
	n := *mine
	n.counts = maps.Clone(mine.counts)
	if n.counts == nil {
		n.counts = make(map[uint64]originCount, len(c.counts))
	}
	for o, oc := range c.counts {
		if oc.seq > n.counts[o].seq {
			n.counts[o] = oc
		}
	}
	if !n.known && c.known {
		n.base, n.known = c.base, true
	}
	switch {
	case len(mine.counts) == 0:
		n.horizon = c.horizon // none yet (see counter.horizon)
	case len(c.counts) != 0:
		n.horizon = min(mine.horizon, c.horizon)
	}
	return &n
}

// Increment is one counter command's increment: N, or F when Float
// (INCRBYFLOAT).
type Increment struct {
	N     int64
	F     float64
	Float bool
}

// Errors of Count: the key's value is no number of the increment's
// kind, or the sum leaves its range.
var (
	ErrNotInteger = errors.New("view: the value is not an integer")
	ErrNotFloat   = errors.New("view: the value is not a float")
	ErrOverflow   = errors.New("view: the increment would overflow (or make a float infinite)")
)

// Count is the one rule of a counter command, whatever door took it: it
// adds inc to the key (topic, key) whose entry on this node is e (found:
// it has a value; else e.Absence says what it had last, as Counting
// gives it) and returns the message to publish and the key's value
// after it on this node. An entry with a stamp (a version this node
// holds) gets an increment bound to that version (record.KindCounter),
// never the sum; a revival, or a key without a value, one bound to the
// absence it counts after (record version 5), from 0. A key a
// transaction wrote and has not stamped yet (e.Stamp zero), or deleted
// (no Absence), gets its value written, with its expiry and tag. The
// message's strings and bytes are its own.
func Count(topic, key string, e Entry, found bool, inc Increment) (record.Message, []byte, error) {
	value, err := addIncrement(e.Value, found, inc)
	if err != nil {
		return record.Message{}, nil, err
	}
	m := record.Message{Topic: strings.Clone(topic), Key: strings.Clone(key), Value: value}
	switch {
	case e.Absence != nil:
		a := e.Absence
		m.CountAbsent, m.CountOn, m.EffectiveAt, m.ExpiresAt = true, a.Of, a.EffectiveAt, a.Gone
		if a.Of.Origin == 0 {
			m.CountOn = record.Stamp{HLC: record.MakeHLC(max(a.Horizon, 0), 0)}
		}
	case found && e.Stamp.Origin != 0:
		m.CountOn, m.EffectiveAt = e.Stamp, e.EffectiveAt
	case found:
		m.ExpiresAt, m.Tag = e.ExpiresAt, e.Tag
		return m, value, nil
	default:
		return m, value, nil
	}
	m.Value = inc.Text()
	return m, value, nil
}

// Text is the increment in decimal, a counter record's value.
func (inc Increment) Text() []byte {
	if inc.Float {
		return strconv.AppendFloat(nil, inc.F, 'f', -1, 64)
	}
	return strconv.AppendInt(nil, inc.N, 10)
}

// addIncrement is cur (found: the key has a value) plus inc, in decimal.
func addIncrement(cur []byte, found bool, inc Increment) ([]byte, error) {
	if inc.Float {
		f := 0.0
		if found {
			var ok bool
			if f, ok = ParseFloat(cur); !ok {
				return nil, ErrNotFloat
			}
		}
		if f += inc.F; math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, ErrOverflow
		}
		return strconv.AppendFloat(nil, f, 'f', -1, 64), nil
	}
	var n int64
	if found {
		var ok bool
		if n, ok = ParseInt(cur); !ok {
			return nil, ErrNotInteger
		}
	}
	if inc.N > 0 && n > math.MaxInt64-inc.N || inc.N < 0 && n < math.MinInt64-inc.N {
		return nil, ErrOverflow
	}
	return strconv.AppendInt(nil, n+inc.N, 10), nil
}

// ParseInt reads a counter's integer as Redis does: only the canonical
// decimal form (no sign +, no leading zeros, no blanks), within int64.
func ParseInt(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == string(b)
}

// ParseFloat reads a counter's float as Redis's INCRBYFLOAT does: no
// blanks, finite.
func ParseFloat(b []byte) (float64, bool) {
	s := string(b)
	if s == "" || strings.TrimSpace(s) != s {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
}
