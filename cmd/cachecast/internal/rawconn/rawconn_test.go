package rawconn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/client/clienttest"
	"github.com/cachecast/cachecast/internal/testkit"
)

func dial(t *testing.T, srv *clienttest.Server) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), srv.Socket, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConnPublishGet(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := dial(t, srv)
	cl := client.New(srv.Socket)
	defer cl.Close()
	tests := []struct {
		key, tag string
		value    []byte
	}{
		{"sku-1", "", []byte("12.50")},
		{"a/b c?d#%", "eu", []byte{0, 0xff, '\r', '\n'}},
		{"..", "", []byte{}},
		{"é€😀", "x", bytes.Repeat([]byte("v"), 200_000)},
	}
	for i, tt := range tests {
		r, err := c.Publish("p", tt.key, tt.value, tt.tag)
		if err != nil {
			t.Fatalf("publish %q: %v", tt.key, err)
		}
		if r.Origin != srv.Origin() || r.HLC < 1<<53 || r.Time.UnixMilli() != int64(r.HLC>>16) || !r.OK() {
			t.Errorf("result identity %+v (origin %016x)", r, srv.Origin())
		}
		if r.Seq != uint64(i+1) || r.Key != tt.key || r.Topic != "p" {
			t.Errorf("result %+v", r)
		}
		v, err := c.Get("p", tt.key)
		if err != nil {
			t.Fatalf("get %q: %v", tt.key, err)
		}
		if !bytes.Equal(v.Bytes, tt.value) || v.Tag != tt.tag || v.Seq != r.Seq || v.HLC != r.HLC || v.Origin != r.Origin || !v.Time.Equal(r.Time) {
			t.Errorf("get %q: %+v after %+v", tt.key, v, r)
		}
		// The same as the pooled client reads it.
		w, err := cl.Get(context.Background(), "p", tt.key)
		if err != nil || !bytes.Equal(w.Bytes, v.Bytes) || w.Seq != v.Seq {
			t.Errorf("Client.Get %q disagrees: %+v %v", tt.key, w, err)
		}
	}
	if n := srv.Requests("PUT /v1/topics/{topic}/keys/{key}"); n != len(tests) {
		t.Errorf("%d PUTs", n)
	}
	r, err := c.Publish("p", "", []byte("stream"), "t")
	if err != nil || r.Key != "" || srv.Requests("POST /v1/topics/{topic}/messages") != 1 {
		t.Errorf("keyless publish: %+v %v", r, err)
	}
}

func TestConnBatch(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := dial(t, srv)
	// Large enough for the answer to come chunked from net/http's server.
	var msgs []client.Message
	for i := range 500 {
		msgs = append(msgs, client.Message{Key: fmt.Sprintf("k%03d", i), Value: []byte("v"), Tag: "t"})
	}
	msgs[7].Value = []byte{0xff}
	msgs[9] = client.Message{Key: "k001", Delete: true}
	for range 3 {
		if notOK, err := c.PublishBatch("b", msgs); notOK != 0 || err != nil {
			t.Fatalf("batch: %d not ok, %v", notOK, err)
		}
	}
	if n := srv.Requests("POST /v1/topics/{topic}/messages"); n != 3 {
		t.Errorf("%d batches sent, want 3", n)
	}
	if v, err := c.Get("b", "k007"); err != nil || !bytes.Equal(v.Bytes, []byte{0xff}) {
		t.Errorf("k007: %q %v", v.Bytes, err)
	}
	if _, err := c.Get("b", "k001"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("deleted in the batch: %v", err)
	}
	if notOK, err := c.PublishBatch("b", nil); notOK != 0 || err != nil {
		t.Errorf("empty batch: %v %v", notOK, err)
	}
}

