package resp

import (
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// stats are the server's counters.
type stats struct {
	connections     atomic.Int64
	accepted        atomic.Int64
	commands        atomic.Int64
	unknown         atomic.Int64
	protocolErrors  atomic.Int64
	invalidations   atomic.Int64
	slowDisconnects atomic.Int64
	refused         atomic.Int64
	idleClosed      atomic.Int64
	trackingEvicted atomic.Int64
	byCommand       []atomic.Int64
}

func (s *stats) init() { s.byCommand = make([]atomic.Int64, len(commandList)) }

// Stats is a snapshot of the server's counters.
type Stats struct {
	// Connections is the number of open connections.
	Connections int64
	// Accepted counts the connections ever accepted.
	Accepted int64
	// Commands counts the commands run (unknown ones included).
	Commands int64
	// ByCommand counts the commands run, by lower-case name.
	ByCommand map[string]int64
	// Unknown counts unknown commands.
	Unknown int64
	// ProtocolErrors counts connections closed for a frame that could
	// not be parsed or was too large.
	ProtocolErrors int64
	// TrackingClients is the number of connections with CLIENT TRACKING on.
	TrackingClients int64
	// Invalidations counts the keys sent in invalidation messages.
	Invalidations int64
	// SlowDisconnects counts the clients disconnected because their
	// pushes went past --redis-push-buffer (or their redirect target
	// closed).
	SlowDisconnects int64
	// Subscriptions is the number of channel and pattern subscriptions.
	Subscriptions int64
	// Refused counts the connections refused at --max-connections or a
	// peer's share of it.
	Refused int64
	// IdleClosed counts the connections closed after --redis-idle-timeout.
	IdleClosed int64
	// TrackingEvicted counts the keys forgotten (and invalidated) for
	// tracking clients at --redis-tracking-max-keys.
	TrackingEvicted int64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Connections:     s.stats.connections.Load(),
		Accepted:        s.stats.accepted.Load(),
		Commands:        s.stats.commands.Load(),
		Unknown:         s.stats.unknown.Load(),
		ProtocolErrors:  s.stats.protocolErrors.Load(),
		TrackingClients: s.track.active.Load(),
		Invalidations:   s.stats.invalidations.Load(),
		SlowDisconnects: s.stats.slowDisconnects.Load(),
		Subscriptions:   s.subs.count.Load(),
		Refused:         s.stats.refused.Load(),
		IdleClosed:      s.stats.idleClosed.Load(),
		TrackingEvicted: s.stats.trackingEvicted.Load(),
		ByCommand:       make(map[string]int64, len(commandList)),
	}
	for i, cmd := range commandList {
		st.ByCommand[cmd.name] = s.stats.byCommand[i].Load()
	}
	return st
}

// CommandNames lists the commands the server knows, in order.
func CommandNames() []string {
	out := make([]string, len(commandList))
	for i, cmd := range commandList {
		out[i] = cmd.name
	}
	return out
}

var infoSections = []string{"server", "clients", "persistence", "stats", "replication", "keyspace", "cachecast"}

func cmdInfo(c *conn, a [][]byte) {
	want := map[string]bool{}
	for _, arg := range a[1:] {
		w := strings.ToLower(string(arg))
		if w == "all" || w == "default" || w == "everything" {
			for _, s := range infoSections {
				want[s] = true
			}
			continue
		}
		want[w] = true
	}
	if len(want) == 0 {
		for _, s := range infoSections {
			want[s] = true
		}
	}
	st := c.s.node.Status()
	stats := c.s.Stats()
	var b strings.Builder
	line := func(k string, v any) {
		b.WriteString(k)
		b.WriteByte(':')
		switch x := v.(type) {
		case string:
			b.WriteString(x)
		case int:
			b.WriteString(strconv.Itoa(x))
		case int64:
			b.WriteString(strconv.FormatInt(x, 10))
		case uint64:
			b.WriteString(strconv.FormatUint(x, 10))
		case float64:
			b.WriteString(strconv.FormatFloat(x, 'f', 3, 64))
		}
		b.WriteString("\r\n")
	}
	for _, sec := range infoSections {
		if !want[sec] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(sec[:1]) + sec[1:] + "\r\n")
		switch sec {
		case "server":
			up := time.Since(c.s.started)
			line("redis_version", redisVersion)
			line("redis_mode", "standalone")
			line("cachecast_version", st.Version)
			line("os", runtime.GOOS)
			line("arch_bits", strconv.Itoa(strconv.IntSize))
			line("process_id", pid)
			line("tcp_port", 0)
			line("uptime_in_seconds", int64(up.Seconds()))
			line("uptime_in_days", int64(up.Hours()/24))
		case "clients":
			line("connected_clients", stats.Connections)
			line("blocked_clients", 0)
			line("tracking_clients", stats.TrackingClients)
			line("pubsub_subscriptions", stats.Subscriptions)
		case "persistence":
			r := c.s.node.Refusal()
			if r.CatchingUp {
				line("loading", 1)
				line("cachecast_catch_up_lag_records", r.Lag)
			} else {
				line("loading", 0)
			}
			line("flush", st.Flush)
		case "stats":
			line("total_connections_received", stats.Accepted)
			line("total_commands_processed", stats.Commands)
			line("unknown_commands", stats.Unknown)
			line("protocol_errors", stats.ProtocolErrors)
			line("tracking_invalidations_sent", stats.Invalidations)
			line("slow_clients_disconnected", stats.SlowDisconnects)
		case "replication":
			line("role", "master")
			n := 0
			if st.Replica != "" {
				n = 1
			}
			line("connected_slaves", n)
			line("cachecast_replication", st.Replication)
			line("cachecast_replica", st.Replica)
		case "keyspace":
			line("db0", "keys="+strconv.Itoa(c.s.liveKeys())+",expires=0,avg_ttl=0")
		case "cachecast":
			line("node", st.Node)
			line("origin", st.Origin)
			line("default_topic", c.s.cfg.DefaultTopic)
			line("members", len(st.Members))
			for i, m := range st.Members {
				line("member"+strconv.Itoa(i), "name="+m.Name+",state="+m.State+",self="+strconv.FormatBool(m.Self)+
					",lag_records="+strconv.FormatUint(m.LagRecords, 10)+",lag_seconds="+strconv.FormatFloat(m.LagSeconds, 'f', 3, 64))
			}
		}
	}
	c.verbatim(b.String())
}
