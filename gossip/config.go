package gossip

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// Profiles name a set of memberlist timers (probe, gossip, push/pull,
// suspicion, TCP timeout).
const (
	// ProfileLAN is memberlist's DefaultLANConfig: probe every second,
	// push/pull every 30s, 10s TCP timeout. The default.
	ProfileLAN = "lan"
	// ProfileWAN is memberlist's DefaultWANConfig: slower probes (5s) and
	// longer timeouts, for links with high or variable latency.
	ProfileWAN = "wan"
	// ProfileLocal is for tests and single-host clusters on loopback: probe
	// every 200ms, push/pull every 300ms, a failed node declared dead in
	// about a second or two. Too chatty for a real network.
	ProfileLocal = "local"
)

// Defaults of the optional Config fields.
const (
	DefaultBindAddr    = "0.0.0.0:7946"
	DefaultJoinTimeout = 30 * time.Second
	DefaultEventBuffer = 256
	DefaultForgetAfter = time.Hour
	// DefaultReconnectTimeout is how long a failed member is tried again,
	// as Serf's reconnect timeout (and the daemon's --retire-origins-after).
	DefaultReconnectTimeout = 24 * time.Hour
)

// Config configures a Gossip. NodeName, NodeID and DataAddr are required;
// the rest have defaults.
type Config struct {
	// NodeName is this node's unique name in the cluster, for people and
	// for memberlist (two nodes with one name conflict). Defaulting it to
	// the host name is the daemon's job.
	NodeName string
	// NodeID is this node's origin ID (the store's Origin); it must not be
	// zero. It travels in the node metadata.
	NodeID uint64
	// BindAddr is the ip:port gossip listens on, UDP and TCP (default
	// 0.0.0.0:7946). The host must be an IP literal (or empty for all
	// interfaces); port 0 picks a free port (tests; see Addr).
	BindAddr string
	// AdvertiseAddr is the ip:port (or ip, meaning the bound port) other
	// nodes reach this node at. Empty: derived as memberlist does: the
	// bound IP, or a private IP of this host when bound to 0.0.0.0.
	AdvertiseAddr string
	// DataAddr is the host:port of this node's data port, advertised in
	// the metadata. An empty or unspecified host (":7947", "0.0.0.0:7947")
	// is replaced by the advertised gossip IP, the address peers already
	// reach this node at.
	DataAddr string
	// Join lists seed addresses (ip:port or host:port; a missing port means
	// the bound gossip port). Empty: a cluster of one until others join us.
	Join []string
	// JoinTimeout bounds Join: seeds are retried with backoff until one
	// answers or this much time has passed (default 30s).
	JoinTimeout time.Duration
	// Keys are the cluster keys (16, 24 or 32 bytes each; see
	// LoadKeyFile). Keys[0] is the primary, used to encrypt; all are tried
	// to decrypt. Empty: gossip is not encrypted, and a node that has keys
	// will not talk to this one. Encryption cannot be turned on or off on
	// a running node (SetKeys), only the keys changed.
	Keys [][]byte
	// ProtoMin and ProtoMax are the data-port protocol versions the node
	// speaks (broadcast.Protocols); both zero: ProtocolVersion alone. They
	// travel in the metadata, and a member whose range has no version in
	// common with this one is refused (see Meta).
	ProtoMin, ProtoMax uint8
	// Profile selects memberlist's timers: ProfileLAN (default),
	// ProfileWAN or ProfileLocal.
	Profile string
	// EventBuffer is the capacity of the Events channel (default 256).
	EventBuffer int
	// ForgetAfter is how long Members keeps reporting a node that left or
	// failed (default 1h). A node that comes back is reported at once.
	ForgetAfter time.Duration
	// ReconnectInterval is how often this node tries to join again one
	// member that failed or left (picked at random), and its
	// seeds when it sees no other member alive: memberlist alone never
	// talks to a member again once it has been dead for its
	// GossipToTheDeadTime, so without this the two sides of a healed
	// partition would stay apart until a restart. Default per profile:
	// 30s for ProfileLAN and ProfileWAN (Serf's), 1s for ProfileLocal.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long after a member failed or left this
	// node keeps trying to join it again (default DefaultReconnectTimeout,
	// 24h).
	ReconnectTimeout time.Duration
	// Remembered are members this node saw before it started (the daemon
	// keeps them in its data directory): they are tried again as members
	// that failed at their Since, so that a node restarted without seeds,
	// or whose seeds are gone, finds its cluster again. This node's own
	// name is skipped.
	Remembered []Remembered
	// Unreachable is for fault tests only (nil in production): when it
	// returns true for a peer's gossip address, the packets this node
	// sends there are dropped and its dials there fail, as across a
	// network partition (internal/faultnet's Net.Unreachable gives one).
	Unreachable func(addr string) bool
	// Logger receives this package's logs and memberlist's (the latter
	// under the name "memberlist"). Nil: zap.NewNop().
	Logger *zap.Logger
}

// Remembered is a member seen before this node started: Config.Remembered.
type Remembered struct {
	Name  string
	ID    uint64
	Addr  string    // its gossip address, ip:port
	Since time.Time // when it was last seen alive
}

