package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store"
)

// TestAllowLists checks that the role lists reload on SIGHUP: a user
// refused as a publisher (a real uid, through setpriv) may publish once
// the reloaded --allow-uids names it; each refusal and each write is
// logged with the caller's credentials; a failed reload changes nothing.
func TestAllowLists(t *testing.T) {
	needRoot(t)
	const user = 61042
	cfg := roleConfig(t)
	cfg.AllowUIDs = []uint32{12345}
	// What SIGHUP reloads to; set by the test as it goes.
	var reloadTo atomic.Pointer[Config]
	cfg.Reload = func() (Config, error) { return *reloadTo.Load(), nil }
	core, logs := observer.New(zapcore.DebugLevel)
	d, err := New(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	td := &testDaemon{t: t, d: d, cfg: cfg, c: testkit.UnixClient(cfg.Socket, true, 10*time.Second), cancel: cancel, runErr: runErr}
	t.Cleanup(td.stop)
	td.waitReady()

	as := uidClient{t: t, sock: cfg.Socket, uid: user}
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"PUT", "/v1/topics/t/keys/k", "v", 403},
		{"DELETE", "/v1/topics/t/keys/k", "", 403},
		{"POST", "/v1/topics/t/messages", `{"key":"k","value":"v"}`, 403},
		{"GET", "/v1/topics/t/keys/k", "", 404}, // a reader
		{"GET", "/v1/topics", "", 200},
	} {
		if r := as.do(tc.method, tc.path, tc.body); r.status != tc.status {
			t.Errorf("%s %s as uid %d: %d %s; want %d", tc.method, tc.path, user, r.status, r.body, tc.status)
		}
	}
	if n := d.Store().Stats().Records; n != 0 {
		t.Fatalf("%d records written by a forbidden caller", n)
	}
	refused := logs.FilterMessage("request refused").All()
	if len(refused) != 3 || refused[0].ContextMap()["uid"] != uint32(user) || refused[0].ContextMap()["role"] != "publish" {
		t.Fatalf("refusals logged: %v", refused)
	}

	// Reload (SIGHUP) with the user allowed.
	next := cfg
	next.AllowUIDs = []uint32{12345, user}
	next.LogLevel = "info"
	next.Flush = "sync" // needs a restart: logged, not applied
	reloadTo.Store(&next)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Not "reloaded": the warning names what was not applied.
	partly := "reload applied " + strings.Join(config.ReloadFlags(), ", ") + "; these changed settings need a restart and were not applied"
	testkit.Eventually(t, 5*time.Second, "the reload", func() bool { return logs.FilterMessage(partly).Len() == 1 })
	if w := logs.FilterMessage(partly).All(); fmt.Sprint(w[0].ContextMap()["not-applied"]) != "[flush]" || logs.FilterMessage("reloaded").Len() != 0 {
		t.Fatalf("the reload's warning: %v; reloaded logged %d times", w[0].ContextMap(), logs.FilterMessage("reloaded").Len())
	}
	if r := as.do("PUT", "/v1/topics/t/keys/k", "v"); r.status != 200 {
		t.Fatalf("PUT after reload: %d %s", r.status, r.body)
	}
	// The reload set the level to info: no debug lines.
	if n := logs.FilterMessage("published").Len(); n != 0 {
		t.Fatalf("debug line logged at level info")
	}

	// Each write is logged (at debug level) with the caller's credentials.
	d.level.SetLevel(zapcore.DebugLevel)
	td.put("t", "k2", "v")
	pub := logs.FilterMessage("published").All()
	if len(pub) != 1 {
		t.Fatalf("published lines: %v", pub)
	}
	if m := pub[0].ContextMap(); m["uid"] != uint32(os.Getuid()) || m["gid"] != uint32(os.Getgid()) || m["pid"] != int32(os.Getpid()) {
		t.Fatalf("write logged without the caller's credentials: %v", m)
	}
	// A failed reload keeps the running configuration.
	bad := cfg
	bad.Flush = "bogus"
	reloadTo.Store(&bad)
	if err := d.Reload(); err == nil || !strings.Contains(err.Error(), "--flush") {
		t.Fatalf("Reload with a bad config = %v", err)
	}
	if r := as.do("PUT", "/v1/topics/t/keys/k", "v"); r.status != 200 {
		t.Fatalf("PUT after a failed reload: %d %s", r.status, r.body)
	}
}

// notifySocket listens on a datagram socket set as NOTIFY_SOCKET, like
// systemd, and collects what the daemon sends.
type notifySocket struct {
	t    *testing.T
	conn *net.UnixConn
	msgs chan string
}

func listenNotify(t *testing.T) *notifySocket {
	dir, err := os.MkdirTemp("", "cc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", path)
	ns := &notifySocket{t: t, conn: conn, msgs: make(chan string, 1000)}
	go func() {
		defer close(ns.msgs)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ns.msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		for range ns.msgs {
		}
	})
	return ns
}

