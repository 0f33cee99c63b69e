package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// A setting is the one declaration of a configuration setting. From it
// come the flag (AddFlags: its name, its help, its default from
// Default), the environment variable (EnvName of the flag, read by
// ApplyEnv), what SIGHUP applies (Reload, ReloadFlags), the store option
// it sets and whose rules are its rules (storeOptions, Validate), and so
// the manual page (cmd/cachecastd --man) and the reference of
// docs/configuration.md, which tests check against this table.
type setting struct {
	// field is the Config field the setting sets; its Go type picks the
	// flag's type (AddFlags).
	field string
	// flag is the flag's name; the environment variable is EnvName(flag).
	flag string
	// help is the flag's help text.
	help string
	// reload says SIGHUP applies a new value to the running daemon; a
	// change to any other setting waits for a restart.
	reload bool
	// store names the store.Options field the setting becomes: the
	// store's default is the flag's, and store.Options.Validate holds its
	// rules (an *store.OptionError of it is reported under this flag).
	store string
	// check is the setting's own rule, if it has one (checkSettings);
	// rules that weigh several settings are Validate's.
	check rule
}

// settings are every setting of the daemon, in the order of --help.
var settings = []setting{
	{field: "DataDir", flag: "data-dir", store: "Dir",
		help: "directory of the store (segments, meta, cursors, snapshot); one daemon per directory"},
	{field: "Socket", flag: "socket", check: socketPath,
		help: "path of the local API's Unix socket"},
	{field: "SocketMode", flag: "socket-mode", check: socketMode,
		help: "permission of the socket file, octal (connecting needs write permission)"},
	{field: "ViewFile", flag: "view-file",
		help: `shared-memory view file local processes read with no system call (mode 0640, the socket's group); "auto": beside the socket, ".view" for ".sock"; empty: off`},
	{field: "ViewFileValues", flag: "view-file-values",
		help: "keep the values the view file holds there only, not on the daemon's heap as well: about 100 bytes a key less at 100-byte values (half the heap), but a read costs more CPU (the value's record read from the file under its seqlock and copied; through the Redis door about 7% more a GET, 35% more an MGET of 10); false keeps them on the heap too"},
	{field: "NodeName", flag: "node-name", check: nodeName,
		help: "name of this node for people; defaults to the host name"},
	{field: "EnvFile", flag: "env-file", reload: true,
		help: "file of CACHECAST_<FLAG>=value lines, applied over the environment"},
	{field: "Flush", flag: "flush", store: "Flush", check: parseFlush,
		help: `when a write is acknowledged: "async" (in the page cache; flushed every --flush-interval) or "sync" (on disk)`},
	{field: "FlushInterval", flag: "flush-interval", store: "FlushInterval",
		help: "async flush: the longest a write stays only in memory"},
	{field: "FlushBytes", flag: "flush-bytes", store: "FlushBytes",
		help: "async flush: flush early after this many unflushed bytes; 0: on the interval only"},
	{field: "SegmentSize", flag: "segment-size", store: "SegmentSize",
		help: "size of each log segment file (e.g. 64MiB, 1GB)"},
	{field: "MaxMappedSegments", flag: "max-mapped-segments", store: "MaxMappedSegments",
		help: "most log segments mapped into memory at once"},
	{field: "RetentionBytes", flag: "retention-bytes", store: "RetentionBytes",
		help: "bound on the log's size; 0: no bound"},
	{field: "RetentionAge", flag: "retention-age", store: "RetentionAge",
		help: "bound on the age of retained records; 0: no bound"},
	{field: "SnapshotInterval", flag: "snapshot-interval", store: "SnapshotInterval",
		help: "how often the key/value snapshot is written while the log grows (bounds the replay on restart)"},
	{field: "WhenFull", flag: "when-full", store: "WhenFull", check: parseWhenFull,
		help: `at the retention bound: "recycle" the oldest segments every durable cursor has passed, or "refuse" writes`},
	{field: "MaxValueSize", flag: "max-value-size",
		help: "largest value of one message"},
	{field: "MaxBodySize", flag: "max-body-size",
		help: "largest request body (a batch of messages)"},
	{field: "MaxConnections", flag: "max-connections", check: atLeast(1),
		help: "most open connections to the socket besides subscriptions; at the bound a new one closes the connection idle longest"},
	{field: "MaxConnectionsPerUID", flag: "max-connections-per-uid",
		help: "one uid's share of --max-connections"},
	{field: "MaxStreams", flag: "max-streams", check: atLeast(1),
		help: "most open subscriptions (apart from --max-connections); more are answered 503 busy"},
	{field: "MaxStreamsPerUID", flag: "max-streams-per-uid",
		help: "one uid's share of --max-streams; more are answered 429 too_many"},
	{field: "MaxBodyMemory", flag: "max-body-memory",
		help: "most bytes of request bodies held in memory over all connections; more are answered 503 busy"},
	{field: "MaxBodyMemoryPerUID", flag: "max-body-memory-per-uid",
		help: "one uid's share of --max-body-memory; more are answered 429 too_many"},
	{field: "ReadHeaderTimeout", flag: "read-header-timeout", check: positive,
		help: "time allowed to read a request's headers"},
	{field: "ReadTimeout", flag: "read-timeout", check: positive,
		help: "time allowed to read a whole request, body included"},
	{field: "WriteTimeout", flag: "write-timeout", check: positive,
		help: "time allowed to write a response (subscription streams are exempt)"},
	{field: "IdleTimeout", flag: "idle-timeout", check: positive,
		help: "idle keep-alive connections are closed after this long"},
	{field: "ShutdownTimeout", flag: "shutdown-timeout", check: positive,
		help: "on shutdown, how long in-flight requests may take before their connections are closed"},
	{field: "GossipAddr", flag: "gossip-addr",
		help: "ip:port of cluster membership (UDP and TCP); empty: no cluster, no network port"},
	{field: "AdvertiseAddr", flag: "advertise-addr",
		help: "ip[:port] other nodes reach the gossip port at; empty: derived from --gossip-addr"},
	{field: "DataAddr", flag: "data-addr",
		help: "host:port of the data port that carries records between nodes"},
	{field: "Join", flag: "join",
		help: "seed addresses of the cluster, comma separated (ip:port of their gossip ports)"},
	{field: "JoinTimeout", flag: "join-timeout", check: positive,
		help: "bound on the first join attempt (READY=1 waits for it); later attempts run in the background"},
	{field: "GossipProfile", flag: "gossip-profile", check: oneOf("lan", "wan", "local"),
		help: `memberlist timers: "lan", "wan" or "local" (fast, one machine)`},
	{field: "ClusterKeyFile", flag: "cluster-key-file",
		help: "file of cluster keys (base64, one per line, first is primary) for gossip encryption and the data port; without it the cluster's ports stay on loopback"},
	{field: "AllowInsecureCluster", flag: "allow-insecure-cluster",
		help: "let a node without --cluster-key-file bind --gossip-addr or --data-addr beyond loopback (anyone who reaches the ports can join and write)"},
	{field: "Replication", flag: "replication", check: oneOf("none", "async", "sync"),
		help: `copy each write to the replica peer: "none", "async" (with the fan-out) or "sync" (the publish waits for the replica)`},
	{field: "Replica", flag: "replica",
		help: "node name of the replica peer; empty: the successor on the ring of node IDs"},
	{field: "ReplicaTimeout", flag: "replica-timeout", check: positive,
		help: "sync replication: how long a publish waits for the replica before it answers replica_timeout"},
	{field: "MaxClockOffset", flag: "max-clock-offset", store: "MaxClockOffset", check: between(time.Millisecond, time.Hour),
		help: "a peer's record stamped further ahead of this node's clock is held until the clock catches up (refused for now past 10 times this); peers persistently ahead are flagged in status"},
	{field: "ObserveInterval", flag: "observe-interval", check: notNegative,
		help: "how often the consistency observer compares this node's view digest with one peer's at a common vector (0: never)"},
	{field: "AntiEntropyFanout", flag: "anti-entropy-fanout", check: between(1, 64),
		help: "peers, picked at random, this node exchanges version vectors with every second (anti-entropy); each side pulls what it lacks"},
	{field: "RetireOriginsAfter", flag: "retire-origins-after", check: atLeast(time.Second),
		help: "an origin absent from the alive members this long is left out of the vectors this node sends (its records stay, and are still repaired)"},
	{field: "TombstoneGrace", flag: "tombstone-grace", check: notNegative,
		help: "a delete's tombstone is collected once every live node holds it and this has passed since it was written (0: never); a node out of contact for more than half of it refuses to start without --start-over"},
	{field: "StartOver", flag: "start-over",
		help: "when this node was out of contact for more than half of --tombstone-grace, move its data aside (<data-dir>/stale-<unix ms>) and start as a fresh node from its peers"},
	{field: "QueuesPerTopic", flag: "queues-per-topic", check: between(1, 1024),
		help: "consumer groups: queues per topic (a message goes to queue hash(key) mod this); the same on every node"},
	{field: "AckTimeout", flag: "ack-timeout", check: positive,
		help: "consumer groups: how long a member may hold a message unacknowledged before it is redelivered"},
	{field: "MaxRetries", flag: "max-retries", check: notNegative,
		help: "consumer groups: redeliveries of a failed message before it goes to the dead-letter topic"},
	{field: "RetryBackoff", flag: "retry-backoff", check: durations,
		help: "consumer groups: wait before each retry, comma separated; the last repeats"},
	{field: "TLSCert", flag: "tls-cert",
		help: "certificate (PEM) of this node for mutual TLS on the data port; --tls-cert, --tls-key and --tls-ca are read again on SIGHUP (a new path needs a restart)"},
	{field: "TLSKey", flag: "tls-key",
		help: "private key (PEM) for --tls-cert"},
	{field: "TLSCA", flag: "tls-ca",
		help: "CA certificate (PEM) that signs every node's certificate"},
	{field: "Transport", flag: "transport", check: oneOf("tcp", "nats"),
		help: `fan-out: "tcp" (push to every peer) or "nats" (publish once to a NATS cluster, for large fleets)`},
	{field: "TCPFanout", flag: "tcp-fanout", check: oneOf("auto", "direct", "tree"),
		help: `how --transport=tcp pushes records: "direct" (each node to every peer), "tree" (each node relays every record to its neighbours on a tree of degree 4: at most 5 push connections whatever the fleet's size) or "auto" (direct below 16 alive members, the tree from 16; every node sees the same members, so all choose alike)`},
	{field: "NATSURL", flag: "nats-url",
		help: "NATS servers, comma separated (nats://host:4222,...), for --transport=nats"},
	{field: "NATSCreds", flag: "nats-creds",
		help: "NATS credentials file (JWT and nkey seed)"},
	{field: "NATSTLSCert", flag: "nats-tls-cert",
		help: "client certificate (PEM) for TLS to NATS"},
	{field: "NATSTLSKey", flag: "nats-tls-key",
		help: "private key (PEM) for --nats-tls-cert"},
	{field: "NATSTLSCA", flag: "nats-tls-ca",
		help: "CA certificate (PEM) that signs the NATS servers' certificates"},
	{field: "NATSSubjectPrefix", flag: "nats-subject-prefix",
		help: "prefix of the NATS subjects records are published on (<prefix>.<origin>)"},
	{field: "RedisSocket", flag: "redis-socket",
		help: `path of the Redis protocol's Unix socket; empty: beside --socket (cachecast.sock: cachecast-redis.sock); "off": none`},
	{field: "RedisAddr", flag: "redis-addr",
		help: "host:port for the Redis protocol over TCP (loopback only unless --redis-allow-remote); empty: off"},
	{field: "RedisAllowFlush", flag: "redis-allow-flush",
		help: "let FLUSHDB and FLUSHALL delete every key on every node (one batch of deletes), for the admin role; off: they are refused"},
	{field: "RedisAllowRemote", flag: "redis-allow-remote",
		help: "let --redis-addr listen beyond loopback (it then needs --redis-users: a TCP client has no uid)"},
	{field: "RedisUsers", flag: "redis-users", reload: true,
		help: "users file of the Redis door, in Redis ACL syntax (user NAME on >PASSWORD ~* +@read|+@write|+@consume|+@all): AUTH's users and their roles; without it a TCP client may only read"},
	{field: "RedisTLSCert", flag: "redis-tls-cert",
		help: "PEM certificate (chain) to serve --redis-addr under TLS, with --redis-tls-key; both files are read again on SIGHUP (a new path needs a restart)"},
	{field: "RedisTLSKey", flag: "redis-tls-key",
		help: "PEM private key of --redis-tls-cert"},
	{field: "RedisDefaultTopic", flag: "redis-default-topic",
		help: "topic of the Redis keys without a ':' (topic:key otherwise)"},
	{field: "RedisPushBuffer", flag: "redis-push-buffer", check: atLeast(int64(64 << 10)),
		help: "invalidations and messages waiting for one Redis client; past it the client is disconnected"},
	{field: "RedisNotifyKeyspaceEvents", flag: "redis-notify-keyspace-events",
		help: "Redis keyspace notifications at start, as notify-keyspace-events (e.g. KEA); empty: off"},
	{field: "RedisIdleTimeout", flag: "redis-idle-timeout", check: notNegative,
		help: "close a Redis connection that sends no command for this long (subscribed and tracking ones are exempt); 0: never"},
	{field: "RedisMaxUnauthenticated", flag: "redis-max-unauthenticated", check: atLeast(1),
		help: "with --redis-users: the TCP connections that have not authenticated yet, all together; past it a new one closes the oldest"},
	{field: "RedisAuthTimeout", flag: "redis-auth-timeout", check: between(100*time.Millisecond, time.Hour),
		help: "with --redis-users: close a TCP connection that has not authenticated this long after it was accepted"},
	{field: "RedisTrackingMaxKeys", flag: "redis-tracking-max-keys", check: atLeast(10),
		help: "keys one Redis client-side-caching client is tracked for; past it a tenth of them are invalidated and forgotten"},
	{field: "MetricsAddr", flag: "metrics-addr",
		help: "TCP address of the Prometheus /metrics endpoint and the operator console, /console (e.g. 127.0.0.1:9464); empty: off"},
	{field: "ConsoleTokenFile", flag: "console-token-file",
		help: "file whose first line is the token the console asks for; without it the console is served on a loopback --metrics-addr only"},
	{field: "ReadUIDs", flag: "read-uids", reload: true,
		help: "read role (keys, topics, status, subscriptions that move no cursor): user IDs, comma separated; with --read-gids empty: anyone who can open the socket"},
	{field: "ReadGIDs", flag: "read-gids", reload: true,
		help: "read role: group IDs (primary or supplementary), comma separated"},
	{field: "ConsumeUIDs", flag: "consume-uids", reload: true,
		help: "consume role (durable cursors, consumer groups, acks, dead-letter listings): user IDs; with --consume-gids empty: the publishers"},
	{field: "ConsumeGIDs", flag: "consume-gids", reload: true,
		help: "consume role: group IDs, comma separated"},
	{field: "AllowUIDs", flag: "allow-uids", reload: true,
		help: "publish role (PUT, DELETE, POST messages): user IDs, comma separated; with --allow-gids empty: the readers"},
	{field: "AllowGIDs", flag: "allow-gids", reload: true,
		help: "publish role: group IDs (primary or supplementary), comma separated"},
	{field: "AdminUIDs", flag: "admin-uids", reload: true,
		help: "admin role (every role, group resets, dead-letter replays, other users' cursors): user IDs besides root and the daemon's own"},
	{field: "AdminGIDs", flag: "admin-gids", reload: true,
		help: "admin role: group IDs, comma separated"},
	{field: "MaxCursors", flag: "max-cursors", store: "MaxCursors",
		help: "most durable cursors on this node (each takes 1KiB of the cursors file and may hold retention back); 0: no bound"},
	{field: "MaxCursorsPerUID", flag: "max-cursors-per-uid", store: "MaxCursorsPerOwner",
		help: "most durable cursors one user creates (admins are exempt); 0: no bound"},
	{field: "MaxMembersPerUID", flag: "max-members-per-uid", check: notNegative,
		help: "most consumer-group members one user holds on this node at once (admins are exempt); 0: no bound"},
	{field: "LogLevel", flag: "log-level", reload: true,
		help: "debug, info, warn or error"},
	{field: "LogFormat", flag: "log-format", check: optional(oneOf("json", "console")),
		help: "json or console (default: console on a terminal, json otherwise)"},
}

