package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/daemon/config"
)

// Module is the import path of the cachecast module; Build compiles its
// commands by import path, so it works from any directory inside the module.
const Module = "github.com/cachecast/cachecast"

// maxSocketPath is the longest Unix socket path the kernel takes
// (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// raceReport is what the race detector prints when it finds a data race.
const raceReport = "WARNING: DATA RACE"

// Binaries are the cachecast programs built for one test run.
type Binaries struct {
	Dir     string // the directory holding them
	Daemon  string // path of cachecastd
	CLI     string // path of cachecast
	Version string // the version compiled in (daemon.Version)
	Race    bool   // built with the race detector
}

// Build compiles cmd/cachecastd and cmd/cachecast into dir with go build,
// stamping version as daemon.Version and the CLI's main.version the way the
// Makefile does. With race the race detector is compiled in: a daemon that
// reports a data race then fails the test that ran it (see Node). Build is
// meant for TestMain: once per run.
func Build(dir, version string, race bool) (*Binaries, error) {
	args := []string{"build", "-o", dir + string(os.PathSeparator),
		"-ldflags", "-X " + Module + "/daemon.Version=" + version + " -X main.version=" + version}
	if race {
		args = append(args, "-race")
	}
	args = append(args, Module+"/cmd/cachecastd", Module+"/cmd/cachecast")
	cmd := exec.Command("go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	b := &Binaries{
		Dir:     dir,
		Daemon:  filepath.Join(dir, "cachecastd"),
		CLI:     filepath.Join(dir, "cachecast"),
		Version: version,
		Race:    race,
	}
	for _, p := range []string{b.Daemon, b.CLI} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("go build left no binary: %w", err)
		}
	}
	return b, nil
}

// Env is the environment to run the binaries with: the test process's,
// without the variables that would configure them behind the test's back
// (CACHECAST_*, NOTIFY_SOCKET, ...), plus extra (KEY=value).
func (b *Binaries) Env(extra ...string) []string {
	env := cleanEnv(os.Environ())
	if b.Race {
		// The race runtime sleeps 1s at exit by default: every stop and
		// every CLI command would take a second.
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return append(env, extra...)
}

// NodeOptions choose how a Node runs cachecastd. The zero value is a node
// on a fresh data directory and a fresh short socket path, with the
// daemon's defaults for everything else.
type NodeOptions struct {
	// Name is the node's --node-name and the label of its log lines in the
	// test log. Default "node".
	Name string
	// DataDir is the --data-dir. Default: a new temporary directory.
	DataDir string
	// Socket is the --socket. Default: cc.sock in a new directory made by
	// os.MkdirTemp("", "cc"), short enough for a Unix socket path.
	Socket string
	// Args are more command-line flags, after the ones above.
	Args []string
	// Env is more environment, KEY=value. The test process's own
	// CACHECAST_* variables and NOTIFY_SOCKET are never passed on.
	Env []string
	// Dir is the working directory. Default: the test's temporary directory.
	Dir string
	// Command replaces the program run (default Binaries.Daemon), e.g.
	// "./bin/cachecastd" relative to Dir.
	Command string
	// Bare passes none of --data-dir, --socket, --node-name and
	// --gossip-addr: the daemon uses its defaults (relative to Dir). DataDir and Socket must then
	// name those defaults' paths, for the harness to find them.
	Bare bool
	// ReadyTimeout bounds Start's wait for /readyz. Default 15s.
	ReadyTimeout time.Duration
}

// Node is one cachecastd process, started and restarted on the same data
// directory and socket. Its methods fail the test (t.Fatal) when the
// process does not do what they wait for; they are meant for the test's own
// goroutine. When the test ends the process is killed if still running,
// and its output is written to the test log if the test failed.
type Node struct {
	// DataDir and Socket are the node's data directory and socket.
	DataDir, Socket string
	// Client talks to the node's socket; it survives restarts.
	Client *client.Client

	t    testing.TB
	bins *Binaries
	opts NodeOptions
	logs *logBuffer

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed once the current process was waited for
	state *os.ProcessState
	runs  int
}

// NewNode prepares a node without starting it.
func NewNode(t testing.TB, bins *Binaries, opts NodeOptions) *Node {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "node"
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 15 * time.Second
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "data")
	}
	if opts.Socket == "" {
		dir, err := os.MkdirTemp("", "cc")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		opts.Socket = filepath.Join(dir, "cc.sock")
	}
	sock := opts.Socket
	if !filepath.IsAbs(sock) {
		sock = filepath.Join(opts.Dir, sock)
	}
	// The client dials the full path, so that is what must fit.
	if len(sock) > maxSocketPath {
		t.Fatalf("socket path %s is %d bytes; a Unix socket takes at most %d", sock, len(sock), maxSocketPath)
	}
	n := &Node{
		DataDir: opts.DataDir,
		Socket:  sock,
		Client:  client.New(sock, client.WithTimeout(10*time.Second)),
		t:       t,
		bins:    bins,
		opts:    opts,
		logs:    &logBuffer{},
	}
	t.Cleanup(n.cleanup)
	return n
}

