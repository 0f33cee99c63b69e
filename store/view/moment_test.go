package view

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// taken is a digest taken of a view with the Moment it holds for.
type taken struct {
	moment  Moment
	digests map[string][32]byte
	step    int
}

// take freezes v and hashes the clone.
func take(v *View, step int) taken {
	d, m := v.Freeze().Hash()
	return taken{moment: m, digests: d, step: step}
}

// momentChecks counts what checkTaken saw, so that the test can say it
// tested something.
type momentChecks struct {
	held, heldAcrossTime, stale, moved int
}

// checkTaken fails when v holds a digest taken before (Holds) that a
// full hash of v now does not give, and counts the cases.
func (mc *momentChecks) checkTaken(t *testing.T, v *View, kept []taken, step int, what string) {
	t.Helper()
	now := take(v, step).digests
	for _, k := range kept {
		same := maps.Equal(k.digests, now)
		switch held := v.Holds(k.moment); {
		case held && !same:
			t.Fatalf("%s step %d: the view holds the digest taken at step %d, but a full hash now differs", what, step, k.step)
		case held:
			mc.held++
			if v.now() > k.moment.from {
				mc.heldAcrossTime++ // the clock moved since it was taken
			}
		case !same:
			mc.stale++
		default:
			mc.moved++
		}
	}
}

// TestMomentHoldsOnlyWhatAFullHashSays: under random records of every
// kind (plain, deletes, expiring, EXPIRE, scheduled, cancels, counters;
// batches and held groups; values in the shared view file), a clock that
// moves and a timer that runs at random moments, a snapshot applied into
// a live view and a view read back from a snapshot (a restart), a view
// holds a digest taken earlier (View.Holds, what the store's digest
// cache rests on) only while a full hash gives the same, and does hold
// it across writes of nothing and polls of the timer. The full hash is
// the reference, as TestViewTimeConvergesInAnyOrder and its kin prove it
// the same whatever order the records came in.
func TestMomentHoldsOnlyWhatAFullHashSays(t *testing.T) {
	seed := propertySeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0xd16e))
	ft := newFileTwins(t)
	bootstrapped := newTimedView(ft.clock) // takes v's snapshots
	seqs := map[uint64]uint64{}
	var mc momentChecks
	var kept, keptBoot []taken
	what := fmt.Sprintf("seed %d", seed)
	for step := range 800 {
		now := ft.clock.ms.Load()
		switch p := rng.IntN(10); {
		case p < 5:
			origin := uint64(1 + rng.IntN(3))
			next := func() (uint64, uint64, uint64) {
				seqs[origin]++
				return origin, seqs[origin], record.MakeHLC(now+int64(rng.IntN(5)), uint16(seqs[origin]))
			}
			rs := []record.Record{ft.randomRecord(t, rng, -1, now, next)}
			if rng.IntN(4) == 0 {
				rs = append(rs, ft.randomRecord(t, rng, -1, now, next))
			}
			ft.apply(rs...)
		case p < 7:
			ft.clock.ms.Add(int64(rng.IntN(30))) // time alone
		case p < 8:
			ft.v.settleDue() // the timer, due or not
		case p < 9:
			ft.v.Hold() // a group of nothing
			ft.v.Release()
		default:
			var b bytes.Buffer
			if err := EncodeSnapshot(&b, ft.v, 1, nil); err != nil {
				t.Fatal(err)
			}
			if _, _, err := bootstrapped.ApplySnapshot(bytes.NewReader(b.Bytes())); err != nil {
				t.Fatal(err)
			}
			restarted, _, _, err := decodeSnapshot(bytes.NewReader(b.Bytes()), int64(b.Len()), ft.clock.now)
			if err != nil {
				t.Fatal(err)
			}
			if a, r := take(ft.v, step).digests, take(restarted, step).digests; !maps.Equal(a, r) {
				t.Fatalf("%s step %d: the view read back from its snapshot has another digest", what, step)
			}
		}
		mc.checkTaken(t, ft.v, kept, step, what)
		mc.checkTaken(t, bootstrapped, keptBoot, step, what+", bootstrapped")
		if rng.IntN(3) == 0 {
			kept = append(kept, take(ft.v, step))
			keptBoot = append(keptBoot, take(bootstrapped, step))
			if len(kept) > 4 {
				kept, keptBoot = kept[1:], keptBoot[1:]
			}
		}
	}
	t.Logf("%+v", mc)
	if mc.heldAcrossTime == 0 || mc.stale == 0 {
		t.Fatalf("the walk never had a digest held while the clock moved (%d) or gone stale (%d): it tested nothing", mc.heldAcrossTime, mc.stale)
	}
}

