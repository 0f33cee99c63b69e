package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

func TestPutGetDelete(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	origin := wire.FormatOrigin(td.d.Store().Origin())

	before := time.Now().Add(-time.Second)
	pr := td.put("prices", "sku%2F1", "12.50", "Cachecast-Tag", "eu")
	if pr.Topic != "prices" || pr.Key != "sku/1" || pr.Origin != origin || pr.Seq != 1 || pr.Status != "ok" {
		t.Fatalf("PUT result %+v", pr)
	}
	hlc, err := strconv.ParseUint(pr.HLC, 10, 64)
	if err != nil {
		t.Fatalf("hlc %q: %v", pr.HLC, err)
	}
	ts, err := time.Parse(time.RFC3339, pr.Time)
	if err != nil || ts.Before(before) || ts.After(time.Now().Add(time.Second)) || !strings.Contains(pr.Time, ".") {
		t.Fatalf("time %q: %v", pr.Time, err)
	}
	if len(pr.Origin) != 16 {
		t.Fatalf("origin %q is not 16 hex digits", pr.Origin)
	}

	r := td.do("GET", "/v1/topics/prices/keys/sku%2F1", nil)
	if r.status != 200 || string(r.body) != "12.50" {
		t.Fatalf("GET: %d %q", r.status, r.body)
	}
	for h, want := range map[string]string{
		"Content-Type": "application/octet-stream", "Cachecast-Origin": origin, "Cachecast-Seq": "1",
		"Cachecast-Hlc": strconv.FormatUint(hlc, 10), "Cachecast-Time": pr.Time, "Cachecast-Tag": "eu",
	} {
		if got := r.header.Get(h); got != want {
			t.Errorf("GET header %s = %q; want %q", h, got, want)
		}
	}
	// An unescaped slash reaches the same key.
	if r := td.do("GET", "/v1/topics/prices/keys/sku/1", nil); r.status != 200 || string(r.body) != "12.50" {
		t.Fatalf("GET with a raw slash: %d %q", r.status, r.body)
	}
	// HEAD: the headers, no body.
	if r := td.do("HEAD", "/v1/topics/prices/keys/sku%2F1", nil); r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "5" {
		t.Fatalf("HEAD: %d %q %v", r.status, r.body, r.header)
	}
	// Overwrite, then an empty value.
	td.put("prices", "sku%2F1", "13.00")
	if r := td.do("GET", "/v1/topics/prices/keys/sku%2F1", nil); string(r.body) != "13.00" || r.header.Get("Cachecast-Tag") != "" {
		t.Fatalf("GET after overwrite: %q tag %q", r.body, r.header.Get("Cachecast-Tag"))
	}
	td.put("prices", "empty", "")
	if r := td.do("GET", "/v1/topics/prices/keys/empty", nil); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("GET empty value: %d %q", r.status, r.body)
	}
	// A key of any UTF-8 (percent-encoded in the path).
	key := "ключ 🔑?#%"
	td.put("prices", url.PathEscape(key), "u")
	if r := td.do("GET", "/v1/topics/prices/keys/"+url.PathEscape(key), nil); string(r.body) != "u" {
		t.Fatalf("GET unicode key: %d %q", r.status, r.body)
	}

	// DELETE publishes a tombstone; the key is gone.
	r = td.do("DELETE", "/v1/topics/prices/keys/sku%2F1", nil)
	var del wire.PutResult
	if err := json.Unmarshal(r.body, &del); r.status != 200 || err != nil || del.Key != "sku/1" || del.Status != "ok" || del.Seq <= pr.Seq {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/v1/topics/prices/keys/sku%2F1", nil); r.status != 404 || r.errCode() != "not_found" ||
		r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET after DELETE: %d %s", r.status, r.body)
	}
}

