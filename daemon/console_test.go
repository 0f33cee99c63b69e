package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// getJSON GETs path on td's socket and decodes a 200 answer into v.
func getJSON[T any](td *testDaemon, path string) T {
	td.t.Helper()
	r := td.do("GET", path, nil)
	var v T
	if r.status != http.StatusOK {
		td.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		td.t.Fatalf("GET %s: %v: %s", path, err, r.body)
	}
	return v
}

func fleetMember(f wire.Fleet, name string) wire.FleetMember {
	for _, m := range f.Members {
		if m.Name == name {
			return m
		}
	}
	return wire.FleetMember{}
}

// TestConsoleRoutes covers the console's cross-node routes on three
// nodes: GET /v1/fleet lists every member with its own figures; GET
// /v1/topics/{t}/nodes/{k} shows a key the same on all three, names the
// node that differs, and shows a member that does not answer (alive, but
// its answers held back) or is stopped as not answered, never the same;
// GET /v1/fleet/groups lists every node's consumer groups, and a member
// that does not answer as such.
func TestConsoleRoutes(t *testing.T) {
	t.Parallel()
	ds := startCluster(t, 3, nil)
	ds[0].put("prices", "sku-42", "10")

	testkit.Until(t, 10*time.Second, "sku-42 the same on all three", func() string {
		k := getJSON[wire.KeyAcross](ds[1], "/v1/topics/prices/nodes/sku-42")
		if !k.Same {
			b, _ := json.Marshal(k)
			return string(b)
		}
		return ""
	})
	k := getJSON[wire.KeyAcross](ds[2], "/v1/topics/prices/nodes/sku-42")
	if len(k.Nodes) != 3 {
		t.Fatalf("nodes %+v; want 3", k.Nodes)
	}
	for _, n := range k.Nodes {
		if !n.Answered || !n.Found || n.Differs || n.Entry.Value != "10" || n.Entry.HLC != k.Nodes[0].Entry.HLC || n.Entry.Seq != 1 {
			t.Fatalf("%s: %+v %+v; want the value 10 at one version everywhere", n.Name, n, n.Entry)
		}
	}
	if !k.Nodes[2].Self || k.Nodes[0].Self {
		t.Fatalf("self: %+v; want node2 marked", k.Nodes)
	}
	absent := getJSON[wire.KeyAcross](ds[0], "/v1/topics/prices/nodes/nothing")
	if !absent.Same || absent.Nodes[1].Found || !absent.Nodes[1].Answered {
		t.Fatalf("a key nobody holds: %+v; want the same absence everywhere", absent)
	}

	f := getJSON[wire.Fleet](ds[0], "/v1/fleet")
	if f.Node != "node0" || len(f.Members) != 3 {
		t.Fatalf("fleet %+v; want node0's view of 3 members", f)
	}
	for _, m := range f.Members {
		if m.State != "alive" || m.Summary == nil || m.Summary.Name != m.Name || m.Summary.Keys != 1 || m.Summary.Time == "" ||
			m.Summary.Observer == nil || m.Summary.Observer.Peers != nil {
			t.Fatalf("member %+v (summary %+v); want alive with its own figures", m, m.Summary)
		}
	}
	if m := fleetMember(f, "node2"); m.RoundTripSeconds <= 0 || m.ClockOffsetSeconds > 1 || m.ClockOffsetSeconds < -1 {
		t.Fatalf("node2's round trip %gs, clock offset %gs; want a round trip, and one clock in one process", m.RoundTripSeconds, m.ClockOffsetSeconds)
	}
	if s := fleetMember(f, "node0").Summary; s.Published != 1 || s.Applied != 0 {
		t.Fatalf("node0 published %d, applied %d; want 1, 0", s.Published, s.Applied)
	}
	if s := fleetMember(f, "node1").Summary; s.Published != 0 || s.Applied != 1 {
		t.Fatalf("node1 published %d, applied %d; want 0, 1", s.Published, s.Applied)
	}

	// The same (origin, seq) with another value on node2: node2 differs.
	forged := func(value string) []byte {
		m := record.Message{Topic: "prices", Key: "forged", Value: []byte(value)}
		b := make([]byte, 256)
		return b[:record.Encode(b, &m, record.Stamp{Origin: 0xf0f0, Seq: 1, HLC: 1})]
	}
	for i, td := range ds {
		value := "one"
		if i == 2 {
			value = "two"
		}
		if _, err := td.d.store.AppendRecord(forged(value)); err != nil {
			t.Fatal(err)
		}
	}
	k = getJSON[wire.KeyAcross](ds[0], "/v1/topics/prices/nodes/forged")
	if k.Same || k.Nodes[0].Differs || k.Nodes[1].Differs || !k.Nodes[2].Differs || k.Nodes[2].Entry.Value != "two" {
		t.Fatalf("diverged key: %+v; want node2 alone differing", k)
	}

	// A consumer group with its member on node1: every node lists it,
	// node1 with the member.
	ds[1].subscribe("prices/subscribe?mode=clustering&group=billing")
	testkit.Until(t, 10*time.Second, "billing on all three, its member on node1", func() string {
		g := getJSON[wire.GroupsAcross](ds[0], "/v1/fleet/groups")
		var got []string
		for _, n := range g.Nodes {
			s := n.Name
			if n.Self {
				s += "(self)"
			}
			for _, x := range n.Groups {
				s += fmt.Sprintf(" %s/%s:%d", x.Topic, x.Group, len(x.Members))
			}
			got = append(got, s)
		}
		if want := "[node0(self) prices/billing:0 node1 prices/billing:1 node2 prices/billing:0]"; fmt.Sprint(got) != want || g.Node != "node0" {
			return fmt.Sprintf("%s: %v", g.Node, got)
		}
		return ""
	})

	// node1 is alive but answers nothing: not answered, never the same.
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	ds[1].d.cluster.Gossip().SetAnswer(func(from string, q []byte) []byte { <-release; return nil })
	start := time.Now()
	k = getJSON[wire.KeyAcross](ds[0], "/v1/topics/prices/nodes/sku-42?timeout=300ms")
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v with a 300ms timeout per member", took)
	}
	if k.Same || k.Nodes[1].Answered || k.Nodes[1].Differs || !strings.Contains(k.Nodes[1].Error, "no answer") ||
		!k.Nodes[0].Answered || !k.Nodes[2].Answered {
		t.Fatalf("a silent member: %+v; want node1 shown as not answering, the others answered", k)
	}
	f = getJSON[wire.Fleet](ds[0], "/v1/fleet?timeout=300ms")
	if m := fleetMember(f, "node1"); m.State != "alive" || m.Summary != nil || !strings.Contains(m.Error, "no answer") {
		t.Fatalf("a silent member in the fleet: %+v", m)
	}
	g := getJSON[wire.GroupsAcross](ds[0], "/v1/fleet/groups?timeout=300ms")
	if n := g.Nodes[1]; n.Name != "node1" || n.Answered || len(n.Groups) != 0 || !strings.Contains(n.Error, "no answer") || !g.Nodes[0].Answered || !g.Nodes[2].Answered {
		t.Fatalf("a silent member's groups: %+v", g)
	}
	unblock()
	ds[1].d.cluster.SetAnswer(ds[1].d.answerConsole)

	// A stopped node: down in the fleet, not answered on a key.
	ds[2].stop()
	testkit.Until(t, 15*time.Second, "node2 down", func() string {
		m := fleetMember(getJSON[wire.Fleet](ds[0], "/v1/fleet"), "node2")
		if m.State == "alive" || m.Summary != nil {
			return "node2: " + m.State
		}
		return ""
	})
	k = getJSON[wire.KeyAcross](ds[0], "/v1/topics/prices/nodes/sku-42")
	if k.Same || k.Nodes[2].Answered || k.Nodes[2].Error == "" || !k.Nodes[1].Answered {
		t.Fatalf("a stopped member: %+v", k)
	}

	if r := ds[0].do("GET", "/v1/fleet?timeout=1h", nil); r.status != http.StatusBadRequest {
		t.Fatalf("timeout=1h: %d %s; want 400", r.status, r.body)
	}
}

