package view

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// expiryRec is an expiry change of the version target of key (whose
// value is value, effective_at eff) to expires, stamped (origin, seq,
// hlc).
func expiryRec(tb testing.TB, key, value string, eff int64, target record.Stamp, expires int64, origin, seq, hlc uint64) record.Record {
	tb.Helper()
	m := &record.Message{Topic: "prices", Key: key, Value: []byte(value), EffectiveAt: eff, ExpiresAt: expires, ExpiryOf: target}
	return stamped(tb, m, record.Stamp{Origin: origin, Seq: seq, HLC: hlc})
}

// TestViewExpiryChangeAnyOrder applies each case's records in every
// order: the view ends the same (value, stamp, expiry, digest), and the
// same after a snapshot round trip, whatever the order. An expiry change
// never brings back the version it names over a newer one, and of
// several changes of one version the greatest stamp wins.
func TestViewExpiryChangeAnyOrder(t *testing.T) {
	hlc := func(ms int64, l uint64) uint64 { return record.MakeHLC(ms, uint16(l)) }
	const a, b, c = 1, 2, 3 // origins
	far := int64(timeBase + 3_600_000)
	old := timeRec{key: "k", value: "old", origin: c, seq: 1, hlc: hlc(timeBase-100, 0)}
	newer := timeRec{key: "k", value: "new", origin: c, seq: 2, hlc: hlc(timeBase-80, 0)}
	oldSt := record.Stamp{Origin: c, Seq: 1, HLC: old.hlc}
	newSt := record.Stamp{Origin: c, Seq: 2, HLC: newer.hlc}
	sched := timeRec{key: "k", value: "sale", eff: timeBase - 10, origin: a, seq: 1, hlc: hlc(timeBase-90, 0)}
	schedSt := record.Stamp{Origin: a, Seq: 1, HLC: sched.hlc}
	cases := []struct {
		name    string
		recs    func(t *testing.T) []record.Record
		value   string // "" for none
		stamp   record.Stamp
		expires int64
	}{
		{"an EXPIRE of the older version does not revert the newer", func(t *testing.T) []record.Record {
			return []record.Record{old.record(t), newer.record(t),
				expiryRec(t, "k", "old", 0, oldSt, far, b, 1, hlc(timeBase-70, 0))}
		}, "new", newSt, 0},
		{"an EXPIRE of the newest version applies", func(t *testing.T) []record.Record {
			return []record.Record{old.record(t), newer.record(t),
				expiryRec(t, "k", "new", 0, newSt, far, b, 1, hlc(timeBase-70, 0))}
		}, "new", newSt, far},
		{"the greatest change of a version wins; a PERSIST is one", func(t *testing.T) []record.Record {
			return []record.Record{newer.record(t),
				expiryRec(t, "k", "new", 0, newSt, far, b, 1, hlc(timeBase-70, 0)),
				expiryRec(t, "k", "new", 0, newSt, 0, a, 2, hlc(timeBase-60, 0)),
				expiryRec(t, "k", "new", 0, newSt, far+5, b, 2, hlc(timeBase-65, 0))}
		}, "new", newSt, 0},
		{"a change that expired the version, then a later one that extends it", func(t *testing.T) []record.Record {
			return []record.Record{newer.record(t),
				expiryRec(t, "k", "new", 0, newSt, timeBase-75, b, 1, hlc(timeBase-70, 0)),
				expiryRec(t, "k", "new", 0, newSt, far, a, 2, hlc(timeBase-60, 0))}
		}, "new", newSt, far},
		{"a delete after the version wins over its change", func(t *testing.T) []record.Record {
			return []record.Record{newer.record(t),
				expiryRec(t, "k", "new", 0, newSt, far, b, 1, hlc(timeBase-70, 0)),
				timeRec{key: "k", del: true, origin: a, seq: 3, hlc: hlc(timeBase-75, 0)}.record(t)}
		}, "", record.Stamp{}, 0},
		{"the change of a scheduled value in force", func(t *testing.T) []record.Record {
			return []record.Record{old.record(t), sched.record(t),
				expiryRec(t, "k", "sale", sched.eff, schedSt, far, b, 1, hlc(timeBase-5, 0))}
		}, "sale", schedSt, far},
		{"the change of a value a scheduled one replaced does nothing", func(t *testing.T) []record.Record {
			return []record.Record{old.record(t), sched.record(t),
				expiryRec(t, "k", "old", 0, oldSt, far, b, 1, hlc(timeBase-50, 0))}
		}, "sale", schedSt, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs := tc.recs(t)
			var ref [32]byte
			for p := range permutations(len(recs)) {
				clock := &fakeClock{}
				clock.ms.Store(timeBase)
				v := newTimedView(clock)
				for _, i := range p {
					v.Apply(recs[i])
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
				// A snapshot keeps the changes in force: the view read
				// back is the same, and takes none of the records again.
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
					back.settleDue()
					checkExpiryEntry(t, back, fmt.Sprintf("%s, from its snapshot, record %d again", what, i), tc.value, tc.stamp, tc.expires)
				}
				if back.Digest() != ref {
					t.Fatalf("%s: the snapshot's view hashes otherwise", what)
				}
				// A peer's snapshot merged into an empty view: the same.
				merged := newTimedView(clock)
				if _, _, err := merged.ApplySnapshot(bytes.NewReader(buf.Bytes())); err != nil {
					t.Fatal(err)
				}
				checkExpiryEntry(t, merged, what+", merged from its snapshot", tc.value, tc.stamp, tc.expires)
			}
		})
	}
}

