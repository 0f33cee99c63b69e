// Package admin is the Redis door's commands about the server itself,
// which an operator or a client library asks: INFO, CONFIG (GET, SET
// notify-keyspace-events), COMMAND (the table: COUNT, DOCS, INFO, LIST),
// DEBUG (SLEEP, PROTOCOL), DBSIZE and TIME. Each is a handler over a
// session.Session whose host (the server's connection) is a Server: what
// these commands ask of the server, its counters, its table and its
// notify-keyspace-events. INFO's fields are Redis's, in its sections and
// order, with cachecast's own in a section of their own.
package admin

import (
	"sync/atomic"
	"time"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/resp/internal/session"
)

// Server is the server's connection as these commands see it: its
// session's host, and what it tells of the server.
type Server interface {
	session.Host
	// Status is the node's state (the server's Node.Status).
	Status() Status
	// Stats is a snapshot of the server's counters.
	Stats() Stats
	// Info is the rest of what INFO and CONFIG GET show.
	Info() Info
	// Table is the command table in name order; Lookup finds one of its
	// commands by name, in any case (nil: none).
	Table() []*session.Command
	Lookup(name []byte) *session.Command
	// NotifyFlags is notify-keyspace-events; SetNotify sets it, or says
	// why flags is not one.
	NotifyFlags() string
	SetNotify(flags string) error
	// AuthorizeWrite answers the error when the connection's peer may
	// not write (false): CONFIG SET changes what every client is sent.
	AuthorizeWrite() bool
	// Sleep holds the connection for d, or until the server closes
	// (DEBUG SLEEP); its idleness and its answer's deadline start after.
	Sleep(d time.Duration)
}

// Info is what the server tells INFO besides its Status and Stats.
type Info struct {
	Started        time.Time
	RunID          string // 40 hex digits, new at each start
	TCPPort        int    // of the TCP listener; 0 when none
	MaxConnections int
	MaxBulk        int // proto-max-bulk-len
	// State is the node's (Node.State): INFO's loading while it
	// catches up.
	State core.State
	// Channels and Patterns are how many channels and patterns have a
	// subscriber.
	Channels, Patterns int
	// MemPeak is the highest used_memory INFO has seen, which INFO
	// raises.
	MemPeak *atomic.Uint64
}

// serverOf is the Server of the connection whose session c is.
func serverOf(c *session.Session) Server { return c.Host().(Server) }

// Commands is the server commands' part of the command table.
func Commands() []*session.Command {
	ro := []string{"readonly", "fast"}
	cn := []string{"fast", "loading", "stale"}
	return []*session.Command{
		{Name: "info", Arity: -1, Flags: cn, Group: "server", Summary: "Sections server, clients, persistence, stats, replication, keyspace, cachecast.", Fn: cmdInfo, InMulti: true},
		{Name: "command", Arity: -1, Flags: cn, Group: "server", Summary: "The command table: COMMAND, COUNT, DOCS, INFO, LIST.", Fn: cmdCommand, Subcommands: commandArity},
		{Name: "config", Arity: -2, Flags: cn, Group: "server", Summary: "GET of a few parameters; SET notify-keyspace-events.", Fn: cmdConfig, Subcommands: configArity},
		{Name: "dbsize", Arity: 1, Flags: ro, Group: "server", Summary: "The number of live keys.", Fn: cmdDBSize, InMulti: true},
		{Name: "time", Arity: 1, Flags: ro, Group: "server", Summary: "The server's time.", Fn: cmdTime, InMulti: true}, {Name: "debug", Arity: -2, Flags: []string{"admin", "noscript", "loading", "stale"}, Group: "server",
			Summary: "DEBUG SLEEP (this connection only, at most 10 s), DEBUG PROTOCOL, HELP: for the admin role.", Fn: cmdDebug, InMulti: true},
	}
}
