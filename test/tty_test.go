package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the controlling side, and the
// terminal a program is given.
func openPTY(t *testing.T) (master, pts *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0); err != nil {
		t.Fatal(err)
	}
	return master, pts
}

// cliOnTerminal runs cachecast against n with stdin or stdout (or both)
// on a pseudo-terminal, and returns what the terminal showed, stderr and
// the exit status.
func cliOnTerminal(t *testing.T, n *Node, stdinTTY, stdoutTTY bool, args ...string) (shown, stderr string, code int) {
	t.Helper()
	master, pts := openPTY(t)
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, bins.CLI, args...)
	cmd.Env = bins.Env("CACHECAST_SOCKET=" + n.Socket)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdinTTY {
		cmd.Stdin = pts
	}
	if stdoutTTY {
		cmd.Stdout = pts
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close() // the child holds its own: the terminal closes when it exits
	read := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(master) // EIO once no one holds the terminal
		read <- b
	}()
	cmd.Wait()
	select {
	case b := <-read:
		shown = string(b) + out.String()
	case <-c.Done():
		t.Fatal("the terminal did not close")
	}
	return shown, errb.String(), cmd.ProcessState.ExitCode()
}

// TestCLITerminal: on a terminal, get ends the value with a newline (the
// terminal shows it as CR LF) and publish without a value refuses to wait
// for typing; piped, TestCLI checks the raw bytes.
func TestCLITerminal(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "tty", Args: smallNode})
	cli(t, n, "", "publish", "prices", "sku-1", "12.50").ok(t, "publish")

	shown, stderr, code := cliOnTerminal(t, n, false, true, "get", "prices", "sku-1")
	if code != 0 || shown != "12.50\r\n" {
		t.Errorf("get on a terminal: exit %d, the terminal showed %q (stderr %q); want 12.50 and a newline", code, shown, stderr)
	}
	_, stderr, code = cliOnTerminal(t, n, true, false, "publish", "prices", "sku-2")
	if code != 2 || !strings.Contains(stderr, "stdin is a terminal") {
		t.Errorf("publish without a value, stdin a terminal: exit %d, stderr %q; want a usage error", code, stderr)
	}
	if r := cli(t, n, "", "get", "prices", "sku-2"); r.code != 1 {
		t.Errorf("publish refused, yet get of sku-2: exit %d %q", r.code, r.stdout)
	}
}
