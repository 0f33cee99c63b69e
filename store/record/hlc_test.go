package record

import (
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

func TestHLCMakeAndTime(t *testing.T) {
	tests := []struct {
		name    string
		ms      int64
		logical uint16
		want    uint64
	}{
		{"zero", 0, 0, 0},
		{"logical only", 0, 7, 7},
		{"one ms", 1, 0, 1 << 16},
		{"max logical", 5, 0xffff, 5<<16 | 0xffff},
		{"negative ms is zero", -10, 3, 3},
		{"2025", 1_750_000_000_000, 42, 1_750_000_000_000<<16 | 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := MakeHLC(tt.ms, tt.logical)
			if h != tt.want {
				t.Fatalf("MakeHLC(%d, %d) = %d, want %d", tt.ms, tt.logical, h, tt.want)
			}
			wantMS := max(tt.ms, 0)
			if got := HLCTime(h).UnixMilli(); got != wantMS {
				t.Fatalf("HLCTime(%d) = %d ms, want %d", h, got, wantMS)
			}
		})
	}
	// Stamps order by wall time first, then by the counter.
	if !(MakeHLC(10, 0xffff) < MakeHLC(11, 0)) {
		t.Fatal("a later millisecond must sort after any counter of an earlier one")
	}
}

func TestClockNowFollowsWall(t *testing.T) {
	var w testkit.Wall
	w.Set(1_000)
	c := NewClock(w.Now)
	if c.Last() != 0 {
		t.Fatalf("fresh clock Last = %d, want 0", c.Last())
	}

	h1 := c.Now()
	if h1 != MakeHLC(1_000, 0) {
		t.Fatalf("first stamp %d, want the wall ms with counter 0 (%d)", h1, MakeHLC(1_000, 0))
	}
	h2 := c.Now() // wall stands still: the counter moves
	if h2 != MakeHLC(1_000, 1) {
		t.Fatalf("second stamp in the same ms %d, want counter 1", h2)
	}
	w.Set(2_000)
	h3 := c.Now()
	if h3 != MakeHLC(2_000, 0) {
		t.Fatalf("stamp after the wall moved %d, want %d", h3, MakeHLC(2_000, 0))
	}
	w.Set(500) // the wall clock jumps back
	h4 := c.Now()
	if h4 <= h3 || HLCTime(h4).UnixMilli() != 2_000 {
		t.Fatalf("stamp after the wall went back %d (%v), want > %d in ms 2000", h4, HLCTime(h4), h3)
	}
	if c.Last() != h4 {
		t.Fatalf("Last = %d, want %d", c.Last(), h4)
	}
}

func TestClockLogicalOverflowBorrowsNextMS(t *testing.T) {
	var w testkit.Wall
	w.Set(7_000)
	c := NewClock(w.Now)
	prev := uint64(0)
	for i := 0; i < 1<<16+10; i++ {
		h := c.Now()
		if h <= prev {
			t.Fatalf("stamp %d: %d not above %d", i, h, prev)
		}
		prev = h
	}
	// 65536 stamps fill ms 7000; the next 10 borrow ms 7001.
	if got := HLCTime(prev).UnixMilli(); got != 7_001 {
		t.Fatalf("after the counter overflowed the stamp is in ms %d, want 7001", got)
	}
	if got := prev & hlcLogicalMask; got != 9 {
		t.Fatalf("counter after borrowing = %d, want 9", got)
	}
	// The wall clock catching up takes over again.
	w.Set(9_000)
	if h := c.Now(); h != MakeHLC(9_000, 0) {
		t.Fatalf("stamp once the wall passed the borrowed ms = %d, want %d", h, MakeHLC(9_000, 0))
	}
}

// NowN hands out the stamps n calls of Now would at one wall reading.
func TestClockNowNIsNCallsOfNow(t *testing.T) {
	var w testkit.Wall
	w.Set(7_000)
	batched, single := NewClock(w.Now), NewClock(w.Now)
	for _, n := range []int{1, 16, 3, 1 << 16, 5} {
		first := batched.NowN(n)
		for i := range n {
			if h := single.Now(); h != first+uint64(i) {
				t.Fatalf("NowN(%d): stamp %d is %d, Now gives %d", n, i, first+uint64(i), h)
			}
		}
		if batched.Last() != single.Last() {
			t.Fatalf("NowN(%d): last %d, Now's %d", n, batched.Last(), single.Last())
		}
	}
	w.Set(9_000) // the wall clock passed the borrowed milliseconds
	if h := batched.NowN(2); h != MakeHLC(9_000, 0) || batched.Last() != h+1 {
		t.Fatalf("NowN(2) after the wall moved on = %d (last %d), want %d", h, batched.Last(), MakeHLC(9_000, 0))
	}
}

func TestClockObserve(t *testing.T) {
	var w testkit.Wall
	w.Set(1_000)
	c := NewClock(w.Now)
	c.Now()

	remote := MakeHLC(5_000, 3) // a node whose clock runs ahead
	c.Observe(remote)
	if c.Last() != remote {
		t.Fatalf("Last after Observe = %d, want %d", c.Last(), remote)
	}
	if h := c.Now(); h <= remote {
		t.Fatalf("Now after Observe(%d) = %d, want greater", remote, h)
	}
	before := c.Last()
	c.Observe(MakeHLC(10, 0)) // an old stamp changes nothing
	if c.Last() != before {
		t.Fatalf("Observe of an older stamp moved the clock from %d to %d", before, c.Last())
	}
}

func TestClockFloor(t *testing.T) {
	var w testkit.Wall
	w.Set(100) // restarted with the wall clock behind what was recovered
	c := NewClock(w.Now)
	recovered := MakeHLC(900, 0xffff)
	c.Floor(recovered)
	h := c.Now()
	if h <= recovered {
		t.Fatalf("Now after Floor(%d) = %d, want greater", recovered, h)
	}
	if h != MakeHLC(901, 0) {
		t.Fatalf("Now after Floor at a full counter = %d, want the next ms %d", h, MakeHLC(901, 0))
	}
	c.Floor(MakeHLC(50, 0)) // a lower floor changes nothing
	if got := c.Now(); got != h+1 {
		t.Fatalf("Now after a lower Floor = %d, want %d", got, h+1)
	}
}

func TestClockNilUsesTimeNow(t *testing.T) {
	c := NewClock(nil)
	before := time.Now().UnixMilli()
	h := c.Now()
	after := time.Now().UnixMilli()
	if ms := HLCTime(h).UnixMilli(); ms < before || ms > after {
		t.Fatalf("stamp in ms %d, want within [%d, %d]", ms, before, after)
	}
}

func TestClockConcurrentNowIsUniqueAndMonotonic(t *testing.T) {
	c := NewClock(nil)
	const workers, per = 8, 5_000
	stamps := make([][]uint64, workers)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]uint64, per)
			for i := range out {
				if i%100 == 0 {
					c.Observe(c.Last()) // mix merges in with the stamps
				}
				out[i] = c.Now()
			}
			stamps[g] = out
		}()
	}
	wg.Wait()

	seen := make(map[uint64]bool, workers*per)
	var top uint64
	for g, out := range stamps {
		for i, h := range out {
			if i > 0 && h <= out[i-1] {
				t.Fatalf("worker %d: stamp %d = %d not above %d", g, i, h, out[i-1])
			}
			if seen[h] {
				t.Fatalf("stamp %d handed out twice", h)
			}
			seen[h] = true
			top = max(top, h)
		}
	}
	if c.Last() != top {
		t.Fatalf("Last = %d, want the greatest stamp %d", c.Last(), top)
	}
}
