package resp

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/store/record"
)

// countingNode counts the publishes that reach the node.
type countingNode struct {
	*storeNode
	publishes atomic.Int64
}

func (n *countingNode) Publish(ctx context.Context, c net.Conn, msgs []record.Message) (Written, error) {
	n.publishes.Add(1)
	return n.storeNode.Publish(ctx, c, msgs)
}

// TestPipelinedSetsBatch: a pipeline of 1,000 SETs, some with an expiry,
// with refused SETs (bad options among them), a KEEPTTL and a read among
// them, takes a few publishes; every command answers what it answers
// alone, in order; the read sees the writes before it; the last write of
// a key wins, with its expiry or none.
func TestPipelinedSetsBatch(t *testing.T) {
	s, st := newTestServer(t)
	node := &countingNode{storeNode: s.node.(*storeNode)}
	s.node = node
	alone, _ := newTestServer(t) // answers each refused command alone
	alone.node = &countingNode{storeNode: alone.node.(*storeNode)}

	var in strings.Builder
	var want []string
	last := map[string]string{}
	expires := map[string]bool{} // the last write of the key had PX
	for i := range 1000 {
		key := fmt.Sprintf("b:k-%d", i%100)
		val := fmt.Sprintf("v-%d", i)
		switch i {
		case 300: // an empty key: refused by the server
			c := cmd("SET", "b:", val)
			in.WriteString(c)
			want = append(want, string(runSession(alone, []byte(c))))
			continue
		case 600: // a condition reads the key: not batched, it sees the SETs before it
			in.WriteString(cmd("SET", key, val, "NX"))
			want = append(want, "$-1\r\n")
			continue
		case 700: // refused by the checks of a message (a key too long)
			c := cmd("SET", "b:"+strings.Repeat("k", 1025), val)
			in.WriteString(c)
			want = append(want, string(runSession(alone, []byte(c))))
			continue
		case 400, 500: // bad options: refused by the server
			c := cmd("SET", key, val, "PX", "soon")
			if i == 500 {
				c = cmd("SET", key, val, "EFFECTIVEAT", "0")
			}
			in.WriteString(c)
			want = append(want, string(runSession(alone, []byte(c))))
			continue
		case 650: // KEEPTTL reads the key: not batched, run as usual
			in.WriteString(cmd("SET", key, val, "KEEPTTL"))
			want = append(want, "+OK\r\n")
			last[key] = val
			continue
		case 800: // a read: sees the SET just before it
			in.WriteString(cmd("GET", fmt.Sprintf("b:k-%d", 799%100)))
			want = append(want, "$5\r\nv-799\r\n")
			continue
		}
		if i%10 == 5 {
			in.WriteString(cmd("SET", key, val, "PX", "3600000"))
		} else {
			in.WriteString(cmd("SET", key, val))
		}
		want = append(want, "+OK\r\n")
		last[key] = val
		expires[key] = i%10 == 5
	}
	got := replies(t, runSession(s, []byte(in.String())))
	if len(got) != len(want) {
		t.Fatalf("%d replies, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reply %d: %q, want %q", i, got[i], want[i])
		}
	}
	for _, i := range []int{300, 400, 500, 700} {
		if !strings.HasPrefix(want[i], "-ERR") {
			t.Fatalf("command %d alone answered %q, want an error", i, want[i])
		}
	}
	for key, val := range last {
		e, ok := st.Get("b", strings.TrimPrefix(key, "b:"))
		if !ok || string(e.Value) != val {
			t.Fatalf("%s: %q, want %q (the last write)", key, e.Value, val)
		}
		if (e.ExpiresAt != 0) != expires[key] {
			t.Fatalf("%s: expires at %d; want an expiry: %v (the last write's)", key, e.ExpiresAt, expires[key])
		}
	}
	if p := node.publishes.Load(); p > 50 {
		t.Fatalf("%d publishes for 994 SETs: the pipeline was not batched", p)
	}
}

// TestPipelinedSetsCheckedOnce: a pipeline's SETs are checked one by
// one (command.Limits) as they join the batch, a SET the checks refuse
// runs alone and gets its own error, and the node gets the rest as two
// publishes (before it and after it); every value is the one its SET
// sent, though a SET's value is not copied out of the read buffer.
func TestPipelinedSetsCheckedOnce(t *testing.T) {
	s, st := newTestServer(t)
	node := &countingNode{storeNode: s.node.(*storeNode)}
	s.node = node
	var in strings.Builder
	for i := range 200 {
		key := fmt.Sprintf("c:k-%d", i)
		if i == 100 {
			key = "c:" + strings.Repeat("k", 1025)
		}
		in.WriteString(cmd("SET", key, fmt.Sprintf("value-%03d", i)))
	}
	got := replies(t, runSession(s, []byte(in.String())))
	if len(got) != 200 {
		t.Fatalf("%d replies, want 200", len(got))
	}
	for i, r := range got {
		if ok := r == "+OK\r\n"; i == 100 && (ok || !strings.HasPrefix(r, "-ERR invalid_name: key:")) || i != 100 && !ok {
			t.Fatalf("reply %d: %q", i, r)
		}
	}
	if p := node.publishes.Load(); p != 2 {
		t.Fatalf("%d publishes, want 2 (the SETs before and after the refused one)", p)
	}
	for i := range 200 {
		e, ok := st.Get("c", fmt.Sprintf("k-%d", i))
		if want := fmt.Sprintf("value-%03d", i); i != 100 && (!ok || string(e.Value) != want) {
			t.Fatalf("c:k-%d holds %q, want %q", i, e.Value, want)
		}
	}
}

