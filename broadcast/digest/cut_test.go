package digest

import (
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// scanCut is the cut by its definition: the highest seq at or below head
// stamped at or before at.
func scanCut(head, at uint64, stamp func(uint64) uint64) uint64 {
	for s := head; s > 0; s-- {
		if stamp(s) <= at {
			return s
		}
	}
	return 0
}

// TestCutSeq: the search finds the highest seq stamped at or before the
// cut, from any seq known old, with the records it cannot read (stamp 0)
// counted old, and reads few stamps.
func TestCutSeq(t *testing.T) {
	t.Parallel()
	byTen := func(s uint64) uint64 { return 10 * s }
	tests := []struct {
		name         string
		lo, head, at uint64
		stamp        func(uint64) uint64
		want         uint64
		maxReads     int
	}{
		{"head old", 0, 50, 1000, byTen, 50, 1},
		{"head exactly at the cut", 0, 50, 500, byTen, 50, 1},
		{"one past the cut", 0, 50, 490, byTen, 49, 3},
		{"all young", 0, 50, 5, byTen, 0, 14},
		{"none held", 0, 0, 5, byTen, 0, 0},
		{"from a seq known old", 40, 50, 455, byTen, 45, 8},
		{"head below lo", 60, 50, 0, byTen, 50, 0},
		{"a million past the cut", 0, 1_000_000, 10, byTen, 1, 44},
		{"unreadable below the young ones", 0, 100, 900, func(s uint64) uint64 {
			if s < 95 {
				return 0
			}
			return 10 * s
		}, 94, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads := 0
			got := cutSeq(tt.lo, tt.head, tt.at, func(s uint64) uint64 {
				reads++
				if s <= tt.lo || s > tt.head {
					t.Fatalf("read seq %d outside (%d, %d]", s, tt.lo, tt.head)
				}
				return tt.stamp(s)
			})
			if got != tt.want {
				t.Fatalf("cut %d, want %d", got, tt.want)
			}
			if reads > tt.maxReads {
				t.Fatalf("%d stamps read, want at most %d", reads, tt.maxReads)
			}
		})
	}
}

// TestCutCacheMatchesScan: as heads move on (each origin writing at its
// own pace, some origins leaving and coming back) and cuts move forward,
// back and repeat, the cache gives every origin's cut by its definition,
// and reads stamps only where heads moved or the cut did.
func TestCutCacheMatchesScan(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	const origins = 200
	// Origin o's record s is stamped at about s*o%7+1 ms apart: each
	// origin's stamps grow with its seqs.
	stamp := func(o, s uint64) uint64 { return s * (o%7 + 1) }
	live := map[uint64]uint64{}
	for o := uint64(1); o <= origins; o++ {
		live[o] = rng.Uint64N(100)
		if live[o] == 0 {
			delete(live, o)
		}
	}
	src := &mapVector{live: func() map[uint64]uint64 { return live }, retired: func() map[uint64]uint64 { return nil },
		changed: map[uint64]bool{}, exact: true}
	for o := range live {
		src.changed[o] = true
	}
	reads := 0
	x := NewIndex(src, src, func(o, s uint64) uint64 { reads++; return stamp(o, s) })
	// vectorAt is the index's vector at the cut at.
	vectorAt := func(at uint64) map[uint64]uint64 {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.syncLocked()
		out := map[uint64]uint64{}
		for o, m := range x.cutLocked(at).marks {
			if m.cut > 0 {
				out[o] = m.cut
			}
		}
		return out
	}
	at := uint64(100)
	for round := range 300 {
		for o := uint64(1); o <= origins; o++ {
			switch r := rng.IntN(100); {
			case r < 30:
				live[o] += rng.Uint64N(20) + 1
				src.changed[o] = true
			case r == 30:
				delete(live, o)
				src.changed[o] = true
			}
		}
		switch r := rng.IntN(10); {
		case r < 5:
			at += rng.Uint64N(50)
		case r == 5 && at > 40:
			at -= rng.Uint64N(40) // a dialer whose clock is behind
		}
		reads = 0
		got := vectorAt(at)
		want := map[uint64]uint64{}
		for o, h := range live {
			if s := scanCut(h, at, func(s uint64) uint64 { return stamp(o, s) }); s > 0 {
				want[o] = s
			}
		}
		if !maps.Equal(got, want) {
			for o := range live {
				if got[o] != want[o] {
					t.Fatalf("round %d, cut %d: origin %d (head %d) cut at %d, want %d", round, at, o, live[o], got[o], want[o])
				}
			}
			t.Fatalf("round %d: %d origins in the cut, want %d", round, len(got), len(want))
		}
		first := reads
		reads = 0
		vectorAt(at)
		if reads != 0 {
			t.Fatalf("round %d: %d stamps read again with nothing changed (%d the first time)", round, reads, first)
		}
	}
}

