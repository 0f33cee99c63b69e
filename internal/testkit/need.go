package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true, as .ci/run's runner
// sets it), where every test must run: nothing may be missing there.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing ends a test that cannot check what it claims on this machine:
// outside CI it is skipped with the reason, so that `go test ./...` stays
// green for a user without root or a tool; in CI (InCI) it fails, since
// .ci/run installs everything and runs as root.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatalf("%s (CI=true: every test must run here)", msg)
		return
	}
	tb.Skipf("skipped: %s", msg)
}

// NeedRoot ends the test through Missing unless it runs as root; why says
// what the test does that needs it.
func NeedRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Missing(tb, "%s needs root (.ci/run runs as root)", why)
	}
}

// NeedTool returns the path of the program name, or ends the test through
// Missing naming the Debian package that has it (.ci/run installs it).
func NeedTool(tb testing.TB, name, debianPackage string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, "%s not found: install the Debian package %s (.ci/run does)", name, debianPackage)
	}
	return p
}
