package broadcast

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// startNATSCluster runs size NATS servers in the test process, routed into
// one NATS cluster ("cc"): the first listens for routes, the others route
// to it and learn of each other from it. It returns once every server has
// a route to every other one. Route pooling is off (PoolSize -1), so that
// NumRoutes counts servers, one route each, and not pooled connections.
// The shutdowns are registered as cleanups here, before any node's, so the
// nodes close first. size 1 is a lone server with no cluster port.
func startNATSCluster(tb testing.TB, size int) []*server.Server {
	tb.Helper()
	var servers []*server.Server
	var routes string
	for i := 0; i < size; i++ {
		o := &server.Options{ServerName: fmt.Sprintf("nats%d", i)}
		if size > 1 {
			o.Cluster = server.ClusterOpts{Host: "127.0.0.1", Port: -1, Name: "cc", PoolSize: -1}
			o.Routes = server.RoutesFromStr(routes)
		}
		ns := testkit.NATS(tb, o) // a server a test stopped is fine: Shutdown is idempotent
		if i == 0 && size > 1 {
			routes = fmt.Sprintf("nats://%s", ns.ClusterAddr())
		}
		servers = append(servers, ns)
	}
	testkit.Eventually(tb, 10*time.Second, "every NATS server routed to every other", func() bool {
		for _, ns := range servers {
			if ns.NumRoutes() != size-1 {
				return false
			}
		}
		return true
	})
	return servers
}

// addFleetNode adds a node to c as testCluster.add does, fanning out
// through NATS at urls (comma-separated). The pool is not shuffled, so the
// node connects to the first URL and fails over to the others in order.
func addFleetNode(c *testCluster, name, dir, urls string) *testNode {
	c.t.Helper()
	st, disk := c.openStore(dir)
	n, err := New(Config{
		Store: st, ListenAddr: "127.0.0.1:0",
		Dial: c.net.dialer(name), SyncInterval: 50 * time.Millisecond,
		NATS: &NATSConfig{URL: urls, Options: []nats.Option{nats.DontRandomize()}},
	})
	if err != nil {
		st.Close()
		c.t.Fatal(err)
	}
	n.Start()
	tn := &testNode{name: name, dir: dir, st: st, disk: disk, n: n}
	c.nodes = append(c.nodes, tn)
	return tn
}

// cutAllDataPorts stops every node from reaching any other's data port:
// no pushes, no pulls, no acks. What still arrives came through NATS.
func (c *testCluster) cutAllDataPorts() {
	for _, x := range c.nodes {
		for _, y := range c.nodes {
			if x != y {
				c.net.cutOff(x.name, y.n.Addr())
			}
		}
	}
}

