package view

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// incRec is a counter increment of key k by delta, counting on the
// version target, stamped (origin, seq, hlc).
func incRec(tb testing.TB, delta string, target record.Stamp, origin, seq, hlc uint64) record.Record {
	tb.Helper()
	m := &record.Message{Topic: "prices", Key: "k", Value: []byte(delta), CountOn: target}
	return stamped(tb, m, record.Stamp{Origin: origin, Seq: seq, HLC: hlc})
}

// absRec is a counter increment of key k by delta, counting on the
// absence after the version target (deleted, or expired at gone), or, for
// a zero target Origin, of a key its node held nothing of (target's HLC:
// the node's horizon), stamped (origin, seq, hlc).
func absRec(tb testing.TB, delta string, target record.Stamp, gone int64, origin, seq, hlc uint64) record.Record {
	tb.Helper()
	m := &record.Message{Topic: "prices", Key: "k", Value: []byte(delta), CountOn: target, CountAbsent: true, ExpiresAt: gone}
	return stamped(tb, m, record.Stamp{Origin: origin, Seq: seq, HLC: hlc})
}

// TestViewCounterAnyOrder applies each case's records in every order
// that keeps each origin's records in seq order (as the store delivers
// them), with a record delivered again at a random later point: the view
// ends the same (value, stamp, expiry, digest) whatever the order, after
// a snapshot round trip too, and every increment of the counted version
// counts once.
func TestViewCounterAnyOrder(t *testing.T) {
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	const a, b, c = 1, 2, 3 // origins
	far := int64(timeBase + 3_600_000)
	ten := timeRec{key: "k", value: "10", origin: c, seq: 1, hlc: hlc(timeBase - 100)}
	tenSt := record.Stamp{Origin: c, Seq: 1, HLC: ten.hlc}
	reset := timeRec{key: "k", value: "0", origin: b, seq: 1, hlc: hlc(timeBase - 60)}
	resetSt := record.Stamp{Origin: b, Seq: 1, HLC: reset.hlc}
	half := timeRec{key: "k", value: "1.5", origin: c, seq: 1, hlc: hlc(timeBase - 100)}
	delB := timeRec{key: "k", del: true, origin: b, seq: 1, hlc: hlc(timeBase - 60)}
	delSt := record.Stamp{Origin: b, Seq: 1, HLC: delB.hlc}
	expiring := timeRec{key: "k", value: "10", expires: timeBase - 50, origin: c, seq: 1, hlc: hlc(timeBase - 100)}
	expSt := record.Stamp{Origin: c, Seq: 1, HLC: expiring.hlc}
	cases := []struct {
		name    string
		recs    func(t *testing.T) []record.Record
		value   string // "" for none
		stamp   record.Stamp
		expires int64
	}{
		{"every origin's increments count once", func(t *testing.T) []record.Record {
			return []record.Record{ten.record(t),
				incRec(t, "1", tenSt, a, 1, hlc(timeBase-90)), incRec(t, "2", tenSt, a, 2, hlc(timeBase-80)),
				incRec(t, "5", tenSt, b, 1, hlc(timeBase-85)), incRec(t, "-3", tenSt, c, 2, hlc(timeBase-70))}
		}, "15", tenSt, 0},
		{"a later SET resets: the increments of the older version do not count", func(t *testing.T) []record.Record {
			return []record.Record{ten.record(t),
				incRec(t, "1", tenSt, a, 1, hlc(timeBase-90)), incRec(t, "7", tenSt, a, 2, hlc(timeBase-50)),
				reset.record(t), incRec(t, "4", resetSt, c, 2, hlc(timeBase-40)), incRec(t, "2", resetSt, a, 3, hlc(timeBase-30))}
		}, "6", resetSt, 0},
		{"floats", func(t *testing.T) []record.Record {
			return []record.Record{half.record(t),
				incRec(t, "0.25", tenSt, a, 1, hlc(timeBase-90)), incRec(t, "2", tenSt, b, 1, hlc(timeBase-85))}
		}, "3.75", tenSt, 0},
		{"an expiry change of the counted version keeps the count", func(t *testing.T) []record.Record {
			return []record.Record{ten.record(t),
				incRec(t, "1", tenSt, a, 1, hlc(timeBase-90)), incRec(t, "5", tenSt, b, 1, hlc(timeBase-85)),
				expiryRec(t, "k", "10", 0, tenSt, far, a, 2, hlc(timeBase-80))}
		}, "16", tenSt, far},
		{"increments of a key no node held a value of count, from every node", func(t *testing.T) []record.Record {
			return []record.Record{absRec(t, "1", record.Stamp{}, 0, a, 1, hlc(timeBase-90)),
				absRec(t, "2", record.Stamp{}, 0, b, 1, hlc(timeBase-85)), absRec(t, "4", record.Stamp{}, 0, c, 1, hlc(timeBase-80))}
		}, "7", record.Genesis, 0},
		{"after a delete, the increments of its absence from every node count", func(t *testing.T) []record.Record {
			return []record.Record{ten.record(t), delB.record(t),
				absRec(t, "1", delSt, 0, a, 1, hlc(timeBase-50)), absRec(t, "2", delSt, 0, c, 2, hlc(timeBase-45))}
		}, "3", delSt, 0},
		{"increments of a key without a version count after a tombstone their node may have collected", func(t *testing.T) []record.Record {
			return []record.Record{delB.record(t), absRec(t, "1", delSt, 0, a, 1, hlc(timeBase-50)),
				absRec(t, "5", record.Stamp{HLC: hlc(timeBase - 55)}, 0, c, 1, hlc(timeBase-40))}
		}, "6", delSt, 0},
		{"a tombstone their node cannot have collected resets the increments of a key without a version", func(t *testing.T) []record.Record {
			return []record.Record{absRec(t, "5", record.Stamp{}, 0, c, 1, hlc(timeBase-70)), delB.record(t),
				absRec(t, "1", delSt, 0, a, 1, hlc(timeBase-50))}
		}, "1", delSt, 0},
		{"the absence of an expired value wins over increments of the value", func(t *testing.T) []record.Record {
			return []record.Record{expiring.record(t), incRec(t, "100", expSt, b, 1, hlc(timeBase-90)),
				absRec(t, "1", expSt, timeBase-50, a, 1, hlc(timeBase-40)), absRec(t, "2", expSt, timeBase-50, b, 2, hlc(timeBase-30))}
		}, "3", expSt, 0},
		{"a SET after increments of a key without a value resets them", func(t *testing.T) []record.Record {
			return []record.Record{absRec(t, "1", record.Stamp{}, 0, a, 1, hlc(timeBase-90)), reset.record(t),
				incRec(t, "4", resetSt, a, 2, hlc(timeBase-40))}
		}, "4", resetSt, 0},
		{"an expiry change of a revival keeps its count", func(t *testing.T) []record.Record {
			return []record.Record{absRec(t, "1", record.Stamp{}, 0, a, 1, hlc(timeBase-90)), absRec(t, "2", record.Stamp{}, 0, b, 1, hlc(timeBase-85)),
				expiryRec(t, "k", "0", 0, record.Genesis, far, a, 2, hlc(timeBase-80))}
		}, "3", record.Genesis, far},
		{"a revival that expired: the increments of its absence count from 0", func(t *testing.T) []record.Record {
			return []record.Record{absRec(t, "5", record.Stamp{}, 0, a, 1, hlc(timeBase-90)),
				expiryRec(t, "k", "0", 0, record.Genesis, timeBase-20, a, 2, hlc(timeBase-80)),
				absRec(t, "1", record.Genesis, timeBase-20, b, 1, hlc(timeBase-10))}
		}, "1", record.Genesis, 0},
		{"a delete after the increments", func(t *testing.T) []record.Record {
			return []record.Record{ten.record(t),
				incRec(t, "1", tenSt, a, 1, hlc(timeBase-90)), incRec(t, "5", tenSt, b, 1, hlc(timeBase-85)),
				timeRec{key: "k", del: true, origin: a, seq: 2, hlc: hlc(timeBase - 80)}.record(t)}
		}, "", record.Stamp{}, 0},
	}
	rng := rand.New(rand.NewPCG(30, 2))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs := tc.recs(t)
			var ref [32]byte
			for p := range permutations(len(recs)) {
				if !originOrder(recs, p) {
					continue
				}
				clock := &fakeClock{}
				clock.ms.Store(timeBase)
				v := newTimedView(clock)
				again := rng.IntN(len(p))
				for i, r := range p {
					v.Apply(recs[r])
					if i >= again {
						v.Apply(recs[p[again]]) // delivered again: counted once
					}
				}
				v.settleDue()
				what := fmt.Sprintf("order %v", p)
				checkExpiryEntry(t, v, what, tc.value, tc.stamp, tc.expires)
				d := v.Digest()
				if ref == ([32]byte{}) {
					ref = d
				} else if d != ref {
					t.Fatalf("%s: digest differs from the first order's", what)
				}
				var buf bytes.Buffer
				if err := EncodeSnapshot(&buf, v, 0, nil); err != nil {
					t.Fatal(err)
				}
				back, _, _, err := decodeSnapshot(bytes.NewReader(buf.Bytes()), int64(buf.Len()), clock.now)
				if err != nil {
					t.Fatalf("%s: snapshot: %v", what, err)
				}
				for i, r := range recs {
					back.Apply(r)
					checkExpiryEntry(t, back, fmt.Sprintf("%s, from its snapshot, record %d again", what, i), tc.value, tc.stamp, tc.expires)
				}
				if back.Digest() != ref {
					t.Fatalf("%s: the snapshot's view hashes otherwise", what)
				}
				merged := newTimedView(clock)
				if _, _, err := merged.ApplySnapshot(bytes.NewReader(buf.Bytes())); err != nil {
					t.Fatal(err)
				}
				checkExpiryEntry(t, merged, what+", merged from its snapshot", tc.value, tc.stamp, tc.expires)
			}
		})
	}
}

