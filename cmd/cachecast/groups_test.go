package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client/clienttest"
)

// groupDaemon answers the consumer-group routes with canned answers and
// records what it is sent; every other route goes to a clienttest.Server
// behind it. A clustering subscription streams the canned lines and then
// stays open until the client leaves. These tests are about the wire;
// the groups themselves are tested end to end against real daemons.
type groupDaemon struct {
	socket string

	mu      sync.Mutex
	answers map[string]string // JSON bodies by "METHOD /escaped/path"
	stream  []string          // the lines of a clustering subscription
	lines   []string          // the lines of a broadcasting subscription (nil: the back server's)
	seen    []string          // "METHOD /path?query body", in order; "leave" when a stream ends
	acked   [][]string        // the ack lists of each ack request
}

func newGroupDaemon(t *testing.T) *groupDaemon {
	t.Helper()
	back := clienttest.NewServer(t)
	d := &groupDaemon{answers: map[string]string{}}
	backSocket := back.Socket
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "back"}) },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", backSocket)
		}},
		FlushInterval: -1,
	}
	dir, err := os.MkdirTemp("", "ccgroups") // short: socket paths are limited to 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d.socket = filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Method + " " + r.URL.EscapedPath()
		switch {
		case r.URL.Query().Get("mode") == "clustering":
			d.subscribe(w, r)
		case strings.HasSuffix(route, "/subscribe") && d.broadcastLines() != nil:
			d.record(r)
			w.Header().Set("Content-Type", "application/x-ndjson")
			for _, l := range d.broadcastLines() {
				io.WriteString(w, l+"\n")
			}
		case strings.HasSuffix(route, "/ack"):
			d.ack(w, r)
		default:
			d.mu.Lock()
			body, ok := d.answers[route]
			d.mu.Unlock()
			if !ok {
				proxy.ServeHTTP(w, r)
				return
			}
			d.record(r)
			w.Header().Set("Content-Type", "application/json")
			if strings.Contains(body, `"error"`) { // the only error answered here is not_found
				w.WriteHeader(http.StatusNotFound)
			}
			io.WriteString(w, body)
		}
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return d
}

func (d *groupDaemon) broadcastLines() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lines
}

func (d *groupDaemon) answer(route, body string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[route] = body
}

func (d *groupDaemon) record(r *http.Request) []byte {
	body, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	defer d.mu.Unlock()
	s := r.Method + " " + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		s += "?" + r.URL.RawQuery
	}
	if len(body) > 0 {
		s += " " + string(body)
	}
	d.seen = append(d.seen, s)
	return body
}

func (d *groupDaemon) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.seen...)
}

func (d *groupDaemon) ackLists() [][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][]string(nil), d.acked...)
}

func (d *groupDaemon) subscribe(w http.ResponseWriter, r *http.Request) {
	d.record(r)
	d.mu.Lock()
	lines := d.stream
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cachecast-Member", "17")
	w.WriteHeader(http.StatusOK)
	for _, l := range lines {
		io.WriteString(w, l+"\n")
	}
	http.NewResponseController(w).Flush()
	<-r.Context().Done()
	d.mu.Lock()
	d.seen = append(d.seen, "leave")
	d.mu.Unlock()
}

