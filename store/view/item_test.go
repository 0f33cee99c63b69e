package view

import (
	"bytes"
	"fmt"
	"iter"
	"runtime"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// TestItemKinds: one key written again and again, by Apply and by
// ApplyBatch, with and without an expiry, frozen clones taken on the way:
// a new entry is a 48-byte item when its times are an ordinary write's
// (none of its own), a 64-byte wideItem otherwise; an update in place
// keeps the entry's allocation, so it is made only into an entry of the
// write's kind (a write with times over a narrow entry makes a wide one,
// a write without over a wide one a narrow one); reads see each write's
// value and expiry; each clone keeps the entry of its instant; and a
// snapshot of the view loads to the same digest.
func TestItemKinds(t *testing.T) {
	var clock fakeClock
	clock.ms.Store(timeBase)
	far := int64(timeBase + 3_600_000)
	steps := []struct {
		value   string
		expires int64
		batch   bool
		wide    bool // the entry's allocation after the write
		freeze  bool // freeze after this step (a clone holds this entry)
	}{
		{value: "plain"},
		{value: "plain-again"}, // in place, narrow into narrow
		{value: "expiring", expires: far, wide: true},
		{value: "expiring-later", expires: far + 1, wide: true}, // in place, wide into wide
		{value: "plain-after-expiring"},                         // a new item: narrow
		{value: "batched", batch: true, freeze: true},           // in place, narrow into narrow
		{value: "expiring-after-freeze", expires: far, batch: true, wide: true},
		{value: "plain-after-freeze", freeze: true},
		{value: "plain-after-second-freeze"}, // a new item: narrow
		{value: "expiring-again", expires: far + 2, wide: true},
	}
	for _, mode := range []string{"apply", "batch"} {
		t.Run(mode, func(t *testing.T) {
			v := newTimedView(&clock)
			var frozen []iter.Seq[Change]
			var frozenWant []Entry
			for i, s := range steps {
				st := record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: record.MakeHLC(timeBase-1000+int64(i), 0)}
				r := stamped(t, &record.Message{Topic: "prices", Key: "k", Value: []byte(s.value), ExpiresAt: s.expires}, st)
				if mode == "batch" || s.batch {
					if v.ApplyBatch([]record.Record{r}) != 1 {
						t.Fatalf("step %d (%s): ApplyBatch changed nothing", i, s.value)
					}
				} else if !v.Apply(r) {
					t.Fatalf("step %d (%s): Apply changed nothing", i, s.value)
				}
				e, ok := v.Get("prices", "k")
				if !ok || string(e.Value) != s.value || e.ExpiresAt != s.expires || e.Stamp != st {
					t.Fatalf("step %d: Get = %q, expires %d, stamp %v, %v; want %q, %d, %v", i, e.Value, e.ExpiresAt, e.Stamp, ok, s.value, s.expires, st)
				}
				if err := checkItemKind(v, "prices", "k", s.wide); err != nil {
					t.Fatalf("step %d (%s): %v", i, s.value, err)
				}
				if s.freeze {
					frozen = append(frozen, v.FollowFrom(nil, nil))
					frozenWant = append(frozenWant, e)
				}
			}
			for i, f := range frozen {
				want, n := frozenWant[i], 0
				for c := range f {
					n++
					if c.Key != "k" || string(c.Value) != string(want.Value) || c.ExpiresAt != want.ExpiresAt || c.Stamp != want.Stamp {
						t.Fatalf("the view frozen at %q holds %+v", want.Value, c)
					}
				}
				if n != 1 {
					t.Fatalf("the view frozen at %q holds %d entries, want 1", want.Value, n)
				}
			}
			var snap bytes.Buffer
			if err := EncodeSnapshot(&snap, v, 0, nil); err != nil {
				t.Fatal(err)
			}
			back, _, _, err := decodeSnapshot(&snap, int64(snap.Len()), clock.now)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkItemKind(back, "prices", "k", true); err != nil {
				t.Fatalf("from the snapshot: %v", err)
			}
			if a, b := v.Digest(), back.Digest(); a != b {
				t.Fatalf("digest %x, from the snapshot %x", a, b)
			}
		})
	}
}

