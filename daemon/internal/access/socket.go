package access

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrSocketInUse means another process answers on the socket path.
var ErrSocketInUse = errors.New("access: socket in use")

// ListenUnix binds the socket at path. A leftover socket file is removed
// only when nothing answers on it (a daemon that crashed); a live one is
// ErrSocketInUse, and a file that is not a socket is left alone.
func ListenUnix(path string, mode os.FileMode, limits *Limits, flag string) (*Listener, error) {
	stale, err := CheckSocket(path, flag)
	if err != nil {
		return nil, err
	}
	if stale {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf(flag+": remove stale socket: %w", err)
		}
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf(flag+": %w", err)
	}
	// The socket is created under the umask and then set to the mode.
	// In between it is at most as open as the umask allows; a daemon that
	// must never be reachable more widely runs under a strict umask (the
	// systemd unit's UMask=) or in a private RuntimeDirectory.
	if err := os.Chmod(path, mode); err != nil {
		_ = ul.Close()
		return nil, fmt.Errorf("--socket-mode: %w", err) // chmod <path>: <why>
	}
	return NewListener(ul, limits), nil
}

// CheckSocket checks that a socket can be made at path: its directory
// exists and this process may create files in it, and nothing answers at
// path. stale is a socket file nobody answers on (a daemon that crashed),
// which ListenUnix removes; any other file there is left alone.
func CheckSocket(path, flag string) (stale bool, err error) {
	dir := filepath.Dir(path)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		return false, fmt.Errorf(flag+": the directory %s does not exist", dir)
	case err != nil:
		return false, fmt.Errorf(flag+": %w", err)
	case !fi.IsDir():
		return false, fmt.Errorf(flag+": %s is not a directory", dir)
	}
	if err := syscall.Access(dir, 0o3); err != nil { // W_OK | X_OK
		return false, fmt.Errorf(flag+": cannot create the socket in %s: %w", dir, err)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf(flag+": %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return false, fmt.Errorf(flag+": %s exists and is not a socket; not removing it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return false, fmt.Errorf(flag+": %s: another process answers on it: %w", path, ErrSocketInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return false, fmt.Errorf(flag+": cannot tell whether %s is in use: %w", path, errors.Unwrap(err)) // the cause, without "dial unix <path>"
	}
	return true, nil
}
