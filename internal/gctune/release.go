package gctune

import (
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// Quiet says when the process hands its free heap back to the system: once
// it goes quiet after making garbage. The headroom (Rule) is what lets a
// busy heap grow past its live bytes, and the runtime keeps those pages
// (about the heap's goal) however long the process then idles: a daemon
// that loaded 1M keys and serves few writes after held its live heap plus
// 64 MiB (BENCHMARKS.md, "Memory per key"). A quiet look collects and
// returns every free page (debug.FreeOSMemory), so that the process at
// rest holds about its live heap; the next burst of writes grows it again.
type Quiet struct {
	// Every is how often the process's allocation is looked at.
	Every time.Duration
	// Below: a look that finds fewer bytes allocated since the one
	// before finds the process quiet.
	Below uint64
	// Garbage: a quiet look releases when at least this many bytes were
	// allocated since the last release (or the start); below it, what a
	// release would hand back is not worth a collection.
	Garbage uint64
}

// DefaultQuiet is cachecastd's: a look every 5 s; quiet under 1 MiB
// allocated in it (an idle daemon's gossip and timers allocate a few KiB
// a second); a release once 64 MiB were allocated since the last, the
// Default rule's floor, so that a release costs at most one collection
// more a headroom of allocation than the rule's own. A look every second
// (and 200 KiB) released 1-2 s after a load of 1M keys, but at 10M it can
// release while the view file's mirror stands still in a growth of the
// file (234,000 changes queued for 4 s in one run), whose values the
// mirror then turns into garbage while allocating little, so that no
// release comes after: a 10M run held 154 B a key at rest, 40 of them
// free heap never handed back, against 111 looking every 5 s
// (BENCHMARKS.md, "Right after the load").
var DefaultQuiet = Quiet{Every: 5 * time.Second, Below: 1 << 20, Garbage: 64 << 20}

// due reports whether a look that finds last bytes allocated since the
// look before and since bytes since the last release releases.
func (q Quiet) due(last, since uint64) bool { return last < q.Below && since >= q.Garbage }

// Releaser looks at the process's allocation every Quiet.Every and
// releases its free heap when due, until Stop.
type Releaser struct {
	q        Quiet
	stop     chan struct{}
	done     chan struct{}
	looks    atomic.Uint64 // looks made (tests wait on it)
	releases atomic.Uint64 // releases made
	sample   [1]metrics.Sample
}

// StartRelease starts looking, from the allocation so far.
func StartRelease(q Quiet) *Releaser {
	r := &Releaser{q: q, stop: make(chan struct{}), done: make(chan struct{})}
	r.sample[0].Name = "/gc/heap/allocs:bytes"
	go r.run()
	return r
}

// run is the Releaser's goroutine.
func (r *Releaser) run() {
	defer close(r.done)
	tick := time.NewTicker(r.q.Every)
	defer tick.Stop()
	prev := r.allocated()
	released := prev
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		now := r.allocated()
		if r.q.due(now-prev, now-released) {
			debug.FreeOSMemory()
			r.releases.Add(1)
			now = r.allocated()
			released = now
		}
		prev = now
		r.looks.Add(1)
	}
}

// allocated is the bytes the process has allocated on the heap so far.
func (r *Releaser) allocated() uint64 { return readBytes(&r.sample) }

// Stop ends the looking; the Releaser's goroutine is gone on return.
func (r *Releaser) Stop() {
	close(r.stop)
	<-r.done
}
