package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/gossip"
	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	respsrv "github.com/cachecast/cachecast/resp"
	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

const (
	// recordOverhead is the most a record adds to its value: the header and
	// the longest topic, key and tag the API takes (package wire's name
	// limits), padded. A value of max-value-size must still fit in one
	// segment with it.
	recordOverhead = record.HeaderSize + wire.MaxTopicLen + wire.MaxAPIKeyLen + wire.MaxTagLen + 8

	// maxSocketPath is the longest path a Unix socket address holds
	// (sun_path is 108 bytes, one of them the terminating NUL).
	maxSocketPath = 107
)

// Config is everything a daemon is started with. Default gives values
// that run a single node on a laptop. Each field but Reload is a setting,
// declared once in the table settings (settings.go): cmd/cachecastd binds
// it to a flag (AddFlags) that can also be set by the environment variable
// CACHECAST_<FLAG> (ApplyEnv).
//
// Each field's flag help (settings.go) says what it does; the comments
// here give the unit and the trade-off.
type Config struct {
	// DataDir holds the store: segments, meta, cursors, snapshot and the
	// lock file. One daemon per directory.
	DataDir string
	// Socket is the path of the local API's Unix socket.
	Socket string
	// SocketMode is the permission of the socket file. Connecting needs
	// write permission, so 0660 admits the owner and the group.
	SocketMode os.FileMode
	// ViewFile is the shared-memory view file (package localview) local
	// processes map read-only to read values with no system call. "auto"
	// (the default) puts it beside the socket, the socket's path with
	// ".sock" replaced by ".view"; empty turns it off. Put it on a tmpfs
	// (/run): it is rebuilt at each start and costs about the view's size
	// in memory.
	ViewFile string
	// ViewFileValues makes the store's view keep the values the view file
	// holds there only (store/view/file.go), not on the heap as well: on
	// by default, for half the daemon's heap (issue 34); it does nothing
	// without a view file.
	ViewFileValues bool
	// NodeName names the node for people (logs, status). The cluster
	// identity is the store's origin ID, not this.
	NodeName string
	// EnvFile is a file of CACHECAST_<FLAG>=value lines read at start (under
	// the command line, over the process environment) and read again on
	// SIGHUP. Empty: none.
	EnvFile string

	// Flush is "async" (an ack means the page cache has the record; a
	// background flusher msyncs every FlushInterval or FlushBytes) or
	// "sync" (an ack means the record is on disk; writers share one msync).
	Flush string
	// FlushInterval bounds how long an async write stays only in memory.
	FlushInterval time.Duration
	// FlushBytes makes the async flusher run early after this many dirty
	// bytes.
	FlushBytes int64
	// SegmentSize is the size of each log segment file in bytes.
	SegmentSize int64
	// MaxMappedSegments bounds how many segments are mapped at once.
	MaxMappedSegments int
	// RetentionBytes bounds the log's size; 0 means no byte bound.
	RetentionBytes int64
	// RetentionAge bounds the age of retained records; 0 means no bound.
	RetentionAge time.Duration
	// SnapshotInterval is how often the view snapshot is written while the
	// log grows; it bounds the replay on restart.
	SnapshotInterval time.Duration
	// WhenFull is "recycle" (drop the oldest segments every durable cursor
	// has passed) or "refuse" (refuse writes with store_full).
	WhenFull string

	// MaxValueSize is the largest value a message may carry, in bytes.
	MaxValueSize int64
	// MaxBodySize is the largest request body (a batch), in bytes.
	MaxBodySize int64
	// MaxConnections bounds the open connections to the socket that are
	// not subscriptions; at the bound a new connection closes the one that
	// has waited longest for a request (see connLimits).
	MaxConnections int
	// MaxConnectionsPerUID is one uid's share of MaxConnections.
	MaxConnectionsPerUID int
	// MaxStreams bounds the open subscriptions (kept apart from
	// MaxConnections, so that readers never take publishers' places).
	MaxStreams int
	// MaxStreamsPerUID is one uid's share of MaxStreams.
	MaxStreamsPerUID int
	// MaxBodyMemory bounds the bytes of request bodies held in memory
	// over all connections; at least MaxBodySize.
	MaxBodyMemory int64
	// MaxBodyMemoryPerUID is one uid's share of MaxBodyMemory.
	MaxBodyMemoryPerUID int64
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response (not a subscription stream,
	// which may run for days).
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds how long shutdown waits for in-flight requests
	// before it closes their connections.
	ShutdownTimeout time.Duration

	// GossipAddr is the ip:port of cluster membership (memberlist, UDP and
	// TCP). Empty: no cluster at all, a lone node with no network port.
	GossipAddr string
	// AdvertiseAddr is the ip[:port] other nodes reach the gossip port at;
	// empty: derived from GossipAddr (a private IP when bound to 0.0.0.0).
	AdvertiseAddr string
	// DataAddr is the host:port of the data port that carries records
	// between nodes; an unspecified host is advertised as the gossip IP.
	DataAddr string
	// Join lists seed addresses of the cluster; empty: wait for others.
	Join []string
	// JoinTimeout bounds the first join attempt, which READY=1 waits for;
	// a failed join is retried in the background.
	JoinTimeout time.Duration
	// GossipProfile picks memberlist's timers: lan, wan or local (fast,
	// for tests on one machine).
	GossipProfile string
	// ClusterKeyFile holds the cluster keys, base64, one per line, the
	// first one primary; empty: no encryption and no key on the data port,
	// so the cluster's ports must stay on loopback (see
	// AllowInsecureCluster).
	ClusterKeyFile string
	// AllowInsecureCluster lets a node without ClusterKeyFile bind its
	// gossip or data port beyond loopback, where anyone who reaches the
	// ports may join the cluster and write to it. Off: such a bind is
	// refused.
	AllowInsecureCluster bool
	// Replication is "none", "async" (the replica gets writes with the
	// fan-out) or "sync" (a publish waits until the replica holds it).
	Replication string
	// Replica pins the replica peer by node name; empty: the successor of
	// this node on the ring of alive node IDs.
	Replica string
	// ReplicaTimeout bounds a sync-replication wait; past it the publish
	// answers replica_timeout (the write stands).
	ReplicaTimeout time.Duration
	// MaxClockOffset bounds how far ahead of this node's wall clock a
	// peer's record may be stamped and still be applied at once (see
	// "Clocks" in package store): one further ahead is held until the
	// clock catches up, one more than 10 times further is refused for now.
	MaxClockOffset time.Duration
	// AntiEntropyFanout is how many peers, picked at random, a node
	// exchanges version vectors with every second (see package
	// broadcast).
	AntiEntropyFanout int
	// ObserveInterval is how often the consistency observer compares this
	// node's view digest with one peer's, picked at random (observer.go);
	// 0: never (freshness is measured all the same).
	ObserveInterval time.Duration
	// RetireOriginsAfter is how long an origin (a node's ID) must have
	// been absent from the alive members before this node leaves it out
	// of the vectors it sends: a wiped machine or one that came back as a
	// new origin. Its records stay; a peer that holds more of them still
	// gives them (see "Retired origins" in package broadcast).
	RetireOriginsAfter time.Duration
	// TombstoneGrace is how long a delete's tombstone is kept at least:
	// past it, one every live node holds is collected (tombstones.go),
	// and a node out of contact with its fleet for more than half of it
	// refuses to start unless StartOver. 0: never collect.
	TombstoneGrace time.Duration
	// StartOver moves a node's data aside (into <data-dir>/stale-<unix
	// ms>) when it was away too long for TombstoneGrace, so that it
	// starts as a fresh node and takes a peer's snapshot.
	StartOver bool
	// QueuesPerTopic is the number of queues a topic is split into for
	// consumer groups (clustering consumption).
	QueuesPerTopic int
	// AckTimeout is how long a group member may hold a message
	// unacknowledged before it is redelivered.
	AckTimeout time.Duration
	// MaxRetries is how many times a group redelivers a message before it
	// goes to the group's dead-letter topic.
	MaxRetries int
	// RetryBackoff is the wait before each retry; the last repeats.
	RetryBackoff []time.Duration
	// TLSCert, TLSKey and TLSCA turn on mutual TLS on the data port.
	TLSCert string
	TLSKey  string
	TLSCA   string
	// Transport carries the fan-out: "tcp" (each node pushes to every
	// peer over the data port) or "nats" (each node publishes once to a
	// NATS cluster, which fans out; for fleets too large for a full mesh).
	Transport string
	// TCPFanout is how --transport=tcp pushes records: "direct" (each
	// node pushes its own records to every peer), "tree" (each node
	// pushes every record it stores to its neighbours on a relay tree of
	// degree 4 over the alive members: at most 5 push connections a node
	// whatever the fleet's size, a record at most 2 log_4 N hops away)
	// or "auto" (the default: direct below broadcast.DefaultTreeFrom
	// alive members, the tree from there).
	TCPFanout string
	// NATSURL lists the NATS servers, comma-separated (--transport=nats).
	NATSURL string
	// NATSCreds is a NATS credentials file (JWT and nkey); empty: none.
	NATSCreds string
	// NATSTLSCert, NATSTLSKey and NATSTLSCA set TLS to the NATS servers
	// (CA alone: verify the servers; with cert and key: mutual TLS).
	NATSTLSCert string
	NATSTLSKey  string
	NATSTLSCA   string
	// NATSSubjectPrefix starts the subjects records are published on.
	NATSSubjectPrefix string

	// RedisSocket is the path of the Redis protocol's Unix socket (package
	// resp); empty: beside Socket (name-redis.sock), "off": none.
	RedisSocket string
	// RedisAddr is a TCP address for the Redis protocol; empty: off.
	RedisAddr string
	// RedisAllowRemote lets RedisAddr be other than a loopback address.
	RedisAllowRemote bool
	// RedisUsers is the Redis door's users file (Redis ACL syntax, a
	// subset; access.ParseUsers): who may AUTH and with which roles.
	// Empty: none (a TCP client may then only read). Read again on SIGHUP.
	RedisUsers string
	// RedisTLSCert and RedisTLSKey serve RedisAddr under TLS; both or
	// neither.
	RedisTLSCert, RedisTLSKey string
	// RedisAllowFlush lets FLUSHDB and FLUSHALL delete every key the Redis
	// door maps, on every node, for a caller with the admin role.
	RedisAllowFlush bool
	// RedisDefaultTopic holds the Redis keys without a ':'.
	RedisDefaultTopic string
	// RedisPushBuffer bounds the invalidations and messages waiting to be
	// written to one Redis client; past it the client is disconnected.
	RedisPushBuffer int64
	// RedisNotifyKeyspaceEvents is notify-keyspace-events at start.
	RedisNotifyKeyspaceEvents string
	// RedisIdleTimeout closes a Redis connection that sends no command
	// for this long (subscribed and tracking ones are exempt); 0: never.
	RedisIdleTimeout time.Duration
	// RedisTrackingMaxKeys bounds the keys one tracking Redis client is
	// remembered to have cached.
	RedisTrackingMaxKeys int
	// RedisMaxUnauthenticated bounds the TCP connections that must still
	// authenticate (with RedisUsers), all together; past it a new one
	// closes the oldest.
	RedisMaxUnauthenticated int
	// RedisAuthTimeout closes a TCP connection that must authenticate and
	// has not this long after it was accepted.
	RedisAuthTimeout time.Duration

	// MetricsAddr is the TCP address of the Prometheus endpoint and the
	// operator console (package daemon/console); empty: off.
	MetricsAddr string
	// ConsoleTokenFile holds the token every request to the console must
	// carry (its first line); empty: none, and then the console is served
	// on a loopback MetricsAddr only.
	ConsoleTokenFile string
	// The roles of the local API's callers (see Role): each pair lists the
	// user IDs and the group IDs (primary or supplementary) that hold the
	// role. An empty pair is the pair of the role below it: consume falls
	// back to publish (AllowUIDs, AllowGIDs), publish to read, and read
	// to anyone who can open the socket. Root and the daemon's own user
	// are always admin; admin holds every role.
	ReadUIDs    []uint32
	ReadGIDs    []uint32
	ConsumeUIDs []uint32
	ConsumeGIDs []uint32
	AllowUIDs   []uint32
	AllowGIDs   []uint32
	AdminUIDs   []uint32
	AdminGIDs   []uint32
	// MaxCursors bounds the durable cursors of the node, MaxCursorsPerUID
	// those one user creates; 0: no bound.
	MaxCursors       int
	MaxCursorsPerUID int
	// MaxMembersPerUID bounds the consumer-group members one user holds
	// on this node at once; 0: no bound.
	MaxMembersPerUID int

	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is json or console; empty picks console on a terminal and
	// json otherwise. The daemon does not build its logger (main does), so
	// this field only travels through Config for main's sake.
	LogFormat string

	// Reload, if set, is called on SIGHUP for the new configuration; the
	// daemon applies the settings that can change while it runs (those
	// ReloadFlags names) and logs the others that differ. cmd/cachecastd
	// sets it to parse the command line and the environment (and EnvFile)
	// again. It is not a setting.
	Reload func() (Config, error) `json:"-"`

	// hooks are the tests' hooks (WithHooks); none has a flag.
	hooks daemonhooks.Hooks
}

// Default is the configuration of `cachecastd` with no flags: a single
// node with its data in ./data and its socket at ./cachecast.sock.
func Default() Config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	so := store.DefaultOptions("./data")
	return Config{
		DataDir:          "./data",
		Socket:           "./cachecast.sock",
		SocketMode:       0o660,
		ViewFile:         ViewFileAuto,
		ViewFileValues:   true,
		NodeName:         host,
		MaxValueSize:     1 << 20,
		MaxBodySize:      64 << 20,
		MaxConnections:   1024,
		MaxCursors:       1000,
		MaxCursorsPerUID: 100,
		MaxMembersPerUID: 256,

		// A uid may take half of each limit: two users cannot be starved
		// by a third, and one service user still has room.
		MaxConnectionsPerUID: 512,
		MaxStreams:           1024,
		MaxStreamsPerUID:     512,
		MaxBodyMemory:        256 << 20,
		MaxBodyMemoryPerUID:  128 << 20,

		ReadHeaderTimeout:       10 * time.Second,
		ReadTimeout:             60 * time.Second,
		WriteTimeout:            60 * time.Second,
		IdleTimeout:             2 * time.Minute,
		ShutdownTimeout:         10 * time.Second,
		GossipAddr:              "127.0.0.1:7946",
		DataAddr:                "127.0.0.1:7947",
		JoinTimeout:             10 * time.Second,
		GossipProfile:           "lan",
		Replication:             "async",
		ReplicaTimeout:          time.Second,
		MaxClockOffset:          500 * time.Millisecond,
		AntiEntropyFanout:       3,
		ObserveInterval:         5 * time.Second,
		RetireOriginsAfter:      24 * time.Hour,
		TombstoneGrace:          24 * time.Hour,
		QueuesPerTopic:          group.DefaultQueues,
		AckTimeout:              group.DefaultAckTimeout,
		MaxRetries:              group.DefaultMaxRetries,
		RetryBackoff:            group.DefaultBackoff,
		Transport:               "tcp",
		TCPFanout:               "auto",
		NATSSubjectPrefix:       "cachecast",
		RedisDefaultTopic:       "default",
		RedisPushBuffer:         4 << 20,
		RedisIdleTimeout:        5 * time.Minute,
		RedisTrackingMaxKeys:    100_000,
		RedisMaxUnauthenticated: respsrv.DefaultMaxUnauthenticated,
		RedisAuthTimeout:        respsrv.DefaultAuthTimeout,
		LogLevel:                "info",
		// The storage settings' defaults are the store's (withStoreDefaults):
		// one source of truth for the storage figures.
	}.withStoreDefaults(so)
}