// TestConnBatchStatuses: PublishBatch counts the results that are not ok,
// and refuses an answer with too few or too many results, whichever way
// it reads the answer (counting the statuses, or parsing it).
func TestConnBatchStatuses(t *testing.T) {
	result := func(status string) string {
		return `{"topic":"b","key":"k","origin":"00000000000000ab","seq":1,"hlc":"1","time":"2026-12-05T00:00:00.000Z","status":"` + status + `"}`
	}
	msgs := []client.Message{{Key: "k"}, {Key: "k"}, {Key: "k"}}
	for _, tc := range []struct {
		name     string
		statuses []string
		notOK    int
		bad      bool
	}{
		{"all ok", []string{"ok", "ok", "ok"}, 0, false},
		{"one replica_timeout", []string{"ok", "replica_timeout", "ok"}, 1, false},
		{"none ok", []string{"replica_unavailable", "replica_timeout", "later"}, 3, false},
		{"a result short", []string{"ok", "ok"}, 0, true},
		{"a result more", []string{"ok", "ok", "ok", "ok"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rs []string
			for _, st := range tc.statuses {
				rs = append(rs, result(st))
			}
			body := `{"results":[` + strings.Join(rs, ",") + "]}\n"
			sock := serveOnce(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\n\r\n"+body)
			c, err := Dial(context.Background(), sock, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			notOK, err := c.PublishBatch("b", msgs)
			if tc.bad {
				if !errors.Is(err, client.ErrBadResponse) {
					t.Errorf("%d results for 3 messages: %d, %v; want ErrBadResponse", len(rs), notOK, err)
				}
				return
			}
			if notOK != tc.notOK || err != nil {
				t.Errorf("PublishBatch: %d not ok, %v; want %d", notOK, err, tc.notOK)
			}
		})
	}
}

// serveOnce listens on a fresh socket and answers the first request of
// its first connection with answer (the request's head and body read
// whatever they are).
func serveOnce(t *testing.T, answer string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		req, err := http.ReadRequest(bufio.NewReader(nc))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(nc, answer)
	}()
	return sock
}

func TestConnErrors(t *testing.T) {
	srv := clienttest.NewServer(t, clienttest.WithMaxValueSize(4))
	c := dial(t, srv)
	var ae *client.APIError
	_, err := c.Get("p", "missing")
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &ae) || ae.Code != client.CodeNotFound {
		t.Errorf("missing: %v", err)
	}
	if _, err := c.Publish("bad topic", "k", nil, ""); !errors.As(err, &ae) || ae.Code != client.CodeInvalidName {
		t.Errorf("bad topic: %v", err)
	}
	if _, err := c.Publish("p", "k", []byte("12345"), ""); !errors.As(err, &ae) || ae.Code != client.CodeValueTooLarge {
		t.Errorf("too large: %v", err)
	}
	if _, err := c.PublishBatch("p", []client.Message{{Key: "k", Tag: "no spaces"}}); !errors.As(err, &ae) || ae.Code != client.CodeInvalidName {
		t.Errorf("bad tag: %v", err)
	}
	if _, err := c.Get("", "k"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("empty topic: %v", err)
	}
	if _, err := c.PublishBatch("p", []client.Message{{Key: "z\xc3"}}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("key not UTF-8: %v", err)
	}
	// API errors leave the connection usable.
	if _, err := c.Publish("p", "k", []byte("ok"), ""); err != nil {
		t.Fatalf("after API errors: %v", err)
	}
	c.Close()
	if _, err := c.Get("p", "k"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestConnBroken(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := dial(t, srv)
	if _, err := c.Publish("p", "k", []byte("v"), ""); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	_, err := c.Get("p", "k")
	if err == nil {
		t.Fatal("no error from a closed daemon")
	}
	if _, err2 := c.Get("p", "k"); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second call: %v, want the first error %v", err2, err)
	}
	if _, err := Dial(context.Background(), srv.Socket, 0); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("dial of a closed daemon: %v", err)
	}
}

func TestConnAnswers(t *testing.T) {
	tests := []struct {
		name, answer string
		value        string
		err          error
	}{
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCachecast-Seq: 5\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n", "abcde", nil},
		{"lower-case fields", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncachecast-seq: 5\r\n\r\nhi", "hi", nil},
		{"no content length", "HTTP/1.1 200 OK\r\n\r\nhi", "", client.ErrBadResponse},
		{"bad status line", "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n", "", client.ErrBadResponse},
		{"bad seq", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nCachecast-Seq: x\r\n\r\n", "", client.ErrBadResponse},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "", nil},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "", client.ErrBadResponse},
		{"plain-text error", "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 4\r\n\r\noops", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Dial(context.Background(), testkit.CannedServer(t, tt.answer), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			v, err := c.Get("t", "k")
			switch {
			case tt.name == "cut short":
				if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
					t.Errorf("err %v, want unexpected EOF", err)
				}
			case tt.name == "plain-text error":
				var ae *client.APIError
				if !errors.As(err, &ae) || ae.Status != 502 || ae.Message != "oops" {
					t.Errorf("err %v", err)
				}
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Errorf("err %v, want %v", err, tt.err)
				}
			case err != nil || string(v.Bytes) != tt.value || v.Seq != 5:
				t.Errorf("got %q seq %d, %v; want %q", v.Bytes, v.Seq, err, tt.value)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		c, err := Dial(context.Background(), testkit.CannedServer(t, ""), 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Get("t", "k"); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("err %v, want a deadline error", err)
		}
	})
}

// TestConnAnswerBeforeBody: the daemon answers a body over its limit
// before reading it (413) and closes; the caller gets that answer, not
// the broken pipe of the rest of its write, and the connection is spent.
func TestConnAnswerBeforeBody(t *testing.T) {
	const body = `{"error":{"code":"value_too_large","message":"value of 8388608 bytes exceeds --max-value-size (1MiB)"}}`
	answer := fmt.Sprintf("HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	c, err := Dial(context.Background(), testkit.CannedServer(t, answer), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Publish("t", "k", make([]byte, 8<<20), "")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 413 || ae.Code != client.CodeValueTooLarge || !strings.Contains(ae.Message, "--max-value-size (1MiB)") {
		t.Fatalf("publish of 8 MiB: %v; want the daemon's 413 value_too_large naming the limit", err)
	}
	if _, err := c.Get("t", "k"); err == nil || errors.As(err, &ae) && ae.Status == 413 {
		t.Fatalf("the connection after the early answer: %v; want it spent", err)
	}
}
