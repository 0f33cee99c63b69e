package view

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// timeRec is a record with the time fields, for the view's time tests.
type timeRec struct {
	key, value       string
	del, cancel      bool
	eff, expires     int64 // effective_at (0: ordinary), expiry (0: none)
	origin, seq, hlc uint64
	follow           uint32
}

func (r timeRec) record(tb testing.TB) record.Record {
	tb.Helper()
	m := &record.Message{Topic: "prices", Key: r.key, Value: []byte(r.value), Delete: r.del, Cancel: r.cancel,
		EffectiveAt: r.eff, ExpiresAt: r.expires, BatchFollow: r.follow}
	return stamped(tb, m, record.Stamp{Origin: r.origin, Seq: r.seq, HLC: r.hlc})
}

// effective is the record's effective time: effective_at, or its stamp's
// wall time.
func (r timeRec) effective() int64 {
	if r.eff != 0 {
		return r.eff
	}
	return int64(record.HLCMillis(r.hlc))
}

// after is the rule's order, (effective time, HLC, origin).
func (r timeRec) after(o timeRec) bool {
	if r.effective() != o.effective() {
		return r.effective() > o.effective()
	}
	if r.hlc != o.hlc {
		return r.hlc > o.hlc
	}
	return r.origin > o.origin
}

// timeModel is the rule of DESIGN.md's "Time", by brute force: the value
// of key at t is the greatest record (effective time, HLC, origin) among
// those in force at t (an ordinary write always, a scheduled one from its
// instant on) that no cancel voids; none if that one is a tombstone or
// has expired.
func timeModel(recs []timeRec, key string, t int64) (timeRec, bool) {
	var best timeRec
	found := false
	for _, r := range recs {
		if r.key != key || r.cancel || r.eff != 0 && r.eff > t {
			continue
		}
		voided := false
		for _, c := range recs {
			if r.eff != 0 && c.cancel && c.key == key && c.eff == r.eff && c.after(r) {
				voided = true
			}
		}
		if voided {
			continue
		}
		if !found || r.after(best) {
			best, found = r, true
		}
	}
	if !found || best.del || best.expires != 0 && best.expires <= t {
		return timeRec{}, false
	}
	return best, true
}

const timeBase = 1_700_000_000_000 // Unix ms of the tests' instants

// timeRandomRecords makes n records over a few keys and origins: ordinary
// writes and deletes, scheduled ones, expiring ones, and cancels, most of
// them of an instant some record of the key is scheduled for.
func timeRandomRecords(rng *rand.Rand, n int) []timeRec {
	origins := []uint64{0x11, 0x22, 0x33}
	seqs := map[uint64]uint64{}
	ms := map[uint64]int64{}
	last := map[uint64]uint64{}
	var recs []timeRec
	scheduled := map[string][]int64{}
	for range n {
		o := origins[rng.IntN(len(origins))]
		seqs[o]++
		ms[o] += int64(rng.IntN(6))
		// An origin's HLCs strictly increase; origins share a range.
		h := max(record.MakeHLC(timeBase+ms[o], uint16(rng.IntN(3))), last[o]+1)
		last[o] = h
		r := timeRec{key: fmt.Sprintf("k%d", rng.IntN(5)), value: fmt.Sprintf("v%d", rng.IntN(1000)),
			origin: o, seq: seqs[o], hlc: h}
		switch p := rng.IntN(20); {
		case p < 2:
			r.del, r.value = true, ""
		case p < 7:
			r.eff = timeBase + int64(rng.IntN(120))
			scheduled[r.key] = append(scheduled[r.key], r.eff)
		case p < 8:
			r.del, r.value = true, ""
			r.eff = timeBase + int64(rng.IntN(120))
			scheduled[r.key] = append(scheduled[r.key], r.eff)
		case p < 11:
			r.cancel, r.value = true, ""
			if effs := scheduled[r.key]; len(effs) > 0 && rng.IntN(4) > 0 {
				r.eff = effs[rng.IntN(len(effs))]
			} else {
				r.eff = timeBase + int64(rng.IntN(120))
			}
		}
		if !r.del && !r.cancel && rng.IntN(3) == 0 {
			r.expires = max(r.eff, r.effective()) + 1 + int64(rng.IntN(60))
		}
		recs = append(recs, r)
	}
	return recs
}

// fakeClock is an injected wall clock in Unix ms.
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

func newTimedView(c *fakeClock) *View {
	v := New()
	v.SetClock(c.now)
	return v
}

// checkTimeModel compares everything a reader sees of v at the clock's
// instant with the model.
func checkTimeModel(t *testing.T, v *View, recs []timeRec, at int64, what string) {
	t.Helper()
	v.mu.RLock()
	err := checkTimelines(v)
	v.mu.RUnlock()
	if err != nil {
		t.Fatalf("%s at +%dms: %v", what, at-timeBase, err)
	}
	live := 0
	var wantKeys []string
	for k := range 5 {
		key := fmt.Sprintf("k%d", k)
		want, ok := timeModel(recs, key, at)
		e, got := v.Get("prices", key)
		if ok != got || ok && (string(e.Value) != want.value || e.Stamp != (record.Stamp{Origin: want.origin, Seq: want.seq, HLC: want.hlc}) ||
			e.ExpiresAt != want.expires || e.EffectiveAt != want.eff) {
			for _, r := range recs {
				if r.key == key {
					t.Logf("record %+v eff %d", r, r.effective()-timeBase)
				}
			}
			t.Fatalf("%s at +%dms: Get(%s) = %+v, %v; the rule says %+v, %v", what, at-timeBase, key, e, got, want, ok)
		}
		if ok {
			live++
			wantKeys = append(wantKeys, key)
		}
	}
	if keys := v.Keys("prices", "", "", 0); !slices.Equal(keys, wantKeys) {
		t.Fatalf("%s at +%dms: Keys = %v, the rule says %v", what, at-timeBase, keys, wantKeys)
	}
	if v.Len() != live {
		t.Fatalf("%s at +%dms: Len = %d, the rule says %d", what, at-timeBase, v.Len(), live)
	}
}

