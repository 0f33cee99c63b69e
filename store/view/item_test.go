package view

import (
	"bytes"
	"fmt"
	"iter"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// TestItemKinds: one key written again and again, by Apply and by
// ApplyBatch, with and without an expiry, frozen clones taken on the way:
// a new entry is a 48-byte item when its times are an ordinary write's
// (none of its own), a 64-byte wideItem otherwise; an update in place
// keeps the entry's allocation, so it never puts times into a narrow
// item (such a write makes a wide one instead) and a wide one stays wide;
// reads see each write's value and expiry; each clone keeps the entry of
// its instant; and a snapshot of the view loads to the same digest.
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
		{value: "plain-after-expiring", wide: true},             // in place, narrow into wide
		{value: "batched", batch: true, wide: true, freeze: true},
		{value: "expiring-after-freeze", expires: far, batch: true, wide: true},
		{value: "plain-after-freeze", wide: true, freeze: true},
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
