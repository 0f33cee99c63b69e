package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/faultnet"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// splitView is what a node says of a split: its degradation, the members
// it misses, and verify's unreachable members and verdict.
type splitView struct {
	kind      string
	missing   []string
	verifyOK  bool
	readyBody string
}

func (td *testDaemon) splitView() splitView {
	kind, missing, _ := td.d.degradation()
	var v wire.VerifyResult
	// A member being healed may not answer a verify for a while: an
	// error here is "not identical", polled again.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://cachecast/v1/verify", nil)
	if res, err := td.c.Do(req); err == nil {
		if b, err := io.ReadAll(res.Body); err == nil && res.StatusCode == 200 {
			_ = json.Unmarshal(b, &v)
		}
		res.Body.Close()
	}
	return splitView{kind: kind, missing: missing, verifyOK: v.Identical, readyBody: string(td.do("GET", "/readyz", nil).body)}
}

// scrape is the daemon's /metrics, read over its metrics port.
func scrape(t *testing.T, td *testDaemon) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	res, err := c.Get("http://" + td.d.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", res.StatusCode, err)
	}
	return string(b)
}

// Two islands made by a partition that outlasts the failure detector
// (gossip and data ports cut both ways between node0 and the others): both
// sides report degraded, naming what they miss (node0 alone, node1 and
// node2 missing node0), in status, /readyz's body and the gauges, and
// verify fails on both sides; after the heal all of it clears. Each side's
// time to say so is measured and bounded.
func TestSplitIsVisibleOnBothSides(t *testing.T) {
	t.Parallel()
	fn := faultnet.New()
	ds := startCluster(t, 3, func(i int, c *Config) {
		c.JoinTimeout = 300 * time.Millisecond
		c.MetricsAddr = "127.0.0.1:0"
		hook(c, func(h *daemonhooks.Hooks) { h.GossipUnreachable = fn.Unreachable(c.NodeName) })
		hook(c, func(h *daemonhooks.Hooks) { h.DataDial = fn.Dialer(c.NodeName) })
	})
	testkit.Eventually(t, 10*time.Second, "no node degraded", func() bool {
		for _, td := range ds {
			if v := td.splitView(); v.kind != "" || !v.verifyOK {
				return false
			}
		}
		return true
	})
	cutBoth := func(each func(from, addr string)) {
		for _, other := range ds[1:] {
			for _, addr := range []string{other.d.GossipAddr(), other.d.DataAddr()} {
				each(ds[0].cfg.NodeName, addr)
			}
			for _, addr := range []string{ds[0].d.GossipAddr(), ds[0].d.DataAddr()} {
				each(other.cfg.NodeName, addr)
			}
		}
	}
	cutBoth(fn.Cut)
	start := time.Now()
	want := map[string]splitView{
		"node0": {kind: cluster.DegradedAlone, missing: []string{"node1", "node2"}},
		"node1": {kind: cluster.DegradedMissing, missing: []string{"node0"}},
		"node2": {kind: cluster.DegradedMissing, missing: []string{"node0"}},
	}
	for _, td := range ds {
		w := want[td.cfg.NodeName]
		testkit.Until(t, 15*time.Second, td.cfg.NodeName+" to report the split", func() string {
			v := td.splitView()
			switch {
			case v.kind != w.kind || !slices.Equal(v.missing, w.missing):
				return fmt.Sprintf("degradation %q %v, want %q %v", v.kind, v.missing, w.kind, w.missing)
			case v.verifyOK:
				return "verify says identical"
			case !strings.Contains(v.readyBody, `"status":"degraded"`) || !strings.Contains(v.readyBody, w.missing[0]):
				return "/readyz: " + v.readyBody
			}
			return ""
		})
		t.Logf("%s reports the split %v after the cut", td.cfg.NodeName, time.Since(start).Round(time.Millisecond))
		st := getStatus(t, td)
		if !slices.Equal(st.Missing, w.missing) || st.Degraded == "" {
			t.Errorf("%s: /v1/status degraded %q missing %v", td.cfg.NodeName, st.Degraded, st.Missing)
		}
		metrics := scrape(t, td)
		for _, line := range []string{
			fmt.Sprintf(`cachecast_node_degraded{reason=%q} 1`, w.kind),
			fmt.Sprintf("cachecast_node_members_missing %d", len(w.missing)),
		} {
			if !strings.Contains(metrics, line) {
				t.Errorf("%s: /metrics lacks %q", td.cfg.NodeName, line)
			}
		}
	}

	cutBoth(fn.Uncut)
	healed := time.Now()
	testkit.Until(t, 20*time.Second, "the heal to clear every node", func() string {
		for _, td := range ds {
			if v := td.splitView(); v.kind != "" || !v.verifyOK {
				return fmt.Sprintf("%s: degradation %q %v, verify identical %v", td.cfg.NodeName, v.kind, v.missing, v.verifyOK)
			}
		}
		return ""
	})
	t.Logf("every node whole again %v after the heal", time.Since(healed).Round(time.Millisecond))
}
