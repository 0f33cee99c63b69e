package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/wire"
)

// A table of bad requests over the real socket. Each gets its status and
// code, and afterwards the daemon still serves and its data is unchanged:
// nothing of a rejected request is written.
func TestBadInputs(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxValueSize = 1 << 10
	cfg.MaxBodySize = 64 << 10
	cfg.ReadHeaderTimeout = 300 * time.Millisecond
	cfg.ReadTimeout = 500 * time.Millisecond
	td := startDaemon(t, cfg)
	td.put("t", "known", "original")
	td.do("POST", "/v1/cursors/c", strings.NewReader(`{"topic":"t","offset":1}`))

	big := strings.Repeat("x", 1<<10+1)
	ndjson := func(lines ...string) string { return strings.Join(lines, "\n") + "\n" }
	good := `{"key":"known","value":"overwritten!"}`

	// req builds a raw HTTP/1.1 request with a Content-Length.
	req := func(method, path, body string, headers ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: cachecast\r\nContent-Length: %d\r\n", method, path, len(body))
		for _, h := range headers {
			b.WriteString(h + "\r\n")
		}
		b.WriteString("Connection: close\r\n\r\n")
		b.WriteString(body)
		return b.String()
	}

	tests := []struct {
		name   string
		raw    string
		mid    func(c *net.UnixConn) // between writing and reading
		status int
		code   string // "" with status 0: the server closes without an answer
		allow  string
	}{
		{name: "malformed json", raw: req("POST", "/v1/topics/t/messages", `{"key":`), status: 400, code: "bad_json"},
		{name: "json not an object", raw: req("POST", "/v1/topics/t/messages", `"hello"`), status: 400, code: "bad_json"},
		{name: "json unknown field", raw: req("POST", "/v1/topics/t/messages", `{"key":"known","vaule":"x"}`), status: 400, code: "bad_json"},
		{name: "two objects as json", raw: req("POST", "/v1/topics/t/messages", good+"\n"+good), status: 400, code: "bad_json"},
		{name: "malformed ndjson line after a good one",
			raw:    req("POST", "/v1/topics/t/messages", ndjson(good, `{"key":"x",}`), "Content-Type: application/x-ndjson"),
			status: 400, code: "bad_json"},
		{name: "ndjson oversize value on line 2",
			raw:    req("POST", "/v1/topics/t/messages", ndjson(good, `{"key":"x","value":"`+big+`"}`), "Content-Type: application/x-ndjson"),
			status: 413, code: "value_too_large"},
		{name: "ndjson bad base64 on line 2",
			raw:    req("POST", "/v1/topics/t/messages", ndjson(good, `{"key":"x","value_base64":"***"}`), "Content-Type: application/x-ndjson"),
			status: 400, code: "bad_base64"},
		{name: "ndjson invalid UTF-8 key on line 2",
			raw:    req("POST", "/v1/topics/t/messages", ndjson(good, "{\"key\":\"z\xc3\",\"value\":\"x\"}"), "Content-Type: application/x-ndjson"),
			status: 400, code: "bad_json"},
		{name: "invalid UTF-8 value", raw: req("POST", "/v1/topics/t/messages", "{\"key\":\"known\",\"value\":\"\xff\xfe\"}"), status: 400, code: "bad_json"},
		{name: "lone surrogate in a key", raw: req("POST", "/v1/topics/t/messages", `{"key":"known\ud800","value":"x"}`), status: 400, code: "bad_json"},
		{name: "invalid UTF-8 in a cursor body", raw: req("POST", "/v1/cursors/c", "{\"topic\":\"t\xff\",\"offset\":0}"), status: 400, code: "bad_json"},
		{name: "invalid UTF-8 in an ack body", raw: req("POST", "/v1/topics/t/groups/g/ack", "{\"ack\":[\"\xff\"]}"), status: 400, code: "bad_json"},
		{name: "value and value_base64", raw: req("POST", "/v1/topics/t/messages", `{"key":"known","value":"a","value_base64":"YQ=="}`), status: 400, code: "bad_request"},
		{name: "empty ndjson batch", raw: req("POST", "/v1/topics/t/messages", "\n\n", "Content-Type: application/x-ndjson"), status: 400, code: "bad_request"},
		{name: "bad content type", raw: req("POST", "/v1/topics/t/messages", good, "Content-Type: ;;;"), status: 400, code: "bad_request"},
		{name: "oversize value put", raw: req("PUT", "/v1/topics/t/keys/known", big), status: 413, code: "value_too_large"},
		{name: "oversize value chunked put",
			raw:    "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big),
			status: 413, code: "value_too_large"},
		{name: "declared oversize body, not sent",
			raw:    "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n",
			status: 413, code: "value_too_large"},
		{name: "oversize body", raw: req("POST", "/v1/topics/t/messages", ndjson(strings.Repeat(good+"\n", 2000)), "Content-Type: application/x-ndjson"), status: 413, code: "body_too_large"},
		{name: "oversize key", raw: req("PUT", "/v1/topics/t/keys/"+strings.Repeat("k", 1025), "v"), status: 400, code: "invalid_name"},
		{name: "oversize key in a batch", raw: req("POST", "/v1/topics/t/messages", `{"key":"`+strings.Repeat("k", 1025)+`"}`), status: 400, code: "invalid_name"},
		{name: "control char in key", raw: req("PUT", "/v1/topics/t/keys/a%00b", "v"), status: 400, code: "invalid_name"},
		{name: "empty key", raw: req("PUT", "/v1/topics/t/keys/", "v"), status: 400, code: "invalid_name"},
		{name: "topic with a space", raw: req("PUT", "/v1/topics/bad%20topic/keys/k", "v"), status: 400, code: "invalid_name"},
		{name: "topic with a slash", raw: req("PUT", "/v1/topics/a%2Fb/keys/k", "v"), status: 400, code: "invalid_name"},
		{name: "empty topic", raw: req("PUT", "/v1/topics//keys/k", "v"), status: 400, code: "invalid_name"},
		{name: "topic too long", raw: req("POST", "/v1/topics/"+strings.Repeat("t", 129)+"/messages", good), status: 400, code: "invalid_name"},
		{name: "bad tag header", raw: req("PUT", "/v1/topics/t/keys/known", "v", "Cachecast-Tag: a b"), status: 400, code: "invalid_name"},
		{name: "two tag headers", raw: req("PUT", "/v1/topics/t/keys/known", "v", "Cachecast-Tag: eu", "Cachecast-Tag: us"), status: 400, code: "bad_request"},
		{name: "gzip value", raw: req("PUT", "/v1/topics/t/keys/known", "\x1f\x8b\x08\x00", "Content-Encoding: gzip"), status: 415, code: "unsupported_encoding"},
		{name: "gzip batch", raw: req("POST", "/v1/topics/t/messages", good, "Content-Encoding: gzip"), status: 415, code: "unsupported_encoding"},
		{name: "identity then gzip", raw: req("POST", "/v1/topics/t/messages", good, "Content-Encoding: identity, gzip"), status: 415, code: "unsupported_encoding"},
		{name: "br cursor body", raw: req("POST", "/v1/cursors/c", `{"topic":"t","offset":0}`, "Content-Encoding: br"), status: 415, code: "unsupported_encoding"},
		{name: "bad tag in a batch", raw: req("POST", "/v1/topics/t/messages", `{"key":"known","tag":"x|y","value":"v"}`), status: 400, code: "invalid_name"},
		{name: "delete bad key", raw: req("DELETE", "/v1/topics/t/keys/%7F", ""), status: 400, code: "invalid_name"},
		{name: "bad cursor name", raw: req("POST", "/v1/cursors/bad%20name", `{"topic":"t","offset":0}`), status: 400, code: "invalid_name"},
		{name: "unknown route", raw: req("GET", "/v2/topics", ""), status: 404, code: "route_not_found"},
		{name: "unknown route under v1", raw: req("GET", "/v1/topics/t/nothing", ""), status: 404, code: "route_not_found"},
		{name: "trailing slash", raw: req("GET", "/v1/topics/", ""), status: 404, code: "route_not_found"},
		{name: "unknown method on a key", raw: req("PATCH", "/v1/topics/t/keys/known", "v"), status: 405, code: "method_not_allowed", allow: "DELETE, GET, HEAD, PUT"},
		{name: "post to topics", raw: req("POST", "/v1/topics", good), status: 405, code: "method_not_allowed", allow: "GET, HEAD"},
		{name: "put to messages", raw: req("PUT", "/v1/topics/t/messages", good), status: 405, code: "method_not_allowed", allow: "POST"},
		{name: "patch a cursor", raw: req("PATCH", "/v1/cursors/c", ""), status: 405, code: "method_not_allowed", allow: "DELETE, GET, HEAD, POST"},
		{name: "limit zero", raw: req("GET", "/v1/topics/t/keys?limit=0", ""), status: 400, code: "bad_request"},
		{name: "limit too large", raw: req("GET", "/v1/topics/t/keys?limit=10001", ""), status: 400, code: "bad_request"},
		{name: "limit not a number", raw: req("GET", "/v1/topics/t/keys?limit=ten", ""), status: 400, code: "bad_request"},
		{name: "malformed query", raw: req("GET", "/v1/topics/t/keys?limit=%zz", ""), status: 400, code: "bad_request"},
		{name: "subscribe bad from", raw: req("GET", "/v1/topics/t/subscribe?from=yesterday", ""), status: 400, code: "bad_request"},
		{name: "subscribe from beyond the end", raw: req("GET", "/v1/topics/t/subscribe?from=2", ""), status: 400, code: "bad_request"},
		{name: "subscribe from beyond an unknown topic's end", raw: req("GET", "/v1/topics/never/subscribe?from=1", ""), status: 400, code: "bad_request"},
		{name: "subscribe ack=auto without name", raw: req("GET", "/v1/topics/t/subscribe?ack=auto", ""), status: 400, code: "bad_request"},
		{name: "subscribe bad ack", raw: req("GET", "/v1/topics/t/subscribe?name=c&ack=sometimes", ""), status: 400, code: "bad_request"},
		{name: "subscribe bad tags", raw: req("GET", "/v1/topics/t/subscribe?tags=a||", ""), status: 400, code: "invalid_name"},
		{name: "subscribe bad cursor name", raw: req("GET", "/v1/topics/t/subscribe?name=a/b", ""), status: 400, code: "invalid_name"},
		{name: "get absent key", raw: req("GET", "/v1/topics/t/keys/absent", ""), status: 404, code: "not_found"},
		{name: "get absent cursor", raw: req("GET", "/v1/cursors/absent", ""), status: 404, code: "not_found"},
		{
			name: "body cut short",
			raw:  "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
			mid: func(c *net.UnixConn) {
				_ = c.CloseWrite()
			},
			status: 400, code: "bad_request",
		},
		{
			name: "chunked body cut short",
			raw:  "POST /v1/topics/t/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n{\"key\":\"known\"",
			mid: func(c *net.UnixConn) {
				_ = c.CloseWrite()
			},
			status: 400, code: "bad_request",
		},
		{
			name: "client stalls in the body",
			raw:  "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
			mid: func(*net.UnixConn) {
				time.Sleep(cfg.ReadTimeout + 200*time.Millisecond)
			},
			status: 408, code: "timeout",
		},
		{
			name: "client stalls in the headers",
			raw:  "PUT /v1/topics/t/keys/known HTTP/1.1\r\nHost: x\r\n",
			mid: func(*net.UnixConn) {
				time.Sleep(cfg.ReadHeaderTimeout + 200*time.Millisecond)
			},
			status: 0, // closed without an answer
		},
	}

	topicsBefore := td.do("GET", "/v1/topics", nil).body
	recordsBefore := td.d.Store().Stats().Records
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := rawRequest(t, cfg.Socket, tt.raw, tt.mid)
			if tt.status == 0 {
				if err == nil {
					t.Fatalf("got %d %s; want the connection closed", r.status, r.body)
				}
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					var ne net.Error
					if !errors.As(err, &ne) {
						t.Fatalf("read: %v; want the connection closed", err)
					}
				}
			} else {
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				if r.status != tt.status || r.errCode() != tt.code {
					t.Fatalf("got %d %s; want %d %s", r.status, r.body, tt.status, tt.code)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Fatalf("Content-Type %q", ct)
				}
				if tt.allow != "" && r.header.Get("Allow") != tt.allow {
					t.Fatalf("Allow %q; want %q", r.header.Get("Allow"), tt.allow)
				}
			}

			// The daemon still serves, and nothing changed.
			if r := td.do("GET", "/v1/topics/t/keys/known", nil); r.status != 200 || string(r.body) != "original" {
				t.Fatalf("known key after the bad request: %d %q", r.status, r.body)
			}
			if got := td.d.Store().Stats().Records; got != recordsBefore {
				t.Fatalf("records %d; want %d: a rejected request wrote", got, recordsBefore)
			}
			if got := td.do("GET", "/v1/topics", nil).body; string(got) != string(topicsBefore) {
				t.Fatalf("topics changed: %s; was %s", got, topicsBefore)
			}
			if r := td.do("GET", "/v1/cursors/c", nil); !strings.Contains(string(r.body), `"offset":1`) {
				t.Fatalf("cursor changed: %s", r.body)
			}
		})
	}
	// Every error was counted under its code.
	var total float64
	for _, code := range wire.Codes {
		total += testutilCounter(t, td, code)
	}
	if want := float64(len(tests) - 1); total < want {
		t.Fatalf("%v errors counted; want at least %v", total, want)
	}
}

