package rawconn

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's run if a test left a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