// ptr is a pointer to s's field of c.
func (s setting) ptr(c *Config) any {
	return reflect.ValueOf(c).Elem().FieldByName(s.field).Addr().Interface()
}

// value is s's value in c.
func (s setting) value(c Config) any {
	return reflect.ValueOf(c).FieldByName(s.field).Interface()
}

// AddFlags binds every setting of c to a flag of fs, with c's current
// values as the defaults that --help shows. Each flag is marked for
// ApplyEnv, and its help ends with its environment variable.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	for _, s := range settings {
		help := s.help
		if s.reload {
			help += " (reloaded on SIGHUP)"
		}
		switch p := s.ptr(c).(type) {
		case *string:
			fs.StringVar(p, s.flag, *p, help)
		case *bool:
			fs.BoolVar(p, s.flag, *p, help)
		case *int:
			fs.IntVar(p, s.flag, *p, help)
		case *int64: // every int64 setting is a byte size
			fs.Var(newSizeValue(p), s.flag, help)
		case *time.Duration:
			fs.DurationVar(p, s.flag, *p, help)
		case *os.FileMode:
			fs.Var(newModeValue(p), s.flag, help)
		case *[]string:
			fs.StringSliceVar(p, s.flag, *p, help)
		case *[]time.Duration:
			fs.DurationSliceVar(p, s.flag, *p, help)
		case *[]uint32:
			fs.Var(newIDListValue(p), s.flag, help)
		default:
			panic(fmt.Sprintf("config: setting --%s: no flag type for %T", s.flag, p))
		}
		_ = fs.SetAnnotation(s.flag, envAnnotation, []string{EnvName(s.flag)})
		f := fs.Lookup(s.flag)
		f.Usage += " [$" + EnvName(s.flag) + "]"
	}
}

