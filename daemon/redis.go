package daemon

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/daemon/internal/access"
	respsrv "github.com/cachecast/cachecast/resp"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// The Redis front door (package resp) reaches the node through respNode,
// the HTTP API's adapter (node.go): the same view for reads, and
// Daemon.publish, with its checks, limits and statuses, for writes.

// startRedis binds the Redis listeners and makes the server (New calls
// it); Run serves them.
func (d *Daemon) startRedis() error {
	path := d.cfg.RedisSocketPath()
	if path == "" && d.cfg.RedisAddr == "" {
		return nil
	}
	srv, err := respsrv.New(respsrv.Config{
		Node:                  d.node,
		DefaultTopic:          d.cfg.RedisDefaultTopic,
		MaxValueSize:          int(d.cfg.MaxValueSize),
		MaxFrameSize:          int(d.cfg.MaxBodySize),
		PushBuffer:            int(d.cfg.RedisPushBuffer),
		WriteTimeout:          d.cfg.WriteTimeout,
		IdleTimeout:           d.cfg.RedisIdleTimeout,
		MaxConnections:        d.cfg.MaxConnections,
		MaxConnectionsPerPeer: d.cfg.MaxConnectionsPerUID,
		TrackingMaxKeys:       d.cfg.RedisTrackingMaxKeys,
		// The pool lives inside --max-connections: a larger pool would
		// only be cut by it, so it is capped rather than refused (the
		// default of 64 stands beside a small --max-connections).
		MaxUnauthenticated:   min(d.cfg.RedisMaxUnauthenticated, d.cfg.MaxConnections),
		AuthTimeout:          d.cfg.RedisAuthTimeout,
		NotifyKeyspaceEvents: d.cfg.RedisNotifyKeyspaceEvents,
		AllowFlush:           d.cfg.RedisAllowFlush,
		Clock:                d.cfg.Hooks().Clock,
		Logger:               d.log.Named("redis"),
	})
	if err != nil {
		return fmt.Errorf("--redis-notify-keyspace-events: %w", err)
	}
	d.redis = srv
	if path != "" {
		ln, err := access.ListenUnix(path, d.cfg.SocketMode, nil, "--redis-socket")
		if err != nil {
			_ = srv.Close()
			return err
		}
		d.redisLns = append(d.redisLns, ln)
	}
	if d.cfg.RedisAddr != "" {
		ln, err := d.listenRedisTCP()
		if err != nil {
			d.closeRedis()
			return err
		}
		d.redisLns = append(d.redisLns, ln)
	}
	d.m.reg.MustRegister(redisCollector{srv})
	return nil
}

// serveRedis runs the Redis listeners under d.wg.
func (d *Daemon) serveRedis(errc chan<- error) {
	for _, ln := range d.redisLns {
		d.wg.Go(func() {
			if err := d.redis.Serve(ln); err != nil {
				errc <- fmt.Errorf("redis on %s: %w", ln.Addr(), err)
			}
		})
	}
}

// closeRedis closes the listeners (removing the socket file) and every
// Redis connection; it waits for their goroutines.
func (d *Daemon) closeRedis() {
	if d.redis == nil {
		return
	}
	for _, ln := range d.redisLns {
		_ = ln.Close()
	}
	_ = d.redis.Close()
}

// RedisSocketPath is the path of the Redis socket, "" when off.
func (d *Daemon) RedisSocketPath() string {
	if d.redis == nil {
		return ""
	}
	return d.cfg.RedisSocketPath()
}

// RedisAddr is the TCP address of the Redis listener, "" when off.
func (d *Daemon) RedisAddr() string {
	for _, ln := range d.redisLns {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			return a.String()
		}
	}
	return ""
}

// respNode is the node adapter (node.go) as package resp sees it.
type respNode = node

func (n *respNode) Get(topic, key string) ([]byte, bool) {
	e, ok := n.d.store.Get(topic, key)
	return e.Value, ok
}

func (n *respNode) GetInto(buf []byte, topic, key string) ([]byte, []byte, bool) {
	e, buf, ok := n.d.store.GetInto(buf, topic, key)
	return e.Value, buf, ok
}

func (n *respNode) GetMany(topics, keys []string, entries []view.Entry, found []bool, buf []byte) []byte {
	return n.d.store.GetMany(topics, keys, entries, found, buf)
}

func (n *respNode) WarmReads(topics, keys []string) { n.d.store.WarmReads(topics, keys) }

// callerOfConn is the peer of a Redis connection: a Unix one's
// credentials, a TCP client over TCP; with the user it authenticated as.
func callerOfConn(c net.Conn) access.Caller {
	if cc, ok := c.(interface{ Caller() access.Caller }); ok {
		return cc.Caller()
	}
	return access.Caller{}
}