// checkItemKind reports an entry whose allocation is not of the kind
// wide says.
func checkItemKind(v *View, topic, key string, wide bool) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	it := v.topics[topic].byKey.get(key)
	if it == nil {
		return fmt.Errorf("no entry for %s", key)
	}
	if got := it.flags&itemWide != 0; got != wide {
		return fmt.Errorf("entry %q: wide %v, want %v (expiry %d, effective %d)", it.valueIn(&v.shared, topic), got, wide, it.expiry(), it.effAt())
	}
	return nil
}

// TestFileValuesAfterTimes: a key whose entry once had times of its own
// (an expiry, by SET EX or EXPIRE; an expired value) and has none any
// more (a plain SET, a PERSIST; by Apply, ApplyBatch, Merge and
// ApplySnapshot) is a 48-byte item again; one that gets an expiry is a
// 64-byte item; either keeps its value in the view file only, once the
// follower wrote it there. Each case runs with the entry updatable in
// place (no clone holds it) and with a clone frozen before the last
// step, which must hash after it as before. The end checks the entry
// read, its kind and where its value is.
func TestFileValuesAfterTimes(t *testing.T) {
	far := int64(timeBase + 3_600_000)
	cases := []struct {
		name  string
		steps []fileStep
		gone  bool // the last step's entry expired
	}{
		{name: "EX then SET", steps: []fileStep{{value: "a", expires: far}, {value: "b"}}},
		{name: "EX then SET batched", steps: []fileStep{{value: "a", expires: far}, {value: "b", via: "batch"}}},
		{name: "EX then PERSIST", steps: []fileStep{{value: "a", expires: far}, {persist: true}}},
		{name: "SET, EXPIRE, SET", steps: []fileStep{{value: "a"}, {persist: true, expires: far}, {value: "b"}}},
		{name: "SET, EXPIRE, PERSIST", steps: []fileStep{{value: "a"}, {persist: true, expires: far}, {persist: true}}},
		{name: "EX, expired, SET", steps: []fileStep{{value: "a", expires: far}, {value: "b", expire: true}}},
		{name: "EX then SET merged", steps: []fileStep{{value: "a", expires: far}, {value: "b", via: "merge"}}},
		{name: "EX then SET from a snapshot", steps: []fileStep{{value: "a", expires: far}, {value: "b", via: "snapshot"}}},
		{name: "SET then EX", steps: []fileStep{{value: "a"}, {value: "b", expires: far}}},
		{name: "SET, EX, SET", steps: []fileStep{{value: "a"}, {value: "b", expires: far}, {value: "c"}}},
		{name: "EX, EX later", steps: []fileStep{{value: "a", expires: far}, {value: "b", expires: far + 1}}},
		{name: "SET then EX merged", steps: []fileStep{{value: "a"}, {value: "b", expires: far, via: "merge"}}},
		{name: "SET then EX from a snapshot", steps: []fileStep{{value: "a"}, {value: "b", expires: far, via: "snapshot"}}},
		{name: "SET, EX, expired", steps: []fileStep{{value: "a"}, {value: "b", expires: far}, {expire: true}}, gone: true},
	}
	for _, tc := range cases {
		for _, freeze := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/frozen=%v", tc.name, freeze), func(t *testing.T) {
				checkFileValuesAfterTimes(t, tc.steps, tc.gone, freeze)
			})
		}
	}
}

// fileStep is a step of TestFileValuesAfterTimes: the clock passes the
// entry's expiry (expire), then a write of value expiring at expires,
// or (persist) an expiry change of the entry in force to expires, or
// nothing (value empty); by Apply or via "batch" (ApplyBatch), "merge"
// (from a view holding the record) or "snapshot" (ApplySnapshot of that
// view's).
type fileStep struct {
	value   string
	expires int64
	persist bool
	via     string
	expire  bool
}