func (d *groupDaemon) ack(w http.ResponseWriter, r *http.Request) {
	body := d.record(r)
	var req struct {
		Ack  []string `json:"ack"`
		Nack []string `json:"nack"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	d.acked = append(d.acked, req.Ack)
	d.mu.Unlock()
	fmt.Fprintf(w, `{"acked":%d,"nacked":%d,"unknown":0}`, len(req.Ack), len(req.Nack))
}

// groupLines makes n subscription lines, ids 00000000deadbeef-1.. .
func groupLines(n int) (lines, ids []string) {
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("00000000deadbeef-%d", i)
		ids = append(ids, id)
		lines = append(lines, fmt.Sprintf(`{"offset":%d,"topic":"orders","key":"o-%d","tag":"","value":"v%d","delete":false,"origin":"00000000deadbeef","seq":%d,"hlc":"117703673222397952","time":"2026-11-30T05:12:01.582Z","id":"%s","attempt":%d,"queue":%d}`,
			i-1, i, i, i, id, 1+i%2, i%4))
	}
	return lines, ids
}

func TestWatchGroup(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		args     []string
		query    string
		maxBatch int
	}{
		{"batches of 256", 600, nil, "group=billing&mode=clustering", 256},
		{"batches of max-inflight", 25, []string{"--max-inflight", "10", "--tags", "a||b"},
			"group=billing&max_inflight=10&mode=clustering&tags=a%7C%7Cb", 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newGroupDaemon(t)
			lines, ids := groupLines(tt.n)
			d.stream = lines
			args := append([]string{"watch", "orders", "--group", "billing", "--count", fmt.Sprint(tt.n)}, tt.args...)
			r := cliSocket(context.Background(), t, d.socket, "", args...).check(t, exitOK)
			out := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if len(out) != tt.n || out[0] != "00000000deadbeef-1\t2\to-1\t-\tv1" || out[1] != "00000000deadbeef-2\t1\to-2\t-\tv2" {
				t.Errorf("%d lines, starting %q", len(out), out[:min(2, len(out))])
			}
			reqs := d.requests()
			if reqs[0] != "GET /v1/topics/orders/subscribe?"+tt.query {
				t.Errorf("subscribed with %s", reqs[0])
			}
			var got []string
			for _, l := range d.ackLists() {
				if len(l) == 0 || len(l) > tt.maxBatch {
					t.Errorf("an ack of %d ids, want 1..%d", len(l), tt.maxBatch)
				}
				got = append(got, l...)
			}
			if !reflect.DeepEqual(got, ids) {
				t.Errorf("acked %d ids %v..., want the %d printed, in order", len(got), got[:min(3, len(got))], len(ids))
			}
			if n := len(d.ackLists()); n < (tt.n+tt.maxBatch-1)/tt.maxBatch {
				t.Errorf("%d ack requests for %d messages in batches of at most %d", n, tt.n, tt.maxBatch)
			}
		})
	}

	// --json prints the daemon's lines byte for byte: a field the client
	// does not know and the daemon's spacing stay.
	t.Run("json", func(t *testing.T) {
		d := newGroupDaemon(t)
		lines, _ := groupLines(2)
		lines[0] = strings.Replace(lines[0], `{"offset":0,`, `{"offset": 0, "future":{"x":[1,2]},`, 1)
		d.stream = lines
		r := cliSocket(context.Background(), t, d.socket, "", "watch", "orders", "--group", "billing", "--count", "2", "--json").check(t, exitOK)
		if want := lines[0] + "\n" + lines[1] + "\n"; r.stdout != want {
			t.Errorf("watch --group --json printed\n%s\nwant the daemon's lines\n%s", r.stdout, want)
		}
	})

	// An interrupt acknowledges what was printed before the stream ends:
	// the membership ends with the stream.
	t.Run("interrupt", func(t *testing.T) {
		d := newGroupDaemon(t)
		lines, ids := groupLines(3)
		d.stream = lines
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan result)
		go func() {
			done <- cliSocket(ctx, t, d.socket, "", "watch", "orders", "--group", "billing")
		}()
		for deadline := time.Now().Add(5 * time.Second); len(d.requests()) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no subscription")
			}
		}
		time.Sleep(20 * time.Millisecond)
		cancel()
		r := (<-done).check(t, exitOK)
		if strings.Count(r.stdout, "\n") != 3 {
			t.Errorf("printed %q", r.stdout)
		}
		var reqs []string
		for deadline := time.Now().Add(5 * time.Second); !slices.Contains(reqs, "leave"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the stream did not end: %q", reqs)
			}
			reqs = d.requests()
		}
		var got []string
		for _, l := range d.ackLists() {
			got = append(got, l...)
		}
		if !reflect.DeepEqual(got, ids) || reqs[len(reqs)-1] != "leave" {
			t.Errorf("requests %q; want the acks of %v, then the stream's end", reqs, ids)
		}
	})
}

func TestQueueList(t *testing.T) {
	for _, tc := range []struct {
		qs   []int
		want string
	}{
		{nil, "-"}, {[]int{3}, "3"}, {[]int{0, 1, 2, 3, 4, 5}, "0-5"}, {[]int{0, 2}, "0,2"}, {[]int{0, 1, 2, 5, 7, 8}, "0-2,5,7-8"},
	} {
		if got := queueList(tc.qs); got != tc.want {
			t.Errorf("queueList(%v) = %q, want %q", tc.qs, got, tc.want)
		}
	}
}

func TestGroupCommands(t *testing.T) {
	d := newGroupDaemon(t)
	const g = "/v1/topics/orders/groups/billing"
	const dl = `{"id":"00000000deadbeef-42","topic":"orders","group":"billing","key":"o-1","tag":"eu","value_base64":"/wA=","reason":"timeout","attempts":5,"origin":"00000000deadbeef","seq":42,"time":"2026-11-30T05:12:01.582Z","dead_at":"2026-11-30T05:13:00.001Z"}`
	d.answer("GET /v1/groups", `{"groups":[{"topic":"orders","group":"billing","queues":4,
		"nodes":[{"node":"00000000deadbeef","queues":[0,2]},{"node":"0000000000000001","queues":[1,3]}],
		"members":[{"id":"17","queues":[0,2],"inflight":3}],
		"backlog":10,"inflight":3,"delivered":100,"acked":97,"retries":2,"dead_letters":1,"dlq":1},
		{"topic":"orders","group":"gone","queues":4,"nodes":[],"owned":[],"members":[],
		"backlog":0,"inflight":0,"delivered":0,"acked":0,"retries":0,"dead_letters":0,"dlq":3}]}`)
	d.answer("POST "+g+"/reset", `{"epoch":7}`)
	d.answer("GET /v1/topics", `{"topics":[{"name":"$groups","keys":1,"messages":2},{"name":"orders","keys":3,"messages":4}]}`)
	d.answer("GET "+g+"/dlq", `{"dead_letters":[`+dl+`,{"id":"00000000deadbeef-43","reason":"nack","attempts":1,"value":"`+strings.Repeat("x", 50)+`","dead_at":"2026-11-30T05:14:00.000Z"}],"next":""}`)
	d.answer("GET "+g+"/dlq/00000000deadbeef-42", dl)
	d.answer("GET "+g+"/dlq/0000000000000001-1", `{"error":{"code":"not_found","message":"no dead letter"}}`)
	d.answer("POST "+g+"/dlq/replay", `{"replayed":2}`)
	tests := []struct {
		name    string
		args    []string
		code    int
		request string   // the one request expected
		stdout  []string // lines, compared with the spaces of the table squeezed
	}{
		{"groups", []string{"groups"}, exitOK, "GET /v1/groups", []string{
			"TOPIC GROUP QUEUES NODES LOCAL MEMBERS BACKLOG INFLIGHT RETRIES DEAD LETTERS LIVE",
			"orders billing 4 2 1 10 3 2 1 yes",
			"orders gone 4 0 0 0 0 0 3 no",
			"TOPIC GROUP MEMBER QUEUES INFLIGHT",
			"orders billing 17 0,2 3"}},
		{"topics --internal", []string{"topics", "--internal"}, exitOK, "GET /v1/topics?internal=1", []string{
			"TOPIC KEYS MESSAGES", "$groups 1 2", "orders 3 4"}},
		{"reset", []string{"group", "reset", "--topic", "orders", "--group", "billing", "--to", "2026-11-30T05:00:00Z"}, exitOK,
			"POST " + g + `/reset {"to":"2026-11-30T05:00:00Z"}`, []string{"ok epoch=7"}},
		{"dlq list", []string{"dlq", "list", "--topic", "orders", "--group", "billing", "--limit", "5"}, exitOK,
			"GET " + g + "/dlq?limit=5", []string{
				"ID REASON ATTEMPTS DEAD AT KEY TAG VALUE",
				`00000000deadbeef-42 timeout 5 2026-11-30T05:13:00.001Z o-1 eu "\xff\x00"`,
				"00000000deadbeef-43 nack 1 2026-11-30T05:14:00.000Z - - " + strings.Repeat("x", 40) + "..."}},
		{"dlq list json", []string{"dlq", "list", "--topic", "orders", "--group", "billing", "--json"}, exitOK,
			"GET " + g + "/dlq?limit=1000", []string{dl, `{"id":"00000000deadbeef-43","reason":"nack","attempts":1,"value":"` + strings.Repeat("x", 50) + `","dead_at":"2026-11-30T05:14:00.000Z"}`}},
		{"dlq show", []string{"dlq", "show", "--topic", "orders", "--group", "billing", "00000000deadbeef-42"}, exitOK,
			"GET " + g + "/dlq/00000000deadbeef-42", []string{
				"id 00000000deadbeef-42", "topic orders", "group billing", "key o-1", "tag eu", "reason timeout",
				"attempts 5", "origin 00000000deadbeef", "seq 42", "time 2026-11-30T05:12:01.582Z",
				"dead at 2026-11-30T05:13:00.001Z", "size 2", `value "\xff\x00"`}},
		{"dlq show json", []string{"dlq", "show", "--topic", "orders", "--group", "billing", "--json", "00000000deadbeef-42"}, exitOK,
			"GET " + g + "/dlq/00000000deadbeef-42", []string{dl}},
		{"dlq show unknown", []string{"dlq", "show", "--topic", "orders", "--group", "billing", "0000000000000001-1"}, exitError,
			"GET " + g + "/dlq/0000000000000001-1", nil},
		{"dlq replay ids", []string{"dlq", "replay", "--topic", "orders", "--group", "billing", "00000000deadbeef-42", "00000000deadbeef-43"}, exitOK,
			"POST " + g + `/dlq/replay {"ids":["00000000deadbeef-42","00000000deadbeef-43"]}`, []string{"ok replayed=2"}},
		{"dlq replay all", []string{"dlq", "replay", "--topic", "orders", "--group", "billing", "--all"}, exitOK,
			"POST " + g + `/dlq/replay {"all":true}`, []string{"ok replayed=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(d.requests())
			r := cliSocket(context.Background(), t, d.socket, "", tt.args...).check(t, tt.code)
			if reqs := d.requests()[before:]; len(reqs) != 1 || reqs[0] != tt.request {
				t.Errorf("requests %q, want %q", reqs, tt.request)
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
				if l != "" {
					got = append(got, strings.Join(strings.Fields(l), " "))
				}
			}
			if !reflect.DeepEqual(got, tt.stdout) {
				t.Errorf("stdout:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.stdout, "\n"))
			}
		})
	}
	if r := cliSocket(context.Background(), t, d.socket, "", "dlq", "show", "--topic", "orders", "--group", "billing", "0000000000000001-1"); !strings.Contains(r.stderr, "orders/billing: no dead letter 0000000000000001-1") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestStatusGroups(t *testing.T) {
	d := newGroupDaemon(t)
	// No /v1/groups: an older daemon, no table.
	r := cliSocket(context.Background(), t, d.socket, "", "status").check(t, exitOK)
	if strings.Contains(r.stdout, "GROUP") || r.stderr != "" {
		t.Errorf("status of a daemon without groups: stdout %q stderr %q", r.stdout, r.stderr)
	}
	d.answer("GET /v1/groups", `{"groups":[]}`)
	r = cliSocket(context.Background(), t, d.socket, "", "status").check(t, exitOK)
	if strings.Contains(r.stdout, "GROUP") {
		t.Errorf("status with no groups:\n%s", r.stdout)
	}
	d.answer("GET /v1/groups", `{"groups":[{"topic":"orders","group":"billing","queues":4,"nodes":[],"members":[],"backlog":10,"inflight":0,"delivered":0,"acked":0,"retries":0,"dead_letters":0,"dlq":3}]}`)
	r = cliSocket(context.Background(), t, d.socket, "", "status").check(t, exitOK)
	if !strings.Contains(r.stdout, "\ngroups\nTOPIC ") || !strings.Contains(r.stdout, "clienttest") {
		t.Errorf("status with a group:\n%s", r.stdout)
	}
	if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), "orders billing 4 0 0 10 0 0 3 no") {
		t.Errorf("status with a group:\n%s", r.stdout)
	}
}

// TestWatchStreamLines: watch --json prints a broadcasting stream's lines
// byte for byte; a line that does not decode ends watch (exit 1, the line
// on stderr) after what came before it, and so does the daemon's error
// line, with its code; a change and a message with times print what they
// are and their times.
func TestWatchStreamLines(t *testing.T) {
	good := []string{
		`{"offset":0,"topic":"w","key":"a","tag":"","value":"1","delete":false,"origin":"00000000deadbeef","seq":1,"hlc":"117703673222397952","time":"2026-11-30T05:12:01.582Z","future":true}`,
		`{"offset": 1, "topic":"w","key":"b","tag":"","value_base64":"/w==","delete":false,"origin":"00000000deadbeef","seq":2,"hlc":"117703673222397953","time":"2026-11-30T05:12:01.582Z"}`,
	}
	tests := []struct {
		name       string
		lines      []string
		args       []string
		stdout     string
		code       int
		stderrWant string
	}{
		{"json", good, []string{"--json", "--count", "2"}, good[0] + "\n" + good[1] + "\n", exitOK, ""},
		{"malformed", []string{good[0], `{"offset":1,"topic":"w","origin":"zz"}`, good[1]}, nil,
			"0\ta\t-\t1\n", exitError, `(malformed lines so far: 1): client: malformed response: origin "zz"`},
		{"error line", []string{good[0], `{"error":{"code":"internal","message":"record corrupt"}}`}, []string{"--json"},
			good[0] + "\n", exitError, "internal: record corrupt"},
		{"changes", []string{
			`{"offset":2,"topic":"w","key":"n","tag":"","value":"3","delete":false,"origin":"00000000deadbeef","seq":3,"hlc":"1","time":"2026-11-30T05:12:01.582Z","increment_of":{"absent":true}}`,
			`{"offset":3,"topic":"w","key":"n","tag":"","value":"0","delete":false,"origin":"00000000deadbeef","seq":4,"hlc":"2","time":"2026-11-30T05:12:01.582Z","expires_at":"2026-11-30T06:12:01.582Z","expiry_of":{"absent":true}}`,
			`{"offset":4,"topic":"w","key":"n","tag":"","value":"0","delete":false,"origin":"00000000deadbeef","seq":5,"hlc":"3","time":"2026-11-30T05:12:01.582Z","expiry_of":{"origin":"00000000deadbeef","seq":1}}`,
		}, []string{"--count", "3"}, "2\tn\t-\t+3\n3\tn\t-\t(expiry change)\texpires 2026-11-30T06:12:01.582Z\n4\tn\t-\t(expiry change)\tno expiry\n", exitOK, ""},
		{"times", []string{
			`{"offset":5,"topic":"w","key":"s","tag":"eu","value":"9.99","delete":false,"origin":"00000000deadbeef","seq":6,"hlc":"4","time":"2026-11-30T05:12:01.582Z","expires_at":"2026-12-01T02:00:00.000Z","effective_at":"2026-12-01T00:00:00.000Z"}`,
			`{"offset":6,"topic":"w","key":"s","tag":"","value":"","delete":false,"origin":"00000000deadbeef","seq":7,"hlc":"5","time":"2026-11-30T05:12:01.582Z","effective_at":"2026-12-01T00:00:00.000Z","cancel":true}`,
			`{"offset":7,"topic":"w","key":"b","tag":"","value":"x","delete":false,"origin":"00000000deadbeef","seq":8,"hlc":"6","time":"2026-11-30T05:12:01.582Z","expires_at":"2026-11-30T06:12:01.582+01:00"}`,
		}, []string{"--count", "3"}, "5\ts\teu\t9.99\teffective 2026-12-01T00:00:00.000Z\texpires 2026-12-01T02:00:00.000Z\n" +
			"6\ts\t-\t(cancel)\teffective 2026-12-01T00:00:00.000Z\n7\tb\t-\tx\texpires 2026-11-30T05:12:01.582Z\n", exitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newGroupDaemon(t)
			d.lines = tt.lines
			r := cliSocket(context.Background(), t, d.socket, "", append([]string{"watch", "w", "--from", "earliest"}, tt.args...)...).check(t, tt.code)
			if r.stdout != tt.stdout || !strings.Contains(r.stderr, tt.stderrWant) {
				t.Errorf("stdout %q stderr %q; want stdout %q, stderr with %q", r.stdout, r.stderr, tt.stdout, tt.stderrWant)
			}
		})
	}
}