// waitNATSReady waits until NATS can carry every live node's records to
// every other: each node's connection is up and its subscription processed
// by its server (a flush is a round trip behind the SUB), and every route
// between live servers carries the interest in the cachecast subjects.
// A record published before that may be dropped; over the data port it
// would be repaired, over NATS alone it would leave a gap for good.
func waitNATSReady(t *testing.T, nodes []*testNode, live []*server.Server) {
	t.Helper()
	for _, tn := range nodes {
		nc := tn.n.nats.Conn()
		testkit.Eventually(t, 10*time.Second, tn.name+" connected to NATS", nc.IsConnected)
		if err := nc.FlushTimeout(5 * time.Second); err != nil {
			t.Fatalf("%s: NATS flush: %v", tn.name, err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the routes carry the interest in cachecast.>", func() bool {
		for _, ns := range live {
			rz, err := ns.Routez(&server.RoutezOptions{Subscriptions: true})
			if err != nil || len(rz.Routes) != len(live)-1 {
				return false
			}
			for _, r := range rz.Routes {
				if !slices.Contains(r.Subs, "cachecast.>") {
					return false
				}
			}
		}
		return true
	})
}

// TestNATSServerCluster runs the fleet case: six nodes on a cluster of
// three NATS servers, two nodes on each. Writes on every node converge,
// also when NATS alone carries them (every data port cut), which shows
// the servers' routes doing the fan-out. Then one NATS server is shut
// down while every node publishes: the two nodes on it fail over to the
// other servers (each knows all three URLs), every view converges, no
// acknowledged write is missing, and NATS alone carries the fan-out again
// afterwards, from the nodes that failed over too.
func TestNATSServerCluster(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	servers := startNATSCluster(t, 3) // cleanups first: they run last
	urls := make([]string, len(servers))
	for i, ns := range servers {
		urls[i] = ns.ClientURL()
	}
	dirs := make([]string, 6)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	c := &testCluster{t: t, net: newFaultNet(), names: map[uint64]string{}}
	t.Cleanup(c.stop) // before the directories' removal and the servers' shutdown
	home := map[*testNode]*server.Server{}
	for i := range dirs {
		h := i / 2 // two nodes on each server
		// Its own server first, then the others, in ring order.
		pool := append(slices.Clone(urls[h:]), urls[:h]...)
		tn := addFleetNode(c, fmt.Sprintf("n%d", i), dirs[i], strings.Join(pool, ","))
		home[tn] = servers[h]
	}
	c.wire()
	waitNATSReady(t, c.nodes, servers)
	for _, tn := range c.nodes {
		if got, want := tn.n.nats.Conn().ConnectedServerId(), home[tn].ID(); got != want {
			t.Fatalf("%s is on NATS server %s, want %s", tn.name, got, want)
		}
	}
	for i, ns := range servers {
		if ns.NumClients() != 2 {
			t.Fatalf("NATS server %d has %d clients, want 2", i, ns.NumClients())
		}
	}

	// Writes on all nodes at once, data ports open.
	var wg sync.WaitGroup
	for i, tn := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 150; j++ {
				if _, err := tryPublish(tn, fmt.Sprintf("own-%d-%d", i, j%30), fmt.Sprint(j)); err != nil {
					t.Error(err)
					return
				}
				if _, err := tryPublish(tn, fmt.Sprintf("shared-%d", j%20), fmt.Sprintf("%d/%d", i, j)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.waitConverged(10 * time.Second)
	if got := len(c.nodes[0].st.Keys("prices", "", "", 0)); got != 6*30+20 {
		t.Fatalf("n0 holds %d keys, want %d", got, 6*30+20)
	}

	// NATS alone: every data port cut, writes on every node still reach
	// every other, across the servers' routes.
	natsOnly := func(round string) {
		t.Helper()
		c.cutAllDataPorts()
		for j := 0; j < 50; j++ {
			for i, tn := range c.nodes {
				if _, err := tryPublish(tn, fmt.Sprintf("%s-%d-%d", round, i, j%10), fmt.Sprint(j)); err != nil {
					t.Fatal(err)
				}
			}
		}
		c.waitConverged(5 * time.Second)
		c.net.heal()
	}
	natsOnly("nats-only")

	// Shut one NATS server down while every node publishes.
	dead := servers[1]
	var mu sync.Mutex
	acked := map[uint64]uint64{} // origin -> highest seq acknowledged
	var down bool                // the server is gone
	duringOutage := 0            // writes acknowledged after it went
	stop := make(chan struct{})
	for i, tn := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := tryPublish(tn, fmt.Sprintf("failover-%d", j%40), fmt.Sprintf("%d/%d", i, j))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[res.Origin] = max(acked[res.Origin], res.Seq)
				if down {
					duringOutage++
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	dead.Shutdown()
	dead.WaitForShutdown()
	mu.Lock()
	down = true
	mu.Unlock()
	// Go on publishing while the two nodes fail over: at least 100 writes
	// acknowledged with the server gone.
	testkit.Eventually(t, 20*time.Second, "100 writes acknowledged during the outage", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return duringOutage >= 100
	})
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	live := []*server.Server{servers[0], servers[2]}
	waitNATSReady(t, c.nodes, live)
	c.waitConverged(10 * time.Second)
	for _, tn := range c.nodes {
		v := tn.st.Vector()
		for o, s := range acked {
			if v[o] < s {
				t.Errorf("%s holds %016x up to %d, %d acknowledged", tn.name, o, v[o], s)
			}
		}
		id := tn.n.nats.Conn().ConnectedServerId()
		if home[tn] == dead {
			if id == dead.ID() || (id != servers[0].ID() && id != servers[2].ID()) {
				t.Errorf("%s is on NATS server %q after its own went away", tn.name, id)
			}
			if tn.n.NATSDisconnects() == 0 {
				t.Errorf("%s did not notice its NATS server going away", tn.name)
			}
		} else if id != home[tn].ID() || tn.n.NATSDisconnects() != 0 {
			t.Errorf("%s left its live NATS server (now on %q, %d disconnects)", tn.name, id, tn.n.NATSDisconnects())
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The nodes that failed over publish and receive through NATS again.
	natsOnly("after-failover")
	t.Logf("%d writes acknowledged during the outage; the test took %s", duringOutage, time.Since(begin).Round(time.Millisecond))
}

// tryPublish is publish for goroutines other than the test's: it returns
// the error instead of failing the test.
func tryPublish(tn *testNode, key, val string) (store.Result, error) {
	m := record.Message{Topic: "prices", Key: key, Value: []byte(val)}
	res, err := tn.st.Publish(&m)
	if err != nil {
		return res, fmt.Errorf("%s publish: %w", tn.name, err)
	}
	return res, nil
}
