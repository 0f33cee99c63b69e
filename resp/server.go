package resp

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	core "github.com/cachecast/cachecast/command"

	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/resp/internal/admin"
	"github.com/cachecast/cachecast/resp/internal/pubsub"
	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// Node is what the server needs of a cachecast node. The daemon implements
// it with its own write path, checks and limits; the server adds nothing
// of its own to a write.
type Node interface {
	// View is what the commands read: the node's local view (Get,
	// Entry, Counting, GetMany, PendingKey, Keys, Topics).
	session.View
	// WarmReads loads what reads of (topics[i], keys[i]) that follow soon
	// will load, so that their cache misses overlap (a pipeline's run of
	// GETs); it decides nothing.
	WarmReads(topics, keys []string)
	// Authorize says whether the peer of conn may write (nil) or why not.
	// The server asks it once for every command its table flags write,
	// before anything else of the command (as Redis checks its ACL); the
	// node's write path checks again.
	Authorize(conn net.Conn) error
	// AuthorizeRead says whether the peer of conn may read (nil) or why
	// not. The server asks it at a connection's first command and again
	// after RolesChanged.
	AuthorizeRead(conn net.Conn) error
	// Peer names whose share of the connection limits conn counts
	// against ("uid 1000"); "" when the node does not know (then a TCP
	// peer's share is its IP address's, and the others share one).
	Peer(conn net.Conn) string
	// HoldMemory counts n more bytes held for conn against the node's
	// budget for request bodies (the HTTP bodies' too), or says which
	// limit they would pass; ReleaseMemory gives n of them back. Counted
	// are a read buffer past its first 16 KiB (a large command being
	// read) and the commands queued after MULTI.
	HoldMemory(conn net.Conn, n int) error
	ReleaseMemory(conn net.Conn, n int)
	// Publish writes msgs as one all-or-nothing batch through the node's
	// write path, as the peer of conn. The server has checked them
	// (command.Limits: names, sizes, time fields). A *wire.Error is
	// answered in Redis's words for its code (session.ErrorText); an error that
	// has a RedisError method gives its own text.
	Publish(ctx context.Context, conn net.Conn, msgs []record.Message) (Written, error)
	// WaitReplicas waits at most timeout (0: not at all; negative: until
	// ctx ends) until the replica holds this node's records up to seq
	// and returns how many replicas hold them (a node has at most one;
	// seq 0 asks how many replicas are connected).
	WaitReplicas(ctx context.Context, seq uint64, timeout time.Duration) int
	// Follow calls fn, from one goroutine of its own, for every record
	// this node stores after Follow returns (its own and every other
	// node's), once the view has it, until ctx ends, and end after each
	// round of them (the changes there were when it woke); the channel
	// closes when that goroutine has ended. The change's bytes are valid
	// only during fn. The server follows from the first tracking client
	// or subscriber on (the follower costs every write a wake-up), and
	// sends what a round's changes push at its end.
	Follow(ctx context.Context, fn func(Change), end func()) <-chan struct{}
	// Status describes the node for INFO.
	Status() Status
	// PublishWaits says whether Publish may wait for more than the CPU:
	// for the disk (--flush sync) or a replica (--replication=sync). Then
	// a connection's writes run on its own goroutine, not on the event
	// loop. It is called on every write, so it must be cheap.
	PublishWaits() bool
	// State says whether the node serves its view (command.State: the
	// zero State serves it): away, every read and write answers
	// -CLUSTERDOWN and the reason, as a Redis Cluster node cut off from
	// its cluster does; catching up, its reads answer -LOADING, as a
	// Redis loading its dataset does (clients retry it), and INFO says
	// loading:1. It is called on every read and write, so it must be
	// cheap.
	State() core.State
}

// CheckNotifyKeyspaceEvents says whether s is a notify-keyspace-events
// value the server accepts (nil) or not.
func CheckNotifyKeyspaceEvents(s string) error { return pubsub.CheckNotifyKeyspaceEvents(s) }

// Written is what a publish did.
type Written struct {
	// Seq is this node's sequence number of the batch's last message.
	Seq uint64
	// Origin is the node's origin.
	Origin uint64
	// Unconfirmed is the replica status when --replication=sync and the
	// replica did not confirm ("replica_timeout", "replica_unavailable");
	// empty otherwise.
	Unconfirmed string
}

// Change is one record as Follow reports it, or a change of the view that
// no record brought (Event): what the pushes (pub/sub, keyspace events,
// invalidations) are made of.
type Change = pubsub.Change

