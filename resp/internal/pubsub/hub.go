// Package pubsub is what the Redis door sends a connection without being
// asked: pub/sub messages (SUBSCRIBE, PSUBSCRIBE, PUBLISH, PUBSUB) and
// keyspace events, client-side caching's invalidations (CLIENT TRACKING,
// CACHING, TRACKINGINFO, GETREDIR), and MONITOR's stream. A Hub holds the
// tables (which connection subscribed to which channel, which may have
// cached which key) and turns the node's changes, from the server's one
// follower, into pushes at the end of each of its rounds. A connection's
// own part is a Peer, which the server's connection holds beside its
// session.Session and reaches the Hub through; the server's connection is
// a Client, which the Hub pushes to.
package pubsub

import (
	"net"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// Change is one record as Follow reports it, or a change of the view that
// no record brought (Event).
type Change struct {
	Topic, Key []byte // Key is empty for a stream message
	Value      []byte
	Delete     bool
	Origin     uint64
	Seq        uint64
	// Scheduled: the record takes effect at its instant (a scheduled
	// value or delete, a cancel), when an Event "effective" tells it.
	Scheduled bool
	// Event is "expired" (the key's value expired) or "effective" (a
	// scheduled record took effect: Value and Delete say what the key
	// holds now) for a change no record brought; "" for a record.
	Event string
	// ExpiryChange: the record changed the expiry of a version of the
	// key (EXPIRE, PERSIST; record.KindExpiry), Persist that it removed
	// it. Value is that version's, not a new one.
	ExpiryChange, Persist bool
	// Counter: the record is a counter increment (INCR and its kin;
	// record.KindCounter): Value is the increment, not the key's value.
	Counter bool
	// ExpiresAt: the record's value expires then, Unix ms (0: never).
	ExpiresAt uint64
}

// Client is the server's connection as the pushes see it.
type Client interface {
	session.Host
	// ID is its CLIENT ID.
	ID() int64
	// Push queues an out-of-band frame, which the connection writes
	// between two answers, or closes it when its client does not read
	// (--redis-push-buffer). Safe from any goroutine.
	Push(frame []byte)
	// ProtoNow is its protocol, read from any goroutine.
	ProtoNow() int
	// Closed says it is closed or closing.
	Closed() bool
	// Close closes it; safe from any goroutine.
	Close()
	// Socket is its socket (for its client's hang-up), nil when none.
	Socket() net.Conn
	// MonitorAddr is its address as MONITOR shows it.
	MonitorAddr() string
	// Pushes is its part in the pushes.
	Pushes() *Peer
}

// Peer is a connection's part in the pushes: its subscriptions, its
// tracking mode, whether it receives without asking. The connection's
// own goroutine (or the event loop) changes it, under the connection's
// lock, except for the atomic flags.
type Peer struct {
	hub  *Hub
	c    Client
	sess *session.Session
	// The channels and patterns it subscribed to (the tables that route
	// messages are the Hub's).
	channels map[string]struct{}
	patterns map[string]struct{}
	// Tracking (CLIENT TRACKING); the Hub's tracker holds the tables the
	// follower reads.
	trk     trackState
	caching int8 // CLIENT CACHING: 1 yes, -1 no, until a command other than CLIENT
	// pushed: it subscribed, turned tracking on or monitors (it receives
	// without sending commands), set once.
	pushed atomic.Bool
	// hupWatched: its socket is in the subscribers' hang-up set
	// (hangup.go), set once; hungUp: that set said its client closed.
	hupWatched, hungUp atomic.Bool
}

// peerOf is the Peer of the connection whose session s is.
func peerOf(s *session.Session) *Peer { return s.Host().(Client).Pushes() }

// Init makes p the part of c, whose session is s, in hub.
func (p *Peer) Init(hub *Hub, c Client, s *session.Session) {
	p.hub, p.c, p.sess = hub, c, s
}

// Pushed says the connection subscribed, turned tracking on or monitors:
// it receives without sending commands.
func (p *Peer) Pushed() bool { return p.pushed.Load() }

// Subscribed reports whether it has a subscription (RESP2 then accepts
// only the pub/sub commands).
func (p *Peer) Subscribed() bool { return len(p.channels)+len(p.patterns) > 0 }

// EndCommand ends CLIENT CACHING's hold, which lasts until a command
// other than CLIENT ends outside MULTI.
func (p *Peer) EndCommand() { p.caching = 0 }

// Tracking is its CLIENT TRACKING mode as CLIENT LIST shows it.
func (p *Peer) Tracking() (on, bcast bool, redirect int64) {
	return p.trk.on, p.trk.bcast, p.trk.redirect
}

// Reset ends its subscriptions, its tracking and its MONITOR (RESET).
func (p *Peer) Reset() {
	p.hub.monitors.drop(p)
	p.hub.subs.dropConn(p)
	p.channels, p.patterns = nil, nil
	p.hub.track.off(p)
	p.trk, p.sess.Tracking = trackState{}, false
	p.caching = 0
}

// Drop forgets a closed connection.
func (p *Peer) Drop() {
	p.hub.subs.dropConn(p)
	p.hub.track.dropConn(p.hub, p)
	p.hub.monitors.drop(p)
}

// Config configures a Hub.
type Config struct {
	// Env is the server's shared part: the default topic, the clock, the
	// node's view (a counter's value now).
	Env *session.Env
	// Notify is the initial notify-keyspace-events.
	Notify string
	// TrackingMaxKeys bounds the keys one tracking client is remembered
	// to have cached.
	TrackingMaxKeys int
	// Follow starts the server's follower of the node's changes, if it
	// has not started; a tracking client or a subscriber calls it before
	// it registers.
	Follow func()
	// ByID finds a connection by its CLIENT ID (nil: none).
	ByID   func(id int64) Client
	Logger *zap.Logger
}

// Counters are the pushes' counters.
type Counters struct {
	// Invalidations counts the keys sent in invalidation messages.
	Invalidations atomic.Int64
	// TrackingEvicted counts the keys forgotten (and invalidated) for
	// tracking clients at TrackingMaxKeys.
	TrackingEvicted atomic.Int64
	// SlowDisconnects counts the tracking clients disconnected because
	// their redirect target closed.
	SlowDisconnects atomic.Int64
}

// Hub holds the pushes' tables.
type Hub struct {
	cfg      Config
	subs     subscriptions
	track    tracker
	monitors monitors
	notify   atomic.Uint32 // keyspace notification flags
	// Counters are read by the server's INFO and Stats.
	Counters Counters
}

// Init makes h ready, or says why the initial notify-keyspace-events is
// not one.
func (h *Hub) Init(cfg Config) error {
	flags, err := parseNotifyFlags(cfg.Notify)
	if err != nil {
		return err
	}
	h.cfg = cfg
	h.notify.Store(flags)
	h.subs.init()
	h.track.init()
	return nil
}

// Close closes the hang-up set (the server's Close).
func (h *Hub) Close() { h.subs.closeHangups() }

// Counts is p's channels and patterns (CLIENT LIST).
func (h *Hub) Counts(p *Peer) (channels, patterns int) { return h.subs.counts(p) }

// Monitors says whether p is a monitor (CLIENT LIST).
func (h *Hub) Monitors(p *Peer) bool { return h.monitors.has(p) }

// Monitoring says whether any connection monitors: then each command is
// fed (Feed). Read on every command, without a lock.
func (h *Hub) Monitoring() bool { return h.monitors.n.Load() > 0 }

// Feed sends the command a, which c runs, to every monitor (monitors.feed).
func (h *Hub) Feed(c Client, cmd *session.Command, a [][]byte) { h.monitors.feed(c, cmd, a) }

// TrackingClients is how many connections have CLIENT TRACKING on.
func (h *Hub) TrackingClients() int64 { return h.track.active.Load() }

// TrackedKeys lists the keys the tracking clients are remembered to have
// cached (each client at most TrackingMaxKeys), a key once a client.
func (h *Hub) TrackedKeys() []string {
	h.track.mu.Lock()
	defer h.track.mu.Unlock()
	var out []string
	for _, e := range h.track.clients {
		for k := range e.names {
			out = append(out, k)
		}
	}
	return out
}

// Subscriptions is the number of channel and pattern subscriptions.
func (h *Hub) Subscriptions() int64 { return h.subs.count.Load() }

// Channels and Patterns are how many channels and patterns have a
// subscriber, as INFO's pubsub_channels and pubsub_patterns.
func (h *Hub) Channels() int { return h.subs.channelCount() }

// Patterns: see Channels.
func (h *Hub) Patterns() int { return h.subs.patternCount() }

// NotifyFlags is notify-keyspace-events as CONFIG GET shows it.
func (h *Hub) NotifyFlags() string { return formatNotifyFlags(h.notify.Load()) }

// SetNotify sets notify-keyspace-events (CONFIG SET), or says why s is
// not one.
func (h *Hub) SetNotify(s string) error {
	flags, err := parseNotifyFlags(s)
	if err != nil {
		return err
	}
	h.notify.Store(flags)
	return nil
}

// BeginWrite marks a write of p in flight, for NOLOOP: true when
// EndWrite must follow.
func (h *Hub) BeginWrite(p *Peer) bool { return h.track.beginWrite(p) }

// EndWrite remembers the write of p that began with BeginWrite (ok: it
// was stored, with seqs first to last of origin) and sends the held
// invalidations that were not its own.
func (h *Hub) EndWrite(p *Peer, ok bool, origin, first, last uint64) {
	h.track.endWrite(h, p, ok, origin, first, last)
}

// now is the node's clock.
func (h *Hub) now() time.Time { return h.cfg.Env.Now() }
