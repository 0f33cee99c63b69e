//go:build !(linux && amd64)

package view

import "time"

// wallMilli is the wall clock in Unix ms, the view's clock unless one is
// injected (on linux/amd64, gettimeofday: see clock_linux_amd64.go).
func wallMilli() int64 { return time.Now().UnixMilli() }