// Hooks are c's test hooks (WithHooks); the zero value when none.
func (c Config) Hooks() daemonhooks.Hooks { return c.hooks }

// WithHooks is cfg with the test hooks h, in place of any it had. The
// hooks' type is internal: only the tests of this module set them.
func WithHooks(cfg Config, h daemonhooks.Hooks) Config {
	cfg.hooks = h
	return cfg
}

// ViewFileAuto is the --view-file that puts the view beside the socket.
const ViewFileAuto = "auto"

// ViewPath is the view file's path, "" when it is off.
func (c Config) ViewPath() string {
	if c.ViewFile != ViewFileAuto {
		return c.ViewFile
	}
	return strings.TrimSuffix(c.Socket, ".sock") + ".view"
}

// Validate checks every field and returns the first problem, naming the flag
// that sets the field (`--flush: must be "sync" or "async", got "x"`).
func (c Config) Validate() error {
	// Each setting by its own rule, then the store's by the store's rules,
	// once; then the rules that weigh several settings.
	if err := c.checkSettings(); err != nil {
		return err
	}
	if err := c.validateStore(); err != nil {
		return err
	}
	if c.ViewFile != "" && c.ViewPath() == c.Socket {
		return fmt.Errorf("--view-file: must not be the socket's path %q", c.Socket)
	}
	if err := c.validateValueSizes(); err != nil {
		return err
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.MetricsAddr != "" {
		if err := checkAddr("--metrics-addr", c.MetricsAddr, false, false); err != nil {
			return err
		}
		if _, err := c.ConsoleToken(); err != nil {
			return err
		}
	}
	if err := c.validateCluster(); err != nil {
		return err
	}
	return c.validateRedis()
}

// validateValueSizes checks the largest value and body against the
// segment a record must fit.
func (c Config) validateValueSizes() error {
	switch {
	case c.MaxValueSize < 1:
		return fmt.Errorf("--max-value-size: must be at least 1 byte, got %d", c.MaxValueSize)
	case c.MaxValueSize > c.SegmentSize-recordOverhead:
		return fmt.Errorf("--max-value-size: a value of %s does not fit a segment of %s (--segment-size) with its header",
			wire.FormatSize(c.MaxValueSize), wire.FormatSize(c.SegmentSize))
	case c.MaxBodySize < c.MaxValueSize:
		return fmt.Errorf("--max-body-size: must be at least --max-value-size (%s), got %s",
			wire.FormatSize(c.MaxValueSize), wire.FormatSize(c.MaxBodySize))
	}
	return nil
}

// validateCluster checks the cluster's and the consumer groups' settings.
// They are checked with or without a cluster (--gossip-addr empty), so that
// a setting given by mistake is not silently ignored, or replaced by a
// default further down.
func (c Config) validateCluster() error {
	if err := c.validateClusterAddrs(); err != nil {
		return err
	}
	if c.ClusterKeyFile != "" {
		if _, err := gossip.LoadKeyFile(c.ClusterKeyFile); err != nil {
			return fmt.Errorf("--cluster-key-file: %w", err)
		}
	}
	if _, err := c.TLS(); err != nil {
		return err
	}
	return c.validateTransport()
}

// validateClusterAddrs checks the cluster's addresses, and that they stay
// on loopback without a cluster key.
func (c Config) validateClusterAddrs() error {
	if c.GossipAddr == "" && len(c.Join) > 0 {
		return errors.New("--join: needs --gossip-addr (empty --gossip-addr means no cluster)")
	}
	if c.GossipAddr != "" {
		if err := checkAddr("--gossip-addr", c.GossipAddr, true, false); err != nil {
			return err
		}
	}
	if c.AdvertiseAddr != "" {
		if err := checkAddr("--advertise-addr", c.AdvertiseAddr, true, true); err != nil {
			return err
		}
	}
	if c.DataAddr == "" {
		return errors.New("--data-addr: must not be empty (host:port; port 0 picks a free one)")
	}
	if err := checkAddr("--data-addr", c.DataAddr, false, false); err != nil {
		return err
	}
	for _, j := range c.Join {
		if err := checkAddr("--join", j, false, true); err != nil {
			return err
		}
	}
	if c.GossipAddr != "" && c.ClusterKeyFile == "" && !c.AllowInsecureCluster {
		for _, a := range []struct{ flag, addr string }{{"--gossip-addr", c.GossipAddr}, {"--data-addr", c.DataAddr}} {
			if !Loopback(a.addr) {
				return fmt.Errorf("%s: %s is reachable beyond this machine and there is no --cluster-key-file, "+
					"so anyone who reaches it could join the cluster and write to it: give --cluster-key-file, "+
					"bind 127.0.0.1, or pass --allow-insecure-cluster: %w", a.flag, a.addr, ErrInsecureCluster)
			}
		}
	}
	return nil
}

// validateTransport checks the settings of --transport=nats.
func (c Config) validateTransport() error {
	if c.Transport == "tcp" {
		return nil
	}
	if c.TCPFanout == "tree" { // auto has nothing to choose under NATS
		return errors.New("--tcp-fanout: tree is a fan-out over the data port, not with --transport=nats")
	}
	if c.NATSURL == "" {
		return errors.New("--nats-url: needed with --transport=nats")
	}
	if c.NATSSubjectPrefix == "" || strings.ContainsAny(c.NATSSubjectPrefix, " *>") {
		return fmt.Errorf("--nats-subject-prefix: must be a NATS subject without wildcards, got %q", c.NATSSubjectPrefix)
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key: set both or neither")
	}
	for _, f := range []struct{ flag, path string }{{"--nats-creds", c.NATSCreds},
		{"--nats-tls-cert", c.NATSTLSCert}, {"--nats-tls-key", c.NATSTLSKey}, {"--nats-tls-ca", c.NATSTLSCA}} {
		if err := checkReadable(f.flag, f.path); err != nil {
			return err
		}
	}
	return nil
}

// checkAddr checks a host:port setting: the port is a number from 0 to
// 65535, and with ipOnly the host is an IP literal or empty (gossip binds
// and advertises IPs only). With portOptional a bare host is fine too.
func checkAddr(flag, addr string, ipOnly, portOptional bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if !portOptional {
			return fmt.Errorf("%s: want host:port, got %q", flag, addr)
		}
		host, port = addr, "0" // a bare host, or a bare IPv6 address
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s: the port of %q must be a number from 0 to 65535", flag, addr)
	}
	if ipOnly && host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("%s: the host of %q must be an IP address (or empty for every interface)", flag, addr)
	}
	return nil
}

