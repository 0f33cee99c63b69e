package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// laneConn is a raw connection to the local API's socket, one request
// at a time or several written at once, each answer read whole as bytes.
type laneConn struct {
	t      *testing.T
	nc     net.Conn
	r      *bufio.Reader
	noBody bool // the answers are to HEAD requests
}

func dialLane(t *testing.T, sock string) *laneConn {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &laneConn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// send writes raw requests.
func (c *laneConn) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, raw); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads one answer, its head and its Content-Length body, as the
// bytes the daemon wrote, with the Date field's value blanked (the two
// answers compared may fall in different seconds).
func (c *laneConn) answer() string {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var head strings.Builder
	length := 0
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			c.t.Fatalf("reading an answer's head (%q so far): %v", head.String(), err)
		}
		head.WriteString(line)
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			if length, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				c.t.Fatal(err)
			}
		}
		if line == "\r\n" {
			break
		}
	}
	if c.noBody {
		length = 0
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(c.r, body); err != nil {
		c.t.Fatalf("reading an answer's body: %v", err)
	}
	return dateField.ReplaceAllString(head.String(), "Date: -\r\n") + string(body)
}

var dateField = regexp.MustCompile(`Date: [^\r]*\r\n`)

// slow is a header field the fast lane does not take: a request with it
// goes to net/http.
const slow = "X-Slow: 1\r\n"

// withSlow is raw with the slow field after its request line.
func withSlow(raw string) string {
	line, rest, _ := strings.Cut(raw, "\r\n")
	return line + "\r\n" + slow + rest
}

