package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// waitVectors waits until every node's view holds the records the
// first's does: the vector each store takes with its view's digest, under
// its write lock. Vector alone counts a peer's record once it is indexed,
// a moment before the view applies it, so a read right after could miss
// it (TestCounterAfterTombstoneCollected saw 9 of 10 on two nodes).
func waitVectors(t *testing.T, ds []*testDaemon) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "every node's view to hold every record", func() bool {
		want := ds[0].d.store.ViewDigests().Vector
		for _, td := range ds[1:] {
			if !maps.Equal(td.d.store.ViewDigests().Vector, want) {
				return false
			}
		}
		return true
	})
}

// deletedEverywhere checks that no node serves key.
func deletedEverywhere(t *testing.T, ds []*testDaemon, key string) {
	t.Helper()
	for _, td := range ds {
		if e, ok := td.d.store.Get("prices", key); ok {
			t.Fatalf("%s serves deleted %s: %q", td.cfg.NodeName, key, e.Value)
		}
	}
}

// Every node of three collects the tombstones once the grace has passed:
// the view's entries and the snapshot shrink, the fleet stays identical.
func TestTombstonesCollectedOnEveryNode(t *testing.T) {
	// Sequential: it counts the tombstones before the 8 s grace has
	// passed, which beside the parallel tests on two loaded cores it did
	// not always reach in time.
	const keys = 300
	// A grace of 8 s: a node out of contact for half of it leaves its
	// cluster (away), and a loaded CI machine has kept nodes from each
	// other's gossip for 2 s.
	ds := startCluster(t, 3, func(i int, c *Config) { c.TombstoneGrace = 8 * time.Second })
	for i := range keys {
		ds[i%3].put("prices", fmt.Sprintf("sku-%d", i), strings.Repeat("v", 100))
	}
	waitVectors(t, ds)
	for i := range keys {
		if r := ds[(i+1)%3].do("DELETE", fmt.Sprintf("/v1/topics/prices/keys/sku-%d", i), nil); r.status != 200 {
			t.Fatalf("DELETE: %d %s", r.status, r.body)
		}
	}
	ds[0].put("prices", "kept", "yes")
	waitVectors(t, ds)
	sizes := make([]int64, len(ds))
	for n, td := range ds {
		if tombs, _ := td.d.store.Tombstones(); tombs != keys {
			t.Fatalf("%s holds %d tombstones before the grace, want %d (collected too early?)", td.cfg.NodeName, tombs, keys)
		}
		sizes[n] = snapshotSize(t, td)
	}
	for _, td := range ds {
		testkit.Eventually(t, 40*time.Second, td.cfg.NodeName+" to collect the tombstones", func() bool {
			tombs, collected := td.d.store.Tombstones()
			return tombs == 0 && collected == keys
		})
	}
	for n, td := range ds {
		if size := snapshotSize(t, td); size >= sizes[n] {
			t.Fatalf("%s: snapshot of %d bytes after collection, %d before", td.cfg.NodeName, size, sizes[n])
		}
		if e, ok := td.d.store.Get("prices", "kept"); !ok || string(e.Value) != "yes" {
			t.Fatalf("%s lost a live key", td.cfg.NodeName)
		}
	}
	deletedEverywhere(t, ds, "sku-0")
	if !ds[0].d.node.Verify(context.Background()).Identical {
		t.Fatal("verify: the fleet differs after collection")
	}
}

// The deletes of a node that left for good are collected too, once its
// origin is retired from the vectors (--retire-origins-after), by what
// each peer said of the retired origins at the last exchange. A node
// that joined after the retirement reports none of them in its vector,
// so before, its peers never collected them.
func TestRetiredOriginsTombstonesCollected(t *testing.T) {
	t.Parallel()
	const keys, grace = 100, 30 * time.Second
	var skew atomic.Int64 // node0's clock ahead of the wall clock, to pass the grace
	ds := startCluster(t, 3, func(i int, c *Config) {
		c.TombstoneGrace = grace
		c.RetireOriginsAfter = time.Second
		if i == 0 {
			hook(c, func(h *daemonhooks.Hooks) {
				h.Clock = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			})
		}
	})
	for i := range keys {
		ds[i%3].put("prices", fmt.Sprintf("sku-%d", i), strings.Repeat("v", 100))
	}
	waitVectors(t, ds)
	gone := ds[2]
	deleted := time.Now()
	for i := range keys {
		if r := gone.do("DELETE", fmt.Sprintf("/v1/topics/prices/keys/sku-%d", i), nil); r.status != 200 {
			t.Fatalf("DELETE: %d %s", r.status, r.body)
		}
	}
	waitVectors(t, ds)
	origin := gone.d.store.Origin()
	gone.stop()
	retired := func(td *testDaemon) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, td.cfg.NodeName+" to retire the origin of the node gone", func() bool {
			return slices.Contains(td.d.cluster.Broadcast().Retired(), origin)
		})
	}
	retired(ds[0])
	retired(ds[1])
	// A node that joins after the retirement: its vectors never say it
	// holds the retired origin (it adopts the retirement at once).
	late := startDaemon(t, clusterConfig(t, "node3", []string{ds[0].d.cluster.Gossip().Addr()}))
	retired(late)
	live := []*testDaemon{ds[0], ds[1], late}
	waitVectors(t, live)
	for _, td := range live {
		if tombs, _ := td.d.store.Tombstones(); tombs != keys && time.Since(deleted) < grace {
			t.Fatalf("%s holds %d tombstones within the grace, want %d", td.cfg.NodeName, tombs, keys)
		}
	}
	skew.Store(int64(time.Hour))
	testkit.Until(t, 20*time.Second, "node0 to collect the retired origin's tombstones", func() string {
		if tombs, collected := ds[0].d.store.Tombstones(); tombs != 0 || collected != keys {
			return fmt.Sprintf("%d tombstones, %d collected", tombs, collected)
		}
		return ""
	})
	deletedEverywhere(t, live, "sku-0")
	if !ds[0].d.node.Verify(context.Background()).Identical {
		t.Fatal("verify: the two differ after collection")
	}
}