// RecordChange is record r as Follow reports it: its kind says whether it
// is a delete, a scheduled record, an expiry change or a counter
// increment. Its bytes are r's.
func RecordChange(r record.Record) Change {
	change, counter := r.Kind() == record.KindExpiry, r.Kind() == record.KindCounter
	return Change{Topic: r.Topic(), Key: r.Key(), Value: r.Value(), Delete: r.Kind() == record.KindTombstone,
		Origin: r.Origin(), Seq: r.Seq(), Scheduled: r.EffectiveAt() != 0 && !change && !counter,
		ExpiryChange: change, Persist: change && r.ExpiresAt() == 0, Counter: counter, ExpiresAt: r.ExpiresAt()}
}

// EventChange is a change of the view that no record brought (an
// expiry, a scheduled record taking effect) as Follow reports it.
func EventChange(c *storeview.Change) Change {
	return Change{Topic: []byte(c.Topic), Key: []byte(c.Key), Value: c.Value, Delete: c.Deleted,
		Origin: c.Stamp.Origin, Seq: c.Stamp.Seq, Event: c.Cause}
}

// Status is the node's state as INFO shows it.
type Status = admin.Status

// Member is one member of the cluster as this node sees it.
type Member = admin.Member

// Config configures a Server.
type Config struct {
	Node Node
	// DefaultTopic holds the keys without a ':' (--redis-default-topic).
	DefaultTopic string
	// MaxValueSize bounds one bulk string (--max-value-size).
	MaxValueSize int
	// MaxFrameSize bounds one command (--max-body-size).
	MaxFrameSize int
	// PushBuffer bounds the invalidations and messages waiting to be
	// written to one client (--redis-push-buffer); past it the client is
	// disconnected.
	PushBuffer int
	// WriteTimeout bounds writing to a client (--write-timeout).
	WriteTimeout time.Duration
	// IdleTimeout closes a connection that sent nothing for this long
	// (--redis-idle-timeout); subscribed and tracking connections are
	// exempt. 0: never.
	IdleTimeout time.Duration
	// MaxConnections bounds the open connections over all listeners
	// (--max-connections); MaxConnectionsPerPeer is one peer's share
	// (--max-connections-per-uid; see Node.Peer). Past either a new
	// connection is refused. 0: no bound.
	MaxConnections, MaxConnectionsPerPeer int
	// MaxUnauthenticated bounds the connections that must still
	// authenticate (Authenticator.MustAuthenticate), all peers together;
	// past it a new one closes the oldest (admit.go; the daemon's
	// --redis-max-unauthenticated). Default DefaultMaxUnauthenticated.
	MaxUnauthenticated int
	// AuthTimeout closes a connection that must authenticate and has not
	// this long after it was accepted (--redis-auth-timeout). Default
	// DefaultAuthTimeout.
	AuthTimeout time.Duration
	// TrackingMaxKeys bounds the keys one tracking client is remembered
	// to have cached (--redis-tracking-max-keys); past it the client is
	// sent the invalidation of a tenth of them, which are forgotten.
	TrackingMaxKeys int
	// AllowFlush lets FLUSHDB and FLUSHALL delete every key, fleet-wide,
	// for a caller with the admin role (--redis-allow-flush); without it
	// they are refused.
	AllowFlush bool
	// NotifyKeyspaceEvents is the initial notify-keyspace-events.
	NotifyKeyspaceEvents string
	// Clock, if set, is the node's wall clock (TTL, EX); time.Now
	// otherwise.
	Clock  func() time.Time
	Logger *zap.Logger
}

// maxArgs bounds the arguments of one command (an MSET of 32767 pairs).
const maxArgs = 1 << 16