// ReloadFlags names the flags whose new values SIGHUP applies to a
// running daemon, in the order of --help; a change to another flag waits
// for a restart. For the manual page and the docs.
func ReloadFlags() []string {
	var names []string
	for _, s := range settings {
		if s.reload {
			names = append(names, s.flag)
		}
	}
	return names
}

// Changed names the flags whose values differ between a and b,
// of those SIGHUP applies (reload true) or of the others.
func Changed(a, b Config, reload bool) []string {
	var changed []string
	for _, s := range settings {
		if s.reload == reload && !reflect.DeepEqual(s.value(a), s.value(b)) {
			changed = append(changed, s.flag)
		}
	}
	return changed
}

// ReloadFields are the log fields of the settings SIGHUP applies, as c
// has them.
func ReloadFields(c Config) []zap.Field {
	var fields []zap.Field
	for _, s := range settings {
		if s.reload {
			fields = append(fields, zap.Any(s.flag, s.value(c)))
		}
	}
	return fields
}

// StoreOptions maps the configuration onto the store's options: each
// setting with a store field sets it. It assumes Validate passed for
// Flush and WhenFull.
func (c Config) StoreOptions(log *zap.Logger) store.Options {
	o := store.DefaultOptions(c.DataDir)
	ov := reflect.ValueOf(&o).Elem()
	for _, s := range settings {
		if s.store == "" {
			continue
		}
		dst, v := ov.FieldByName(s.store), reflect.ValueOf(s.value(c))
		if v.Type().AssignableTo(dst.Type()) {
			dst.Set(v)
		}
	}
	o.Flush, _ = store.ParseFlushMode(c.Flush)
	o.WhenFull, _ = store.ParseFullPolicy(c.WhenFull)
	o.Now = c.hooks.Clock
	o.ViewFromPeers = c.GossipAddr != "" // a node of a cluster takes a lost view from a peer
	if log != nil {
		o.Logger = log.Named("store")
	}
	return o
}

