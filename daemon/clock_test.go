package daemon

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// clusterStatusOf reads GET /v1/cluster of td.
func clusterStatusOf(t *testing.T, td *testDaemon) wire.ClusterStatus {
	t.Helper()
	r := td.do("GET", "/v1/cluster", nil)
	var st wire.ClusterStatus
	if err := json.Unmarshal(r.body, &st); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/cluster: %d %s", r.status, r.body)
	}
	return st
}

// memberNamed is the member called name in st.
func memberNamed(t *testing.T, st wire.ClusterStatus, name string) wire.ClusterMember {
	t.Helper()
	for _, m := range st.Members {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no member %q in %+v", name, st)
	return wire.ClusterMember{}
}

// gaugeValue reads the metric name with the label peer=peer ("" for a
// metric without labels) from td's registry; ok is false when absent.
func gaugeValue(t *testing.T, td *testDaemon, name, peer string) (v float64, ok bool) {
	t.Helper()
	mfs, err := td.d.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := peer == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == "peer" && l.GetValue() == peer
			}
			if !match {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// stampTime is the wall time of a publish's HLC.
func stampTime(t *testing.T, pr wire.PutResult) time.Time {
	t.Helper()
	h, err := strconv.ParseUint(pr.HLC, 10, 64)
	if err != nil {
		t.Fatalf("hlc %q: %v", pr.HLC, err)
	}
	return record.HLCTime(h)
}

// TestClusterClockAheadIsHeldBack runs three nodes, node2's clock an hour
// ahead: its writes must not win over the others' concurrent writes, the
// others' clocks must not follow it, and they flag it.
func TestClusterClockAheadIsHeldBack(t *testing.T) {
	t.Parallel()
	ds := startCluster(t, 3, func(i int, c *Config) {
		if i == 2 {
			hook(c, func(h *daemonhooks.Hooks) { h.Clock = func() time.Time { return time.Now().Add(time.Hour) } })
		}
	})
	// Concurrent writes to one key: node0's and node1's first, then
	// node2's, stamped an hour later. Without the bound node2's would win
	// everywhere.
	ds[0].put("prices", "k", "n0")
	ds[1].put("prices", "j", "n1")
	skewed := ds[2].put("prices", "k", "n2")
	if ahead := time.Until(stampTime(t, skewed)); ahead < 59*time.Minute {
		t.Fatalf("the skewed node stamped only %s ahead: the test's clock hook does not work", ahead)
	}
	for i := 0; i < 2; i++ {
		testkit.Eventually(t, 20*time.Second, ds[i].cfg.NodeName+" flags node2 in /v1/cluster", func() bool {
			m := memberNamed(t, clusterStatusOf(t, ds[i]), "node2")
			return m.ClockAhead && m.RefusedRecords > 0 && m.ClockAheadSeconds > 3500
		})
	}
	for i := 0; i < 2; i++ {
		td := ds[i]
		// node0's and node1's writes reached each other...
		for key, want := range map[string]string{"k": "n0", "j": "n1"} {
			testkit.Eventually(t, 10*time.Second, td.cfg.NodeName+" has "+key, func() bool {
				r := td.do("GET", "/v1/topics/prices/keys/"+key, nil)
				return r.status == 200 && string(r.body) == want
			})
		}
		// ...node2's did not win (it is not applied at all), and the local
		// clock did not follow it: a new write is stamped about now.
		if r := td.do("GET", "/v1/topics/prices/keys/k", nil); string(r.body) != "n0" {
			t.Fatalf("%s: k = %s, want n0 (node2's write is an hour ahead)", td.cfg.NodeName, r.body)
		}
		pr := td.put("prices", "after", "x")
		if d := time.Until(stampTime(t, pr)); d > time.Second {
			t.Fatalf("%s: a new write is stamped %s ahead: the local clock followed node2's", td.cfg.NodeName, d)
		}
		st := clusterStatusOf(t, td)
		if st.ClockBehind {
			t.Fatalf("%s says its clock is behind, with one peer of two ahead: %+v", td.cfg.NodeName, st)
		}
		other := map[int]string{0: "node1", 1: "node0"}[i]
		if m := memberNamed(t, st, other); m.ClockAhead || m.RefusedRecords != 0 || m.HeldRecords != 0 {
			t.Fatalf("%s flags %s, whose clock is right: %+v", td.cfg.NodeName, other, m)
		}
		if v, ok := gaugeValue(t, td, "cachecast_cluster_peer_clock_ahead", "node2"); !ok || v != 1 {
			t.Fatalf("%s: cachecast_cluster_peer_clock_ahead{peer=node2} = %v (present %v), want 1", td.cfg.NodeName, v, ok)
		}
		if v, ok := gaugeValue(t, td, "cachecast_cluster_peer_clock_ahead", other); !ok || v != 0 {
			t.Fatalf("%s: cachecast_cluster_peer_clock_ahead{peer=%s} = %v (present %v), want 0", td.cfg.NodeName, other, v, ok)
		}
		if v, _ := gaugeValue(t, td, "cachecast_cluster_clock_refused_records_total", ""); v < 1 {
			t.Fatalf("%s: cachecast_cluster_clock_refused_records_total = %v, want at least 1", td.cfg.NodeName, v)
		}
	}
	// node2 takes the others' records (they are behind its clock, not
	// ahead) and flags nobody.
	testkit.Eventually(t, 10*time.Second, "node2 has j", func() bool {
		r := ds[2].do("GET", "/v1/topics/prices/keys/j", nil)
		return r.status == 200 && string(r.body) == "n1"
	})
	st := clusterStatusOf(t, ds[2])
	for _, m := range st.Members {
		if m.ClockAhead {
			t.Fatalf("node2 flags %s: %+v", m.Name, m)
		}
	}
}

// TestClusterClockBehindIsSaid runs three nodes, node2's clock an hour
// behind: node2 finds both peers ahead and says its own clock is behind.
func TestClusterClockBehindIsSaid(t *testing.T) {
	t.Parallel()
	ds := startCluster(t, 3, func(i int, c *Config) {
		if i == 2 {
			hook(c, func(h *daemonhooks.Hooks) { h.Clock = func() time.Time { return time.Now().Add(-time.Hour) } })
		}
	})
	ds[0].put("prices", "a", "n0")
	ds[1].put("prices", "b", "n1")
	testkit.Eventually(t, 20*time.Second, "node2 says its clock is behind", func() bool {
		return clusterStatusOf(t, ds[2]).ClockBehind
	})
	st := clusterStatusOf(t, ds[2])
	for _, name := range []string{"node0", "node1"} {
		if m := memberNamed(t, st, name); !m.ClockAhead {
			t.Fatalf("node2 does not flag %s: %+v", name, m)
		}
	}
	if v, _ := gaugeValue(t, ds[2], "cachecast_cluster_clock_behind", ""); v != 1 {
		t.Fatalf("cachecast_cluster_clock_behind = %v, want 1", v)
	}
	// The others do not think their own clocks are behind.
	for _, td := range ds[:2] {
		if clusterStatusOf(t, td).ClockBehind {
			t.Fatalf("%s says its clock is behind", td.cfg.NodeName)
		}
	}
}