// originOrder reports whether the order p keeps each origin's records of
// recs in seq order.
func originOrder(recs []record.Record, p []int) bool {
	last := map[uint64]uint64{}
	for _, i := range p {
		st := recs[i].Stamp()
		if st.Seq < last[st.Origin] {
			return false
		}
		last[st.Origin] = st.Seq
	}
	return true
}

// TestViewCounterEntryBase: a counted key's Entry gives the counted
// value and, as Base, the version's own, which an expiry change carries.
func TestViewCounterEntryBase(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(timeBase)
	v := newTimedView(clock)
	set := timeRec{key: "k", value: "40", origin: 3, seq: 1, hlc: record.MakeHLC(timeBase-10, 0)}
	v.Apply(set.record(t))
	if e, _ := v.Get("prices", "k"); e.Base != nil {
		t.Fatalf("an uncounted key has Base %q", e.Base)
	}
	v.Apply(incRec(t, "2", record.Stamp{Origin: 3, Seq: 1, HLC: set.hlc}, 1, 1, record.MakeHLC(timeBase-5, 0)))
	if e, _ := v.Get("prices", "k"); string(e.Value) != "42" || string(e.Base) != "40" {
		t.Fatalf("value %q base %q, want 42 and 40", e.Value, e.Base)
	}
}

