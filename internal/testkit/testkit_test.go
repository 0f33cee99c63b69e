package testkit

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if why := Poll(t, 5*time.Second, func() string {
		if n++; n < 3 {
			return "not yet"
		}
		return ""
	}); why != "" || n != 3 {
		t.Fatalf("Poll = %q after %d calls, want done after 3", why, n)
	}
	start := time.Now()
	if why := Poll(t, 50*time.Millisecond, func() string { return "never" }); why != "never" {
		t.Fatalf("Poll = %q, want the last answer", why)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("Poll gave up after %v, before its 50ms", waited)
	}
}

// TestUnixHTTP: UnixClient and RawHTTP reach a real server on a Unix socket.
func TestUnixHTTP(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Method+" "+r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	res, err := UnixClient(sock, false, 5*time.Second).Get("http://ignored/a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "GET /a" {
		t.Fatalf("UnixClient: %q", b)
	}
	res, b, err = RawHTTP(t, sock, "PUT /b HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", nil)
	if err != nil || res.StatusCode != 200 || string(b) != "PUT /b" {
		t.Fatalf("RawHTTP: %v %v %q", res, err, b)
	}
}

func TestNATS(t *testing.T) {
	ns := NATS(t, nil)
	if !strings.HasPrefix(ns.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("ClientURL %q, want loopback", ns.ClientURL())
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(ns.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
