// Package daemontest runs real cachecastd nodes (package daemon) inside a
// test's process, each with its own data directory and Unix socket, for
// the tests of packages that talk to a daemon (client's contract test,
// cachecast bench's benchmark). Unlike package test, it builds no binary
// and starts no process; unlike clienttest, it is the daemon itself.
package daemontest

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
)

// Node is a running daemon.
type Node struct {
	D      *daemon.Daemon
	Config daemon.Config
	// Socket is the local API's socket.
	Socket string

	stop func() // ends Run and waits for it, once
}

// Stop stops the daemon before the test ends (it leaves its cluster);
// the test's cleanup then does nothing more for it.
func (n *Node) Stop() { n.stop() }

// Start runs a lone daemon (no cluster, errors-only logs, a short data
// directory) with configure's changes to its configuration, and waits
// until /readyz answers 200. The test's cleanup stops it and fails the
// test if Run returned an error.
func Start(tb testing.TB, configure func(*daemon.Config)) *Node {
	tb.Helper()
	dir := testkit.BenchDir(tb)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Socket = filepath.Join(dir, "s.sock")
	cfg.NodeName = "daemontest"
	cfg.GossipAddr = ""
	cfg.LogLevel = "error"
	if configure != nil {
		configure(&cfg)
	}
	d, err := daemon.New(cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("daemon: %v", err)
		}
	})
	tb.Cleanup(stop)
	hc := testkit.UnixClient(cfg.Socket, false, time.Second)
	testkit.Eventually(tb, 10*time.Second, "the daemon ready", func() bool {
		res, err := hc.Get("http://cachecast/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return &Node{D: d, Config: cfg, Socket: cfg.Socket, stop: stop}
}
