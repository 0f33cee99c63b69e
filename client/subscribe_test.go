package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/client/clienttest"
	"github.com/cachecast/cachecast/internal/testkit"
)

func publishN(t *testing.T, c *client.Client, topic string, from, n int, tag string) []client.PutResult {
	t.Helper()
	var msgs []client.Message
	for i := from; i < from+n; i++ {
		msgs = append(msgs, client.Message{Key: fmt.Sprintf("k%d", i), Tag: tag, Value: []byte(fmt.Sprintf("v%d", i))})
	}
	rs, err := c.PublishBatch(ctx(t), topic, msgs)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func next(t *testing.T, s *client.Subscription) client.Event {
	t.Helper()
	ev, err := s.Next()
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return ev
}

func TestSubscribeFrom(t *testing.T) {
	srv, c := newPair(t)
	tests := []struct {
		name  string
		from  func(rs []client.PutResult) string
		first func(rs []client.PutResult) uint64
	}{
		{"earliest", func([]client.PutResult) string { return client.FromEarliest }, fixed(0)},
		{"offset", func([]client.PutResult) string { return client.FromOffset(3) }, fixed(3)},
		{"time", func(rs []client.PutResult) string { return client.FromTime(rs[2].Time) },
			// Several messages may share a millisecond: the first
			// delivered is the first of rs[2]'s millisecond.
			func(rs []client.PutResult) uint64 {
				for i := range rs {
					if rs[i].Time.Equal(rs[2].Time) {
						return uint64(i)
					}
				}
				return 2
			}},
		{"future-time", func([]client.PutResult) string { return client.FromTime(time.Now().Add(time.Hour)) }, fixed(5)},
		{"latest", func([]client.PutResult) string { return client.FromLatest }, fixed(5)},
		{"default", func([]client.PutResult) string { return "" }, fixed(5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := "s-" + tt.name
			rs := publishN(t, c, topic, 0, 5, "")
			sub, err := c.Subscribe(ctx(t), topic, client.SubscribeOptions{From: tt.from(rs)})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			for off := tt.first(rs); off < 5; off++ {
				ev := next(t, sub)
				r := rs[off]
				want := client.Event{
					Offset: off, Topic: topic, Key: r.Key, Value: []byte(fmt.Sprintf("v%d", off)),
					Origin: srv.Origin(), Seq: r.Seq, HLC: r.HLC, Time: r.Time,
				}
				if !eventEqual(ev, want) {
					t.Fatalf("event %+v, want %+v", ev, want)
				}
			}
			// Then live messages, after the backlog; other topics' are not delivered.
			publishN(t, c, "other-"+tt.name, 0, 1, "")
			live := publishN(t, c, topic, 100, 1, "")[0]
			ev := next(t, sub)
			if ev.Seq != live.Seq || ev.Key != "k100" || ev.Offset != 5 {
				t.Fatalf("live event %+v, want seq %d at offset 5", ev, live.Seq)
			}
		})
	}
}

func fixed(off uint64) func([]client.PutResult) uint64 {
	return func([]client.PutResult) uint64 { return off }
}

func eventEqual(a, b client.Event) bool {
	return a.Offset == b.Offset && a.Topic == b.Topic && a.Key == b.Key && a.Tag == b.Tag &&
		bytes.Equal(a.Value, b.Value) && a.Delete == b.Delete && a.Origin == b.Origin &&
		a.Seq == b.Seq && a.HLC == b.HLC && a.Time.Equal(b.Time)
}

func TestSubscribeValuesAndTags(t *testing.T) {
	_, c := newPair(t)
	big := bytes.Repeat([]byte{0xfe, 'x'}, 300_000) // not UTF-8: base64, a line far over the read buffer
	msgs := []client.Message{
		{Key: "a", Tag: "red", Value: []byte("text")},
		{Key: "b", Tag: "blue", Value: big},
		{Key: "c", Tag: "green", Value: []byte("skip me")},
		{Key: "a", Tag: "red", Delete: true},
		{Key: "", Tag: "blue", Value: []byte("stream\nwith newline")},
		{Key: "e", Tag: "", Value: nil},
	}
	if _, err := c.PublishBatch(ctx(t), "tags", msgs); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx(t), "tags", client.SubscribeOptions{From: client.FromEarliest, Tags: []string{"red", "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, off := range []uint64{0, 1, 3, 4} {
		ev := next(t, sub)
		m := msgs[off]
		if ev.Offset != off || ev.Key != m.Key || ev.Tag != m.Tag || ev.Delete != m.Delete || !bytes.Equal(ev.Value, m.Value) {
			t.Fatalf("event at %d: offset %d key %q tag %q delete %v value %d bytes; want %+v",
				off, ev.Offset, ev.Key, ev.Tag, ev.Delete, len(ev.Value), m)
		}
	}
}

func TestSubscribeCursor(t *testing.T) {
	_, c := newPair(t)
	publishN(t, c, "cur", 0, 4, "")

	// ack=auto: the daemon advances the cursor as it writes.
	sub, err := c.Subscribe(ctx(t), "cur", client.SubscribeOptions{From: client.FromEarliest, Name: "auto", AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		next(t, sub)
	}
	sub.Close()
	// The server acks as it writes: its last ack may land just after the
	// client has read the fourth message.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cur, err := c.GetCursor(ctx(t), "auto")
		if err == nil && cur.Offset == 4 && cur.Topic == "cur" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("auto cursor %+v %v, want offset 4", cur, err)
		}
	}

	// Manual acks; a new subscription under the name resumes after the last ack.
	sub, err = c.Subscribe(ctx(t), "cur", client.SubscribeOptions{From: client.FromEarliest, Name: "manual"})
	if err != nil {
		t.Fatal(err)
	}
	next(t, sub)
	ev := next(t, sub)
	if err := sub.Ack(ctx(t), ev); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	sub, err = c.Subscribe(ctx(t), "cur", client.SubscribeOptions{Name: "manual"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if ev := next(t, sub); ev.Offset != 2 {
		t.Fatalf("resumed at %d, want 2", ev.Offset)
	}

	anon, err := c.Subscribe(ctx(t), "cur", client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := anon.Ack(ctx(t), next(t, anon)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("ack without a name: %v", err)
	}
}

func TestSubscribeEvents(t *testing.T) {
	_, c := newPair(t)
	sub, err := c.Subscribe(ctx(t), "ch", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch := sub.Events()
	if sub.Events() != ch {
		t.Error("Events returned a second channel")
	}
	// Published after Subscribe returned: a latest subscriber sees it all.
	publishN(t, c, "ch", 0, 50, "")
	for i := range 50 {
		select {
		case ev := <-ch:
			if ev.Offset != uint64(i) {
				t.Fatalf("event %d has offset %d", i, ev.Offset)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event %d", i)
		}
	}
	// Close while the pump is blocked sending (more published, none read).
	publishN(t, c, "ch", 50, 5, "")
	time.Sleep(50 * time.Millisecond)
	sub.Close()
	for range ch {
	}
	if !errors.Is(sub.Err(), client.ErrClosed) {
		t.Errorf("Err after Close: %v", sub.Err())
	}
}

func TestSubscribeEnds(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		_, c := newPair(t)
		sub, err := c.Subscribe(ctx(t), "e", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { _, err := sub.Next(); done <- err }()
		time.Sleep(20 * time.Millisecond)
		sub.Close()
		if err := <-done; !errors.Is(err, client.ErrClosed) {
			t.Errorf("next after close: %v", err)
		}
		if _, err := sub.Next(); !errors.Is(err, client.ErrClosed) {
			t.Errorf("next after close: %v", err)
		}
		sub.Close() // twice is fine
	})
	t.Run("context", func(t *testing.T) {
		_, c := newPair(t)
		cctx, cancel := context.WithCancel(context.Background())
		sub, err := c.Subscribe(cctx, "e", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		time.AfterFunc(20*time.Millisecond, cancel)
		if _, err := sub.Next(); !errors.Is(err, context.Canceled) {
			t.Errorf("next after cancel: %v", err)
		}
	})
	t.Run("daemon ends stream", func(t *testing.T) {
		srv := clienttest.NewServer(t)
		c := client.New(srv.Socket)
		defer c.Close()
		sub, err := c.Subscribe(ctx(t), "e", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		go srv.Close()
		if _, err := sub.Next(); err != io.EOF {
			t.Errorf("next after the daemon closed: %v, want io.EOF", err)
		}
	})
}

// streamAnswer is a subscription answer carrying lines, then its end.
func streamAnswer(lines ...string) string {
	body := strings.Join(lines, "\n") + "\n"
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

const (
	goodLine1 = `{"offset":0,"topic":"t","key":"a","tag":"","value":"1","delete":false,"origin":"00c0ffee12345678","seq":1,"hlc":"117703674415284224","time":"2026-11-30T05:12:19.784Z"}`
	badLine   = `{"offset":1,"topic":"t","key":"b","value":"2","origin":"not hex","seq":2,"hlc":"1","time":"x"}`
	goodLine3 = `{"offset":2,"topic":"t","key":"c","tag":"","value":"3","delete":false,"origin":"00c0ffee12345678","seq":3,"hlc":"117703674415546368","time":"2026-11-30T05:12:19.788Z"}`
	errorLine = `{"error":{"code":"internal","message":"record corrupt at offset 3"}}`
)

// TestSubscribeMalformedLine: a line that does not decode is counted and
// reported, never skipped without a word: Next returns it as an error and
// goes on; Events ends there with the error in Err. An error line of the
// daemon is an *APIError with its code.
func TestSubscribeMalformedLine(t *testing.T) {
	sock := testkit.CannedServer(t, streamAnswer(goodLine1, badLine, goodLine3, errorLine))
	c := client.New(sock)
	defer c.Close()

	t.Run("Next", func(t *testing.T) {
		sub, err := c.Subscribe(ctx(t), "t", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if ev := next(t, sub); ev.Key != "a" {
			t.Fatalf("first: %+v", ev)
		}
		if _, err := sub.Next(); !errors.Is(err, client.ErrBadResponse) || !strings.Contains(err.Error(), "not hex") {
			t.Fatalf("malformed line: %v, want ErrBadResponse naming the line", err)
		}
		if n := sub.Malformed(); n != 1 {
			t.Fatalf("Malformed() = %d, want 1", n)
		}
		if ev := next(t, sub); ev.Key != "c" {
			t.Fatalf("after the malformed line: %+v", ev)
		}
		_, err = sub.Next()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Code != "internal" || !strings.Contains(ae.Message, "record corrupt") {
			t.Fatalf("error line: %v, want the daemon's internal error", err)
		}
		if _, err := sub.Next(); err != io.EOF {
			t.Fatalf("after the error line: %v, want io.EOF", err)
		}
	})

	t.Run("Events", func(t *testing.T) {
		sub, err := c.Subscribe(ctx(t), "t", client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		var keys []string
		for ev := range sub.Events() {
			keys = append(keys, ev.Key)
		}
		if len(keys) != 1 || keys[0] != "a" || !errors.Is(sub.Err(), client.ErrBadResponse) || sub.Malformed() != 1 {
			t.Fatalf("events %q, Err %v, Malformed %d; want a, then the channel closed on the malformed line", keys, sub.Err(), sub.Malformed())
		}
	})
}

// TestSubscribeRawLines: with RawLines each event carries its line as
// the daemon sent it.
func TestSubscribeRawLines(t *testing.T) {
	sock := testkit.CannedServer(t, streamAnswer(goodLine1, goodLine3))
	c := client.New(sock)
	defer c.Close()
	for _, raw := range []bool{false, true} {
		sub, err := c.Subscribe(ctx(t), "t", client.SubscribeOptions{RawLines: raw})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{goodLine1, goodLine3} {
			ev := next(t, sub)
			if raw && string(ev.Raw) != want || !raw && ev.Raw != nil {
				t.Errorf("RawLines %v: Raw %q, want %q", raw, ev.Raw, want)
			}
		}
		sub.Close()
	}
}
