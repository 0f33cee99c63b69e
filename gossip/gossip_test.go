package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cachecast/cachecast/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bound is how long a test waits for the cluster to converge. The "local"
// profile converges in well under a second on loopback; the margin is for
// -race on a busy machine.
const bound = 10 * time.Second

// leakCheck registers a goroutine leak check that runs after every other
// cleanup of the test (cleanups run last-registered first), allowing a
// probe in flight the same bound as every other wait here
// (testkit.FindLeaks says why).
func leakCheck(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if err := testkit.FindLeaks(bound); err != nil {
			t.Error(err)
		}
	})
}

// recorder drains a node's Events channel until Shutdown closes it.
type recorder struct {
	mu   sync.Mutex
	evs  []Event
	done chan struct{}
}

func record(g *Gossip) *recorder {
	r := &recorder{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range g.Events() {
			r.mu.Lock()
			r.evs = append(r.evs, ev)
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *recorder) find(typ EventType, name string) (Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.evs {
		if ev.Type == typ && ev.Member.Name == name {
			return ev, true
		}
	}
	return Event{}, false
}

func (r *recorder) about(name string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, ev := range r.evs {
		if ev.Member.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

type tnode struct {
	*Gossip
	rec *recorder // nil when the test reads Events itself
}

// testConfig is a node on 127.0.0.1 with a free port and fast timers. The
// data address is derived from id, so tests can check it travelled.
func testConfig(t *testing.T, name string, id uint64) Config {
	return Config{
		NodeName:    name,
		NodeID:      id,
		BindAddr:    "127.0.0.1:0",
		DataAddr:    fmt.Sprintf("127.0.0.1:%d", 20000+id%10000),
		Profile:     ProfileLocal,
		JoinTimeout: 5 * time.Second,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.InfoLevel)).Named(name),
	}
}

// start creates a node, shut down at the end of the test. With record,
// its events are recorded.
func start(t *testing.T, cfg Config, rec bool) *tnode {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.NodeName, err)
	}
	n := &tnode{Gossip: g}
	if rec {
		n.rec = record(g)
	}
	t.Cleanup(func() {
		if err := g.Shutdown(); err != nil {
			t.Errorf("Shutdown(%s): %v", cfg.NodeName, err)
		}
		if n.rec != nil {
			<-n.rec.done
		}
	})
	return n
}

func join(t *testing.T, n *tnode, seeds ...string) {
	t.Helper()
	n.cfg.Join = seeds
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if k, err := n.Join(ctx); err != nil || k != len(seeds) {
		t.Fatalf("Join(%s -> %v) = %d, %v", n.cfg.NodeName, seeds, k, err)
	}
}

func names(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name + "/" + m.State.String()
	}
	return out
}

// cluster starts n recorded nodes; all but the first join the first.
func cluster(t *testing.T, n int, mod func(*Config)) []*tnode {
	t.Helper()
	var nodes []*tnode
	for i := range n {
		cfg := testConfig(t, fmt.Sprintf("node-%d", i), uint64(0x1000+i))
		if mod != nil {
			mod(&cfg)
		}
		nodes = append(nodes, start(t, cfg, true))
	}
	for _, nd := range nodes[1:] {
		join(t, nd, nodes[0].Addr())
	}
	for _, nd := range nodes {
		testkit.Eventually(t, bound, nd.cfg.NodeName+" to see all alive", func() bool { return len(nd.Alive()) == n })
	}
	return nodes
}