// expect waits for a datagram containing want and returns it; datagrams
// before it are skipped unless they contain one of forbid.
func (ns *notifySocket) expect(want string, forbid ...string) string {
	ns.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m := <-ns.msgs:
			for _, f := range forbid {
				if strings.Contains(m, f) {
					ns.t.Fatalf("got %q before %q", m, want)
				}
			}
			if strings.Contains(m, want) {
				return m
			}
		case <-timeout:
			ns.t.Fatalf("no %q from the daemon", want)
		}
	}
}

func TestSystemdNotify(t *testing.T) {
	ns := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "100000") // 100ms: a ping every 50ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	td := startDaemon(t, testConfig(t))
	ns.expect("STATUS=recovering the store", "READY=1")
	ready := ns.expect("READY=1")
	if !strings.Contains(ready, "STATUS=serving on "+td.cfg.Socket) {
		t.Fatalf("READY without a STATUS line: %q", ready)
	}
	for range 3 {
		ns.expect("WATCHDOG=1")
	}
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	reloading := ns.expect("RELOADING=1")
	if !strings.Contains(reloading, "MONOTONIC_USEC=") {
		t.Fatalf("RELOADING=1 without MONOTONIC_USEC: %q", reloading)
	}
	ns.expect("READY=1")

	td.stop()
	stopping := ns.expect("STOPPING=1")
	if !strings.Contains(stopping, "STATUS=stopping") {
		t.Fatalf("STOPPING=1 without a status: %q", stopping)
	}
	ns.expect("STATUS=stopping: flushing", "READY=1")
}

// SIGTERM ends Run with nil, after a graceful shutdown.
func TestSIGTERM(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	td.put("t", "k", "v")
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-td.runErr:
		if err != nil {
			t.Fatalf("Run after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
	td.cancel = nil
	td.c.CloseIdleConnections()
	if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after shutdown: %v", err)
	}
	td2 := startDaemon(t, cfg)
	if r := td2.do("GET", "/v1/topics/t/keys/k", nil); string(r.body) != "v" {
		t.Fatalf("value after SIGTERM and restart: %d %q", r.status, r.body)
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)

	// Same data directory, other socket: the store's lock refuses it.
	other := cfg
	other.Socket = cfg.Socket + "2"
	_, err := New(other, nil)
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "--data-dir: "+cfg.DataDir+" is in use by another cachecastd") {
		t.Fatalf("second daemon on the data dir: %v", err)
	}
	if _, err := os.Stat(other.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused daemon left a socket: %v", err)
	}

	// Other data directory, same socket: the live socket is not taken over.
	other = cfg
	other.DataDir = filepath.Join(t.TempDir(), "data2")
	_, err = New(other, nil)
	if !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("second daemon on the socket: %v", err)
	}
	if r := td.do("GET", "/healthz", nil); r.status != 200 {
		t.Fatalf("first daemon after the attempt: %d", r.status)
	}
	// The refused daemon released its store.
	other.Socket = cfg.Socket + "3"
	d, err := New(other, nil)
	if err != nil {
		t.Fatalf("data dir of the refused daemon still locked: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := d.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, err := os.Stat(other.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close without Run left the socket: %v", err)
	}
}

func TestSocketFile(t *testing.T) {
	t.Parallel()
	t.Run("stale socket is replaced", func(t *testing.T) {
		cfg := testConfig(t)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close() // a crashed daemon's socket: the file stays, nobody answers
		td := startDaemon(t, cfg)
		if r := td.do("GET", "/healthz", nil); r.status != 200 {
			t.Fatalf("healthz: %d", r.status)
		}
	})
	t.Run("a file that is not a socket is left alone", func(t *testing.T) {
		cfg := testConfig(t)
		if err := os.WriteFile(cfg.Socket, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := New(cfg, nil)
		if err == nil || !strings.Contains(err.Error(), "is not a socket") {
			t.Fatalf("New: %v", err)
		}
		if b, _ := os.ReadFile(cfg.Socket); string(b) != "precious" {
			t.Fatal("the file was touched")
		}
		// And the data dir was released.
		cfg.Socket += "2"
		d, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
	})
	t.Run("mode", func(t *testing.T) {
		for _, mode := range []os.FileMode{0o660, 0o600, 0o666} {
			cfg := testConfig(t)
			cfg.SocketMode = mode
			d, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(cfg.Socket)
			d.Close()
			if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != mode {
				t.Fatalf("socket mode %v, %v; want %v", fi.Mode(), err, mode)
			}
		}
	})
	t.Run("directory missing", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Socket = filepath.Join(filepath.Dir(cfg.Socket), "no", "such", "dir.sock")
		if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "--socket") {
			t.Fatalf("New: %v", err)
		}
	})
}