func TestPostMessages(t *testing.T) {
	td := startDaemon(t, testConfig(t))

	// One JSON object.
	r := td.do("POST", "/v1/topics/t/messages", strings.NewReader(`{"key":"a","tag":"x","value":"1"}`),
		"Content-Type", "application/json")
	var one struct{ Results []wire.PutResult }
	if err := json.Unmarshal(r.body, &one); r.status != 200 || err != nil || len(one.Results) != 1 || one.Results[0].Key != "a" {
		t.Fatalf("POST one: %d %s", r.status, r.body)
	}
	// An NDJSON batch: values, binary, a stream message, a delete.
	batch := `{"key":"b","value":"2"}
{"key":"c","value_base64":"AP8="}
{"value":"no key: a stream message"}
{"key":"a","delete":true}
`
	r = td.do("POST", "/v1/topics/t/messages", strings.NewReader(batch), "Content-Type", "application/x-ndjson")
	var many struct{ Results []wire.PutResult }
	if err := json.Unmarshal(r.body, &many); r.status != 200 || err != nil || len(many.Results) != 4 {
		t.Fatalf("POST batch: %d %s", r.status, r.body)
	}
	for i, want := range []string{"b", "c", "", "a"} {
		if res := many.Results[i]; res.Key != want || res.Seq != uint64(2+i) || res.Topic != "t" || res.Status != "ok" {
			t.Fatalf("result %d = %+v", i, res)
		}
	}
	if r := td.do("GET", "/v1/topics/t/keys/c", nil); !bytes.Equal(r.body, []byte{0, 0xff}) {
		t.Fatalf("binary value: %q", r.body)
	}
	if r := td.do("GET", "/v1/topics/t/keys/a", nil); r.status != 404 {
		t.Fatalf("deleted key: %d", r.status)
	}
	// Chunked (no Content-Length) works too.
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, `{"key":"d",`)
		io.WriteString(pw, `"value":"4"}`)
		pw.Close()
	}()
	if r := td.do("POST", "/v1/topics/t/messages", pr); r.status != 200 {
		t.Fatalf("chunked POST: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/v1/topics/t/keys/d", nil); string(r.body) != "4" {
		t.Fatalf("chunked value: %q", r.body)
	}
}

