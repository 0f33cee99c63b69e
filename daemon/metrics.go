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
		m.reg.MustRegister(newClusterCollector(d.cluster), d.obs)
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
}

func newStoreCollector(s *store.Store, node string) *storeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("cachecast_store_"+name, help, labels, nil)
	}
	return &storeCollector{
		s:          s,
		node:       node,
		segments:   d("segments", "Log segments retained, the one being written included."),
		mapped:     d("mapped_segments", "Log segments mapped into memory, the next ones made ready ahead of the writer included."),
		logBytes:   d("log_bytes", "Bytes of log retained."),
		writePos:   d("write_position_bytes", "Log position of the next append."),
		flushedPos: d("flushed_position_bytes", "Log position up to which the log is on disk."),
		oldest:     d("oldest_position_bytes", "Log position of the oldest retained record."),
		records:    d("records", "Records appended or replayed since the store opened."),
		keys:       d("view_keys", "Live keys in the key/value view."),
		lastFlush:  d("last_flush_seconds", "Duration of the last flush."),
		mismatches: d("log_mismatches_total", "Failures that leave the view or an index not matching the log, by kind: apply (a committed record the view could not take), undo (a failed write that could not be taken back). Any makes the store unhealthy until a restart.", "kind"),
		lost:       d("lost_records", "Records of the log set aside as damaged and not back from a peer yet (cachecast repair)."),
		damaged:    d("damaged_records_total", "Records of the log found damaged and set aside since the start."),
		repaired:   d("repaired_records_total", "Records lost to a damaged log and pulled back from a peer since the start."),
		tombstones: d("view_tombstones", "Entries of the view that serve no value: tombstones of deletes and expired values (collected after --tombstone-grace)."),
		collected:  d("tombstones_collected_total", "Tombstones collected since the store opened (--tombstone-grace)."),
		info:       prometheus.NewDesc("cachecast_node_info", "The node's identity (value 1).", []string{"node", "origin", "version", "flush"}, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.segments, c.mapped, c.logBytes, c.writePos, c.flushedPos, c.oldest, c.records, c.keys, c.lastFlush, c.info, c.mismatches, c.lost, c.damaged, c.repaired, c.tombstones, c.collected} {
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
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1,
		c.node, wire.FormatOrigin(s.Origin), Version, s.Flush.String())
}

// clusterCollector reads the cluster's figures at scrape time.
type clusterCollector struct {
	c                                        *cluster
	members, queue, lag, rejected, badFrames *prometheus.Desc
	pulls, dropped, stalls                   *prometheus.Desc
	natsDisconnects, natsErrors, sent        *prometheus.Desc
	clockAhead, clockBehind                  *prometheus.Desc
	clockHeld, clockHeldTotal, clockRefused  *prometheus.Desc
	vectorEntries, dataBytes, dataConns      *prometheus.Desc
	exchanges, retired                       *prometheus.Desc
	reconnects                               *prometheus.Desc
}

func newClusterCollector(c *cluster) *clusterCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("cachecast_cluster_"+name, help, labels, nil)
	}
	return &clusterCollector{
		c:               c,
		members:         d("members", "Members as this node sees them, by state.", "state"),
		queue:           d("fanout_queue_records", "This node's own records a peer does not hold yet, by peer.", "peer"),
		lag:             d("peer_lag_records", "Records this node holds and a peer does not, summed over origins, by peer.", "peer"),
		rejected:        d("rejected_peers_total", "Data connections refused at the handshake (wrong or missing cluster key)."),
		badFrames:       d("bad_frames_total", "Data connections closed on a malformed frame or record."),
		stalls:          d("peer_stalls_total", "Data connections closed because the peer stopped reading or went silent (a stopped process, a full receive window)."),
		pulls:           d("repair_pulls_total", "Anti-entropy pull requests sent to peers."),
		dropped:         d("dropped_events_total", "Membership events dropped on a full buffer (the peer list is refreshed every second anyway)."),
		natsDisconnects: d("nats_disconnects_total", "Disconnections from NATS (--transport=nats); what was missed is repaired from peers."),
		natsErrors:      d("nats_errors_total", "NATS errors such as a slow consumer (--transport=nats); what was missed is repaired from peers."),
		sent:            d("own_bytes_sent_total", "Bytes of this node's own records sent: pushed to peers and published to NATS."),
		clockAhead:      d("peer_clock_ahead", "1 while a peer's records persistently arrive stamped beyond --max-clock-offset ahead of this node's clock, by peer.", "peer"),
		clockBehind:     d("clock_behind", "1 while most peers are ahead of this node's clock (peer_clock_ahead): this node's clock is most likely behind."),
		clockHeld:       d("clock_held_records", "Peers' records held until this node's clock catches up with their stamps (bound: 4096)."),
		clockHeldTotal:  d("clock_held_records_total", "Peers' records held for a stamp beyond --max-clock-offset ahead of this node's clock."),
		vectorEntries:   d("vector_entries_total", "Version vector entries (origin, seq) in acks, anti-entropy vectors and retired lists, by direction (sent, received).", "direction"),
		dataBytes:       d("data_bytes_total", "Bytes of the data port's handshakes and frames, records included, by direction (sent, received).", "direction"),
		dataConns:       d("data_connections", "Data-port connections open now, by direction (outbound: dialed by this node, inbound: accepted).", "direction"),
		exchanges:       d("anti_entropy_exchanges_total", "Anti-entropy exchanges of version vectors this node started (--anti-entropy-fanout a second)."),
		retired:         d("retired_origins", "Origins left out of the vectors this node sends, absent for --retire-origins-after."),
		reconnects:      d("gossip_reconnects_total", "Gossip's tries to join a failed member again, or its seeds when no other member is alive, by result (merged: the try brought a member back; failed).", "result"),
		clockRefused:    d("clock_refused_records_total", "Offers of peers' records refused for a stamp beyond 10 times --max-clock-offset ahead (or with the held records at their bound); anti-entropy offers them again."),
	}
}