// Peer is whose share of --max-connections-per-uid a connection counts
// against: a Unix client's uid, a TCP client's user once it
// authenticated, and before that the unauthenticated TCP clients
// together.
func (n *respNode) Peer(c net.Conn) string {
	switch cc := c.(type) {
	case *access.Conn:
		if cc.Caller().Known {
			return cc.Caller().Who()
		}
	case *access.TCPConn:
		if u := cc.User(); u != "" {
			return "user " + u
		}
		return "the unauthenticated TCP clients"
	}
	return ""
}

// HoldMemory counts a large Redis command, or a MULTI's queued commands,
// against --max-body-memory and a share of it (--max-body-memory-per-uid),
// as the HTTP bodies are: a Unix client's uid's share, a TCP client's
// user's, or the one all unauthenticated TCP clients share.
func (n *respNode) HoldMemory(c net.Conn, size int) error {
	if e := n.d.bodies.Hold(holderOf(c), int64(size)); e != nil {
		return e
	}
	return nil
}

// ReleaseMemory gives size bytes of what c holds back to the budget.
func (n *respNode) ReleaseMemory(c net.Conn, size int) {
	n.d.bodies.Release(holderOf(c), int64(size))
}

// holderOf is c as the memory budget counts it; nil for a connection not
// of the daemon's listeners.
func holderOf(c net.Conn) access.Holder {
	if h, ok := c.(access.Holder); ok {
		return h
	}
	return nil
}

func (n *respNode) Authorize(c net.Conn) error {
	if e := n.d.guard.Authorize(callerOfConn(c), access.RolePublish); e != nil {
		return e
	}
	return nil
}

// AuthorizeAdmin checks the admin role (FLUSHDB, FLUSHALL, MONITOR).
func (n *respNode) AuthorizeAdmin(c net.Conn) error {
	if e := n.d.guard.Authorize(callerOfConn(c), access.RoleAdmin); e != nil {
		return e
	}
	return nil
}

// AuthorizeRead checks the read role (every Redis command reads, or
// writes, which needs publish on top): at a connection's first command,
// and again after a reload of the roles.
func (n *respNode) AuthorizeRead(c net.Conn) error {
	if e := n.d.guard.Authorize(callerOfConn(c), access.RoleRead); e != nil {
		return e
	}
	return nil
}

// Publish writes msgs, which the Redis door checked (package command),
// through Daemon.publish, the one write path: the publish role, the
// node's state, the fleet's protocol, the store, the replica's status.
func (n *respNode) Publish(ctx context.Context, c net.Conn, msgs []record.Message) (respsrv.Written, error) {
	// A pipeline's batch of SETs (16 of them at redis-benchmark's -P 16)
	// takes its results on the stack, a longer one (up to 1,024) from
	// resultBufs.
	var stack [16]store.Result
	buf := stack[:]
	if len(msgs) > len(stack) && len(msgs) <= maxPooledResults {
		p := resultBufs.Get().(*[]store.Result)
		defer resultBufs.Put(p)
		buf = *p
	}
	results, status, err := n.d.publish(ctx, msgs, callerOfConn(c), buf)
	if err != nil {
		return respsrv.Written{}, command.StoreError(err)
	}
	w := respsrv.Written{Seq: results[len(results)-1].Seq, Origin: n.d.store.Origin()}
	if status != wire.StatusOK {
		w.Unconfirmed = status
	}
	return w, nil
}

// maxPooledResults is the longest batch whose results come from
// resultBufs: a pipeline's batch of SETs (the Redis door's, redis-cli
// --pipe's) is at most 1,024.
const maxPooledResults = 1024

// resultBufs holds results arrays of maxPooledResults for the batches
// of SETs past 16: allocated a batch, they were 40 of the 867 bytes a
// SET allocated at 1M keys loaded by redis-cli --pipe (BENCHMARKS.md,
// "Memory per key").
var resultBufs = sync.Pool{New: func() any {
	b := make([]store.Result, maxPooledResults)
	return &b
}}

func (n *respNode) WaitReplicas(ctx context.Context, seq uint64, timeout time.Duration) int {
	if n.d.cluster == nil {
		return 0
	}
	return n.d.cluster.WaitReplicas(ctx, seq, timeout)
}

// Follow is the store's one reader of its changes (store.Follow: every
// origin's records and the view's time events), told in the Redis door's
// terms.
func (n *respNode) Follow(ctx context.Context, fn func(respsrv.Change), end func()) <-chan struct{} {
	return n.d.store.Follow(ctx, store.FollowOptions{Records: true, Events: true}, func(f store.Followed) {
		if f.Event != nil {
			fn(respsrv.EventChange(f.Event))
			return
		}
		fn(respsrv.RecordChange(f.Record))
	}, end)
}