// StartNode starts a node and waits until it is ready.
func StartNode(t testing.TB, bins *Binaries, opts NodeOptions) *Node {
	t.Helper()
	n := NewNode(t, bins, opts)
	n.Start()
	return n
}

// Args is the command line the node runs (without the program). Unless
// Bare, the node is a lone one: --gossip-addr= opens no network port, so
// that nodes run side by side; a cluster test passes its own
// --gossip-addr, --data-addr and --join in NodeOptions.Args, which come
// later and win.
func (n *Node) Args() []string {
	var args []string
	if !n.opts.Bare {
		args = append(args, "--data-dir", n.opts.DataDir, "--socket", n.opts.Socket, "--node-name", n.opts.Name,
			"--gossip-addr=")
	}
	return append(args, n.opts.Args...)
}

// Start starts the process and waits until GET /readyz answers 200. It
// fails the test if the process exits first or is not ready in time.
func (n *Node) Start() {
	n.t.Helper()
	if err := n.StartProcess(); err != nil {
		n.t.Fatal(err)
	}
	if err := n.WaitReady(n.opts.ReadyTimeout); err != nil {
		n.t.Fatal(err)
	}
}

// StartProcess starts the process without waiting for it to be ready.
func (n *Node) StartProcess() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("%s: already running (pid %d)", n.opts.Name, n.cmd.Process.Pid)
		}
	}
	prog := n.opts.Command
	if prog == "" {
		prog = n.bins.Daemon
	}
	cmd := exec.Command(prog, n.Args()...)
	cmd.Dir = n.opts.Dir
	cmd.Env = n.bins.Env(n.opts.Env...)
	n.runs++
	fmt.Fprintf(n.logs, "=== %s run %d: %s %s\n", n.opts.Name, n.runs, prog, strings.Join(n.Args(), " "))
	cmd.Stdout = n.logs
	cmd.Stderr = n.logs
	ownProcess(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start: %w", n.opts.Name, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.state = cmd, done, nil
	go func() {
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		n.mu.Lock()
		n.state = cmd.ProcessState
		n.mu.Unlock()
		fmt.Fprintf(n.logs, "=== %s run %d exited: %v\n", n.opts.Name, n.runs, cmd.ProcessState)
		close(done)
	}()
	return nil
}

// ownProcess makes cmd's process the test's own: in a process group of
// its own, so that no signal meant for the test binary's group reaches
// it (a stopped node would get SIGHUP and SIGCONT when the group it
// shares is orphaned, as when the shell that started the test exits),
// and killed when the test binary dies, so that none outlives it (the
// signal comes when the thread that started it ends: the runtime ends a
// thread only when a goroutine ends locked to it, which none here does).
func ownProcess(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// WaitReady polls GET /readyz until it answers 200. It returns an error,
// with the process's exit status, if the process exits first, or if it is
// not ready within timeout.
func (n *Node) WaitReady(timeout time.Duration) error {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return fmt.Errorf("%s: not started", n.opts.Name)
	}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("%s: exited before it was ready: %v", n.opts.Name, n.ExitState())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		last = n.Client.Readyz(ctx)
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("%s: not ready after %v: %v", n.opts.Name, timeout, last)
}

