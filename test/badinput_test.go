package test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
)

// TestBadInputs sends a table of bad requests to a real cachecastd over
// its socket. Each gets its clear error (or, for a client that never
// finishes its headers, a closed connection); afterwards the daemon still
// serves, and its data is unchanged, also after a restart: nothing of a
// rejected request was written. The daemon package has the long table
// in-process; this one proves the binary.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "bad", Args: append([]string{
		"--max-body-size", "64KiB", "--read-header-timeout", "300ms", "--read-timeout", "500ms",
	}, append(smallNode, "--max-value-size", "1KiB")...)})
	c := n.Client
	if _, err := c.Publish(ctx(t), "t", "known", []byte("original"), "eu"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetCursor(ctx(t), "cur", "t", 1); err != nil {
		t.Fatal(err)
	}
	before := snapshotOf(t, c)

	big := strings.Repeat("x", 1<<10+1)
	good := `{"key":"known","value":"overwritten"}`
	ndjson := func(lines ...string) string { return strings.Join(lines, "\n") + "\n" }
	const nd = "Content-Type: application/x-ndjson"
	stall := func(d time.Duration) func(*net.UnixConn) {
		return func(*net.UnixConn) { time.Sleep(d) }
	}
	halfClose := func(c *net.UnixConn) { _ = c.CloseWrite() }

	tests := []struct {
		name   string
		raw    string
		mid    func(*net.UnixConn)
		status int    // 0: the connection is closed without an answer
		code   string // "": a plain net/http answer, not JSON
	}{
		{name: "malformed json", raw: request("POST", "/v1/topics/t/messages", `{"key":"known","value":`), status: 400, code: "bad_json"},
		{name: "json with an unknown field", raw: request("POST", "/v1/topics/t/messages", `{"key":"known","valu":"x"}`), status: 400, code: "bad_json"},
		{name: "json array", raw: request("POST", "/v1/topics/t/messages", `[`+good+`]`), status: 400, code: "bad_json"},
		{name: "ndjson: good line, then malformed", raw: request("POST", "/v1/topics/t/messages", ndjson(good, `{"key":"x",}`), nd), status: 400, code: "bad_json"},
		{name: "ndjson: oversize value on line 2", raw: request("POST", "/v1/topics/t/messages", ndjson(good, `{"key":"x","value":"`+big+`"}`), nd), status: 413, code: "value_too_large"},
		{name: "ndjson: bad base64 on line 3", raw: request("POST", "/v1/topics/t/messages", ndjson(good, good, `{"key":"x","value_base64":"!!"}`), nd), status: 400, code: "bad_base64"},
		{name: "ndjson: a key that is not UTF-8 on line 2", raw: request("POST", "/v1/topics/t/messages", ndjson(good, "{\"key\":\"z\xc3\",\"value\":\"x\"}"), nd), status: 400, code: "bad_json"},
		{name: "a value that is not UTF-8", raw: request("POST", "/v1/topics/t/messages", "{\"key\":\"known\",\"value\":\"\xff\xfe\"}"), status: 400, code: "bad_json"},
		{name: "bad base64", raw: request("POST", "/v1/topics/t/messages", `{"key":"known","value_base64":"b3Zlcndy=dHRlbg"}`), status: 400, code: "bad_base64"},
		{name: "oversize value", raw: request("PUT", "/v1/topics/t/keys/known", big), status: 413, code: "value_too_large"},
		{name: "oversize value, chunked",
			raw:    "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big),
			status: 413, code: "value_too_large"},
		{name: "oversize body announced, not sent", raw: "POST /v1/topics/t/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n", status: 413, code: "body_too_large"},
		{name: "oversize key", raw: request("PUT", "/v1/topics/t/keys/"+strings.Repeat("k", 1025), "v"), status: 400, code: "invalid_name"},
		{name: "oversize key in json", raw: request("POST", "/v1/topics/t/messages", `{"key":"`+strings.Repeat("k", 1025)+`"}`), status: 400, code: "invalid_name"},
		{name: "control character in a key", raw: request("PUT", "/v1/topics/t/keys/a%0Ab", "v"), status: 400, code: "invalid_name"},
		{name: "topic with a space", raw: request("PUT", "/v1/topics/a%20b/keys/k", "v"), status: 400, code: "invalid_name"},
		{name: "topic with a slash", raw: request("PUT", "/v1/topics/a%2Fb/keys/k", "v"), status: 400, code: "invalid_name"},
		{name: "topic of 129 bytes", raw: request("POST", "/v1/topics/"+strings.Repeat("t", 129)+"/messages", good), status: 400, code: "invalid_name"},
		{name: "topic of non-ASCII", raw: request("GET", "/v1/topics/pr%C3%AFces/keys", ""), status: 400, code: "invalid_name"},
		{name: "bad tag", raw: request("PUT", "/v1/topics/t/keys/known", "v", "Cachecast-Tag: a|b"), status: 400, code: "invalid_name"},
		{name: "unknown route", raw: request("GET", "/v1/nothing", ""), status: 404, code: "route_not_found"},
		{name: "unknown route under a topic", raw: request("PUT", "/v1/topics/t/values/known", "v"), status: 404, code: "route_not_found"},
		{name: "unknown method on a key", raw: request("POST", "/v1/topics/t/keys/known", "v"), status: 405, code: "method_not_allowed"},
		{name: "unknown method on messages", raw: request("GET", "/v1/topics/t/messages", ""), status: 405, code: "method_not_allowed"},
		{name: "not HTTP", raw: "HELLO THERE\r\n\r\n", status: 400, code: ""},
		{name: "body cut short", raw: "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\noverwr", mid: halfClose, status: 400, code: "bad_request"},
		{name: "ndjson cut short", raw: "POST /v1/topics/t/messages HTTP/1.1\r\nHost: x\r\n" + nd + "\r\nContent-Length: 200\r\n\r\n" + good + "\n{\"ke", mid: halfClose, status: 400, code: "bad_request"},
		{name: "client stalls in the body", raw: "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\noverwr", mid: stall(700 * time.Millisecond), status: 408, code: "timeout"},
		{name: "client stalls in the headers", raw: "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\n", mid: stall(500 * time.Millisecond), status: 0},
		{name: "client says nothing", raw: "", mid: stall(500 * time.Millisecond), status: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := rawRequest(t, n.Socket, tt.raw, tt.mid)
			switch {
			case tt.status == 0:
				var ne net.Error
				if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) && !ne.Timeout()) {
					t.Fatalf("got %d %s, %v; want the connection closed", r.status, r.body, err)
				}
			case err != nil:
				t.Fatalf("no answer: %v", err)
			case r.status != tt.status || r.code() != tt.code:
				t.Fatalf("got %d %s; want %d %s", r.status, r.body, tt.status, tt.code)
			case tt.code != "" && (r.header.Get("Content-Type") != "application/json" || r.message() == ""):
				t.Fatalf("an error without its JSON body: %v %s", r.header, r.body)
			}
			checkUnharmed(t, n, before)
		})
	}

	t.Run("subscriber that stops reading", func(t *testing.T) {
		// A stream that nobody reads fills the socket buffers; the daemon
		// must go on publishing and serving everyone else.
		conn, err := net.Dial("unix", n.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, "GET /v1/topics/flood/subscribe?from=earliest HTTP/1.1\r\nHost: x\r\n\r\n")
		value := []byte(strings.Repeat("f", 1000))
		start := time.Now()
		for b := range 40 {
			msgs := make([]client.Message, 50)
			for i := range msgs {
				msgs[i] = client.Message{Key: fmt.Sprintf("f-%d-%d", b, i), Value: value}
			}
			if _, err := c.PublishBatch(ctx(t), "flood", msgs); err != nil {
				t.Fatalf("publishing with a stalled subscriber: %v", err)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("2,000 messages of 1000 bytes took %v with a stalled subscriber", took)
		}
		// Another subscriber gets everything at once.
		sub, err := c.Subscribe(ctx(t), "flood", client.SubscribeOptions{From: client.FromEarliest})
		if err != nil {
			t.Fatal(err)
		}
		readEvents(t, sub, 2000)
		sub.Close()
		if _, err := c.Get(ctx(t), "t", "known"); err != nil {
			t.Fatal(err)
		}
	})

	// Nothing of the rejected requests reached the disk either.
	n.Restart()
	st := snapshotOf(t, c)
	if st.origin != before.origin || st.keys != before.keys+2000 {
		t.Fatalf("after the restart: %+v; before the flood: %+v", st, before)
	}
	if v, err := c.Get(ctx(t), "t", "known"); err != nil || string(v.Bytes) != "original" || v.Tag != "eu" {
		t.Fatalf("known after the restart: %q %v", v.Bytes, err)
	}
	if cur, err := c.GetCursor(ctx(t), "cur"); err != nil || cur.Offset != 1 {
		t.Fatalf("cursor after the restart: %+v %v", cur, err)
	}
}

// checkUnharmed checks that the daemon serves and holds what it held.
func checkUnharmed(t *testing.T, n *Node, before stateSummary) {
	t.Helper()
	c := n.Client
	if v, err := c.Get(ctx(t), "t", "known"); err != nil || string(v.Bytes) != "original" || v.Tag != "eu" {
		t.Fatalf("known key after the bad request: %q %v", v.Bytes, err)
	}
	if st := snapshotOf(t, c); st != before {
		t.Fatalf("state after the bad request: %+v; before: %+v", st, before)
	}
	if cur, err := c.GetCursor(ctx(t), "cur"); err != nil || cur.Offset != 1 {
		t.Fatalf("cursor after the bad request: %+v %v", cur, err)
	}
	if err := c.Readyz(ctx(t)); err != nil {
		t.Fatalf("not ready after the bad request: %v", err)
	}
}
