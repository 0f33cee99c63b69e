package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/cachecast/cachecast/localview/viewtest"
)

func TestMain(m *testing.M) {
	viewtest.RunChildIfAsked() // a reader process of the view tests
	// memberlist's probes in flight outlive a node's Shutdown by up to
	// the profile's probe timeout (testkit.FindLeaks).
	os.Exit(testkit.RunLeakFree(withBenchDaemonsClosed{m}, 10*time.Second))
}

// testConfig is a small daemon: 1 MiB segments, a short socket path (Unix
// socket paths are limited to 107 bytes; t.TempDir() can be longer).
// hook changes c's test hooks (daemonhooks) with set.
func hook(c *Config, set func(h *daemonhooks.Hooks)) {
	h := c.Hooks()
	set(&h)
	*c = config.WithHooks(*c, h)
}

func testConfig(t *testing.T) Config {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "cc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	c := config.Default()
	c.DataDir = filepath.Join(t.TempDir(), "data")
	c.Socket = filepath.Join(sockDir, "s.sock")
	c.NodeName = "test-node"
	c.GossipAddr = "" // a lone node: cluster tests set their own ports
	c.SegmentSize = 1 << 20
	c.MaxValueSize = 64 << 10
	c.MaxBodySize = 1 << 20
	c.FlushInterval = 20 * time.Millisecond
	c.ShutdownTimeout = 5 * time.Second
	c.LogLevel = "debug"
	return c
}

// testDaemon is a daemon running in the test process, and a client of its
// socket.
type testDaemon struct {
	t      *testing.T
	d      *Daemon
	cfg    Config
	c      *http.Client
	cancel context.CancelFunc
	runErr chan error
}

// startDaemon starts a daemon with cfg and stops it when the test ends.
func startDaemon(t *testing.T, cfg Config) *testDaemon {
	t.Helper()
	d, err := New(cfg, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td := &testDaemon{t: t, d: d, cfg: cfg, c: testkit.UnixClient(cfg.Socket, true, 10*time.Second), cancel: cancel, runErr: make(chan error, 1)}
	go func() { td.runErr <- d.Run(ctx) }()
	t.Cleanup(func() { td.stop() })
	td.waitReady()
	return td
}

// stop ends Run and checks it returned nil; a second call does nothing.
func (td *testDaemon) stop() {
	td.t.Helper()
	if td.cancel == nil {
		return
	}
	td.cancel()
	td.cancel = nil
	select {
	case err := <-td.runErr:
		if err != nil {
			td.t.Errorf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		td.t.Fatal("Run did not return 15s after its context ended")
	}
	td.c.CloseIdleConnections()
}

func (td *testDaemon) waitReady() {
	td.t.Helper()
	// A bound, not a margin: a cluster node is ready once it has joined
	// and caught up, which takes long on two loaded cores under -race
	// with the package's parallel tests beside it.
	testkit.Eventually(td.t, 30*time.Second, "the daemon to be ready", td.d.ready.Load)
}

// resp is a response read whole.
type resp struct {
	status int
	header http.Header
	body   []byte
}

// errCode is the code of a JSON error body ("" if none).
func (r resp) errCode() string {
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

func (td *testDaemon) do(method, path string, body io.Reader, header ...string) resp {
	td.t.Helper()
	req, err := http.NewRequest(method, "http://cachecast"+path, body)
	if err != nil {
		td.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := td.c.Do(req)
	if err != nil {
		td.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		td.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp{res.StatusCode, res.Header, b}
}

func (td *testDaemon) put(topic, key, value string, header ...string) wire.PutResult {
	td.t.Helper()
	r := td.do("PUT", "/v1/topics/"+topic+"/keys/"+key, strings.NewReader(value), header...)
	if r.status != 200 {
		td.t.Fatalf("PUT %s/%s: %d %s", topic, key, r.status, r.body)
	}
	var pr wire.PutResult
	if err := json.Unmarshal(r.body, &pr); err != nil {
		td.t.Fatalf("PUT answer %s: %v", r.body, err)
	}
	return pr
}

// rawRequest writes raw bytes to a fresh connection, then reads one
// response (or the connection's end). Between writing and reading it runs
// mid, if set (to stall, or to half-close).
func rawRequest(t *testing.T, sock string, raw string, mid func(c *net.UnixConn)) (resp, error) {
	t.Helper()
	res, b, err := testkit.RawHTTP(t, sock, raw, mid)
	if err != nil {
		return resp{}, err
	}
	return resp{res.StatusCode, res.Header, b}, nil
}
