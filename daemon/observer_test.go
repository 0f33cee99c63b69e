package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/faultnet"
	"github.com/cachecast/cachecast/internal/testkit"
)

// freshnessOver is how many of td's freshness observations took longer
// than bound (a bucket's upper bound), and how many there are.
func freshnessOver(t *testing.T, td *testDaemon, bound float64) (over, total uint64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(td.d.cluster.Observer())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var m *dto.Metric
	for _, mf := range mfs {
		if mf.GetName() == "cachecast_observer_freshness_seconds" {
			m = mf.GetMetric()[0]
		}
	}
	if m == nil {
		t.Fatal("no cachecast_observer_freshness_seconds")
	}
	total = m.Histogram.GetSampleCount()
	for _, b := range m.Histogram.GetBucket() {
		if b.GetUpperBound() == bound {
			return total - b.GetCumulativeCount(), total
		}
	}
	t.Fatalf("no bucket bound %v", bound)
	return 0, 0
}

// The observer on a healthy cluster agrees with every peer and sees the
// peers' records fresh; a node cut off from the others' data ports (gossip
// still alive) shows in both: the others stop agreeing with it (seconds
// since agreed grows past the bound while it stays low for the healthy
// peer), and once healed its freshness histogram holds the records that
// reached it late. The times to see it are measured and bounded.
func TestObserverSeesACutOffNode(t *testing.T) {
	fn := faultnet.New()
	ds := startCluster(t, 3, func(i int, c *Config) {
		c.ObserveInterval = 50 * time.Millisecond
		hook(c, func(h *daemonhooks.Hooks) { h.DataDial = fn.Dialer(c.NodeName) })
	})
	keys, _ := skus(20)
	publishAll(t, ds[0], keys, func(i int) string { return fmt.Sprint("v", i) }, "")
	waitVectors(t, ds)
	testkit.Until(t, 10*time.Second, "every node to agree with both peers", func() string {
		for _, td := range ds {
			s := td.d.cluster.Observer().Status(time.Now())
			for _, p := range s.Peers {
				if p.LastResult != "agreed" {
					return fmt.Sprintf("%s: last comparison with %s: %q", td.cfg.NodeName, p.Name, p.LastResult)
				}
			}
			if s.Differed != 0 || s.AgreementRatio != 1 {
				return fmt.Sprintf("%s: %+v", td.cfg.NodeName, s)
			}
		}
		return ""
	})
	testkit.Until(t, 10*time.Second, "node1 to observe the freshness of every record", func() string {
		if _, total := freshnessOver(t, ds[1], 1); total < uint64(len(keys)) {
			return fmt.Sprintf("node1 observed the freshness of %d records, want at least %d", total, len(keys))
		}
		return ""
	})

	// node2's data links cut both ways.
	links := func(each func(from, addr string)) {
		for _, other := range ds[:2] {
			each(ds[2].cfg.NodeName, other.d.DataAddr())
			each(other.cfg.NodeName, ds[2].d.DataAddr())
		}
	}
	links(fn.Cut)
	cut := time.Now()
	publishAll(t, ds[0], keys, func(i int) string { return fmt.Sprint("w", i) }, "")
	const bound = 2.0 // seconds since agreed that marks a peer as not agreeing
	testkit.Until(t, 20*time.Second, "node0 to stop agreeing with node2 only", func() string {
		s := ds[0].d.cluster.Observer().Status(time.Now())
		since := map[string]float64{}
		for _, p := range s.Peers {
			since[p.Name] = p.SecondsSinceAgreed
		}
		if since["node2"] < bound || since["node1"] >= bound {
			return fmt.Sprintf("seconds since agreed: %v", since)
		}
		return ""
	})
	t.Logf("node0 stopped agreeing with the cut-off node2 (past %vs) %v after the cut", bound, time.Since(cut).Round(time.Millisecond))
	overBefore, _ := freshnessOver(t, ds[2], 1)
	links(fn.Uncut)
	waitVectors(t, ds)
	// A record is in the store before the broadcast layer reports it
	// applied, so the histogram may trail waitSameRecords for a moment.
	testkit.Until(t, 10*time.Second, "node2's freshness to hold the records that reached it late", func() string {
		if over, _ := freshnessOver(t, ds[2], 1); over < overBefore+uint64(len(keys)) {
			return fmt.Sprintf("node2, healed after more than 2 s: %d records seen later than 1 s after their stamp, want at least %d more than the %d before", over, len(keys), overBefore)
		}
		return ""
	})
	healed := time.Now()
	testkit.Eventually(t, 10*time.Second, "node0 to agree with node2 again", func() bool {
		for _, p := range ds[0].d.cluster.Observer().Status(time.Now()).Peers {
			if p.Name == "node2" {
				return p.SecondsSinceAgreed < time.Since(healed).Seconds()
			}
		}
		return false
	})
	if s := ds[0].d.cluster.Observer().Status(time.Now()); s.Summary == "" || s.Differed != 0 {
		t.Errorf("node0's summary: %+v", s)
	}
}
