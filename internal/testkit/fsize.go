package testkit

import (
	"bytes"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
)

const fsizeChildEnv = "CACHECAST_TEST_FSIZE_CHILD"

// InFSizeChild reports whether this process is the child that runs the
// calling test alone, where it may lower RLIMIT_FSIZE to make the file
// system refuse to grow a file (SIGXFSZ is ignored there, so the system
// call fails with EFBIG instead of killing the process). In the parent it
// runs that child, fails if the child failed, and returns false.
func InFSizeChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(fsizeChildEnv) == t.Name() {
		signal.Ignore(syscall.SIGXFSZ)
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fsizeChildEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("child process: %v\n%s", err, out)
	}
	return false
}

// SetFSizeLimit sets the soft limit on the size of files this process may
// grow; 0 restores the hard limit.
func SetFSizeLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = lim.Max
	if n > 0 {
		lim.Cur = n
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
}
