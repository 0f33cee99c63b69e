package broadcast

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// addSpeaking adds a node that speaks the protocol versions r, as a build
// of another version would (protocols is read by New). The tests that
// call it do not run in parallel.
func (c *testCluster) addSpeaking(name string, r wire.Range) *testNode {
	old := protocols
	protocols = r
	defer func() { protocols = old }()
	return c.add(name, c.t.TempDir())
}

// TestRollingUpgrade: nodes of overlapping version ranges negotiate the
// highest common version and exchange records both ways; a range that
// does not overlap is refused at the handshake, both ways, and nothing
// passes. Not in parallel: it changes protocols (addSpeaking).
func TestRollingUpgrade(t *testing.T) {
	tests := []struct {
		name string
		a, b wire.Range
		want uint8 // 0: refused
	}{
		{"upgraded next to old", wire.Range{Min: 2, Max: 3}, wire.Range{Min: 2, Max: 2}, 2},
		{"both upgraded", wire.Range{Min: 2, Max: 3}, wire.Range{Min: 2, Max: 3}, 3},
		{"old dropped next to old", wire.Range{Min: 3, Max: 3}, wire.Range{Min: 2, Max: 2}, 0},
		{"digests next to whole vectors", wire.Range{Min: 2, Max: 5}, wire.Range{Min: 2, Max: 4}, 4},
		{"both digests", wire.Range{Min: 2, Max: 5}, wire.Range{Min: 2, Max: 5}, 5},
		{"cuts next to digests", wire.Range{Min: 2, Max: 6}, wire.Range{Min: 2, Max: 5}, 5},
		{"both cuts", wire.Range{Min: 2, Max: 6}, wire.Range{Min: 2, Max: 6}, 6},
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
				// The records may have crossed on the other's link alone
				// (it pulls what it lacks): wait for this one's too.
				testkit.Eventually(t, 20*time.Second, tn.name+"'s link connected", func() bool {
					ps := tn.n.Peers()
					return len(ps) == 1 && ps[0].Connected
				})
				ps := tn.n.Peers()
				if len(ps) != 1 || ps[0].Proto != tt.want {
					t.Fatalf("%s: peers %+v; want one link at protocol %d", tn.name, ps, tt.want)
				}
				if n := tn.n.BadFrames(); n != 0 {
					t.Fatalf("%s refused %d frames of the other build", tn.name, n)
				}
			}
		})
	}
}

// TestHandshakeNoCommonVersion: the refusal names both ranges, on the
// dialer's side (the listener answers so that it can) and the listener's.
func TestHandshakeNoCommonVersion(t *testing.T) {
	t.Parallel()
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
		_, _, err = wire.AcceptHandshake(c, 0x2, nil, wire.Range{Min: 2, Max: 2}, 5*time.Second)
		accepted <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, err = wire.DialHandshake(c, 0x3, nil, wire.Range{Min: 3, Max: 3}, 5*time.Second)
	want := "node 0000000000000002 speaks protocol versions [2,2], this node [3,3]: none in common"
	if !errors.Is(err, wire.ErrHandshake) || !strings.Contains(err.Error(), want) {
		t.Fatalf("dialer: %v; want wire.ErrHandshake saying %q", err, want)
	}
	err = <-accepted
	want = "node 0000000000000003 speaks protocol versions [3,3], this node [2,2]: none in common"
	if !errors.Is(err, wire.ErrHandshake) || !strings.Contains(err.Error(), want) {
		t.Fatalf("listener: %v; want wire.ErrHandshake saying %q", err, want)
	}
}

// addOld adds a node that speaks at most protocol 3, as the builds before
// records with time fields do (Config.ProtoMax): it refuses such records.
func (c *testCluster) addOld(name, dir string) *testNode {
	cfg := c.config
	c.config = func(k *Config) {
		if cfg != nil {
			cfg(k)
		}
		k.ProtoMax = ProtocolTimed - 1
	}
	defer func() { c.config = cfg }()
	return c.add(name, dir)
}

// TestOlderPeerNeverGetsTimedRecords: a node of protocol 3 beside two of
// protocol 4, over the data port and over NATS. An upgraded node's
// record with an expiry (written past the daemon's fleet_too_old guard,
// as a race with a joining node would) reaches the other upgraded node
// and never the old one: its origin is held back there from that record
// on, and no node counts a bad frame (the old node would refuse the
// record). The old node's own records still flow. Restarted at protocol
// 4 (upgraded), it gets everything and the fleet converges.
func TestOlderPeerNeverGetsTimedRecords(t *testing.T) {
	t.Parallel()
	eachTransport(t, testOlderPeerNeverGetsTimedRecords)
}

