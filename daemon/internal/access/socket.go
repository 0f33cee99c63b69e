package access

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrSocketInUse means another process answers on the socket path.
var ErrSocketInUse = errors.New("access: socket in use")

// ListenUnix binds the socket at path. A leftover socket file is removed
// only when nothing answers on it (a daemon that crashed); a live one is
// ErrSocketInUse, and a file that is not a socket is left alone.
//
// The socket is made under a name of its own beside path, set to mode,
// and only then renamed to path (without replacing anything there), so
// that whoever finds path finds it listening and as open as mode says:
// bound under path itself, a client could see it refuse a connection
// (between bind and listen) or see it as open as the umask allows. Close
// removes path. A path too long for the temporary name is bound directly.
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
	tmp := path + ".new"
	if len(tmp) >= maxSocketPath {
		tmp = path
	}
	_ = os.Remove(tmp) // a crashed start's leftover
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf(flag+": %w", err)
	}
	ul.SetUnlinkOnClose(false) // Close removes path, not the bound name
	l := &Listener{UnixListener: ul, limits: limits, path: path}
	if err := os.Chmod(tmp, mode); err != nil {
		_ = os.Remove(tmp)
		_ = ul.Close()
		return nil, fmt.Errorf("--socket-mode: %w", err) // chmod <path>: <why>
	}
	if tmp != path {
		if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE); err != nil {
			_ = os.Remove(tmp)
			_ = ul.Close()
			if errors.Is(err, unix.EEXIST) {
				return nil, fmt.Errorf(flag+": %s: another process made it meanwhile: %w", path, ErrSocketInUse)
			}
			return nil, fmt.Errorf(flag+": rename %s to %s: %w", tmp, path, err)
		}
	}
	return l, nil
}

// maxSocketPath is the room for a socket's path in sockaddr_un, with its
// terminating NUL.
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path)

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