// TestDigestCutIgnoresRecordsInFlight: two vectors that differ only in
// records younger than the cut (every origin writing, its last records
// still on their way) compare equal at it in one sum each way, where
// protocol 5's sums carry every origin; a real gap older than the cut
// is still found, and the side that lacks it learns the other's highest
// seq of it, to pull.
func TestDigestCutIgnoresRecordsInFlight(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	// Record s of any origin is stamped s ms after the epoch: the cut at
	// 1,000 ms holds seqs up to 1,000.
	stamp := func(o, s uint64) uint64 { return record.MakeHLC(int64(s), 0) }
	at := record.MakeHLC(1000, record.MaxLogical)
	base := map[uint64]uint64{}
	for len(base) < 1000 {
		base[rng.Uint64()|1] = 1000
	}
	inFlight := func(v map[uint64]uint64) map[uint64]uint64 {
		w := maps.Clone(v)
		for o := range w {
			w[o] += rng.Uint64N(20) // each origin 0-19 records past the cut
		}
		return w
	}
	var gapped uint64
	for o := range base {
		gapped = o
		break
	}
	withGap := inFlight(base)
	withGap[gapped] = 990 // lacks 991-1000, older than the cut
	tests := []struct {
		name     string
		a, b     map[uint64]uint64
		maxCarry int
	}{
		{"every origin in flight on both sides", inFlight(base), inFlight(base), 2},
		{"in flight on one side", base, inFlight(base), 2},
		{"in flight, one real gap", inFlight(base), withGap, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &digestSide{live: tt.a, retired: map[uint64]uint64{}, stamp: stamp}
			b := &digestSide{live: tt.b, retired: map[uint64]uint64{}, stamp: stamp}
			carried, frames := simulateExchange(t, a, b, at)
			t.Logf("%d tree nodes and entries carried in %d frames", carried, frames)
			if carried > tt.maxCarry {
				t.Fatalf("%d carried; want at most %d", carried, tt.maxCarry)
			}
			for _, side := range []struct {
				name      string
				me, other *digestSide
			}{{"a", a, b}, {"b", b, a}} {
				for o, s := range side.me.learned {
					if s > side.other.live[o] {
						t.Fatalf("%s learned the other holds %d of %x; it holds %d", side.name, s, o, side.other.live[o])
					}
				}
				for o, h := range side.other.live {
					if old := min(h, 1000); old > side.me.live[o] && side.me.learned[o] != h {
						t.Fatalf("%s lacks %d-%d of %x (old) and learned %d; the other holds %d", side.name, side.me.live[o]+1, old, o, side.me.learned[o], h)
					}
				}
			}
		})
	}
	// Without cuts (protocol 5) records in flight differ everywhere.
	a := &digestSide{live: inFlight(base), retired: map[uint64]uint64{}}
	b := &digestSide{live: inFlight(base), retired: map[uint64]uint64{}}
	if carried, _ := simulateExchange(t, a, b, 0); carried < 1000 {
		t.Fatalf("protocol 5's sums carried %d for 1,000 origins in flight; the comparison above means nothing", carried)
	}
}

// TestDigestCutFindsAnnouncedGap: a record that came past a gap (the
// ones before it lost on their way) makes its origin differ at any cut,
// though the records missing are younger than the cut, so that the side
// that lacks them learns the other's highest seq at once; once it holds
// the record, the sums are equal again.
func TestDigestCutFindsAnnouncedGap(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	stamp := func(o, s uint64) uint64 { return record.MakeHLC(int64(s), 0) }
	at := record.MakeHLC(1000, record.MaxLogical)
	full := map[uint64]uint64{}
	for len(full) < 500 {
		full[rng.Uint64()|1] = 1000 + rng.Uint64N(20)
	}
	var o uint64
	for o = range full {
		break
	}
	full[o] = 1015
	behind := maps.Clone(full)
	behind[o] = 1002 // 1003-1014 lost on their way, all younger than the cut
	a := &digestSide{live: full, retired: map[uint64]uint64{}, stamp: stamp}
	b := &digestSide{live: behind, retired: map[uint64]uint64{}, stamp: stamp}
	if carried, _ := simulateExchange(t, a, b, at); carried != 2 {
		t.Fatalf("%d carried before the gap was known; want 2 (equal at the cut)", carried)
	}
	b.index().Gap(o, 1015, time.Second) // 1015 arrived, past the gap
	for _, dir := range []string{"a dials", "b dials"} {
		d, l := a, b
		if dir == "b dials" {
			d, l = b, a
		}
		carried, frames := simulateExchange(t, d, l, at)
		t.Logf("%s: %d carried in %d frames", dir, carried, frames)
		if b.learned[o] != 1015 {
			t.Fatalf("%s: b learned %d of the origin with the gap; a holds 1015", dir, b.learned[o])
		}
		if carried > 100 {
			t.Fatalf("%s: %d carried for one origin with a gap", dir, carried)
		}
	}
	b.live[o] = 1015 // pulled
	if carried, _ := simulateExchange(t, a, b, at); carried != 2 {
		t.Fatalf("%d carried once the gap was filled; want 2", carried)
	}
	if len(b.index().behind) != 0 {
		t.Fatal("the filled gap is still counted")
	}
}

// TestCutAt: the cut lies cutIntervals SyncIntervals back, rounded down
// to a SyncInterval, and covers every stamp of its millisecond.
func TestCutAt(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000_750)
	got := CutAt(now, time.Second)
	if want := record.MakeHLC(999_998_000, record.MaxLogical); got != want {
		t.Fatalf("cut %d (%v), want %d", got, record.HLCTime(got), want)
	}
	if CutAt(now.Add(200*time.Millisecond), time.Second) != got {
		t.Fatal("two exchanges of one interval got different cuts")
	}
	if record.MakeHLC(999_998_000, record.MaxLogical) > got || record.MakeHLC(999_998_001, 0) <= got {
		t.Fatal("the cut does not end its millisecond")
	}
}

// TestHeadsFirst: a node's exchanges compare whole vectors for gapFor
// after its first one, at cuts from then on.
func TestHeadsFirst(t *testing.T) {
	t.Parallel()
	c := NewIndex(nil, nil, nil)
	t0 := time.Unix(1000, 0)
	for _, tt := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {5 * time.Second, true}, {gapFor(time.Second), false}, {time.Hour, false}} {
		if got := c.HeadsFirst(t0.Add(tt.after), time.Second); got != tt.want {
			t.Fatalf("%v after the first exchange: heads %v, want %v", tt.after, got, tt.want)
		}
	}
}