// TestViewExpiryMarkGoes: a key's expiry mark lives while its version
// does: an ordinary write over it takes it away, and a change of the
// superseded version that comes later still does nothing.
func TestViewExpiryMarkGoes(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(timeBase)
	v := newTimedView(clock)
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	first := timeRec{key: "k", value: "first", origin: 1, seq: 1, hlc: hlc(timeBase - 100)}
	st := record.Stamp{Origin: 1, Seq: 1, HLC: first.hlc}
	v.Apply(first.record(t))
	v.Apply(expiryRec(t, "k", "first", 0, st, timeBase+3_600_000, 2, 1, hlc(timeBase-90)))
	if n := len(v.topics["prices"].marks); n != 1 {
		t.Fatalf("%d marks after an expiry change, want 1", n)
	}
	second := timeRec{key: "k", value: "second", origin: 1, seq: 2, hlc: hlc(timeBase - 80)}
	v.Apply(second.record(t))
	if n := len(v.topics["prices"].marks); n != 0 {
		t.Fatalf("%d marks after a newer write, want 0", n)
	}
	v.Apply(expiryRec(t, "k", "first", 0, st, timeBase+7_200_000, 3, 1, hlc(timeBase-70)))
	checkExpiryEntry(t, v, "a late change of the superseded version", "second", record.Stamp{Origin: 1, Seq: 2, HLC: second.hlc}, 0)
}

func checkExpiryEntry(t *testing.T, v *View, what, value string, stamp record.Stamp, expires int64) {
	t.Helper()
	e, found := v.Get("prices", "k")
	switch {
	case value == "" && found:
		t.Fatalf("%s: holds %q %+v, want nothing", what, e.Value, e.Stamp)
	case value == "":
	case !found:
		t.Fatalf("%s: holds nothing, want %q", what, value)
	case string(e.Value) != value || e.Stamp != stamp || e.ExpiresAt != expires:
		t.Fatalf("%s: holds %q %+v expiring at %d, want %q %+v expiring at %d", what, e.Value, e.Stamp, e.ExpiresAt, value, stamp, expires)
	}
}

// TestViewExpiring walks a topic's keys for those whose value in force
// expires: an expired value, a deleted key and a key without expiry are
// left out, a scheduled value counts once in force, and the walk goes on
// from where a bounded call stopped to the topic's end.
func TestViewExpiring(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	hlc := func(l uint64) uint64 { return record.MakeHLC(timeBase-1000, uint16(l)) }
	recs := []timeRec{
		{key: "a", value: "1", expires: timeBase + 500, origin: 1, seq: 1, hlc: hlc(1)},
		{key: "b", value: "no expiry", origin: 1, seq: 2, hlc: hlc(2)},
		{key: "c", value: "gone", expires: timeBase + 10, origin: 1, seq: 3, hlc: hlc(3)},
		{key: "d", value: "deleted", expires: timeBase + 500, origin: 1, seq: 4, hlc: hlc(4)},
		{key: "d", del: true, origin: 1, seq: 5, hlc: hlc(5)},
		{key: "e", value: "2", expires: timeBase + 900, origin: 1, seq: 6, hlc: hlc(6)},
		{key: "f", value: "later", eff: timeBase + 100, expires: timeBase + 800, origin: 1, seq: 7, hlc: hlc(7)},
	}
	for _, r := range recs {
		v.Apply(r.record(t))
	}
	c.ms.Store(timeBase + 50) // c has expired; f is not in force yet

	walk := func(scan int) (keys []string, calls int) {
		after := ""
		for {
			page, walked, next := v.Expiring("prices", after, scan)
			calls++
			if walked > scan {
				t.Fatalf("walked %d keys with scan %d", walked, scan)
			}
			for _, k := range page {
				keys = append(keys, fmt.Sprintf("%s=%s@%d", k.Key, k.Value, k.ExpiresAt-timeBase))
			}
			if next == "" {
				return keys, calls
			}
			after = next
		}
	}
	for _, tc := range []struct {
		name  string
		at    int64
		scan  int
		want  string
		calls int
	}{
		{"one walk", timeBase + 50, 100, "[a=1@500 e=2@900]", 1},
		{"two keys a call", timeBase + 50, 2, "[a=1@500 e=2@900]", 3},
		{"the scheduled value in force", timeBase + 100, 100, "[a=1@500 e=2@900 f=later@800]", 1},
		{"after a's expiry", timeBase + 500, 100, "[e=2@900 f=later@800]", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.ms.Store(tc.at)
			keys, calls := walk(tc.scan)
			if got := fmt.Sprint(keys); got != tc.want || calls != tc.calls {
				t.Errorf("%s in %d calls; want %s in %d", got, calls, tc.want, tc.calls)
			}
		})
	}
	if keys, walked, next := v.Expiring("nothing", "", 10); keys != nil || walked != 0 || next != "" {
		t.Errorf("a topic the view does not hold: %v %d %q", keys, walked, next)
	}
}