// checkFileValuesAfterTimes runs the steps on a view whose values go into
// a view file, with a clone frozen before the last (freeze), and checks
// the entry at the end: gone, or the last step's, in the file, narrow
// when it has no expiry, wide otherwise.
func checkFileValuesAfterTimes(t *testing.T, steps []fileStep, gone, freeze bool) {
	clock := &fakeClock{}
	clock.ms.Store(timeBase)
	v := newTimedView(clock)
	followFile(t, v)
	var (
		frozen Frozen
		want   map[string][32]byte
	)
	for i, s := range steps {
		if freeze && i == len(steps)-1 {
			frozen = v.Freeze()
			want = frozen.Digests()
		}
		if s.expire {
			e, _ := v.Get("prices", "k")
			clock.ms.Store(e.ExpiresAt)
			v.settleDue()
		}
		if s.value != "" || s.persist {
			applyFileStep(t, v, clock, i, s)
		}
	}
	v.mu.RLock()
	it := v.topics["prices"].byKey.get("k")
	wide, inFile := it.flags&itemWide != 0, it.inFile()
	v.mu.RUnlock()
	e, ok := v.Get("prices", "k")
	last := steps[len(steps)-1]
	switch {
	case gone:
		if ok {
			t.Fatalf("Get = %q, expiring %d, want none (expired)", e.Value, e.ExpiresAt)
		}
	case !ok || e.ExpiresAt != last.expires:
		t.Fatalf("Get = %q, %v, expiring %d; want expiring %d", e.Value, ok, e.ExpiresAt, last.expires)
	case string(e.Value) != last.value && !last.persist:
		t.Fatalf("Get = %q, want %q", e.Value, last.value)
	case wide != (last.expires != 0) || !inFile:
		t.Fatalf("the entry %q expiring %d: wide %v, in the file %v", e.Value, e.ExpiresAt, wide, inFile)
	}
	if got := frozen.Digests(); freeze && got["prices"] != want["prices"] {
		t.Fatalf("the clone frozen before the last step hashes %x after it, %x before", got["prices"], want["prices"])
	}
}

// applyFileStep applies s, step i of TestFileValuesAfterTimes, to v.
func applyFileStep(t *testing.T, v *View, clock *fakeClock, i int, s fileStep) {
	t.Helper()
	st := record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: record.MakeHLC(clock.ms.Load()-1000+int64(i), 0)}
	m := &record.Message{Topic: "prices", Key: "k", Value: []byte(s.value), ExpiresAt: s.expires}
	if s.persist {
		e, ok := v.Get("prices", "k")
		if !ok {
			t.Fatalf("step %d: no entry to change the expiry of", i)
		}
		m = &record.Message{Topic: "prices", Key: "k", Value: e.Value, ExpiresAt: s.expires, ExpiryOf: e.Stamp}
	}
	r := stamped(t, m, st)
	switch s.via {
	case "":
		v.Apply(r)
	case "batch":
		v.ApplyBatch([]record.Record{r})
	default:
		other := newTimedView(clock)
		other.Apply(r)
		if s.via == "merge" {
			v.Merge(other)
			return
		}
		var snap bytes.Buffer
		if err := EncodeSnapshot(&snap, other, 0, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := v.ApplySnapshot(&snap); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkViewHeapAfterExpiry is BenchmarkViewHeap's load with the
// values in a view file (1M keys prices:sku-NNNNNNN, 100-byte values),
// written with an expiry an hour away (SET EX: load=expiring), then again
// without (a plain SET over each key: load=expiring,plain), beside the
// same keys written plainly twice (load=plain,plain). It reports the live
// heap bytes a key after the loads (runtime.ReadMemStats after a GC),
// their parts (heapParts), the share of the values in the file only, and
// the expiry instants queued a key (the first load's, which stay queued
// until their instant, then find no expiry where a plain SET came).
//
//	go test -run '^$' -bench ViewHeapAfterExpiry -benchtime 1x ./store/view/
func BenchmarkViewHeapAfterExpiry(b *testing.B) {
	const keys = 1_000_000
	value := bytes.Repeat([]byte("v"), 100)
	far := time.Now().Add(time.Hour).UnixMilli()
	for _, load := range [][]int64{{0, 0}, {far, 0}, {far}} {
		name := "plain,plain"
		switch {
		case len(load) == 1:
			name = "expiring"
		case load[0] != 0:
			name = "expiring,plain"
		}
		b.Run("load="+name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				v := New()
				followFile(b, v)
				for i, expires := range load {
					loadSKUsExpiring(v, keys, value, expires, uint64(i*keys))
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-B/key")
				b.ReportMetric(float64(v.ValuesInFile())/keys, "in-file/key")
				v.mu.RLock()
				b.ReportMetric(float64(v.times.len())/keys, "queued/key")
				v.mu.RUnlock()
				for name, n := range heapParts(v) {
					b.ReportMetric(float64(n)/keys, name+"-B/key")
				}
			}
		})
	}
}
