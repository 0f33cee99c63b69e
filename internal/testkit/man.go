package testkit

import (
	"os/exec"
	"strings"
	"testing"
)

// LintMan fails the test when groff warns about the manual page src (roff
// with man(7) macros), as lintian's check of a package's pages does.
func LintMan(tb testing.TB, src string) {
	tb.Helper()
	cmd := exec.Command(NeedTool(tb, "groff", "groff-base"), "-man", "-ww", "-z", "-Tutf8")
	cmd.Stdin = strings.NewReader(src)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		tb.Fatalf("groff -man -ww: %v\n%s", err, out)
	}
}
