package access

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestListenUnixVisibleOnlyListening: whoever finds the socket's path
// finds it answering and already at its mode, never refusing (a socket
// bound under its path is there between bind and listen) nor as open as
// the umask; TestErrorCodes/catching_up hit the refusal at load 31.
func TestListenUnixVisibleOnlyListening(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "cc.sock")
	for i := range 200 {
		seen := make(chan error, 1)
		go func() { seen <- dialOnceVisible(path) }()
		l, err := ListenUnix(path, 0o600, nil, "--socket")
		if err != nil {
			t.Fatal(err)
		}
		if err := <-seen; err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// dialOnceVisible waits for path to appear, then checks its mode and
// connects once.
func dialOnceVisible(path string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Lstat(path)
		if err == nil {
			if fi.Mode().Perm() != 0o600 {
				return errors.New("visible at mode " + fi.Mode().String())
			}
			c, err := net.Dial("unix", path)
			if err != nil {
				return err
			}
			return c.Close()
		}
		if time.Now().After(deadline) {
			return errors.New("the socket never appeared")
		}
	}
}

// TestListenUnixCloseOnce: Close removes the path once; a second Close of
// an old listener leaves the socket of the one started since.
func TestListenUnixCloseOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cc.sock")
	l1, err := ListenUnix(path, 0o660, nil, "--socket")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(path, 0o660, nil, "--socket"); !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("a second listener on a live socket: %v, want ErrSocketInUse", err)
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close: %v, want the path gone", err)
	}
	l2, err := ListenUnix(path, 0o660, nil, "--socket")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	_ = l1.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("the new socket after the old listener's second Close: %v", err)
	}
	c.Close()
}

// TestListenUnixStale: a socket file nobody answers on is replaced; a file
// that is not a socket is left alone.
func TestListenUnixStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cc.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close() // a crashed daemon's socket file
	l, err := ListenUnix(path, 0o660, nil, "--socket")
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	l.Close()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(plain, 0o660, nil, "--socket"); err == nil {
		t.Fatal("ListenUnix over a regular file succeeded")
	}
	if b, err := os.ReadFile(plain); err != nil || string(b) != "x" {
		t.Fatalf("the regular file: %q %v", b, err)
	}
}
