package testkit

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// InCI reports whether the tests run in CI (the environment variable CI
// is set, as .ci/run's machine sets CI=true), where nothing a test needs
// may be missing.
func InCI() bool { return os.Getenv("CI") != "" }

// Lacking stops a test that cannot run here for reason (a tool or root
// missing): outside CI it is skipped with the reason, in CI it fails,
// since .ci/run must provide everything.
func Lacking(tb testing.TB, reason string) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("CI is set, so this must run: %s", reason)
	}
	tb.Skipf("skipped: %s (runs in CI, where CI=true)", reason)
}

// Tool is the path of the program name, or Lacking with how to install
// it (the Debian package pkg).
func Tool(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Lacking(tb, name+" is not installed (apt-get install "+pkg+")")
	}
	return p
}

// LintMan fails the test when groff warns about the manual page src (roff
// with man(7) macros), as lintian's check of a package's pages does.
func LintMan(tb testing.TB, src string) {
	tb.Helper()
	cmd := exec.Command(Tool(tb, "groff", "groff-base"), "-man", "-ww", "-z", "-Tutf8")
	cmd.Stdin = strings.NewReader(src)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		tb.Fatalf("groff -man -ww: %v\n%s", err, out)
	}
}
