package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/client"
)

// smallNode is the flags of a small daemon: 1 MiB segments, 64 KiB values, a fast async
// flush, debug logs (every write is logged with its caller).
var smallNode = []string{"--segment-size", "1MiB", "--max-value-size", "64KiB", "--flush-interval", "20ms", "--log-level", "debug"}

var (
	hexOrigin = regexp.MustCompile(`^[0-9a-f]{16}$`)
	decimal   = regexp.MustCompile(`^[0-9]+$`)
)

// checkWirePutResult checks one PutResult object as it is on the wire:
// origin a 16-digit hex string, hlc a decimal string, seq a number, time RFC
// 3339 with milliseconds, status "ok".
func checkWirePutResult(t *testing.T, raw json.RawMessage, topic, key string) {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("PutResult %s: %v", raw, err)
	}
	origin, _ := m["origin"].(string)
	hlc, _ := m["hlc"].(string)
	seq, _ := m["seq"].(json.Number)
	tm, _ := m["time"].(string)
	if m["topic"] != topic || m["key"] != key || m["status"] != "ok" || !hexOrigin.MatchString(origin) ||
		!decimal.MatchString(hlc) || !decimal.MatchString(seq.String()) {
		t.Fatalf("PutResult %s: want topic %q key %q, a hex origin, a decimal hlc string, a seq number, status ok", raw, topic, key)
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", tm); err != nil {
		t.Fatalf("PutResult time %q: not RFC 3339 with milliseconds: %v", tm, err)
	}
	h, _ := strconv.ParseUint(hlc, 10, 64)
	if h < 1<<53 {
		t.Fatalf("hlc %d: the wall part is missing", h)
	}
}

