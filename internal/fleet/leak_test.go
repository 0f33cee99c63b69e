package fleet

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestMain fails the package's run if a test left a goroutine behind
// (allowing memberlist's probes in flight to end: testkit.FindLeaks).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := testkit.FindLeaks(10 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
