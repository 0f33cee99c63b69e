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
	target record.Stamp // the counted version
	eff    int64        // its effective time
	base   []byte       // its own value, once known
	known  bool
	counts map[uint64]originCount
}

// originCount is one origin's increments of a counter.
type originCount struct {
	seq   uint64  // the last counted
	n     int64   // integer increments
	f     float64 // float increments (and n's overflow), in seq order
	float bool    // a float increment or an overflow was counted
}

// version is the counted version as an item, for the rule's order.
func (c *counter) version() *viewItem { return &viewItem{stamp: c.target, eff: c.eff} }

// of reports whether it is the counted version.
func (c *counter) of(it *viewItem) bool {
	return it != nil && it.stamp == c.target && it.eff == c.eff && !it.placeholder()
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

// counterLocked counts the increment r and reports whether the entry in
// force changed. The caller holds the write lock.
func (v *View) counterLocked(tv *topicView, r record.Record) bool {
	k := string(r.Key())
	target := &viewItem{stamp: r.Target(), eff: int64(r.Effective())}
	old, _ := tv.lookup(k)
	c := tv.counts[k]
	switch {
	case c != nil && c.of(target):
	case c != nil && !target.after(c.version()):
		return false // a version older than the one counted
	case old != nil && !old.placeholder() && old.after(target):
		return false // a version older than the one in force
	default:
		c = &counter{target: target.stamp, eff: target.eff}
		if c.of(old) && !old.isTomb() {
			c.base, c.known = old.value(), true
		}
	}
	st := r.Stamp()
	if st.Seq <= c.counts[st.Origin].seq {
		return false // counted already
	}
	tv.setCount(k, c.with(st.Origin, st.Seq, r.Value()))
	return v.recount(tv, k)
}

// recount gives key k's entry its counted value, when the entry is the
// version its counter counts on, and reports whether it changed. The
// caller holds the write lock.
func (v *View) recount(tv *topicView, k string) bool {
	old, te := tv.lookup(k)
	c := tv.counts[k]
	if c == nil || !c.known || !c.of(old) || old.isTomb() {
		return false
	}
	it := old.clone()
	if bytes.Equal(v.counted(tv, k, &it).value(), old.value()) {
		return false
	}
	if te == nil && old.epoch == v.epoch {
		v.update(tv, old, &it)
		return true
	}
	heap := new(viewItem)
	*heap = it
	heap.epoch = v.epoch
	v.install(tv, k, old, heap, te, "")
	return true
}

// counted is it as the entry of key k: with the counted value when it is
// the version the key's increments count on (whose base it gives when
// not known yet). A version after the counted one ends the count. The
// caller holds the write lock.
func (v *View) counted(tv *topicView, k string, it *viewItem) *viewItem {
	c := tv.counts[k]
	if c == nil || it == nil || it.placeholder() {
		return it
	}
	if !c.of(it) {
		if it.after(c.version()) {
			tv.setCount(k, nil) // a SET, a DEL or a scheduled value reset it
		}
		return it
	}
	if it.isTomb() {
		return it
	}
	if !c.known {
		n := *c
		n.base, n.known = bytes.Clone(it.value()), true
		c = &n
		tv.setCount(k, c)
	}
	val := c.value()
	if bytes.Equal(val, it.value()) {
		return it
	}
	n := makeViewItem([]byte(it.key()), []byte(it.tag()), val, it.stamp, it.flags, it.eff, it.expires)
	n.epoch = it.epoch
	return &n
}

// countedBase is the base of the counter of key k when e is its counted
// version (nil otherwise): the version's own value, which an expiry
// change of it carries. The caller holds the read lock.
func (tv *topicView) countedBase(k string, it *viewItem) []byte {
	if c := tv.counts[k]; c != nil && c.known && c.of(it) {
		return c.base
	}
	return nil
}

// mergeCounter merges another view's counter c of key k into tv's (the
// counts of each origin with the greater seq), keeping the one of the
// later version when they count on different ones. The caller holds the
// write lock.
func (tv *topicView) mergeCounter(k string, c *counter) {
	mine := tv.counts[k]
	switch {
	case mine == nil || c.version().after(mine.version()):
		tv.setCount(k, c)
	case mine.of(c.version()):
		n := *mine
		n.counts = maps.Clone(mine.counts)
		for o, oc := range c.counts {
			if oc.seq > n.counts[o].seq {
				n.counts[o] = oc
			}
		}
		if !n.known && c.known {
			n.base, n.known = c.base, true
		}
		tv.setCount(k, &n)
	}
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
// it has a value) and returns the message to publish and the key's value
// after it on this node. An entry with a stamp (a version this node
// holds) gets an increment bound to that version (record.KindCounter),
// never the sum; a key without a value, or one a transaction wrote and
// has not stamped yet (e.Stamp zero), gets its value written, with its
// expiry and tag. The message's strings and bytes are its own.
func Count(topic, key string, e Entry, found bool, inc Increment) (record.Message, []byte, error) {
	value, err := addIncrement(e.Value, found, inc)
	if err != nil {
		return record.Message{}, nil, err
	}
	m := record.Message{Topic: strings.Clone(topic), Key: strings.Clone(key), Value: value}
	switch {
	case found && e.Stamp.Origin != 0:
		m.Value = strconv.AppendInt(nil, inc.N, 10)
		if inc.Float {
			m.Value = strconv.AppendFloat(nil, inc.F, 'f', -1, 64)
		}
		m.CountOn, m.EffectiveAt = e.Stamp, e.EffectiveAt
	case found:
		m.ExpiresAt, m.Tag = e.ExpiresAt, e.Tag
	}
	return m, value, nil
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