// profile holds the memberlist config of a profile and the backoff
// between join rounds.
type profile struct {
	ml         func() *memberlist.Config
	backoffMin time.Duration
	backoffMax time.Duration
	reconnect  time.Duration // default ReconnectInterval
}

var profiles = map[string]profile{
	ProfileLAN: {ml: memberlist.DefaultLANConfig, backoffMin: 200 * time.Millisecond, backoffMax: 5 * time.Second, reconnect: 30 * time.Second},
	ProfileWAN: {ml: memberlist.DefaultWANConfig, backoffMin: time.Second, backoffMax: 10 * time.Second, reconnect: 30 * time.Second},
	ProfileLocal: {ml: func() *memberlist.Config {
		c := memberlist.DefaultLocalConfig()
		c.ProbeInterval = 200 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.GossipInterval = 20 * time.Millisecond
		c.PushPullInterval = 300 * time.Millisecond
		c.SuspicionMult = 2
		c.GossipToTheDeadTime = 2 * time.Second
		// A node restarted on another port (tests) may take its name back.
		c.DeadNodeReclaimTime = time.Second
		return c
	}, backoffMin: 50 * time.Millisecond, backoffMax: 500 * time.Millisecond, reconnect: time.Second},
}

// withDefaults returns cfg with the defaults filled in, after checking it.
// Errors wrap ErrInvalidConfig and name the field.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if cfg.NodeName == "" {
		return bad("NodeName is empty")
	}
	if len(cfg.NodeName) > 255 {
		return bad("NodeName is %d bytes, at most 255", len(cfg.NodeName))
	}
	if cfg.NodeID == 0 {
		return bad("NodeID is zero")
	}
	if cfg.ProtoMin == 0 && cfg.ProtoMax == 0 {
		cfg.ProtoMin, cfg.ProtoMax = ProtocolVersion, ProtocolVersion
	}
	if cfg.ProtoMin == 0 || cfg.ProtoMin > cfg.ProtoMax {
		return bad("ProtoMin %d, ProtoMax %d: not a range", cfg.ProtoMin, cfg.ProtoMax)
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = DefaultBindAddr
	}
	if _, _, err := splitIPPort("BindAddr", cfg.BindAddr, false); err != nil {
		return Config{}, err
	}
	if cfg.AdvertiseAddr != "" {
		if _, _, err := splitIPPort("AdvertiseAddr", cfg.AdvertiseAddr, true); err != nil {
			return Config{}, err
		}
	}
	if cfg.DataAddr == "" {
		return bad("DataAddr is empty")
	}
	if _, port, err := net.SplitHostPort(cfg.DataAddr); err != nil {
		return bad("DataAddr %q: %v", cfg.DataAddr, err)
	} else if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return bad("DataAddr %q: port must be 1..65535", cfg.DataAddr)
	}
	for i, s := range cfg.Join {
		if s == "" {
			return bad("Join[%d] is empty", i)
		}
	}
	if cfg.JoinTimeout < 0 {
		return bad("JoinTimeout %v is negative", cfg.JoinTimeout)
	}
	if cfg.JoinTimeout == 0 {
		cfg.JoinTimeout = DefaultJoinTimeout
	}
	if err := checkKeys(cfg.Keys); err != nil {
		return bad("Keys: %v", err)
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileLAN
	}
	if _, ok := profiles[cfg.Profile]; !ok {
		return bad("Profile %q: want %q, %q or %q", cfg.Profile, ProfileLAN, ProfileWAN, ProfileLocal)
	}
	if cfg.EventBuffer < 0 {
		return bad("EventBuffer %d is negative", cfg.EventBuffer)
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = DefaultEventBuffer
	}
	if cfg.ForgetAfter < 0 {
		return bad("ForgetAfter %v is negative", cfg.ForgetAfter)
	}
	if cfg.ForgetAfter == 0 {
		cfg.ForgetAfter = DefaultForgetAfter
	}
	if cfg.ReconnectInterval < 0 {
		return bad("ReconnectInterval %v is negative", cfg.ReconnectInterval)
	}
	if cfg.ReconnectInterval == 0 {
		cfg.ReconnectInterval = profiles[cfg.Profile].reconnect
	}
	if cfg.ReconnectTimeout < 0 {
		return bad("ReconnectTimeout %v is negative", cfg.ReconnectTimeout)
	}
	if cfg.ReconnectTimeout == 0 {
		cfg.ReconnectTimeout = DefaultReconnectTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return cfg, nil
}

// splitIPPort splits ip:port where ip must be an IP literal or empty (for
// all interfaces). With portOptional, a bare IP gives port 0.
func splitIPPort(field, s string, portOptional bool) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if !portOptional || net.ParseIP(s) == nil {
			return "", 0, fmt.Errorf("%w: %s %q: want ip:port", ErrInvalidConfig, field, s)
		}
		host, port = s, "0"
	}
	if host != "" && net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%w: %s %q: host must be an IP address", ErrInvalidConfig, field, s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s %q: bad port", ErrInvalidConfig, field, s)
	}
	return host, int(p), nil
}
