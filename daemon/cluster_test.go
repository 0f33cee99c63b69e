package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// clusterConfig is testConfig on its own loopback ports, with the fast
// gossip timers of one machine.
func clusterConfig(t *testing.T, name string, join []string) Config {
	c := testConfig(t)
	c.NodeName = name
	c.GossipAddr = "127.0.0.1:0"
	c.DataAddr = "127.0.0.1:0"
	c.GossipProfile = "local"
	c.Join = join
	c.JoinTimeout = 5 * time.Second
	return c
}

func startCluster(t *testing.T, n int, edit func(i int, c *Config)) []*testDaemon {
	var ds []*testDaemon
	var seed []string
	for i := 0; i < n; i++ {
		c := clusterConfig(t, fmt.Sprintf("node%d", i), seed)
		if edit != nil {
			edit(i, &c)
		}
		td := startDaemon(t, c)
		ds = append(ds, td)
		if i == 0 {
			seed = []string{td.d.cluster.Gossip().Addr()}
		}
	}
	testkit.Eventually(t, 30*time.Second, "every node sees every other", func() bool {
		for _, td := range ds {
			if len(td.d.cluster.Gossip().Alive()) != n {
				return false
			}
		}
		return true
	})
	return ds
}

func TestClusterPublishReachesEveryNode(t *testing.T) {
	ds := startCluster(t, 3, func(i int, c *Config) { c.Replication = "sync" })
	for i, td := range ds {
		res := td.put("prices", fmt.Sprintf("sku-%d", i), fmt.Sprintf("v%d", i))
		if res.Status != wire.StatusOK {
			t.Fatalf("sync publish on node%d: status %q, want ok", i, res.Status)
		}
	}
	for _, td := range ds {
		for i := range ds {
			key := fmt.Sprintf("sku-%d", i)
			testkit.Eventually(t, 5*time.Second, td.cfg.NodeName+" has "+key, func() bool {
				r := td.do("GET", "/v1/topics/prices/keys/"+key, nil)
				return r.status == 200 && string(r.body) == fmt.Sprintf("v%d", i)
			})
		}
	}
	r := ds[0].do("GET", "/v1/cluster", nil)
	var st wire.ClusterStatus
	if err := json.Unmarshal(r.body, &st); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/cluster: %d %s", r.status, r.body)
	}
	if len(st.Members) != 3 || st.Replica == "" {
		t.Fatalf("cluster status: %+v", st)
	}
	for _, m := range st.Members {
		if m.State != "alive" || m.DataAddr == "" || (!m.Self && !m.Connected) {
			t.Fatalf("member %+v", m)
		}
	}
}

func TestSyncReplicationWithoutPeer(t *testing.T) {
	c := clusterConfig(t, "alone", nil)
	c.Replication = "sync"
	td := startDaemon(t, c)
	res := td.put("prices", "k", "v")
	if res.Status != wire.StatusReplicaUnavailable {
		t.Fatalf("status %q, want %q", res.Status, wire.StatusReplicaUnavailable)
	}
	// The write stands.
	if r := td.do("GET", "/v1/topics/prices/keys/k", nil); r.status != 200 || string(r.body) != "v" {
		t.Fatalf("get after replica_unavailable: %d %s", r.status, r.body)
	}
}

func TestClusterKeyMismatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, key string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "MDEyMzQ1Njc4OWFiY2RlZg==") // 16 bytes
	bad := write("bad", "ZmVkY2JhOTg3NjU0MzIxMA==")
	ds := startCluster(t, 2, func(i int, c *Config) { c.ClusterKeyFile = good })
	c := clusterConfig(t, "intruder", []string{ds[0].d.cluster.Gossip().Addr()})
	c.ClusterKeyFile = bad
	c.JoinTimeout = 500 * time.Millisecond
	td := startDaemon(t, c) // the join fails; the node still serves alone
	td.put("prices", "intruder", "x")
	time.Sleep(300 * time.Millisecond)
	for _, d := range ds {
		if n := len(d.d.cluster.Gossip().Alive()); n != 2 {
			t.Fatalf("%s sees %d members", d.cfg.NodeName, n)
		}
		if r := d.do("GET", "/v1/topics/prices/keys/intruder", nil); r.status != 404 {
			t.Fatalf("%s took the intruder's write", d.cfg.NodeName)
		}
	}
	if strings.Contains(fmt.Sprint(td.d.cluster.Gossip().Alive()), "node0") {
		t.Fatal("the intruder joined")
	}
}

