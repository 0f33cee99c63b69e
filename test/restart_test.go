package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
)

// model is what a test expects the daemon to hold: per topic, each key's
// last PutResult and value (nil value: deleted).
type model map[string]map[string]modelEntry

type modelEntry struct {
	res   client.PutResult
	value []byte
	tag   string
	gone  bool
}

func (m model) put(topic, key string, res client.PutResult, value []byte, tag string) {
	if m[topic] == nil {
		m[topic] = map[string]modelEntry{}
	}
	m[topic][key] = modelEntry{res: res, value: value, tag: tag}
}

func (m model) del(topic, key string, res client.PutResult) {
	m[topic][key] = modelEntry{res: res, gone: true}
}

// liveKeys is the sorted live keys of topic.
func (m model) liveKeys(topic string) []string {
	var keys []string
	for k, e := range m[topic] {
		if !e.gone {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// check compares the daemon's view with the model: every key's value and
// identity, every deleted key absent, the key listings, the topic counts.
func (m model) check(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := ctx(t)
	for topic, keys := range m {
		for key, e := range keys {
			v, err := c.Get(ctx, topic, key)
			if e.gone {
				if !errors.Is(err, client.ErrNotFound) {
					t.Fatalf("%s/%s was deleted; Get: %q %v", topic, key, v.Bytes, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s/%s: %v", topic, key, err)
			}
			if string(v.Bytes) != string(e.value) || v.Tag != e.tag || v.Seq != e.res.Seq ||
				v.Origin != e.res.Origin || v.HLC != e.res.HLC {
				t.Fatalf("%s/%s: got %q tag %q seq %d hlc %d; published %q tag %q %+v",
					topic, key, v.Bytes, v.Tag, v.Seq, v.HLC, e.value, e.tag, e.res)
			}
		}
		var listed []string
		after := ""
		for {
			page, next, err := c.Keys(ctx, topic, "", after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, page...)
			if next == "" {
				break
			}
			after = next
		}
		if want := m.liveKeys(topic); !slices.Equal(listed, want) {
			t.Fatalf("topic %s lists %d keys; want %d", topic, len(listed), len(want))
		}
	}
}

// TestRestartKeepsEverything publishes 2,000 keys (batches, single PUTs,
// overwrites, deletes) and cursors, stops the daemon with SIGTERM, starts
// it again on the same data directory and finds everything: values with
// their identities, listings, topics, the stream, the cursors, the origin,
// and a seq that goes on from where it was. Then the same after SIGKILL,
// which under --flush async loses nothing either (the page cache holds the
// log; only a machine crash can lose the last interval).
func TestRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "restart", Args: smallNode})
	c := n.Client
	m := model{}

	// 1,800 keys in batches of 100 in topic a, 200 single PUTs with tags
	// in topic b; then 100 overwrites and 50 deletes in a.
	for b := range 18 {
		msgs := make([]client.Message, 100)
		for i := range msgs {
			key := fmt.Sprintf("key-%04d", b*100+i)
			msgs[i] = client.Message{Key: key, Value: []byte("v1 of " + key)}
		}
		res, err := c.PublishBatch(ctx(t), "a", msgs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range msgs {
			m.put("a", msgs[i].Key, res[i], msgs[i].Value, "")
		}
	}
	for i := range 200 {
		key := fmt.Sprintf("b/%03d", i)
		tag := []string{"eu", "us"}[i%2]
		val := []byte{byte(i), 0xff, 'x'} // not UTF-8: base64 on the stream
		res, err := c.Publish(ctx(t), "b", key, val, tag)
		if err != nil {
			t.Fatal(err)
		}
		m.put("b", key, res, val, tag)
	}
	for i := 0; i < 1800; i += 18 {
		key := fmt.Sprintf("key-%04d", i)
		res, err := c.Publish(ctx(t), "a", key, []byte("v2 of "+key), "new")
		if err != nil {
			t.Fatal(err)
		}
		m.put("a", key, res, []byte("v2 of "+key), "new")
	}
	for i := 1; i < 1800; i += 36 {
		key := fmt.Sprintf("key-%04d", i)
		res, err := c.Delete(ctx(t), "a", key)
		if err != nil {
			t.Fatal(err)
		}
		m.del("a", key, res)
	}
	if _, err := c.SetCursor(ctx(t), "reader-a", "a", 1234); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx(t), "b", client.SubscribeOptions{Name: "reader-b", From: client.FromOffset(50)})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Ack(ctx(t), readEvents(t, sub, 10)[9]); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	m.check(t, c)
	before := snapshotOf(t, c)
	const published = 18*100 + 200 + 100 + 50
	if before.messages != published {
		t.Fatalf("%d messages; want %d", before.messages, published)
	}

	start := time.Now()
	n.Stop()
	stopTook := time.Since(start)
	if !strings.Contains(n.Logs(), `"msg":"stopped"`) {
		t.Fatal("no clean stop logged")
	}
	if _, err := os.Stat(n.Socket); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived the daemon: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.DataDir, "snapshot")); err != nil {
		t.Fatalf("no view snapshot after a clean stop: %v", err)
	}
	start = time.Now()
	n.Start()
	t.Logf("2,000 keys: SIGTERM to exit %v, start to ready %v", stopTook.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	m.check(t, c)
	if after := snapshotOf(t, c); after != before {
		t.Fatalf("after the restart: %+v; before: %+v", after, before)
	}
	checkCursors := func() {
		t.Helper()
		if cur, err := c.GetCursor(ctx(t), "reader-a"); err != nil || cur.Offset != 1234 || cur.Topic != "a" {
			t.Fatalf("cursor reader-a: %+v %v", cur, err)
		}
		if cur, err := c.GetCursor(ctx(t), "reader-b"); err != nil || cur.Offset != 60 || cur.Topic != "b" {
			t.Fatalf("cursor reader-b: %+v %v", cur, err)
		}
	}
	checkCursors()
	// The stream of a from the start: every message, in order, with the
	// seqs the daemon answered before the restart.
	sub, err = c.Subscribe(ctx(t), "a", client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, sub, 1800+100+50)
	sub.Close()
	for i, ev := range evs {
		if ev.Offset != uint64(i) || (i > 0 && ev.Seq <= evs[i-1].Seq) {
			t.Fatalf("event %d: offset %d seq %d after seq %d", i, ev.Offset, ev.Seq, evs[max(i-1, 0)].Seq)
		}
	}
	// A named subscription resumes at its cursor.
	sub, err = c.Subscribe(ctx(t), "b", client.SubscribeOptions{Name: "reader-b"})
	if err != nil {
		t.Fatal(err)
	}
	ev := readEvents(t, sub, 1)[0]
	sub.Close()
	if want := m["b"]["b/060"]; ev.Offset != 60 || ev.Key != "b/060" || ev.Seq != want.res.Seq || string(ev.Value) != string(want.value) {
		t.Fatalf("reader-b resumed at %+v; want offset 60, b/060", ev)
	}
	// Seqs go on; nothing is reused.
	res, err := c.Publish(ctx(t), "a", "after-restart", []byte("x"), "")
	if err != nil || res.Seq != published+1 || res.Origin != before.origin {
		t.Fatalf("first publish after the restart: %+v %v; want seq %d", res, err, published+1)
	}
	m.put("a", "after-restart", res, []byte("x"), "")

	// SIGKILL with --flush async: the page cache keeps the log, so a
	// process crash loses nothing acknowledged.
	for i := range 100 {
		key := fmt.Sprintf("late-%03d", i)
		res, err := c.Publish(ctx(t), "a", key, []byte(key), "")
		if err != nil {
			t.Fatal(err)
		}
		m.put("a", key, res, []byte(key), "")
	}
	n.Kill()
	start = time.Now()
	n.Start()
	t.Logf("after SIGKILL: start to ready %v", time.Since(start).Round(time.Millisecond))
	m.check(t, c)
	checkCursors()
	if st := snapshotOf(t, c); st.messages != published+101 || st.origin != before.origin {
		t.Fatalf("after SIGKILL: %+v; want %d messages", st, published+101)
	}
	n.Stop()
}

// stateSummary is what must survive a restart unchanged. (The status's
// store "records" is not in it: it counts records appended or replayed
// since the daemon started.)
type stateSummary struct {
	origin   uint64
	messages uint64 // of every topic
	keys     int
	topics   string
}

func snapshotOf(t *testing.T, c *client.Client) stateSummary {
	t.Helper()
	st, err := c.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	topics, err := c.Topics(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var msgs uint64
	for _, ti := range topics {
		msgs += ti.Messages
	}
	return stateSummary{origin: st.Node.Origin, messages: msgs, keys: st.Store.Keys, topics: fmt.Sprint(topics)}
}

// TestShutdownDrains sends SIGTERM while a PUT is in flight (its headers
// read, its body not yet sent) and while a subscriber streams: the PUT is
// finished and answered, and kept; the stream ends cleanly; the daemon
// exits 0 and removes its socket.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "drain", Args: []string{"--shutdown-timeout", "10s"}})
	c := n.Client
	sub, err := c.Subscribe(ctx(t), "t", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	conn, err := net.Dial("unix", n.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Expect: 100-continue makes the server say when the handler starts
	// reading the body: from then on the request is in flight.
	fmt.Fprint(conn, "PUT /v1/topics/t/keys/in-flight HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nExpect: 100-continue\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue: %q %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line after it
		t.Fatal(err)
	}

	if err := n.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitLog(`"msg":"shutting down"`, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The stream ends at once; the in-flight request holds the shutdown.
	// (The client promises io.EOF when the daemon ends a stream; a
	// stream cut without its last chunk is io.ErrUnexpectedEOF, and curl
	// -N exits 18.)
	if _, err := sub.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("subscription at shutdown: %v; want io.EOF, the stream's clean end", err)
	}
	time.Sleep(100 * time.Millisecond)
	if !n.Running() {
		t.Fatal("the daemon exited with a request in flight")
	}
	if _, err := c.Status(ctx(t)); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("a new connection during shutdown: %v; want ErrUnreachable", err)
	}
	fmt.Fprint(conn, "finished")
	res, err := readResponseFrom(br)
	if err != nil || res.status != 200 {
		t.Fatalf("the in-flight PUT: %d %s %v", res.status, res.body, err)
	}
	checkWirePutResult(t, res.body, "t", "in-flight")
	st, err := n.Wait(15 * time.Second)
	if err != nil || !st.Success() {
		t.Fatalf("exit: %v %v", st, err)
	}
	if _, err := os.Stat(n.Socket); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived the daemon: %v", err)
	}
	n.Start()
	if v, err := c.Get(ctx(t), "t", "in-flight"); err != nil || string(v.Bytes) != "finished" {
		t.Fatalf("the drained PUT after the restart: %q %v", v.Bytes, err)
	}
	n.Stop()
}

// TestSecondDaemonRefuses starts a second cachecastd on the data directory
// of a running one, then on its socket: each refuses to start, exits 1 and
// says why, and the first one serves on, unharmed.
func TestSecondDaemonRefuses(t *testing.T) {
	t.Parallel()
	first := StartNode(t, bins, NodeOptions{Name: "first"})
	if _, err := first.Client.Publish(ctx(t), "t", "k", []byte("v"), ""); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		opts NodeOptions
		want string
	}{
		{"same data directory", NodeOptions{Name: "same-data", DataDir: first.DataDir}, "in use by another cachecastd"},
		{"same socket", NodeOptions{Name: "same-socket", Socket: first.Socket}, "socket in use"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			second := NewNode(t, bins, tt.opts)
			if err := second.StartProcess(); err != nil {
				t.Fatal(err)
			}
			st, err := second.Wait(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if st.ExitCode() != 1 || !strings.Contains(second.Logs(), tt.want) {
				t.Fatalf("second daemon: %v; want exit status 1 and %q logged:\n%s", st, tt.want, second.Logs())
			}
			if v, err := first.Client.Get(ctx(t), "t", "k"); err != nil || string(v.Bytes) != "v" {
				t.Fatalf("the first daemon after the second one's attempt: %q %v", v.Bytes, err)
			}
		})
	}
	first.Stop()
}
