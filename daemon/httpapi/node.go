package httpapi

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// Node is the node as the HTTP API sees it: the view and the log for
// reads, the write path, durable cursors, and the node's status. The
// daemon implements it on the same adapter as package resp's Node (the
// methods both need, Keys and Topics, are one); every method may be
// called from many goroutines at once.
type Node interface {
	// EntryInto is the live entry of (topic, key) in the view. Its bytes
	// are the view's, or, for a value the view does not keep on the heap
	// (--view-file-values), in buf, read from its start (grown when
	// short): read them, do not keep or change them. It returns the
	// buffer to pass next time.
	EntryInto(buf []byte, topic, key string) (view.Entry, []byte, bool)
	// Counting is Entry for a counter command: for a key without a
	// value, the entry's Absence says what the key had last.
	Counting(topic, key string) (view.Entry, bool)
	// Pending lists the records of topic not in force yet, by key, for
	// keys after after, at most limit keys; PendingKey those of one key.
	Pending(topic, after string, limit int) []view.PendingRecord
	PendingKey(topic, key string) []view.PendingRecord
	// FollowStore is the store's one reader of its changes (store.Follow):
	// the subscription streams' time events (an expiry, a scheduled
	// record taking effect) come through it.
	FollowStore(ctx context.Context, o store.FollowOptions, fn func(store.Followed), end func()) <-chan struct{}
	// Expiring walks at most scan keys of topic after after, and
	// returns those whose value in force expires, how many it walked and
	// the key to go on after ("" at the topic's end).
	Expiring(topic, after string, scan int) (keys []view.KeyedEntry, walked int, next string)
	// Keys lists the live keys of topic that start with prefix and sort
	// after after, in byte order, at most limit.
	Keys(topic, prefix, after string, limit int) []string
	// Topics lists the topics, sorted, with their live keys.
	Topics() []view.TopicInfo
	// TopicEnd is the offset the topic's next message will have.
	TopicEnd(topic string) uint64
	// NewTopicReader reads topic from start, only tags when given.
	NewTopicReader(topic string, start store.Start, tags []string) (*store.TopicReader, error)

	// Cursor is one durable cursor; Cursors lists them, by name.
	Cursor(name string) (store.CursorInfo, bool)
	Cursors() []store.CursorInfo
	// SetCursor creates or moves a durable cursor as the context's
	// caller (access.CallerFrom), who owns one it creates; DeleteCursor
	// deletes one, its owner's or as an admin.
	SetCursor(ctx context.Context, name, topic string, offset uint64) error
	DeleteCursor(ctx context.Context, name string) error

	// PublishAs appends msgs as one all-or-nothing batch as caller c,
	// with the replica status of the write (wire.StatusOK or another
	// status word). msgs are checked by package command's rules (names,
	// sizes, time fields); the store checks the record's rules again.
	PublishAs(ctx context.Context, msgs []record.Message, c access.Caller) ([]store.Result, string, error)

	// NodeStatus is GET /v1/status, Cluster GET /v1/cluster, Verify GET
	// /v1/verify (which asks every live member: it takes a while).
	NodeStatus() wire.Status
	Cluster() wire.ClusterStatus
	Verify(ctx context.Context) wire.VerifyResult
	// Fleet is GET /v1/fleet, KeyAcross GET
	// /v1/topics/{topic}/nodes/{key}: each asks every live member over
	// gossip and waits at most timeout for each (0: the node's default);
	// an answer may serve the callers of the same for half a second.
	Fleet(ctx context.Context, timeout time.Duration) wire.Fleet
	KeyAcross(ctx context.Context, topic, key string, timeout time.Duration) wire.KeyAcross
	// GroupsAcross is GET /v1/fleet/groups: every member's consumer
	// groups, asked as Fleet asks.
	GroupsAcross(ctx context.Context, timeout time.Duration) wire.GroupsAcross
	// KeyHistory is GET /v1/topics/{topic}/history/{key}: the key's
	// records in its topic's log on this node, newest first, at most
	// limit, looking at most scan messages back.
	KeyHistory(topic, key string, limit int, scan uint64) (wire.KeyHistory, error)
	// Healthy is nil while the store serves; DiskFull is nil unless
	// writes are refused for want of space.
	Healthy() error
	DiskFull() error
	// Ready is true from when the node serves until shutdown begins;
	// Degraded says why a node told to join is alone ("" when not).
	Ready() bool
	Degraded() string
	// State is whether the node serves its view (command.State: away,
	// catching up with its peers before its first ready). It is called
	// on every read, so it must be cheap.
	State() command.State
	// AcceptLost gives up the records of the node's log lost to damage
	// that no peer could give back, and lists them.
	AcceptLost() (wire.AcceptLostResult, error)
	// ForgetMember forgets a member removed for good, on this node and,
	// with fleet, on every alive member.
	ForgetMember(ctx context.Context, name string, fleet bool) (wire.ForgetResult, error)
	// Backup writes the node's backup file (package backup) to w: its
	// view as a bootstrapping peer gets it, its cursors and who it is.
	Backup(w io.Writer) error
}

