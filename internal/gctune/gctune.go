// Package gctune keeps the Go collector's headroom, the heap it lets
// grow beyond the live heap before it collects again, bounded for a large
// heap: headroom = max(min(live, Floor), Percent% of the live heap), where
// the runtime's default (GOGC=100) lets the heap grow to twice the live
// heap, whatever its size.
// cachecastd's heap is mostly its view, and every SET turns the value it
// replaces into garbage, so at GOGC=100 a view of 210 MB live under SETs
// held 480 MB (BENCHMARKS.md, "The collector's headroom").
//
// The rule is re-applied after each collection (debug.SetGCPercent from
// the live heap that cycle marked, runtime/metrics /gc/heap/live:bytes),
// so that the next cycle starts once the heap has grown by the headroom.
// A heap up to Floor live keeps GOGC=100's headroom (the live heap): a
// small view's daemon holds no more than the runtime's default would, and
// is collected no more often. Past it the headroom is at least Floor, so
// that a view just past the knee is not collected more often at once
// (the collector's work a SET is the live heap over the headroom). An
// operator's GOGC
// wins: with GOGC set in the environment the tuner does nothing. A
// GOMEMLIMIT applies beside the rule (the runtime takes the lower goal).
//
// The headroom is kept however long the process then idles; a Releaser
// (release.go) hands the free heap back to the system once the process
// goes quiet after making garbage (Quiet), so that at rest it holds about
// its live heap.
//
// The tuner and the releaser are the process's: cmd/cachecastd starts
// them, the daemon package does not (tests run many daemons in one
// process).
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Rule is the headroom the collector is given: the live heap up to Floor
// bytes (GOGC=100's), Floor past it, or Percent of the live heap when
// that is more.
type Rule struct {
	// Floor is the least headroom in bytes of a live heap past Floor;
	// a smaller live heap gets its own size (GOGC=100). Between Floor and
	// Floor*100/Percent of live heap the headroom is Floor.
	Floor uint64
	// Percent of the live heap is the headroom above that.
	Percent int
}

// Default is cachecastd's rule: GOGC=100 up to 64 MiB of live heap, then
// 64 MiB, or 60% of the live heap when that is more. At 1M keys under pipelined SETs the view's heap holds
// about 1.6x its live bytes, not 2.2x, and the collector runs 1.2 times a
// million SETs, against 1.0 at GOGC=100 before ApplyBatch reused its
// scratch (0.7 with it): the scratch's saving pays for most of the lower
// headroom (BENCHMARKS.md, "The collector's headroom").
var Default = Rule{Floor: 64 << 20, Percent: 60}

// GCPercent is the GOGC percent that gives a live heap of live bytes the
// rule's headroom (rounded up), and never less than r.Percent. Nothing
// marked yet (live 0) is a small heap: GOGC=100, or r.Percent without a
// floor.
func (r Rule) GCPercent(live uint64) int {
	if live == 0 && r.Floor > 0 {
		return max(100, r.Percent)
	}
	if live == 0 {
		return r.Percent
	}
	headroom := max(min(live, r.Floor), live/100*uint64(r.Percent))
	p := (headroom*100 + live - 1) / live
	return max(int(p), r.Percent)
}

// Operator reports whether the environment sets the collector (a GOGC
// that is not empty: the runtime reads an empty one as unset), in which
// case the operator's setting wins and no tuner runs.
func Operator(lookup func(string) (string, bool)) bool {
	v, ok := lookup("GOGC")
	return ok && v != ""
}

// Tuner re-applies a Rule after each collection until Stop.
type Tuner struct {
	rule    Rule
	before  int // the percent before Start, restored by Stop
	stopped atomic.Bool
	mu      sync.Mutex    // serializes tune with Stop
	cycles  atomic.Uint64 // collections tuned after (tests wait on it)
	sample  [1]metrics.Sample
}

// Start applies r to the current live heap and after every collection
// from now on. Stop ends it.
func Start(r Rule) *Tuner {
	t := &Tuner{rule: r}
	t.sample[0].Name = "/gc/heap/live:bytes"
	t.mu.Lock()
	t.before = debug.SetGCPercent(r.GCPercent(t.live()))
	t.mu.Unlock()
	t.arm()
	return t
}

// sentinel is allocated for each cycle: its cleanup runs once a
// collection found it unreachable. It holds a pointer so that it is not
// a tiny allocation, which may share its block and outlive the cycle.
type sentinel struct{ _ *byte }

// arm makes the next collection call tune.
func (t *Tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *Tuner) { t.tune() }, t)
}

// tune sets the percent from the live heap the last cycle marked, and
// arms the next cycle's call.
func (t *Tuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return
	}
	debug.SetGCPercent(t.rule.GCPercent(t.live()))
	t.cycles.Add(1)
	t.arm()
}

// live is the heap the last collection marked live, in bytes.
func (t *Tuner) live() uint64 { return readBytes(&t.sample) }

// readBytes reads the runtime metric s names, a byte count (0 where this
// runtime does not have it).
func readBytes(s *[1]metrics.Sample) uint64 {
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Stop ends the tuning and restores the percent Start found.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped.Swap(true) {
		debug.SetGCPercent(t.before)
	}
}
