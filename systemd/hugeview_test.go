package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	hugeMountFile  = "run-cachecast.mount"
	hugeDropInFile = "cachecastd-huge-view.conf"
)

// TestHugeViewMount checks the optional huge-page tmpfs of the runtime
// directory: the mount unit and the service with the drop-in installed
// pass systemd-analyze verify; the mount unit is named after its mount
// point, which is the directory of the unit's socket and view file, a
// tmpfs with huge pages; the drop-in orders the service after the mount.
func TestHugeViewMount(t *testing.T) {
	analyze := tool(t, "systemd-analyze")
	dir := filepath.Dir(testableUnit(t, nil))
	mount := filepath.Join(dir, hugeMountFile)
	if err := os.WriteFile(mount, []byte(readFile(t, hugeMountFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	dropIns := filepath.Join(dir, unitFile+".d")
	if err := os.MkdirAll(dropIns, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dropIns, "huge-view.conf"), []byte(readFile(t, hugeDropInFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mount, filepath.Join(dir, unitFile)} {
		if out, err := verify(t, analyze, p); err != nil || out != "" {
			t.Errorf("systemd-analyze verify %s (with the drop-in): %v\n%s", filepath.Base(p), err, out)
		}
	}

	m := parseUnit(t, readFile(t, hugeMountFile))
	where := m.last("Mount", "Where")
	if esc, err := exec.Command(tool(t, "systemd-escape"), "--path", "--suffix=mount", where).Output(); err != nil || strings.TrimSpace(string(esc)) != hugeMountFile {
		t.Errorf("Where=%s is unit %q, the file is %s (%v)", where, strings.TrimSpace(string(esc)), hugeMountFile, err)
	}
	env := parseUnit(t, readFile(t, unitFile)).env()
	for _, k := range []string{"CACHECAST_SOCKET", "CACHECAST_VIEW_FILE"} {
		if filepath.Dir(env[k]) != where {
			t.Errorf("%s=%s is not in the mount's %s", k, env[k], where)
		}
	}
	opts := strings.Split(m.last("Mount", "Options"), ",")
	if m.last("Mount", "Type") != "tmpfs" || !contains(opts, "huge=within_size") || !contains(opts, "mode=0750") {
		t.Errorf("mount Type=%s Options=%v, want a tmpfs with huge=within_size and mode=0750", m.last("Mount", "Type"), opts)
	}
	d := parseUnit(t, readFile(t, hugeDropInFile))
	for _, k := range []string{"Requires", "After"} {
		if d.last("Unit", k) != hugeMountFile {
			t.Errorf("drop-in %s=%q, want %s", k, d.last("Unit", k), hugeMountFile)
		}
	}
	if d.last("Service", "RuntimeDirectoryPreserve") != "yes" {
		t.Errorf("drop-in RuntimeDirectoryPreserve=%q, want yes (systemd cannot remove a mount point)", d.last("Service", "RuntimeDirectoryPreserve"))
	}
}
