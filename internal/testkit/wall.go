package testkit

import (
	"sync/atomic"
	"time"
)

// Wall is a wall clock a test moves by hand, to the millisecond; pass
// its Now where a clock is injected. Safe for concurrent use.
type Wall struct{ ms atomic.Int64 }

// Now is the time the test set last (the Unix epoch before any).
func (w *Wall) Now() time.Time { return time.UnixMilli(w.ms.Load()) }

// Set moves the clock to ms milliseconds after the Unix epoch, forward or
// back.
func (w *Wall) Set(ms int64) { w.ms.Store(ms) }
