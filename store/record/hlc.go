package record

import (
	"sync/atomic"
	"time"
)

// A hybrid logical clock (HLC) timestamp packs wall-clock milliseconds and a
// logical counter into one uint64, so that stamps compare as integers:
//
//	 63                                            16 15              0
//	+------------------------------------------------+-----------------+
//	|        wall milliseconds since the Unix epoch  | logical counter |
//	|                    (48 bits)                   |    (16 bits)    |
//	+------------------------------------------------+-----------------+
//
// 48 bits of milliseconds last until the year 10889. The counter orders the
// stamps made within one millisecond (or while the wall clock stands still or
// runs behind the greatest stamp seen); when it overflows, the carry moves
// the stamp into the next millisecond, which is what "borrowing the next
// millisecond" means: the stamp runs ahead of the wall clock until the wall
// clock catches up.
const (
	hlcLogicalBits = 16
	hlcLogicalMask = 1<<hlcLogicalBits - 1
)

// MaxLogical is the greatest logical counter: MakeHLC(ms, MaxLogical) is
// the last stamp of millisecond ms.
const MaxLogical = hlcLogicalMask

// MakeHLC packs wall milliseconds and a logical counter into an HLC stamp.
// Negative milliseconds (before 1970) are taken as zero.
func MakeHLC(ms int64, logical uint16) uint64 {
	if ms < 0 {
		ms = 0
	}
	return uint64(ms)<<hlcLogicalBits | uint64(logical)
}

// HLCTime is the wall-clock part of an HLC stamp, to the millisecond.
func HLCTime(h uint64) time.Time {
	return time.UnixMilli(HLCMillis(h))
}

// HLCMillis is the wall-clock part of h, in Unix milliseconds.
func HLCMillis(h uint64) int64 { return int64(h >> hlcLogicalBits) }

// Clock is a hybrid logical clock. It hands out strictly increasing stamps
// that never fall behind the wall clock's millisecond and that follow every
// stamp it has observed, so that the (HLC, origin) order of messages agrees
// with causality across nodes while staying close to real time.
//
// A Clock is safe for concurrent use; it takes no lock (one atomic word,
// updated by compare-and-swap).
type Clock struct {
	now  func() time.Time
	last atomic.Uint64
}

// NewClock returns a clock reading the wall time from now (time.Now when
// nil). Tests pass a fake to drive the wall clock.
func NewClock(now func() time.Time) *Clock {
	if now == nil {
		now = time.Now
	}
	return &Clock{now: now}
}

// Now returns a new stamp, greater than every stamp this clock returned,
// observed or was floored at, and not below the wall clock's millisecond.
func (c *Clock) Now() uint64 {
	wall := MakeHLC(c.now().UnixMilli(), 0)
	for {
		last := c.last.Load()
		// last+1 carries a full logical counter into the millisecond bits.
		next := max(wall, last+1)
		if c.last.CompareAndSwap(last, next) {
			return next
		}
	}
}

// NowN returns the first of n (>= 1) new consecutive stamps, first to
// first+n-1, as n calls of Now would while the wall clock stands still:
// a batch of messages reads the wall clock once (a publish of 16
// pipelined SETs spent 4% of its time reading it, once a message).
func (c *Clock) NowN(n int) uint64 {
	wall := MakeHLC(c.now().UnixMilli(), 0)
	for {
		last := c.last.Load()
		first := max(wall, last+1)
		if c.last.CompareAndSwap(last, first+uint64(n-1)) {
			return first
		}
	}
}

// Observe merges a stamp received from another node: every stamp Now
// returns afterwards is greater than remote. The caller decides whether a
// remote stamp far ahead of the local wall clock is to be believed; the
// clock takes it as it is.
func (c *Clock) Observe(remote uint64) { c.raise(remote) }

// Floor makes every later stamp greater than h. A node calls it on restart
// with the greatest stamp it recovered, so that its clock never goes back
// even when the wall clock did while it was down.
func (c *Clock) Floor(h uint64) { c.raise(h) }

// Last is the greatest stamp returned, observed or floored at so far (zero
// for a fresh clock).
func (c *Clock) Last() uint64 { return c.last.Load() }

// raise lifts the clock's last stamp to at least h.
func (c *Clock) raise(h uint64) {
	for {
		last := c.last.Load()
		if h <= last || c.last.CompareAndSwap(last, h) {
			return
		}
	}
}
