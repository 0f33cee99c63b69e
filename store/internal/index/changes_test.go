package index

import (
	"maps"
	"testing"
)

// changes reads the feed once: the origins it named, and whether it
// could tell.
func changes(o *Origins, reader uint64) (map[uint64]bool, bool) {
	got := map[uint64]bool{}
	ok := o.Changes(reader, func(origin uint64) { got[origin] = true })
	return got, ok
}

// TestChangesFeed: the change feed names each origin whose last seq
// moved since the last read once, however often it moved (appends,
// a Reset), and says it cannot tell on a reader's first read, after a
// Truncate, past changeSlots origins unread, and to a reader another
// one took over from.
func TestChangesFeed(t *testing.T) {
	defer func(n int) { changeSlots = n }(changeSlots)
	changeSlots = 16 // so few origins fill it
	o := openTestOrigins(t, t.TempDir(), 64)
	defer o.Close()
	pos := int64(0)
	put := func(origin uint64) {
		t.Helper()
		if err := o.Put(origin, o.Last(origin)+1, pos); err != nil {
			t.Fatal(err)
		}
		pos++
	}
	r := o.NewReader()
	put(1)
	if _, ok := changes(o, r); ok {
		t.Fatal("a reader's first read told")
	}
	if got, ok := changes(o, r); !ok || len(got) != 0 {
		t.Fatalf("nothing changed: got %v, %v", got, ok)
	}
	for range 5 {
		put(1)
		put(2)
	}
	put(3)
	if got, ok := changes(o, r); !ok || !maps.Equal(got, map[uint64]bool{1: true, 2: true, 3: true}) {
		t.Fatalf("after appends: got %v, %v", got, ok)
	}
	put(2) // read already: queued again
	if err := o.Reset(4, 100); err != nil {
		t.Fatal(err)
	}
	if got, ok := changes(o, r); !ok || !maps.Equal(got, map[uint64]bool{2: true, 4: true}) {
		t.Fatalf("after an append and a reset: got %v, %v", got, ok)
	}
	if err := o.Truncate(pos - 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := changes(o, r); ok {
		t.Fatal("told after a Truncate")
	}
	for origin := uint64(10); origin < 10+uint64(changeSlots)+1; origin++ {
		put(origin)
	}
	if _, ok := changes(o, r); ok {
		t.Fatalf("told past %d origins unread", changeSlots)
	}
	put(1)
	if got, ok := changes(o, r); !ok || !maps.Equal(got, map[uint64]bool{1: true}) {
		t.Fatalf("after the overflow: got %v, %v", got, ok)
	}
	r2 := o.NewReader()
	if _, ok := changes(o, r); ok {
		t.Fatal("a reader taken over from still told")
	}
	if _, ok := changes(o, r2); ok {
		t.Fatal("the new reader's first read told")
	}
	put(1)
	if got, ok := changes(o, r2); !ok || !maps.Equal(got, map[uint64]bool{1: true}) {
		t.Fatalf("the new reader: got %v, %v", got, ok)
	}
}

// TestChangesFeedConcurrent: a reader that reads the feed while the
// writer appends, and an origin's last seq after the feed names it (or
// every origin's, when it cannot tell), ends with the index's vector:
// no change is missed.
func TestChangesFeedConcurrent(t *testing.T) {
	defer func(n int) { changeSlots = n }(changeSlots)
	changeSlots = 32
	o := openTestOrigins(t, t.TempDir(), 1024)
	defer o.Close()
	r := o.NewReader()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20_000 {
			origin := uint64(i*7%53) + 1
			if err := o.Put(origin, o.Last(origin)+1, int64(i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	mine := map[uint64]uint64{}
	read := func() {
		var named []uint64
		if o.Changes(r, func(origin uint64) { named = append(named, origin) }) {
			for _, origin := range named {
				mine[origin] = o.Last(origin)
			}
			return
		}
		mine = o.Vector()
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		read()
	}
	read()
	if want := o.Vector(); !maps.Equal(mine, want) {
		t.Fatalf("the reader holds %v, the index %v", mine, want)
	}
}