// checkTimelines checks what holds the timelines of v together: byKey
// holds a timedEntry for a key with a timeline (its copy of the entry,
// the entry the B-tree holds, the timeline its topic lists in its slot)
// and the entry itself for any other key; each listed timeline is its
// key's. The caller holds the lock.
func checkTimelines(v *View) error {
	for _, tv := range v.topics {
		timed := 0
		for it := range tv.byKey.all() {
			k := it.key()
			in, _ := tv.order.Get(it)
			if !it.timed {
				if in != it {
					return fmt.Errorf("topic %s: the B-tree holds %p for %s, byKey %p", tv.name, in, k, it)
				}
				continue
			}
			timed++
			te := timedOf(it)
			// The entry as shown and as held, but for the kind of their
			// allocations (a timedEntry's is wide): the same header and
			// times.
			shown, cur := te.viewItem, *te.cur
			shown.timed = false
			shown.flags &^= itemWide
			cur.flags &^= itemWide
			switch {
			case te.tl == nil || te.cur == nil:
				return fmt.Errorf("topic %s: the timed entry of %s holds timeline %p, entry %p", tv.name, k, te.tl, te.cur)
			case in != te.cur:
				return fmt.Errorf("topic %s: the B-tree holds %p for %s, its timed entry %p", tv.name, in, k, te.cur)
			case shown != cur || te.effAt() != te.cur.effAt() || te.expiry() != te.cur.expiry():
				return fmt.Errorf("topic %s: the timed entry of %s shows %+v (times %d, %d), the entry is %+v (%d, %d)", tv.name, k,
					shown, te.effAt(), te.expiry(), cur, te.cur.effAt(), te.cur.expiry())
			case te.tl.key() != k:
				return fmt.Errorf("topic %s: the timeline of %s holds records of %s", tv.name, k, te.tl.key())
			case te.tl.slot >= len(tv.tls) || tv.tls[te.tl.slot] != te.tl:
				return fmt.Errorf("topic %s: the timeline of %s is not listed in its slot %d", tv.name, k, te.tl.slot)
			}
		}
		if timed != len(tv.tls) {
			return fmt.Errorf("topic %s: %d timed entries, %d timelines listed", tv.name, timed, len(tv.tls))
		}
		for i, tl := range tv.tls {
			if tl.slot != i {
				return fmt.Errorf("topic %s: the timeline in slot %d says slot %d", tv.name, i, tl.slot)
			}
		}
	}
	return nil
}

// TestViewTimeConvergesInAnyOrder is the property the rule promises: the
// same records, scheduled, expiring and cancelled, applied in any order
// and at any moments, read at the same instants, give the same view; and
// that view is the rule's (timeModel). Half the rounds apply everything
// before the first instant and read as the clock moves on; the other half
// apply the records while the clock moves (so records arrive after their
// instant, cancels after the value they cancel took effect) and read after.
func TestViewTimeConvergesInAnyOrder(t *testing.T) {
	seed := propertySeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x71e))
	for round := range 40 {
		recs := timeRandomRecords(rng, 10+rng.IntN(60))
		encoded := make([]record.Record, len(recs))
		for i, r := range recs {
			encoded[i] = r.record(t)
		}
		late := round%2 == 1
		reads := []int64{timeBase - 1}
		for at := int64(timeBase); at < timeBase+200; at += 1 + int64(rng.IntN(12)) {
			reads = append(reads, at)
		}
		if late {
			reads = reads[len(reads)/2:]
		}
		var ref [][32]byte
		for order := range 12 {
			what := fmt.Sprintf("seed %d round %d order %d", seed, round, order)
			perm := rng.Perm(len(recs))
			c := &fakeClock{}
			c.ms.Store(timeBase - 50)
			v := newTimedView(c)
			for i, p := range perm {
				if late {
					// The clock moves while the records arrive, up to the
					// first read; the timer runs at some of the moments.
					c.ms.Store(timeBase - 50 + int64(i)*(reads[0]-timeBase+50)/int64(len(perm)))
					if rng.IntN(3) == 0 {
						v.settleDue()
					}
				}
				v.Apply(encoded[p])
				if err := indexAgrees(v); err != nil {
					t.Fatalf("%s, record %d: %v", what, i, err)
				}
			}
			var digests [][32]byte
			for _, at := range reads {
				c.ms.Store(at)
				// Before the timer runs, a read resolves at its instant.
				for k := range 5 {
					key := fmt.Sprintf("k%d", k)
					want, ok := timeModel(recs, key, at)
					if e, got := v.Get("prices", key); ok != got || ok && string(e.Value) != want.value {
						t.Fatalf("%s at +%dms, the timer not run: Get(%s) = %q, %v; the rule says %q, %v", what, at-timeBase, key, e.Value, got, want.value, ok)
					}
				}
				v.settleDue()
				if err := indexAgrees(v); err != nil {
					t.Fatalf("%s at +%dms: %v", what, at-timeBase, err)
				}
				checkTimeModel(t, v, recs, at, what)
				digests = append(digests, v.Digest())
			}
			if order == 0 {
				ref = digests
			} else if !slices.Equal(digests, ref) {
				t.Fatalf("%s: digests differ from the first order's", what)
			}
		}
	}
}

