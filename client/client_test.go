package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/client/clienttest"
)

// These tests run the client against clienttest.Server: an in-memory
// double of the daemon's wire format on a real Unix socket. They check the
// client's encoding and decoding of that format; TestContract runs those
// that hold for any daemon once more against a real one (contract_test.go),
// and the daemon itself is tested end to end in test/.

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// checkStamp checks a result's identity against the server's and the clock.
func checkStamp(t *testing.T, srv backend, r client.PutResult) {
	t.Helper()
	if r.Origin != srv.Origin() {
		t.Errorf("origin %016x, want %016x", r.Origin, srv.Origin())
	}
	if r.Seq == 0 {
		t.Error("seq 0")
	}
	if r.HLC < 1<<53 {
		t.Errorf("hlc %d is below 2^53: it was not parsed from its decimal string", r.HLC)
	}
	if got, want := r.Time.UnixMilli(), int64(r.HLC>>16); got != want {
		t.Errorf("time %v (%d ms) is not the HLC's wall part %d ms", r.Time, got, want)
	}
	if d := time.Since(r.Time); d < -time.Minute || d > time.Minute {
		t.Errorf("time %v is far from now", r.Time)
	}
	if r.Status != client.StatusOK || !r.OK() {
		t.Errorf("status %q", r.Status)
	}
}

func TestPublishGet(t *testing.T) {
	srv, c := newPair(t)
	tests := []struct {
		name, key, tag string
		value          []byte
	}{
		{"plain", "sku-1", "", []byte("12.50")},
		{"tag", "sku-2", "eu.retail_1", []byte("9.99")},
		{"empty value", "empty", "", []byte{}},
		{"nil value", "nil", "", nil},
		{"binary value", "bin", "", []byte{0xff, 0x00, 0xfe, '\n', 0x80}},
		{"slash in key", "a/b/c", "", []byte("x")},
		{"space and symbols", "a b?c#d%e&f=g+h", "", []byte("x")},
		{"unicode key", "prix/é€😀", "", []byte("x")},
		{"dot key", ".", "", []byte("dot")},
		{"dotdot key", "..", "", []byte("dotdot")},
		{"dot segments", "../x/./y", "", []byte("segments")},
		{"percent-encoded looking", "a%2Fb", "", []byte("literal")},
		{"long key", strings.Repeat("k", 1024), "", []byte("long")},
		{"big value", "big", "", bytes.Repeat([]byte("0123456789"), 50_000)},
	}
	var lastSeq uint64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.Publish(ctx(t), "prices", tt.key, tt.value, tt.tag)
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			checkStamp(t, srv, r)
			if r.Topic != "prices" || r.Key != tt.key {
				t.Errorf("result names %q/%q, want prices/%q", r.Topic, r.Key, tt.key)
			}
			if r.Seq != lastSeq+1 {
				t.Errorf("seq %d, want %d", r.Seq, lastSeq+1)
			}
			lastSeq = r.Seq
			v, err := c.Get(ctx(t), "prices", tt.key)
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if !bytes.Equal(v.Bytes, tt.value) {
				t.Errorf("value %q, want %q", trunc(v.Bytes), trunc(tt.value))
			}
			if v.Tag != tt.tag || v.Origin != r.Origin || v.Seq != r.Seq || v.HLC != r.HLC || !v.Time.Equal(r.Time) {
				t.Errorf("get identity %+v, want tag %q and that of %+v", v, tt.tag, r)
			}
		})
	}
	if n := srv.Requests("PUT /v1/topics/{topic}/keys/{key}"); n != len(tests) {
		t.Errorf("%d PUT requests, want %d", n, len(tests))
	}
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func TestGetNotFound(t *testing.T) {
	_, c := newPair(t)
	_, err := c.Get(ctx(t), "prices", "missing")
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != client.CodeNotFound || ae.Message == "" {
		t.Fatalf("err %#v, want an *APIError 404 not_found with a message", err)
	}
}

