package test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview/viewtest"
)

// bins are the binaries every test of the package runs, built once by
// TestMain.
var bins *Binaries

// binDir holds bins, and shippedBins's build; TestMain removes it.
var binDir string

// testVersion is the version compiled into the test binaries; the tests
// check that the daemon reports it.
const testVersion = "v0.0.0-e2e"

func TestMain(m *testing.M) {
	viewtest.RunChildIfAsked() // a reader process of the view tests
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return m.Run() // go test -list (make fuzz uses it): no daemon runs
	}
	dir, err := os.MkdirTemp("", "cachecast-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	// The daemon is built with the race detector when the tests are: a race
	// in the real process under the tests' load fails the test.
	bins, err = Build(dir, testVersion, testkit.Race)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}

// shipped builds the binaries as they are shipped, without the race
// detector, once per run (the memory tests run side by side).
var shipped = sync.OnceValues(func() (*Binaries, error) {
	return Build(filepath.Join(binDir, "shipped"), testVersion, false)
})

// shippedBins are the binaries the memory tests measure: bins, or with
// -race a build without it, as the race detector's shadow memory is not
// the daemon's.
func shippedBins(t *testing.T) *Binaries {
	t.Helper()
	if !testkit.Race {
		return bins
	}
	b, err := shipped()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