// Server serves the Redis protocol on any number of listeners.
type Server struct {
	cfg  Config
	node Node
	log  *zap.Logger
	lim  codec.Limits
	// env is what every connection's session shares: the node's view,
	// the default topic, the clock, the bounds on a write (checked by
	// package command before a publish), the SCAN cursors.
	env session.Env

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// lp serves the plain request/reply connections (loop.go); nil
	// when epoll is not there, and then every connection has a
	// goroutine.
	lp *loop

	mu        sync.Mutex // guards conns, peers, strangers and listeners
	conns     map[*conn]struct{}
	peers     map[string]int // open connections by peer (connection limits)
	strangers list.List      // of *conn: the connections that must authenticate, the oldest first (admit.go)
	lns       []net.Listener
	closed    bool
	nextID    atomic.Int64

	// roles is bumped by RolesChanged: a connection asks AuthorizeRead
	// again at its next command.
	roles   atomic.Uint64
	refusal chan struct{} // bounds the goroutines answering refused connections

	followMu  sync.Mutex
	following <-chan struct{} // closed when the follower ends; nil before it starts

	// hub holds the pushes' tables: subscriptions, tracking, monitors,
	// notify-keyspace-events.
	hub     pubsub.Hub
	started time.Time
	runID   string        // INFO's run_id: 40 hex digits, new at each start
	memPeak atomic.Uint64 // INFO's used_memory_peak

	stats stats
}

// New makes a server and starts following the node's changes.
func New(cfg Config) (*Server, error) {
	if cfg.Node == nil {
		return nil, errors.New("resp: Config.Node is nil")
	}
	if cfg.DefaultTopic == "" {
		cfg.DefaultTopic = "default"
	}
	if cfg.PushBuffer <= 0 {
		cfg.PushBuffer = 4 << 20
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.TrackingMaxKeys <= 0 {
		cfg.TrackingMaxKeys = 100_000
	}
	if cfg.MaxUnauthenticated <= 0 {
		cfg.MaxUnauthenticated = DefaultMaxUnauthenticated
	}
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = DefaultAuthTimeout
	}
	s := &Server{
		cfg:     cfg,
		node:    cfg.Node,
		log:     cfg.Logger,
		conns:   map[*conn]struct{}{},
		peers:   map[string]int{},
		refusal: make(chan struct{}, maxRefusing),
		started: time.Now(),
		runID:   newRunID(),
		lim: codec.Limits{
			MaxBulk:  max(cfg.MaxValueSize, 64<<10),
			MaxFrame: max(cfg.MaxFrameSize, cfg.MaxValueSize+64<<10),
			MaxArgs:  maxArgs,
			MaxLine:  64 << 10,
		},
	}
	s.env = session.Env{Node: cfg.Node, DefaultTopic: cfg.DefaultTopic, Clock: cfg.Clock, AllowFlush: cfg.AllowFlush,
		Checks: core.Limits{MaxValue: int64(cfg.MaxValueSize), MaxBatch: int64(cfg.MaxFrameSize)}}
	err := s.hub.Init(pubsub.Config{Env: &s.env, Notify: cfg.NotifyKeyspaceEvents, TrackingMaxKeys: cfg.TrackingMaxKeys,
		Follow: s.follow, ByID: s.byID, Logger: s.log})
	if err != nil {
		return nil, err
	}
	s.roles.Store(1)
	s.stats.init()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if lp, err := newLoop(s); err != nil {
		s.log.Warn("redis event loop unavailable; every connection gets a goroutine", zap.Error(err))
	} else {
		s.lp = lp
		s.wg.Go(lp.run)
	}
	return s, nil
}

// acceptFailed waits after a failed accept of a listener that is still
// open, as net/http's server does: from 5 ms, doubling up to a second
// while the failures go on, and returns the next wait. Such a failure
// passes (the process out of file descriptors, EMFILE, while clients
// hold them all; the kernel short of memory): the door keeps its other
// connections and accepts again once it can. The first of a run is
// logged.
func (s *Server) acceptFailed(ln net.Listener, err error, backoff time.Duration) time.Duration {
	if backoff == 0 {
		s.log.Warn("redis: accepting a connection failed; retrying", zap.Stringer("addr", ln.Addr()), zap.Error(err))
		backoff = 5 * time.Millisecond
	}
	select {
	case <-time.After(backoff):
	case <-s.ctx.Done():
	}
	return min(2*backoff, time.Second)
}

// newRunID is a random run id, as Redis's: 40 hex digits.
func newRunID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Serve accepts connections on ln until it is closed or the server is.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return net.ErrClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return nil
			}
			backoff = s.acceptFailed(ln, err, backoff)
			continue
		}
		backoff = 0
		c := newConn(s, nc)
		c.peer = s.peerOf(nc)
		a, ok := s.node.(Authenticator)
		strange := ok && a.MustAuthenticate(nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return nil
		}
		if why := s.admitLocked(c.peer, strange); why != "" {
			s.mu.Unlock()
			s.stats.refused.Add(1)
			s.refuse(nc, why)
			continue
		}
		var evicted *conn
		if strange {
			evicted = s.admitStrangerLocked(c)
			c.lim = &strangerLimits
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		if evicted != nil {
			evicted.Close()
		}
		s.stats.connections.Add(1)
		s.stats.accepted.Add(1)
		if s.lp != nil && s.lp.attach(c) {
			continue
		}
		s.wg.Go(c.serve)
	}
}