func TestThreeNodesJoinViaOneSeed(t *testing.T) {
	leakCheck(t)
	// IDs out of name order, so that the two sort orders differ; c's data
	// address has an unspecified host, to be filled in with its gossip IP.
	specs := []struct {
		name     string
		id       uint64
		dataAddr string
		want     string
	}{
		{"a", 0x3000000000000003, "127.0.0.1:7101", "127.0.0.1:7101"},
		{"b", 0x1000000000000001, "127.0.0.1:7102", "127.0.0.1:7102"},
		{"c", 0x2000000000000002, "0.0.0.0:7103", "127.0.0.1:7103"},
	}
	var nodes []*tnode
	for _, s := range specs {
		cfg := testConfig(t, s.name, s.id)
		cfg.DataAddr = s.dataAddr
		nodes = append(nodes, start(t, cfg, true))
	}
	for i, n := range nodes {
		l := n.Local()
		if l.Name != specs[i].name || l.ID != specs[i].id || l.DataAddr != specs[i].want ||
			l.Addr != n.Addr() || l.State != StateAlive || l.Proto != ProtocolVersion {
			t.Fatalf("Local() = %+v", l)
		}
		if !strings.HasPrefix(n.Addr(), "127.0.0.1:") || strings.HasSuffix(n.Addr(), ":0") {
			t.Fatalf("Addr() = %q, want 127.0.0.1 and the bound port", n.Addr())
		}
	}
	join(t, nodes[1], nodes[0].Addr())
	join(t, nodes[2], nodes[0].Addr())

	for _, n := range nodes {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to see 3 alive", func() bool { return len(n.Alive()) == 3 })
	}
	for _, n := range nodes {
		members := n.Members()
		if got := names(members); !slices.Equal(got, []string{"a/alive", "b/alive", "c/alive"}) {
			t.Fatalf("%s: Members() = %v, want a, b, c alive, by name", n.cfg.NodeName, got)
		}
		for i, m := range members {
			want := Member{Name: specs[i].name, ID: specs[i].id, Addr: nodes[i].Addr(),
				DataAddr: specs[i].want, Proto: ProtocolVersion, ProtoMin: ProtocolVersion, State: StateAlive}
			if m != want {
				t.Fatalf("%s sees %+v, want %+v", n.cfg.NodeName, m, want)
			}
		}
		alive := n.Alive()
		if ids := []uint64{alive[0].ID, alive[1].ID, alive[2].ID}; !slices.IsSorted(ids) {
			t.Fatalf("%s: Alive() not sorted by ID: %x", n.cfg.NodeName, ids)
		}
		// One Joined event per other node, with its metadata, and none for itself.
		for i, s := range specs {
			evs := n.rec.about(s.name)
			if s.name == n.cfg.NodeName {
				if len(evs) != 0 {
					t.Fatalf("%s got events about itself: %+v", s.name, evs)
				}
				continue
			}
			testkit.Eventually(t, bound, n.cfg.NodeName+" to get Joined for "+s.name, func() bool {
				_, ok := n.rec.find(EventJoined, s.name)
				return ok
			})
			ev, _ := n.rec.find(EventJoined, s.name)
			if ev.Member.ID != s.id || ev.Member.DataAddr != s.want || ev.Member.Addr != nodes[i].Addr() {
				t.Fatalf("%s: Joined event %+v", n.cfg.NodeName, ev.Member)
			}
		}
	}
}

func TestGracefulLeave(t *testing.T) {
	leakCheck(t)
	nodes := cluster(t, 3, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]

	if err := c.Leave(bound); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if c.Local().State != StateLeft {
		t.Fatalf("after Leave, Local().State = %v", c.Local().State)
	}
	if err := c.Leave(bound); err != nil { // idempotent
		t.Fatalf("second Leave: %v", err)
	}
	for _, n := range []*tnode{a, b} {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to get Left for node-2", func() bool {
			_, ok := n.rec.find(EventLeft, "node-2")
			return ok
		})
		ev, _ := n.rec.find(EventLeft, "node-2")
		if ev.Member.State != StateLeft || ev.Member.ID != c.Local().ID || ev.Member.DataAddr != c.Local().DataAddr {
			t.Fatalf("%s: Left event %+v", n.cfg.NodeName, ev.Member)
		}
		if _, failed := n.rec.find(EventFailed, "node-2"); failed {
			t.Fatalf("%s reported a graceful leave as a failure", n.cfg.NodeName)
		}
		if got := names(n.Members()); !slices.Equal(got, []string{"node-0/alive", "node-1/alive", "node-2/left"}) {
			t.Fatalf("%s: Members() = %v", n.cfg.NodeName, got)
		}
		if got := names(n.Alive()); !slices.Equal(got, []string{"node-0/alive", "node-1/alive"}) {
			t.Fatalf("%s: Alive() = %v", n.cfg.NodeName, got)
		}
	}
	c.cfg.Join = []string{a.Addr()}
	if n, err := c.Join(context.Background()); n != 0 || !errors.Is(err, ErrJoin) || !strings.Contains(err.Error(), "has left") {
		t.Fatalf("Join after Leave = %d, %v; want ErrJoin, has left", n, err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Leave after Shutdown: %v, want ErrShutdown", err)
	}
	if c.Local().State != StateLeft {
		t.Fatalf("after Leave and Shutdown, Local().State = %v, want left", c.Local().State)
	}
}

