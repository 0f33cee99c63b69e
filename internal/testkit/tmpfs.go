package testkit

import (
	"os/exec"
	"testing"
)

// Tmpfs mounts a tmpfs of size (mount's syntax: 1m, 6m) on a temp
// directory for the test, unmounted when the test ends, so that a test can
// fill a disk for real; it needs root, as CI has. remount changes its size.
// Cleanups run last first: whatever the test starts on it afterwards (a
// store, a daemon) is stopped before the unmount.
func Tmpfs(t *testing.T, size string) (dir string, remount func(size string)) {
	t.Helper()
	NeedRoot(t, "mounting a tmpfs")
	dir = t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir, func(size string) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
			t.Fatalf("remount: %v: %s", err, out)
		}
	}
}