func TestDelete(t *testing.T) {
	srv, c := newPair(t)
	p, err := c.Publish(ctx(t), "prices", "k/1", []byte("v"), "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Delete(ctx(t), "prices", "k/1")
	if err != nil {
		t.Fatal(err)
	}
	checkStamp(t, srv, d)
	if d.Seq != p.Seq+1 || d.HLC <= p.HLC || d.Key != "k/1" {
		t.Errorf("delete result %+v after publish %+v", d, p)
	}
	if _, err := c.Get(ctx(t), "prices", "k/1"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after delete: %v, want ErrNotFound", err)
	}
	// Deleting what does not exist still publishes a tombstone.
	if _, err := c.Delete(ctx(t), "prices", "never"); err != nil {
		t.Errorf("delete of a missing key: %v", err)
	}
	if n := srv.Messages("prices"); n != 3 {
		t.Errorf("%d messages, want 3", n)
	}
}

func TestPublishBatch(t *testing.T) {
	srv, c := newPair(t)
	msgs := []client.Message{
		{Key: "a", Value: []byte("text value")},
		{Key: "b", Tag: "t1", Value: []byte{0, 1, 2, 0xff}},
		{Key: "c", Value: nil},
		{Key: "quote\"back\\slash<>&", Value: []byte("\"json\"\n\t\u2028")},
		{Key: "", Tag: "stream", Value: []byte("no key")},
		{Key: "a", Delete: true},
	}
	rs, err := c.PublishBatch(ctx(t), "batch", msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(rs), len(msgs))
	}
	for i, r := range rs {
		checkStamp(t, srv, r)
		if r.Seq != uint64(i+1) || r.Key != msgs[i].Key || r.Topic != "batch" {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	for _, m := range msgs[1:4] {
		v, err := c.Get(ctx(t), "batch", m.Key)
		if err != nil {
			t.Fatalf("get %q: %v", m.Key, err)
		}
		if !bytes.Equal(v.Bytes, m.Value) || v.Tag != m.Tag {
			t.Errorf("get %q: %q tag %q, want %q tag %q", m.Key, v.Bytes, v.Tag, m.Value, m.Tag)
		}
	}
	if _, err := c.Get(ctx(t), "batch", "a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a was deleted in the batch; get: %v", err)
	}
	if n := srv.Requests("POST /v1/topics/{topic}/messages"); n != 1 {
		t.Errorf("%d POST requests, want 1", n)
	}

	// All or nothing: a bad tag on the last line refuses the whole batch.
	bad := []client.Message{{Key: "x", Value: []byte("1")}, {Key: "y", Tag: "bad tag", Value: []byte("2")}}
	_, err = c.PublishBatch(ctx(t), "batch", bad)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != client.CodeInvalidName {
		t.Fatalf("bad batch: %v, want 400 invalid_name", err)
	}
	if n := srv.Messages("batch"); n != len(msgs) {
		t.Errorf("%d messages after a refused batch, want %d", n, len(msgs))
	}
	if rs, err := c.PublishBatch(ctx(t), "batch", nil); err != nil || rs != nil {
		t.Errorf("empty batch: %v %v", rs, err)
	}
}

func TestPublishWithoutKey(t *testing.T) {
	srv, c := newPair(t)
	r, err := c.Publish(ctx(t), "events", "", []byte("plain stream message"), "audit")
	if err != nil {
		t.Fatal(err)
	}
	checkStamp(t, srv, r)
	if r.Key != "" || r.Topic != "events" {
		t.Errorf("result %+v", r)
	}
	if n := srv.Requests("POST /v1/topics/{topic}/messages"); n != 1 {
		t.Errorf("a keyless publish must go through POST messages; %d POSTs", n)
	}
	if n := srv.Messages("events"); n != 1 {
		t.Errorf("%d messages", n)
	}
}

func TestKeysPaging(t *testing.T) {
	_, c := newPair(t)
	var msgs []client.Message
	var want []string
	for i := range 25 {
		k := fmt.Sprintf("sku/%02d", i)
		msgs = append(msgs, client.Message{Key: k, Value: []byte("v")})
		want = append(want, k)
	}
	msgs = append(msgs, client.Message{Key: "other", Value: []byte("v")}, client.Message{Key: "sku/07", Delete: true})
	want = append(want[:7], want[8:]...)
	if _, err := c.PublishBatch(ctx(t), "p", msgs); err != nil {
		t.Fatal(err)
	}
	var got []string
	after, pages := "", 0
	for {
		keys, next, err := c.Keys(ctx(t), "p", "sku/", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, keys...)
		if next == "" {
			break
		}
		if next != keys[len(keys)-1] {
			t.Errorf("next %q is not the page's last key %q", next, keys[len(keys)-1])
		}
		after = next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
		t.Errorf("keys over %d pages: %v, want %v", pages, got, want)
	}
	all, next, err := c.Keys(ctx(t), "p", "", "", 0)
	if err != nil || next != "" || len(all) != 25 || !sort.StringsAreSorted(all) {
		t.Errorf("all keys: %v next %q err %v", all, next, err)
	}
	none, _, err := c.Keys(ctx(t), "nothing-here", "", "", 0)
	if err != nil || len(none) != 0 {
		t.Errorf("keys of an unknown topic: %v %v", none, err)
	}
}

func TestTopicsStatusProbes(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := client.New(srv.Socket)
	defer c.Close()
	for _, tp := range []string{"b", "a"} {
		if _, err := c.Publish(ctx(t), tp, "k", []byte("v"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctx(t), "a", "k2", []byte("v"), ""); err != nil {
		t.Fatal(err)
	}
	topics, err := c.Topics(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []client.TopicInfo{{Name: "a", Keys: 2, Messages: 2}, {Name: "b", Keys: 1, Messages: 1}}
	if fmt.Sprint(topics) != fmt.Sprint(want) {
		t.Errorf("topics %+v, want %+v", topics, want)
	}

	st, err := c.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Node.Name != "clienttest" || st.Node.Origin != srv.Origin() || st.Node.Version != "test" ||
		st.Flush != "async" || st.Store.Records != 3 || st.Store.Keys != 3 || st.Store.Segments != 1 ||
		st.Store.LogBytes != 64<<20 || st.Uptime <= 0 {
		t.Errorf("status %+v", st)
	}
	var raw map[string]any
	if err := json.Unmarshal(st.Raw, &raw); err != nil || raw["cluster"] == nil {
		t.Errorf("status Raw lacks the fields the client does not know: %s", st.Raw)
	}

	if err := c.Healthz(ctx(t)); err != nil {
		t.Errorf("healthz: %v", err)
	}
	if err := c.Readyz(ctx(t)); err != nil {
		t.Errorf("readyz: %v", err)
	}
	srv.SetHealth(errors.New("last flush failed"))
	srv.SetReady(errors.New("recovering"))
	for name, probe := range map[string]func(context.Context) error{"healthz": c.Healthz, "readyz": c.Readyz} {
		err := probe(ctx(t))
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 503 || ae.Code != client.CodeUnavailable || ae.Message == "" {
			t.Errorf("%s: %v, want 503 unavailable", name, err)
		}
	}
}

func TestCursors(t *testing.T) {
	_, c := newPair(t)
	if _, err := c.GetCursor(ctx(t), "worker-1"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown cursor: %v", err)
	}
	// A cursor may stand at most at the topic's end: 13 messages, then 13.
	for i := range 13 {
		if _, err := c.Publish(ctx(t), "prices", fmt.Sprintf("sku-%d", i), []byte("v"), ""); err != nil {
			t.Fatal(err)
		}
	}
	var api *client.APIError
	if _, err := c.SetCursor(ctx(t), "worker-1", "prices", 14); !errors.As(err, &api) || api.Status != 400 || api.Code != client.CodeBadRequest {
		t.Fatalf("a cursor past the end of its topic: %v; want 400 bad_request", err)
	}
	uid := uint32(os.Getuid())
	want := client.Cursor{Name: "worker-1", Topic: "prices", Offset: 13, End: 13, OwnerUID: &uid}
	cur, err := c.SetCursor(ctx(t), "worker-1", "prices", 13)
	if err != nil || !reflect.DeepEqual(cur, want) {
		t.Fatalf("set: %+v %v", cur, err)
	}
	cur, err = c.GetCursor(ctx(t), "worker-1")
	if err != nil || !reflect.DeepEqual(cur, want) {
		t.Fatalf("get: %+v %v", cur, err)
	}
	if _, err := c.SetCursor(ctx(t), "worker-0", "prices", 0); err != nil {
		t.Fatal(err)
	}
	list, err := c.Cursors(ctx(t))
	if err != nil || len(list) != 2 || list[0].Name != "worker-0" || !reflect.DeepEqual(list[1], want) {
		t.Fatalf("list: %+v %v", list, err)
	}
	if cur, err := c.DeleteCursor(ctx(t), "worker-0"); err != nil || cur.Name != "worker-0" {
		t.Fatalf("delete: %+v %v", cur, err)
	}
	if _, err := c.DeleteCursor(ctx(t), "worker-0"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if list, err := c.Cursors(ctx(t)); err != nil || len(list) != 1 {
		t.Fatalf("list after the delete: %+v %v", list, err)
	}
}

func TestAPIErrors(t *testing.T) {
	_, c := newPair(t, 16)
	tests := []struct {
		name   string
		call   func(context.Context) error
		status int
		code   string
	}{
		{"bad topic", func(ctx context.Context) error {
			_, err := c.Publish(ctx, "bad topic", "k", []byte("v"), "")
			return err
		}, 400, client.CodeInvalidName},
		{"bad tag", func(ctx context.Context) error {
			_, err := c.Publish(ctx, "t", "k", []byte("v"), "a/b")
			return err
		}, 400, client.CodeInvalidName},
		{"control char in key", func(ctx context.Context) error {
			_, err := c.Publish(ctx, "t", "a\x01b", []byte("v"), "")
			return err
		}, 400, client.CodeInvalidName},
		{"value too large", func(ctx context.Context) error {
			_, err := c.Publish(ctx, "t", "k", make([]byte, 17), "")
			return err
		}, 413, client.CodeValueTooLarge},
		{"batch value too large", func(ctx context.Context) error {
			_, err := c.PublishBatch(ctx, "t", []client.Message{{Key: "k", Value: make([]byte, 17)}})
			return err
		}, 413, client.CodeValueTooLarge},
		{"bad from", func(ctx context.Context) error {
			_, err := c.Subscribe(ctx, "t", client.SubscribeOptions{From: "yesterday"})
			return err
		}, 400, client.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(ctx(t))
			var ae *client.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err %v (%T), want *APIError", err, err)
			}
			if ae.Status != tt.status || ae.Code != tt.code || ae.Message == "" {
				t.Errorf("got %d %q %q, want %d %q", ae.Status, ae.Code, ae.Message, tt.status, tt.code)
			}
			if errors.Is(err, client.ErrNotFound) {
				t.Error("matches ErrNotFound")
			}
			if !strings.Contains(err.Error(), tt.code) {
				t.Errorf("message %q lacks the code", err)
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	srv, c := newPair(t)
	calls := map[string]func(context.Context) error{
		"publish empty topic": func(ctx context.Context) error { _, err := c.Publish(ctx, "", "k", nil, ""); return err },
		"get empty key":       func(ctx context.Context) error { _, err := c.Get(ctx, "t", ""); return err },
		"delete empty key":    func(ctx context.Context) error { _, err := c.Delete(ctx, "t", ""); return err },
		"keys empty topic":    func(ctx context.Context) error { _, _, err := c.Keys(ctx, "", "", "", 0); return err },
		"cursor empty name":   func(ctx context.Context) error { _, err := c.SetCursor(ctx, "", "t", 0); return err },
		// A key or tag that is not UTF-8 would travel as U+FFFD: another key.
		"batch key not UTF-8": func(ctx context.Context) error {
			_, err := c.PublishBatch(ctx, "t", []client.Message{{Key: "ok", Value: []byte("v")}, {Key: "z\xc3", Value: []byte("v")}})
			return err
		},
		"batch tag not UTF-8": func(ctx context.Context) error {
			_, err := c.PublishBatch(ctx, "t", []client.Message{{Key: "k", Tag: "\xff"}})
			return err
		},
		"stream message tag not UTF-8": func(ctx context.Context) error { _, err := c.Publish(ctx, "t", "", []byte("v"), "\xff"); return err },
		"subscribe no topic": func(ctx context.Context) error {
			_, err := c.Subscribe(ctx, "", client.SubscribeOptions{})
			return err
		},
	}
	for name, call := range calls {
		if err := call(ctx(t)); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := srv.Messages("t"); n != 0 {
		t.Errorf("refused calls published %d messages", n)
	}
}

func TestUnreachable(t *testing.T) {
	dir := t.TempDir()
	c := client.New(filepath.Join(dir, "nobody.sock"))
	defer c.Close()
	// With a deadline of the caller's, and without (the client's own).
	for _, cx := range []context.Context{ctx(t), context.Background()} {
		err := c.Healthz(cx)
		if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), "nobody.sock") {
			t.Errorf("err %v, want ErrUnreachable naming the socket", err)
		}
	}
}

// A daemon that accepts and never answers: the client's timeout must end
// the call.
func TestTimeout(t *testing.T) {
	dir, err := os.MkdirTemp("", "cctimeout")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			go io.Copy(io.Discard, conn)
		}
	}()
	c := client.New(sock, client.WithTimeout(100*time.Millisecond))
	defer c.Close()
	start := time.Now()
	_, err = c.Get(context.Background(), "t", "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