// A whole cluster stopped at once: each node leaves and shuts down at
// the same moment, so the last one has nobody to confirm its leave. No
// node may wait its timeout (40s here) for it: each returns within bound.
func TestLeaveAllAtOnce(t *testing.T) {
	leakCheck(t)
	nodes := cluster(t, 3, nil)
	done := make(chan string, len(nodes))
	for _, n := range nodes {
		go func() {
			if err := n.Leave(40 * time.Second); err != nil {
				t.Errorf("%s: Leave: %v", n.cfg.NodeName, err)
			}
			if err := n.Shutdown(); err != nil {
				t.Errorf("%s: Shutdown: %v", n.cfg.NodeName, err)
			}
			done <- n.cfg.NodeName
		}()
	}
	deadline := time.After(bound)
	for range nodes {
		select {
		case name := <-done:
			t.Logf("%s left and stopped", name)
		case <-deadline:
			t.Fatalf("a node still waits for a leave nobody can confirm after %s", bound)
		}
	}
}

func TestFailureDetected(t *testing.T) {
	leakCheck(t)
	nodes := cluster(t, 3, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]

	stopped := time.Now()
	if err := c.Shutdown(); err != nil { // no Leave: a crash, as the others see it
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if c.Local().State != StateDead {
		t.Fatalf("after Shutdown without Leave, Local().State = %v", c.Local().State)
	}
	for _, n := range []*tnode{a, b} {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to get Failed for node-2", func() bool {
			_, ok := n.rec.find(EventFailed, "node-2")
			return ok
		})
		ev, _ := n.rec.find(EventFailed, "node-2")
		if ev.Member.State != StateDead || ev.Member.ID != c.Local().ID {
			t.Fatalf("%s: Failed event %+v", n.cfg.NodeName, ev.Member)
		}
		if _, left := n.rec.find(EventLeft, "node-2"); left {
			t.Fatalf("%s reported a crash as a graceful leave", n.cfg.NodeName)
		}
		if got := names(n.Members()); !slices.Equal(got, []string{"node-0/alive", "node-1/alive", "node-2/dead"}) {
			t.Fatalf("%s: Members() = %v", n.cfg.NodeName, got)
		}
	}
	t.Logf("failure detected by both in %s", time.Since(stopped).Round(time.Millisecond))
}

