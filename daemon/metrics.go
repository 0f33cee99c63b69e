package daemon

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// metrics are the daemon's Prometheus metrics, on a registry of their own
// (not the global one, so that two daemons in one test process do not
// collide), served at /metrics on --metrics-addr. The HTTP API registers
// its own (errors, latency, subscribers) on the same registry.
type metrics struct {
	reg *prometheus.Registry

	publishes    prometheus.Counter
	publishBytes prometheus.Counter
	flush        prometheus.Histogram
	connections  prometheus.Gauge
	// evicted counts connections closed to make room for a new one.
	evicted prometheus.Counter
	// replicaMisses counts sync-replication publishes answered without
	// the replica's confirmation, by status.
	replicaMisses *prometheus.CounterVec
}

// newFlushHistogram is the histogram of the store's flushes, made before
// the store opens: the store observes every flush into it (Options.OnFlush).
func newFlushHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cachecast_store_flush_duration_seconds",
		Help:    "Duration of the store's flushes (msync) that wrote something.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), // 50µs .. 13s
	})
}

// newMetrics registers the daemon's metrics; flush is newFlushHistogram's,
// already fed by the store.
func newMetrics(d *Daemon, flush prometheus.Histogram) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cachecast_publish_messages_total",
			Help: "Messages published through the local API (values and tombstones).",
		}),
		publishBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cachecast_publish_bytes_total",
			Help: "Bytes of values published through the local API.",
		}),
		flush: flush,
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cachecast_api_connections",
			Help: "Open connections to the local API socket.",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cachecast_api_connections_evicted_total",
			Help: "Connections waiting for a request (idle, or sending headers) closed to make room under --max-connections.",
		}),
		replicaMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cachecast_replication_unconfirmed_total",
			Help: "Sync-replication publishes the replica did not confirm, by status (replica_unavailable, replica_timeout).",
		}, []string{"status"}),
	}
	if d.cluster != nil {
		m.reg.MustRegister(d.cluster.Collector(), d.cluster.Observer())
	}
	m.reg.MustRegister(m.publishes, m.publishBytes, m.flush, m.connections, m.evicted, m.replicaMisses,
		newStoreCollector(d.store, d.cfg.NodeName), healthCollector{d},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cachecast_cursors",
			Help: "Durable cursors on this node (bound: --max-cursors).",
		}, func() float64 { return float64(len(d.store.Cursors())) }),
		cursorLagCollector{d.store},
		newGroupCollector(d),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cachecast_log_lines_lost_total",
			Help: "Log lines that could not be written (a closed pipe, a full disk), over the process.",
		}, func() float64 { return float64(lostLogLines.Load()) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// cursorLagDesc is the lag of the furthest-behind durable cursor, named by
// its labels: the cursor most likely to hold retention back.
var cursorLagDesc = prometheus.NewDesc("cachecast_cursor_oldest_lag_messages",
	"Messages the furthest-behind durable cursor has still to read; its labels name it, its topic and its owner (absent without cursors).",
	[]string{"cursor", "topic", "owner_uid"}, nil)

// cursorLagCollector reports cursorLagDesc at scrape time.
type cursorLagCollector struct{ s *store.Store }

func (c cursorLagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- cursorLagDesc }

func (c cursorLagCollector) Collect(ch chan<- prometheus.Metric) {
	var oldest *store.CursorInfo
	cs := c.s.Cursors()
	for i := range cs {
		if oldest == nil || cs[i].Lag() > oldest.Lag() {
			oldest = &cs[i]
		}
	}
	if oldest == nil {
		return
	}
	owner := ""
	if oldest.Owned {
		owner = strconv.FormatUint(uint64(oldest.Owner), 10)
	}
	ch <- prometheus.MustNewConstMetric(cursorLagDesc, prometheus.GaugeValue, float64(oldest.Lag()), oldest.Name, oldest.Topic, owner)
}

// newServer serves /metrics, and /healthz and /readyz through health (the
// HTTP API's read-only handler: the same answers as on the socket, for a
// prober or a load balancer that reaches only TCP); anything else is 404.
func (m *metrics) newServer(log *zap.Logger, health http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", health)
	mux.Handle("GET /readyz", health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:          zap.NewStdLog(log.Named("metrics")),
		EnableOpenMetrics: true,
	}))
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("metrics")),
	}
}

// storeCollector reads the store's figures at scrape time.
type storeCollector struct {
	s                                                        *store.Store
	node                                                     string
	segments, mapped, logBytes, writePos, flushedPos, oldest *prometheus.Desc
	records, keys, lastFlush, info                           *prometheus.Desc
	mismatches                                               *prometheus.Desc
	lost, damaged, repaired                                  *prometheus.Desc
	tombstones, collected                                    *prometheus.Desc
	digests, digestSeconds                                   *prometheus.Desc
}