// snapshotSize writes td's snapshot now and returns its size.
func snapshotSize(t *testing.T, td *testDaemon) int64 {
	t.Helper()
	if err := td.d.store.Snapshot(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(td.cfg.DataDir, "snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// publishOffline writes key=value into a stopped node's log, stamped by
// its own clock now: a write the fleet has not seen, as a node cut off
// from it makes.
func publishOffline(t *testing.T, cfg Config, key, value string) {
	t.Helper()
	st, err := store.Open(cfg.StoreOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(&record.Message{Topic: "prices", Key: key, Value: []byte(value)}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// A node cut off from the fleet comes back within the grace with a write
// older than a delete the others made meanwhile: the tombstone wins on
// every node.
func TestLateWriteWithinGraceLosesToTombstone(t *testing.T) {
	ds := startCluster(t, 3, func(i int, c *Config) { c.TombstoneGrace = time.Minute })
	ds[0].put("prices", "sku", "first")
	waitVectors(t, ds)
	cfg := ds[2].cfg
	cfg.Join = []string{ds[0].d.cluster.Gossip().Addr()}
	ds[2].stop()
	publishOffline(t, cfg, "sku", "late")
	time.Sleep(2 * time.Millisecond) // the delete's stamp is after the late write's
	if r := ds[1].do("DELETE", "/v1/topics/prices/keys/sku", nil); r.status != 200 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	ds[2] = startDaemon(t, cfg)
	waitVectors(t, ds)
	deletedEverywhere(t, ds, "sku")
	if !ds[0].d.node.Verify(context.Background()).Identical {
		t.Fatal("verify: the fleet differs")
	}
}

// The resurrection case: a node away for longer than the grace allows
// holds a value (a write of its own the fleet never saw) whose key the
// others deleted and whose tombstone they collected. It refuses to start
// with its old log; with --start-over it moves the log aside and starts
// fresh, and the key stays deleted everywhere.
func TestAwayNodeDoesNotResurrectCollectedDelete(t *testing.T) {
	// Sequential: with a grace of 2 s a node out of gossip's contact for
	// 1 s is away, and beside the parallel tests on two loaded cores the
	// cluster did not hold together.
	const grace = 2 * time.Second
	ds := startCluster(t, 3, func(i int, c *Config) { c.TombstoneGrace = grace })
	ds[0].put("prices", "sku", "first")
	waitVectors(t, ds)
	cfg := ds[2].cfg
	cfg.Join = []string{ds[0].d.cluster.Gossip().Addr()}
	testkit.Eventually(t, 5*time.Second, "node2 to record its contact", func() bool {
		_, ok := cluster.ReadContact(cfg.DataDir)
		return ok
	})
	ds[2].stop()
	publishOffline(t, cfg, "sku", "stale")
	time.Sleep(2 * time.Millisecond)
	if r := ds[1].do("DELETE", "/v1/topics/prices/keys/sku", nil); r.status != 200 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	live := ds[:2]
	waitVectors(t, live)
	for _, td := range live {
		testkit.Eventually(t, 20*time.Second, td.cfg.NodeName+" to collect the tombstone", func() bool {
			tombs, collected := td.d.store.Tombstones()
			return tombs == 0 && collected == 1
		})
	}
	// Away for more than half the grace by now (the collection took the
	// whole grace): the old log is refused.
	if last, _ := cluster.ReadContact(cfg.DataDir); time.Since(last) <= grace/2 {
		t.Fatalf("last contact %v ago, not away long enough", time.Since(last))
	}
	if d, err := New(cfg, nil); !errors.Is(err, ErrAwayTooLong) {
		if err == nil {
			d.Close()
		}
		t.Fatalf("New of a node away too long: %v, want ErrAwayTooLong", err)
	}
	cfg.StartOver = true
	ds[2] = startDaemon(t, cfg)
	waitVectors(t, ds)
	deletedEverywhere(t, ds, "sku")
	if !ds[0].d.node.Verify(context.Background()).Identical {
		t.Fatal("verify: the fleet differs")
	}
	stale, _ := filepath.Glob(filepath.Join(cfg.DataDir, "stale-*", "log"))
	if len(stale) != 1 {
		t.Fatalf("the old log was not moved aside: %v", stale)
	}
}