// TestViewCounterAfterCollection: a node that collected a deleted key's
// tombstone and one that still holds it count increments of the key the
// same way, whichever node took them (view.Count on Counting's entry):
// both views end at the sum, with the same digest.
func TestViewCounterAfterCollection(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(timeBase)
	held, collected := newTimedView(clock), newTimedView(clock)
	set := timeRec{key: "k", value: "40", origin: 3, seq: 1, hlc: record.MakeHLC(timeBase-2000, 0)}
	del := timeRec{key: "k", del: true, origin: 3, seq: 2, hlc: record.MakeHLC(timeBase-1000, 0)}
	for _, v := range []*View{held, collected} {
		v.Apply(set.record(t))
		v.Apply(del.record(t))
	}
	if n := collected.CollectTombstones(timeBase-500, func(uint64, uint64) bool { return true }); n != 1 {
		t.Fatalf("collected %d tombstones, want 1", n)
	}
	seq := map[uint64]uint64{}
	incr := func(from *View, origin uint64, by int64) {
		t.Helper()
		e, found := from.Counting("prices", "k")
		m, _, err := Count("prices", "k", e, found, Increment{N: by})
		if err != nil || !m.CountAbsent && !found {
			t.Fatalf("Count: %+v, %v", m, err)
		}
		seq[origin]++
		r := stamped(t, &m, record.Stamp{Origin: origin, Seq: seq[origin], HLC: record.MakeHLC(timeBase, uint16(seq[origin]))})
		held.Apply(r)
		collected.Apply(r)
	}
	incr(collected, 1, 5) // the genesis, after a horizon past the tombstone
	incr(held, 2, 2)      // the tombstone's absence
	incr(collected, 1, 1)
	incr(held, 2, 10)
	for name, v := range map[string]*View{"held": held, "collected": collected} {
		if e, found := v.Get("prices", "k"); !found || string(e.Value) != "18" {
			t.Errorf("%s: holds %q (found %v), want 18", name, e.Value, found)
		}
	}
	if held.Digest() != collected.Digest() {
		t.Error("the views hash otherwise")
	}
}

// TestViewCounterRevivalCollected: a revival that expired and was
// collected leaves no count behind: the next increment counts from 0,
// on the node that collected it and on one that still holds it alike.
func TestViewCounterRevivalCollected(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(timeBase)
	held, collected := newTimedView(clock), newTimedView(clock)
	for _, v := range []*View{held, collected} {
		v.Apply(absRec(t, "5", record.Stamp{}, 0, 1, 1, record.MakeHLC(timeBase-3000, 0)))
		v.Apply(expiryRec(t, "k", "0", 0, record.Genesis, timeBase-1000, 1, 2, record.MakeHLC(timeBase-2000, 0)))
	}
	if n := collected.CollectTombstones(timeBase-500, func(uint64, uint64) bool { return true }); n != 1 {
		t.Fatalf("collected %d, want the expired revival", n)
	}
	e, found := collected.Counting("prices", "k")
	m, _, err := Count("prices", "k", e, found, Increment{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := stamped(t, &m, record.Stamp{Origin: 2, Seq: 1, HLC: record.MakeHLC(timeBase, 0)})
	for name, v := range map[string]*View{"held": held, "collected": collected} {
		v.Apply(r)
		if e, found := v.Get("prices", "k"); !found || string(e.Value) != "1" {
			t.Errorf("%s: holds %q (found %v), want 1", name, e.Value, found)
		}
	}
	if held.Digest() != collected.Digest() {
		t.Error("the views hash otherwise")
	}
}