// checkReadable checks that the file a flag names (if any) can be opened.
func checkReadable(flag, path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return f.Close()
}

// ErrInsecureCluster means a node without a cluster key would open its
// cluster ports beyond loopback without --allow-insecure-cluster.
var ErrInsecureCluster = errors.New("config: cluster ports open to the network without a key")

// Loopback reports whether host:port binds loopback only: localhost or
// a loopback IP. An empty host, an unspecified IP (0.0.0.0, ::) or any
// other name or address reaches beyond this machine.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateLimits checks the limits against each other.
func (c Config) validateLimits() error {
	switch {
	case c.MaxConnectionsPerUID < 1 || c.MaxConnectionsPerUID > c.MaxConnections:
		return fmt.Errorf("--max-connections-per-uid: must be 1 to --max-connections (%d), got %d", c.MaxConnections, c.MaxConnectionsPerUID)
	case c.MaxStreamsPerUID < 1 || c.MaxStreamsPerUID > c.MaxStreams:
		return fmt.Errorf("--max-streams-per-uid: must be 1 to --max-streams (%d), got %d", c.MaxStreams, c.MaxStreamsPerUID)
	case c.MaxBodyMemory < c.MaxBodySize:
		return fmt.Errorf("--max-body-memory: must be at least --max-body-size (%s), got %s", wire.FormatSize(c.MaxBodySize), wire.FormatSize(c.MaxBodyMemory))
	case c.MaxBodyMemoryPerUID < c.MaxBodySize || c.MaxBodyMemoryPerUID > c.MaxBodyMemory:
		return fmt.Errorf("--max-body-memory-per-uid: must be --max-body-size (%s) to --max-body-memory (%s), got %s",
			wire.FormatSize(c.MaxBodySize), wire.FormatSize(c.MaxBodyMemory), wire.FormatSize(c.MaxBodyMemoryPerUID))
	}
	return nil
}

// Roles are the role lists of the --read-*, --consume-*, --allow-* and
// --admin-* flags; self is the daemon's own uid.
func (c Config) Roles(self uint32) *access.Roles {
	return access.NewRoles(access.IDs{UIDs: c.ReadUIDs, GIDs: c.ReadGIDs}, access.IDs{UIDs: c.ConsumeUIDs, GIDs: c.ConsumeGIDs},
		access.IDs{UIDs: c.AllowUIDs, GIDs: c.AllowGIDs}, access.IDs{UIDs: c.AdminUIDs, GIDs: c.AdminGIDs}, self)
}
