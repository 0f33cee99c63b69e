package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/wire"
)

// statusOfCode is the HTTP status of each error code of the wire format
// (TestStatusOfEveryCode checks that it has them all).
var statusOfCode = map[string]int{
	client.CodeBadRequest:          400,
	client.CodeInvalidName:         400,
	client.CodeBadJSON:             400,
	client.CodeBadBase64:           400,
	client.CodeValueTooLarge:       413,
	client.CodeBodyTooLarge:        413,
	client.CodeNotFound:            404,
	client.CodeRouteNotFound:       404,
	client.CodeConflict:            409,
	client.CodeMethodNotAllowed:    405,
	client.CodeUnsupportedEncoding: 415,
	client.CodeForbidden:           403,
	client.CodeStoreFull:           507,
	client.CodeDiskFull:            507,
	client.CodeTooMany:             429,
	client.CodeUnavailable:         503,
	client.CodeCatchingUp:          503,
	client.CodeNotPending:          409,
	client.CodeBusy:                503,
	client.CodeFleetTooOld:         409,
	client.CodeTimeout:             408,
	client.CodeInternal:            500,
}

// TestStatusOfEveryCode checks that statusOfCode has every code of the
// wire format, with the status the wire format gives it.
func TestStatusOfEveryCode(t *testing.T) {
	if len(statusOfCode) != len(wire.Codes) {
		t.Errorf("statusOfCode has %d codes, the wire format %d", len(statusOfCode), len(wire.Codes))
	}
	for _, code := range wire.Codes {
		if got, ok := statusOfCode[code]; !ok || got != wire.HTTPStatus(code) {
			t.Errorf("statusOfCode[%s] = %d (%v); the wire format says %d", code, got, ok, wire.HTTPStatus(code))
		}
	}
}

// codeSet records the error codes a test has seen, checking each answer's
// shape on the way.
type codeSet map[string]bool