// The repro: two keys that differ only in an invalid UTF-8 byte
// were both answered ok and stored as the one key "z\ufffd", and a value
// of bytes ff fe was stored as ef bf bd ef bf bd. Now the whole batch is
// refused with an error that names the line, the field and value_base64,
// nothing is stored, and value_base64 stores the bytes as sent.
func TestPublishRefusesInvalidUTF8(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	tests := []struct {
		name, body, ctype, want string
	}{
		{"keys that would merge", "{\"key\":\"z\xc3\",\"value\":\"x\"}\n{\"key\":\"z\xc4\",\"value\":\"y\"}\n", "application/x-ndjson",
			`line 1: field "key": invalid UTF-8 (byte 0xc3) at byte 9`},
		{"good line, then a binary value", "{\"key\":\"g0\",\"value\":\"v\"}\n{\"key\":\"g1\",\"value\":\"\xff\xfe\"}\n", "application/x-ndjson",
			`line 2: field "value": invalid UTF-8 (byte 0xff)`},
		{"binary value in a JSON body", "{\"key\":\"g1\",\"value\":\"\xff\xfe\"}", "application/json",
			`field "value": invalid UTF-8 (byte 0xff)`},
		{"half a surrogate pair", `{"key":"z\udc00","value":"x"}`, "application/json",
			`field "key": the escape \udc00 is half a UTF-16 surrogate pair`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := td.do("POST", "/v1/topics/nd/messages", strings.NewReader(tt.body), "Content-Type", tt.ctype)
			var e struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(r.body, &e)
			if r.status != 400 || e.Error.Code != wire.CodeBadJSON || !strings.Contains(e.Error.Message, tt.want) ||
				!strings.Contains(e.Error.Message, `"value_base64"`) {
				t.Fatalf("got %d %s; want 400 bad_json naming %q and value_base64", r.status, r.body, tt.want)
			}
			if keys := td.d.Store().Keys("nd", "", "", 10); len(keys) != 0 {
				t.Fatalf("keys %q stored by a refused batch", keys)
			}
		})
	}
	r := td.do("POST", "/v1/topics/nd/messages", strings.NewReader(`{"key":"g1","value_base64":"//4="}`))
	if r.status != 200 {
		t.Fatalf("value_base64: %d %s", r.status, r.body)
	}
	if got := td.do("GET", "/v1/topics/nd/keys/g1", nil); got.status != 200 || !bytes.Equal(got.body, []byte{0xff, 0xfe}) {
		t.Fatalf("GET g1: %d % x; want ff fe", got.status, got.body)
	}
}

