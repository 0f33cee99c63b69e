package viewtest

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ThreadCPU measures the CPU time of the calling goroutine's thread, for
// benchmarks on a shared machine, where the wall time per operation
// counts the time other processes had the CPU. It locks the goroutine to
// its thread until Report.
type ThreadCPU struct{ start time.Duration }

// StartThreadCPU locks the goroutine to its thread and notes its CPU time.
func StartThreadCPU() *ThreadCPU {
	runtime.LockOSThread()
	return &ThreadCPU{start: threadCPU()}
}

// Report adds "cpu-ns/op", the thread's CPU time since the start over n
// operations, to b's results, and unlocks the thread.
func (c *ThreadCPU) Report(b *testing.B, n int) {
	d := threadCPU() - c.start
	runtime.UnlockOSThread()
	if n > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(n), "cpu-ns/op")
	}
}

func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
