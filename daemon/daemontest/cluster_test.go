package daemontest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/wire"
)

// put writes key=value on node n through its local API.
func put(t *testing.T, n *daemontest.Node, key, value string) {
	t.Helper()
	hc := testkit.UnixClient(n.Socket, false, 5*time.Second)
	req, _ := http.NewRequest(http.MethodPut, "http://x/v1/topics/t/keys/"+key, strings.NewReader(value))
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s on %s: %d %s", key, n.Config.NodeName, res.StatusCode, body)
	}
}

// call sends a request to node n's local API and returns the status and
// body.
func call(t *testing.T, n *daemontest.Node, method, path, body string) (int, []byte) {
	t.Helper()
	hc := testkit.UnixClient(n.Socket, false, 5*time.Second)
	req, _ := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// TestNodeCutOffTooLongStopsServing: a running node whose data links are
// cut for more than half of --tombstone-grace (the fleet may have
// collected deletes it lacks) applies the rule of the start: it leaves
// the cluster for good (its data port closes, so nothing of its log
// reaches the others after the heal), refuses reads of the view and
// writes with unavailable, is unhealthy, and says why in /v1/status.
// The other side, in contact, serves on.
func TestNodeCutOffTooLongStopsServing(t *testing.T) {
	const grace = 3 * time.Second
	c := daemontest.NewCluster(t, 3, func(i int, cfg *daemon.Config) { cfg.TombstoneGrace = grace })
	put(t, c.Nodes[0], "before", "v")
	c.WaitConverged(10 * time.Second)
	cut := c.Nodes[2]
	contactFile := filepath.Join(cut.Config.DataDir, "contact")
	testkit.Eventually(t, 10*time.Second, "node2 to record a contact", func() bool {
		_, err := os.Stat(contactFile)
		return err == nil
	})
	// A reader of node2's shared view, mapping it before the cut.
	view, err := localview.Open(cut.Config.ViewPath())
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	testkit.Until(t, 10*time.Second, "node2's view file to be fresh", func() string {
		if err := view.Fresh(time.Second); err != nil {
			return err.Error()
		}
		return ""
	})
	c.Partition([]int{0, 1}, []int{2})
	var st wire.Status
	testkit.Until(t, 10*grace, "node2 to stop serving", func() string {
		code, body := call(t, cut, "GET", "/v1/status", "")
		if err := json.Unmarshal(body, &st); code != 200 || err != nil {
			return fmt.Sprintf("status %d %s", code, body)
		}
		if st.Away == "" {
			return "not away yet"
		}
		return ""
	})
	b, err := os.ReadFile(contactFile)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if away := time.Since(time.UnixMilli(ms)); away < grace/2 {
		t.Fatalf("node2 stopped serving %v after its last contact, before half the grace", away)
	}
	if !strings.Contains(st.Away, "--start-over") || !strings.Contains(st.Away, "--tombstone-grace") {
		t.Fatalf("status away %q", st.Away)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/topics/t/keys/before", ""},
		{"GET", "/v1/topics/t/keys", ""},
		{"PUT", "/v1/topics/t/keys/during", "x"},
		{"GET", "/healthz", ""},
		{"GET", "/readyz", ""},
	} {
		code, body := call(t, cut, r.method, r.path, r.body)
		var e wire.Error
		if code != http.StatusServiceUnavailable || json.Unmarshal(body, &struct{ Error *wire.Error }{&e}) != nil || e.Code != wire.CodeUnavailable {
			t.Fatalf("%s %s on the node away: %d %s, want 503 unavailable", r.method, r.path, code, body)
		}
	}
	// The Redis door refuses alike, naming the reason; PING is served.
	rc := goredis.NewClient(&goredis.Options{Network: "unix", Addr: cut.D.RedisSocketPath(), Protocol: 2,
		MaxRetries: -1, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second})
	defer rc.Close()
	ctx := context.Background()
	for _, r := range []struct {
		name string
		err  error
	}{
		{"GET", rc.Get(ctx, "t:before").Err()},
		{"MGET", rc.MGet(ctx, "t:before", "t:x").Err()},
		{"HGET", rc.HGet(ctx, "t", "before").Err()},
		{"SET", rc.Set(ctx, "t:during", "x", 0).Err()},
	} {
		if r.err == nil || !strings.HasPrefix(r.err.Error(), "CLUSTERDOWN out of contact with the fleet") || !strings.Contains(r.err.Error(), "--start-over") {
			t.Fatalf("Redis %s on the node away: %v, want CLUSTERDOWN and the reason", r.name, r.err)
		}
	}
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis PING on the node away: %v", err)
	}
	// Its shared view's readers learn it too: not ready, left the cluster.
	testkit.Until(t, 10*time.Second, "node2's view file to say away", func() string {
		if err := view.Fresh(time.Minute); !errors.Is(err, localview.ErrAway) || !errors.Is(err, localview.ErrNotReady) {
			return fmt.Sprintf("Fresh: %v", err)
		}
		return ""
	})
	if _, _, _, err := view.Get("t", "before"); !errors.Is(err, localview.ErrAway) {
		t.Fatalf("view Get on the node away: %v, want ErrAway", err)
	}
	if vs, err := view.Status(); err != nil || vs.Ready || !vs.Away || vs.Alive != 0 || vs.Members == 0 {
		t.Fatalf("view status on the node away: %+v, %v", vs, err)
	}
	if _, ok := cut.D.Store().Get("t", "during"); ok {
		t.Fatal("the refused write was made")
	}
	for _, n := range c.Nodes[:2] {
		if code, body := call(t, n, "GET", "/healthz", ""); code != 200 {
			t.Fatalf("%s, in contact: /healthz %d %s", n.Config.NodeName, code, body)
		}
	}
	testkit.Until(t, 10*time.Second, "node0 to see node2 leave", func() string {
		for _, m := range c.Nodes[0].D.ClusterStatus().Members {
			if m.Name == cut.Config.NodeName && m.State == "alive" {
				return "node2 still alive"
			}
		}
		return ""
	})
	testkit.Eventually(t, 10*time.Second, "node2's data port to close", func() bool {
		conn, err := net.DialTimeout("tcp", cut.D.DataAddr(), time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	c.Heal()
	put(t, c.Nodes[0], "after", "v")
	testkit.Eventually(t, 10*time.Second, "node1 to hold the write after the heal", func() bool {
		_, ok := c.Nodes[1].D.Store().Get("t", "after")
		return ok
	})
}

// memberState is name's state as n sees it ("" if n does not list it).
func memberState(n *daemontest.Node, name string) string {
	for _, m := range n.D.ClusterStatus().Members {
		if m.Name == name {
			return m.State
		}
	}
	return ""
}

// TestGossipPartitionHeals: a fleet whose gossip is cut too (each side
// declares the other dead), for longer than memberlist gossips to the
// dead (2s in the local profile), merges again by itself once healed,
// and every write made on either side during the cut reaches every node.
func TestGossipPartitionHeals(t *testing.T) {
	c := daemontest.NewCluster(t, 3, func(i int, cfg *daemon.Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	put(t, c.Nodes[0], "before", "v")
	c.WaitConverged(10 * time.Second)

	c.PartitionAll([]int{0}, []int{1, 2})
	testkit.Until(t, 20*time.Second, "each side to see the other dead", func() string {
		for _, pair := range [][2]int{{0, 1}, {0, 2}, {1, 0}, {2, 0}} {
			a, b := c.Nodes[pair[0]], c.Nodes[pair[1]]
			if s := memberState(a, b.Config.NodeName); s != "dead" {
				return fmt.Sprintf("%s sees %s %q", a.Config.NodeName, b.Config.NodeName, s)
			}
		}
		return ""
	})
	// Write on both sides for longer than memberlist's GossipToTheDeadTime
	// (2s local), after which it never talks to the dead by itself.
	dead := time.Now()
	var keys []string
	for j := 0; j < 20 || time.Since(dead) < 4*time.Second; j++ {
		k := fmt.Sprintf("k%d", j)
		put(t, c.Nodes[j%3], k, c.Nodes[j%3].Config.NodeName)
		keys = append(keys, k)
		time.Sleep(50 * time.Millisecond) // spread the writes over the cut
	}
	if a, b := c.Nodes[0].D.Store().Digest(), c.Nodes[1].D.Store().Digest(); a == b {
		t.Fatal("the partition let writes through")
	}

	c.Heal()
	healed := time.Now()
	testkit.Until(t, 20*time.Second, "every node to see every other alive", func() string {
		for _, a := range c.Nodes {
			for _, b := range c.Nodes {
				if s := memberState(a, b.Config.NodeName); s != "alive" {
					return fmt.Sprintf("%s sees %s %q", a.Config.NodeName, b.Config.NodeName, s)
				}
			}
		}
		return ""
	})
	merged := time.Since(healed)
	c.WaitConverged(20 * time.Second)
	t.Logf("gossip merged %v after the heal, views converged %v after it", merged.Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
	for _, k := range keys {
		e0, ok := c.Nodes[0].D.Store().Get("t", k)
		if !ok {
			t.Fatalf("%s missing on node0", k)
		}
		for _, n := range c.Nodes[1:] {
			if e, _ := n.D.Store().Get("t", k); string(e.Value) != string(e0.Value) || e.Stamp != e0.Stamp {
				t.Fatalf("%s differs between node0 and %s", k, n.Config.NodeName)
			}
		}
	}
	var merges int
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, n := range c.Nodes {
		res, err := hc.Get("http://" + n.D.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, `cachecast_cluster_gossip_reconnects_total{result="merged"} `); ok {
				k, _ := strconv.Atoi(v)
				merges += k
			}
		}
	}
	if merges == 0 {
		t.Errorf("no node counts a merged reconnect in cachecast_cluster_gossip_reconnects_total")
	}
}

// TestPartitionHeals: a fleet cut in two keeps serving writes on both
// sides, which then differ; healed, it converges on one view, each key
// decided the same way everywhere.
func TestPartitionHeals(t *testing.T) {
	c := daemontest.NewCluster(t, 3, nil)
	put(t, c.Nodes[0], "before", "v")
	c.WaitConverged(10 * time.Second)

	c.Partition([]int{0}, []int{1, 2})
	testkit.Until(t, 10*time.Second, "node0's data links down", func() string {
		for _, m := range c.Nodes[0].D.ClusterStatus().Members {
			if !m.Self && m.Connected {
				return m.Name + " still connected"
			}
		}
		return ""
	})
	for j := range 20 {
		put(t, c.Nodes[0], fmt.Sprintf("k%d", j), "a")
		put(t, c.Nodes[1+j%2], fmt.Sprintf("k%d", j), "b")
	}
	if a, b := c.Nodes[0].D.Store().Digest(), c.Nodes[1].D.Store().Digest(); a == b {
		t.Fatal("the partition let writes through")
	}

	c.Heal()
	c.WaitConverged(20 * time.Second)
	for j := range 20 {
		e0, _ := c.Nodes[0].D.Store().Get("t", fmt.Sprintf("k%d", j))
		for _, n := range c.Nodes[1:] {
			e, _ := n.D.Store().Get("t", fmt.Sprintf("k%d", j))
			if string(e.Value) != string(e0.Value) || e.Stamp != e0.Stamp {
				t.Fatalf("k%d differs between node0 and %s", j, n.Config.NodeName)
			}
		}
	}
}