func newStoreCollector(s *store.Store, node string) *storeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("cachecast_store_"+name, help, labels, nil)
	}
	return &storeCollector{
		s:             s,
		node:          node,
		segments:      d("segments", "Log segments retained, the one being written included."),
		mapped:        d("mapped_segments", "Log segments mapped into memory, the next ones made ready ahead of the writer included."),
		logBytes:      d("log_bytes", "Bytes of log retained."),
		writePos:      d("write_position_bytes", "Log position of the next append."),
		flushedPos:    d("flushed_position_bytes", "Log position up to which the log is on disk."),
		oldest:        d("oldest_position_bytes", "Log position of the oldest retained record."),
		records:       d("records", "Records appended or replayed since the store opened."),
		keys:          d("view_keys", "Live keys in the key/value view."),
		lastFlush:     d("last_flush_seconds", "Duration of the last flush."),
		mismatches:    d("log_mismatches_total", "Failures that leave the view or an index not matching the log, by kind: apply (a committed record the view could not take), undo (a failed write that could not be taken back). Any makes the store unhealthy until a restart.", "kind"),
		lost:          d("lost_records", "Records of the log set aside as damaged and not back from a peer yet (cachecast repair)."),
		damaged:       d("damaged_records_total", "Records of the log found damaged and set aside since the start."),
		repaired:      d("repaired_records_total", "Records lost to a damaged log and pulled back from a peer since the start."),
		tombstones:    d("view_tombstones", "Entries of the view that serve no value: tombstones of deletes and expired values (collected after --tombstone-grace)."),
		collected:     d("tombstones_collected_total", "Tombstones collected since the store opened (--tombstone-grace)."),
		digests:       d("view_digests_total", "Hashes of the whole view taken for its digest (status, verify, the consistency observer) since the store opened: a digest the view still holds is given again without one."),
		digestSeconds: d("view_digest_seconds_total", "Time spent hashing the whole view for its digest since the store opened."),
		info:          prometheus.NewDesc("cachecast_node_info", "The node's identity (value 1).", []string{"node", "origin", "version", "flush"}, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.segments, c.mapped, c.logBytes, c.writePos, c.flushedPos, c.oldest, c.records, c.keys, c.lastFlush, c.info, c.mismatches, c.lost, c.damaged, c.repaired, c.tombstones, c.collected, c.digests, c.digestSeconds} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s.Stats()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	g(c.segments, float64(s.Segments))
	g(c.mapped, float64(s.MappedSegments))
	g(c.logBytes, float64(s.LogBytes))
	g(c.writePos, float64(s.WritePos))
	g(c.flushedPos, float64(s.FlushedPos))
	g(c.oldest, float64(s.OldestPos))
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(s.Records))
	g(c.keys, float64(s.Keys))
	g(c.lastFlush, s.LastFlush.Seconds())
	ch <- prometheus.MustNewConstMetric(c.mismatches, prometheus.CounterValue, float64(s.ApplyFailures), "apply")
	ch <- prometheus.MustNewConstMetric(c.mismatches, prometheus.CounterValue, float64(s.UndoFailures), "undo")
	damaged, repaired := c.s.RepairStats()
	g(c.lost, float64(len(c.s.Lost())))
	ch <- prometheus.MustNewConstMetric(c.damaged, prometheus.CounterValue, float64(damaged))
	ch <- prometheus.MustNewConstMetric(c.repaired, prometheus.CounterValue, float64(repaired))
	tombs, collected := c.s.Tombstones()
	g(c.tombstones, float64(tombs))
	ch <- prometheus.MustNewConstMetric(c.collected, prometheus.CounterValue, float64(collected))
	hashes, took := c.s.DigestStats()
	ch <- prometheus.MustNewConstMetric(c.digests, prometheus.CounterValue, float64(hashes))
	ch <- prometheus.MustNewConstMetric(c.digestSeconds, prometheus.CounterValue, took.Seconds())
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1,
		c.node, wire.FormatOrigin(s.Origin), Version, s.Flush.String())
}

// groupCollector reads the consumer groups' figures at scrape time, by
// topic and group. The counters count from when the group's part on this
// node started (its first local member joined).
type groupCollector struct {
	d                                             *Daemon
	members, owned, inflight, backlog             *prometheus.Desc
	delivered, acked, retries, deadLetters, nodes *prometheus.Desc
}

func newGroupCollector(d *Daemon) *groupCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("cachecast_group_"+name, help, []string{"topic", "group"}, nil)
	}
	return &groupCollector{
		d:           d,
		nodes:       desc("nodes", "Live nodes hosting members of the group."),
		members:     desc("members", "Members of the group on this node."),
		owned:       desc("queues", "Queues of the group this node serves."),
		inflight:    desc("inflight", "Messages delivered on this node and not yet settled."),
		backlog:     desc("backlog", "Messages of the group's topics this node has not looked at yet, plus those waiting for a retry."),
		delivered:   desc("delivered_total", "Deliveries on this node, retries included."),
		acked:       desc("acked_total", "Messages acknowledged on this node."),
		retries:     desc("retries_total", "Redeliveries on this node."),
		deadLetters: desc("dead_letters_total", "Messages this node wrote to the group's dead-letter topic."),
	}
}

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.nodes, c.members, c.owned, c.inflight, c.backlog, c.delivered, c.acked, c.retries, c.deadLetters} {
		ch <- d
	}
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	if c.d.groups == nil {
		return
	}
	for _, s := range c.d.groups.Status() {
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, s.Topic, s.Group)
		}
		n := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), s.Topic, s.Group)
		}
		g(c.nodes, float64(len(s.Nodes)))
		g(c.members, float64(len(s.Members)))
		g(c.owned, float64(len(s.Owned)))
		g(c.inflight, float64(s.Inflight))
		g(c.backlog, float64(s.Backlog))
		n(c.delivered, s.Delivered)
		n(c.acked, s.Acked)
		n(c.retries, s.Retries)
		n(c.deadLetters, s.DeadLetters)
	}
}