// TestLeaveThenCrash: the leaving flag belongs to the node that left. A
// node started again under the same name (a restart) is alive again, and
// when it then crashes the others report a failure, not a leave.
func TestLeaveThenCrash(t *testing.T) {
	leakCheck(t)
	nodes := cluster(t, 3, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]
	if err := c.Leave(bound); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	for _, n := range []*tnode{a, b} {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to get Left for node-2", func() bool {
			_, ok := n.rec.find(EventLeft, "node-2")
			return ok
		})
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// The same name and ID on a new port, as a restarted daemon is.
	again := start(t, testConfig(t, "node-2", 0x1002), false)
	join(t, again, a.Addr())
	for _, n := range []*tnode{a, b} {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to see node-2 alive again", func() bool {
			return slices.Contains(names(n.Alive()), "node-2/alive")
		})
	}
	// memberlist may still be relaying the old leave while the restarted
	// node refutes it (a "failed" then "joined" again right after the
	// restart): wait for the restart to settle before the crash.
	settled := func(n *tnode) bool {
		evs := n.rec.about("node-2")
		return len(evs) > 0 && evs[len(evs)-1].Type == EventJoined
	}
	before := map[*tnode]int{}
	for _, n := range []*tnode{a, b} {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to hold node-2 joined", func() bool { return settled(n) })
		before[n] = len(n.rec.about("node-2"))
	}
	if err := again.Shutdown(); err != nil { // no Leave: a crash
		t.Fatal(err)
	}
	for _, n := range []*tnode{a, b} {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to get Failed for node-2 after the crash", func() bool {
			evs := n.rec.about("node-2")[before[n]:]
			return slices.ContainsFunc(evs, func(ev Event) bool { return ev.Type == EventFailed })
		})
		// One leave in all: the first one. The restarted node's crash,
		// and anything memberlist replayed around the restart, is no leave.
		var types []string
		left := 0
		for _, ev := range n.rec.about("node-2") {
			types = append(types, ev.Type.String())
			if ev.Type == EventLeft {
				left++
			}
		}
		if left != 1 || types[1] != "left" {
			t.Fatalf("%s: events about node-2: %v; want one leave, the second event", n.cfg.NodeName, types)
		}
		// The Failed event may be one memberlist replayed around the
		// restart, before the crash was detected: wait for the member
		// table to say dead rather than read it once.
		testkit.Until(t, bound, n.cfg.NodeName+" to hold node-2 dead", func() string {
			if got := names(n.Members()); !slices.Contains(got, "node-2/dead") {
				return fmt.Sprintf("Members() = %v, want node-2 dead", got)
			}
			return ""
		})
	}
}

// TestRefusedKeys: a node whose keys do not match the cluster's cannot
// join, and the cluster never learns of it.
func TestRefusedKeys(t *testing.T) {
	k1, k2 := key(32, 1), key(32, 2)
	tests := []struct {
		name          string
		cluster, node [][]byte
	}{
		{"wrong key", [][]byte{k1}, [][]byte{k2}},
		{"no key into an encrypted cluster", [][]byte{k1}, nil},
		{"a key into a plaintext cluster", nil, [][]byte{k1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leakCheck(t)
			nodes := cluster(t, 2, func(c *Config) { c.Keys = tt.cluster })
			cfg := testConfig(t, "intruder", 0x666)
			cfg.Keys = tt.node
			cfg.JoinTimeout = 700 * time.Millisecond
			cfg.Join = []string{nodes[0].Addr()}
			x := start(t, cfg, true)
			n, err := x.Join(context.Background())
			if !errors.Is(err, ErrJoin) || n != 0 {
				t.Fatalf("Join = %d, %v; want 0, ErrJoin", n, err)
			}
			if !strings.Contains(err.Error(), nodes[0].Addr()) {
				t.Fatalf("error does not name the seed: %v", err)
			}
			t.Logf("join refused: %v", err)
			// Give gossip a few rounds to leak the intruder, if it could.
			time.Sleep(time.Second)
			for _, nd := range nodes {
				if got := names(nd.Members()); !slices.Equal(got, []string{"node-0/alive", "node-1/alive"}) {
					t.Fatalf("%s: Members() = %v", nd.cfg.NodeName, got)
				}
				if evs := nd.rec.about("intruder"); len(evs) != 0 {
					t.Fatalf("%s got events about the intruder: %+v", nd.cfg.NodeName, evs)
				}
			}
			if got := names(x.Members()); !slices.Equal(got, []string{"intruder/alive"}) {
				t.Fatalf("intruder: Members() = %v", got)
			}
		})
	}
}