func TestListKeysAndTopics(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	var batch strings.Builder
	for i := range 25 {
		fmt.Fprintf(&batch, `{"key":"k%02d","value":"v"}`+"\n", i)
	}
	batch.WriteString(`{"key":"other","value":"v"}` + "\n")
	if r := td.do("POST", "/v1/topics/t/messages", strings.NewReader(batch.String()), "Content-Type", "application/x-ndjson"); r.status != 200 {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	td.put("u", "x", "1")
	td.do("DELETE", "/v1/topics/u/keys/x", nil)

	type page struct {
		Keys []string
		Next string
	}
	list := func(q string) page {
		t.Helper()
		r := td.do("GET", "/v1/topics/t/keys?"+q, nil)
		var p page
		if err := json.Unmarshal(r.body, &p); r.status != 200 || err != nil {
			t.Fatalf("list %s: %d %s", q, r.status, r.body)
		}
		return p
	}
	// Page through k00..k24 ten at a time.
	var all []string
	after := ""
	for {
		p := list("prefix=k&limit=10&after=" + url.QueryEscape(after))
		all = append(all, p.Keys...)
		if p.Next == "" {
			break
		}
		if p.Next != p.Keys[len(p.Keys)-1] {
			t.Fatalf("next %q is not the last key of the page %v", p.Next, p.Keys)
		}
		after = p.Next
	}
	if len(all) != 25 || all[0] != "k00" || all[24] != "k24" {
		t.Fatalf("paged keys: %v", all)
	}
	if p := list(""); len(p.Keys) != 26 || p.Next != "" {
		t.Fatalf("default list: %+v", p)
	}
	if p := list("prefix=zzz"); p.Keys == nil || len(p.Keys) != 0 {
		t.Fatalf("empty list must be [] not null: %+v", p)
	}
	if r := td.do("GET", "/v1/topics/t/keys?prefix=zzz", nil); !strings.Contains(string(r.body), `"keys":[]`) {
		t.Fatalf("empty list body: %s", r.body)
	}

	r := td.do("GET", "/v1/topics", nil)
	var topics struct {
		Topics []struct {
			Name     string
			Keys     int
			Messages uint64
		}
	}
	if err := json.Unmarshal(r.body, &topics); r.status != 200 || err != nil {
		t.Fatalf("topics: %d %s", r.status, r.body)
	}
	if len(topics.Topics) != 2 || topics.Topics[0].Name != "t" || topics.Topics[0].Keys != 26 || topics.Topics[0].Messages != 26 ||
		topics.Topics[1].Name != "u" || topics.Topics[1].Keys != 0 || topics.Topics[1].Messages != 2 {
		t.Fatalf("topics: %s", r.body)
	}
}

func TestStatusHealthReady(t *testing.T) {
	cfg := testConfig(t)
	cfg.Flush = "sync"
	td := startDaemon(t, cfg)
	td.put("t", "k", "v")
	r := td.do("GET", "/v1/status", nil)
	var s wire.Status
	if err := json.Unmarshal(r.body, &s); r.status != 200 || err != nil {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	if s.Node.Name != "test-node" || s.Node.Origin != wire.FormatOrigin(td.d.Store().Origin()) || s.Node.Version != Version ||
		s.Flush != "sync" || s.UptimeSeconds <= 0 || s.Store.Records != 1 || s.Store.Keys != 1 || s.Store.WritePos <= 0 ||
		s.Store.Segments < 1 || s.Store.FlushedPos != s.Store.WritePos {
		t.Fatalf("status: %s", r.body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := td.do("GET", p, nil); r.status != 200 || string(r.body) != `{"status":"ok"}`+"\n" {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
}

func TestCursors(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	if r := td.do("GET", "/v1/cursors/c1", nil); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("unknown cursor: %d %s", r.status, r.body)
	}
	for i := range 20 {
		td.put("t", fmt.Sprint("k", i), "v")
	}
	me := os.Getuid()
	want := fmt.Sprintf(`{"name":"c1","topic":"t","offset":13,"end":20,"lag":7,"owner_uid":%d}`, me)
	r := td.do("POST", "/v1/cursors/c1", strings.NewReader(`{"topic":"t","offset":13}`))
	if r.status != 200 || string(r.body) != want+"\n" {
		t.Fatalf("set cursor: %d %s; want %s", r.status, r.body, want)
	}
	if r := td.do("GET", "/v1/cursors/c1", nil); r.status != 200 || string(r.body) != want+"\n" {
		t.Fatalf("get cursor: %d %s", r.status, r.body)
	}
	td.do("POST", "/v1/cursors/c0", strings.NewReader(`{"topic":"other","offset":0}`))
	list := fmt.Sprintf(`{"cursors":[{"name":"c0","topic":"other","offset":0,"end":0,"lag":0,"owner_uid":%d},%s]}`, me, want)
	if r := td.do("GET", "/v1/cursors", nil); r.status != 200 || string(r.body) != list+"\n" {
		t.Fatalf("list cursors: %d %s; want %s", r.status, r.body, list)
	}
	if r := td.do("DELETE", "/v1/cursors/c0", nil); r.status != 200 {
		t.Fatalf("delete cursor: %d %s", r.status, r.body)
	}
	if r := td.do("DELETE", "/v1/cursors/c0", nil); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("delete a deleted cursor: %d %s", r.status, r.body)
	}
	if cs := td.d.Store().Cursors(); len(cs) != 1 || cs[0].Name != "c1" {
		t.Fatalf("after the delete: %+v", cs)
	}
	for _, tc := range []struct{ body, code string }{
		{`{"topic":"t"}`, "bad_request"},
		{`{"topic":"bad topic","offset":1}`, "invalid_name"},
		{`{"topic":"t","offset":-1}`, "bad_json"},
		{`{"topic":"t","offset":1,"x":2}`, "bad_json"},
		{`{"topic":"t","offset":1}{}`, "bad_json"},
	} {
		if r := td.do("POST", "/v1/cursors/c1", strings.NewReader(tc.body)); r.errCode() != tc.code {
			t.Errorf("cursor body %s: %d %s; want %s", tc.body, r.status, r.body, tc.code)
		}
	}
	if r := td.do("GET", "/v1/cursors/c1", nil); !strings.Contains(string(r.body), `"offset":13`) {
		t.Fatalf("cursor changed by bad input: %s", r.body)
	}
}

// TestCursorBounds checks --max-cursors and --max-cursors-per-uid at the
// API: past either, a new cursor (set, or ack=auto) is 429 too_many naming
// the flag, and nothing is made; an admin (here: the daemon's own user)
// is bound by --max-cursors only.
func TestCursorBounds(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxCursors = 3
	cfg.MaxCursorsPerUID = 1
	td := startDaemon(t, cfg)
	for i := range 3 {
		if r := td.do("POST", fmt.Sprintf("/v1/cursors/c%d", i), strings.NewReader(`{"topic":"t","offset":0}`)); r.status != 200 {
			t.Fatalf("cursor %d: %d %s", i, r.status, r.body)
		}
	}
	r := td.do("POST", "/v1/cursors/c3", strings.NewReader(`{"topic":"t","offset":0}`))
	if r.status != 429 || r.errCode() != "too_many" || !strings.Contains(string(r.body), "--max-cursors") {
		t.Fatalf("a cursor past --max-cursors: %d %s", r.status, r.body)
	}
	r = td.do("GET", "/v1/topics/t/subscribe?name=c4&ack=auto", nil)
	if r.status != 429 || r.errCode() != "too_many" {
		t.Fatalf("ack=auto past --max-cursors: %d %s", r.status, r.body)
	}
	for i := range 5 {
		td.put("t", fmt.Sprint("k", i), "v") // offset 5 is then the end
	}
	if r := td.do("POST", "/v1/cursors/c2", strings.NewReader(`{"topic":"t","offset":5}`)); r.status != 200 {
		t.Fatalf("moving a cursor at the bound: %d %s", r.status, r.body)
	}
	if n := len(td.d.Store().Cursors()); n != 3 {
		t.Fatalf("%d cursors, bound 3", n)
	}
}

// subscription reads an NDJSON stream line by line.
type subscription struct {
	t      *testing.T
	res    *http.Response
	lines  chan map[string]any
	cancel context.CancelFunc
}

func (td *testDaemon) subscribe(query string) *subscription {
	td.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://cachecast/v1/topics/"+query, nil)
	c := &http.Client{Transport: td.c.Transport} // no client timeout on a stream
	res, err := c.Do(req)
	if err != nil {
		cancel()
		td.t.Fatalf("subscribe %s: %v", query, err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		td.t.Fatalf("subscribe %s: %d %s", query, res.StatusCode, b)
	}
	s := &subscription{t: td.t, res: res, lines: make(chan map[string]any, 1000), cancel: cancel}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"bad-line": sc.Text()}
			}
			s.lines <- m
		}
	}()
	td.t.Cleanup(s.close)
	return s
}