// withStoreDefaults is c with the store's own defaults where the store
// has one (not zero): one source of truth for the storage figures. A
// default of a type of the store's (store.FlushMode) is its String.
func (c Config) withStoreDefaults(so store.Options) Config {
	cv, ov := reflect.ValueOf(&c).Elem(), reflect.ValueOf(so)
	for _, s := range settings {
		if s.store == "" {
			continue
		}
		def, dst := ov.FieldByName(s.store), cv.FieldByName(s.field)
		if str, ok := def.Interface().(fmt.Stringer); ok && dst.Kind() == reflect.String {
			dst.SetString(str.String()) // a store.FlushMode, whose zero is a mode too
		} else if !def.IsZero() && def.Type().AssignableTo(dst.Type()) {
			dst.Set(def)
		}
	}
	return c
}

// validateStore checks the settings the store owns by the store's own
// rules (store.Options.Validate), and reports a problem under the flag
// that sets the option.
func (c Config) validateStore() error {
	err := c.StoreOptions(nil).Validate()
	var oe *store.OptionError
	if err == nil || !errors.As(err, &oe) {
		return err
	}
	i := slices.IndexFunc(settings, func(s setting) bool { return s.store == oe.Option })
	if i < 0 {
		return fmt.Errorf("store options: %w", err)
	}
	return fmt.Errorf("--%s: %s", settings[i].flag, oe.Problem)
}