// Groups are the consumer groups as the group routes use them
// (*group.Manager).
type Groups interface {
	JoinAs(ctx context.Context, owner group.Owner, topic, name string, tags []string, maxInflight int) (*group.Member, error)
	AckAs(ctx context.Context, owner group.Owner, topic, name string, ack, nack []group.ID) (acked, nacked, unknown int, err error)
	CheckOwner(owner group.Owner, topic, name string) error
	Reset(ctx context.Context, topic, name, to string) (epoch uint64, err error)
	Status() []group.Status
	DeadLetters(topic, name, after string, limit int) ([]group.DeadLetter, string, error)
	DeadLetter(topic, name, id string) (group.DeadLetter, error)
	Replay(ctx context.Context, topic, name string, ids []string, all bool) (int, error)
}

// Config is what the HTTP API is made of.
type Config struct {
	Node   Node
	Groups Groups
	// Guard checks each route's role; Limits and Bodies bound the
	// socket's connections, streams and request bodies.
	Guard  *access.Guard
	Limits *access.Limits
	Bodies *access.Budget

	// Clock, if set, is the node's wall clock (expiries, effective
	// times); time.Now otherwise.
	Clock func() time.Time

	MaxValueSize     int64         // --max-value-size
	MaxBodySize      int64         // --max-body-size
	MaxMembersPerUID int           // --max-members-per-uid; 0: no bound
	ReadTimeout      time.Duration // --read-timeout, named in the timeout error

	// Stop ends every subscription stream when it is done (at shutdown:
	// http.Server's Shutdown waits for handlers, and a stream never ends
	// on its own).
	Stop context.Context
	// Registry takes the API's metrics; Logger its log (nil: none).
	Registry prometheus.Registerer
	Logger   *zap.Logger
}

// metrics are the API's: errors by code, latency by route, open streams.
type metrics struct {
	errors      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	subscribers prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cachecast_api_errors_total",
			Help: "Error responses of the local API, by error code.",
		}, []string{"code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cachecast_api_request_duration_seconds",
			Help:    "Time to serve a local API request, by route (subscription streams excluded).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10), // 10µs .. 2.6s
		}, []string{"route"}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cachecast_subscribers",
			Help: "Open subscription streams.",
		}),
	}
	for _, code := range wire.Codes {
		m.errors.WithLabelValues(code) // every code shows, at zero
	}
	if reg != nil {
		reg.MustRegister(m.errors, m.latency, m.subscribers)
	}
	return m
}

// memberCounts counts the group members each user holds on this node,
// for --max-members-per-uid.
type memberCounts struct {
	mu    sync.Mutex
	byUID map[uint32]int
}

// gate counts in-flight handlers and, once closed, admits no more.
type gate struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{}
}

// enter admits a handler; false once the gate is closed.
func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// closeAndWait closes the gate and returns a channel closed once no handler
// is left.
func (g *gate) closeAndWait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	ch := make(chan struct{})
	if g.n == 0 {
		close(ch)
	} else {
		g.idle = ch
	}
	return ch
}
