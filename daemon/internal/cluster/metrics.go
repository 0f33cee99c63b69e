package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// clusterCollector reads the cluster's figures at scrape time.
type clusterCollector struct {
	c                                        *Cluster
	members, queue, lag, rejected, badFrames *prometheus.Desc
	pulls, dropped, stalls                   *prometheus.Desc
	natsDisconnects, natsErrors, sent        *prometheus.Desc
	clockAhead, clockBehind                  *prometheus.Desc
	clockHeld, clockHeldTotal, clockRefused  *prometheus.Desc
	vectorEntries, dataBytes, dataConns      *prometheus.Desc
	exchanges, retired                       *prometheus.Desc
	reconnects                               *prometheus.Desc
}

// Collector is the cluster's metrics (cachecast_cluster_*), read at
// scrape time.
func (c *Cluster) Collector() prometheus.Collector { return newClusterCollector(c) }

func newClusterCollector(c *Cluster) *clusterCollector {
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
	ch <- prometheus.MustNewConstMetric(cc.clockBehind, prometheus.GaugeValue, boolFloat(cc.c.ClockBehind()))
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

// boolFloat is a gauge's 1 for true, 0 for false.
func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