func (s *subscription) close() {
	s.cancel()
	s.res.Body.Close()
	for range s.lines {
	}
}

// next returns the next line, failing after a timeout.
func (s *subscription) next() map[string]any {
	s.t.Helper()
	select {
	case m, ok := <-s.lines:
		if !ok {
			s.t.Fatal("stream ended")
		}
		return m
	case <-time.After(5 * time.Second):
		s.t.Fatal("no line within 5s")
	}
	return nil
}

func TestSubscribe(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	td.put("t", "a", "1", "Cachecast-Tag", "red")
	td.put("t", "b", "2", "Cachecast-Tag", "blue")
	td.do("POST", "/v1/topics/t/messages", strings.NewReader(`{"key":"c","value_base64":"/w=="}`))

	t.Run("earliest", func(t *testing.T) {
		s := td.subscribe("t/subscribe?from=earliest")
		m := s.next()
		if m["offset"] != 0.0 || m["topic"] != "t" || m["key"] != "a" || m["tag"] != "red" || m["value"] != "1" ||
			m["delete"] != false || m["seq"] != 1.0 || m["origin"] != wire.FormatOrigin(td.d.Store().Origin()) {
			t.Fatalf("line %v", m)
		}
		if _, err := strconv.ParseUint(m["hlc"].(string), 10, 64); err != nil {
			t.Fatalf("hlc %v", m["hlc"])
		}
		if _, err := time.Parse(time.RFC3339, m["time"].(string)); err != nil {
			t.Fatalf("time %v", m["time"])
		}
		if m := s.next(); m["key"] != "b" || m["offset"] != 1.0 {
			t.Fatalf("line %v", m)
		}
		if m := s.next(); m["key"] != "c" || m["value_base64"] != "/w==" || m["value"] != nil {
			t.Fatalf("binary line %v", m)
		}
		td.do("DELETE", "/v1/topics/t/keys/a", nil)
		if m := s.next(); m["key"] != "a" || m["delete"] != true || m["offset"] != 3.0 {
			t.Fatalf("tombstone line %v", m)
		}
	})
	t.Run("latest misses nothing after the headers", func(t *testing.T) {
		s := td.subscribe("t/subscribe") // default: latest
		td.put("t", "d", "4")
		if m := s.next(); m["key"] != "d" || m["offset"] != 4.0 {
			t.Fatalf("line %v", m)
		}
	})
	t.Run("offset and tags", func(t *testing.T) {
		s := td.subscribe("t/subscribe?from=1&tags=" + url.QueryEscape("red || blue"))
		if m := s.next(); m["key"] != "b" {
			t.Fatalf("line %v", m)
		}
		td.put("t", "e", "5", "Cachecast-Tag", "green")
		td.put("t", "f", "6", "Cachecast-Tag", "red")
		if m := s.next(); m["key"] != "f" {
			t.Fatalf("tag filter let through %v", m)
		}
	})
	t.Run("time", func(t *testing.T) {
		s := td.subscribe("t/subscribe?from=" + url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)))
		if m := s.next(); m["key"] != "a" || m["offset"] != 0.0 {
			t.Fatalf("line %v", m)
		}
	})
	t.Run("named cursor with ack=auto resumes", func(t *testing.T) {
		s := td.subscribe("t/subscribe?from=earliest&name=worker&ack=auto")
		for i := range 3 {
			if m := s.next(); m["offset"] != float64(i) {
				t.Fatalf("line %d: %v", i, m)
			}
		}
		// The cursor follows the written lines.
		testkit.Until(t, 5*time.Second, "the cursor to follow the lines", func() string {
			r := td.do("GET", "/v1/cursors/worker", nil)
			var c wire.Cursor
			_ = json.Unmarshal(r.body, &c)
			if c.Topic != "t" || c.Offset < 3 {
				return "cursor did not advance: " + string(r.body)
			}
			return ""
		})
		s.close()
		// Move the cursor back by hand; a new stream without from resumes there.
		td.do("POST", "/v1/cursors/worker", strings.NewReader(`{"topic":"t","offset":5}`))
		s2 := td.subscribe("t/subscribe?name=worker")
		if m := s2.next(); m["offset"] != 5.0 {
			t.Fatalf("resumed at %v; want offset 5", m)
		}
	})
	t.Run("cursor of another topic", func(t *testing.T) {
		td.do("POST", "/v1/cursors/elsewhere", strings.NewReader(`{"topic":"other","offset":0}`))
		if r := td.do("GET", "/v1/topics/t/subscribe?name=elsewhere", nil); r.status != 400 || r.errCode() != "bad_request" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}

// A subscriber that does not read slows only itself: publishers go on, and
// when it reads again it gets every message, in order.
// TestSubscribeLinger: a stream with linger=300ms delivers every message,
// in order, and a message published once the stream caught up waits out
// the linger (gathered with what else arrives meanwhile); a linger out of
// bounds is refused.
func TestSubscribeLinger(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	const linger = 300 * time.Millisecond
	s := td.subscribe("t/subscribe?from=latest&linger=300ms")
	td.put("t", "k", "0")
	if m := s.next(); m["value"] != "0" {
		t.Fatalf("first line %v", m)
	}
	first := time.Now() // the stream wrote it, and lingers from then on
	for i := 1; i <= 3; i++ {
		td.put("t", "k", strconv.Itoa(i))
	}
	for i := 1; i <= 3; i++ {
		if m := s.next(); m["value"] != strconv.Itoa(i) {
			t.Fatalf("line %d: %v", i, m)
		}
	}
	if waited := time.Since(first); waited < linger-20*time.Millisecond {
		t.Fatalf("the next lines came %v after the first; want the linger, %v, first", waited, linger)
	}
	for _, q := range []string{"linger=2s", "linger=-1ms", "linger=soon"} {
		if r := td.do("GET", "/v1/topics/t/subscribe?"+q, nil); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "linger") {
			t.Errorf("%s: %d %s; want 400 naming linger", q, r.status, r.body)
		}
	}
}