// TestMomentHeldByAnIdleView: a view of values with and without an
// expiry holds its digest while nothing is written and the timer polls
// with nothing due, until the first expiry comes; a write of a key moves
// it, whatever its value.
func TestMomentHeldByAnIdleView(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase)
	v := newTimedView(c)
	v.Apply(viewPut("prices", "a", "1", 1, 1, record.MakeHLC(timeBase, 0)).record(t))
	v.Apply(timeRec{key: "b", value: "2", expires: timeBase + 100, origin: 1, seq: 2, hlc: record.MakeHLC(timeBase, 1)}.record(t))
	_, m := v.Freeze().Hash()
	for _, tc := range []struct {
		at   int64
		do   func()
		want bool
	}{
		{timeBase + 10, func() {}, true},
		{timeBase + 20, func() { v.settleDue() }, true},
		{timeBase + 30, func() { v.Hold(); v.Release() }, true},
		{timeBase + 99, func() { v.settleDue() }, true},
		{timeBase + 100, func() {}, false}, // b expires: the digest leaves it out
		{timeBase + 50, func() {}, true},   // the clock back within the span
		{timeBase - 1, func() {}, false},   // before the freeze
		{timeBase + 50, func() {
			v.Apply(viewPut("prices", "a", "1", 1, 3, record.MakeHLC(timeBase+50, 0)).record(t))
		}, false},
	} {
		c.ms.Store(tc.at)
		tc.do()
		if got := v.Holds(m); got != tc.want {
			t.Fatalf("at +%d ms: Holds = %v, want %v", tc.at-timeBase, got, tc.want)
		}
	}
}

// TestDigestDefinitionPinned pins the bytes a digest hashes for records
// of every kind (a tagged value, a delete, an expiring value, a pending
// scheduled value and cancel, a counter, an expiry change), as the
// builds of a fleet compare them (GET /v1/verify, the observer): a
// change of the definition makes a fleet in an upgrade report
// divergence between the old builds and the new. Before changing these
// sums, version the digest on the wire (wire.ViewDigest) so that nodes
// compare only digests of one definition.
func TestDigestDefinitionPinned(t *testing.T) {
	c := &fakeClock{}
	c.ms.Store(timeBase + 100)
	v := newTimedView(c)
	h := func(ms int64, l uint16) uint64 { return record.MakeHLC(timeBase+ms, l) }
	tagged := viewPut("prices", "a", "12.75", 1, 1, h(1, 0))
	tagged.tag = "eu"
	counted := viewPut("prices", "k", "10", 1, 6, h(6, 0)) // incRec's key
	changed := viewPut("prices", "g", "4", 2, 1, h(7, 0))
	for _, r := range []record.Record{
		tagged.record(t),
		viewPut("prices", "b", "gone", 1, 2, h(2, 0)).record(t),
		viewDel("prices", "b", 1, 3, h(3, 0)).record(t),
		timeRec{key: "c", value: "soon", expires: timeBase + 1000, origin: 1, seq: 4, hlc: h(4, 0)}.record(t),
		timeRec{key: "d", value: "later", eff: timeBase + 500, origin: 1, seq: 5, hlc: h(5, 0)}.record(t),
		timeRec{key: "e", cancel: true, eff: timeBase + 600, origin: 2, seq: 2, hlc: h(5, 1)}.record(t),
		counted.record(t),
		incRec(t, "3", record.Stamp{Origin: 1, Seq: 6, HLC: h(6, 0)}, 2, 3, h(8, 0)),
		changed.record(t),
		viewPut("stock", "a", "4", 2, 4, h(9, 1)).record(t),
		expiryRec(t, "g", "4", 0, record.Stamp{Origin: 2, Seq: 1, HLC: h(7, 0)}, timeBase+2000, 1, 7, h(9, 0)),
	} {
		v.Apply(r)
	}
	for _, k := range []struct{ topic, key, value string }{{"prices", "a", "12.75"}, {"prices", "c", "soon"}, {"prices", "k", "13"}, {"prices", "g", "4"}, {"stock", "a", "4"}} {
		if e, ok := v.Get(k.topic, k.key); !ok || string(e.Value) != k.value {
			t.Fatalf("%s/%s = %q, %v; want %q", k.topic, k.key, e.Value, ok, k.value)
		}
	}
	if e, _ := v.Get("prices", "g"); e.ExpiresAt != timeBase+2000 {
		t.Fatalf("the expiry change did not take: %+v", e)
	}
	if p := v.Pending("prices", "", 10); len(p) != 2 {
		t.Fatalf("pending %+v; want the scheduled value and the cancel", p)
	}
	got := map[string]string{}
	for topic, sum := range v.Freeze().Digests() {
		got[topic] = fmt.Sprintf("%x", sum)
	}
	want := map[string]string{
		"prices": "72a8d38bc2ef29c9e80fb423f49a44413922c4a9a5e7850ec77c920e289ed81a",
		"stock":  "0702edf115d48f45471c49e56c8a515781b30d69a0f98beb561af3092dfea106",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("the digest's definition changed (see the test's comment): %v, pinned %v", got, want)
	}
}
