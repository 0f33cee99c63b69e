package test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
)

// debFiles are paths the package installs, with the mode each has.
var debFiles = map[string]os.FileMode{
	"/usr/bin/cachecastd":                                 0o755,
	"/usr/bin/cachecast":                                  0o755,
	"/usr/lib/systemd/system/cachecastd.service":          0o644,
	"/usr/lib/sysusers.d/cachecast.conf":                  0o644,
	"/usr/lib/tmpfiles.d/cachecast.conf":                  0o644,
	"/etc/default/cachecastd":                             0o640,
	"/usr/share/man/man8/cachecastd.8.gz":                 0o644,
	"/usr/share/man/man1/cachecast.1.gz":                  0o644,
	"/usr/share/bash-completion/completions/cachecast":    0o644,
	"/usr/share/zsh/vendor-completions/_cachecast":        0o644,
	"/usr/share/fish/vendor_completions.d/cachecast.fish": 0o644,
	"/usr/share/doc/cachecast/copyright":                  0o644,
	"/usr/share/doc/cachecast/changelog.gz":               0o644,
}

const (
	debData   = "/var/lib/cachecast"
	debWanted = "/etc/systemd/system/multi-user.target.wants/cachecastd.service"
)

// TestDebPackage builds the package with make deb, runs lintian on it,
// installs it on this machine, checks what it put there, removes it (the
// data stays) and purges it (nothing stays). It changes the machine, so
// it runs only in CI (as root); the cleanup purges the package whatever
// happened. No daemon starts: the postinst starts one only where systemd
// runs (/run/systemd/system), which a CI container lacks, and if it did,
// the purge at the end stops it before the other tests of this package
// (TestMakeRun binds the default ports) run.
func TestDebPackage(t *testing.T) {
	if !testkit.InCI() {
		// The one rule (testkit.Missing): a skip with the reason here, never in CI.
		testkit.Missing(t, "installs and purges the package cachecast on this machine, so it runs in CI only (CI=true, as root)")
	}
	testkit.NeedRoot(t, "installing a package with dpkg")
	for _, tool := range [][2]string{{"dpkg", "dpkg"}, {"lintian", "lintian"}, {"systemd-analyze", "systemd"}, {"make", "make"}, {"git", "git"}} {
		testkit.NeedTool(t, tool[0], tool[1])
	}
	if err := exec.Command("dpkg", "-s", "cachecast").Run(); err == nil {
		t.Fatal("the package cachecast is installed already: this test would remove it")
	}
	out := t.TempDir()
	debRun(t, "make", "-C", "..", "deb", "BIN="+out)
	debs, _ := filepath.Glob(filepath.Join(out, "cachecast_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb made %q", debs)
	}
	deb := debs[0]
	t.Logf("lintian:\n%s", debRun(t, "lintian", "--fail-on", "error", "--allow-root", deb))

	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "cachecast").CombinedOutput(); err != nil {
			t.Errorf("cleanup: dpkg --purge cachecast: %v\n%s", err, out)
		}
	})
	debRun(t, "dpkg", "-i", deb)
	checkInstalled(t, deb)

	marker := filepath.Join(debData, "kept")
	if err := os.WriteFile(marker, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	debRun(t, "dpkg", "--remove", "cachecast")
	for _, p := range []string{marker, "/etc/default/cachecastd"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after dpkg --remove, %s is gone: remove keeps the data and the settings", p)
		}
	}
	if _, err := os.Stat("/usr/bin/cachecastd"); err == nil {
		t.Error("after dpkg --remove, /usr/bin/cachecastd is still there")
	}

	debRun(t, "dpkg", "--purge", "cachecast")
	for _, p := range append([]string{debData, debWanted}, slices.Collect(maps.Keys(debFiles))...) {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("after dpkg --purge, %s is still there", p)
		}
	}
	if err := exec.Command("dpkg", "-s", "cachecast").Run(); err == nil {
		t.Error("dpkg -s cachecast still knows the package after the purge")
	}
}

// checkInstalled checks what dpkg -i of deb left: the files, the user,
// the directories, the unit, the binaries' version, the enablement.
func checkInstalled(t *testing.T, deb string) {
	t.Helper()
	for p, mode := range debFiles {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("not installed: %v", err)
		} else if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), mode)
		}
	}
	pw := strings.Split(strings.TrimSpace(debRun(t, "getent", "passwd", "cachecast")), ":")
	if len(pw) < 7 || pw[5] != debData || !strings.HasSuffix(pw[6], "nologin") {
		t.Errorf("user cachecast: %q", pw)
	}
	gr := strings.Split(strings.TrimSpace(debRun(t, "getent", "group", "cachecast")), ":")
	for p, want := range map[string]struct {
		mode     os.FileMode
		uid, gid string
	}{
		debData:                   {0o750, pw[2], pw[3]},
		"/etc/default/cachecastd": {0o640, "0", gr[2]},
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != want.mode || strconv.FormatUint(uint64(st.Uid), 10) != want.uid || strconv.FormatUint(uint64(st.Gid), 10) != want.gid {
			t.Errorf("%s: mode %v owner %d:%d, want %v %s:%s", p, fi.Mode().Perm(), st.Uid, st.Gid, want.mode, want.uid, want.gid)
		}
	}
	unit, _ := os.ReadFile("/usr/lib/systemd/system/cachecastd.service")
	if !strings.Contains(string(unit), "\nExecStart=/usr/bin/cachecastd\n") {
		t.Error("the installed unit does not start /usr/bin/cachecastd")
	}
	if out := debRun(t, "systemd-analyze", "verify", "--man=no", "/usr/lib/systemd/system/cachecastd.service"); strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %s", out)
	}
	if _, err := os.Lstat(debWanted); err != nil {
		t.Errorf("the unit is not enabled: %v", err)
	}
	version := regexp.MustCompile(`^cachecastd \S+\n$`)
	if out := debRun(t, "/usr/bin/cachecastd", "--version"); !version.MatchString(out) {
		t.Errorf("cachecastd --version: %q", out)
	}
	if out := debRun(t, "dpkg-query", "-W", "-f", "${Conffiles}", "cachecast"); !strings.Contains(out, "/etc/default/cachecastd") {
		t.Errorf("/etc/default/cachecastd is not a conffile: %q", out)
	}
	t.Logf("installed %s", filepath.Base(deb))
}

// debRun runs a command and returns its output, failing the test on an error.
func debRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
