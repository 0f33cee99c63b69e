// Package resp is cachecast's Redis front door: a server of the Redis
// protocol (RESP2 and RESP3) beside the HTTP API, so that an application
// reads and writes the node's view with the Redis client it already has
// (go-redis, redis-py, Jedis, Lettuce, ioredis, rueidis, redis-cli). The
// daemon serves it on --redis-socket (a Unix socket beside --socket, same
// mode) and, optionally, --redis-addr (TCP, loopback only unless
// --redis-allow-remote).
//
// The server reaches the node through Node, a narrow interface: reads from
// the local view, one publish path for writes (the daemon's, with its
// checks, limits, flush mode, replication and statuses), WAIT's replica
// confirmation, and a follower of every record the node stores. It adds no
// write logic of its own.
//
// # Keys
//
// A Redis key topic:key is the key key of topic topic, split at the first
// ':' (prices:sku-42 is topic prices, key sku-42; a:b:c is topic a, key
// b:c). A key without ':' lives in --redis-default-topic (default
// "default"): GET sku-42 reads default:sku-42. A hash is a topic and its
// fields are the topic's keys: HGET prices sku-42 is GET prices:sku-42, and
// TYPE prices is hash. Names follow the API's rules (a topic is 1 to 128
// bytes of A-Z a-z 0-9 . _ -; a key 1 to 1024 bytes of UTF-8); a write of a
// name outside them is refused (ERR invalid_name: ...), a read of one finds
// nothing.
//
// # Commands
//
// Connection: HELLO 2|3 [AUTH user pass] [SETNAME name], AUTH, CLIENT
// (ID, SETNAME, GETNAME, SETINFO, INFO, LIST [TYPE type | ID id...],
// TRACKING, CACHING, GETREDIR, TRACKINGINFO, REPLY ON|OFF|SKIP, HELP;
// NO-EVICT ON|OFF, NO-TOUCH ON|OFF and CAPA answer OK; KILL is not
// served), SELECT 0,
// PING, ECHO, QUIT, RESET, READONLY, READWRITE. Who may read and write
// is the node's to say, by the connection (AuthorizeRead, Authorize): the
// daemon asks a Unix client's uid and groups (SO_PEERCRED) and a TCP
// client's user. AUTH [user] password and HELLO's AUTH ask a node that is
// an Authenticator (auth.go) to make the connection a user's (the
// daemon's --redis-users); an error is Redis's WRONGPASS. While the node
// says a connection must authenticate (MustAuthenticate), every command
// but AUTH, HELLO (with AUTH), QUIT and RESET is answered "NOAUTH
// Authentication required." and the connection goes on, as in Redis;
// RESET returns the connection to no user (Authenticator.Logout), as
// Redis returns it to the user default. A node that is not an Authenticator
// answers AUTH as a Redis without passwords does. The read
// role is asked at a connection's first command and again at its next
// command after RolesChanged (a SIGHUP's reload): without it the command
// is answered NOPERM and the connection closed. RolesChanged closes at
// once the subscribed and tracking connections that lost it (they
// receive without sending commands). Every command flagged write asks
// Authorize once, before anything else of it (the node's state, MULTI's
// queue, a read of the key), as Redis checks its ACL: a writer without
// the role gets NOPERM even where the write would do nothing (EXPIRE of
// a missing key). Pipelined SETs are checked by the node's write path.
//
// MONITOR, for the admin role only, streams every command the server
// runs as Redis writes it (+<unix time.micros> [0 <addr or unix:path>]
// "arg" ..., quoted as Redis quotes; AUTH and HELLO are not sent); a
// command queued in MULTI is sent when it is queued.
//
// CLIENT REPLY OFF drops the answers of the connection's commands until
// ON, SKIP the next command's only (reply.go); messages, invalidations
// and the subscription commands' confirmations still arrive, as Redis
// writes those as pushes.
//
// DEBUG, for the admin role only (resp/internal/admin/debug.go): SLEEP
// seconds holds the calling connection only (at most 10 s; its next
// commands and pushes wait; the event loop hands it to a goroutine of
// its own first, so the other connections are served meanwhile, where
// Redis stops them all);
// PROTOCOL type answers Redis's test value of each RESP type; HELP. The
// other subcommands are answered Redis's "unknown subcommand or wrong
// number of arguments".
//
// Server: INFO [section ...] (server, with the TCP listener's tcp_port;
// clients; memory: used_memory is what the Go runtime holds in use,
// used_memory_rss the process's resident set (/proc/self/statm, the
// store's mapped pages included), used_memory_peak the highest
// used_memory INFO has seen, maxmemory the runtime's GOMEMLIMIT (0: none);
// persistence with loading (1, with cachecast_catch_up_lag_records, while
// the node catches up with its cluster before its first ready; 0 after);
// stats; replication; cpu; commandstats (calls only); cluster
// (cluster_enabled:0); keyspace: db0:keys=N,expires=0,avg_ttl=0, left out
// with no key, as Redis does (expires is not counted); and cachecast:
// node, origin, members and their lag; no argument or default prints all
// but commandstats, all and everything every one, as Redis's sections);
// CLIENT LIST and CLIENT INFO write Redis 7.2's fields in its order (addr
// ip:port, or the Unix socket's path and :0 as Redis writes it; laddr,
// fd, idle, flags (N, P, x, t, B, U), multi, cmd, redir, resp); the
// buffer fields Redis keeps of its allocator are 0. CLIENT LIST shows a
// caller without the admin role only the connections of its own uid or
// Redis user (Redis keeps it for @admin). COMMAND, COMMAND COUNT/LIST/INFO/DOCS, CONFIG GET (a few
// parameters), CONFIG SET notify-keyspace-events, DBSIZE, TIME. CLUSTER
// answers "ERR This instance has cluster support disabled": every node is
// a standalone endpoint that holds the whole view (clients that probe for
// a cluster fall back to standalone on it).
//
// Reads, from the local view: GET, MGET, EXISTS, TYPE, STRLEN, GETRANGE,
// TTL and PTTL (-1: no expiry; -2: no key), EXPIRETIME and PEXPIRETIME,
// CACHECAST.PENDING key (the key's scheduled values not in force yet, as
// [effective-at-ms, value] pairs, nil for a scheduled delete), OBJECT
// ENCODING (int, embstr or raw for a key, listpack or hashtable for a
// topic, as Redis 7.0 would store them) and OBJECT HELP (FREQ,
// IDLETIME and REFCOUNT are not served), SCAN cursor [MATCH p] [COUNT n] [TYPE
// string|hash], KEYS, HGET, HMGET, HEXISTS, HSTRLEN, HLEN, HKEYS, HVALS,
// HGETALL, HSCAN cursor [MATCH p] [COUNT n] [NOVALUES]. SCAN walks the
// string keys (every value once, as topic:key or a bare default-topic
// key); TYPE hash lists the topics. HGETALL, HKEYS and HVALS answer at
// most 10,000 keys and KEYS 100,000: past that, an error points at HSCAN
// or SCAN. A cursor is a number the server maps onto a position; it keeps
// the last 4,096 cursors, and an older one is an error (start at 0 again);
// it is read as Redis reads it (+0 and -0 are 0; -1, the largest, is the
// end of the scan). GET of a topic name (a hash) is WRONGTYPE, and so is
// a hash read (HGET and the rest, HSCAN, HDEL) of a string key that is
// not also a topic. While the node catches up
// with its cluster before its first ready (Node.State, package command's
// one rule for both doors), every read (the commands flagged readonly)
// answers "-LOADING this node is catching up with the cluster: N records
// behind ...", the message of the HTTP API's catching_up, before MULTI would queue
// it, as a Redis loading its dataset does (clients retry it); writes and
// the connection, server and pub/sub commands are served. A node that
// left its cluster for being out of contact with its fleet too long (more
// than half of --tombstone-grace; Node.State) answers every read and write
// "-CLUSTERDOWN out of contact with the fleet for ...; restart it with
// --start-over ...", the reason the HTTP API's unavailable names, as a
// Redis Cluster node cut off from its cluster does; the connection,
// server and pub/sub commands are still served.
//
// Writes, through the node's publish path: SET key value [EX s | PX ms |
// EXAT unix-s | PXAT unix-ms | KEEPTTL] [NX | XX] [GET] [EFFECTIVEAT
// unix-ms], SETNX, GETSET, GETDEL, GETEX key [EX | PX | EXAT | PXAT n |
// PERSIST] (NX, XX, GET and the old values are decided on this node's
// view of the key, which a newer write made on another node may not have
// reached: NX may write where another node holds a value, and the old
// value answered is this node's; each writes only what the client sent:
// a value, a delete, or GETEX's expiry by EXPIRE's path), FLUSHDB and
// FLUSHALL [ASYNC | SYNC] (refused unless Config.AllowFlush, and then
// for the admin role only (Node.AuthorizeAdmin): one batch of deletes of
// every key of every topic, which every node applies whole), SETEX, PSETEX, EXPIRE,
// PEXPIRE, EXPIREAT, PEXPIREAT (with NX, XX, GT, LT), PERSIST,
// CACHECAST.CANCEL key unix-ms (cancels the key's values scheduled for
// that instant: 1, or 0 when none is pending), MSET (one batch: all or
// nothing, and visible together on every node: MGET reads its keys at one
// instant, so it sees all of a batch or none), DEL and UNLINK
// (tombstones for the keys this node holds; the answer counts them, a
// key named twice once), HSET
// and HMSET (one batch), HDEL, PUBLISH channel message (a keyless message
// on the topic the channel names, to every node; the answer counts the
// local subscribers).
//
// INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, HINCRBY and HINCRBYFLOAT are
// counters that converge (resp/internal/keys/counter.go): each writes an increment bound to
// the version of the key this node holds (record.KindCounter), never the
// sum, and every node adds every increment of that version once, so
// increments made on several nodes at once all count; a later SET or DEL
// resets the counter by the ordinary rule. The answer is this node's
// value after its own increment. A key without a value counts from 0 on
// its absence (record version 5), the same way on every node, so a key
// created at once on several nodes keeps every increment. Errors are
// Redis's (not an integer, not a valid float, overflow).
//
// MULTI queues the reads and writes of keys (multi.go); EXEC runs them in
// order against the transaction's view, the node's view under the
// transaction's own earlier writes (a read after a SET in the same
// transaction sees it, as in Redis; whether one has expired is decided
// at the instant EXEC started, as Redis decides it for every key of a
// transaction), answers each command's reply in
// order, and publishes all their writes as one batch: all or nothing,
// visible together on every node, as MSET. A queueing error (an unknown
// command, a wrong arity, a writer without the publish role) makes EXEC
// answer EXECABORT; a command's own error at EXEC is its answer and the
// others go on, as in Redis; DISCARD drops the queue; a batch the node refuses (a full disk, a
// fleet too old) answers its error in the place of every command that
// wrote, and nothing is written. WATCH remembers the keys' entries in
// this node's view; EXEC answers a null array when one of them changed
// since (a write of any node, an expiry), and EXEC, DISCARD and UNWATCH
// forget them: it is not fleet-wide (another
// node may change the key at the same instant, and the latest write wins
// there as anywhere), and the check and the publish are two steps, so a
// record arriving between them is not seen.
//
// Pipelined SETs are batched: when a connection's read buffer holds
// consecutive SETs (SET key value, with an expiry or EFFECTIVEAT, not
// KEEPTTL, which reads the key), they are published as one
// batch, one call of the node's publish path with one flush and one
// replication wait, and each gets its own answer, in order. Each SET is
// checked before it joins the batch (command.Limits.Message: names,
// --max-value-size, the time fields, the record's rules), and only once:
// the batch's publish checks only what concerns the batch
// (--max-body-size here, the role in the node's write path). A SET's value is not copied out of the read buffer:
// its publish returns before the buffer is read into again. One the
// node would refuse ends the batch, which is
// published first, and then runs alone, so it gets the answer it gets
// alone and the others do not fail with it. Any other command (a read, a
// SET with options, a DEL) ends the batch too, so it sees the writes
// before it; the effects are in the pipeline's order (the last SET of a
// key wins), NOLOOP knows the batch's writes as the connection's own, and
// WAIT refers to the batch's last write. An error that is not one SET's
// (the writer's role, a full store, NOREPLICAS) answers every SET of the
// batch. HSET, MSET and DEL are not batched across commands.
//
// WAIT numreplicas timeout answers how many replicas hold this
// connection's last write: 1 once the node's replica (--replica, or its
// successor on the ring) has it, else 0 (a lone node has none). timeout 0
// waits until the replica has it; numreplicas 0 does not wait; a node has
// one replica, so numreplicas above 1 is answered when that one confirms.
// Under --replication=sync a write already waits for the replica: when
// the replica did not confirm within --replica-timeout, SET and the other
// writes answer "NOREPLICAS stored on this node but not confirmed by the
// replica (replica_timeout ...)": the write stands, and reaches the other
// nodes by fan-out and anti-entropy, as the HTTP statuses
// replica_timeout and replica_unavailable say.
//
// # Subscriptions
//
// SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE and PUNSUBSCRIBE see the records of
// every node as this node stores them. The channel of a keyless message
// (PUBLISH, or POST messages without a key) is its topic; the channel of
// an update of a key is its full name topic:key (default-topic keys too:
// default:sku-1), with the value as the message; deletions have no channel
// message. So SUBSCRIBE prices gets the topic's stream and PSUBSCRIBE
// prices:* its key updates. PUBLISH answers how many of this node's
// connections receive the message (not a client that has closed its
// connection: resp/internal/pubsub/hangup.go); PUBSUB CHANNELS, NUMSUB and NUMPAT count this
// node's subscriptions, and SHARDCHANNELS and SHARDNUMSUB find none
// (SSUBSCRIBE is not served). Keyspace notifications, when enabled (CONFIG
// SET notify-keyspace-events, or --redis-notify-keyspace-events; Redis's
// letters, K E g $ x A), send __keyspace@0__:<topic:key> with "set",
// "del" or "expired" and __keyevent@0__:set|del|expired with the key, for
// updates from every node (HSET and HDEL are sets and dels too). A
// scheduled value is a "set" (or "del") at its instant, not when it is
// published; "expired" comes when the node's timer drops the value, within
// a few milliseconds of the instant.
//
// # Time
//
// An expiry (SET EX and the rest) is carried by the record: every node
// stops serving the value at that instant by its own clock, with no delete
// sent (DESIGN.md, "Time"). EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT and
// PERSIST on an existing key write an expiry change bound to the version
// of the key this node holds (record.KindExpiry): that version gets the
// new expiry (none for PERSIST) on every node, and no other version is
// touched, so a newer value written elsewhere meanwhile is never
// replaced by the one this node held. An expiry already past expires
// that version at once (EXPIRE key 0), not a newer one. Keyspace
// notifications name them "expire" and "persist". SET ... KEEPTTL is a
// full write of the client's value with the expiry this node holds for
// the key (this node's view). TTL and
// EXPIRETIME round to the nearest second, as Redis does. The expiry
// commands answer what redis-server answers, errors included (the
// order Redis checks arguments in, its integer syntax, its overflow
// bounds), checked against a real one by the daemon's
// TestRedisTimeAgainstRedisServer; the differences are by design: APPEND
// and SETRANGE are refused (they would write a value no client sent,
// computed from this node's copy, which may be older than another
// node's), a key outside the naming rules is refused,
// a topic is a hash (TTL topic is -1) with no expiry of its own (EXPIRE
// topic is 0), and SELECT takes database 0 only. The errors of SCAN's
// and HSCAN's options and cursors (COUNT 0 is a syntax error), WAIT's
// arguments (numreplicas first, then the timeout: "timeout is
// negative") and the subcommands of OBJECT and CLIENT (an unknown one:
// "Try OBJECT HELP.", a wrong arity: 'client|id') are Redis's too, and
// checked the same way; CLIENT KILL and OBJECT FREQ, IDLETIME and
// REFCOUNT, not served, are unknown subcommands. EFFECTIVEAT, cachecast's own SET
// option (a Redis server refuses it with a syntax error, so a client
// pointed at one by mistake fails loudly), schedules the value: it is
// stored and sent to every node at once and becomes the value at that
// instant on every node; until then GET answers the value in force.
//
// # Client-side caching
//
// CLIENT TRACKING ON [REDIRECT id] [BCAST] [PREFIX p]... [OPTIN] [OPTOUT]
// [NOLOOP] and CLIENT CACHING YES|NO work as in Redis: in the default mode
// a key read on the connection (by any name it was read by: topic:key, a
// bare default-topic key, or the hash name for HGET and the other hash
// reads) is invalidated at its next change; BCAST invalidates every key
// under the prefixes. Invalidations are RESP3 pushes (>2 invalidate
// [keys]) or, for a RESP2 client, messages of __redis__:invalidate on the
// REDIRECT connection; a RESP2 client without REDIRECT is refused (Redis
// would drop its invalidations). An update that reaches this node from any
// node of the fleet invalidates the local clients once the view has it;
// the answer to a read always goes out before the invalidation of what it
// read. NOLOOP holds back the invalidations of the connection's own
// writes, but not of an expiry (a key of its own that expired), nor of
// its own write of a value that has expired by the time the follower
// reads it, as Redis sends the invalidation of a lazy expiry. The
// changes the follower finds at one wake-up (a publish, a
// batch from a peer, the keys a schedule flips at one instant) are told
// together at its end: one invalidation of all their keys for each
// client, and each subscriber's keyspace messages in one write, as Redis
// sends a BCAST client's invalidations once an event-loop turn.
// Invalidations never cross the network. A client whose pending
// invalidations and messages pass --redis-push-buffer is disconnected
// (its library drops its cache with the connection), never left stale;
// so is a tracking client whose REDIRECT connection closes. Both are
// counted (cachecast_redis_slow_clients_disconnected_total). The server
// remembers at most --redis-tracking-max-keys (Config.TrackingMaxKeys)
// keys per client in the default mode; a read of one more first sends
// the client the invalidation of a tenth of them, which it drops from
// its cache, and forgets them (as Redis does at its
// tracking-table-max-keys), so that a client's tracking memory is
// bounded and nothing it caches goes untracked.
//
// # Errors and limits
//
// Errors are Redis's: ERR, WRONGTYPE, NOPROTO, EXECABORT, NOPERM (a writer
// not on the allow-lists), OOM (store_full, disk_full), LOADING
// (catching_up), CLUSTERDOWN (unavailable: away, or stopping),
// NOREPLICAS. The refusals of package command and of the node are typed
// (*wire.Error) and mapped to these words in one place (session.ErrorText); any
// other keeps the API's code (ERR invalid_name: ...; ERR
// fleet_too_old: ... for an expiry or EFFECTIVEAT while a member of the
// cluster runs a build before them). A
// command refused for any reason writes nothing. A command is a RESP array
// of bulk strings or an inline line (telnet, split as Redis splits one:
// "quotes", 'quotes' and escapes); a bulk string is at most
// --max-value-size (at least 64 KiB), a command at most --max-body-size
// and 65,536 arguments, an inline line 64 KiB; a read buffer grown past
// 16 KiB for a large command is counted by the node's memory budget
// (the daemon's --max-body-memory, which HTTP bodies share, and its
// share of it, --max-body-memory-per-uid: a Unix client's uid's, a TCP
// client's user's, or the one all unauthenticated TCP clients share),
// and a command that would pass it is refused, before the bytes past it
// are read, with the
// budget's error and the connection closed. The commands a MULTI queues
// are counted in the same budget and share until EXEC has run them or
// the transaction is dropped: one that would pass it is refused with the
// budget's error, and EXEC aborts. A frame that breaks these
// or RESP's syntax (a bad length, a missing CRLF, a null or non-bulk
// argument) cannot be resynchronised: the connection gets "ERR Protocol
// error: ..." and is closed; other connections are not affected.
// Unknown commands and wrong arities are answered and the connection goes
// on.
//
// Connections: at most Config.MaxConnections open over every listener
// (--max-connections), one peer at most MaxConnectionsPerPeer of them
// (--max-connections-per-uid: whose, Node.Peer says: the daemon's a Unix
// client's uid, a TCP client's user; else a TCP client's IP address);
// past either, a new connection's first command is answered "ERR max
// number of clients reached ..." (Redis's words, which go-redis retries)
// and it is closed. Subscribed and tracking connections count against
// their owner's share as the others do. A connection that must
// authenticate (Authenticator.MustAuthenticate at accept) is a stranger:
// the strangers share one pool, Config.MaxUnauthenticated (64), where a
// new one closes the oldest, and each has Config.AuthTimeout (10s) to
// authenticate before it is closed (admit.go). A stranger's command is
// bounded as Redis bounds an unauthenticated client's (10 arguments,
// bulk strings of 16 KiB: "ERR Protocol error: unauthenticated multibulk
// length", "... bulk length") and to 16 KiB in all, the read buffer a
// connection starts with ("... unauthenticated command of more than 16384
// bytes"), refused when its header announces more and the connection
// closed: a stranger never grows its buffer. Once it authenticates it
// counts against its user's share (a full share refuses the AUTH and
// closes it). So idle strangers, however many, never keep out a client
// that authenticates at once. A connection that sends nothing for
// Config.IdleTimeout (--redis-idle-timeout) is closed, unless it is
// subscribed or has turned tracking on: those wait for the server. A
// client that does not read its answers is closed when a write has
// waited --write-timeout.
//
// # Connections and the event loop
//
// Redis serves every connection from one thread: an epoll over the
// sockets, a read of what arrived, the commands, one write of the
// answers. The plain request/reply connections are served the same way
// (loop.go): one goroutine, locked to its thread, waits in a
// level-triggered epoll over them; a request costs a read, a write and
// a share of an epoll_wait, and wakes no goroutine (a goroutine per
// connection cost a GET a read that finds nothing before it parks, the
// poller's wake-up and the scheduler's hand-over, about 3 µs on top of
// redis-server's 5). The loop runs the same parser and the same command
// table as a connection's goroutine (process, exec): there is one
// command path.
//
// The loop never waits. A connection leaves it for a goroutine of its
// own, for good and at the point it had reached (the bytes read and not
// run, the answers not written, the pushes queued, all kept in order),
// before a command that may wait: WAIT, SUBSCRIBE, PSUBSCRIBE, CLIENT
// TRACKING (they receive pushes, written by a pusher goroutine), DEBUG
// SLEEP and an EXEC that holds one, and
// every write when the node's publish path waits for the disk or a
// replica (--flush sync, --replication=sync: Node.PublishWaits); also
// when its client does not take its answers at once (the goroutine's
// write then waits, at most --write-timeout), and when a push is queued
// for it (a REDIRECT target of another client's tracking). MULTI stays on the loop;
// EXEC leaves it when writes wait. The loop reads and writes a
// descriptor of its own, a duplicate taken at accept, and closes the
// listener's net.Conn, so that the runtime's poller is not woken by
// its traffic; a connection handed off gets a new net.Conn of that
// descriptor. Those descriptors are non-blocking, so the loop reads and
// writes them with raw system calls, without the runtime's bookkeeping
// for a call that may block (about 2% of the loop's CPU); its
// epoll_wait, which blocks, is an ordinary system call. Idle connections (--redis-idle-timeout) are closed by a
// sweep of the loop each tenth of the timeout.
//
// Two things keep the runtime's sysmon thread from taxing the loop. With
// one P (GOMAXPROCS 1, as under taskset to one CPU), sysmon takes the P
// back from every epoll_wait that lasts over 20 µs and wakes a spinning
// thread for it; so the loop gives the runtime a second P, unless the
// user set GOMAXPROCS. And a goroutine that has not passed through the
// scheduler for 10 ms is preempted, which resets sysmon's sleep to
// 20 µs; so the busy loop yields (runtime.Gosched) every 5 ms. On one
// core, GET -c 1: 1.50 thread switches a request fell to 1.06 and the
// daemon's CPU by 18% (BENCHMARKS.md).
//
// # Why not redcon
//
// github.com/tidwall/redcon (v1.6.4) was the first choice. Its reader
// grows its buffer to whatever length a frame declares (a "$1000000000"
// header makes it allocate toward a gigabyte before any limit could
// refuse it), copies every command and allocates its argument slices per
// command (so a GET cannot run without allocating), and it writes only
// from the connection's own goroutine unless the connection is detached
// from the server's loop. Client-side caching needs pushes written at any
// moment between answers, and the limits above must hold before the bytes
// are buffered; so the protocol is written here (its codec is package
// resp/codec): a bounded parser that
// points into one read buffer, answers appended into one write buffer, and
// an event loop for the plain connections and a goroutine, and a second
// one for pushes, for a tracking or subscribed connection.
//
// # Packages
//
// This package is the server: listeners, admission, AUTH, connections
// and their event loop (loop.go), the command table and its dispatch
// (commands.go), the connection commands (HELLO, CLIENT, RESET, WAIT...),
// transactions (multi.go), a pipeline's SETs as one publish and its runs
// of GETs loaded ahead (batch.go)
// and the follower of the node's changes. The command families stand on
// one seam, resp/internal/session: a handler receives a session.Session
// (its answers, protocol, view, transaction and tracking state, and the
// one publish path back through the connection, session.Host), never the
// connection. The key space's commands (strings, hashes, counters, time,
// SCAN) are resp/internal/keys; what a connection is sent without asking
// (pub/sub and keyspace events, client-side caching's invalidations,
// MONITOR's stream) is resp/internal/pubsub, whose Hub the follower
// feeds; the commands about the server itself (INFO, CONFIG, COMMAND,
// DEBUG, DBSIZE, TIME) are resp/internal/admin. The protocol's codec
// (reader and writers) is package resp/codec; what a command means
// (checks, time rules, refusals) is package command.
//
// # Why it is this large
//
// About 3,550 lines, of which this doc, the door's command reference,
// is some 430. The rest is one connection type and what must see its
// state: the event loop that serves it, the dispatch that runs its
// commands (arity, roles, MULTI's queue, the pipelined SETs), and the
// connection commands that change it (HELLO, CLIENT, RESET, AUTH).
// Split further, the connection's fields would have to be exported to a
// package of their own; the families hold what needs only its session.
package resp