// Shutdown waits for a request in flight: its body arrives after the
// shutdown began, and it is still answered and kept.
func TestShutdownDrains(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	conn, err := net.Dial("unix", cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/topics/t/keys/late HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234")
	testkit.Eventually(t, 5*time.Second, "the handler", func() bool { return td.d.api.Handlers() == 1 })

	td.cancel()
	td.cancel = nil
	select {
	case err := <-td.runErr:
		t.Fatalf("Run returned (%v) with a request in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	if r, err := testkit.UnixClient(cfg.Socket, true, 10*time.Second).Get("http://x/healthz"); err == nil {
		r.Body.Close()
		t.Fatal("a new connection was served during shutdown")
	}
	fmt.Fprintf(conn, "56789")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"status":"ok"`) {
		t.Fatalf("drained request: %d %s", res.StatusCode, body)
	}
	if err := <-td.runErr; err != nil {
		t.Fatal(err)
	}
	td.c.CloseIdleConnections()

	td2 := startDaemon(t, cfg)
	if r := td2.do("GET", "/v1/topics/t/keys/late", nil); string(r.body) != "0123456789" {
		t.Fatalf("drained write lost: %d %q", r.status, r.body)
	}
}

// A request that never finishes holds shutdown for --shutdown-timeout at
// most; a subscription, even one whose client stopped reading, ends at once.
func TestShutdownBounded(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 500 * time.Millisecond
	cfg.ReadTimeout = time.Minute
	td := startDaemon(t, cfg)

	// A subscriber that never reads: 3.6 MB is far more than the socket
	// buffers hold, so its handler blocks in Write.
	sub, err := net.Dial("unix", cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	fmt.Fprintf(sub, "GET /v1/topics/t/subscribe HTTP/1.1\r\nHost: x\r\n\r\n")
	testkit.Eventually(t, 5*time.Second, "the subscription", func() bool { return td.d.api.Handlers() == 1 })
	time.Sleep(50 * time.Millisecond) // let the stream reach its reader
	value := strings.Repeat("v", 60000)
	for i := range 60 {
		td.put("t", "k"+strconv.Itoa(i), value)
	}
	// And a body that never completes.
	conn, err := net.Dial("unix", cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/topics/t/keys/never HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234")
	testkit.Eventually(t, 5*time.Second, "two handlers", func() bool { return td.d.api.Handlers() == 2 })

	start := time.Now()
	td.stop()
	if took := time.Since(start); took > cfg.ShutdownTimeout+3*time.Second {
		t.Fatalf("shutdown took %v with --shutdown-timeout %v", took, cfg.ShutdownTimeout)
	}
	if n := td.d.Store().Stats().Records; n != 60 {
		t.Fatalf("%d records; the unfinished PUT must not be written", n)
	}
}

func TestStoreFullRefused(t *testing.T) {
	cfg := testConfig(t)
	cfg.RetentionBytes = 2 * cfg.SegmentSize
	cfg.WhenFull = "refuse"
	td := startDaemon(t, cfg)
	value := strings.Repeat("v", 60<<10)
	var full resp
	stored := 0
	for i := range 100 {
		full = td.do("PUT", "/v1/topics/t/keys/k"+strconv.Itoa(i), strings.NewReader(value))
		if full.status != 200 {
			break
		}
		stored++
	}
	if full.status != 507 || full.errCode() != "store_full" {
		t.Fatalf("after %d values: %d %s; want 507 store_full", stored, full.status, full.body)
	}
	if n := td.d.Store().Stats().Records; n != uint64(stored) {
		t.Fatalf("%d records; %d were acknowledged", n, stored)
	}
	// Reads go on.
	if r := td.do("GET", "/v1/topics/t/keys/k0", nil); r.status != 200 || len(r.body) != len(value) {
		t.Fatalf("read while full: %d", r.status)
	}
}

func TestReadyzDuringShutdown(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	if r := td.do("GET", "/readyz", nil); r.status != 200 {
		t.Fatalf("readyz: %d", r.status)
	}
	td.d.ready.Store(false) // what shutdown does first
	if r := td.do("GET", "/readyz", nil); r.status != 503 || r.errCode() != "unavailable" {
		t.Fatalf("readyz while not ready: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/healthz", nil); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
}

// TestSocketCheckedBeforeStore: a socket path that cannot be used is
// refused before the store is opened (whose recovery may take minutes):
// New fails naming --socket, and the data directory was never created.
func TestSocketCheckedBeforeStore(t *testing.T) {
	live := testConfig(t)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: live.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, socket, want string
	}{
		{"no such directory", filepath.Join(t.TempDir(), "gone", "s.sock"), "--socket: the directory"},
		{"the directory is a file", filepath.Join(file, "s.sock"), "is not a directory"},
		{"another daemon answers", live.Socket, "another process answers on it"},
		{"a file that is not a socket", file, "exists and is not a socket"},
	}
	if os.Geteuid() != 0 { // root may write anywhere
		cases = append(cases, struct{ name, socket, want string }{"a directory without write permission", filepath.Join(readOnly, "s.sock"), "cannot create the socket in"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Socket = tc.socket
			d, err := New(cfg, nil)
			if err == nil {
				d.Close()
				t.Fatal("New accepted the socket path")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want %q", err, tc.want)
			}
			if _, err := os.Stat(cfg.DataDir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the store was opened before the socket was checked: %v", err)
			}
		})
	}
}
