package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/client"
)

// ctx is a context for one test's calls: bounded, so that a hung daemon
// fails the test instead of hanging it. The bound is no margin: many tests
// hold one ctx for all their calls, and side by side with the other
// parallel tests, under -race on two loaded cores, such a test took 34 s.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// response is an HTTP answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

// code is the "code" of a JSON error body, "" if there is none.
func (r response) code() string {
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// message is the "message" of a JSON error body, "" if there is none.
func (r response) message() string {
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Message
}

// httpDo sends one request over the node's socket with net/http and reads
// the whole answer. header holds name, value pairs.
func httpDo(t *testing.T, n *Node, method, path string, body io.Reader, header ...string) response {
	t.Helper()
	hc := testkit.UnixClient(n.Socket, false, 10*time.Second)
	req, err := http.NewRequest(method, "http://cachecast"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return response{res.StatusCode, res.Header, b}
}

// rawRequest writes raw bytes on a new connection to sock, runs mid (to
// stall, or to half-close) if set, then reads one answer. An error means no
// answer came (the daemon closed the connection, or 10s passed).
func rawRequest(t *testing.T, sock, raw string, mid func(c *net.UnixConn)) (response, error) {
	t.Helper()
	res, b, err := testkit.RawHTTP(t, sock, raw, mid)
	if err != nil {
		return response{}, err
	}
	return response{res.StatusCode, res.Header, b}, nil
}

// requestAs sends one request as the user uid (its group the same number,
// no supplementary groups): curl under setpriv, so that the daemon reads
// that user's credentials off the socket. It needs root.
func requestAs(t *testing.T, uid int, sock, method, path, body string) response {
	t.Helper()
	testkit.NeedRoot(t, "a request as another uid (setpriv)")
	id := strconv.Itoa(uid)
	args := []string{"--reuid=" + id, "--regid=" + id, "--clear-groups",
		"curl", "-sS", "-i", "--max-time", "10", "--unix-socket", sock, "-X", method}
	if body != "" {
		args = append(args, "--data-binary", body)
	}
	out, err := exec.Command("setpriv", append(args, "http://cachecast"+path)...).Output()
	if err != nil {
		t.Fatalf("%s %s as uid %d: %v: %s", method, path, uid, err, out)
	}
	r, err := readResponseFrom(bufio.NewReader(bytes.NewReader(out)))
	if err != nil {
		t.Fatalf("%s %s as uid %d: %v: %s", method, path, uid, err, out)
	}
	return r
}

// readResponseFrom reads one answer from br.
func readResponseFrom(br *bufio.Reader) (response, error) {
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return response{}, err
	}
	return response{res.StatusCode, res.Header, b}, nil
}

// request renders an HTTP/1.1 request with a Content-Length that closes
// its connection; header lines are "Name: value".
func request(method, path, body string, header ...string) string {
	var b strings.Builder
	b.WriteString(method + " " + path + " HTTP/1.1\r\nHost: cachecast\r\n")
	if body != "" || method == "PUT" || method == "POST" {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.WriteString(body)
	return b.String()
}

// apiCode is the stable code of an *client.APIError, "" for other errors.
func apiCode(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// readEvents reads n events from sub, failing the test if they do not
// come within the context of sub.
func readEvents(t *testing.T, sub *client.Subscription, n int) []client.Event {
	t.Helper()
	evs := make([]client.Event, 0, n)
	for len(evs) < n {
		ev, err := sub.Next()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(evs), n, err)
		}
		evs = append(evs, ev)
	}
	return evs
}