// RedisSocket is the node's default Redis socket, beside its local API
// socket (config's rule for an empty --redis-socket).
func (n *Node) RedisSocket() string {
	return config.Config{Socket: n.Socket}.RedisSocketPath()
}

// PID is the process ID of the current (or last) process; 0 before Start.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running reports whether the process was started and has not exited.
func (n *Node) Running() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the running process.
func (n *Node) Signal(sig os.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s: not started", n.opts.Name)
	}
	return n.cmd.Process.Signal(sig)
}

// Wait waits at most timeout for the process to exit and returns its state.
func (n *Node) Wait(timeout time.Duration) (*os.ProcessState, error) {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return nil, fmt.Errorf("%s: not started", n.opts.Name)
	}
	select {
	case <-done:
		return n.ExitState(), nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("%s: still running after %v", n.opts.Name, timeout)
	}
}

// ExitState is the state of the last process once it exited, else nil.
func (n *Node) ExitState() *os.ProcessState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state
}

// Stop sends SIGTERM and waits for the process to exit; the test fails
// unless it exits with status 0 within 20s (a clean shutdown: drained,
// flushed, snapshot written, socket removed).
func (n *Node) Stop() {
	n.t.Helper()
	if err := n.Signal(syscall.SIGTERM); err != nil {
		n.t.Fatalf("%s: SIGTERM: %v", n.opts.Name, err)
	}
	st, err := n.Wait(20 * time.Second)
	if err != nil {
		n.t.Fatal(err)
	}
	if !st.Success() {
		n.t.Fatalf("%s: after SIGTERM: %v; want exit status 0", n.opts.Name, st)
	}
	n.checkRace()
	n.Client.Close()
}

// Kill sends SIGKILL and waits for the process to be gone.
func (n *Node) Kill() {
	n.t.Helper()
	if err := n.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		n.t.Fatalf("%s: SIGKILL: %v", n.opts.Name, err)
	}
	if _, err := n.Wait(10 * time.Second); err != nil {
		n.t.Fatal(err)
	}
	n.checkRace()
	n.Client.Close()
}

// Restart stops the node with SIGTERM and starts it again.
func (n *Node) Restart() {
	n.t.Helper()
	n.Stop()
	n.Start()
}

// Logs is everything the node's processes wrote so far, each run headed by
// a "=== name run N" line.
func (n *Node) Logs() string { return n.logs.String() }

// WaitLog waits until the output holds substr (from the first run on).
func (n *Node) WaitLog(substr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(n.logs.String(), substr) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %q not logged within %v", n.opts.Name, substr, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// CountLog is how many times the output holds substr.
func (n *Node) CountLog(substr string) int { return strings.Count(n.logs.String(), substr) }

func (n *Node) checkRace() {
	n.t.Helper()
	if strings.Contains(n.logs.String(), raceReport) {
		n.t.Errorf("%s: the race detector reported a data race in the daemon (see its log)", n.opts.Name)
	}
}

// cleanup kills a process still running, and writes the output to the
// test log if the test failed.
func (n *Node) cleanup() {
	if n.Running() {
		_ = n.Signal(syscall.SIGKILL)
		_, _ = n.Wait(10 * time.Second)
	}
	n.Client.Close()
	if strings.Contains(n.logs.String(), raceReport) && !n.t.Failed() {
		n.t.Errorf("%s: the race detector reported a data race in the daemon", n.opts.Name)
	}
	if n.t.Failed() {
		n.t.Logf("--- output of %s (data %s, socket %s):\n%s", n.opts.Name, n.DataDir, n.Socket, n.logs.String())
	}
}

// cleanEnv drops the variables that would change a daemon's configuration
// behind the test's back.
func cleanEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "CACHECAST_") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") ||
			strings.HasPrefix(kv, "WATCHDOG_") || strings.HasPrefix(kv, "LISTEN_") || strings.HasPrefix(kv, "GORACE=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// logBuffer collects a process's output; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
