package broadcast

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/broadcast/internal/memstore"
	"github.com/cachecast/cachecast/internal/faultnet"
	"github.com/cachecast/cachecast/internal/testkit"

	"go.uber.org/goleak"

	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faultNet is the fault-injecting layer over real TCP the clusters of
// these tests dial through (internal/faultnet: cuts, drops, tampering),
// under the names the tests use.
type faultNet struct{ *faultnet.Net }

func newFaultNet() *faultNet { return &faultNet{faultnet.New()} }

func (f *faultNet) dialer(from string) func(context.Context, string) (net.Conn, error) {
	return f.Dialer(from)
}

// cutOff stops traffic from node from to the data port at addr (one way).
func (f *faultNet) cutOff(from, addr string) { f.Cut(from, addr) }

// drop closes the connections from node from to addr; the next dial
// goes through.
func (f *faultNet) drop(from, addr string) { f.Drop(from, addr) }

func (f *faultNet) heal() { f.Heal() }

type testNode struct {
	name string
	dir  string
	st   testStore
	disk *store.Store // st, on disk (testCluster.disk); nil in memory
	n    *Node
}

// testStore is what the tests use of a node's store: a Store, and the
// writes and reads of the view a client makes. Both the store on disk
// and the in-memory one (internal/memstore) are one.
type testStore interface {
	Store
	Publish(m *record.Message) (store.Result, error)
	Digest() [32]byte
	Get(topic, key string) (view.Entry, bool)
	Keys(topic, prefix, after string, limit int) []string
	Topics() []view.TopicInfo
	Close() error
}

type testCluster struct {
	t    *testing.T
	net  *faultNet
	keys [][]byte
	tls  *tls.Config // for the next node added, when set
	// disk puts the next nodes' stores on disk (package store, opts
	// applied), for what needs files: retention, recycling; else they
	// are in memory (internal/memstore, kept in mem by directory, so that
	// a node added again on a stopped one's directory restarts on its
	// data).
	disk bool
	opts func(*store.Options)
	mem  map[string]*memstore.Store
	// peerTimeout, when set, is the nodes' Config.PeerTimeout.
	peerTimeout time.Duration
	// bootstrapRecords, when set, is the nodes' Config.BootstrapRecords.
	bootstrapRecords uint64
	// config, when set, changes each node's Config before New.
	config func(*Config)

	natsURL string            // fan-out through NATS when set
	names   map[uint64]string // origin -> node name, for cutting NATS deliveries
	namesMu sync.Mutex        // guards names
	nodes   []*testNode
}

func newCluster(t *testing.T, size int, keys [][]byte) *testCluster {
	return newClusterOn(t, "tcp", size, keys)
}

// newClusterOn starts a cluster whose fan-out goes over transport: "tcp"
// (pushes on the data port) or "nats" (through an embedded NATS server).
func newClusterOn(t *testing.T, transport string, size int, keys [][]byte) *testCluster {
	c := &testCluster{t: t, net: newFaultNet(), keys: keys, names: map[uint64]string{}}
	if transport == "nats" {
		c.natsURL = testkit.NATS(t, nil).ClientURL()
	}
	for i := 0; i < size; i++ {
		c.add(fmt.Sprintf("n%d", i), t.TempDir())
	}
	c.wire()
	t.Cleanup(c.stop)
	return c
}

