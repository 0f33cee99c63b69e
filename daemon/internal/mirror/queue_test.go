package mirror

import (
	"testing"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// TestChangeQueue: the queue gives back what was pushed, in order, across
// blocks; a second burst of no more changes than the first reuses the
// first one's blocks (no allocation); the blocks given back hold no
// value.
func TestChangeQueue(t *testing.T) {
	tests := []struct {
		name string
		n    int // changes a burst
	}{
		{"empty", 0},
		{"one", 1},
		{"one block", queueBlock},
		{"a block and one", queueBlock + 1},
		{"many blocks", 5*queueBlock + 7},
	}
	value := []byte("v")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var q changeQueue
			var batch [][]queued
			burst := func() {
				for i := range tc.n {
					c := queued{Change: view.Change{Key: "k"}, last: i == tc.n-1}
					c.Stamp, c.Value = record.Stamp{Seq: uint64(i)}, value
					q.push(c)
				}
				if q.n != tc.n {
					t.Fatalf("%d queued, want %d", q.n, tc.n)
				}
				batch = q.take(batch)
				i := 0
				for _, b := range batch {
					for _, c := range b {
						if c.Stamp.Seq != uint64(i) || c.last != (i == tc.n-1) {
							t.Fatalf("change %d: seq %d last %v", i, c.Stamp.Seq, c.last)
						}
						i++
					}
				}
				if i != tc.n || q.n != 0 {
					t.Fatalf("took %d of %d, %d left", i, tc.n, q.n)
				}
				q.giveBack(batch)
				clear(batch)
				batch = batch[:0]
			}
			burst()
			if allocs := testing.AllocsPerRun(3, burst); allocs != 0 {
				t.Errorf("a second burst allocated %.0f times, want 0 (the spare blocks)", allocs)
			}
			for _, b := range q.spare {
				for _, c := range b[:cap(b)] {
					if c.Value != nil {
						t.Fatal("a spare block holds a value")
					}
				}
			}
		})
	}
}