// TestViewTimeSnapshotRoundTrip writes a view with timed records (pending,
// expired, cancelled) to a snapshot and reads it back: the same reads at
// the same instants, and no expired value in the file.
func TestViewTimeSnapshotRoundTrip(t *testing.T) {
	seed := propertySeed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	for round := range 20 {
		recs := timeRandomRecords(rng, 10+rng.IntN(40))
		c := &fakeClock{}
		c.ms.Store(timeBase + int64(rng.IntN(100)))
		v := newTimedView(c)
		for _, r := range recs {
			v.Apply(r.record(t))
		}
		path := filepath.Join(t.TempDir(), "snap")
		if err := WriteSnapshot(path, v, 0, nil); err != nil {
			t.Fatal(err)
		}
		got, _, _, err := ReadSnapshot(path, c.now)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for at := c.ms.Load(); at < timeBase+200; at += 7 {
			c.ms.Store(at)
			got.settleDue()
			v.settleDue()
			checkTimeModel(t, got, recs, at, fmt.Sprintf("seed %d round %d, from the snapshot", seed, round))
			if got.Digest() != v.Digest() {
				t.Fatalf("seed %d round %d at +%d: the snapshot's view has another digest", seed, round, at-timeBase)
			}
		}
	}

	// An expired value is not in the file.
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	v.Apply(timeRec{key: "gone", value: "secret-price", expires: timeBase + 10, origin: 1, seq: 1, hlc: record.MakeHLC(timeBase, 0)}.record(t))
	v.Apply(timeRec{key: "kept", value: "kept-price", expires: timeBase + 100, origin: 1, seq: 2, hlc: record.MakeHLC(timeBase, 1)}.record(t))
	c.ms.Store(timeBase + 10) // the timer has not run: the value is still in memory
	path := filepath.Join(t.TempDir(), "snap")
	if err := WriteSnapshot(path, v, 0, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("secret-price")) || !bytes.Contains(b, []byte("kept-price")) {
		t.Fatalf("the snapshot holds the expired value, or lost the live one")
	}
	got, _, _, err := ReadSnapshot(path, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Get("prices", "gone"); ok {
		t.Fatal("the expired key came back from the snapshot")
	}
	// The expired key still hides an older write.
	got.Apply(timeRec{key: "gone", value: "older", origin: 2, seq: 1, hlc: record.MakeHLC(timeBase-5, 0)}.record(t))
	if _, ok := got.Get("prices", "gone"); ok {
		t.Fatal("an older write came back over the expired key")
	}
}

// TestViewTimeRules walks the cases of DESIGN.md's "Time" one by one.
func TestViewTimeRules(t *testing.T) {
	hlc := func(ms int64, l uint16) uint64 { return record.MakeHLC(timeBase+ms, l) }
	type read struct {
		at    int64 // ms after timeBase
		value string
	}
	tests := []struct {
		name  string
		recs  []timeRec
		reads []read // value "" = no value
	}{
		{"an expiring value disappears at its instant",
			[]timeRec{{key: "k", value: "a", expires: timeBase + 50, origin: 1, seq: 1, hlc: hlc(0, 0)}},
			[]read{{0, "a"}, {49, "a"}, {50, ""}, {500, ""}}},
		{"the sale at midnight wins over a later write for now",
			[]timeRec{
				{key: "k", value: "regular", origin: 1, seq: 1, hlc: hlc(0, 0)},
				{key: "k", value: "sale", eff: timeBase + 100, origin: 1, seq: 2, hlc: hlc(10, 0)},
				{key: "k", value: "published-later-for-now", origin: 2, seq: 1, hlc: hlc(50, 0)},
			},
			[]read{{60, "published-later-for-now"}, {99, "published-later-for-now"}, {100, "sale"}, {149, "sale"}}},
		{"after the instant, an ordinary write wins again",
			[]timeRec{
				{key: "k", value: "regular", origin: 1, seq: 1, hlc: hlc(0, 0)},
				{key: "k", value: "sale", eff: timeBase + 30, origin: 1, seq: 2, hlc: hlc(10, 0)},
				{key: "k", value: "after-the-instant", origin: 2, seq: 1, hlc: hlc(40, 0)},
			},
			[]read{{55, "after-the-instant"}, {100, "after-the-instant"}}},
		{"a cancel leaves the value in force before",
			[]timeRec{
				{key: "k", value: "regular", origin: 1, seq: 1, hlc: hlc(0, 0)},
				{key: "k", value: "sale", eff: timeBase + 100, origin: 1, seq: 2, hlc: hlc(10, 0)},
				{key: "k", cancel: true, eff: timeBase + 100, origin: 2, seq: 1, hlc: hlc(20, 0)},
			},
			[]read{{99, "regular"}, {100, "regular"}, {200, "regular"}}},
		{"a value rescheduled after a cancel is not voided",
			[]timeRec{
				{key: "k", value: "sale", eff: timeBase + 100, origin: 1, seq: 1, hlc: hlc(10, 0)},
				{key: "k", cancel: true, eff: timeBase + 100, origin: 1, seq: 2, hlc: hlc(20, 0)},
				{key: "k", value: "sale-again", eff: timeBase + 100, origin: 1, seq: 3, hlc: hlc(30, 0)},
			},
			[]read{{99, ""}, {100, "sale-again"}}},
		{"a scheduled tombstone deletes at its instant",
			[]timeRec{
				{key: "k", value: "sale", origin: 1, seq: 1, hlc: hlc(0, 0)},
				{key: "k", del: true, eff: timeBase + 100, origin: 1, seq: 2, hlc: hlc(10, 0)},
			},
			[]read{{99, "sale"}, {100, ""}}},
		{"an expired value hides the older ones",
			[]timeRec{
				{key: "k", value: "old", origin: 1, seq: 1, hlc: hlc(0, 0)},
				{key: "k", value: "promo", expires: timeBase + 100, origin: 1, seq: 2, hlc: hlc(10, 0)},
			},
			[]read{{99, "promo"}, {100, ""}}},
		{"a scheduled value with an expiry: in force between the two",
			[]timeRec{
				{key: "k", value: "regular", origin: 1, seq: 1, hlc: hlc(0, 0)},
				{key: "k", value: "two-hour-promo", eff: timeBase + 100, expires: timeBase + 200, origin: 1, seq: 2, hlc: hlc(10, 0)},
			},
			[]read{{99, "regular"}, {100, "two-hour-promo"}, {200, ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Every order of the records, with the timer run at each read.
			for perm := range permutations(len(tc.recs)) {
				c := &fakeClock{}
				c.ms.Store(timeBase + 55)
				v := newTimedView(c)
				for _, i := range perm {
					v.Apply(tc.recs[i].record(t))
				}
				for _, rd := range tc.reads {
					if timeBase+rd.at < c.ms.Load() {
						continue // the clock does not go back
					}
					c.ms.Store(timeBase + rd.at)
					for _, settled := range []bool{false, true} {
						if settled {
							v.settleDue()
						}
						e, ok := v.Get("prices", "k")
						if got := string(e.Value); ok != (rd.value != "") || got != rd.value {
							t.Fatalf("order %v at +%dms (timer run: %v): %q, %v; want %q", perm, rd.at, settled, got, ok, rd.value)
						}
					}
				}
			}
		})
	}
}

// permutations yields every order of n items (n is small).
func permutations(n int) func(yield func([]int) bool) {
	return func(yield func([]int) bool) {
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		var gen func(k int) bool
		gen = func(k int) bool {
			if k == n {
				return yield(slices.Clone(p))
			}
			for i := k; i < n; i++ {
				p[k], p[i] = p[i], p[k]
				if !gen(k + 1) {
					return false
				}
				p[k], p[i] = p[i], p[k]
			}
			return true
		}
		gen(0)
	}
}

// TestViewTimeFollower: the follower sees an expiry and a scheduled value
// taking effect when the timer runs, with their causes.
func TestViewTimeFollower(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	var seen []Change
	v.FollowFrom(func(ch Change) { seen = append(seen, ch) }, nil)
	v.Apply(timeRec{key: "a", value: "x", expires: timeBase + 10, origin: 1, seq: 1, hlc: record.MakeHLC(timeBase, 0)}.record(t))
	v.Apply(timeRec{key: "b", value: "sale", eff: timeBase + 20, origin: 1, seq: 2, hlc: record.MakeHLC(timeBase, 1)}.record(t))
	if len(seen) != 1 || seen[0].Key != "a" || seen[0].Cause != "" || seen[0].ExpiresAt != timeBase+10 {
		t.Fatalf("after the writes the follower saw %+v; want the write of a alone", seen)
	}
	if p := v.Pending("prices", "", 0); len(p) != 1 || p[0].Key != "b" || p[0].EffectiveAt != timeBase+20 {
		t.Fatalf("Pending = %+v", p)
	}
	c.ms.Store(timeBase + 10)
	if w := v.settleDue(); w != 10*time.Millisecond {
		t.Errorf("next instant in %v, want 10ms", w)
	}
	if len(seen) != 2 || seen[1].Key != "a" || !seen[1].Deleted || seen[1].Cause != CauseExpired {
		t.Fatalf("after the expiry the follower saw %+v", seen)
	}
	c.ms.Store(timeBase + 20)
	v.settleDue()
	if len(seen) != 3 || seen[2].Key != "b" || seen[2].Deleted || string(seen[2].Value) != "sale" || seen[2].Cause != CauseEffective {
		t.Fatalf("after the instant the follower saw %+v", seen)
	}
	if p := v.Pending("prices", "", 0); len(p) != 0 {
		t.Fatalf("Pending after the instant = %+v", p)
	}
	var causes []string
	next, lost := v.TimeEvents(1, func(c Change) { causes = append(causes, c.Key+" "+c.Cause) })
	if next != 3 || lost != 0 || !slices.Equal(causes, []string{"a expired", "b effective"}) {
		t.Fatalf("TimeEvents = %v, next %d, lost %d", causes, next, lost)
	}
}

// BenchmarkViewApplyTime is the view's apply cost of writes with an expiry
// and of scheduled writes, beside plain ones (100,000 keys, each written
// once before the timer starts, so that each Apply replaces an entry or a
// pending record), and what a pending value costs in memory (pending-B,
// measured over 100,000 keys with one pending value each). beside is
// plain where timelines are: an ordinary write in a topic where as many
// other keys have a value pending. Every kind's topic holds those 100,000
// other keys (plain ones but for beside), so that the kinds differ in
// what their keys hold, not in the size of the view: with fillers for
// beside alone, beside measured a view twice the size. queued is the
// instants queued at the end: one a key, not one a write. cpu-ns/op is
// the process's CPU time an Apply, which holds on a loaded machine where
// ns/op does not.
func BenchmarkViewApplyTime(b *testing.B) {
	const keys = 100_000
	far := time.Now().Add(time.Hour).UnixMilli()
	for _, kind := range []string{"plain", "expiring", "scheduled", "beside"} {
		b.Run("kind="+kind, func(b *testing.B) {
			v := New()
			recs := make([]record.Record, keys)
			filler, write := "plain", kind
			if kind == "beside" {
				filler, write = "scheduled", "plain"
			}
			for i := range recs {
				v.Apply(timedBenchRecord(keys+i, filler, far, 1))
				recs[i] = timedBenchRecord(i, write, far, 1)
				v.Apply(recs[i])
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := testkit.ProcessCPU()
			for i := 0; b.Loop(); i++ {
				r := recs[i%keys]
				// A newer stamp, and for an expiry a later one, each time.
				binary.LittleEndian.PutUint64(r[32:], uint64(i+2))
				if kind == "expiring" {
					binary.LittleEndian.PutUint64(r[48:], uint64(far+int64(i)))
				}
				// A scheduled record changes what is pending, not the
				// entry in force: Apply says false.
				if !v.Apply(r) && kind != "scheduled" {
					b.Fatal("apply did not change the view")
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(testkit.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
			v.mu.RLock()
			b.ReportMetric(float64(v.times.len()), "queued")
			v.mu.RUnlock()
		})
	}
	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
			build := func(scheduled bool) (heap uint64) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				v := New()
				buf := make([]byte, 256)
				for i := range keys {
					m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: []byte("19.99 EUR/unit  ")}
					n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: uint64(i + 1)})
					v.Apply(record.Record(buf[:n]))
					if scheduled {
						m.Value, m.EffectiveAt = []byte("14.99 EUR/unit  "), far
						n = record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(keys + i + 1), HLC: uint64(keys + i + 1)})
						v.Apply(record.Record(buf[:n]))
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(v)
				return after.HeapAlloc - before.HeapAlloc
			}
			plain, pending := build(false), build(true)
			b.ReportMetric(float64(plain)/keys, "entry-B")
			b.ReportMetric(float64(int64(pending)-int64(plain))/keys, "pending-B")
		}
	})
}

