package testkit

import (
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
