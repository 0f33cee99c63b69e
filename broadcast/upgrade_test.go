package broadcast

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// addSpeaking adds a node that speaks the protocol versions r, as a build
// of another version would (protocols is read by New).
func (c *testCluster) addSpeaking(name string, r protoRange) *testNode {
	old := protocols
	protocols = r
	defer func() { protocols = old }()
	return c.add(name, c.t.TempDir())
}

// TestRollingUpgrade: nodes of overlapping version ranges negotiate the
// highest common version and exchange records both ways; a range that
// does not overlap is refused at the handshake, both ways, and nothing
// passes.
func TestRollingUpgrade(t *testing.T) {
	tests := []struct {
		name string
		a, b protoRange
		want uint8 // 0: refused
	}{
		{"upgraded next to old", protoRange{2, 3}, protoRange{2, 2}, 2},
		{"both upgraded", protoRange{2, 3}, protoRange{2, 3}, 3},
		{"old dropped next to old", protoRange{3, 3}, protoRange{2, 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &testCluster{t: t, net: newFaultNet()}
			a := c.addSpeaking("a", tt.a)
			b := c.addSpeaking("b", tt.b)
			t.Cleanup(c.stop) // before the temporary directories go
			c.wire()
			publish(t, a, "from-a", "1")
			publish(t, b, "from-b", "2")
			if tt.want == 0 {
				testkit.Eventually(t, 20*time.Second, "both nodes refused the other", func() bool {
					return a.n.Rejected() > 0 && b.n.Rejected() > 0
				})
				for _, tn := range []*testNode{a, b} {
					for _, p := range tn.n.Peers() {
						if p.Connected || p.Proto != 0 {
							t.Fatalf("%s: link to %s connected (protocol %d) with no version in common", tn.name, p.Peer.Name, p.Proto)
						}
					}
				}
				if _, ok := b.st.Get("prices", "from-a"); ok {
					t.Fatal("a record crossed a refused link")
				}
				return
			}
			c.waitConverged(20 * time.Second)
			for _, tn := range []*testNode{a, b} {
				for _, k := range []string{"from-a", "from-b"} {
					if _, ok := tn.st.Get("prices", k); !ok {
						t.Fatalf("%s lacks %s", tn.name, k)
					}
				}
				ps := tn.n.Peers()
				if len(ps) != 1 || ps[0].Proto != tt.want {
					t.Fatalf("%s: peers %+v; want one link at protocol %d", tn.name, ps, tt.want)
				}
			}
		})
	}
}

// TestHandshakeNoCommonVersion: the refusal names both ranges, on the
// dialer's side (the listener answers so that it can) and the listener's.
func TestHandshakeNoCommonVersion(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- err
			return
		}
		defer c.Close()
		_, _, err = acceptHandshake(c, 0x2, nil, protoRange{2, 2}, 5*time.Second)
		accepted <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, err = dialHandshake(c, 0x3, nil, protoRange{3, 3}, 5*time.Second)
	want := "node 0000000000000002 speaks protocol versions [2,2], this node [3,3]: none in common"
	if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), want) {
		t.Fatalf("dialer: %v; want ErrHandshake saying %q", err, want)
	}
	err = <-accepted
	want = "node 0000000000000003 speaks protocol versions [3,3], this node [2,2]: none in common"
	if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), want) {
		t.Fatalf("listener: %v; want ErrHandshake saying %q", err, want)
	}
}
