package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestReadmeInstall runs the README's install from the source tree
// ("Running it in production") into a scratch root: `make install` with
// DESTDIR (over stand-in binaries: the recipe copies them, and the build
// it depends on is make's, not this test's), then the README's
// systemd-sysusers and systemd-tmpfiles line as written but for --root,
// which must find the snippets under the names the README gives them.
// The README's systemctl and usermod lines need a running systemd and a
// user to add; the unit itself is checked by the tests above.
func TestReadmeInstall(t *testing.T) {
	testkit.NeedTool(t, "make", "make")
	lines := readmeInstallLines(t)
	bin, dest := t.TempDir(), t.TempDir()
	for _, name := range []string{"cachecastd", "cachecast"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if lines[0] != "make install" {
		t.Fatalf("the README's install starts with %q; this test runs `make install`", lines[0])
	}
	mk := exec.Command("make", "-C", "..", "-o", "build", "install", "BIN="+bin, "DESTDIR="+dest)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for path, mode := range map[string]os.FileMode{
		"usr/local/bin/cachecastd":                        0o755,
		"usr/local/bin/cachecast":                         0o755,
		"usr/local/lib/systemd/system/cachecastd.service": 0o644,
		"usr/local/lib/sysusers.d/cachecast.conf":         0o644,
		"usr/local/lib/tmpfiles.d/cachecast.conf":         0o644,
		"etc/default/cachecastd":                          0o640,
	} {
		fi, err := os.Stat(filepath.Join(dest, path))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("make install: /%s: %v %v, want mode %v", path, fi.Mode(), err, mode)
		}
	}
	unit := readFile(t, filepath.Join(dest, "usr/local/lib/systemd/system/cachecastd.service"))
	if !strings.Contains(unit, "ExecStart=/usr/local/bin/cachecastd") {
		t.Errorf("the installed unit does not start /usr/local/bin/cachecastd:\n%s", unit)
	}
	for _, cmd := range strings.Split(lines[1], "&&") {
		f := strings.Fields(cmd)
		prog := tool(t, f[0])
		out, err := exec.Command(prog, append([]string{"--root=" + dest}, f[1:]...)...).CombinedOutput()
		if err != nil && (os.Geteuid() == 0 || !strings.Contains(string(out), "Operation not permitted")) {
			t.Fatalf("%s: %v\n%s", cmd, err, out) // as another user, only the owners cannot be set
		}
	}
	if pw := passwdEntry(t, filepath.Join(dest, "etc/passwd"), "cachecast"); pw[5] != "/var/lib/cachecast" {
		t.Errorf("after the README's systemd-sysusers: %q", strings.Join(pw, ":"))
	}
	if fi, err := os.Stat(filepath.Join(dest, "var/lib/cachecast")); err != nil || !fi.IsDir() {
		t.Errorf("after the README's systemd-tmpfiles: /var/lib/cachecast: %v", err)
	}
}

// readmeInstallLines are the command lines of README.md's install from
// the source tree, comments cut off.
func readmeInstallLines(t *testing.T) []string {
	t.Helper()
	readme := readFile(t, "../README.md")
	_, rest, ok := strings.Cut(readme, "\n## Running it in production\n")
	if ok {
		_, rest, ok = strings.Cut(rest, "```sh\n")
	}
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal(`README.md has no sh block under "Running it in production"`)
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		l, _, _ = strings.Cut(l, "#")
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 {
		t.Fatalf("README.md's install block has %d lines: %q", len(lines), lines)
	}
	return lines
}