// warmingNode keeps the keys of every WarmReads.
type warmingNode struct {
	*storeNode
	runs [][]string
}

func (n *warmingNode) WarmReads(topics, keys []string) {
	run := make([]string, len(keys))
	for i := range keys {
		run[i] = topics[i] + ":" + keys[i]
	}
	n.runs = append(n.runs, run)
	n.storeNode.WarmReads(topics, keys)
}

// TestPipelinedGetsWarmed: a pipeline's runs of GETs are loaded ahead
// (Node.WarmReads), each run once, its keys in order, at most
// maxWarmGets at a time; a lone GET is not; every command answers what
// it answers alone, the GETs after a SET or a DEL of their key
// included; and so when the pipeline arrives a few bytes at a time, its
// runs cut anywhere.
func TestPipelinedGetsWarmed(t *testing.T) {
	var in strings.Builder
	var want [][]string // the runs WarmReads should get
	// run writes the GETs of a run.
	run := func(names ...string) {
		var keys []string
		for _, name := range names {
			in.WriteString(cmd("GET", name))
			if !strings.Contains(name, ":") {
				name = "default:" + name
			}
			keys = append(keys, name)
		}
		want = append(want, keys)
	}
	add := func(c string) { in.WriteString(c) }
	run("w:a", "w:b", "w:none", "other:a", "h") // a hash: WRONGTYPE
	add(cmd("SET", "w:a", "10"))
	add(cmd("get", "w:a")) // alone: the SET after it ends the run
	add(cmd("DEL", "w:b"))
	run("w:b", "w:a")
	add(cmd("GET", "w:a", "extra")) // not GET key: ends the run, a wrong arity
	add(cmd("MGET", "w:a", "w:b"))
	long := make([]string, maxWarmGets+3)
	for i := range long {
		long[i] = fmt.Sprintf("w:%c", 'a'+i%3)
	}
	run(long[:maxWarmGets]...)
	run(long[maxWarmGets:]...)
	var cmds []string
	for rest := []byte(in.String()); len(rest) > 0; {
		n := bytesOfCommand(t, rest)
		cmds = append(cmds, string(rest[:n]))
		rest = rest[n:]
	}
	for _, chunk := range []int{0, 13} { // the whole pipeline in one read; 13 bytes a read
		s, _ := newTestServer(t)
		node := &warmingNode{storeNode: s.node.(*storeNode)}
		s.node = node
		alone, _ := newTestServer(t)
		for _, srv := range []*Server{s, alone} {
			runSession(srv, []byte(cmd("SET", "w:a", "1")+cmd("SET", "w:b", "2")+cmd("HSET", "h", "f", "3")))
		}
		node.runs = nil
		out := replies(t, runChunks(s, []byte(in.String()), chunk))
		if len(out) != len(cmds) {
			t.Fatalf("reads of %d bytes: %d replies to %d commands", chunk, len(out), len(cmds))
		}
		for i, c := range cmds {
			if got, w := out[i], string(runSession(alone, []byte(c))); got != w {
				t.Fatalf("reads of %d bytes: command %d %q: %q, alone %q", chunk, i, c, got, w)
			}
		}
		if chunk > 0 {
			continue
		}
		if len(node.runs) != len(want) {
			t.Fatalf("WarmReads got %d runs %q, want %d %q", len(node.runs), node.runs, len(want), want)
		}
		for i := range want {
			if strings.Join(node.runs[i], " ") != strings.Join(want[i], " ") {
				t.Fatalf("run %d: WarmReads got %q, want %q", i, node.runs[i], want[i])
			}
		}
	}
}

// bytesOfCommand is the length of the RESP command that starts b.
func bytesOfCommand(t *testing.T, b []byte) int {
	t.Helper()
	args, n, _, err := codec.Parse(b, nil, &codec.Limits{MaxBulk: 1 << 20, MaxArgs: 1 << 10, MaxFrame: 1 << 20, MaxLine: 1 << 10})
	if err != nil || n == 0 || len(args) == 0 {
		t.Fatalf("no whole command at %q: %v", b[:min(len(b), 40)], err)
	}
	return n
}
