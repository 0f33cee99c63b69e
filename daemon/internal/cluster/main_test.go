package cluster

import (
	"os"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestMain checks that the package's tests leave no goroutine behind.
func TestMain(m *testing.M) { os.Exit(testkit.RunLeakFree(m, 5*time.Second)) }