func TestSubscribeBackpressure(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	s := td.subscribe("t/subscribe")
	// Stop reading: the goroutine in subscribe fills s.lines (1000) and the
	// socket buffers, then the handler blocks in Write.
	value := strings.Repeat("v", 4000)
	const n = 1500
	for i := 0; i < n; i += 100 {
		var b strings.Builder
		for j := i; j < i+100; j++ {
			fmt.Fprintf(&b, `{"key":"k%d","value":"%s"}`+"\n", j, value)
		}
		start := time.Now()
		if r := td.do("POST", "/v1/topics/t/messages", strings.NewReader(b.String()), "Content-Type", "application/x-ndjson"); r.status != 200 {
			t.Fatalf("publish: %d %s", r.status, r.body)
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("a stalled subscriber slowed publishing: %v", time.Since(start))
		}
	}
	// The reader really was stalled: its buffer is full.
	testkit.Until(t, 5*time.Second, "the stalled reader's buffer to fill", func() string {
		if len(s.lines) < cap(s.lines) {
			return fmt.Sprintf("the stream's reader holds %d lines; the test wants it full (%d)", len(s.lines), cap(s.lines))
		}
		return ""
	})
	for i := range n {
		if m := s.next(); m["offset"] != float64(i) {
			t.Fatalf("line %d: %v", i, m["offset"])
		}
	}
}

