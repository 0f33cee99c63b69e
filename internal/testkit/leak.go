package testkit

import (
	"fmt"
	"os"
	"time"

	"go.uber.org/goleak"
)

// FindLeaks is goleak.Find retried for up to within. memberlist's
// Shutdown does not wait for a probe in flight, which ends by itself
// after its probe timeout (up to about a second in the profiles the
// fleets use, longer under -race on a busy machine); goleak's own retries
// give up after about 0.4 s.
func FindLeaks(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RunLeakFree runs a package's tests (m: a *testing.M, or what wraps
// one) and, when they pass, fails the run if a goroutine is still alive
// after within (FindLeaks). It returns the exit code for os.Exit.
func RunLeakFree(m interface{ Run() int }, within time.Duration) int {
	code := m.Run()
	if code == 0 {
		if err := FindLeaks(within); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	return code
}