// TestKeyHistory covers GET /v1/topics/{t}/history/{k}: a key's records
// in the log, newest first, of each kind, with their versions; the scan's
// bounds, truncated when it stops short of the topic's first message; a
// key with slashes; bad bounds refused.
func TestKeyHistory(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	first := td.put("prices", "sku-42", "10.00")
	td.put("prices", "sku-7", "1")
	second := td.put("prices", "sku-42", "12.50", "Cachecast-Tag", "eu")
	if r := td.do("POST", "/v1/topics/prices/counters/hits?by=3", nil); r.status != http.StatusOK {
		t.Fatalf("incr: %d %s", r.status, r.body)
	}
	if r := td.do("POST", "/v1/topics/prices/counters/hits?by=4", nil); r.status != http.StatusOK {
		t.Fatalf("incr: %d %s", r.status, r.body)
	}
	if r := td.do("DELETE", "/v1/topics/prices/keys/sku-42", nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	td.put("prices", "a//b", "slashes")

	h := getJSON[wire.KeyHistory](td, "/v1/topics/prices/history/sku-42")
	if len(h.Records) != 3 || h.Truncated || h.Scanned != 7 {
		t.Fatalf("history %+v; want 3 records of 7 messages, not truncated", h)
	}
	del, w2, w1 := h.Records[0], h.Records[1], h.Records[2]
	if del.Kind != "delete" || w2.Kind != "write" || w2.Value != "12.50" || w2.Tag != "eu" || w2.HLC != second.HLC ||
		w1.Kind != "write" || w1.Value != "10.00" || w1.HLC != first.HLC || w1.Offset != 0 || w1.Seq != 1 || w1.Time == "" {
		t.Fatalf("records %+v; want the delete, then 12.50 (eu) and 10.00 at their versions", h.Records)
	}
	// A counter created from nothing: both increments count from 0 on
	// the absence of a key the node never held (no version to name).
	hits := getJSON[wire.KeyHistory](td, "/v1/topics/prices/history/hits")
	if len(hits.Records) != 2 {
		t.Fatalf("counter history %+v; want the increments by 4 and 3", hits.Records)
	}
	for i, want := range []string{"4", "3"} {
		if c := hits.Records[i]; c.Kind != "counter" || c.Value != want || !c.Absent || c.Target != nil {
			t.Fatalf("increment %d: %+v; want a counter of %s on the absence, naming no version", i, c, want)
		}
	}
	for _, tc := range []struct {
		query     string
		records   int
		scanned   uint64
		truncated bool
	}{
		{"?limit=1", 1, 2, true},
		{"?limit=2", 2, 5, true},
		{"?scan=3", 1, 3, true},
		{"?limit=3&scan=7", 3, 7, false},
	} {
		h := getJSON[wire.KeyHistory](td, "/v1/topics/prices/history/sku-42"+tc.query)
		if len(h.Records) != tc.records || h.Scanned != tc.scanned || h.Truncated != tc.truncated {
			t.Errorf("%s: %d records, %d scanned, truncated %t; want %d %d %t", tc.query, len(h.Records), h.Scanned, h.Truncated, tc.records, tc.scanned, tc.truncated)
		}
	}
	if h := getJSON[wire.KeyHistory](td, "/v1/topics/prices/history/a//b"); len(h.Records) != 1 || h.Key != "a//b" || h.Records[0].Value != "slashes" {
		t.Errorf("a key with slashes: %+v", h)
	}
	if h := getJSON[wire.KeyHistory](td, "/v1/topics/nothing/history/k"); len(h.Records) != 0 || h.Records == nil || h.Truncated {
		t.Errorf("a topic never written: %+v; want no record, an empty list, not truncated", h)
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?scan=x", "?scan=1000001"} {
		if r := td.do("GET", "/v1/topics/prices/history/sku-42"+q, nil); r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s; want 400", q, r.status, r.body)
		}
	}
	// An increment of a value names the version it counts on; one of a
	// deleted key names the tombstone it counts after.
	views := td.put("prices", "views", "10")
	for range 2 {
		if r := td.do("POST", "/v1/topics/prices/counters/views?by=1", nil); r.status != http.StatusOK {
			t.Fatalf("incr: %d %s", r.status, r.body)
		}
		if r := td.do("DELETE", "/v1/topics/prices/keys/views", nil); r.status != http.StatusOK {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	}
	vh := getJSON[wire.KeyHistory](td, "/v1/topics/prices/history/views").Records
	if len(vh) != 5 {
		t.Fatalf("history of views: %+v; want 5 records", vh)
	}
	if c := vh[3]; c.Kind != "counter" || c.Absent || c.Target == nil || c.Target.HLC != views.HLC {
		t.Errorf("the increment of the write: %+v; want it to name version %s", c, views.HLC)
	}
	if c, del := vh[1], vh[2]; c.Kind != "counter" || !c.Absent || c.Target == nil || c.Target.HLC != del.HLC {
		t.Errorf("the increment after the delete: %+v; want it on the absence after %s", c, del.HLC)
	}
	// Its revival has no version (record.Genesis): its entry, its GET and
	// an expiry change of it (Redis EXPIRE) show none, origin 0.
	if out, _ := redisCLI(t, td, nil, "EXPIRE", "prices:hits", "3600"); out != "1\n" {
		t.Fatalf("EXPIRE of the revival: %q", out)
	}
	if c := getJSON[wire.KeyHistory](td, "/v1/topics/prices/history/hits").Records[0]; c.Kind != "expiry" || !c.Absent || c.Target != nil {
		t.Errorf("the EXPIRE of the revival: %+v; want an expiry of the absence, naming no version", c)
	}
	none := wire.FormatOrigin(0)
	if e := getJSON[wire.KeyAcross](td, "/v1/topics/prices/nodes/hits").Nodes[0].Entry; e == nil || e.Value != "7" || e.Origin != none || e.Seq != 0 || e.HLC != "0" {
		t.Errorf("the revival's entry: %+v; want 7 at no version", e)
	}
	if r := td.do("GET", "/v1/topics/prices/keys/hits", nil); r.header.Get("Cachecast-Origin") != none || r.header.Get("Cachecast-Seq") != "0" || r.header.Get("Cachecast-Hlc") != "0" {
		t.Errorf("GET of the revival: %d %v; want origin %s, seq 0, hlc 0", r.status, r.header, none)
	}
}

// TestExpiriesRoute covers GET /v1/topics/{t}/expiries: the keys whose
// value expires, soonest first, within ?limit=, and truncated when ?scan=
// left keys unwalked.
func TestExpiriesRoute(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	now := time.Now().UTC()
	in := func(d time.Duration) string { return now.Add(d).Format(wire.TimeLayout) }
	td.put("prices", "a", "1", "Cachecast-Expires", in(time.Hour))
	td.put("prices", "b", "no expiry")
	td.put("prices", "c", "2", "Cachecast-Expires", in(30*time.Minute))
	td.put("prices", "d", "3", "Cachecast-Expires", in(2*time.Hour))
	type expiries struct {
		Expiries []struct {
			Key       string
			ExpiresAt string `json:"expires_at"`
		}
		Scanned   int
		Truncated bool
	}
	for _, tc := range []struct {
		query     string
		want      string
		scanned   int
		truncated bool
	}{
		{"", "c@" + in(30*time.Minute) + " a@" + in(time.Hour) + " d@" + in(2*time.Hour), 4, false},
		{"?limit=1", "c@" + in(30*time.Minute), 4, false},
		{"?scan=2", "a@" + in(time.Hour), 2, true},
		{"?scan=4", "c@" + in(30*time.Minute) + " a@" + in(time.Hour) + " d@" + in(2*time.Hour), 4, false},
	} {
		r := td.do("GET", "/v1/topics/prices/expiries"+tc.query, nil)
		var e expiries
		if r.status != http.StatusOK || json.Unmarshal(r.body, &e) != nil {
			t.Fatalf("%s: %d %s", tc.query, r.status, r.body)
		}
		var got []string
		for _, x := range e.Expiries {
			got = append(got, x.Key+"@"+x.ExpiresAt)
		}
		if strings.Join(got, " ") != tc.want || e.Scanned != tc.scanned || e.Truncated != tc.truncated {
			t.Errorf("%s: %v, %d scanned, truncated %t; want %s, %d, %t", tc.query, got, e.Scanned, e.Truncated, tc.want, tc.scanned, tc.truncated)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?scan=0", "?scan=x"} {
		if r := td.do("GET", "/v1/topics/prices/expiries"+q, nil); r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s; want 400", q, r.status, r.body)
		}
	}
}

// TestConsoleListener: the metrics listener redirects / to the console,
// serves its page, and the local API's read routes under /console/api
// (the write routes not at all), /metrics beside them.
func TestConsoleListener(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	td := startDaemon(t, cfg)
	td.put("prices", "sku-1", "7")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(c.CloseIdleConnections)
	base := "http://" + td.d.MetricsAddr()
	do := func(method, path, host string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	for _, tc := range []struct {
		method, path, host string
		status             int
		has                string
	}{
		{"GET", "/", "", http.StatusFound, ""},
		{"GET", "/console/", "", http.StatusOK, "<title>cachecast console</title>"},
		{"GET", "/console/console.js", "", http.StatusOK, "api/v1"},
		{"GET", "/console/api/v1/topics", "", http.StatusOK, `"name":"prices"`},
		{"GET", "/console/api/v1/topics/prices/keys/sku-1", "", http.StatusOK, "7"},
		{"GET", "/console/api/v1/fleet", "", http.StatusOK, `"node":"test-node"`},
		{"GET", "/console/api/v1/topics/prices/nodes/sku-1", "", http.StatusOK, `"same":true`},
		{"GET", "/console/api/v1/topics/prices/history/sku-1", "", http.StatusOK, `"kind":"write"`},
		{"GET", "/console/api/v1/topics/prices/expiries", "", http.StatusOK, `"expiries":[]`},
		{"GET", "/console/api/v1/fleet/groups", "", http.StatusOK, `"node":"test-node"`},
		{"PUT", "/console/api/v1/topics/prices/keys/sku-1", "", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"DELETE", "/console/api/v1/topics/prices/keys/sku-1", "", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"POST", "/console/api/v1/repair/accept", "", http.StatusNotFound, "route_not_found"},
		{"GET", "/console/api/v1/topics/prices/groups/g/dlq", "", http.StatusNotFound, "route_not_found"},
		// A durable cursor moves: consume, which the console's caller
		// never holds (issue 31).
		{"GET", "/console/api/v1/topics/prices/subscribe?name=c&ack=auto", "", http.StatusForbidden, "consume role"},
		{"GET", "/console/api/v1/fleet", "evil.example:80", http.StatusForbidden, "loopback Host"},
		{"GET", "/metrics", "", http.StatusOK, "cachecast_publish_messages_total"},
	} {
		status, h, body := do(tc.method, tc.path, tc.host)
		if status != tc.status || !strings.Contains(body, tc.has) {
			t.Errorf("%s %s (host %q): %d %q; want %d with %q", tc.method, tc.path, tc.host, status, body, tc.status, tc.has)
		}
		if tc.path == "/" && h.Get("Location") != "/console/" {
			t.Errorf("/ redirects to %q; want /console/", h.Get("Location"))
		}
	}
	if r := td.do("GET", "/v1/topics/prices/keys/sku-1", nil); r.status != 200 || string(r.body) != "7" {
		t.Fatalf("the key was changed: %d %s", r.status, r.body)
	}
}
