package broadcast

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/record"
)

// stuckPeer is a data port that completes the handshake and the first
// vector, then misbehaves: "never reads" keeps sending its vector but
// reads nothing (a stopped process's full receive window), "silent" reads
// everything and sends nothing more (a stopped or vanished listener).
type stuckPeer struct {
	id   uint64
	ln   net.Listener
	mode string
	keys [][]byte

	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
	wg    sync.WaitGroup
}

func startStuckPeer(t *testing.T, mode string, keys [][]byte) *stuckPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stuckPeer{id: 0x5757, ln: ln, mode: mode, keys: keys, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stuckPeer) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *stuckPeer) serve(c net.Conn) {
	defer p.wg.Done()
	_, keys, err := wire.AcceptHandshake(c, p.id, p.keys, protocols, 5*time.Second)
	if err != nil {
		return
	}
	w := wire.NewWriter(c, keys.ListenerToDialer, 0, nil)
	if w.WriteFrame(wire.FrameAck, wire.EncodeAck(nil)) != nil {
		return
	}
	switch p.mode {
	case "never reads":
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
			}
			if w.WriteFrame(wire.FrameAck, wire.EncodeAck(nil)) != nil {
				return
			}
		}
	case "silent":
		io.Copy(io.Discard, c)
	}
}

func (p *stuckPeer) close() {
	close(p.done)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// A peer that stops reading, or stops talking, must not stall the node:
// publishes go on, the other peer gets every record, and the link to the
// stuck peer is closed within PeerTimeout (counted as a stall), not held
// for good.
func TestStuckPeerDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"never reads", "silent"} {
		t.Run(mode, func(t *testing.T) {
			c := &testCluster{t: t, net: newFaultNet(), peerTimeout: 300 * time.Millisecond}
			a, b := c.add("a", t.TempDir()), c.add("b", t.TempDir())
			t.Cleanup(c.stop)
			stuck := startStuckPeer(t, mode, nil)
			a.n.SetPeers([]Peer{
				{ID: b.st.Origin(), Name: "b", Addr: b.n.Addr()},
				{ID: stuck.id, Name: "stuck", Addr: stuck.ln.Addr().String()},
			})
			b.n.SetPeers([]Peer{{ID: a.st.Origin(), Name: "a", Addr: a.n.Addr()}})

			// 24 MiB: more than the socket buffers hold on the way to a
			// peer that does not read.
			val := bytes.Repeat([]byte("x"), 16<<10)
			for i := 0; i < 1536; i++ {
				m := record.Message{Topic: "prices", Key: fmt.Sprintf("k%d", i%300), Value: val}
				if _, err := a.st.Publish(&m); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			c.waitConverged(20 * time.Second)
			testkit.Eventually(t, 20*time.Second, "the link to the stuck peer closed as a stall", func() bool {
				return a.n.Stalls() > 0
			})
			// And the node keeps publishing to b afterwards.
			publish(t, a, "after", "ok")
			c.waitConverged(10 * time.Second)
		})
	}
}

// A dialer that asks for records and never reads the answer must not hold
// the listener's connection (and its goroutines) for good.
func TestListenerLetsGoOfADialerThatStopsReading(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t, net: newFaultNet(), peerTimeout: 300 * time.Millisecond}
	b := c.add("b", t.TempDir())
	t.Cleanup(c.stop)
	val := bytes.Repeat([]byte("y"), 16<<10)
	var last uint64
	for i := 0; i < 1536; i++ {
		m := record.Message{Topic: "prices", Key: fmt.Sprintf("k%d", i%300), Value: val}
		res, err := b.st.Publish(&m)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Seq
	}
	conn, err := net.Dial("tcp", b.n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, keys, err := wire.DialHandshake(conn, 0x5758, nil, protocols, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := wire.NewWriter(conn, keys.DialerToListener, 0, nil)
	if err := w.WriteFrame(wire.FramePull, wire.EncodePull(wire.PullReq{Origin: b.st.Origin(), From: 1, To: last})); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the listener closed the connection of a dialer that stopped reading", func() bool {
		b.n.mu.Lock()
		defer b.n.mu.Unlock()
		return len(b.n.conns) == 0
	})
	if b.n.Stalls() == 0 {
		t.Fatal("the stall was not counted")
	}
}

// When membership drops a peer (it left, or failed: a stopped process),
// the connections it opened to this node are closed with it, though they
// are idle and would otherwise stay until Node.Close.
func TestInboundConnectionFreedWhenPeerLeaves(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t, net: newFaultNet()}
	b := c.add("b", t.TempDir())
	t.Cleanup(c.stop)
	conn, err := net.Dial("tcp", b.n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const peer = 0x5759
	if _, _, err := wire.DialHandshake(conn, peer, nil, protocols, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone.Close() // the peer's own data port: nobody answers there now
	b.n.SetPeers([]Peer{{ID: peer, Name: "p", Addr: gone.Addr().String()}})
	testkit.Eventually(t, 5*time.Second, "the inbound connection known by its peer", func() bool {
		b.n.mu.Lock()
		defer b.n.mu.Unlock()
		for _, id := range b.n.conns {
			if id == peer {
				return true
			}
		}
		return false
	})
	b.n.SetPeers(nil) // membership: the peer failed
	testkit.Eventually(t, 5*time.Second, "the inbound connection of a departed peer closed", func() bool {
		b.n.mu.Lock()
		defer b.n.mu.Unlock()
		return len(b.n.conns) == 0
	})
}

// After a connection that worked, a broken link redials after the
// shortest wait, not the longest one reached by earlier failures.
func TestBackoffResetsAfterHealthyConnection(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t, net: newFaultNet()}
	a, b := c.add("a", t.TempDir()), c.add("b", t.TempDir())
	t.Cleanup(c.stop)
	a.n.minBackoff, a.n.maxBackoff = time.Millisecond, 64*time.Millisecond
	c.net.cutOff("a", b.n.Addr())
	// Only a links to b, so that b gets a's record by a's push alone.
	a.n.SetPeers([]Peer{{ID: b.st.Origin(), Name: "b", Addr: b.n.Addr()}})
	l := func() *link {
		a.n.mu.Lock()
		defer a.n.mu.Unlock()
		return a.n.links[b.st.Origin()]
	}()
	testkit.Eventually(t, 10*time.Second, "the backoff at its maximum", func() bool {
		return time.Duration(l.retryIn.Load()) == a.n.maxBackoff
	})
	c.net.heal()
	// A healthy connection: a record pushed and acknowledged (a frame
	// after the first vector).
	res := publish(t, a, "k", "v")
	testkit.Eventually(t, 10*time.Second, "the record acknowledged", func() bool {
		return l.open.Load() && l.holdsCopy()[a.st.Origin()] >= res.Seq
	})
	c.net.drop("a", b.n.Addr())
	testkit.Eventually(t, 10*time.Second, "the link redialed", func() bool {
		return c.net.Dials("a", b.n.Addr()) > 0 // retryIn is set before the dial
	})
	if got := time.Duration(l.retryIn.Load()); got != a.n.minBackoff {
		t.Fatalf("redial after a healthy connection waited %s, want %s", got, a.n.minBackoff)
	}
}