// Close stops the listeners, closes every connection and waits for their
// goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	lns := s.lns
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var errs []error
	for _, ln := range lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.cancel()
	if s.lp != nil {
		s.lp.stop()
	}
	for _, c := range conns {
		c.Close()
	}
	// The follower first: it may start a connection's pusher (wg.Go)
	// until it has returned.
	s.followMu.Lock()
	if s.following != nil {
		<-s.following
	}
	s.followMu.Unlock()
	s.wg.Wait()
	s.hub.Close()
	return errors.Join(errs...)
}

// follow starts following the node's changes if it does not yet; a
// tracking client or a subscriber calls it before it registers, so that
// no change after its registration is missed.
func (s *Server) follow() {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	if s.following == nil && s.ctx.Err() == nil {
		s.following = s.node.Follow(s.ctx, s.hub.Changed, s.hub.ChangesEnd)
	}
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.uncountPeerLocked(c.peer)
	s.leavePoolLocked(c)
	s.mu.Unlock()
	c.ps.Drop()
	s.stats.connections.Add(-1)
}

// byID finds a connection by its CLIENT ID (nil: none).
func (s *Server) byID(id int64) pubsub.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.id == id {
			return c
		}
	}
	return nil
}

func (s *Server) allConns() []*conn {
	return s.connsOf("")
}

// connsOf is the open connections of peer (their share of the limits:
// a uid, a Redis user; see peerOf), or every one for "".
func (s *Server) connsOf(peer string) []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if peer == "" || c.peer == peer {
			out = append(out, c)
		}
	}
	return out
}

// maxRefusing bounds the refused connections being answered at once;
// past it one is closed without an answer.
const maxRefusing = 64

// peerOf is whose share of the connection limits nc counts against.
func (s *Server) peerOf(nc net.Conn) string {
	if p := s.node.Peer(nc); p != "" {
		return p
	}
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return "address " + a.IP.String()
	}
	return "a caller of unknown credentials"
}

// admitLocked counts a new connection of peer, or says which bound it
// would pass (Redis's own "max number of clients reached", which
// clients such as go-redis retry). A stranger (one that must
// authenticate) is bounded by the strangers' pool instead of a share
// (admit.go).
func (s *Server) admitLocked(peer string, stranger bool) string {
	if limit := s.cfg.MaxConnections; limit > 0 && len(s.conns) >= limit {
		return "ERR max number of clients reached (--max-connections " + strconv.Itoa(limit) + ")"
	}
	if share := s.cfg.MaxConnectionsPerPeer; share > 0 && !stranger && s.peers[peer] >= share {
		return "ERR max number of clients reached for " + peer + " (--max-connections-per-uid " + strconv.Itoa(share) + ")"
	}
	s.peers[peer]++
	return ""
}

// refuse answers a connection that is not admitted with why, then closes
// it. It reads the first command first, so that the client is reading
// when the answer comes (and gets no broken pipe), for at most a second,
// off the accepting goroutine.
func (s *Server) refuse(nc net.Conn, why string) {
	select {
	case s.refusal <- struct{}{}:
	default:
		_ = nc.Close()
		return
	}
	s.wg.Go(func() {
		defer func() { <-s.refusal }()
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(time.Second))
		_, _ = nc.Read(make([]byte, 512))
		_, _ = nc.Write(codec.AppendError(nil, why))
	})
	s.log.Debug("redis connection refused", zap.String("reason", why))
}

// RolesChanged makes every connection ask Node.AuthorizeRead again at its
// next command (the daemon calls it when SIGHUP reloads the roles), and
// closes at once the subscribed and tracking connections that may no
// longer read: they receive values and key names without sending a
// command.
func (s *Server) RolesChanged() {
	s.roles.Add(1)
	for _, c := range s.allConns() {
		if !c.ps.Pushed() {
			continue
		}
		if err := s.node.AuthorizeRead(c.nc); err != nil {
			s.log.Info("redis client lost the read role; disconnecting it", zap.Int64("client-id", c.id), zap.Error(err))
			c.Close()
		}
	}
}