func testOlderPeerNeverGetsTimedRecords(t *testing.T, transport string) {
	c := &testCluster{t: t, net: newFaultNet(), names: map[uint64]string{}}
	if transport == "nats" {
		c.natsURL = testkit.NATS(t, nil).ClientURL()
	}
	a := c.add("a", t.TempDir())
	b := c.add("b", t.TempDir())
	oldDir := t.TempDir()
	old := c.addOld("old", oldDir)
	t.Cleanup(c.stop)
	c.wire()
	if _, hi := old.n.Protocols(); hi != ProtocolTimed-1 {
		t.Fatalf("the old node speaks up to %d", hi)
	}

	publish(t, a, "before", "1")
	timed := record.Message{Topic: "prices", Key: "sale", Value: []byte("9.99"), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
	res, err := a.st.Publish(&timed)
	if err != nil {
		t.Fatal(err)
	}
	after := publish(t, a, "after", "2")
	fromOld := publish(t, old, "from-old", "3")

	testkit.Eventually(t, 20*time.Second, "b holds all of a's records and the old node's", func() bool {
		return b.st.LastSeq(a.st.Origin()) == after.Seq && b.st.LastSeq(old.st.Origin()) == fromOld.Seq &&
			a.st.LastSeq(old.st.Origin()) == fromOld.Seq
	})
	heldBy := func(tn *testNode) uint64 {
		for _, p := range tn.n.Peers() {
			if p.Peer.Name == "old" {
				return p.HeldBack
			}
		}
		return 0
	}
	if transport == "tcp" { // under NATS a pushes to its replica alone
		testkit.Eventually(t, 20*time.Second, "a holds back its timed record from the old node", func() bool {
			return heldBy(a) == res.Seq
		})
	}
	// Some anti-entropy rounds later (the old node pulls a's origin from
	// both upgraded nodes), it still holds only what came before.
	r0 := old.n.Stats().Rounds
	testkit.Eventually(t, 20*time.Second, "ten rounds of the old node's anti-entropy", func() bool {
		return old.n.Stats().Rounds >= r0+10
	})
	if got := old.st.LastSeq(a.st.Origin()); got != res.Seq-1 {
		t.Fatalf("the old node holds a's origin up to seq %d, want %d (the record before the timed one)", got, res.Seq-1)
	}
	if _, ok := old.st.Get("prices", "before"); !ok {
		t.Fatal("the old node lacks the record before the timed one")
	}
	for _, tn := range []*testNode{a, b, old} {
		if n := tn.n.BadFrames(); n != 0 {
			t.Fatalf("%s counted %d bad frames: a record the old node cannot read was sent", tn.name, n)
		}
	}

	// The old node is upgraded: same data directory, this build's range.
	old.shutdown(t)
	c.nodes = c.nodes[:2]
	up := c.add("old", oldDir)
	c.wire()
	c.waitConverged(30 * time.Second)
	if e, ok := up.st.Get("prices", "sale"); !ok || string(e.Value) != "9.99" {
		t.Fatalf("the upgraded node's sale: %q %v", e.Value, ok)
	}
	testkit.Eventually(t, 20*time.Second, "nothing held back from the upgraded node", func() bool {
		return heldBy(a) == 0
	})
}

// TestOldProtocolRefusesTimedRecord: a record with time fields on a
// connection of protocol 3 is refused as the older build refuses it (the
// connection closes on a bad frame) and changes nothing.
func TestOldProtocolRefusesTimedRecord(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t, net: newFaultNet()}
	b := c.add("b", t.TempDir())
	t.Cleanup(c.stop)
	const origin = 0x5760
	m := record.Message{Topic: "prices", Key: "sale", Value: []byte("1"), EffectiveAt: time.Now().Add(time.Hour).UnixMilli()}
	rec := make([]byte, m.EncodedSize())
	record.Encode(rec, &m, record.Stamp{Origin: origin, Seq: 1, HLC: record.MakeHLC(time.Now().UnixMilli(), 0)})
	for _, tt := range []struct {
		protos wire.Range
		want   bool // held
	}{{wire.Range{Min: 2, Max: 3}, false}, {wire.Range{Min: 2, Max: 4}, true}} {
		conn, err := net.Dial("tcp", b.n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, keys, err := wire.DialHandshake(conn, origin, nil, tt.protos, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		bad := b.n.BadFrames()
		w := wire.NewWriter(conn, keys.DialerToListener, 0, nil)
		if err := w.WriteRecords([][]byte{rec}); err != nil {
			t.Fatal(err)
		}
		if tt.want {
			testkit.Eventually(t, 10*time.Second, "the record taken at protocol 4", func() bool {
				return b.st.LastSeq(origin) == 1
			})
		} else {
			testkit.Eventually(t, 10*time.Second, "the record refused at protocol 3", func() bool {
				return b.n.BadFrames() == bad+1
			})
			if b.st.LastSeq(origin) != 0 {
				t.Fatal("a record refused at protocol 3 was appended")
			}
		}
		conn.Close()
	}
}

// TestDigestsBesideOlderPeers: a fleet of nodes speaking protocol 6
// (digests at a cut), 5 (digests of the whole vector) and 4 (whole
// vectors). Each pair speaks the highest version both have; records that
// only the exchanges can carry (their origin cannot dial most of the
// fleet) reach every node whatever the pairs speak, and no node refuses a
// frame of another build. Not in parallel: it changes protocols
// (addSpeaking).
func TestDigestsBesideOlderPeers(t *testing.T) {
	c := &testCluster{t: t, net: newFaultNet(), names: map[uint64]string{}}
	c.config = func(cfg *Config) { cfg.Fanout = 2 }
	builds := []uint8{6, 5, 4}
	var nodes []*testNode
	for i := range 6 {
		nodes = append(nodes, c.addSpeaking(fmt.Sprintf("n%d", i), wire.Range{Min: 2, Max: builds[i%3]}))
	}
	t.Cleanup(c.stop)
	c.wire()
	for _, origin := range nodes[:3] { // one of each build
		for _, tn := range nodes {
			if tn != origin && tn != nodes[3] {
				c.net.cutOff(origin.name, tn.n.Addr())
			}
		}
	}
	for j := range 20 {
		for _, tn := range nodes {
			publish(t, tn, fmt.Sprintf("%s-%d", tn.name, j), "v")
		}
	}
	c.waitConverged(30 * time.Second)
	c.rounds(nodes, 5, nil)
	for i, tn := range nodes {
		for _, p := range tn.n.Peers() {
			want := min(builds[i%3], builds[c.byName(p.Peer.Name)%3])
			if p.Proto != 0 && p.Proto != want {
				t.Fatalf("%s's link to %s speaks %d; want %d", tn.name, p.Peer.Name, p.Proto, want)
			}
		}
		if n := tn.n.BadFrames(); n != 0 {
			t.Fatalf("%s refused %d frames", tn.name, n)
		}
		if i >= 3 && tn.n.Stats().Exchanges == 0 { // n0-n2 reach one peer each
			t.Fatalf("%s started no exchange", tn.name)
		}
	}
}

// byName is the index of the node called name.
func (c *testCluster) byName(name string) int {
	for i, tn := range c.nodes {
		if tn.name == name {
			return i
		}
	}
	return -1
}

// TestOldProtocolRefusesExpiryChange: an expiry change (a record of
// version 3) on a connection of protocol 6 is refused as a build of 6
// refuses it, and taken at protocol 7; a connection carries the record
// versions of its protocol (wire.MaxRecordVersion).
func TestOldProtocolRefusesExpiryChange(t *testing.T) {
	t.Parallel()
	for proto, want := range map[uint8]byte{ProtocolTimed - 1: record.Version, ProtocolTimed: record.Version2,
		ProtocolExpiry - 1: record.Version2, ProtocolExpiry: record.Version3,
		ProtocolRevival - 1: record.Version5, ProtocolRevival: record.Version6} {
		if got := wire.MaxRecordVersion(proto); got != want {
			t.Errorf("protocol %d carries records up to version %d, want %d", proto, got, want)
		}
	}
	c := &testCluster{t: t, net: newFaultNet()}
	b := c.add("b", t.TempDir())
	t.Cleanup(c.stop)
	const origin = 0x5761
	now := time.Now().UnixMilli()
	m := record.Message{Topic: "prices", Key: "sale", Value: []byte("1"), ExpiresAt: now + 3_600_000,
		ExpiryOf: record.Stamp{Origin: 0x99, Seq: 1, HLC: record.MakeHLC(now-10, 0)}}
	rec := make([]byte, m.EncodedSize())
	record.Encode(rec, &m, record.Stamp{Origin: origin, Seq: 1, HLC: record.MakeHLC(now, 0)})
	for _, tt := range []struct {
		protos wire.Range
		want   bool // taken
	}{{wire.Range{Min: 2, Max: ProtocolExpiry - 1}, false}, {wire.Range{Min: 2, Max: ProtocolExpiry}, true}} {
		conn, err := net.Dial("tcp", b.n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, keys, err := wire.DialHandshake(conn, origin, nil, tt.protos, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		bad := b.n.BadFrames()
		w := wire.NewWriter(conn, keys.DialerToListener, 0, nil)
		if err := w.WriteRecords([][]byte{rec}); err != nil {
			t.Fatal(err)
		}
		if tt.want {
			testkit.Eventually(t, 10*time.Second, "the expiry change taken at protocol 7", func() bool {
				return b.st.LastSeq(origin) == 1
			})
			if e, ok := b.st.Get("prices", "sale"); !ok || e.Stamp != m.ExpiryOf || e.ExpiresAt != m.ExpiresAt {
				t.Fatalf("the version the change brought: %+v %v", e, ok)
			}
		} else {
			testkit.Eventually(t, 10*time.Second, "the expiry change refused at protocol 6", func() bool {
				return b.n.BadFrames() == bad+1
			})
			if b.st.LastSeq(origin) != 0 {
				t.Fatal("an expiry change refused at protocol 6 was appended")
			}
		}
		conn.Close()
	}
}