// TestFastLaneAnswersAsNetHTTP: every request is sent twice, on a
// connection of its own, as it is and with a header field that sends it
// to net/http; the two answers are the same bytes (the Date aside), and
// the fast lane answered exactly the requests it is for: a GET of a key
// found, in the common shape, whose tag net/http writes as it is.
func TestFastLaneAnswersAsNetHTTP(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, testConfig(t))
	later := time.Now().Add(time.Hour).UnixMilli()
	td.put("prices", "sku-1", "12.50")
	td.put("prices", "tagged", "v", "Cachecast-Tag", "eu-fr.1_x")
	td.put("prices", "eu/sku-2", "slashes")
	td.put("prices", "k/", "trailing")
	td.put("prices", "a!$&'()*+,;=:@~b", "sub-delims")
	td.put("prices", "expiring", "v", "Cachecast-Expires", strconv.FormatInt(later, 10))
	td.put("prices", "empty", "")
	td.put("prices", "binary", "\x00\xff\r\n")
	td.put("prices", "large", strings.Repeat("v", 64<<10)) // an answer past what a connection keeps
	td.put("sched", "k", "now")
	td.put("sched", "k", "later", "Cachecast-Effective-At", strconv.FormatInt(later, 10))

	get := func(path, fields string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: cachecast\r\n" + fields + "\r\n"
	}
	for _, tc := range []struct {
		name string
		raw  string
		fast bool
	}{
		{"value", get("/v1/topics/prices/keys/sku-1", ""), true},
		{"tag", get("/v1/topics/prices/keys/tagged", ""), true},
		{"key with slashes", get("/v1/topics/prices/keys/eu/sku-2", ""), true},
		{"key ending in a slash", get("/v1/topics/prices/keys/k/", ""), true},
		{"key of sub-delims", get("/v1/topics/prices/keys/a!$&'()*+,;=:@~b", ""), true},
		{"expiry", get("/v1/topics/prices/keys/expiring", ""), true},
		{"empty value", get("/v1/topics/prices/keys/empty", ""), true},
		{"binary value", get("/v1/topics/prices/keys/binary", ""), true},
		{"large value", get("/v1/topics/prices/keys/large", ""), true},
		{"pending value beside the one in force", get("/v1/topics/sched/keys/k", ""), true},
		{"the fields curl and Go send", get("/v1/topics/prices/keys/sku-1", "User-Agent: curl/8\r\naccept: */*\r\nAccept-Encoding: gzip\r\n"), true},
		{"no key", get("/v1/topics/prices/keys/nope", ""), true},
		{"no topic", get("/v1/topics/nope/keys/sku-1", ""), true},
		{"topic of a bad name", get("/v1/topics/pri!ces/keys/sku-1", ""), true},
		{"escaped key", get("/v1/topics/prices/keys/eu%2Fsku-2", ""), false},
		{"query", get("/v1/topics/prices/keys/sku-1?x=1", ""), false},
		{"dot segment", get("/v1/topics/prices/keys/eu/./sku-2", ""), false},
		{"empty segment", get("/v1/topics/prices/keys/eu//sku-2", ""), false},
		{"topic of two segments", get("/v1/topics/pri/ces/keys/sku-1", ""), false},
		{"HEAD", "HEAD /v1/topics/prices/keys/sku-1 HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"HTTP/1.0", "GET /v1/topics/prices/keys/sku-1 HTTP/1.0\r\nHost: x\r\n\r\n", false},
		{"no Host", "GET /v1/topics/prices/keys/sku-1 HTTP/1.1\r\nUser-Agent: x\r\n\r\n", false},
		{"two Hosts", get("/v1/topics/prices/keys/sku-1", "Host: y\r\n"), false},
		{"Host of odd bytes", "GET /v1/topics/prices/keys/sku-1 HTTP/1.1\r\nHost: a b\r\n\r\n", false},
		{"Connection: close", get("/v1/topics/prices/keys/sku-1", "Connection: close\r\n"), false},
		{"a body's length", get("/v1/topics/prices/keys/sku-1", "Content-Length: 0\r\n"), false},
		{"other route", get("/healthz", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, errs0 := td.d.lane.Served(), errorsCounted(td)
			head := strings.HasPrefix(tc.raw, "HEAD ")
			c := dialLane(t, td.cfg.Socket)
			c.noBody = head
			c.send(tc.raw)
			got := c.answer()
			served, errs1 := td.d.lane.Served()-before, errorsCounted(td)
			c2 := dialLane(t, td.cfg.Socket)
			c2.noBody = head
			c2.send(withSlow(tc.raw))
			want := c2.answer()
			if td.d.lane.Served()-before != served {
				t.Errorf("the fast lane answered a request with %q", slow)
			}
			if errs2 := errorsCounted(td); errs1-errs0 != errs2-errs1 {
				t.Errorf("errors counted: %v, by net/http %v", errs1-errs0, errs2-errs1)
			}
			if got != want {
				t.Errorf("answer:\n%s\nnet/http's:\n%s", got, want)
			}
			if tc.fast != (served == 1) {
				t.Errorf("answered by the fast lane: %v, want %v (answer %q)", served == 1, tc.fast, got)
			}
		})
	}
}

