package resp

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/cachecast/cachecast/resp/internal/admin"
	"github.com/cachecast/cachecast/resp/internal/session"
)

// stats are the server's counters.
type stats struct {
	connections     atomic.Int64
	accepted        atomic.Int64
	commands        atomic.Int64
	unknown         atomic.Int64
	protocolErrors  atomic.Int64
	slowDisconnects atomic.Int64
	refused         atomic.Int64
	idleClosed      atomic.Int64
	byCommand       []atomic.Int64
}

func (s *stats) init() { s.byCommand = make([]atomic.Int64, len(commandList)) }

// Stats is a snapshot of the server's counters.
type Stats = admin.Stats

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Connections:     s.stats.connections.Load(),
		Accepted:        s.stats.accepted.Load(),
		Commands:        s.stats.commands.Load(),
		Unknown:         s.stats.unknown.Load(),
		ProtocolErrors:  s.stats.protocolErrors.Load(),
		TrackingClients: s.hub.TrackingClients(),
		Invalidations:   s.hub.Counters.Invalidations.Load(),
		SlowDisconnects: s.stats.slowDisconnects.Load() + s.hub.Counters.SlowDisconnects.Load(),
		Subscriptions:   s.hub.Subscriptions(),
		Refused:         s.stats.refused.Load(),
		IdleClosed:      s.stats.idleClosed.Load(),
		TrackingEvicted: s.hub.Counters.TrackingEvicted.Load(),
		ByCommand:       make(map[string]int64, len(commandList)),
	}
	for i, cmd := range commandList {
		st.ByCommand[cmd.Name] = s.stats.byCommand[i].Load()
	}
	return st
}

// CommandNames lists the commands the server knows, in order.
func CommandNames() []string {
	out := make([]string, len(commandList))
	for i, cmd := range commandList {
		out[i] = cmd.Name
	}
	return out
}

// tcpPort is the port of the TCP listener, 0 when none, as INFO's tcp_port.
func (s *Server) tcpPort() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ln := range s.lns {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			return a.Port
		}
	}
	return 0
}

// The connection as the server commands see it (admin.Server).

// Status is the node's state.
func (c *conn) Status() Status { return c.s.node.Status() }

// Stats is a snapshot of the server's counters.
func (c *conn) Stats() Stats { return c.s.Stats() }

// Info is the rest of what INFO and CONFIG GET show.
func (c *conn) Info() admin.Info {
	s := c.s
	return admin.Info{Started: s.started, RunID: s.runID, TCPPort: s.tcpPort(), MaxConnections: s.cfg.MaxConnections,
		MaxBulk: s.lim.MaxBulk, State: s.node.State(), Channels: s.hub.Channels(), Patterns: s.hub.Patterns(), MemPeak: &s.memPeak}
}

// Table is the command table in name order.
func (c *conn) Table() []*session.Command { return commandList }

// Lookup finds a command by name, in any case.
func (c *conn) Lookup(name []byte) *session.Command { return lookup(name) }

// NotifyFlags is notify-keyspace-events.
func (c *conn) NotifyFlags() string { return c.s.hub.NotifyFlags() }

// SetNotify sets notify-keyspace-events.
func (c *conn) SetNotify(flags string) error { return c.s.hub.SetNotify(flags) }

// AuthorizeWrite answers the error when the peer may not write (false).
func (c *conn) AuthorizeWrite() bool {
	if err := c.s.node.Authorize(c.nc); err != nil {
		c.WriteError(err)
		return false
	}
	return true
}

// Sleep holds the connection for d, or until the server closes (DEBUG
// SLEEP, with mu held: its next commands and its pushes wait); its
// answer's deadline starts after, as after WAIT.
func (c *conn) Sleep(d time.Duration) {
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-c.s.ctx.Done():
		t.Stop()
	}
	c.readAt = time.Now()
}
