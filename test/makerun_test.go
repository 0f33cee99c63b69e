package test

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
)

// TestMakeRun checks what `make run` does on a fresh clone: the Makefile's
// run target starts ./bin/cachecastd with no flags, and that binary, run
// with no flags and no environment in an empty working directory, makes
// ./cachecast.sock and ./data, serves a publish and a get, and stops
// cleanly on SIGTERM.
func TestMakeRun(t *testing.T) {
	out, err := exec.Command("make", "-n", "-C", "..", "run").Output()
	if err != nil {
		t.Fatalf("make -n run: %v (the Makefile's run target, or make itself, is missing)", err)
	}
	var last string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "make") {
			last = l
		}
	}
	if last != "./bin/cachecastd" {
		t.Fatalf("make run ends with %q; this test runs ./bin/cachecastd with no flags:\n%s", last, out)
	}

	defaultPortsFree(t)
	dir, err := os.MkdirTemp("", "cc") // short: the socket path is relative to it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bins.Daemon, filepath.Join(dir, "bin", "cachecastd")); err != nil {
		t.Fatal(err)
	}
	n := StartNode(t, bins, NodeOptions{
		Name: "make-run", Bare: true, Dir: dir, Command: "./bin/cachecastd",
		DataDir: filepath.Join(dir, "data"), Socket: "cachecast.sock",
	})

	fi, err := os.Stat(filepath.Join(dir, "cachecast.sock"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("./cachecast.sock: %v %v", fi, err)
	}
	if perm := fi.Mode().Perm(); perm != 0o660 {
		t.Fatalf("./cachecast.sock has mode %o; want the default 0660", perm)
	}
	for _, p := range []string{"data/LOCK", "data/meta", "data/log"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("./%s: %v", p, err)
		}
	}
	c := n.Client
	res, err := c.Publish(ctx(t), "prices", "sku-1", []byte("12.50"), "")
	if err != nil || res.Seq != 1 {
		t.Fatalf("publish: %+v %v", res, err)
	}
	if v, err := c.Get(ctx(t), "prices", "sku-1"); err != nil || string(v.Bytes) != "12.50" {
		t.Fatalf("get: %q %v", v.Bytes, err)
	}
	st, err := c.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if st.Flush != "async" || st.Node.Name != host || st.Node.Version != testVersion {
		t.Fatalf("defaults: flush %q, node %q (host %q), version %q", st.Flush, st.Node.Name, host, st.Node.Version)
	}
	// Not on a terminal, the log is JSON, one object a line.
	first := strings.SplitN(n.Logs(), "\n", 3)[1]
	var line map[string]any
	if err := json.Unmarshal([]byte(first), &line); err != nil || line["msg"] == nil {
		t.Fatalf("first log line %q is not a JSON log entry: %v", first, err)
	}
	n.Stop()
	if _, err := os.Stat(filepath.Join(dir, "cachecast.sock")); !os.IsNotExist(err) {
		t.Fatalf("./cachecast.sock outlived the daemon: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "snapshot")); err != nil {
		t.Fatalf("./data/snapshot after the stop: %v", err)
	}
}

// defaultPortsFree ends the test through testkit.Missing when another
// process holds the ports `make run` binds with the embedded defaults
// (gossip 127.0.0.1:7946, TCP and UDP; data 127.0.0.1:7947): the test runs
// the README's command as written, so it cannot move them, and a daemon
// left running on this machine would otherwise fail it with a bind error
// that says nothing of the cause.
func defaultPortsFree(t *testing.T) {
	t.Helper()
	gossip, data := config.Default().GossipAddr, config.Default().DataAddr
	for _, a := range []struct{ network, addr string }{{"tcp", gossip}, {"udp", gossip}, {"tcp", data}} {
		var c io.Closer
		var err error
		if a.network == "udp" {
			c, err = net.ListenPacket(a.network, a.addr)
		} else {
			c, err = net.Listen(a.network, a.addr)
		}
		if err != nil {
			testkit.Missing(t, "make run binds %s %s, which another process on this machine holds: %v", a.network, a.addr, err)
			return
		}
		c.Close()
	}
}