// timedBenchRecord is the benchmarks' record for key i of a kind (plain,
// expiring or scheduled, at far), stamped seq.
func timedBenchRecord(i int, kind string, far int64, seq uint64) record.Record {
	m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: []byte("19.99 EUR/unit  ")}
	switch kind {
	case "expiring":
		m.ExpiresAt = far
	case "scheduled":
		m.EffectiveAt = far
	}
	buf := make([]byte, m.EncodedSize())
	record.Encode(buf, m, record.Stamp{Origin: 1, Seq: seq, HLC: seq})
	return buf
}

// BenchmarkViewApplyTimeFirst is BenchmarkViewApplyTime for the first
// write of each key: every Apply adds a key the view has not held (its
// map and B-tree grow), with an expiry, or scheduled (the key's first
// timeline and the placeholder that holds the key until the instant).
func BenchmarkViewApplyTimeFirst(b *testing.B) {
	far := time.Now().Add(time.Hour).UnixMilli()
	for _, kind := range []string{"plain", "expiring", "scheduled"} {
		b.Run("kind="+kind, func(b *testing.B) {
			v := New()
			recs := make([]record.Record, b.N)
			for i := range recs {
				recs[i] = timedBenchRecord(i, kind, far, uint64(i+1))
			}
			benchApplyEach(b, v, recs, kind)
		})
	}
}

