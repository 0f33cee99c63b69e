package testkit

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessCPU is the CPU time this process has used so far, user and
// system, in nanoseconds: a benchmark's cost per operation that holds on a
// loaded machine, where its rate does not.
func ProcessCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// ThreadCPU is the CPU time, user and system, the calling thread has used
// so far; the caller keeps its goroutine on that thread
// (runtime.LockOSThread) between two readings.
func ThreadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ThreadTimer measures the CPU time of the calling goroutine's thread, for
// benchmarks on a shared machine, where the wall time per operation
// counts the time other processes had the CPU. It locks the goroutine to
// its thread until Report.
type ThreadTimer struct{ start time.Duration }

// StartThreadCPU locks the goroutine to its thread and notes its CPU time.
func StartThreadCPU() *ThreadTimer {
	runtime.LockOSThread()
	return &ThreadTimer{start: ThreadCPU()}
}

// Report adds "cpu-ns/op", the thread's CPU time since the start over n
// operations, to b's results, and unlocks the thread.
func (c *ThreadTimer) Report(b *testing.B, n int) {
	d := ThreadCPU() - c.start
	runtime.UnlockOSThread()
	if n > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(n), "cpu-ns/op")
	}
}