// TestClusterOverNATS runs three daemons whose fan-out goes through a real
// NATS server embedded in the test process.
func TestClusterOverNATS(t *testing.T) {
	url := testkit.NATS(t, nil).ClientURL()
	ds := startCluster(t, 3, func(i int, c *Config) {
		c.Transport = "nats"
		c.NATSURL = url
		c.Replication = "sync"
	})
	for i, td := range ds {
		if res := td.put("prices", fmt.Sprintf("k%d", i), fmt.Sprint(i)); res.Status != wire.StatusOK {
			t.Fatalf("sync publish over nats: %q", res.Status)
		}
	}
	for _, td := range ds {
		for i := range ds {
			key := fmt.Sprintf("k%d", i)
			testkit.Eventually(t, 5*time.Second, td.cfg.NodeName+" has "+key, func() bool {
				r := td.do("GET", "/v1/topics/prices/keys/"+key, nil)
				return r.status == 200 && string(r.body) == fmt.Sprint(i)
			})
		}
		if td.d.cluster.Broadcast().BytesSent() == 0 {
			t.Fatalf("%s sent nothing", td.cfg.NodeName)
		}
	}
}

// TestClusterWithoutKeyStaysOnLoopback: a node without --cluster-key-file
// binds loopback by default, refuses a wider bind unless
// --allow-insecure-cluster says so (checked by validation alone: no test
// binds 0.0.0.0), and warns at start that it runs without a key.
func TestClusterWithoutKeyStaysOnLoopback(t *testing.T) {
	def := config.Default()
	if !config.Loopback(def.GossipAddr) || !config.Loopback(def.DataAddr) {
		t.Fatalf("defaults bind %s and %s; want loopback without a key", def.GossipAddr, def.DataAddr)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("MDEyMzQ1Njc4OWFiY2RlZg==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		gossip, data string
		key          string
		insecure     bool
		wantErr      string
	}{
		{"127.0.0.1:17946", "127.0.0.1:17947", "", false, ""},
		{"[::1]:17946", "localhost:17947", "", false, ""},
		{"0.0.0.0:17946", "127.0.0.1:17947", "", false, "--gossip-addr: 0.0.0.0:17946 is reachable beyond this machine"},
		{"127.0.0.1:17946", ":17947", "", false, "--data-addr: :17947 is reachable beyond this machine"},
		{"127.0.0.1:17946", "[::]:17947", "", false, "--data-addr: [::]:17947 is reachable"},
		{"10.1.2.3:17946", "127.0.0.1:17947", "", false, "--gossip-addr: 10.1.2.3:17946 is reachable"},
		{"127.0.0.1:17946", "node1.example:17947", "", false, "--data-addr: node1.example:17947 is reachable"},
		{"0.0.0.0:17946", "0.0.0.0:17947", "", true, ""},
		{"0.0.0.0:17946", "0.0.0.0:17947", keyFile, false, ""},
	} {
		c := config.Default()
		c.GossipAddr, c.DataAddr, c.ClusterKeyFile, c.AllowInsecureCluster = tt.gossip, tt.data, tt.key, tt.insecure
		err := c.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %s key %q insecure %v: %v", tt.gossip, tt.data, tt.key, tt.insecure, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, config.ErrInsecureCluster)):
			t.Errorf("%s %s: Validate() = %v; want %q", tt.gossip, tt.data, err, tt.wantErr)
		}
	}

	for _, withKey := range []bool{false, true} {
		c := clusterConfig(t, "lone", nil)
		if withKey {
			c.ClusterKeyFile = keyFile
		}
		core, logs := observer.New(zap.InfoLevel)
		d, err := New(c, zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		warned := logs.FilterMessageSnippet("runs without a key").Len() > 0
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if warned == withKey {
			t.Errorf("with a key %v: warned of no key: %v", withKey, warned)
		}
	}
}

// silentSeed is a gossip seed that takes TCP connections and never
// answers: a join to it lasts the whole --join-timeout. accepted is
// signalled at each connection.
func silentSeed(t *testing.T) (addr string, accepted <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String(), ch
}

// A stop during the first join (Close, or SIGTERM from systemd) shuts the
// daemon down at once instead of after --join-timeout.
func TestStopDuringFirstJoin(t *testing.T) {
	for _, how := range []string{"close", "sigterm"} {
		t.Run(how, func(t *testing.T) {
			seed, accepted := silentSeed(t)
			c := clusterConfig(t, "joiner", []string{seed})
			c.JoinTimeout = time.Minute
			d, err := New(c, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
			if err != nil {
				t.Fatal(err)
			}
			runErr := make(chan error, 1)
			go func() { runErr <- d.Run(context.Background()) }()
			select {
			case <-accepted:
			case <-time.After(10 * time.Second):
				d.Close()
				t.Fatal("the join never reached the seed")
			}
			if d.ready.Load() {
				t.Fatal("ready before the first join ended")
			}
			switch how {
			case "close":
				go d.Close()
			case "sigterm":
				if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-runErr:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Run still waits for the join 10s after the %s (--join-timeout 1m)", how)
			}
			d.Close()
		})
	}
}

func getStatus(t *testing.T, td *testDaemon) wire.Status {
	t.Helper()
	r := td.do("GET", "/v1/status", nil)
	var b wire.Status
	if err := json.Unmarshal(r.body, &b); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/status: %d %s", r.status, r.body)
	}
	return b
}

// A node told to join that is alone past --join-timeout says so: status
// "degraded" with the reason (never joined: a wrong key, here; or every
// other member gone), /readyz 200 with status degraded (it still serves),
// and the systemd STATUS line. It is not degraded while the others are
// there.
func TestDegradedWhenAlone(t *testing.T) {
	dir := t.TempDir()
	keyFile := func(name, key string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := keyFile("good", "MDEyMzQ1Njc4OWFiY2RlZg==")
	bad := keyFile("bad", "ZmVkY2JhOTg3NjU0MzIxMA==")
	ds := startCluster(t, 2, func(i int, c *Config) {
		c.ClusterKeyFile = good
		c.JoinTimeout = 300 * time.Millisecond
	})
	c := clusterConfig(t, "intruder", []string{ds[0].d.cluster.Gossip().Addr()})
	c.ClusterKeyFile = bad
	c.JoinTimeout = 300 * time.Millisecond
	x := startDaemon(t, c)

	testkit.Eventually(t, 10*time.Second, "the intruder degraded", func() bool { return getStatus(t, x).Degraded != "" })
	if why := getStatus(t, x).Degraded; !strings.Contains(why, "no other member answered") || !strings.Contains(why, "--cluster-key-file") {
		t.Fatalf("degraded reason %q", why)
	}
	r := x.do("GET", "/readyz", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"status":"degraded"`) {
		t.Fatalf("/readyz of a degraded node: %d %s", r.status, r.body)
	}
	if line := x.d.statusLine(); !strings.HasPrefix(line, "DEGRADED, alone") {
		t.Fatalf("STATUS line %q", line)
	}
	// node1 joined node0 (--join), past its join timeout, not alone.
	if why := getStatus(t, ds[1]).Degraded; why != "" {
		t.Fatalf("node1 with its peer is degraded: %s", why)
	}
	if r := ds[1].do("GET", "/readyz", nil); r.status != 200 || !strings.Contains(string(r.body), `"status":"ok"`) {
		t.Fatalf("/readyz of node1: %d %s", r.status, r.body)
	}
	// node0 goes: node1 is alone now, and says so.
	ds[0].stop()
	testkit.Eventually(t, 10*time.Second, "node1 degraded once alone", func() bool { return getStatus(t, ds[1]).Degraded != "" })
	if why := getStatus(t, ds[1]).Degraded; !strings.Contains(why, "every other member is gone") {
		t.Fatalf("node1 degraded reason %q", why)
	}
}

// A member without a link (it left, failed or is stopped) is shown behind
// by what it lacks, from the vector it last reported, not by nothing.
func TestLagOfAGoneMember(t *testing.T) {
	ds := startCluster(t, 2, nil)
	ds[0].put("prices", "before", "x")
	testkit.Eventually(t, 10*time.Second, "node1 holds the first record", func() bool {
		return ds[1].do("GET", "/v1/topics/prices/keys/before", nil).status == 200
	})
	testkit.Eventually(t, 10*time.Second, "node0 to know node1 holds it", func() bool {
		for _, m := range ds[0].d.cluster.Status().Members {
			if m.Name == "node1" {
				return m.Connected && len(m.Lag) == 0
			}
		}
		return false
	})
	ds[1].stop()
	testkit.Eventually(t, 10*time.Second, "node0 sees node1 gone", func() bool { return len(ds[0].d.cluster.Gossip().Alive()) == 1 })
	const missed = 25
	for i := range missed {
		ds[0].put("prices", fmt.Sprintf("k%d", i), "v")
	}
	st := ds[0].d.cluster.Status()
	for _, m := range st.Members {
		if m.Name != "node1" {
			continue
		}
		var recs uint64
		for _, l := range m.Lag {
			recs += l.Records
		}
		if m.State == "alive" || recs != missed {
			t.Fatalf("node1 (%s) shown %d records behind, want %d: %+v", m.State, recs, missed, m)
		}
		return
	}
	t.Fatalf("node1 not among the members: %+v", st)
}
