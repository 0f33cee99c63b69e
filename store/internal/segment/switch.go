package segment

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// switchLater bounds how long after the writer's switch to the next
// segment the preparer makes the segment after the ready ones: a random
// moment in [0, switchLater), when the ready segments hold enough for the
// writer's rate (kickAtSwitch). Every node of a fleet switches at the
// same record (their logs hold the same records); had each made its next
// segment then (a file slot allocated and faulted in, on the goroutine
// the switch woke first, before the goroutines that pass the record on),
// that record would reach every node late (segment-opening records 3x
// the others' p50 in BenchmarkBoundaryLatency, internal/fleet). The index
// chunks do the same (index.prepLater).
const switchLater = 50 * time.Millisecond

// switchTimer is the preparer's kick at a random moment after a segment
// switch: one timer for the log's life, armed while its kick is pending.
type switchTimer struct {
	t     *time.Timer
	armed atomic.Bool
	at    time.Time // the writer's last switch (the writer's)
}

// newSwitchTimer makes the log's switch timer, stopped.
func (l *Log) newSwitchTimer() {
	l.switcher.t = time.AfterFunc(time.Hour, func() {
		l.switcher.armed.Store(false)
		l.kickPrepare()
	})
	l.switcher.t.Stop()
	l.switcher.at = time.Now()
}

// kickAtSwitch kicks the preparer for the writer, which just switched to
// s: at once when what is ready ahead of the writer (allocated and
// faulted in: s's ready bytes and the ready segments') would last the
// writer, at the rate it filled the segment it left, less than twice
// switchLater; else at a random moment within switchLater, and the
// writer's next kick is where s's ready bytes run out (as the preparer's
// ahead sets it). Called by the writer under mu.
func (l *Log) kickAtSwitch(s *segment) {
	now := time.Now()
	took := now.Sub(l.switcher.at)
	l.switcher.at = now
	ahead := s.alloc.Load()
	for _, r := range l.ready {
		ahead += r.alloc.Load()
	}
	// The ready bytes last ahead/segSize times what the last segment took.
	if float64(ahead)*float64(took) < 2*float64(switchLater)*float64(l.segSize) {
		l.kickPrepare()
		return
	}
	at := s.base + s.alloc.Load() - l.window/2
	if s.alloc.Load() >= l.segSize {
		at = s.base + l.segSize
	}
	l.prepAt.Store(at)
	if l.switcher.armed.CompareAndSwap(false, true) {
		l.switcher.t.Reset(rand.N(switchLater))
	}
}