// benchApplyEach times the Apply of each of recs (b.N of them) to v and
// reports the process's CPU time an Apply. A scheduled record changes
// what is pending, not the entry in force: Apply says false for it.
func benchApplyEach(b *testing.B, v *View, recs []record.Record, kind string) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testkit.ProcessCPU()
	for i := range b.N {
		if !v.Apply(recs[i]) && kind != "scheduled" {
			b.Fatal("apply did not change the view")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(testkit.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkViewApplyTimeSale is the sale at midnight: the first scheduled
// write of a key that has a plain value in force (the key's first
// timeline), beside a plain write again of such a key. Every Apply writes
// a key of its own, which holds one plain value before the timer starts.
func BenchmarkViewApplyTimeSale(b *testing.B) {
	far := time.Now().Add(time.Hour).UnixMilli()
	for _, kind := range []string{"plain", "scheduled"} {
		b.Run("kind="+kind, func(b *testing.B) {
			v := New()
			recs := make([]record.Record, b.N)
			for i := range recs {
				v.Apply(timedBenchRecord(i, "plain", far, uint64(i+1)))
				recs[i] = timedBenchRecord(i, kind, far, uint64(b.N+i+1))
			}
			benchApplyEach(b, v, recs, kind)
		})
	}
}

// BenchmarkSettleFlip is the timer's work at an instant that 10,000 keys
// are scheduled for: settling every entry (the follower told of each).
func BenchmarkSettleFlip(b *testing.B) {
	const keys = 10_000
	for b.Loop() {
		b.StopTimer()
		c := &fakeClock{}
		c.ms.Store(timeBase)
		v := newTimedView(c)
		v.FollowFrom(func(Change) {}, nil)
		buf := make([]byte, 256)
		for i := range keys {
			m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: []byte("12.50")}
			n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(2*i + 1), HLC: record.MakeHLC(timeBase, 0) + uint64(2*i)})
			v.Apply(record.Record(buf[:n]))
			m.Value, m.EffectiveAt = []byte("9.99"), timeBase+1000
			n = record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(2*i + 2), HLC: record.MakeHLC(timeBase, 0) + uint64(2*i+1)})
			v.Apply(record.Record(buf[:n]))
		}
		c.ms.Store(timeBase + 1000)
		b.StartTimer()
		v.settleDue()
	}
}

// TestTimeEventsDropOldest: the event list grows as events come, keeps at
// least timeEventsKept of the newest past its bound, and a reader that
// fell behind is told how many it lost.
func TestTimeEventsDropOldest(t *testing.T) {
	var e timeEvents
	if got := e.next(); got != 1 {
		t.Fatalf("empty next = %d, want 1", got)
	}
	total := uint64(2*timeEventsKept + 10)
	for i := uint64(0); i < total; i++ {
		e.add(Change{Key: "k", Cause: "expired"})
	}
	if got := e.next(); got != total+1 {
		t.Fatalf("next = %d, want %d", got, total+1)
	}
	if kept := uint64(len(e.events)); kept < timeEventsKept || kept > 2*timeEventsKept {
		t.Fatalf("kept %d events, want between %d and %d", kept, timeEventsKept, 2*timeEventsKept)
	}
	v := &View{events: e}
	n := 0
	next, lost := v.TimeEvents(1, func(Change) { n++ })
	if next != total+1 || lost+uint64(n) != total {
		t.Fatalf("TimeEvents(1) = next %d, lost %d, read %d; want next %d and lost+read = %d", next, lost, n, total+1, total)
	}
}

// TestGetManyOneInstant: GetMany reads the clock once, so keys scheduled
// for one instant are all before it or all after it even when the clock
// crosses the instant during the lookup (here at every reading of it);
// Get, one key, reads it at its own instant.
func TestGetManyOneInstant(t *testing.T) {
	var c fakeClock
	c.ms.Store(timeBase)
	v := New()
	v.SetClock(func() time.Time { return time.UnixMilli(c.ms.Add(1) - 1) }) // moves 1 ms a reading
	const n = 8
	var topics, keys []string
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		topics, keys = append(topics, "prices"), append(keys, k)
		v.Apply(timeRec{key: k, value: "old", origin: 0x11, seq: uint64(2*i + 1), hlc: record.MakeHLC(timeBase-100, 0)}.record(t))
		v.Apply(timeRec{key: k, value: "new", origin: 0x11, seq: uint64(2*i + 2), hlc: record.MakeHLC(timeBase-100, 1), eff: timeBase + 50}.record(t))
	}
	entries, found := make([]Entry, n), make([]bool, n)
	for c.ms.Load() < timeBase+100 {
		v.GetMany(topics, keys, entries, found, nil)
		for i := range n {
			if !found[i] || string(entries[i].Value) != string(entries[0].Value) {
				t.Fatalf("at +%dms one GetMany served k0 %q and k%d %q", c.ms.Load()-timeBase, entries[0].Value, i, entries[i].Value)
			}
		}
	}
}