func (c *testCluster) add(name, dir string) *testNode {
	st, disk := c.openStore(dir)
	cfg := Config{
		Store: st, ListenAddr: "127.0.0.1:0", Keys: c.keys,
		Dial: c.net.dialer(name), SyncInterval: 50 * time.Millisecond, TLS: c.tls,
		PeerTimeout: c.peerTimeout, BootstrapRecords: c.bootstrapRecords,
	}
	if c.natsURL != "" {
		cfg.NATS = &NATSConfig{URL: c.natsURL}
	}
	if c.config != nil {
		c.config(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.names == nil {
		c.names = map[uint64]string{}
	}
	c.namesMu.Lock()
	c.names[st.Origin()] = name
	c.namesMu.Unlock()
	if n.nats != nil {
		// NATS deliveries obey the same cuts as the data port: a node cut
		// off from the origin does not get the origin's records.
		addr := n.Addr()
		drop := func(origin uint64) bool {
			c.namesMu.Lock()
			name := c.names[origin]
			c.namesMu.Unlock()
			return c.net.IsCut(name, addr)
		}
		n.nats.SetDrop(drop)
	}
	n.Start()
	tn := &testNode{name: name, dir: dir, st: st, disk: disk, n: n}
	c.nodes = append(c.nodes, tn)
	return tn
}

// openStore opens the store of a node on dir: on disk when c.disk is set
// (disk is then st), else in memory, the one dir had if any.
func (c *testCluster) openStore(dir string) (st testStore, disk *store.Store) {
	if !c.disk {
		if c.mem == nil {
			c.mem = map[string]*memstore.Store{}
		}
		if c.mem[dir] == nil {
			c.mem[dir] = memstore.New()
		}
		return c.mem[dir], nil
	}
	o := store.DefaultOptions(dir)
	o.SegmentSize = 1 << 20
	o.IndexChunkEntries = 4096
	if c.opts != nil {
		c.opts(&o)
	}
	disk, err := store.Open(o)
	if err != nil {
		c.t.Fatal(err)
	}
	return disk, disk
}

// wire tells every live node about every other, as membership would.
func (c *testCluster) wire() {
	var peers []Peer
	for _, tn := range c.nodes {
		if tn.n != nil {
			_, proto := tn.n.Protocols()
			peers = append(peers, Peer{ID: tn.st.Origin(), Name: tn.name, Addr: tn.n.Addr(), Proto: proto})
		}
	}
	for _, tn := range c.nodes {
		if tn.n != nil {
			tn.n.SetPeers(peers)
		}
	}
}

func (tn *testNode) shutdown(t *testing.T) {
	if tn.n == nil {
		return
	}
	tn.n.Close()
	if err := tn.st.Close(); err != nil {
		t.Error(err)
	}
	tn.n, tn.st, tn.disk = nil, nil, nil
}

func (c *testCluster) stop() {
	for _, tn := range c.nodes {
		tn.shutdown(c.t)
	}
}

func (c *testCluster) live() []*testNode {
	var out []*testNode
	for _, tn := range c.nodes {
		if tn.n != nil {
			out = append(out, tn)
		}
	}
	return out
}

// waitConverged waits until every live node holds the same version vector
// and the same view digest.
func (c *testCluster) waitConverged(within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		nodes := c.live()
		same := true
		v0, d0 := fmt.Sprint(nodes[0].st.Vector()), nodes[0].st.Digest()
		for _, tn := range nodes[1:] {
			if fmt.Sprint(tn.st.Vector()) != v0 || tn.st.Digest() != d0 {
				same = false
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			for _, tn := range nodes {
				c.t.Logf("%s: vector %v digest %x", tn.name, tn.st.Vector(), tn.st.Digest())
			}
			for _, tn := range nodes[1:] {
				for _, top := range nodes[0].st.Topics() {
					for _, k := range nodes[0].st.Keys(top.Name, "", "", 0) {
						e0, _ := nodes[0].st.Get(top.Name, k)
						e, ok := tn.st.Get(top.Name, k)
						if !ok || e.Stamp != e0.Stamp {
							c.t.Logf("%s/%s: %s has %q %+v, %s has %q %+v (ok %v)", top.Name, k, nodes[0].name, e0.Value, e0.Stamp, tn.name, e.Value, e.Stamp, ok)
							for _, st := range []record.Stamp{e0.Stamp, e.Stamp} {
								tn.st.ReadOrigin(st.Origin, st.Seq, st.Seq, func(r record.Record) error {
									c.t.Logf("   %s's log: origin %x seq %d: key %s value %q hlc %d", tn.name, r.Origin(), r.Seq(), r.Key(), r.Value(), r.HLC())
									return nil
								})
							}
						}
					}
				}
			}
			c.t.Fatalf("not converged within %s", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func publish(t *testing.T, tn *testNode, key, val string) store.Result {
	t.Helper()
	m := record.Message{Topic: "prices", Key: key, Value: []byte(val)}
	res, err := tn.st.Publish(&m)
	if err != nil {
		t.Fatalf("%s publish: %v", tn.name, err)
	}
	return res
}

func TestFanOutConverges(t *testing.T) {
	t.Parallel()
	eachTransport(t, testFanOutConverges)
}

func testFanOutConverges(t *testing.T, transport string) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("nodes=%d", size), func(t *testing.T) {
			c := newClusterOn(t, transport, size, nil)
			var wg sync.WaitGroup
			for i, tn := range c.nodes {
				wg.Add(1)
				go func() { // publish's t.Fatalf may not run here: off the test's goroutine
					defer wg.Done()
					for j := 0; j < 300; j++ {
						// Every node writes its own keys and the shared ones.
						for _, key := range []string{fmt.Sprintf("own-%d-%d", i, j%50), fmt.Sprintf("shared-%d", j%20)} {
							m := record.Message{Topic: "prices", Key: key, Value: fmt.Appendf(nil, "%d/%d", i, j)}
							if _, err := tn.st.Publish(&m); err != nil {
								t.Errorf("%s publish: %v", tn.name, err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			c.waitConverged(10 * time.Second)
			for _, tn := range c.nodes {
				if got := len(tn.st.Keys("prices", "", "", 0)); got != size*50+20 {
					t.Fatalf("%s holds %d keys, want %d", tn.name, got, size*50+20)
				}
			}
		})
	}
}

func TestPartitionHeals(t *testing.T) {
	t.Parallel()
	eachTransport(t, testPartitionHeals)
}

func testPartitionHeals(t *testing.T, transport string) {
	c := newClusterOn(t, transport, 5, nil)
	a, b := c.nodes[:2], c.nodes[2:]
	for _, x := range a {
		for _, y := range b {
			c.net.cutOff(x.name, y.n.Addr())
			c.net.cutOff(y.name, x.n.Addr())
		}
	}
	for j := 0; j < 100; j++ {
		publish(t, a[j%2], fmt.Sprintf("k%d", j%30), fmt.Sprintf("a%d", j))
		publish(t, b[j%3], fmt.Sprintf("k%d", j%30), fmt.Sprintf("b%d", j))
	}
	// The sides differ while cut off.
	if a[0].st.Digest() == b[0].st.Digest() {
		t.Fatal("the partition let writes through")
	}
	c.net.heal()
	c.waitConverged(10 * time.Second)
	// The (HLC, origin) rule decided each key the same way everywhere.
	for j := 0; j < 30; j++ {
		e0, _ := c.nodes[0].st.Get("prices", fmt.Sprintf("k%d", j))
		for _, tn := range c.nodes[1:] {
			e, _ := tn.st.Get("prices", fmt.Sprintf("k%d", j))
			if !bytes.Equal(e.Value, e0.Value) || e.Stamp != e0.Stamp {
				t.Fatalf("key k%d differs between n0 and %s", j, tn.name)
			}
		}
	}
}

func TestOneWayCut(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, nil)
	// n0 cannot reach n1 at all: n1 still gets n0's records through n2,
	// which pulls them from n0 and serves them to n1's pulls.
	c.net.cutOff("n0", c.nodes[1].n.Addr())
	c.net.cutOff("n1", c.nodes[0].n.Addr())
	for j := 0; j < 50; j++ {
		publish(t, c.nodes[0], fmt.Sprintf("k%d", j), "v")
	}
	c.waitConverged(10 * time.Second)
}

func TestLateJoinerAndRestart(t *testing.T) {
	t.Parallel()
	eachTransport(t, testLateJoinerAndRestart)
}

func testLateJoinerAndRestart(t *testing.T, transport string) {
	c := newClusterOn(t, transport, 2, nil)
	for j := 0; j < 500; j++ {
		publish(t, c.nodes[j%2], fmt.Sprintf("k%d", j%100), fmt.Sprint(j))
	}
	late := c.add("late", t.TempDir())
	c.wire()
	c.waitConverged(10 * time.Second)

	// A node that was down catches up, also from records whose origin is
	// down now.
	n1 := c.nodes[1]
	n1.shutdown(t)
	c.wire()
	for j := 0; j < 200; j++ {
		publish(t, c.nodes[0], fmt.Sprintf("k%d", j%100), fmt.Sprint("after", j))
	}
	c.nodes[0].shutdown(t) // the origin of the newest writes is gone
	c.wire()
	restarted := c.add("n1b", n1.dir)
	c.wire()
	c.waitConverged(10 * time.Second)
	if restarted.st.Digest() != late.st.Digest() {
		t.Fatal("restarted node differs")
	}
}

func TestWaitReplica(t *testing.T) {
	t.Parallel()
	eachTransport(t, testWaitReplica)
}

func testWaitReplica(t *testing.T, transport string) {
	c := newClusterOn(t, transport, 2, nil)
	a, b := c.nodes[0], c.nodes[1]
	a.n.SetReplica(b.st.Origin())
	res := publish(t, a, "k", "v")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.n.WaitReplica(ctx, b.st.Origin(), res.Seq); err != nil {
		t.Fatalf("replica wait: %v", err)
	}
	if e, ok := b.st.Get("prices", "k"); !ok || string(e.Value) != "v" {
		t.Fatal("the replica acked a record it does not hold")
	}
	// Cut off both ways, the wait times out instead of returning success.
	// (Cut one way, the replica would pull the record and say so in an
	// exchange of its own: that is a success.)
	c.net.cutOff("n0", b.n.Addr())
	c.net.cutOff("n1", a.n.Addr())
	res = publish(t, a, "k", "v2")
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := a.n.WaitReplica(short, b.st.Origin(), res.Seq); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("replica wait on a cut link: %v", err)
	}
	if err := a.n.WaitReplica(short, 12345, res.Seq); !errors.Is(err, ErrNoPeer) {
		t.Fatalf("unknown peer: %v", err)
	}
}

func TestWrongKeyRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, [][]byte{[]byte("0123456789abcdef")})
	intruders := []struct {
		name string
		keys [][]byte
	}{
		{"wrong key", [][]byte{[]byte("fedcba9876543210")}},
		{"no key", nil},
	}
	for _, in := range intruders {
		t.Run(in.name, func(t *testing.T) {
			c.keys = in.keys
			x := c.add("x-"+in.name, t.TempDir())
			c.keys = [][]byte{[]byte("0123456789abcdef")}
			r0, r1 := c.nodes[0].n.Rejected(), c.nodes[1].n.Rejected()
			c.wire()
			publish(t, x, "intruder", "bad")
			publish(t, c.nodes[0], "good", "ok")
			// Each has tried the others (x pushes to both, they push to
			// x) and been refused at the handshake, before any frame.
			testkit.Eventually(t, 10*time.Second, "the handshakes with the intruder refused both ways", func() bool {
				return c.nodes[0].n.Rejected() > r0 && c.nodes[1].n.Rejected() > r1 && x.n.Rejected() > 0
			})
			for _, tn := range c.nodes[:2] {
				if _, ok := tn.st.Get("prices", "intruder"); ok {
					t.Fatalf("%s took a record from a node without the key", tn.name)
				}
			}
			if _, ok := x.st.Get("prices", "good"); ok {
				t.Fatal("a node without the key got the cluster's records")
			}
			if c.nodes[0].n.Rejected() == 0 {
				t.Fatal("no refusal counted")
			}
			x.shutdown(t)
			c.wire()
		})
	}
	c.nodes = c.nodes[:2]
	publish(t, c.nodes[0], "after", "ok")
	c.waitConverged(5 * time.Second)
}

func TestGarbageOnDataPort(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, nil)
	target := c.nodes[0]
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		conn, err := net.Dial("tcp", target.n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, rng.IntN(4096))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		conn.Write(junk)
		conn.Close()
	}
	publish(t, c.nodes[1], "k", "v")
	c.waitConverged(5 * time.Second)
}

// TestLateJoinerAfterRecycling: the origin has recycled the start of its
// log, so a node joining later cannot pull it; it bootstraps from a
// peer's snapshot and converges.
func TestLateJoinerAfterRecycling(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t, net: newFaultNet(), disk: true}
	c.opts = func(o *store.Options) {
		o.SegmentSize = 64 << 10
		o.RetentionBytes = 4 * o.SegmentSize
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	t.Cleanup(c.stop)
	a := c.add("a", dirs[0])
	b := c.add("b", dirs[1])
	c.wire()
	for j := 0; j < 2000; j++ {
		publish(t, []*testNode{a, b}[j%2], fmt.Sprintf("k%d", j%300), fmt.Sprintf("v%d-%s", j, strings.Repeat("x", 200)))
		if j%200 == 199 {
			a.disk.Snapshot() // lets retention recycle
			b.disk.Snapshot()
		}
	}
	if a.disk.Stats().OldestPos == 0 || b.disk.Stats().OldestPos == 0 {
		t.Fatalf("nothing recycled: oldest %d, %d", a.disk.Stats().OldestPos, b.disk.Stats().OldestPos)
	}
	late := c.add("late", dirs[2])
	c.wire()
	c.waitConverged(10 * time.Second)
	// The counter moves just after the store took the snapshot, which is
	// what convergence saw.
	testkit.Until(t, 2*time.Second, "the late node's bootstrap", func() string {
		if late.n.Bootstraps() == 0 {
			return "the late node converged without a bootstrap: the test did not test it"
		}
		return ""
	})
	if late.disk.Stats().Keys != 300 {
		t.Fatalf("late node has %d keys, want 300", late.disk.Stats().Keys)
	}
	// And it keeps up with what comes after.
	publish(t, a, "after", "bootstrap")
	c.waitConverged(5 * time.Second)
}

// TestFreshNodeTakesSnapshot: a node that joins empty while its peers
// hold more than BootstrapRecords takes one peer's snapshot (streamed
// into a file in its data directory, removed after) instead of pulling
// the records, and the peers do not push it their old records
// meanwhile; it converges and keeps up with what comes after.
func TestFreshNodeTakesSnapshot(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t, net: newFaultNet(), bootstrapRecords: 1000, disk: true}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	t.Cleanup(c.stop)
	a := c.add("a", dirs[0])
	b := c.add("b", dirs[1])
	c.wire()
	for j := 0; j < 3000; j++ {
		publish(t, []*testNode{a, b}[j%2], fmt.Sprintf("k%d", j), "v")
	}
	c.waitConverged(10 * time.Second)
	sentA, sentB := a.n.BytesSent(), b.n.BytesSent()
	fresh := c.add("fresh", dirs[2])
	c.wire()
	c.waitConverged(20 * time.Second)
	testkit.Until(t, 2*time.Second, "the fresh node's bootstrap", func() string {
		if n := fresh.n.Bootstraps(); n != 1 {
			return fmt.Sprintf("%d bootstraps, want 1", n)
		}
		return ""
	})
	if da, db := a.n.BytesSent()-sentA, b.n.BytesSent()-sentB; da != 0 || db != 0 {
		t.Errorf("the peers pushed %d and %d bytes of old records to the fresh node, want none", da, db)
	}
	if k := fresh.disk.Stats().Keys; k != 3000 {
		t.Fatalf("the fresh node holds %d keys, want 3000", k)
	}
	left, _ := filepath.Glob(filepath.Join(dirs[2], "*bootstrap*"))
	if len(left) != 0 {
		t.Errorf("bootstrap files left in the data directory: %v", left)
	}
	// What comes after is pushed, and nothing old with it: a pushes its
	// new record to b and (once it learned the fresh node bootstrapped)
	// to the fresh node, b pushes nothing.
	res := publish(t, a, "after", "bootstrap")
	c.waitConverged(5 * time.Second)
	var size int
	a.st.ReadOrigin(res.Origin, res.Seq, res.Seq, func(r record.Record) error { size = len(r); return nil })
	if da, db := a.n.BytesSent()-sentA, b.n.BytesSent()-sentB; da > uint64(2*size) || db != 0 {
		t.Errorf("after the bootstrap a pushed %d bytes and b %d, want at most %d (one record of %d bytes to each peer) and 0", da, db, 2*size, size)
	}
}

// TestBehindNodePulls: a node cut off while its peer wrote more than
// BootstrapRecords, but holding more than it lacks, catches up by pulls,
// not a snapshot; the peer holds its pushes until the node is within
// BootstrapRecords of it (so most records are not sent twice), and pushes
// what comes after.
func TestBehindNodePulls(t *testing.T) {
	t.Parallel()
	c := &testCluster{t: t, net: newFaultNet(), bootstrapRecords: 1000}
	dirs := []string{t.TempDir(), t.TempDir()}
	t.Cleanup(c.stop) // before the directories' removal
	a := c.add("a", dirs[0])
	b := c.add("b", dirs[1])
	c.wire()
	for j := 0; j < 3000; j++ {
		publish(t, b, fmt.Sprintf("b%d", j), "v")
	}
	c.waitConverged(30 * time.Second)
	c.net.cutOff(a.name, b.n.Addr())
	c.net.cutOff(b.name, a.n.Addr())
	var size int
	for j := 0; j < 1500; j++ {
		res := publish(t, a, fmt.Sprintf("a%04d", j), "v")
		a.st.ReadOrigin(res.Origin, res.Seq, res.Seq, func(r record.Record) error { size = len(r); return nil })
	}
	sentA := a.n.BytesSent()
	c.net.heal()
	c.waitConverged(30 * time.Second)
	if n := b.n.Bootstraps(); n != 0 {
		t.Fatalf("b took %d snapshots, want none: it holds more than it lacks", n)
	}
	if n := b.n.Pulls(); n == 0 {
		t.Fatal("b converged without a pull: the test did not test it")
	}
	if da := a.n.BytesSent() - sentA; da > uint64(1000*size) {
		t.Errorf("a pushed %d bytes of the %d records b pulled, want at most BootstrapRecords (1000) of %d bytes", da, 1500, size)
	}
	sentA = a.n.BytesSent()
	publish(t, a, "after", "pulls")
	// Generous bounds: under -race on two busy cores a round of vector
	// exchanges can take seconds; the test is about what is sent.
	testkit.Until(t, 30*time.Second, "a's push of its new record", func() string {
		if a.n.BytesSent() == sentA {
			return "a pushed nothing after b caught up"
		}
		return ""
	})
	c.waitConverged(30 * time.Second)
}

// TestTamperedFrameRefused puts a man in the middle on the data port that
// changes a value in a pushed record and recomputes the record's CRC, as an
// attacker on the path would: the receiver must refuse the frame (its MAC
// fails), drop the connection and never apply the record; once the path is
// clean the genuine record arrives.
func TestTamperedFrameRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, [][]byte{[]byte("0123456789abcdef0123456789abcdef")})
	a, b := c.nodes[0], c.nodes[1]
	genuine, forged := []byte("price=12.50"), []byte("price=99.99")
	var tampered atomic.Int64
	c.net.SetTamper(func(from string, p []byte) {
		if from == a.name && forgeRecord(p, genuine, forged) {
			tampered.Add(1)
		}
	})

	publish(t, a, "sku-1", string(genuine))
	testkit.Until(t, 10*time.Second, "a forged record refused", func() string {
		if tampered.Load() == 0 || b.n.BadFrames() == 0 {
			return fmt.Sprintf("%d records forged on the way, %d bad frames refused by %s", tampered.Load(), b.n.BadFrames(), b.name)
		}
		return ""
	})
	if e, ok := b.st.Get("prices", "sku-1"); ok && bytes.Equal(e.Value, forged) {
		t.Fatalf("%s applied the forged record", b.name)
	}
	// The connection was dropped: a's link dials b again.
	testkit.Until(t, 10*time.Second, "the link to be dialed again", func() string {
		dials := c.net.Dials(a.name, b.n.Addr())
		if dials < 2 {
			return fmt.Sprintf("%s's link to %s was not dropped after the bad frame (%d dials)", a.name, b.name, dials)
		}
		return ""
	})

	c.net.SetTamper(nil)
	c.waitConverged(10 * time.Second)
	if e, ok := b.st.Get("prices", "sku-1"); !ok || !bytes.Equal(e.Value, genuine) {
		t.Fatalf("%s holds %q (ok %v), want %q", b.name, e.Value, ok, genuine)
	}
}

// forgeRecord finds a valid record in p whose value contains old, puts new
// (as long) in its place and recomputes the record's CRC-32C. It reports
// whether it forged one.
func forgeRecord(p, old, new []byte) bool {
	i := bytes.Index(p, old)
	if i < 0 {
		return false
	}
	for start := i - record.HeaderSize; start >= max(0, i-4096); start-- {
		r, err := record.Decode(p[start:])
		if err != nil || r == nil || start+len(r) < i+len(old) {
			continue
		}
		copy(p[i:], new)
		binary.LittleEndian.PutUint32(p[start+4:], crc32.Checksum(p[start+8:start+len(r)], crc32.MakeTable(crc32.Castagnoli)))
		if _, err := record.Decode(p[start:]); err != nil {
			panic("forgeRecord: the forged record does not decode: " + err.Error())
		}
		return true
	}
	return false
}
