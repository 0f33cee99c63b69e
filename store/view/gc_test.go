package view

import (
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

func TestCollectTombstones(t *testing.T) {
	old := record.MakeHLC(1_000, 0)   // before the cutoff
	fresh := record.MakeHLC(9_000, 0) // after it
	const cutoff = 5_000
	all := func(origin, seq uint64) bool { return true }
	tests := []struct {
		name      string
		recs      []viewRec
		covered   func(origin, seq uint64) bool
		collected int
	}{
		{"old covered tombstone", []viewRec{viewPut("t", "k", "v", 1, 1, old-1), viewDel("t", "k", 1, 2, old)}, all, 1},
		{"tombstone of an unknown key", []viewRec{viewDel("t", "k", 2, 1, old)}, all, 1},
		{"tombstone within the grace", []viewRec{viewDel("t", "k", 1, 1, fresh)}, all, 0},
		{"a live node lacks it", []viewRec{viewDel("t", "k", 1, 7, old)},
			func(origin, seq uint64) bool { return origin != 1 || seq < 7 }, 0},
		{"a live value", []viewRec{viewPut("t", "k", "v", 1, 1, old)}, all, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := New()
			for _, r := range tt.recs {
				v.Apply(r.record(t))
			}
			before := v.Tombstones()
			digest := v.Digest()
			if n := v.CollectTombstones(cutoff, tt.covered); n != tt.collected {
				t.Fatalf("collected %d, want %d", n, tt.collected)
			}
			if got := v.Tombstones(); got != before-tt.collected {
				t.Fatalf("Tombstones = %d after collecting %d of %d", got, tt.collected, before)
			}
			if v.Collected() != uint64(tt.collected) {
				t.Fatalf("Collected = %d", v.Collected())
			}
			if v.Digest() != digest {
				t.Fatal("collection changed the digest")
			}
		})
	}
}

// TestCollectTombstonesShrinksSnapshot: the collected tombstones are in no
// later snapshot, and a later older write within the grace still loses.
func TestCollectTombstonesShrinksSnapshot(t *testing.T) {
	v := New()
	old := record.MakeHLC(1_000, 0)
	for i := range 100 {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26))
		v.Apply(viewPut("t", k, "value", 1, uint64(2*i+1), old+uint64(2*i)).record(t))
		v.Apply(viewDel("t", k, 1, uint64(2*i+2), old+uint64(2*i+1)).record(t))
	}
	v.Apply(viewDel("t", "recent", 1, 201, record.MakeHLC(9_000, 0)).record(t))
	full := len(snapEncode(t, v, 0, snapTestMarks))
	if n := v.CollectTombstones(5_000, func(uint64, uint64) bool { return true }); n != 100 {
		t.Fatalf("collected %d of 100", n)
	}
	if small := len(snapEncode(t, v, 0, snapTestMarks)); small >= full {
		t.Fatalf("snapshot %d bytes after collection, %d before", small, full)
	}
	// Within the grace the tombstone is held: an older put loses.
	if v.Apply(viewPut("t", "recent", "back", 2, 1, record.MakeHLC(8_000, 0)).record(t)) {
		t.Fatal("an older put beat a tombstone within the grace")
	}
	if _, ok := v.Get("t", "recent"); ok {
		t.Fatal("deleted key is back")
	}
}
