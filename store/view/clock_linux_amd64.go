//go:build linux && amd64

package view

import (
	"syscall"
	"time"
)

// wallMilli is the wall clock in Unix ms, the view's clock unless one is
// injected. On linux/amd64 gettimeofday goes through the vDSO and reads
// the wall clock alone, where time.Now reads the monotonic clock as well:
// 38 ns of CPU against 89 on the TSC clock of the benchmark machine, and
// every read and write of an entry with a time field makes one.
func wallMilli() int64 {
	var tv syscall.Timeval
	if syscall.Gettimeofday(&tv) != nil {
		return time.Now().UnixMilli()
	}
	return tv.Sec*1000 + tv.Usec/1000
}
