package gctune

import (
	"testing"
	"time"
)

// TestQuietDue: a look releases when it finds the process quiet (less
// than Below allocated since the look before) after at least Garbage
// allocated since the last release.
func TestQuietDue(t *testing.T) {
	q := Quiet{Below: 1 << 20, Garbage: 64 << 20}
	cases := []struct {
		name        string
		last, since uint64
		want        bool
	}{
		{"quiet after garbage", 4 << 10, 200 << 20, true},
		{"quiet at exactly Garbage", 0, 64 << 20, true},
		{"busy", 8 << 20, 200 << 20, false},
		{"busy at exactly Below", 1 << 20, 200 << 20, false},
		{"quiet, little garbage", 0, 63 << 20, false},
	}
	for _, c := range cases {
		if got := q.due(c.last, c.since); got != c.want {
			t.Errorf("%s: due(%d, %d) = %v, want %v", c.name, c.last, c.since, got, c.want)
		}
	}
}

// sink keeps the compiler from dropping the tests' allocations.
var sink []byte

// TestReleaseWhenQuiet: a Releaser releases once the process goes quiet
// after enough garbage, and not again while no new garbage comes; with
// less garbage than Garbage it never releases.
func TestReleaseWhenQuiet(t *testing.T) {
	cases := []struct {
		name    string
		garbage int // MiB allocated
		min     uint64
		want    bool
	}{
		{"garbage past the mark", 64, 16 << 20, true},
		{"garbage below the mark", 8, 1 << 30, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := StartRelease(Quiet{Every: 5 * time.Millisecond, Below: 256 << 10, Garbage: c.min})
			defer r.Stop()
			for range c.garbage {
				sink = make([]byte, 1<<20)
			}
			sink = nil
			// Two looks after the allocation's end: the first may count
			// its tail; the second finds the process quiet, and releases
			// what is due.
			l := r.looks.Load()
			waitFor(t, func() bool { return r.looks.Load() >= l+3 })
			if got := r.releases.Load() > 0; got != c.want {
				t.Fatalf("released %d times, want a release: %v", r.releases.Load(), c.want)
			}
			n, l := r.releases.Load(), r.looks.Load()
			waitFor(t, func() bool { return r.looks.Load() >= l+20 })
			if m := r.releases.Load(); m != n {
				t.Fatalf("%d releases more in 20 quiet looks without garbage, want none", m-n)
			}
		})
	}
}