// TestRoutes exercises every route of the local API against a real
// cachecastd, happy paths only (TestErrorCodes has the errors), with the
// client package and, where the wire format itself is the point, raw HTTP.
// The subtests share the node but nothing else: each writes to its own
// topics what it reads back, so that each runs alone (-run
// 'TestRoutes/get') as well as after the others.
func TestRoutes(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "routes", Args: smallNode})
	c := n.Client
	ctx := ctx(t)

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	origin := st.Node.Origin
	publish := func(t *testing.T, topic, key, value, tag string) client.PutResult {
		t.Helper()
		res, err := c.Publish(ctx, topic, key, []byte(value), tag)
		if err != nil {
			t.Fatalf("Publish %s/%s: %v", topic, key, err)
		}
		return res
	}
	records := func(t *testing.T) uint64 {
		t.Helper()
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Store.Records
	}

	t.Run("healthz and readyz", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			r := httpDo(t, n, "GET", p, nil)
			if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
				t.Fatalf("GET %s: %d %s", p, r.status, r.body)
			}
		}
		if err := c.Healthz(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("status", func(t *testing.T) {
		// st was taken before any subtest wrote.
		if st.Node.Name != "routes" || st.Node.Version != testVersion || st.Flush != "async" || origin == 0 {
			t.Fatalf("status %s: want node routes, version %s, flush async, an origin", st.Raw, testVersion)
		}
		if st.Uptime <= 0 || st.Store.Segments < 1 || st.Store.Records != 0 {
			t.Fatalf("status %s", st.Raw)
		}
		r := httpDo(t, n, "GET", "/v1/status", nil)
		var w struct {
			Node   struct{ Name, Origin, Version string }
			Uptime float64 `json:"uptime_seconds"`
			Flush  string
			Store  map[string]json.Number
		}
		if err := json.Unmarshal(r.body, &w); err != nil || !hexOrigin.MatchString(w.Node.Origin) {
			t.Fatalf("GET /v1/status: %d %s (%v)", r.status, r.body, err)
		}
		for _, f := range []string{"segments", "mapped_segments", "log_bytes", "write_pos", "flushed_pos", "oldest_pos", "records", "keys"} {
			if _, ok := w.Store[f]; !ok {
				t.Errorf("status store has no %q: %s", f, r.body)
			}
		}
	})

	t.Run("put", func(t *testing.T) {
		const topic = "put"
		seq := records(t) + 1 // the node's own records are all its seqs
		before := time.Now().Add(-time.Second)
		first := publish(t, topic, "sku-1", "12.50", "eu")
		if first.Topic != topic || first.Key != "sku-1" || first.Origin != origin || first.Seq != seq ||
			first.Status != client.StatusOK || !first.OK() {
			t.Fatalf("PutResult %+v; want seq %d", first, seq)
		}
		if first.Time.Before(before) || first.Time.After(time.Now().Add(time.Second)) {
			t.Fatalf("time %v is not now", first.Time)
		}
		if wall := int64(first.HLC >> 16); wall != first.Time.UnixMilli() {
			t.Fatalf("hlc %d: wall part %d ms, time %v", first.HLC, wall, first.Time)
		}
		// The same route over raw HTTP, for the wire format itself.
		r := httpDo(t, n, "PUT", "/v1/topics/"+topic+"/keys/sku-2", strings.NewReader("9.99"), "Cachecast-Tag", "us")
		if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("PUT: %d %v %s", r.status, r.header, r.body)
		}
		checkWirePutResult(t, r.body, topic, "sku-2")
	})

	t.Run("get", func(t *testing.T) {
		const topic = "get"
		first := publish(t, topic, "sku-1", "12.50", "eu")
		v, err := c.Get(ctx, topic, "sku-1")
		if err != nil {
			t.Fatal(err)
		}
		if string(v.Bytes) != "12.50" || v.Tag != "eu" || v.Origin != first.Origin || v.Seq != first.Seq ||
			v.HLC != first.HLC || !v.Time.Equal(first.Time) {
			t.Fatalf("Get %+v; published %+v", v, first)
		}
		r := httpDo(t, n, "GET", "/v1/topics/"+topic+"/keys/sku-1", nil)
		h := r.header
		if r.status != 200 || string(r.body) != "12.50" || h.Get("Content-Type") != "application/octet-stream" ||
			h.Get("Cachecast-Origin") != client.FormatOrigin(origin) || h.Get("Cachecast-Seq") != strconv.FormatUint(first.Seq, 10) ||
			h.Get("Cachecast-Hlc") != strconv.FormatUint(first.HLC, 10) || h.Get("Cachecast-Tag") != "eu" ||
			h.Get("Cachecast-Time") != first.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00") {
			t.Fatalf("GET: %d %v %q", r.status, h, r.body)
		}
		r = httpDo(t, n, "HEAD", "/v1/topics/"+topic+"/keys/sku-1", nil)
		if r.status != 200 || len(r.body) != 0 || r.header.Get("Cachecast-Seq") != strconv.FormatUint(first.Seq, 10) {
			t.Fatalf("HEAD: %d %v %q", r.status, r.header, r.body)
		}
	})

	t.Run("keys with any characters", func(t *testing.T) {
		// Slashes, spaces, percent signs, dots, non-ASCII: one path segment each.
		for _, key := range []string{"a/b c/é%", "..", "?x=1#y", "k%2Fv", "a//b", "a/./b", strings.Repeat("k", 1024)} {
			publish(t, "odd", key, key, "")
			v, err := c.Get(ctx, "odd", key)
			if err != nil || string(v.Bytes) != key {
				t.Fatalf("Get %q: %q %v", key, v.Bytes, err)
			}
		}
		// A slash may also travel unescaped, doubled or beside a dot:
		// the key is the rest of the path as it is, never a redirect.
		for path, key := range map[string]string{
			"/v1/topics/odd/keys/a/b%20c/%C3%A9%25": "a/b c/é%",
			"/v1/topics/odd/keys/a//b":              "a//b",
			"/v1/topics/odd/keys/a/./b":             "a/./b",
			"/v1/topics/odd/keys/..":                "..",
		} {
			r := httpDo(t, n, "GET", path, nil)
			if r.status != 200 || string(r.body) != key {
				t.Fatalf("GET %s: %d %s; want the value of %q", path, r.status, r.body, key)
			}
		}
	})

	t.Run("counter", func(t *testing.T) {
		for i, want := range []string{"2", "4"} {
			r := httpDo(t, n, "POST", "/v1/topics/counter/counters/hits?by=2", nil)
			if r.status != 200 || r.header.Get("Cachecast-Count") != want {
				t.Fatalf("POST counters/hits?by=2 (%d): %d, Cachecast-Count %q: %s", i, r.status, r.header.Get("Cachecast-Count"), r.body)
			}
		}
		if r := httpDo(t, n, "GET", "/v1/topics/counter/keys/hits", nil); r.status != 200 || string(r.body) != "4" {
			t.Fatalf("GET the counter: %d %s", r.status, r.body)
		}
	})

	t.Run("delete", func(t *testing.T) {
		const topic = "delete"
		publish(t, topic, "gone", "soon", "")
		res, err := c.Delete(ctx, topic, "gone")
		if err != nil || res.Key != "gone" || !res.OK() {
			t.Fatalf("Delete: %+v %v", res, err)
		}
		if _, err := c.Get(ctx, topic, "gone"); !errors.Is(err, client.ErrNotFound) || apiCode(err) != client.CodeNotFound {
			t.Fatalf("Get after Delete: %v", err)
		}
		r := httpDo(t, n, "DELETE", "/v1/topics/"+topic+"/keys/never-was", nil)
		if r.status != 200 {
			t.Fatalf("DELETE of an absent key: %d %s", r.status, r.body)
		}
		checkWirePutResult(t, r.body, topic, "never-was")
	})

	t.Run("post one message", func(t *testing.T) {
		const topic = "post-one"
		r := httpDo(t, n, "POST", "/v1/topics/"+topic+"/messages",
			strings.NewReader(`{"key":"sku-3","tag":"eu","value":"7.25"}`), "Content-Type", "application/json")
		var out struct{ Results []json.RawMessage }
		if r.status != 200 || json.Unmarshal(r.body, &out) != nil || len(out.Results) != 1 {
			t.Fatalf("POST messages: %d %s", r.status, r.body)
		}
		checkWirePutResult(t, out.Results[0], topic, "sku-3")
		if v, err := c.Get(ctx, topic, "sku-3"); err != nil || string(v.Bytes) != "7.25" || v.Tag != "eu" {
			t.Fatalf("Get: %+v %v", v, err)
		}
	})

	t.Run("post a batch", func(t *testing.T) {
		const topic = "batch"
		publish(t, topic, "sku-2", "9.99", "us")
		bin := []byte{0xff, 0x00, 0xfe, 'x'}
		msgs := []client.Message{
			{Key: "b-1", Value: []byte("one"), Tag: "eu"},
			{Key: "b-bin", Value: bin},
			{Key: "b-empty"},
			{Value: []byte("a stream message, no key")},
			{Key: "sku-2", Delete: true},
		}
		res, err := c.PublishBatch(ctx, topic, msgs)
		if err != nil || len(res) != len(msgs) {
			t.Fatalf("PublishBatch: %d results, %v", len(res), err)
		}
		for i := range res {
			if res[i].Seq != res[0].Seq+uint64(i) || res[i].Key != msgs[i].Key || !res[i].OK() {
				t.Fatalf("result %d: %+v (first seq %d)", i, res[i], res[0].Seq)
			}
		}
		if v, err := c.Get(ctx, topic, "b-bin"); err != nil || !bytes.Equal(v.Bytes, bin) {
			t.Fatalf("binary value: %q %v", v.Bytes, err)
		}
		if v, err := c.Get(ctx, topic, "b-empty"); err != nil || len(v.Bytes) != 0 {
			t.Fatalf("empty value: %q %v", v.Bytes, err)
		}
		if _, err := c.Get(ctx, topic, "sku-2"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("deleted in a batch: %v", err)
		}
		// Raw NDJSON with value_base64 and delete.
		body := `{"key":"b-64","value_base64":"aGVsbG8="}` + "\n" + `{"key":"b-1","delete":true}` + "\n"
		r := httpDo(t, n, "POST", "/v1/topics/"+topic+"/messages", strings.NewReader(body), "Content-Type", "application/x-ndjson")
		var out struct{ Results []json.RawMessage }
		if r.status != 200 || json.Unmarshal(r.body, &out) != nil || len(out.Results) != 2 {
			t.Fatalf("NDJSON: %d %s", r.status, r.body)
		}
		checkWirePutResult(t, out.Results[0], topic, "b-64")
		if v, err := c.Get(ctx, topic, "b-64"); err != nil || string(v.Bytes) != "hello" {
			t.Fatalf("value_base64: %q %v", v.Bytes, err)
		}
		keys, next, err := c.Keys(ctx, topic, "", "", 0)
		if want := []string{"b-64", "b-bin", "b-empty"}; err != nil || next != "" || !slices.Equal(keys, want) {
			t.Fatalf("Keys(%s) = %v %q %v; want %v (deleted keys left out)", topic, keys, next, err, want)
		}
	})

	t.Run("keys paged", func(t *testing.T) {
		var msgs []client.Message
		for i := range 25 {
			msgs = append(msgs, client.Message{Key: fmt.Sprintf("p-%02d", i), Value: []byte("v")})
		}
		if _, err := c.PublishBatch(ctx, "paged", msgs); err != nil {
			t.Fatal(err)
		}
		var all []string
		after := ""
		for page := 0; ; page++ {
			keys, next, err := c.Keys(ctx, "paged", "p-", after, 10)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, keys...)
			if next == "" {
				if page != 2 || len(keys) != 5 {
					t.Fatalf("last page %d has %d keys", page, len(keys))
				}
				break
			}
			if len(keys) != 10 || next != keys[len(keys)-1] {
				t.Fatalf("page %d: %d keys, next %q", page, len(keys), next)
			}
			after = next
		}
		if len(all) != 25 || !slices.IsSorted(all) || all[0] != "p-00" {
			t.Fatalf("paged keys: %v", all)
		}
		r := httpDo(t, n, "GET", "/v1/topics/paged/keys?prefix=p-2&limit=3", nil)
		if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"keys":["p-20","p-21","p-22"],"next":"p-22"}` {
			t.Fatalf("GET keys: %d %s", r.status, r.body)
		}
	})

	t.Run("topics", func(t *testing.T) {
		const topic = "topics"
		publish(t, topic, "a", "1", "")
		publish(t, topic, "b", "2", "")
		if _, err := c.Delete(ctx, topic, "b"); err != nil {
			t.Fatal(err)
		}
		topics, err := c.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]client.TopicInfo{}
		for _, ti := range topics {
			got[ti.Name] = ti
			if strings.HasPrefix(ti.Name, "$") {
				t.Errorf("internal topic %q listed without internal=1", ti.Name)
			}
		}
		if ti := got[topic]; ti.Keys != 1 || ti.Messages != 3 {
			t.Fatalf("topic %s: %+v; want 1 key, 3 messages", topic, ti)
		}
		if !slices.IsSortedFunc(topics, func(a, b client.TopicInfo) int { return strings.Compare(a.Name, b.Name) }) {
			t.Fatalf("topics not sorted: %+v", topics)
		}
	})

	// subTopic publishes to topic a text value (sku-1, tag eu), a binary
	// one (b-bin), a keyless stream message and two deletes: 5 messages.
	subTopic := func(t *testing.T, topic string) client.PutResult {
		t.Helper()
		first := publish(t, topic, "sku-1", "12.50", "eu")
		if _, err := c.PublishBatch(ctx, topic, []client.Message{
			{Key: "b-bin", Value: []byte{0xff, 0x00, 0xfe, 'x'}},
			{Value: []byte("a stream message, no key")},
			{Key: "sku-1", Delete: true},
			{Key: "never-was", Delete: true},
		}); err != nil {
			t.Fatal(err)
		}
		return first
	}

	t.Run("subscribe from earliest", func(t *testing.T) {
		const topic = "sub-earliest"
		first := subTopic(t, topic)
		sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.FromEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		evs := readEvents(t, sub, 5)
		for i, ev := range evs {
			if ev.Offset != uint64(i) || ev.Topic != topic || ev.Origin != origin {
				t.Fatalf("event %d: %+v", i, ev)
			}
			if i > 0 && (ev.Seq <= evs[i-1].Seq || ev.HLC <= evs[i-1].HLC) {
				t.Fatalf("event %d: seq %d hlc %d after seq %d hlc %d", i, ev.Seq, ev.HLC, evs[i-1].Seq, evs[i-1].HLC)
			}
		}
		e0 := evs[0]
		if e0.Key != "sku-1" || string(e0.Value) != "12.50" || e0.Tag != "eu" || e0.Seq != first.Seq ||
			e0.HLC != first.HLC || !e0.Time.Equal(first.Time) || e0.Delete {
			t.Fatalf("first event %+v; published %+v", e0, first)
		}
		var deletes, keyless, binary int
		for _, ev := range evs {
			switch {
			case ev.Delete:
				deletes++
			case ev.Key == "":
				keyless++
			case ev.Key == "b-bin" && bytes.Equal(ev.Value, []byte{0xff, 0x00, 0xfe, 'x'}):
				binary++
			}
		}
		if deletes != 2 || keyless != 1 || binary != 1 {
			t.Fatalf("%d deletes, %d keyless, %d binary events; want 2, 1, 1", deletes, keyless, binary)
		}
	})

	t.Run("subscribe wire format", func(t *testing.T) {
		const topic = "sub-wire"
		subTopic(t, topic)
		// The raw stream: headers first, then one NDJSON line a message,
		// "value" for text and "value_base64" for other bytes.
		conn, err := net.Dial("unix", n.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /v1/topics/%s/subscribe?from=earliest HTTP/1.1\r\nHost: x\r\n\r\n", topic)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("subscribe: %d %v", res.StatusCode, res.Header)
		}
		lines := bufio.NewScanner(res.Body)
		var sawText, sawBase64 bool
		for range 5 {
			if !lines.Scan() {
				t.Fatalf("stream ended: %v", lines.Err())
			}
			line := lines.Bytes()
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("line %s: %v", line, err)
			}
			for _, f := range []string{"offset", "topic", "key", "tag", "delete", "origin", "seq", "hlc", "time"} {
				if _, ok := m[f]; !ok {
					t.Fatalf("line %s has no %q", line, f)
				}
			}
			if _, ok := m["value"]; ok {
				sawText = true
			}
			if m["key"] == "b-bin" {
				sawBase64 = m["value_base64"] == "/wD+eA=="
			}
			if !hexOrigin.MatchString(fmt.Sprint(m["origin"])) || !decimal.MatchString(fmt.Sprint(m["hlc"])) {
				t.Fatalf("line %s: identity fields", line)
			}
		}
		if !sawText || !sawBase64 {
			t.Fatalf("text values as value: %v; b-bin as value_base64 /wD+eA==: %v", sawText, sawBase64)
		}
	})

	t.Run("subscribe from latest", func(t *testing.T) {
		const topic = "sub-latest"
		subTopic(t, topic)
		sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		// Subscribe returned with the headers: nothing published from now
		// on may be missed, and nothing before it is delivered.
		res := publish(t, topic, "live", "now", "")
		ev := readEvents(t, sub, 1)[0]
		if ev.Key != "live" || ev.Seq != res.Seq || ev.Offset != 5 {
			t.Fatalf("latest: %+v; published %+v at offset 5", ev, res)
		}
	})

	t.Run("subscribe from an offset, a time, with tags", func(t *testing.T) {
		const topic = "sub-from"
		for _, m := range [][2]string{{"sku-1", "eu"}, {"sku-2", "us"}, {"sku-3", "eu"}, {"untagged", ""}, {"b-1", "eu"}} {
			publish(t, topic, m[0], "v", m[1])
		}
		sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.FromOffset(3)})
		if err != nil {
			t.Fatal(err)
		}
		if ev := readEvents(t, sub, 1)[0]; ev.Offset != 3 || ev.Key != "untagged" {
			t.Fatalf("from offset 3: %+v", ev)
		}
		sub.Close()

		// The HLC's wall part is in milliseconds: keep the mark clear of
		// the millisecond of the writes before it and after it.
		time.Sleep(5 * time.Millisecond)
		mark := time.Now()
		time.Sleep(5 * time.Millisecond)
		res := publish(t, topic, "after-mark", "x", "")
		sub, err = c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.FromTime(mark)})
		if err != nil {
			t.Fatal(err)
		}
		if ev := readEvents(t, sub, 1)[0]; ev.Seq != res.Seq {
			t.Fatalf("from time: %+v; want seq %d", ev, res.Seq)
		}
		sub.Close()

		sub, err = c.Subscribe(ctx, topic, client.SubscribeOptions{From: client.FromEarliest, Tags: []string{"us", "eu"}})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		for i, ev := range readEvents(t, sub, 4) {
			if want := []string{"sku-1", "sku-2", "sku-3", "b-1"}[i]; ev.Key != want || (ev.Tag != "eu" && ev.Tag != "us") {
				t.Fatalf("tagged event %d: %+v; want key %s", i, ev, want)
			}
		}
		publish(t, topic, "tagged-later", "x", "us")
		if ev := readEvents(t, sub, 1)[0]; ev.Key != "tagged-later" {
			t.Fatalf("tagged live event: %+v", ev)
		}
	})

	t.Run("cursors", func(t *testing.T) {
		const topic = "cursors"
		const published = 10
		for i := range published {
			publish(t, topic, fmt.Sprintf("k-%d", i), "v", "")
		}
		cur, err := c.SetCursor(ctx, "web-1", topic, 5)
		if err != nil || cur.Name != "web-1" || cur.Topic != topic || cur.Offset != 5 || cur.Lag != cur.End-5 ||
			cur.OwnerUID == nil || *cur.OwnerUID != uint32(os.Getuid()) {
			t.Fatalf("SetCursor: %+v %v", cur, err)
		}
		if cur, err = c.GetCursor(ctx, "web-1"); err != nil || cur.Offset != 5 || cur.Topic != topic {
			t.Fatalf("GetCursor: %+v %v", cur, err)
		}
		want := fmt.Sprintf(`{"name":"web-2","topic":%q,"offset":2,"end":%d,"lag":%d,"owner_uid":%d}`, topic, published, published-2, os.Getuid())
		r := httpDo(t, n, "POST", "/v1/cursors/web-2", strings.NewReader(`{"topic":"`+topic+`","offset":2}`))
		if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
			t.Fatalf("POST cursor: %d %s; want %s", r.status, r.body, want)
		}
		r = httpDo(t, n, "GET", "/v1/cursors/web-2", nil)
		if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
			t.Fatalf("GET cursor: %d %s", r.status, r.body)
		}
		if cs, err := c.Cursors(ctx); err != nil || len(cs) < 2 {
			t.Fatalf("Cursors: %+v %v", cs, err)
		}
		// A named subscription without from= resumes at the cursor.
		sub, err := c.Subscribe(ctx, topic, client.SubscribeOptions{Name: "web-1"})
		if err != nil {
			t.Fatal(err)
		}
		evs := readEvents(t, sub, 2)
		if evs[0].Offset != 5 {
			t.Fatalf("resumed at %d; want 5", evs[0].Offset)
		}
		// Client acknowledgement moves the cursor past the event.
		if err := sub.Ack(ctx, evs[1]); err != nil {
			t.Fatal(err)
		}
		sub.Close()
		if cur, err = c.GetCursor(ctx, "web-1"); err != nil || cur.Offset != 7 {
			t.Fatalf("after Ack of offset 6: %+v %v", cur, err)
		}
		// ack=auto: the daemon moves it as it writes lines.
		sub, err = c.Subscribe(ctx, topic, client.SubscribeOptions{Name: "auto-1", From: client.FromEarliest, AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		readEvents(t, sub, published)
		sub.Close()
		testkit.Until(t, 5*time.Second, "the auto-acked cursor", func() string {
			cur, err = c.GetCursor(ctx, "auto-1")
			if err != nil || cur.Offset != published {
				return fmt.Sprintf("%+v %v; want offset %d", cur, err, published)
			}
			return ""
		})
	})

	t.Run("status counts", func(t *testing.T) {
		before, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// 3 records, 2 new live keys: one key written twice.
		publish(t, "counts", "a", "1", "")
		publish(t, "counts", "a", "2", "")
		publish(t, "counts", "b", "3", "")
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Store.Records != before.Store.Records+3 || st.Store.Keys != before.Store.Keys+2 {
			t.Fatalf("status store %+v after %+v; want 3 records and 2 keys more", st.Store, before.Store)
		}
	})
}