func TestKeyRotation(t *testing.T) {
	leakCheck(t)
	A, B := key(32, 'A'), key(32, 'B')
	var nodes []*tnode
	for i := range 2 {
		cfg := testConfig(t, fmt.Sprintf("node-%d", i), uint64(0x1000+i))
		cfg.Keys = [][]byte{A}
		nodes = append(nodes, start(t, cfg, true))
	}
	join(t, nodes[1], nodes[0].Addr())

	// talking waits for two encrypted pings answered each way: memberlist
	// drops a packet it cannot decrypt, so an answer proves both nodes
	// read what the other writes.
	talking := func(step string) {
		t.Helper()
		for i, n := range nodes {
			peer := nodes[1-i]
			addr, err := net.ResolveUDPAddr("udp", peer.Addr())
			if err != nil {
				t.Fatal(err)
			}
			answered := 0
			testkit.Eventually(t, bound, fmt.Sprintf("%s: %s to get two pings answered by %s", step, n.cfg.NodeName, peer.cfg.NodeName), func() bool {
				if _, err := n.ml.Ping(peer.cfg.NodeName, addr); err == nil {
					answered++
				}
				return answered >= 2
			})
		}
	}
	talking("start")
	// The three passes of the package doc; between the two nodes' reloads
	// the cluster runs mixed for a few exchanges, as a real rollout does.
	passes := []struct {
		name string
		keys [][]byte
	}{
		{"add B as secondary", [][]byte{A, B}},
		{"make B primary", [][]byte{B, A}},
		{"remove A", [][]byte{B}},
	}
	for _, p := range passes {
		if err := nodes[0].SetKeys(p.keys); err != nil {
			t.Fatalf("%s on node-0: %v", p.name, err)
		}
		talking(p.name + ", node-0 done")
		if err := nodes[1].SetKeys(p.keys); err != nil {
			t.Fatalf("%s on node-1: %v", p.name, err)
		}
		talking(p.name + ", both done")
		for _, n := range nodes {
			if got, want := n.Keys(), keyIDs(p.keys); !slices.Equal(got, want) {
				t.Fatalf("%s: %s keys %v, want %v", p.name, n.cfg.NodeName, got, want)
			}
		}
	}
	for _, n := range nodes {
		if evs := n.rec.about(fmt.Sprintf("node-%d", 1-slices.Index(nodes, n))); len(evs) != 1 || evs[0].Type != EventJoined {
			t.Fatalf("%s: events about its peer during rotation: %+v (want only the join)", n.cfg.NodeName, evs)
		}
	}

	// The old key no longer gets in; the new one does.
	old := testConfig(t, "old-key", 0x2001)
	old.Keys, old.JoinTimeout, old.Join = [][]byte{A}, 500*time.Millisecond, []string{nodes[0].Addr()}
	if _, err := start(t, old, false).Join(context.Background()); !errors.Is(err, ErrJoin) {
		t.Fatalf("join with the removed key: %v, want ErrJoin", err)
	}
	nw := testConfig(t, "new-key", 0x2002)
	nw.Keys = [][]byte{B}
	join(t, start(t, nw, false), nodes[1].Addr())
	for _, n := range nodes {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to see new-key", func() bool { return len(n.Alive()) == 3 })
	}
}

func TestSetKeysErrors(t *testing.T) {
	leakCheck(t)
	A := key(16, 'A')
	cfg := testConfig(t, "enc", 1)
	cfg.Keys = [][]byte{A}
	enc := start(t, cfg, false)
	plain := start(t, testConfig(t, "plain", 2), false)

	tests := []struct {
		name string
		g    *tnode
		keys [][]byte
	}{
		{"bad length", enc, [][]byte{key(17, 'B')}},
		{"bad secondary", enc, [][]byte{A, key(8, 'C')}},
		{"repeated key", enc, [][]byte{A, A}},
		{"turn encryption off", enc, nil},
		{"turn encryption on", plain, [][]byte{A}},
	}
	for _, tt := range tests {
		if err := tt.g.SetKeys(tt.keys); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s: err = %v, want ErrBadKey", tt.name, err)
		}
	}
	if got := enc.Keys(); !slices.Equal(got, []string{KeyID(A)}) {
		t.Fatalf("keys changed by failed SetKeys: %v", got)
	}
	if err := plain.SetKeys(nil); err != nil {
		t.Fatalf("SetKeys(nil) without encryption: %v", err)
	}
}

