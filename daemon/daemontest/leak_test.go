package daemontest_test

import (
	"os"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestMain fails the package's run if a test left a goroutine behind
// (allowing memberlist's probes in flight to end: testkit.FindLeaks).
func TestMain(m *testing.M) { os.Exit(testkit.RunLeakFree(m, 10*time.Second)) }
