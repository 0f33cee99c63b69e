package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// countingNode counts the publishes that reach the node.
type countingNode struct {
	*storeNode
	publishes atomic.Int64
}

// errRefused is the node's refusal of the value "refused", as the
// daemon's node refuses a name or a size: the whole batch that holds it.
var errRefused = errors.New("value_refused: the test node refuses this value")

func (n *countingNode) Check(m *record.Message) error {
	if string(m.Value) == "refused" {
		return errRefused
	}
	return n.storeNode.Check(m)
}

func (n *countingNode) Publish(ctx context.Context, c net.Conn, msgs []record.Message) (Written, error) {
	n.publishes.Add(1)
	for i := range msgs {
		if err := n.Check(&msgs[i]); err != nil {
			return Written{}, err
		}
	}
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
			want = append(want, string(session(alone, []byte(c))))
			continue
		case 600: // a condition reads the key: not batched, it sees the SETs before it
			in.WriteString(cmd("SET", key, val, "NX"))
			want = append(want, "$-1\r\n")
			continue
		case 700: // refused by the node
			c := cmd("SET", key, "refused")
			in.WriteString(c)
			want = append(want, string(session(alone, []byte(c))))
			continue
		case 400, 500: // bad options: refused by the server
			c := cmd("SET", key, val, "PX", "soon")
			if i == 500 {
				c = cmd("SET", key, val, "EFFECTIVEAT", "0")
			}
			in.WriteString(c)
			want = append(want, string(session(alone, []byte(c))))
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
	got := replies(t, session(s, []byte(in.String())))
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

// checkedNode is a countingNode that publishes messages Check passed
// without checking them again (as the daemon's node does), counting
// those publishes apart.
type checkedNode struct {
	countingNode
	checked atomic.Int64
}

func (n *checkedNode) PublishChecked(ctx context.Context, c net.Conn, msgs []record.Message) (Written, error) {
	n.checked.Add(1)
	return n.storeNode.Publish(ctx, c, msgs)
}

// TestPipelinedSetsCheckedOnce: a node that offers PublishChecked gets a
// pipeline's SETs through it, each checked once (by Check), while a SET
// that Check refuses runs alone through Publish and gets its own error;
// every value is the one its SET sent, though a SET's value is not copied
// out of the read buffer.
func TestPipelinedSetsCheckedOnce(t *testing.T) {
	s, st := newTestServer(t)
	node := &checkedNode{countingNode: countingNode{storeNode: s.node.(*storeNode)}}
	s.node = node
	var in strings.Builder
	for i := range 200 {
		val := fmt.Sprintf("value-%03d", i)
		if i == 100 {
			val = "refused"
		}
		in.WriteString(cmd("SET", fmt.Sprintf("c:k-%d", i), val))
	}
	got := replies(t, session(s, []byte(in.String())))
	if len(got) != 200 {
		t.Fatalf("%d replies, want 200", len(got))
	}
	for i, r := range got {
		if ok := r == "+OK\r\n"; i == 100 && (ok || !strings.Contains(r, "value_refused")) || i != 100 && !ok {
			t.Fatalf("reply %d: %q", i, r)
		}
	}
	if c, p := node.checked.Load(), node.publishes.Load(); c != 2 || p != 1 {
		t.Fatalf("%d checked publishes and %d plain ones, want 2 (the SETs before and after the refused one) and 1 (the refused one alone)", c, p)
	}
	for i := range 200 {
		e, ok := st.Get("c", fmt.Sprintf("k-%d", i))
		if want := fmt.Sprintf("value-%03d", i); i != 100 && (!ok || string(e.Value) != want) {
			t.Fatalf("c:k-%d holds %q, want %q", i, e.Value, want)
		}
	}
}