// closedPort returns a 127.0.0.1 address nobody listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestJoinUnreachableSeed(t *testing.T) {
	leakCheck(t)
	seed := closedPort(t)

	t.Run("join timeout", func(t *testing.T) {
		cfg := testConfig(t, "lonely", 1)
		cfg.Join, cfg.JoinTimeout = []string{seed}, 700*time.Millisecond
		g := start(t, cfg, false)
		began := time.Now()
		n, err := g.Join(context.Background())
		took := time.Since(began)
		if !errors.Is(err, ErrJoin) || n != 0 {
			t.Fatalf("Join = %d, %v; want ErrJoin", n, err)
		}
		if took < cfg.JoinTimeout || took > cfg.JoinTimeout+2*time.Second {
			t.Fatalf("Join took %s with JoinTimeout %s", took, cfg.JoinTimeout)
		}
		for _, want := range []string{"join timeout 700ms", "seed " + seed, "refused"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "(1 rounds)") {
			t.Fatalf("no retry within the timeout: %v", err)
		}
		t.Logf("%v (after %s)", err, took.Round(time.Millisecond))
	})

	t.Run("context ends first", func(t *testing.T) {
		cfg := testConfig(t, "impatient", 2)
		cfg.Join, cfg.JoinTimeout = []string{seed}, time.Minute
		g := start(t, cfg, false)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		began := time.Now()
		_, err := g.Join(ctx)
		if !errors.Is(err, ErrJoin) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Join = %v; want ErrJoin and DeadlineExceeded", err)
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Fatalf("Join took %s after a 300ms context", took)
		}
	})

	t.Run("shutdown during join", func(t *testing.T) {
		cfg := testConfig(t, "stopping", 3)
		cfg.Join, cfg.JoinTimeout = []string{seed}, time.Minute
		g := start(t, cfg, false)
		errc := make(chan error, 1)
		go func() { _, err := g.Join(context.Background()); errc <- err }()
		time.Sleep(200 * time.Millisecond)
		if err := g.Shutdown(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, ErrJoin) || !errors.Is(err, ErrShutdown) {
				t.Fatalf("Join = %v; want ErrJoin and ErrShutdown", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Join did not return after Shutdown")
		}
		if _, err := g.Join(context.Background()); !errors.Is(err, ErrShutdown) {
			t.Fatalf("Join after Shutdown = %v, want ErrShutdown", err)
		}
	})

	t.Run("no seeds", func(t *testing.T) {
		g := start(t, testConfig(t, "alone", 4), false)
		if n, err := g.Join(context.Background()); n != 0 || err != nil {
			t.Fatalf("Join with no seeds = %d, %v", n, err)
		}
	})

	t.Run("itself as a seed", func(t *testing.T) {
		cfg := testConfig(t, "first", 7)
		g := start(t, cfg, true)
		g.cfg.Join = []string{seed, g.Addr()} // the shared seed list of a cluster not yet up
		if n, err := g.Join(context.Background()); n != 1 || err != nil {
			t.Fatalf("Join = %d, %v; want 1, nil", n, err)
		}
		if got := names(g.Members()); !slices.Equal(got, []string{"first/alive"}) {
			t.Fatalf("Members() = %v", got)
		}
		if evs := g.rec.about("first"); len(evs) != 0 {
			t.Fatalf("events about itself: %+v", evs)
		}
	})

	t.Run("one good seed among bad ones", func(t *testing.T) {
		a := start(t, testConfig(t, "a", 5), false)
		cfg := testConfig(t, "b", 6)
		cfg.Join = []string{seed, a.Addr(), "127.0.0.1:bad-port"}
		b := start(t, cfg, false)
		if n, err := b.Join(context.Background()); n != 1 || err != nil {
			t.Fatalf("Join = %d, %v; want 1, nil", n, err)
		}
	})
}