func (cc *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cc.members, cc.queue, cc.lag, cc.rejected, cc.badFrames, cc.stalls, cc.pulls, cc.dropped, cc.natsDisconnects, cc.natsErrors, cc.sent,
		cc.clockAhead, cc.clockBehind, cc.clockHeld, cc.clockHeldTotal, cc.clockRefused,
		cc.vectorEntries, cc.dataBytes, cc.dataConns, cc.exchanges, cc.retired, cc.reconnects} {
		ch <- d
	}
}

func (cc *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	byState := map[string]float64{"alive": 0, "suspect": 0, "dead": 0, "left": 0}
	for _, m := range cc.c.g.Members() {
		byState[m.State.String()]++
	}
	for state, n := range byState {
		ch <- prometheus.MustNewConstMetric(cc.members, prometheus.GaugeValue, n, state)
	}
	mine := cc.c.b.LiveVector()
	for _, p := range cc.c.b.Peers() {
		ch <- prometheus.MustNewConstMetric(cc.queue, prometheus.GaugeValue, float64(p.Queue), p.Peer.Name)
		var lag uint64
		for o, m := range mine {
			if h := p.Holds[o]; h < m {
				lag += m - h
			}
		}
		ch <- prometheus.MustNewConstMetric(cc.lag, prometheus.GaugeValue, float64(lag), p.Peer.Name)
	}
	ch <- prometheus.MustNewConstMetric(cc.rejected, prometheus.CounterValue, float64(cc.c.b.Rejected()))
	ch <- prometheus.MustNewConstMetric(cc.badFrames, prometheus.CounterValue, float64(cc.c.b.BadFrames()))
	ch <- prometheus.MustNewConstMetric(cc.stalls, prometheus.CounterValue, float64(cc.c.b.Stalls()))
	ch <- prometheus.MustNewConstMetric(cc.pulls, prometheus.CounterValue, float64(cc.c.b.Pulls()))
	ch <- prometheus.MustNewConstMetric(cc.dropped, prometheus.CounterValue, float64(cc.c.g.DroppedEvents()))
	ch <- prometheus.MustNewConstMetric(cc.natsDisconnects, prometheus.CounterValue, float64(cc.c.b.NATSDisconnects()))
	ch <- prometheus.MustNewConstMetric(cc.natsErrors, prometheus.CounterValue, float64(cc.c.b.NATSErrors()))
	ch <- prometheus.MustNewConstMetric(cc.sent, prometheus.CounterValue, float64(cc.c.b.BytesSent()))
	clocks := cc.c.st.OriginClocks()
	for _, p := range cc.c.b.Peers() {
		ch <- prometheus.MustNewConstMetric(cc.clockAhead, prometheus.GaugeValue, boolFloat(clocks[p.Peer.ID].Flagged), p.Peer.Name)
	}
	ch <- prometheus.MustNewConstMetric(cc.clockBehind, prometheus.GaugeValue, boolFloat(cc.c.clockBehind.Load()))
	cs := cc.c.st.ClockStats()
	ch <- prometheus.MustNewConstMetric(cc.clockHeld, prometheus.GaugeValue, float64(cs.HeldNow))
	ch <- prometheus.MustNewConstMetric(cc.clockHeldTotal, prometheus.CounterValue, float64(cs.HeldTotal))
	ch <- prometheus.MustNewConstMetric(cc.clockRefused, prometheus.CounterValue, float64(cs.Refused))
	bs := cc.c.b.Stats()
	ch <- prometheus.MustNewConstMetric(cc.vectorEntries, prometheus.CounterValue, float64(bs.VectorEntriesSent), "sent")
	ch <- prometheus.MustNewConstMetric(cc.vectorEntries, prometheus.CounterValue, float64(bs.VectorEntriesReceived), "received")
	ch <- prometheus.MustNewConstMetric(cc.dataBytes, prometheus.CounterValue, float64(bs.BytesSent), "sent")
	ch <- prometheus.MustNewConstMetric(cc.dataBytes, prometheus.CounterValue, float64(bs.BytesReceived), "received")
	ch <- prometheus.MustNewConstMetric(cc.dataConns, prometheus.GaugeValue, float64(bs.OpenOutbound), "outbound")
	ch <- prometheus.MustNewConstMetric(cc.dataConns, prometheus.GaugeValue, float64(bs.OpenInbound), "inbound")
	ch <- prometheus.MustNewConstMetric(cc.exchanges, prometheus.CounterValue, float64(bs.Exchanges))
	ch <- prometheus.MustNewConstMetric(cc.retired, prometheus.GaugeValue, float64(bs.Retired))
	tries, merged := cc.c.g.Reconnects()
	ch <- prometheus.MustNewConstMetric(cc.reconnects, prometheus.CounterValue, float64(merged), "merged")
	ch <- prometheus.MustNewConstMetric(cc.reconnects, prometheus.CounterValue, float64(tries-merged), "failed")
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

// boolFloat is a gauge's 1 for true, 0 for false.
func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
