package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/wire"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestFreshnessQuantileBeyondBuckets: a p99 past the histogram's last
// bucket is that bucket's bound, marked over, and the status encodes as
// JSON (an infinity would not).
func TestFreshnessQuantileBeyondBuckets(t *testing.T) {
	o := &Observer{freshness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "f", Buckets: []float64{0.1, 1}})}
	if b, over := o.freshnessQuantile(0.99); b != 0 || over {
		t.Fatalf("no observation: %v, %v; want 0, false", b, over)
	}
	o.freshness.Observe(0.05)
	if b, over := o.freshnessQuantile(0.99); b != 0.1 || over {
		t.Fatalf("within the first bucket: %v, %v; want 0.1, false", b, over)
	}
	for range 10 {
		o.freshness.Observe(30)
	}
	b, over := o.freshnessQuantile(0.99)
	if b != 1 || !over {
		t.Fatalf("past the last bucket: %v, %v; want 1, true", b, over)
	}
	s := wire.ObserverStatus{FreshnessP99Seconds: b, FreshnessP99Over: over, Agreed: 1}
	s.Summary = observerSummary(s)
	if _, err := json.Marshal(s); err != nil || !strings.Contains(s.Summary, "more than 1 s") {
		t.Fatalf("status %q: %v", s.Summary, err)
	}
}

// TestOriginFreshnessBounded: the per-origin freshness labels the first
// maxFreshnessOrigins names, later ones share "other", and two origins of
// one name (a node that came back as a new origin) share its series.
func TestOriginFreshnessBounded(t *testing.T) {
	f := &originFreshness{
		vec:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "f", Buckets: originFreshnessBuckets}, []string{"origin"}),
		name: func(o uint64) string { return fmt.Sprint("node", o%50) },
	}
	for o := uint64(0); o < 100; o++ { // 50 names, each of two origins
		f.observer(o).Observe(0.2)
	}
	counts := map[string]uint64{}
	ch := make(chan prometheus.Metric, 200)
	f.vec.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		counts[d.GetLabel()[0].GetValue()] = d.GetHistogram().GetSampleCount()
	}
	if len(counts) != maxFreshnessOrigins+1 || counts["node0"] != 2 || counts[otherOrigins] != 2*(50-maxFreshnessOrigins) {
		t.Fatalf("series %d (want %d), node0 %d (want 2), other %d (want %d)",
			len(counts), maxFreshnessOrigins+1, counts["node0"], counts[otherOrigins], 2*(50-maxFreshnessOrigins))
	}
}

// TestObserverBeforeGossip: the broadcast node applies records from NATS
// from its own New on, before the cluster's New has made its gossip, and
// the observer takes each (broadcast.Config.Applied): an origin seen then
// is labelled in hex, as one no member has, and the observer does not
// read the gossip New has not set (it did: a data race, seen on a restart
// over NATS in daemontest's TestConvergeRandomOps, and a nil gossip's
// panic for a record applied before it existed).
func TestObserverBeforeGossip(t *testing.T) {
	c := &Cluster{}
	c.obs = newObserver(c) // as New makes it, before broadcast.New
	c.obs.applied(0xabc, time.Now())
	ch := make(chan prometheus.Metric, 1)
	c.obs.byOrigin.vec.Collect(ch)
	close(ch)
	var labels []string
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		labels = append(labels, d.GetLabel()[0].GetValue())
	}
	if want := wire.FormatOrigin(0xabc); len(labels) != 1 || labels[0] != want {
		t.Fatalf("labels %q; want [%s]", labels, want)
	}
}