// BenchmarkViewGetTime is the cost of reading a key with an expiry (one
// clock read) and a key with a value pending (its timeline resolved at
// the read's instant), beside a plain key: 100,000 keys of each kind in
// one view, read in a random order. pending writes each key's value and
// its pending one in turn, so that the entries lie among the pending
// records; sale writes every value first and then the schedule, as a
// sale at midnight comes to keys written long before; beside reads
// plain keys of a topic where as many other keys have a value pending.
// Every kind's topic holds 100,000 other keys besides (plain ones but for
// beside), written in turn with its own, so that the kinds differ in what
// their keys hold, not in the size of the map or of the memory a read
// ranges over: with fillers for beside alone, beside measured a map twice
// the size. cpu-ns/op is the process's CPU time a Get.
func BenchmarkViewGetTime(b *testing.B) {
	const keys = 100_000
	far := time.Now().Add(time.Hour).UnixMilli()
	v := New()
	buf := make([]byte, 256)
	seq := uint64(0)
	apply := func(m *record.Message) {
		seq++
		n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: seq, HLC: seq})
		v.Apply(record.Record(buf[:n]))
	}
	kinds := []string{"plain", "expiring", "pending", "sale", "beside"}
	for _, kind := range kinds {
		for i := range keys {
			filler := &record.Message{Topic: kind, Key: viewBenchKey(keys + i), Value: []byte("14.99 EUR/unit  ")}
			if kind == "beside" {
				filler.EffectiveAt = far
			}
			apply(filler)
			m := &record.Message{Topic: kind, Key: viewBenchKey(i), Value: []byte("19.99 EUR/unit  ")}
			if kind == "expiring" {
				m.ExpiresAt = far
			}
			apply(m)
			if kind == "pending" {
				m.Value, m.EffectiveAt = []byte("14.99 EUR/unit  "), far
				apply(m)
			}
		}
		if kind == "sale" {
			// The sale at midnight: the values were there before the
			// schedule came, so their entries lie together in memory.
			for i := range keys {
				apply(&record.Message{Topic: kind, Key: viewBenchKey(i), Value: []byte("14.99 EUR/unit  "), EffectiveAt: far})
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]string, 1<<16)
	for i := range order {
		order[i] = viewBenchKey(rng.IntN(keys))
	}
	for _, kind := range kinds {
		b.Run("kind="+kind, func(b *testing.B) {
			b.ReportAllocs()
			cpu := testkit.ProcessCPU()
			for i := 0; b.Loop(); i++ {
				if e, ok := v.Get(kind, order[i&(len(order)-1)]); !ok || e.Value[0] != '1' || e.Value[1] != '9' {
					b.Fatal("not the value in force")
				}
			}
			b.ReportMetric(float64(testkit.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestWallMilli: the view's own clock reads the wall clock that time.Now
// does, to the millisecond.
func TestWallMilli(t *testing.T) {
	for range 1000 {
		before := time.Now().UnixMilli()
		got := wallMilli()
		after := time.Now().UnixMilli()
		if got < before || got > after {
			t.Fatalf("wallMilli %d, not within [%d, %d] of time.Now", got, before, after)
		}
	}
}

// TestRescheduleAfterFreeze: a key scheduled again for one instant
// replaces its pending record in place only while no frozen clone holds
// the timeline: a clone made before keeps the value it saw, the view
// serves the last one at the instant.
func TestRescheduleAfterFreeze(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	hlc := func(ms int64) uint64 { return record.MakeHLC(timeBase+ms, 0) }
	at := int64(timeBase + 100)
	apply := func(value string, seq uint64) {
		t.Helper()
		v.Apply(timeRec{key: "k", value: value, eff: at, origin: 1, seq: seq, hlc: hlc(int64(seq))}.record(t))
	}
	pending := func(topics []frozenTopic) (values []string) {
		for _, ft := range topics {
			ft.records(func(it *viewItem) bool {
				values = append(values, string(it.valueIn(ft.file, ft.name)))
				return true
			})
		}
		return values
	}
	apply("first", 1)
	apply("second", 2) // in place: nothing frozen
	before, _ := v.freeze()
	apply("third", 3) // a new timeline: the clone holds the old one
	apply("fourth", 4)
	if got := pending(before); !slices.Equal(got, []string{"second"}) {
		t.Fatalf("the clone made before the reschedules holds %q, want [second]", got)
	}
	if p := v.PendingKey("prices", "k"); len(p) != 1 || string(p[0].Value) != "fourth" {
		t.Fatalf("pending %+v, want fourth alone", p)
	}
	c.ms.Store(at)
	if e, ok := v.Get("prices", "k"); !ok || string(e.Value) != "fourth" {
		t.Fatalf("at the instant: %q, %v; want fourth", e.Value, ok)
	}
}

// TestReadAfterClockStepsBack: a read takes a key's entry without its
// timeline only between the latest settling and the next instant queued.
// When the wall clock steps back before an instant the entry was settled
// past, the read resolves the timeline at its own instant: the value in
// force then.
func TestReadAfterClockStepsBack(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	hlc := func(ms int64) uint64 { return record.MakeHLC(timeBase+ms, 0) }
	v.Apply(timeRec{key: "k", value: "regular", origin: 1, seq: 1, hlc: hlc(0)}.record(t))
	v.Apply(timeRec{key: "k", value: "sale", eff: timeBase + 100, origin: 1, seq: 2, hlc: hlc(1)}.record(t))
	v.Apply(timeRec{key: "later", value: "x", eff: timeBase + 500, origin: 1, seq: 3, hlc: hlc(2)}.record(t))
	get := func(at int64) string {
		t.Helper()
		c.ms.Store(timeBase + at)
		e, _ := v.Get("prices", "k")
		return string(e.Value)
	}
	if got := get(99); got != "regular" {
		t.Fatalf("at +99ms: %q, want regular", got)
	}
	if got := get(100); got != "sale" {
		t.Fatalf("at +100ms, the timer not run: %q, want sale", got)
	}
	v.settleDue() // settled at +100: the entry is the sale, the next instant +500
	if got := get(100); got != "sale" {
		t.Fatalf("at +100ms, settled: %q, want sale", got)
	}
	if got := get(60); got != "regular" {
		t.Fatalf("at +60ms, the clock stepped back after the settling: %q, want regular", got)
	}
}

// TestRescheduleInForce: a key scheduled again for an instant that has
// passed replaces the value in force, and the follower is told; the
// record it supersedes is the entry, so it is not overwritten in place.
func TestRescheduleInForce(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase + 50)
	v := newTimedView(c)
	var told []string
	v.FollowFrom(func(ch Change) { told = append(told, string(ch.Value)) }, nil)
	hlc := func(ms int64) uint64 { return record.MakeHLC(timeBase+ms, 0) }
	v.Apply(timeRec{key: "k", value: "regular", origin: 1, seq: 1, hlc: hlc(0)}.record(t))
	v.Apply(timeRec{key: "k", value: "sale", eff: timeBase + 30, origin: 1, seq: 2, hlc: hlc(1)}.record(t))
	if !v.Apply(timeRec{key: "k", value: "sale-again", eff: timeBase + 30, origin: 1, seq: 3, hlc: hlc(2)}.record(t)) {
		t.Fatal("rescheduling the instant in force did not change the entry")
	}
	if e, _ := v.Get("prices", "k"); string(e.Value) != "sale-again" {
		t.Fatalf("Get = %q, want sale-again", e.Value)
	}
	if !slices.Equal(told, []string{"regular", "sale", "sale-again"}) {
		t.Fatalf("the follower was told %q, want regular, sale, sale-again", told)
	}
}

// TestTimelineSize: a timeline with its two records inline and its entry
// is one 64-byte allocation class.
func TestTimelineSize(t *testing.T) {
	if n := unsafe.Sizeof(timeline{}); n > 64 {
		t.Fatalf("a timeline is %d bytes, want at most 64", n)
	}
}

// TestScaleInstantKeysOutOfOrder: keys of three topics expire in an order
// unrelated to the one they were queued in, and more are queued half way;
// at each step the timer drops exactly the expired ones (their keys found
// again from the arena), the arena never holds more than its most keys'
// slots (those queued half way take the slots of those that came), and
// once every instant has come it holds a spare chunk only, which a key
// queued again and again reuses.
func TestScaleInstantKeysOutOfOrder(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	const keys, later = 60_000, 20_000
	rng := rand.New(rand.NewPCG(3, 4))
	topics := []string{"prices", "stock", "promo"}
	expires := make([]int64, keys+later)
	buf := make([]byte, 256)
	key := func(i int) string { return fmt.Sprintf("sku-%026d", i) } // 36-byte entries, 40-byte slots
	queue := func(i int, from int64) {
		expires[i] = from + 1 + int64(rng.IntN(1000))
		m := &record.Message{Topic: topics[i%3], Key: key(i), Value: []byte("1"), ExpiresAt: expires[i]}
		n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: record.MakeHLC(from, 0) + uint64(i)})
		v.Apply(record.Record(buf[:n]))
	}
	for i := range keys {
		queue(i, timeBase)
	}
	arenaBytes := func() (n int) {
		for _, ch := range v.timeKeys.chunks {
			n += cap(ch)
		}
		return n
	}
	most := arenaBytes()
	if most > keys*40+arenaChunk {
		t.Fatalf("%d keys queued in %d arena bytes", keys, most)
	}
	n := keys
	for now := int64(timeBase); now <= timeBase+2000; now += 50 {
		c.ms.Store(now)
		v.settleDue()
		if now == timeBase+600 {
			for i := keys; i < keys+later; i++ {
				queue(i, now)
			}
			n += later
		}
		v.mu.RLock()
		queued, live, held := v.times.len(), v.timeKeys.live, arenaBytes()
		v.mu.RUnlock()
		if held > most {
			t.Fatalf("at +%d ms the arena holds %d bytes, had %d at most", now-timeBase, held, most)
		}
		want := 0
		for i := range n {
			_, ok := v.Get(topics[i%3], key(i))
			if alive := expires[i] > now; alive != ok {
				t.Fatalf("at +%d ms key %d (expires +%d) served %v", now-timeBase, i, expires[i]-timeBase, ok)
			} else if alive {
				want++
			}
		}
		if queued != want || live != want {
			t.Fatalf("at +%d ms %d instants queued, %d arena entries, want %d", now-timeBase, queued, live, want)
		}
	}
	if v.Dropped() != keys+later {
		t.Fatalf("Dropped = %d, want %d", v.Dropped(), keys+later)
	}
	if len(v.timeKeys.chunks) != 0 || cap(v.timeKeys.spare) != arenaChunk {
		t.Fatalf("with nothing queued the arena holds %d chunks, a spare of %d bytes", len(v.timeKeys.chunks), cap(v.timeKeys.spare))
	}
	// A key queued and settled again and again reuses the spare chunk.
	chunk := unsafe.SliceData(v.timeKeys.spare[:1])
	for i := range 10 {
		now := c.ms.Load()
		m := &record.Message{Topic: "prices", Key: "again", Value: []byte("1"), ExpiresAt: now + 1}
		n := record.Encode(buf, m, record.Stamp{Origin: 2, Seq: uint64(i + 1), HLC: record.MakeHLC(now, 0)})
		v.Apply(record.Record(buf[:n]))
		c.ms.Store(now + 1)
		v.settleDue()
		if _, ok := v.Get("prices", "again"); ok || v.times.len() != 0 || unsafe.SliceData(v.timeKeys.spare[:1]) != chunk {
			t.Fatalf("round %d: served %v, %d queued, the arena's chunk made again", i, ok, v.times.len())
		}
	}
}

// TestSlotClass: every entry size gets a slot of its size at least, the
// free-list link's at least, and a class within the arena's.
func TestSlotClass(t *testing.T) {
	prev := -1
	for n := 7; n <= 6+record.MaxKeyBytes; n++ {
		c, size := slotClass(n)
		if size < n || size < 8 || c < prev || c >= arenaClasses || n <= 256 && size-n >= 8 {
			t.Fatalf("entry of %d bytes: class %d, slot %d", n, c, size)
		}
		if c2, size2 := slotClass(size); c2 != c || size2 != size {
			t.Fatalf("slot of %d bytes: class %d (%d), want %d", size, c2, size2, c)
		}
		prev = c
	}
}

// TestInstantsHeap: the paged heap pops its instants in order across
// pages, as they are pushed and popped in turns, and gives its pages
// back as it empties (one spare kept).
func TestInstantsHeap(t *testing.T) {
	var h instants
	rng := rand.New(rand.NewPCG(5, 6))
	var model []int64
	for round := range 4 {
		for range 3*instantPage + 17 {
			at := rng.Int64N(1 << 40)
			h.push(instant{at: at, ref: uint64(at) ^ 0xff})
			model = append(model, at)
		}
		slices.Sort(model)
		pop := len(model) / 2
		if round == 3 {
			pop = len(model)
		}
		for i := range pop {
			in := h.pop()
			if in.at != model[i] || in.ref != uint64(in.at)^0xff {
				t.Fatalf("round %d pop %d = %+v, want at %d", round, i, in, model[i])
			}
		}
		model = model[pop:]
		if h.len() != len(model) || len(h.pages) > h.len()/instantPage+2 {
			t.Fatalf("round %d: %d instants in %d pages, want %d", round, h.len(), len(h.pages), len(model))
		}
	}
	if len(h.pages) > 1 {
		t.Fatalf("empty heap holds %d pages", len(h.pages))
	}
}

// TestReplayedExpiringWrite: an ordinary write with an expiry that the
// view holds already, or one it supersedes, changes nothing and allocates
// nothing (the read-locked check, as for a plain write), where a newer one
// still applies.
func TestReplayedExpiringWrite(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	hlc := record.MakeHLC(timeBase, 0)
	cur := timeRec{key: "k", value: "new", expires: timeBase + 1000, origin: 1, seq: 2, hlc: hlc + 1}.record(t)
	older := timeRec{key: "k", value: "old", expires: timeBase + 2000, origin: 1, seq: 1, hlc: hlc}.record(t)
	if !v.Apply(cur) {
		t.Fatal("first apply changed nothing")
	}
	for _, r := range []record.Record{cur, older} {
		if n := testing.AllocsPerRun(100, func() {
			if v.Apply(r) {
				t.Fatal("a replayed or older write changed the view")
			}
		}); n != 0 {
			t.Fatalf("a replayed or older write allocated %v times", n)
		}
	}
	if e, ok := v.Get("prices", "k"); !ok || string(e.Value) != "new" || e.ExpiresAt != timeBase+1000 {
		t.Fatalf("Get = %+v, %v", e, ok)
	}
	newer := timeRec{key: "k", value: "newer", expires: timeBase + 500, origin: 1, seq: 3, hlc: hlc + 2}.record(t)
	if !v.Apply(newer) {
		t.Fatal("a newer write changed nothing")
	}
}

// TestTimelinesListed: many keys get their first timeline, over a value
// in force or over nothing, and lose it again (a write after the instant
// took effect), in an order that moves the list's slots around: after
// each step the timed entries, the B-tree and the list agree
// (checkTimelines), Pending lists exactly the keys with a record pending,
// in key order and from after on, and a clone frozen before the changes
// still holds what it held (the list is copied before a slot it shares
// is written).
func TestTimelinesListed(t *testing.T) {
	const keys = 500
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	hlc := func(ms int64, n int) uint64 { return record.MakeHLC(timeBase+ms, 0) + uint64(n) }
	key := func(i int) string { return fmt.Sprintf("k%04d", i) }
	seq := uint64(0)
	apply := func(r timeRec) {
		t.Helper()
		seq++
		r.origin, r.seq = 1, seq
		v.Apply(r.record(t))
	}
	check := func(what string, pending []string) {
		t.Helper()
		v.mu.RLock()
		err := checkTimelines(v)
		v.mu.RUnlock()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// The keys Pending lists, once each (a key lists each of its
		// pending records).
		listed := func(after string, limit int) (keys []string) {
			for _, p := range v.Pending("prices", after, limit) {
				if len(keys) == 0 || keys[len(keys)-1] != p.Key {
					keys = append(keys, p.Key)
				}
			}
			return keys
		}
		if got := listed("", 0); !slices.Equal(got, pending) {
			t.Fatalf("%s: Pending lists %d keys %v, want %d %v", what, len(got), got, len(pending), pending)
		}
		if len(pending) > 2 {
			after := pending[len(pending)/2]
			got := listed(after, 2)
			if i := len(pending)/2 + 1; !slices.Equal(got, pending[i:min(i+2, len(pending))]) {
				t.Fatalf("%s: Pending after %s lists %v, want %v", what, after, got, pending[i:min(i+2, len(pending))])
			}
		}
	}
	// The even keys hold a value before their schedule (a sale), the odd
	// ones nothing (a key's first write is scheduled).
	for i := 0; i < keys; i += 2 {
		apply(timeRec{key: key(i), value: "19.99", hlc: hlc(0, i)})
	}
	at := int64(timeBase + 1000)
	var all []string
	for i := keys - 1; i >= 0; i-- {
		apply(timeRec{key: key(i), value: "14.99", eff: at, hlc: hlc(1, i)})
	}
	for i := range keys {
		all = append(all, key(i))
	}
	check("scheduled", all)
	frozen := v.Freeze()
	want := frozen.Digests()

	// A second schedule of every third key makes it a new timeline in its
	// slot (the frozen list is copied first).
	later := at + 1000
	var pending []string
	for i := 0; i < keys; i += 3 {
		apply(timeRec{key: key(i), value: "9.99", eff: later, hlc: hlc(2, i)})
		pending = append(pending, key(i))
	}
	check("scheduled again", all)

	// The first instant comes; then a plain write after it of every key
	// not scheduled again ends its timeline: the last listed takes the
	// slot of each one that goes.
	c.ms.Store(at)
	v.settleDue()
	check("at the first instant", pending)
	for i := keys - 1; i >= 0; i-- {
		if i%3 != 0 {
			apply(timeRec{key: key(i), value: "17.99", hlc: hlc(1500, i)})
		}
	}
	check("written after it", pending)
	v.mu.RLock()
	listed := len(v.topics["prices"].tls)
	v.mu.RUnlock()
	if listed != len(pending) {
		t.Fatalf("%d timelines listed after the writes, want %d", listed, len(pending))
	}
	if got := frozen.Digests(); got["prices"] != want["prices"] {
		t.Fatal("the clone frozen before the changes reads them")
	}

	// The second instant comes and a write after it ends every timeline.
	c.ms.Store(later)
	v.settleDue()
	for _, k := range pending {
		apply(timeRec{key: k, value: "8.99", hlc: record.MakeHLC(later+500, 0)})
	}
	check("all written after", nil)
	for i := range keys {
		want := "17.99"
		if i%3 == 0 {
			want = "8.99"
		}
		if e, ok := v.Get("prices", key(i)); !ok || string(e.Value) != want {
			t.Fatalf("%s: %q, %v; want %s", key(i), e.Value, ok, want)
		}
	}
}

// TestFrozenTimelinesWhileAdded: snapshots are encoded from frozen clones
// (without the lock) while a writer gives keys their first timelines,
// schedules them again and ends them: each snapshot decodes (its header's
// count of records is the one its records add up to, so the clone's list
// of timelines and its B-tree are of one instant), and -race sees no
// clone reading what the writer writes.
func TestFrozenTimelinesWhileAdded(t *testing.T) {
	const keys = 2000
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	recs := make([]record.Record, 0, 3*keys)
	for i := range keys {
		k := fmt.Sprintf("k%05d", i)
		hlc := record.MakeHLC(timeBase, 0) + uint64(3*i)
		if i%2 == 0 {
			v.Apply(timeRec{key: k, value: "19.99", origin: 1, seq: uint64(3*i + 1), hlc: hlc}.record(t))
		}
		recs = append(recs,
			timeRec{key: k, value: "14.99", eff: timeBase + 1000, origin: 2, seq: uint64(3*i + 1), hlc: hlc + 1}.record(t),
			timeRec{key: k, value: "12.99", eff: timeBase + 2000, origin: 2, seq: uint64(3*i + 2), hlc: hlc + 2}.record(t))
	}
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for {
			select {
			case <-done:
				return
			default:
			}
			var buf bytes.Buffer
			if err := EncodeSnapshotUpTo(&buf, v, 0, nil, snapVersion2); err != nil {
				errc <- err
				return
			}
			if _, _, _, err := decodeSnapshot(bytes.NewReader(buf.Bytes()), int64(buf.Len()), nil); err != nil {
				errc <- err
				return
			}
			v.Freeze().Digests()
		}
	}()
	for i, r := range recs {
		v.Apply(r)
		if i == len(recs)/2 {
			c.ms.Store(timeBase + 1000)
			v.settleDue()
		}
	}
	c.ms.Store(timeBase + 3000)
	v.settleDue()
	for i := range keys {
		v.Apply(timeRec{key: fmt.Sprintf("k%05d", i), value: "9.99", origin: 3, seq: uint64(i + 1), hlc: record.MakeHLC(timeBase+3000, 0)}.record(t))
	}
	close(done)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	v.mu.RLock()
	err := checkTimelines(v)
	n := len(v.topics["prices"].tls)
	v.mu.RUnlock()
	if err != nil || n != 0 {
		t.Fatalf("after the writes: %v, %d timelines listed", err, n)
	}
}