// PublishWaits: a write waits for the disk under --flush sync and for the
// replica under --replication=sync.
func (n *respNode) PublishWaits() bool {
	return n.d.cfg.Flush == "sync" || n.d.cfg.Replication == "sync"
}

func (n *respNode) Status() respsrv.Status {
	d := n.d
	s := respsrv.Status{Node: d.cfg.NodeName, Origin: wire.FormatOrigin(d.store.Origin()), Version: Version,
		Flush: d.cfg.Flush, Replication: d.cfg.Replication, Keys: d.store.Stats().Keys}
	if d.cluster == nil {
		s.Members = []respsrv.Member{{Name: d.cfg.NodeName, State: "alive", Self: true}}
		return s
	}
	cs := d.cluster.Status()
	s.Replica = cs.Replica
	for _, m := range cs.Members {
		rm := respsrv.Member{Name: m.Name, State: m.State, Self: m.Self}
		for _, l := range m.Lag {
			rm.LagRecords += l.Records
			rm.LagSeconds = max(rm.LagSeconds, l.Seconds)
		}
		s.Members = append(s.Members, rm)
	}
	return s
}

// redisCollector exports the Redis server's counters.
type redisCollector struct{ s *respsrv.Server }

var (
	redisConnsDesc = prometheus.NewDesc("cachecast_redis_connections", "Open connections to the Redis front door.", nil, nil)
	redisCmdsDesc  = prometheus.NewDesc("cachecast_redis_commands_total", "Redis commands run, by command.", []string{"command"}, nil)
	redisUnknown   = prometheus.NewDesc("cachecast_redis_unknown_commands_total", "Unknown Redis commands refused.", nil, nil)
	redisProtoDesc = prometheus.NewDesc("cachecast_redis_protocol_errors_total", "Redis connections closed for a malformed or oversized frame.", nil, nil)
	redisTrackDesc = prometheus.NewDesc("cachecast_redis_tracking_clients", "Redis connections with CLIENT TRACKING on.", nil, nil)
	redisInvDesc   = prometheus.NewDesc("cachecast_redis_invalidations_total", "Keys sent in client-side-caching invalidations.", nil, nil)
	redisSlowDesc  = prometheus.NewDesc("cachecast_redis_slow_clients_disconnected_total", "Redis clients disconnected because they did not read their invalidations or messages (--redis-push-buffer).", nil, nil)
	redisSubsDesc  = prometheus.NewDesc("cachecast_redis_subscriptions", "Redis channel and pattern subscriptions.", nil, nil)
	redisRefused   = prometheus.NewDesc("cachecast_redis_connections_refused_total", "Redis connections refused at --max-connections or a uid's (a TCP address's) --max-connections-per-uid.", nil, nil)
	redisIdle      = prometheus.NewDesc("cachecast_redis_idle_closed_total", "Redis connections closed after --redis-idle-timeout without a command.", nil, nil)
	redisEvicted   = prometheus.NewDesc("cachecast_redis_tracking_evicted_keys_total", "Tracked keys invalidated and forgotten for clients at --redis-tracking-max-keys.", nil, nil)
)

func (redisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{redisConnsDesc, redisCmdsDesc, redisUnknown, redisProtoDesc, redisTrackDesc, redisInvDesc, redisSlowDesc, redisSubsDesc, redisRefused, redisIdle, redisEvicted} {
		ch <- d
	}
}

func (c redisCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(redisConnsDesc, prometheus.GaugeValue, float64(st.Connections))
	for name, n := range st.ByCommand {
		ch <- prometheus.MustNewConstMetric(redisCmdsDesc, prometheus.CounterValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(redisUnknown, prometheus.CounterValue, float64(st.Unknown))
	ch <- prometheus.MustNewConstMetric(redisProtoDesc, prometheus.CounterValue, float64(st.ProtocolErrors))
	ch <- prometheus.MustNewConstMetric(redisTrackDesc, prometheus.GaugeValue, float64(st.TrackingClients))
	ch <- prometheus.MustNewConstMetric(redisInvDesc, prometheus.CounterValue, float64(st.Invalidations))
	ch <- prometheus.MustNewConstMetric(redisSlowDesc, prometheus.CounterValue, float64(st.SlowDisconnects))
	ch <- prometheus.MustNewConstMetric(redisSubsDesc, prometheus.GaugeValue, float64(st.Subscriptions))
	ch <- prometheus.MustNewConstMetric(redisRefused, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(redisIdle, prometheus.CounterValue, float64(st.IdleClosed))
	ch <- prometheus.MustNewConstMetric(redisEvicted, prometheus.CounterValue, float64(st.TrackingEvicted))
}