func TestRestartKeepsValuesAndCursors(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	for i := range 50 {
		td.put("t", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i))
	}
	td.do("POST", "/v1/cursors/c", strings.NewReader(`{"topic":"t","offset":7}`))
	origin := td.d.Store().Origin()
	td.stop()
	if _, err := os.Stat(cfg.Socket); err == nil {
		t.Fatalf("socket %s still there after shutdown", cfg.Socket)
	}

	td2 := startDaemon(t, cfg)
	if td2.d.Store().Origin() != origin {
		t.Fatal("origin changed across a restart")
	}
	for i := range 50 {
		if r := td2.do("GET", "/v1/topics/t/keys/k"+strconv.Itoa(i), nil); string(r.body) != "v"+strconv.Itoa(i) {
			t.Fatalf("k%d after restart: %d %q", i, r.status, r.body)
		}
	}
	if r := td2.do("GET", "/v1/cursors/c", nil); !strings.Contains(string(r.body), `"offset":7`) {
		t.Fatalf("cursor after restart: %s", r.body)
	}
	if pr := td2.put("t", "new", "x"); pr.Seq != 51 {
		t.Fatalf("seq after restart %d; want 51", pr.Seq)
	}
}

// TestSubscribeServerSentEvents: with Accept: text/event-stream the stream
// is server-sent events, one event per message carrying the same object.
func TestSubscribeServerSentEvents(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	td.put("t", "a", "1")
	td.put("t", "b", "2")
	req, err := http.NewRequest("GET", "http://cachecast/v1/topics/t/subscribe?from=earliest", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := td.c.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	for i, key := range []string{"a", "b"} {
		var id, data string
		for sc.Scan() && sc.Text() != "" {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected line %q", line)
			}
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %d data %q: %v", i, data, err)
		}
		if id != strconv.Itoa(i) || m["key"] != key || m["offset"] != float64(i) {
			t.Fatalf("event %d: id %q data %v", i, id, m)
		}
	}
}
