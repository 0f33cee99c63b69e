package test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// TestFleetTooOldProcess: a cachecastd process beside a node of an older
// data protocol (an in-process daemon speaking at most protocol 3, as the
// builds before time fields do), joined on loopback. The process sees the
// old member (/v1/cluster: too_old), refuses a write with an expiry with
// 409 fleet_too_old naming it, and its ordinary writes reach the old node;
// once the old node has left, the same write is taken.
func TestFleetTooOldProcess(t *testing.T) {
	t.Parallel()
	nodes := startClusterNodes(t, []clusterSpec{{Name: "new"}})
	n := nodes[0]
	old := daemontest.Start(t, func(cfg *daemon.Config) {
		cfg.NodeName = "old"
		cfg.GossipAddr = "127.0.0.1:0"
		cfg.DataAddr = "127.0.0.1:0"
		cfg.GossipProfile = "local"
		cfg.Join = []string{n.GossipAddr}
		cfg.JoinTimeout = 5 * time.Second
		*cfg = config.WithHooks(*cfg, daemonhooks.Hooks{DataProtocolMax: broadcast.ProtocolTimed - 1})
	})
	oldMember := func() (wire.ClusterMember, bool) {
		var st wire.ClusterStatus
		if r := httpDo(t, n.Node, "GET", "/v1/cluster", nil); r.status != 200 || json.Unmarshal(r.body, &st) != nil {
			t.Fatalf("GET /v1/cluster: %d %s", r.status, r.body)
		}
		for _, m := range st.Members {
			if m.Name == "old" && m.State == "alive" {
				return m, true
			}
		}
		return wire.ClusterMember{}, false
	}
	testkit.Eventually(t, 15*time.Second, "the process sees the old node alive", func() bool {
		_, ok := oldMember()
		return ok
	})
	if m, _ := oldMember(); !m.TooOld || m.Protocol != broadcast.ProtocolTimed-1 {
		t.Fatalf("the old member as the process sees it: protocol %d, too_old %v", m.Protocol, m.TooOld)
	}
	expires := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	r := httpDo(t, n.Node, "PUT", "/v1/topics/prices/keys/sale", strings.NewReader("9.99"), "Cachecast-Expires", expires)
	if r.status != 409 || r.code() != wire.CodeFleetTooOld || !strings.Contains(r.message(), "old (protocol 3)") {
		t.Fatalf("PUT with an expiry beside an old node: %d %s; want 409 fleet_too_old naming it", r.status, r.body)
	}
	if r := httpDo(t, n.Node, "PUT", "/v1/topics/prices/keys/plain", strings.NewReader("1")); r.status != 200 {
		t.Fatalf("an ordinary PUT: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 15*time.Second, "the old node holds the ordinary write", func() bool {
		e, ok := old.D.Store().Get("prices", "plain")
		return ok && string(e.Value) == "1"
	})
	if _, ok := old.D.Store().Get("prices", "sale"); ok {
		t.Fatal("the refused write reached the old node")
	}

	old.Stop()
	testkit.Eventually(t, 15*time.Second, "the old node gone from the process's membership", func() bool {
		_, ok := oldMember()
		return !ok
	})
	if r := httpDo(t, n.Node, "PUT", "/v1/topics/prices/keys/sale", strings.NewReader("9.99"), "Cachecast-Expires", expires); r.status != 200 {
		t.Fatalf("PUT with an expiry once the old node left: %d %s", r.status, r.body)
	}
}