// A rule checks one setting's value (of the field's type); its error
// reads after the flag's name, which Validate puts before it
// (`--ack-timeout: must be positive, got 0s`).
type rule func(v any) error

// checkSettings runs the rule of each setting that has one, in the order
// of --help, and returns the first problem under its flag.
func (c Config) checkSettings() error {
	for _, s := range settings {
		if s.check == nil {
			continue
		}
		if err := s.check(s.value(c)); err != nil {
			return fmt.Errorf("--%s: %w", s.flag, err)
		}
	}
	return nil
}

// number is v, an integer, a size or a duration, as an int64.
func number(v any) int64 { return reflect.ValueOf(v).Int() }

// show writes n as the flags spell a value of v's type: a duration
// (1h), a size (64KiB), a number.
func show(v any, n int64) string {
	switch v.(type) {
	case time.Duration:
		// 1h, not 1h0m0s.
		d := time.Duration(n).String()
		if strings.HasSuffix(d, "m0s") {
			d = strings.TrimSuffix(d, "0s")
		}
		if strings.HasSuffix(d, "h0m") {
			d = strings.TrimSuffix(d, "0m")
		}
		return d
	case int64:
		return wire.FormatSize(n)
	}
	return strconv.FormatInt(n, 10)
}

// positive: above zero.
func positive(v any) error {
	if number(v) <= 0 {
		return fmt.Errorf("must be positive, got %s", show(v, number(v)))
	}
	return nil
}

