package daemon

import (
	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/prometheus/client_golang/prometheus"
)

// The node's health as gauges, read at scrape time from the same sources
// as /readyz, /v1/status and the systemd STATUS line, so that Prometheus
// alone can alert on a degraded, away, full or repairing node (the rules
// in deploy/monitoring/). Each is 0 or 1 and always exported.
var (
	healthReadyDesc = prometheus.NewDesc("cachecast_node_ready",
		"1 while the node is ready (/readyz 200: recovered, joined, caught up, not stopping), else 0.", nil, nil)
	healthHealthyDesc = prometheus.NewDesc("cachecast_node_healthy",
		"1 while /healthz answers 200 (the store is healthy, the disk has room, the node is not away), else 0.", nil, nil)
	healthDegradedDesc = prometheus.NewDesc("cachecast_node_degraded",
		"1 while the node runs short of its cluster for the reason labelled: alone (no other member alive though told to join or remembering members) or members_missing (fewer members alive than seen); else 0.",
		[]string{"reason"}, nil)
	healthMissingDesc = prometheus.NewDesc("cachecast_node_members_missing",
		"Members this node has seen alive (or remembers from peers.json) that it does not see alive now.", nil, nil)
	healthAwayDesc = prometheus.NewDesc("cachecast_node_away",
		"1 once the node left the cluster for being out of contact longer than half of --tombstone-grace (it serves no reads or writes), else 0.", nil, nil)
	healthDiskFullDesc = prometheus.NewDesc("cachecast_node_disk_full",
		"1 while writes are refused because the disk is full (the next log segment cannot be allocated), else 0.", nil, nil)
	healthCatchingUpDesc = prometheus.NewDesc("cachecast_node_catching_up",
		"1 until the node has caught up with its peers after it started, else 0.", nil, nil)
	healthRepairDesc = prometheus.NewDesc("cachecast_node_repair_pending",
		"1 while records lost to a damaged log, or a view lost with its snapshot, are not yet repaired from peers, else 0.", nil, nil)
)

// healthCollector reports the health gauges of d.
type healthCollector struct{ d *Daemon }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{healthReadyDesc, healthHealthyDesc, healthDegradedDesc, healthMissingDesc,
		healthAwayDesc, healthDiskFullDesc, healthCatchingUpDesc, healthRepairDesc} {
		ch <- d
	}
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	gauge := func(desc *prometheus.Desc, on bool, labels ...string) {
		v := 0.0
		if on {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	kind, missing, _ := d.degradation()
	gauge(healthReadyDesc, d.ready.Load())
	gauge(healthHealthyDesc, d.healthy() == nil && d.store.DiskFull() == nil)
	gauge(healthDegradedDesc, kind == cluster.DegradedAlone, cluster.DegradedAlone)
	gauge(healthDegradedDesc, kind == cluster.DegradedMissing, cluster.DegradedMissing)
	ch <- prometheus.MustNewConstMetric(healthMissingDesc, prometheus.GaugeValue, float64(len(missing)))
	gauge(healthAwayDesc, d.awayReason() != "")
	gauge(healthDiskFullDesc, d.store.DiskFull() != nil)
	gauge(healthCatchingUpDesc, !d.catch.CaughtUp())
	_, viewPending := d.store.ViewFromPeer()
	gauge(healthRepairDesc, len(d.store.Lost()) > 0 || viewPending)
}
