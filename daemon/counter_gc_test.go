package daemon

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"
)

// TestCounterAfterTombstoneCollected: node0 has collected a deleted
// counter's tombstone (its clock an hour ahead for a moment passes the grace) while
// node1 and node2 still hold it. Increments taken by node0, which holds
// nothing of the key (the key's genesis, with its horizon), and by node1,
// which holds the tombstone (its absence), all count on every node.
func TestCounterAfterTombstoneCollected(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64 // node0's clock ahead of the wall clock, to pass the grace
	ds := startCluster(t, 3, func(i int, c *Config) {
		c.TombstoneGrace = 30 * time.Second
		if i == 0 {
			hook(c, func(h *daemonhooks.Hooks) {
				h.Clock = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			})
		}
	})
	incr := func(td *testDaemon, by int) {
		t.Helper()
		if r := td.do("POST", "/v1/topics/stats/counters/hits?by="+strconv.Itoa(by), nil); r.status != 200 {
			t.Fatalf("%s: POST counters: %d %s", td.cfg.NodeName, r.status, r.body)
		}
	}
	incr(ds[1], 5)
	waitVectors(t, ds)
	if r := ds[2].do("DELETE", "/v1/topics/stats/keys/hits", nil); r.status != 200 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	waitVectors(t, ds)
	skew.Store(int64(time.Hour))
	testkit.Until(t, 20*time.Second, "node0 to collect the counter's tombstone", func() string {
		if tombs, collected := ds[0].d.store.Tombstones(); tombs != 0 || collected != 1 {
			return fmt.Sprintf("%d tombstones, %d collected", tombs, collected)
		}
		return ""
	})
	skew.Store(0) // back in time with its peers, which refuse records stamped an hour ahead
	if tombs, _ := ds[1].d.store.Tombstones(); tombs != 1 {
		t.Fatalf("node1 holds %d tombstones, want the counter's (collected before the grace?)", tombs)
	}
	incr(ds[0], 2)
	incr(ds[1], 3)
	incr(ds[0], 4)
	incr(ds[2], 1)
	waitVectors(t, ds)
	for _, td := range ds {
		if e, found := td.d.store.Get("stats", "hits"); !found || string(e.Value) != "10" {
			t.Errorf("%s holds %q (found %v), want 10: every increment since the delete", td.cfg.NodeName, e.Value, found)
		}
	}
}
