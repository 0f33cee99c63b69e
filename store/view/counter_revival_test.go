package view

import (
	"bytes"
	"fmt"
	"maps"
	"runtime"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// revivalRec is an expiry change of the revival of the absence after
// target (deleted, or expired at gone) to expires (record version 6).
func revivalRec(tb testing.TB, target record.Stamp, gone, expires int64, origin, seq, hlc uint64) record.Record {
	tb.Helper()
	m := &record.Message{Topic: "prices", Key: "k", Value: []byte("0"), ExpiresAt: expires, ExpiryOf: target, ExpiryAbsent: true, Gone: gone}
	return stamped(tb, m, record.Stamp{Origin: origin, Seq: seq, HLC: hlc})
}

// TestViewCounterRevivalExpiryFirst: node a counts on the absence of a
// deleted version D (its revival), node b gets that increment and gives
// the revival an expiry, node c gets b's change before a's increment and
// takes an increment itself. The change names the absence (record
// version 6), so c counts on it too: every node ends at the sum of the
// acknowledged increments, with the change's expiry, and c answers its
// own increment without an ended count. Without the absence in the
// change (record version 3) c applied it to what it held of D and its
// increment was dropped on every node.
func TestViewCounterRevivalExpiryFirst(t *testing.T) {
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	far := int64(timeBase + 3_600_000)
	del := timeRec{key: "k", del: true, origin: 9, seq: 1, hlc: hlc(timeBase - 1000)}
	delSt := record.Stamp{Origin: 9, Seq: 1, HLC: del.hlc}
	for _, tc := range []struct {
		name  string
		reset func(t *testing.T, vs []*View, clock *fakeClock) (gone int64) // the state at the phase's start
	}{
		{"the absence after a delete", func(t *testing.T, vs []*View, _ *fakeClock) int64 { return 0 }},
		{"the absence after a revival's expiry", func(t *testing.T, vs []*View, clock *fakeClock) int64 {
			// A count of 50 on D's absence, then PEXPIRE 100 ms.
			inc := absRec(t, "50", delSt, 0, 8, 1, hlc(timeBase-900))
			exp := revivalRec(t, delSt, 0, timeBase+100, 8, 2, hlc(timeBase-800))
			for _, v := range vs {
				v.Apply(inc)
				v.Apply(exp)
			}
			clock.ms.Store(timeBase + 200)
			for _, v := range vs {
				v.settleDue()
				if _, found := v.Get("prices", "k"); found {
					t.Fatal("the revival did not expire")
				}
			}
			return timeBase + 100
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{}
			clock.ms.Store(timeBase)
			a, b, c := newTimedView(clock), newTimedView(clock), newTimedView(clock)
			vs := []*View{a, b, c}
			for _, v := range vs {
				v.Apply(del.record(t))
			}
			gone := tc.reset(t, vs, clock)
			now := clock.ms.Load()
			incA := absRec(t, "3", delSt, gone, 1, 1, hlc(now+1))
			a.Apply(incA)
			b.Apply(incA)
			e, found := b.Get("prices", "k")
			if !found || string(e.Value) != "3" {
				t.Fatalf("b holds %q (found %v) after a's increment", e.Value, found)
			}
			cm := ExpiryChange("prices", "k", e, far)
			if !cm.ExpiryAbsent || cm.Gone != gone {
				t.Fatalf("b's change %+v does not name the absence after D gone at %d", cm, gone)
			}
			chg := stamped(t, &cm, record.Stamp{Origin: 2, Seq: 1, HLC: hlc(now + 2)})
			b.Apply(chg)
			c.Apply(chg) // before a's increment
			ce, cfound := c.Counting("prices", "k")
			m, acked, err := Count("prices", "k", ce, cfound, Increment{N: 4})
			if err != nil {
				t.Fatal(err)
			}
			if string(acked) != "4" {
				t.Errorf("c answers INCRBY 4 with %s, want 4 (a's increment has not come)", acked)
			}
			incC := stamped(t, &m, record.Stamp{Origin: 3, Seq: 1, HLC: hlc(now + 3)})
			c.Apply(incC)
			a.Apply(chg)
			c.Apply(incA)
			a.Apply(incC)
			b.Apply(incC)
			for i, v := range vs {
				if e, found := v.Get("prices", "k"); !found || string(e.Value) != "7" || e.ExpiresAt != far {
					t.Errorf("node %c holds %q expiring at %d (found %v), want 7 expiring at %d; c counted on %+v absent %v gone %d",
						'a'+i, e.Value, e.ExpiresAt, found, far, m.CountOn, m.CountAbsent, m.ExpiresAt)
				}
				if v.Digest() != a.Digest() {
					t.Errorf("node %c's digest differs from a's", 'a'+i)
				}
			}
		})
	}
}

// TestViewCounterRevivalExtendedConcurrently: a's revival still lives
// when a extends it (PEXPIRE 1 h after PEXPIRE 100 ms); b's clock saw
// the 100 ms pass first. The extension names the same absence, which
// both count on: both serve the same value with the same expiry,
// whatever their clocks saw first.
func TestViewCounterRevivalExtendedConcurrently(t *testing.T) {
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	del := timeRec{key: "k", del: true, origin: 9, seq: 1, hlc: hlc(timeBase - 1000)}
	delSt := record.Stamp{Origin: 9, Seq: 1, HLC: del.hlc}
	ca, cb := &fakeClock{}, &fakeClock{}
	ca.ms.Store(timeBase)
	cb.ms.Store(timeBase)
	a, b := newTimedView(ca), newTimedView(cb)
	inc := absRec(t, "50", delSt, 0, 8, 1, hlc(timeBase-900))
	r := revivalRec(t, delSt, 0, timeBase+100, 8, 2, hlc(timeBase-800))
	for _, v := range []*View{a, b} {
		v.Apply(del.record(t))
		v.Apply(inc)
		v.Apply(r)
	}
	ca.ms.Store(timeBase + 50)
	a.settleDue()
	ea, found := a.Get("prices", "k")
	if !found {
		t.Fatal("a's revival expired before its time")
	}
	m := ExpiryChange("prices", "k", ea, timeBase+3_600_000)
	t2 := stamped(t, &m, record.Stamp{Origin: 1, Seq: 1, HLC: hlc(timeBase + 50)})
	a.Apply(t2)
	cb.ms.Store(timeBase + 200)
	b.settleDue()
	b.Apply(t2)
	ea, _ = a.Get("prices", "k")
	eb, _ := b.Get("prices", "k")
	if string(ea.Value) != "50" || string(eb.Value) != "50" || ea.ExpiresAt != eb.ExpiresAt || a.Digest() != b.Digest() {
		t.Fatalf("a serves %q expiring at %d, b %q expiring at %d; want both 50, the extension's", ea.Value, ea.ExpiresAt, eb.Value, eb.ExpiresAt)
	}
}

// TestSnapshotKeepsRevivalChanges: a view holding changes of revivals
// (one of a revival with its count, one whose increments have not come,
// whose counter counts nothing yet) writes a snapshot of version 6 that
// loads into the same view: the same digest, marks with their absences,
// and an older change of the same revival loses there as it does here.
func TestSnapshotKeepsRevivalChanges(t *testing.T) {
	far := int64(4_000_000_000_000)
	d := timeRec{key: "k", del: true, origin: 1, seq: 1, hlc: record.MakeHLC(1, 0)}
	dSt := record.Stamp{Origin: 1, Seq: 1, HLC: d.hlc}
	eSt := record.Stamp{Origin: 3, Seq: 1, HLC: record.MakeHLC(2, 1)}
	v := New()
	v.Apply(d.record(t))
	v.Apply(absRec(t, "2", dSt, 0, 2, 1, record.MakeHLC(2, 0)))
	v.Apply(revivalRec(t, dSt, 0, far, 2, 2, record.MakeHLC(3, 0)))
	m := &record.Message{Topic: "prices", Key: "e", Value: []byte("0"), ExpiresAt: far, ExpiryOf: eSt, ExpiryAbsent: true, Gone: 5}
	v.Apply(stamped(t, m, record.Stamp{Origin: 2, Seq: 3, HLC: record.MakeHLC(4, 0)}))
	b := snapEncode(t, v, 64, nil)
	if got := b[8]; got != snapVersion6 {
		t.Fatalf("snapshot version %d, want %d", got, snapVersion6)
	}
	got, _, _, err := decodeSnapshot(bytes.NewReader(b), int64(len(b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tv := got.topics["prices"]; tv == nil || got.Digest() != v.Digest() || !maps.Equal(tv.marks, v.topics["prices"].marks) {
		t.Fatal("the snapshot loads into another view (digest or marks)")
	}
	older := revivalRec(t, dSt, 0, far+1, 2, 9, record.MakeHLC(2, 5))
	for _, w := range []*View{v, got} {
		if w.Apply(older) {
			t.Fatal("an older change of the revival won")
		}
		if e, ok := w.Get("prices", "k"); !ok || string(e.Value) != "2" || e.ExpiresAt != far {
			t.Fatalf("k = %q expiring at %d (found %v), want 2 expiring at %d", e.Value, e.ExpiresAt, ok, far)
		}
		if e, ok := w.Get("prices", "e"); !ok || string(e.Value) != "0" || e.ExpiresAt != far {
			t.Fatalf("e = %q expiring at %d (found %v), want the revival 0 expiring at %d", e.Value, e.ExpiresAt, ok, far)
		}
	}
}

// TestViewRevivalChangeBeatsVersionChange: a change of a deleted
// version D (record version 3, as a build before version 6 writes for
// the revival) and a change of the revival of D's absence (version 6)
// end the same in either order: the revival's change wins, whatever the
// stamps, since the absence comes after the version; the count stays.
func TestViewRevivalChangeBeatsVersionChange(t *testing.T) {
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	far := int64(timeBase + 3_600_000)
	del := timeRec{key: "k", del: true, origin: 9, seq: 1, hlc: hlc(timeBase - 1000)}
	delSt := record.Stamp{Origin: 9, Seq: 1, HLC: del.hlc}
	inc := absRec(t, "5", delSt, 0, 1, 1, hlc(timeBase-900))
	ofVersion := expiryRec(t, "k", "0", 0, delSt, far+500, 2, 1, hlc(timeBase-100)) // the greater stamp
	ofRevival := revivalRec(t, delSt, 0, far, 3, 1, hlc(timeBase-800))
	var digests [][32]byte
	for _, order := range [][]record.Record{{ofVersion, ofRevival}, {ofRevival, ofVersion}} {
		clock := &fakeClock{}
		clock.ms.Store(timeBase)
		v := newTimedView(clock)
		v.Apply(del.record(t))
		v.Apply(inc)
		for _, r := range order {
			v.Apply(r)
		}
		if e, ok := v.Get("prices", "k"); !ok || string(e.Value) != "5" || e.ExpiresAt != far {
			t.Errorf("k = %q expiring at %d (found %v), want the revival 5 expiring at %d (its change's)", e.Value, e.ExpiresAt, ok, far)
		}
		digests = append(digests, v.Digest())
	}
	if digests[0] != digests[1] {
		t.Error("the two orders end in different views")
	}
}

// TestViewCounterLostDecrementOverCounts is the soak's over-count (a
// counter converged on 34 where the acknowledged increments summed to
// 30): a lost increment that was negative. a decrements a key no node
// held (its genesis, from 0), b gets that and gives the revival an
// expiry, c gets b's change before a's DECR and takes a DECRBY 4. The
// change names the absence, so c counts on it too: every node ends at
// -5. When the change named the version only, c made the genesis a
// plain value "0" with the expiry, counted on that version, and every
// node dropped its DECRBY: they all served -1, above the sum.
func TestViewCounterLostDecrementOverCounts(t *testing.T) {
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	far := int64(timeBase + 3_600_000)
	clock := &fakeClock{}
	clock.ms.Store(timeBase)
	a, b, c := newTimedView(clock), newTimedView(clock), newTimedView(clock)
	count := func(v *View, n int64, st record.Stamp) (record.Record, []byte) {
		e, found := v.Counting("prices", "k")
		m, acked, err := Count("prices", "k", e, found, Increment{N: n})
		if err != nil {
			t.Fatal(err)
		}
		return stamped(t, &m, st), acked
	}
	decrA, _ := count(a, -1, record.Stamp{Origin: 1, Seq: 1, HLC: hlc(timeBase + 1)})
	a.Apply(decrA)
	b.Apply(decrA)
	e, found := b.Get("prices", "k")
	if !found || string(e.Value) != "-1" {
		t.Fatalf("b holds %q (found %v) after a's DECR", e.Value, found)
	}
	cm := ExpiryChange("prices", "k", e, far)
	chg := stamped(t, &cm, record.Stamp{Origin: 2, Seq: 1, HLC: hlc(timeBase + 2)})
	b.Apply(chg)
	c.Apply(chg) // before a's DECR
	decrC, acked := count(c, -4, record.Stamp{Origin: 3, Seq: 1, HLC: hlc(timeBase + 3)})
	if string(acked) != "-4" {
		t.Errorf("c answers DECRBY 4 with %s, want -4 (a's DECR has not come)", acked)
	}
	c.Apply(decrC)
	a.Apply(chg)
	c.Apply(decrA)
	a.Apply(decrC)
	b.Apply(decrC)
	for i, v := range []*View{a, b, c} {
		if e, found := v.Get("prices", "k"); !found || string(e.Value) != "-5" || e.ExpiresAt != far {
			t.Errorf("node %c holds %q expiring at %d (found %v), want -5 (the acknowledged -1 and -4) expiring at %d",
				'a'+i, e.Value, e.ExpiresAt, found, far)
		}
		if v.Digest() != a.Digest() {
			t.Errorf("node %c's digest differs from a's", 'a'+i)
		}
	}
}

// TestViewCountingWhileAnIncrementLands is the soak's lost INCRBY (a
// counter converged 6 short): a revival expired at X, settled or not,
// and the first increment after X of another node, which counts on the
// absence after X, lands while this node's Counting reads the key.
// Counting read the key twice, under two holds of the lock: the first
// read found no value, the second the revival that increment started
// (no expiry of its own), whose absence it named as the one after the
// delete (gone 0), which every node had ended: they all dropped the
// increment. Read under one hold, the increment counts on the absence
// after X, and every node counts both.
func TestViewCountingWhileAnIncrementLands(t *testing.T) {
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	del := timeRec{key: "k", del: true, origin: 9, seq: 1, hlc: hlc(timeBase - 1000)}
	delSt := record.Stamp{Origin: 9, Seq: 1, HLC: del.hlc}
	gone := int64(timeBase + 100)
	for _, tc := range []struct {
		name    string
		settled bool
	}{
		{"the expiry not settled yet", false},
		{"the expiry settled", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{}
			clock.ms.Store(timeBase)
			var land func() // run at the next reading of the clock, once
			v := New()
			v.SetClock(func() time.Time {
				if f := land; f != nil {
					land = nil
					f()
				}
				return clock.now()
			})
			v.Apply(del.record(t))
			v.Apply(absRec(t, "50", delSt, 0, 8, 1, hlc(timeBase-900)))
			v.Apply(revivalRec(t, delSt, 0, gone, 8, 2, hlc(timeBase-800)))
			clock.ms.Store(gone + 30)
			if tc.settled {
				v.settleDue()
			}
			other := absRec(t, "7", delSt, gone, 2, 1, hlc(gone+20)) // another node's, after X
			landed := make(chan struct{})
			land = func() {
				// Counting's read holds the read lock: the increment
				// waits for the write lock, and gets it before any
				// later reader (sync.RWMutex: TryRLock fails then).
				go func() {
					v.Apply(other)
					close(landed)
				}()
				for v.mu.TryRLock() {
					v.mu.RUnlock()
					runtime.Gosched()
				}
			}
			e, found := v.Counting("prices", "k")
			<-landed
			m, acked, err := Count("prices", "k", e, found, Increment{N: 6})
			if err != nil {
				t.Fatal(err)
			}
			if !m.CountAbsent || m.CountOn != delSt || m.ExpiresAt != gone {
				t.Errorf("the INCRBY counts on %+v (absent %v, gone %d), want the absence after %+v expired at %d",
					m.CountOn, m.CountAbsent, m.ExpiresAt, delSt, gone)
			}
			v.Apply(stamped(t, &m, record.Stamp{Origin: 1, Seq: 1, HLC: hlc(gone + 30)}))
			if e, found := v.Get("prices", "k"); !found || string(e.Value) != "13" {
				t.Errorf("k = %q (found %v) after the INCRBY answered %s, want 13 (7 and 6 after the expiry)", e.Value, found, acked)
			}
		})
	}
}

// TestViewRevivalOfLaterAbsenceAnyOrder: a counter's revival expires, is
// extended concurrently, and a later absence gets its own revival. D
// deletes k; an increment counts on D's absence (the revival R1, 3);
// R1 gets an expiry (T+100); node o extends R1 (T+5000) before its
// clock reaches T+100, while node p, whose clock passed T+100, counts
// on the absence after R1's expiry (R2, 4). The records, applied one by
// one in every order, end the same; and so does a view that merges
// (Merge, ApplySnapshot) another that took some of them in another
// order, and then takes the rest: the revival R2 of the later absence
// (4), without the extension of R1, which is a change of an earlier
// absence than the one counted. A view whose R1 expired, merging one
// that holds R2 and the extension's mark, tells its follower of R2 only:
// R2 does not carry the extension's expiry, and is no R1 to give it to.
func TestViewRevivalOfLaterAbsenceAnyOrder(t *testing.T) {
	hlc := func(ms int64) uint64 { return record.MakeHLC(ms, 0) }
	del := timeRec{key: "k", del: true, origin: 9, seq: 1, hlc: hlc(timeBase - 1000)}
	delSt := record.Stamp{Origin: 9, Seq: 1, HLC: del.hlc}
	recs := []record.Record{
		del.record(t),
		absRec(t, "3", delSt, 0, 1, 1, hlc(timeBase-900)),
		revivalRec(t, delSt, 0, timeBase+100, 2, 1, hlc(timeBase-800)),
		revivalRec(t, delSt, 0, timeBase+5000, 3, 1, hlc(timeBase+50)), // o's extension
		absRec(t, "4", delSt, timeBase+100, 4, 1, hlc(timeBase+200)),   // p's increment
	}
	clock := &fakeClock{}
	clock.ms.Store(timeBase + 300)
	build := func(order []int) *View {
		v := newTimedView(clock)
		for _, i := range order {
			v.Apply(recs[i])
		}
		v.settleDue()
		return v
	}
	check := func(v *View, what string) {
		t.Helper()
		if e, ok := v.Get("prices", "k"); !ok || string(e.Value) != "4" || e.ExpiresAt != 0 || e.Stamp != delSt {
			t.Errorf("%s: k = %q expiring at %d, stamp %v (found %v); want the revival of the later absence, 4, no expiry",
				what, e.Value, e.ExpiresAt, e.Stamp, ok)
		}
	}
	ref := build([]int{0, 1, 2, 4, 3}).Digest()
	for p := range permutations(len(recs)) {
		v := build(p)
		check(v, fmt.Sprintf("order %v", p))
		if v.Digest() != ref {
			t.Errorf("order %v: the digest differs", p)
		}
	}
	for _, via := range []string{"merge", "snapshot"} {
		v := build([]int{0, 1, 2})
		var told []Change
		v.FollowFrom(func(c Change) { told = append(told, c) }, nil)
		mergeInto(t, v, build([]int{0, 1, 2, 3, 4}), via)
		for _, c := range told {
			if string(c.Value) != "4" || c.ExpiresAt != 0 || c.Deleted {
				t.Errorf("%s: the follower is told %q expiring at %d (deleted %v), want only the revival of the later absence",
					via, c.Value, c.ExpiresAt, c.Deleted)
			}
		}
		check(v, via+" of R2 into R1 expired")
	}
	// A view that took the records of in, in that order, merges one that
	// took those of other, and then takes them all again.
	for in := range permutations(len(recs)) {
		for _, other := range [][]int{{0, 1, 2, 4}, {0, 1, 2, 3, 4}, {0, 1, 4}, {0, 1, 2, 3}} {
			for _, via := range []string{"merge", "snapshot"} {
				for n := range len(recs) + 1 {
					v, o := build(in[:n]), build(other)
					mergeInto(t, v, o, via)
					for _, r := range recs {
						v.Apply(r)
					}
					v.settleDue()
					what := fmt.Sprintf("%v then %s of %v", in[:n], via, other)
					check(v, what)
					if v.Digest() != ref {
						t.Errorf("%s: the digest differs", what)
					}
				}
			}
		}
	}
}

// mergeInto merges o into v via "merge" (Merge) or "snapshot"
// (ApplySnapshot of o's snapshot).
func mergeInto(t *testing.T, v, o *View, via string) {
	t.Helper()
	if via == "merge" {
		v.Merge(o)
	} else if _, _, err := v.ApplySnapshot(bytes.NewReader(snapEncode(t, o, 1, nil))); err != nil {
		t.Fatal(err)
	}
}