// The messages of the small refusals say what to do, and what is allowed
// still works: Content-Encoding identity, one tag header, from= at the end
// of a topic (the next message).
func TestSmallRefusals(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	td.put("t", "k", "v")
	msg := func(r resp) string {
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(r.body, &e)
		return e.Error.Message
	}
	tests := []struct {
		name, method, path, body string
		header                   []string
		status                   int
		want                     string
	}{
		{"two tags", "PUT", "/v1/topics/t/keys/k", "v", []string{"Cachecast-Tag", "eu", "Cachecast-Tag", "us"}, 400, "Cachecast-Tag: given 2 times"},
		{"gzip", "PUT", "/v1/topics/t/keys/k", "v", []string{"Content-Encoding", "gzip"}, 415, `Content-Encoding "gzip"`},
		{"from beyond the end", "GET", "/v1/topics/t/subscribe?from=5", "", nil, 400,
			`from=5 is beyond the end of topic "t" on this node (its next offset is 1); from=latest waits for new messages`},
		{"identity", "PUT", "/v1/topics/t/keys/k", "v2", []string{"Content-Encoding", "identity"}, 200, ""},
		{"one tag", "PUT", "/v1/topics/t/keys/k", "v3", []string{"Cachecast-Tag", "eu"}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://cachecast"+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(tt.header); i += 2 {
				req.Header.Add(tt.header[i], tt.header[i+1])
			}
			res, err := td.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			r := resp{res.StatusCode, res.Header, b}
			if r.status != tt.status || !strings.Contains(msg(r), tt.want) {
				t.Fatalf("got %d %s; want %d with %q", r.status, r.body, tt.status, tt.want)
			}
		})
	}
	if got := td.do("GET", "/v1/topics/t/keys/k", nil); string(got.body) != "v3" || got.header.Get("Cachecast-Tag") != "eu" {
		t.Fatalf("k = %q tag %q; want v3 eu", got.body, got.header.Get("Cachecast-Tag"))
	}

	// from= at the end is allowed: it waits for the next message.
	end := td.d.Store().TopicEnd("t")
	sub := td.subscribe(fmt.Sprintf("t/subscribe?from=%d", end))
	defer sub.close()
	td.put("t", "k2", "next")
	if m := sub.next(); m["key"] != "k2" || m["offset"] != float64(end) {
		t.Fatalf("from=%d delivered %v; want k2 at that offset", end, m)
	}
}