// notNegative: zero or above (zero says off, never or no bound).
func notNegative(v any) error {
	if number(v) < 0 {
		return fmt.Errorf("must not be negative, got %s", show(v, number(v)))
	}
	return nil
}

// atLeast: lo or above.
func atLeast[T int | int64 | time.Duration](lo T) rule {
	return func(v any) error {
		if n := number(v); n < int64(lo) {
			return fmt.Errorf("must be at least %s, got %s", show(v, int64(lo)), show(v, n))
		}
		return nil
	}
}

// between: lo to hi.
func between[T int | int64 | time.Duration](lo, hi T) rule {
	return func(v any) error {
		if n := number(v); n < int64(lo) || n > int64(hi) {
			return fmt.Errorf("must be %s to %s, got %s", show(v, int64(lo)), show(v, int64(hi)), show(v, n))
		}
		return nil
	}
}

// notEmpty: a string with something in it.
func notEmpty(v any) error {
	if v.(string) == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// oneOf: one of words (`must be "lan", "wan" or "local", got "x"`).
func oneOf(words ...string) rule {
	return func(v any) error {
		if slices.Contains(words, v.(string)) {
			return nil
		}
		q := make([]string, len(words))
		for i, w := range words {
			q[i] = strconv.Quote(w)
		}
		return fmt.Errorf("must be %s or %s, got %q", strings.Join(q[:len(q)-1], ", "), q[len(q)-1], v)
	}
}

// durations: a list with at least one duration, none negative.
func durations(v any) error {
	ds := v.([]time.Duration)
	if len(ds) == 0 {
		return errors.New("give at least one duration")
	}
	for _, d := range ds {
		if d < 0 {
			return fmt.Errorf("must not be negative, got %v", d)
		}
	}
	return nil
}

// optional: empty, or by r.
func optional(r rule) rule {
	return func(v any) error {
		if v.(string) == "" {
			return nil
		}
		return r(v)
	}
}

// socketPath: a path a Unix socket address holds (sun_path).
func socketPath(v any) error {
	p := v.(string)
	switch {
	case p == "":
		return errors.New("must not be empty")
	case len(p) > maxSocketPath:
		return fmt.Errorf("path of %d bytes is longer than the %d bytes a Unix socket address holds: %q", len(p), maxSocketPath, p)
	}
	return nil
}

// socketMode: permission bits that let the owner read and write.
func socketMode(v any) error {
	m := v.(os.FileMode)
	switch {
	case m&^os.ModePerm != 0:
		return fmt.Errorf("must be permission bits (0000..0777), got %#o", uint32(m))
	case m&0o600 != 0o600:
		return fmt.Errorf("the owner needs read and write permission, got %04o", uint32(m))
	}
	return nil
}

// nodeName: a name of 1 to 255 bytes.
func nodeName(v any) error {
	if err := notEmpty(v); err != nil {
		return err
	}
	if n := len(v.(string)); n > 255 {
		return fmt.Errorf("at most 255 bytes, got %d", n)
	}
	return nil
}

// parseFlush: a flush mode the store takes.
func parseFlush(v any) error {
	_, err := store.ParseFlushMode(v.(string))
	return err
}

// parseWhenFull: a policy at the retention bound the store takes.
func parseWhenFull(v any) error {
	_, err := store.ParseFullPolicy(v.(string))
	return err
}