// errorsCounted is the sum of cachecast_api_errors_total over its codes.
func errorsCounted(td *testDaemon) float64 {
	td.t.Helper()
	mfs, err := td.d.m.reg.Gather()
	if err != nil {
		td.t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "cachecast_api_errors_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestFastLaneHandsOver: on one connection, requests the lane answers,
// then one it hands to net/http with the connection, then more that
// net/http answers; written one at a time and all at once (the lane
// holds the ones behind the first it does not take for net/http), and
// with a head that arrives in two writes.
func TestFastLaneHandsOver(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, testConfig(t))
	td.put("t", "a", "A")
	td.put("t", "b", "B")
	get := func(key string) string { return "GET /v1/topics/t/keys/" + key + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	bodies := func(c *laneConn, n int) []string {
		var out []string
		for range n {
			a := c.answer()
			out = append(out, a[strings.Index(a, "\r\n\r\n")+4:])
		}
		return out
	}
	reqs := []string{get("a"), get("none"), get("b?x=1"), get("a"), get("b")}
	want := fmt.Sprint([]string{"A", `{"error":{"code":"not_found","message":"no key \"none\" in topic \"t\""}}` + "\n", "B", "A", "B"})

	t.Run("one at a time", func(t *testing.T) {
		before := td.d.lane.Served()
		c := dialLane(t, td.cfg.Socket)
		var got []string
		for _, r := range reqs {
			c.send(r)
			got = append(got, bodies(c, 1)...)
		}
		if fmt.Sprint(got) != want {
			t.Errorf("answers %q, want %q", got, want)
		}
		if n := td.d.lane.Served() - before; n != 2 {
			t.Errorf("the fast lane answered %d, want the 2 before the one it handed over", n)
		}
	})
	t.Run("all at once", func(t *testing.T) {
		c := dialLane(t, td.cfg.Socket)
		c.send(strings.Join(reqs, ""))
		if got := bodies(c, len(reqs)); fmt.Sprint(got) != want {
			t.Errorf("answers %q, want %q", got, want)
		}
	})
	t.Run("a head longer than the lane reads", func(t *testing.T) {
		before := td.d.lane.Served()
		c := dialLane(t, td.cfg.Socket)
		c.send(strings.Replace(get("a"), "\r\n\r\n", "\r\nUser-Agent: "+strings.Repeat("u", 5000)+"\r\n\r\n", 1) + get("b"))
		if got := bodies(c, 2); fmt.Sprint(got) != "[A B]" {
			t.Errorf("answers %q, want [A B]", got)
		}
		if n := td.d.lane.Served() - before; n != 0 {
			t.Errorf("the fast lane answered %d, want 0: the first head is longer than its buffer", n)
		}
	})
	t.Run("a head in two writes", func(t *testing.T) {
		// Whether the lane reads the two parts at once (and answers) or
		// the first alone (and hands it over), the answer is the same.
		c := dialLane(t, td.cfg.Socket)
		r := get("a")
		c.send(r[:10])
		c.send(r[10:])
		if got := bodies(c, 1); got[0] != "A" {
			t.Errorf("answer %q, want A", got)
		}
	})
}

// TestFastLaneIdleEvicted: a connection waiting in the fast lane after
// its answer is idle for the connection limits: at --max-connections a
// new connection closes it, as it closes one waiting in net/http. (With
// one connection a uid, the new one was once counted in the entry of its
// uid that the eviction had dropped, and its first request panicked.)
func TestFastLaneIdleEvicted(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MaxConnections, cfg.MaxConnectionsPerUID = 1, 1
	td := startDaemon(t, cfg)
	td.put("t", "a", "A")
	td.c.CloseIdleConnections()
	testkit.Eventually(t, 10*time.Second, "no connections", func() bool { return value(td, "cachecast_api_connections") == 0 })
	get := "GET /v1/topics/t/keys/a HTTP/1.1\r\nHost: x\r\n\r\n"
	first := dialLane(t, cfg.Socket)
	first.send(get)
	first.answer()
	// The first connection is idle (evictable) once the lane reads from
	// it again, a moment after its answer: a second connection in between
	// finds every connection running and is told busy, retry, as the doc
	// says. It retries until it is served (the first went idle only after
	// the second came in 4 runs of 60 under -race on busy cores).
	testkit.Until(t, 10*time.Second, "a second connection to be served", func() string {
		second := dialLane(t, cfg.Socket)
		second.send(get)
		switch a := second.answer(); {
		case strings.HasSuffix(a, "\r\n\r\nA"):
			return ""
		case strings.Contains(a, `"code":"busy"`):
			return a
		default:
			t.Fatalf("the second connection's answer: %q", a)
			return ""
		}
	})
	_ = first.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := first.r.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the first connection, idle in the lane: read %d bytes, %v; want it closed", n, err)
	}
}

// TestFastLaneShutdown: a connection idle in the fast lane is closed at
// shutdown, as net/http closes its idle ones, and Run returns (goleak,
// in TestMain, checks that the lane's goroutines are gone).
func TestFastLaneShutdown(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, testConfig(t))
	td.put("t", "a", "A")
	c := dialLane(t, td.cfg.Socket)
	c.send("GET /v1/topics/t/keys/a HTTP/1.1\r\nHost: x\r\n\r\n")
	c.answer()
	td.stop()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.r.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after shutdown, a read of the idle connection: %d bytes, %v; want EOF", n, err)
	}
}
