package testkit

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test was ended instead of
// ending it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Skipf(f string, args ...any)  { r.skipped = f }
func (r *recorder) Fatalf(f string, args ...any) { r.failed = f }

// TestNeedTool finds a program every machine has, and ends a test that
// needs a missing one as the rule says: a skip outside CI, a failure in it.
func TestNeedTool(t *testing.T) {
	if p := NeedTool(t, "sh", "dash"); p == "" {
		t.Fatal("sh: empty path")
	}
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		NeedTool(r, "no-such-program-cachecast", "none")
		if ci == "true" && (r.failed == "" || r.skipped != "") {
			t.Errorf("CI=true: a missing tool must fail the test (failed %q, skipped %q)", r.failed, r.skipped)
		}
		if ci == "" && (r.skipped == "" || r.failed != "") {
			t.Errorf("outside CI: a missing tool must skip the test (failed %q, skipped %q)", r.failed, r.skipped)
		}
		if !strings.Contains(r.failed+r.skipped, "%s") {
			t.Errorf("the message lost its reason: %q", r.failed+r.skipped)
		}
	}
}
