// Package testkit is what the tests of every package share: waiting for a
// condition (never for a fixed time), an embedded NATS server, HTTP over a
// Unix socket, the directory a benchmark keeps its files in, and a
// package's doc comment for the tests that hold it to the code. Only
// tests import it; nothing the binaries are built from does.
package testkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Step is how often the waits below look at their condition: often enough
// that a benchmark timing an event with them loses little, seldom enough
// that a wait does not take a core from the rest of a shared machine.
const Step = 10 * time.Millisecond

// Poll calls cond every Step until it returns "" (done), within passes or
// the test ends, and returns cond's last answer: "" once it held, or why
// it did not.
func Poll(tb testing.TB, within time.Duration, cond func() string) string {
	deadline := time.Now().Add(within)
	for {
		why := cond()
		if why == "" || time.Now().After(deadline) || tb.Context().Err() != nil {
			return why
		}
		time.Sleep(Step)
	}
}

// Until waits as Poll does and fails the test, with cond's last answer,
// if cond did not return "" within.
func Until(tb testing.TB, within time.Duration, what string, cond func() string) {
	tb.Helper()
	if why := Poll(tb, within, cond); why != "" {
		tb.Fatalf("waited %v for %s: %s", within, what, why)
	}
}

// Eventually waits until cond holds, and fails the test if it does not
// within.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	Until(tb, within, what, func() string {
		if cond() {
			return ""
		}
		return "it did not happen"
	})
}

// NATS runs a real NATS server in the test process and returns it once it
// accepts connections. o may be nil; the server listens on 127.0.0.1 and a
// free port unless o names others, and logs nothing. It is shut down when
// the test ends, after the cleanups registered later (the nodes that use
// it); a test may shut it down earlier.
func NATS(tb testing.TB, o *server.Options) *server.Server {
	tb.Helper()
	var opts server.Options
	if o != nil {
		opts = *o
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = -1 // a free port
	}
	opts.NoLog, opts.NoSigs = true, true
	ns, err := server.NewServer(&opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Shutdown) // idempotent
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		tb.Fatalf("NATS server %s not ready after 5s", opts.ServerName)
	}
	return ns
}

// UnixClient is an HTTP client whose every request goes to the Unix socket
// at path (the URL's host is ignored), without keep-alive unless
// keepAlive, with the given timeout for a whole request.
func UnixClient(path string, keepAlive bool, timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			DisableKeepAlives:  !keepAlive,
			DisableCompression: true,
		},
		Timeout: timeout,
	}
}

// RawHTTP writes raw bytes on a new connection to the Unix socket at path,
// runs mid (to stall, or to half-close) if set, then reads one answer, for
// at most 10s. An error means no answer came (the server closed the
// connection, or the time passed); a body cut short is returned as far as
// it came.
func RawHTTP(tb testing.TB, path, raw string, mid func(c *net.UnixConn)) (*http.Response, []byte, error) {
	tb.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		tb.Fatal(err)
	}
	if mid != nil {
		mid(conn.(*net.UnixConn))
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, nil, err
	}
	return res, b, nil
}

// BenchDir is a fresh directory for a benchmark's files, removed at its
// end: under $CACHECAST_BENCH_DIR when set (/dev/shm takes the disk out
// of a measurement), else the test's temporary directory.
func BenchDir(tb testing.TB) string {
	tb.Helper()
	if root := os.Getenv("CACHECAST_BENCH_DIR"); root != "" {
		dir, err := os.MkdirTemp(root, "cachecast-bench")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return tb.TempDir()
}

// CannedServer listens on a Unix socket of its own and answers every
// request of a connection with answer, once it has read the request's
// head, for answers a real daemon (or clienttest) never sends; an empty
// answer stalls until the test ends. It returns the socket's path.
func CannedServer(tb testing.TB, answer string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ccraw")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	tb.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				buf := make([]byte, 4096)
				var got []byte
				for !bytes.Contains(got, []byte("\r\n\r\n")) {
					n, err := nc.Read(buf)
					if err != nil {
						return
					}
					got = append(got, buf[:n]...)
				}
				if answer == "" {
					<-done // stall
					return
				}
				nc.Write([]byte(answer))
			}()
		}
	}()
	return sock
}