// check fails the test unless r is the error answer of code: its HTTP
// status, Content-Type application/json, {"error":{"code","message"}}
// with a message.
func (s codeSet) check(t *testing.T, what string, r response, code string) {
	t.Helper()
	if r.status != statusOfCode[code] || r.code() != code {
		t.Fatalf("%s: %d %s; want %d %s", what, r.status, r.body, statusOfCode[code], code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
	if r.message() == "" {
		t.Fatalf("%s: no message: %s", what, r.body)
	}
	s[code] = true
}

// TestErrorCodes produces every error code of the local API from a real
// cachecastd, each with its HTTP status and JSON body, the ones that need
// a fault (a full store, a full disk, an I/O error, a shutdown) from a
// daemon of their own.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	seen := codeSet{}
	// ran counts the subtests that ran and were not skipped: the check
	// that every code was produced needs them all (go test -run may select
	// a few, and outside CI those that need root skip without it).
	ran, subtests := 0, 0
	run := func(name string, f func(t *testing.T)) {
		subtests++
		t.Run(name, func(t *testing.T) {
			defer func() {
				if !t.Skipped() {
					ran++
				}
			}()
			f(t)
		})
	}
	envFile := filepath.Join(t.TempDir(), "cachecastd.env")
	if err := os.WriteFile(envFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n := StartNode(t, bins, NodeOptions{Name: "codes", Args: append([]string{
		"--max-body-size", "8KiB", "--read-timeout", "500ms", "--env-file", envFile,
	}, append(smallNode, "--max-value-size", "1KiB")...)})
	c := n.Client
	if _, err := c.Publish(ctx(t), "t", "known", []byte("original"), ""); err != nil {
		t.Fatal(err)
	}

	big := strings.Repeat("x", 1<<10+1)
	line := `{"key":"k","value":"` + strings.Repeat("v", 100) + `"}` + "\n"
	tests := []struct {
		name  string
		raw   string
		mid   func(*net.UnixConn)
		code  string
		allow string
	}{
		{name: "limit zero", raw: request("GET", "/v1/topics/t/keys?limit=0", ""), code: client.CodeBadRequest},
		{name: "bad subscribe from", raw: request("GET", "/v1/topics/t/subscribe?from=yesterday", ""), code: client.CodeBadRequest},
		{name: "topic with a space", raw: request("PUT", "/v1/topics/bad%20topic/keys/k", "v"), code: client.CodeInvalidName},
		{name: "key too long", raw: request("PUT", "/v1/topics/t/keys/"+strings.Repeat("k", 1025), "v"), code: client.CodeInvalidName},
		{name: "bad cursor name", raw: request("GET", "/v1/cursors/a%20b", ""), code: client.CodeInvalidName},
		{name: "malformed json", raw: request("POST", "/v1/topics/t/messages", `{"key":`), code: client.CodeBadJSON},
		{name: "bad base64", raw: request("POST", "/v1/topics/t/messages", `{"key":"k","value_base64":"***"}`), code: client.CodeBadBase64},
		{name: "value too large", raw: request("PUT", "/v1/topics/t/keys/k", big), code: client.CodeValueTooLarge},
		{name: "body too large", raw: request("POST", "/v1/topics/t/messages", strings.Repeat(line, 100), "Content-Type: application/x-ndjson"), code: client.CodeBodyTooLarge},
		{name: "absent key", raw: request("GET", "/v1/topics/t/keys/absent", ""), code: client.CodeNotFound},
		{name: "absent cursor", raw: request("GET", "/v1/cursors/absent", ""), code: client.CodeNotFound},
		{name: "cancel with nothing pending", raw: request("DELETE", "/v1/topics/t/pending/k?effective_at=4102444800000", ""), code: client.CodeNotPending},
		{name: "unknown route", raw: request("GET", "/v2/topics", ""), code: client.CodeRouteNotFound},
		{name: "method on a key", raw: request("PATCH", "/v1/topics/t/keys/k", "v"), code: client.CodeMethodNotAllowed, allow: "DELETE, GET, HEAD, PUT"},
		{name: "method on topics", raw: request("DELETE", "/v1/topics", ""), code: client.CodeMethodNotAllowed, allow: "GET, HEAD"},
		{name: "gzip body", raw: request("PUT", "/v1/topics/t/keys/k", "\x1f\x8b", "Content-Encoding: gzip"), code: client.CodeUnsupportedEncoding},
		{
			name: "body stalls past --read-timeout",
			raw:  "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
			mid:  func(*net.UnixConn) { time.Sleep(700 * time.Millisecond) },
			code: client.CodeTimeout,
		},
	}
	for _, tt := range tests {
		run(tt.name, func(t *testing.T) {
			r, err := rawRequest(t, n.Socket, tt.raw, tt.mid)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			seen.check(t, tt.name, r, tt.code)
			if tt.allow != "" && r.header.Get("Allow") != tt.allow {
				t.Fatalf("Allow %q; want %q", r.header.Get("Allow"), tt.allow)
			}
		})
	}

	run("a group member with other tags", func(t *testing.T) {
		sub, err := c.Subscribe(ctx(t), "t", client.SubscribeOptions{Mode: client.ModeClustering, Group: "g", Tags: []string{"eu"}})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		r, err := rawRequest(t, n.Socket, request("GET", "/v1/topics/t/subscribe?mode=clustering&group=g&tags=us", ""), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		seen.check(t, "a group member with other tags", r, client.CodeConflict)
	})

	run("forbidden after a reload", func(t *testing.T) {
		testkit.NeedRoot(t, "requests as another uid (setpriv)")
		// --allow-uids from the env file, applied by SIGHUP: this test's
		// uid is not on the list, so it may read but not publish.
		reload := func(content string) {
			t.Helper()
			if err := os.WriteFile(envFile, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			before := n.CountLog(`"msg":"reloaded"`)
			if err := n.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "a reload logged after SIGHUP", func() bool {
				return n.CountLog(`"msg":"reloaded"`) != before
			})
		}
		// The caller is another user (root, which runs the tests, is
		// always admin): the socket is opened to it.
		if err := os.Chmod(filepath.Dir(n.Socket), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(n.Socket, 0o666); err != nil {
			t.Fatal(err)
		}
		const other = 61042
		reload("CACHECAST_ALLOW_UIDS=4242\n")
		for _, rq := range [][3]string{
			{"PUT", "/v1/topics/t/keys/known", "changed"},
			{"DELETE", "/v1/topics/t/keys/known", ""},
			{"POST", "/v1/topics/t/messages", `{"key":"known","value":"changed"}`},
		} {
			seen.check(t, rq[0], requestAs(t, other, n.Socket, rq[0], rq[1], rq[2]), client.CodeForbidden)
		}
		if r := requestAs(t, other, n.Socket, "GET", "/v1/topics/t/keys/known", ""); r.status != 200 || string(r.body) != "original" {
			t.Fatalf("a reader is not restricted: %d %s", r.status, r.body)
		}
		if !strings.Contains(n.Logs(), `"msg":"request refused"`) {
			t.Fatal("the refusal was not logged")
		}
		reload(fmt.Sprintf("CACHECAST_ALLOW_UIDS=4242,%d\n", other))
		if r := requestAs(t, other, n.Socket, "PUT", "/v1/topics/t/keys/allowed", "yes"); r.status != 200 {
			t.Fatalf("publish once allowed: %d %s", r.status, r.body)
		}
		reload("")
		if r := requestAs(t, other, n.Socket, "PUT", "/v1/topics/t/keys/open", "yes"); r.status != 200 {
			t.Fatalf("publish with no list: %d %s", r.status, r.body)
		}
	})

	run("busy, and too_many past a uid's share", func(t *testing.T) {
		// A subscription per uid, two on the node; one body of 8 KiB in
		// memory at a time.
		n := StartNode(t, bins, NodeOptions{Name: "limits", Args: append([]string{
			"--max-streams", "2", "--max-streams-per-uid", "1",
			"--max-body-size", "8KiB", "--max-body-memory", "8KiB", "--max-body-memory-per-uid", "8KiB",
		}, append(smallNode, "--max-value-size", "1KiB")...)})
		sub, err := n.Client.Subscribe(ctx(t), "t", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		r, err := rawRequest(t, n.Socket, request("GET", "/v1/topics/t/subscribe", ""), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		seen.check(t, "a second subscription of the uid", r, client.CodeTooMany)

		// A body that has all of the budget, stalled, and a PUT after it
		// (again, when the PUT came first).
		deadline := time.Now().Add(5 * time.Second)
		for {
			stalled, err := net.Dial("unix", n.Socket)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(stalled, "POST /v1/topics/t/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 8192\r\n\r\n{")
			r, err := rawRequest(t, n.Socket, request("PUT", "/v1/topics/t/keys/k", "v"), nil)
			stalled.Close()
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if r.status != 200 {
				seen.check(t, "a PUT while another body has the budget", r, client.CodeBusy)
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("PUTs still stored 5s after stalled bodies took the budget")
			}
		}
		n.Stop()
	})

	run("too many cursors", func(t *testing.T) {
		n := StartNode(t, bins, NodeOptions{Name: "cursors", Args: append([]string{"--max-cursors", "1"}, smallNode...)})
		if r := httpDo(t, n, "POST", "/v1/cursors/one", strings.NewReader(`{"topic":"t","offset":0}`)); r.status != 200 {
			t.Fatalf("the first cursor: %d %s", r.status, r.body)
		}
		r := httpDo(t, n, "POST", "/v1/cursors/two", strings.NewReader(`{"topic":"t","offset":0}`))
		seen.check(t, "a cursor past --max-cursors", r, client.CodeTooMany)
	})

	run("store_full", func(t *testing.T) {
		// A log bounded at two 64 KiB segments that refuses writes when full.
		n := StartNode(t, bins, NodeOptions{Name: "full", Args: []string{
			"--segment-size", "64KiB", "--max-value-size", "8KiB", "--retention-bytes", "128KiB", "--when-full", "refuse",
		}})
		value := []byte(strings.Repeat("f", 8000))
		var acked int
		for ; acked < 100; acked++ {
			r := httpDo(t, n, "PUT", fmt.Sprintf("/v1/topics/t/keys/k%d", acked), strings.NewReader(string(value)))
			if r.status != 200 {
				seen.check(t, "PUT to a full store", r, client.CodeStoreFull)
				// The message names the flags, not the store's Go fields.
				if m := r.message(); !strings.Contains(m, "--retention-bytes") || strings.Contains(m, "RetentionBytes") {
					t.Fatalf("store_full message %q: want it to name --retention-bytes", m)
				}
				break
			}
		}
		if acked == 0 || acked == 100 {
			t.Fatalf("%d writes acknowledged before store_full", acked)
		}
		for i := range acked {
			if v, err := n.Client.Get(ctx(t), "t", fmt.Sprintf("k%d", i)); err != nil || len(v.Bytes) != len(value) {
				t.Fatalf("k%d after store_full: %v", i, err)
			}
		}
		t.Logf("%d values of 8000 bytes acknowledged, then store_full", acked)
		n.Stop()
	})

	run("disk_full", func(t *testing.T) {
		mnt, _ := testkit.Tmpfs(t, "6m") // unmounted after the node's cleanup
		n := StartNode(t, bins, NodeOptions{Name: "diskfull", DataDir: filepath.Join(mnt, "data"),
			Args: []string{"--segment-size", "1MiB", "--max-value-size", "64KiB"}})
		value := strings.Repeat("d", 30000)
		var acked int
		for ; acked < 300; acked++ {
			r := httpDo(t, n, "PUT", fmt.Sprintf("/v1/topics/t/keys/k%d", acked), strings.NewReader(value))
			if r.status != 200 {
				seen.check(t, "PUT to a full disk", r, client.CodeDiskFull)
				break
			}
		}
		if acked == 0 || acked == 300 {
			t.Fatalf("%d writes acknowledged before disk_full; want some, on a 6 MiB file system", acked)
		}
		t.Logf("%d values of 30000 bytes acknowledged, then disk_full", acked)
		for i := range acked {
			if v, err := n.Client.Get(ctx(t), "t", fmt.Sprintf("k%d", i)); err != nil || string(v.Bytes) != value {
				t.Fatalf("k%d after disk_full: %v", i, err)
			}
		}
		// Room again: writing goes on, and a clean stop keeps everything.
		if out, err := exec.Command("mount", "-o", "remount,size=64m", mnt).CombinedOutput(); err != nil {
			t.Fatalf("remount: %v: %s", err, out)
		}
		if _, err := n.Client.Publish(ctx(t), "t", "after", []byte("room again"), ""); err != nil {
			t.Fatalf("publish once the disk has room: %v", err)
		}
		n.Restart()
		for i := range acked {
			if v, err := n.Client.Get(ctx(t), "t", fmt.Sprintf("k%d", i)); err != nil || string(v.Bytes) != value {
				t.Fatalf("k%d after the restart: %v", i, err)
			}
		}
		n.Stop()
	})

	run("internal", func(t *testing.T) {
		// An I/O error under the log's map: the segment file is truncated
		// behind the daemon's back, so its pages fault. The daemon must
		// answer 500 internal, not crash.
		n := StartNode(t, bins, NodeOptions{Name: "ioerr", Args: smallNode})
		if _, err := n.Client.Publish(ctx(t), "t", "a", []byte("before"), ""); err != nil {
			t.Fatal(err)
		}
		// The preparer allocates the next segment in the same file: once it
		// has (it maps it last: two segments mapped), nothing extends the
		// file again under the truncation (a window is the whole 1 MiB
		// segment, so the writer's was allocated whole at its start). An
		// allocation after it would make a hole of the truncation, which
		// reads as zeros, not as a fault (store's truncateUnderMap).
		testkit.Until(t, 20*time.Second, "the next segment made ready", func() string {
			st, err := n.Client.Status(ctx(t))
			if err != nil {
				return err.Error()
			}
			if st.Store.MappedSegments < 2 {
				return fmt.Sprintf("%d segments mapped", st.Store.MappedSegments)
			}
			return ""
		})
		seg := filepath.Join(n.DataDir, "log", fmt.Sprintf("%020d", 0))
		if err := os.Truncate(seg, 0); err != nil {
			t.Fatal(err)
		}
		r := httpDo(t, n, "PUT", "/v1/topics/t/keys/b", strings.NewReader("after"))
		seen.check(t, "PUT over a truncated segment", r, client.CodeInternal)
		if _, err := n.Client.Status(ctx(t)); err != nil || !n.Running() {
			t.Fatalf("after the I/O error: %v (running: %v)", err, n.Running())
		}
		n.Kill() // its log is damaged on purpose
	})

	run("unavailable", func(t *testing.T) {
		// A device that fails under the store: an ext4 file system on a
		// loop device whose backing file lives on a 6 MiB tmpfs. Once the
		// tmpfs is full, writeback fails with EIO, the store's flush fails,
		// and /healthz and /readyz answer 503 unavailable (systemd's
		// watchdog pings stop on the same check).
		dir := failingDevice(t, 6<<20, 64<<20)
		n := StartNode(t, bins, NodeOptions{Name: "eio", DataDir: filepath.Join(dir, "data"),
			Args: []string{"--segment-size", "4MiB", "--max-value-size", "64KiB", "--flush-interval", "20ms"}})
		value := strings.Repeat("u", 60000)
		var r response
		for i := 0; i < 400; i++ {
			// Writes may fail too once the device is gone; what matters
			// here is the health check.
			_ = httpDo(t, n, "PUT", fmt.Sprintf("/v1/topics/t/keys/k%d", i), strings.NewReader(value))
			if r = httpDo(t, n, "GET", "/healthz", nil); r.status != 200 {
				break
			}
			time.Sleep(time.Millisecond) // let the flusher run
		}
		seen.check(t, "GET /healthz on a failed device", r, client.CodeUnavailable)
		t.Logf("healthz: %s", r.message())
		r = httpDo(t, n, "GET", "/readyz", nil)
		seen.check(t, "GET /readyz on a failed device", r, client.CodeUnavailable)
		if _, err := n.Client.Status(ctx(t)); err != nil {
			t.Fatalf("status on a failed device: %v", err)
		}
		n.Kill()
	})

	run("catching_up", func(t *testing.T) {
		// A node told to join a seed that takes the connection and never
		// answers is in its first join for the whole --join-timeout: its
		// reads and /readyz answer catching_up meanwhile, never not_found.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan []net.Conn, 1)
		go func() {
			var held []net.Conn
			for {
				c, err := ln.Accept()
				if err != nil {
					accepted <- held
					return
				}
				held = append(held, c)
			}
		}()
		n := NewNode(t, bins, NodeOptions{Name: "joining", Args: []string{"--gossip-addr", "127.0.0.1:0",
			"--data-addr", "127.0.0.1:0", "--join", ln.Addr().String(), "--join-timeout", "1m"}})
		if err := n.StartProcess(); err != nil {
			t.Fatal(err)
		}
		var r response
		testkit.Eventually(t, 15*time.Second, "the joining node to answer", func() bool {
			if _, err := os.Stat(n.Socket); err != nil {
				return false
			}
			r = httpDo(t, n, "GET", "/v1/topics/t/keys/known", nil)
			return true
		})
		seen.check(t, "GET of a key while joining", r, client.CodeCatchingUp)
		if r.header.Get("Retry-After") != "1" || !strings.Contains(string(r.body), `"catch_up":{"phase":"joining"`) {
			t.Fatalf("catching_up answer: %v %s", r.header, r.body)
		}
		seen.check(t, "GET /readyz while joining", httpDo(t, n, "GET", "/readyz", nil), client.CodeCatchingUp)
		seen.check(t, "list of keys while joining", httpDo(t, n, "GET", "/v1/topics/t/keys", nil), client.CodeCatchingUp)
		if r := httpDo(t, n, "PUT", "/v1/topics/t/keys/k", strings.NewReader("v")); r.status != 200 {
			t.Fatalf("a write while joining: %d %s", r.status, r.body)
		}
		n.Kill()
		ln.Close()
		for _, c := range <-accepted {
			c.Close()
		}
	})

	// The daemon that served the table still holds its data.
	if v, err := c.Get(ctx(t), "t", "known"); err != nil || string(v.Bytes) != "original" {
		t.Fatalf("known key at the end: %q %v", v.Bytes, err)
	}
	if ran < subtests {
		return
	}
	for code := range statusOfCode {
		// fleet_too_old needs a member of an older build: TestFleetTooOldProcess.
		if !seen[code] && code != client.CodeFleetTooOld {
			t.Errorf("error code %s was never produced", code)
		}
	}
}

// failingDevice makes a file system that fails with I/O errors once about
// room bytes were written to it: ext4 on a loop device whose sparse backing
// file of size bytes lives on a tmpfs of room bytes. It returns the mount
// point; everything is undone when the test ends (after the test's nodes
// are killed, since cleanups run last-in first-out). It needs root,
// losetup and mkfs.ext4.
func failingDevice(t *testing.T, room, size int64) string {
	t.Helper()
	testkit.NeedRoot(t, "a failing device (mount, losetup)")
	sh := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	back, mnt := t.TempDir(), t.TempDir()
	sh("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", room), "tmpfs", back)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", back).Run() })
	img := filepath.Join(back, "img")
	sh("truncate", "-s", fmt.Sprint(size), img)
	loop := sh("losetup", "--find", "--show", img)
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })
	sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", loop)
	sh("mount", loop, mnt)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt
}