// TestEventOverflow: a reader that does not keep up loses events, counted
// and logged, while Members stays right.
func TestEventOverflow(t *testing.T) {
	leakCheck(t)
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := testConfig(t, "slow-reader", 0x1000)
	cfg.EventBuffer = 1
	cfg.Logger = zap.New(core)
	a := start(t, cfg, false) // nobody reads a's events
	for i := 1; i <= 3; i++ {
		n := start(t, testConfig(t, fmt.Sprintf("node-%d", i), uint64(0x1000+i)), false)
		join(t, n, a.Addr())
	}
	testkit.Eventually(t, bound, "slow-reader to see 4 alive", func() bool { return len(a.Alive()) == 4 })
	if d := a.DroppedEvents(); d != 2 {
		t.Fatalf("DroppedEvents = %d, want 2 (3 joins, buffer 1)", d)
	}
	if n := logs.FilterMessageSnippet("event buffer full").Len(); n != 2 {
		t.Fatalf("%d warnings about the full buffer, want 2", n)
	}
	ev := <-a.Events()
	if ev.Type != EventJoined {
		t.Fatalf("buffered event %+v", ev)
	}
}

func TestConfigErrors(t *testing.T) {
	good := func() Config {
		return Config{NodeName: "n", NodeID: 1, BindAddr: "127.0.0.1:0", DataAddr: "127.0.0.1:7947"}
	}
	tests := []struct {
		name  string
		mod   func(*Config)
		field string
	}{
		{"no name", func(c *Config) { c.NodeName = "" }, "NodeName"},
		{"long name", func(c *Config) { c.NodeName = strings.Repeat("n", 256) }, "NodeName"},
		{"zero id", func(c *Config) { c.NodeID = 0 }, "NodeID"},
		{"bind host name", func(c *Config) { c.BindAddr = "localhost:7946" }, "BindAddr"},
		{"bind no port", func(c *Config) { c.BindAddr = "127.0.0.1" }, "BindAddr"},
		{"bind bad port", func(c *Config) { c.BindAddr = "127.0.0.1:70000" }, "BindAddr"},
		{"advertise host name", func(c *Config) { c.AdvertiseAddr = "example.com:1" }, "AdvertiseAddr"},
		{"no data addr", func(c *Config) { c.DataAddr = "" }, "DataAddr"},
		{"data addr no port", func(c *Config) { c.DataAddr = "10.0.0.1" }, "DataAddr"},
		{"data addr port 0", func(c *Config) { c.DataAddr = "10.0.0.1:0" }, "DataAddr"},
		{"data addr too long", func(c *Config) { c.DataAddr = strings.Repeat("h", 600) + ":1" }, "DataAddr"},
		{"empty seed", func(c *Config) { c.Join = []string{"10.0.0.1:7946", ""} }, "Join[1]"},
		{"negative join timeout", func(c *Config) { c.JoinTimeout = -time.Second }, "JoinTimeout"},
		{"bad key", func(c *Config) { c.Keys = [][]byte{key(16, 1), key(15, 2)} }, "Keys"},
		{"profile", func(c *Config) { c.Profile = "datacenter" }, "Profile"},
		{"negative buffer", func(c *Config) { c.EventBuffer = -1 }, "EventBuffer"},
		{"negative forget", func(c *Config) { c.ForgetAfter = -1 }, "ForgetAfter"},
		{"negative reconnect interval", func(c *Config) { c.ReconnectInterval = -1 }, "ReconnectInterval"},
		{"negative reconnect timeout", func(c *Config) { c.ReconnectTimeout = -1 }, "ReconnectTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good()
			tt.mod(&cfg)
			g, err := New(cfg)
			if err == nil {
				g.Shutdown()
				t.Fatal("New accepted the config")
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err = %v; want ErrInvalidConfig naming %s", err, tt.field)
			}
		})
	}

	cfg, err := good().withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != ProfileLAN || cfg.JoinTimeout != DefaultJoinTimeout || cfg.EventBuffer != DefaultEventBuffer ||
		cfg.ForgetAfter != DefaultForgetAfter || cfg.Logger == nil ||
		cfg.ReconnectInterval != 30*time.Second || cfg.ReconnectTimeout != DefaultReconnectTimeout {
		t.Fatalf("defaults: %+v", cfg)
	}
	local := good()
	local.Profile = ProfileLocal
	if cfg, _ = local.withDefaults(); cfg.ReconnectInterval != time.Second {
		t.Fatalf("local profile: ReconnectInterval = %v, want 1s", cfg.ReconnectInterval)
	}
	c := good()
	c.BindAddr = ""
	if cfg, _ = c.withDefaults(); cfg.BindAddr != DefaultBindAddr {
		t.Fatalf("default BindAddr = %q", cfg.BindAddr)
	}
}

func TestBindConflict(t *testing.T) {
	leakCheck(t)
	a := start(t, testConfig(t, "a", 1), false)
	cfg := testConfig(t, "b", 2)
	cfg.BindAddr = a.Addr()
	if g, err := New(cfg); err == nil {
		g.Shutdown()
		t.Fatal("second node bound the same port")
	} else if !strings.Contains(err.Error(), a.Addr()) {
		t.Fatalf("error does not name the address: %v", err)
	}
}

func TestStateStrings(t *testing.T) {
	for s, want := range map[State]string{StateAlive: "alive", StateSuspect: "suspect", StateDead: "dead", StateLeft: "left", 9: "state(9)"} {
		if s.String() != want {
			t.Errorf("%d: %q", int(s), s.String())
		}
	}
	for e, want := range map[EventType]string{EventJoined: "joined", EventUpdated: "updated", EventLeft: "left", EventFailed: "failed", 9: "event(9)"} {
		if e.String() != want {
			t.Errorf("%d: %q", int(e), e.String())
		}
	}
}

// TestProtocolRange: a node whose data-port protocol range overlaps the
// cluster's joins and shows its range; one with no version in common is
// refused at the join, saying why, and never becomes a member.
func TestProtocolRange(t *testing.T) {
	leakCheck(t)
	nodes := cluster(t, 1, nil) // speaks [2,2]

	up := testConfig(t, "upgraded", 0x777)
	up.ProtoMin, up.ProtoMax = 2, 3
	u := start(t, up, true)
	join(t, u, nodes[0].Addr())
	testkit.Eventually(t, bound, "the seed to see the upgraded node", func() bool { return len(nodes[0].Alive()) == 2 })
	for _, m := range nodes[0].Members() {
		if m.Name == "upgraded" && (m.ProtoMin != 2 || m.Proto != 3) {
			t.Fatalf("the upgraded node's range as the seed sees it: [%d,%d], want [2,3]", m.ProtoMin, m.Proto)
		}
	}

	cfg := testConfig(t, "too-new", 0x888)
	cfg.ProtoMin, cfg.ProtoMax = 3, 3
	cfg.JoinTimeout = 700 * time.Millisecond
	cfg.Join = []string{nodes[0].Addr()}
	x := start(t, cfg, true)
	n, err := x.Join(context.Background())
	if !errors.Is(err, ErrJoin) || n != 0 || !strings.Contains(err.Error(), "no protocol version in common: member node-0 speaks protocol versions [2,2], this node [3,3]") {
		t.Fatalf("Join = %d, %v; want 0, ErrJoin naming both ranges", n, err)
	}
	time.Sleep(time.Second) // a few gossip rounds, for the refused node to leak in if it could
	for _, nd := range []*tnode{nodes[0], u} {
		if evs := nd.rec.about("too-new"); len(evs) != 0 {
			t.Fatalf("%s got events about the refused node: %+v", nd.cfg.NodeName, evs)
		}
	}
	if got := names(x.Members()); !slices.Equal(got, []string{"too-new/alive"}) {
		t.Fatalf("refused node: Members() = %v", got)
	}
}
