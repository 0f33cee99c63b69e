// Package daemon is a cachecast node: it opens the store, serves the local
// API over HTTP/1.1 on a Unix socket, exports Prometheus metrics, and talks
// to systemd. cmd/cachecastd is a thin main around it:
//
//	cfg := config.Default()
//	cfg.AddFlags(fs)                    // every field is a flag ...
//	fs.Parse(os.Args[1:])
//	config.ApplyEnv(fs, os.LookupEnv)   // ... and a CACHECAST_<FLAG> variable
//	d, err := daemon.New(cfg, logger)   // validate, open the store, bind the socket
//	err = d.Run(ctx)                    // serve until ctx ends or SIGTERM/SIGINT
//
// # What is here, and what is not
//
// The daemon is the wiring of parts that live in packages of their own:
// the configuration (daemon/config: one declaration per setting, the
// defaults and the rules), the node's part in its fleet
// (daemon/internal/cluster: gossip and the data port, catch-up, verify,
// forget, the away rule, the consistency observer), the shared view's
// writer (daemon/internal/mirror), the HTTP API (daemon/httpapi), the
// sockets, callers, roles and limits (daemon/internal/access), the Redis
// door (resp) and the wire format (wire). What stays is what only the
// daemon does, about 3,000 lines with this doc, each file one concern:
// New, Run, shutdown and Reload (daemon.go, the largest), the node
// adapter both doors reach the node through and the one write path
// (node.go, redis.go, redisauth.go), the answers of the console's
// cross-node questions (console.go), the tombstone rounds and what a
// node away too long does (tombstones.go), the repair report
// (repair.go), the metrics and the health gauges, the logger (log.go).
// It stays above 2,500 lines because these all read the Daemon's own
// state (the store, the cluster, the groups, the readiness, the
// listeners): a package for any of them would take the Daemon whole
// behind an interface, and the adapter already is that interface for
// the doors.
//
// # Lifecycle
//
// New validates the Config (every setting, whether in use or not; messages
// name the flag), checks the socket's path, opens the shared view's file
// (see below), opens the store (which
// recovers it and locks the data directory: a second daemon on the same
// directory fails with an error wrapping store.ErrLocked), binds the socket
// and the metrics listener. The cluster's ports default to loopback
// (127.0.0.1:7946 and :7947); without --cluster-key-file a bind beyond
// loopback is refused (config.ErrInsecureCluster) unless --allow-insecure-cluster,
// and a node without a key warns at start. A socket file left by a crashed
// daemon is removed if nothing answers on it; a live one is
// ErrSocketInUse. The socket gets --socket-mode (default 0660: connecting
// needs write permission).
//
// Run sends READY=1 to systemd once it serves and has caught up with the
// cluster (see "Catching up" below), STATUS= lines while it runs
// (DISK FULL while writes are refused for want of space), and WATCHDOG=1 at
// half of WATCHDOG_USEC while store.Healthy() is nil (a wedged store stops
// the pings, and systemd restarts the unit; a full disk does not, since a
// restart frees no space). SIGHUP sends RELOADING=1, applies --log-level
// and the role lists (--read-*, --consume-*, --allow-*, --admin-*) from
// Config.Reload, reads the cluster keys and the data port's and the Redis
// door's TLS files again (Daemon.Reload), and sends
// READY=1. SIGTERM or SIGINT (or the context, or
// Close) shut down: STOPPING=1, stop accepting, end subscription streams,
// drain in-flight requests for at most --shutdown-timeout, close the store
// (flush and snapshot), remove the socket.
//
// # Catching up
//
// A node in a cluster is ready (/readyz 200, READY=1, the Redis door's
// INFO loading:0, the shared view's "ready" bit) once its store is
// recovered, its first join has ended and its version vector covers the
// vectors its peers reported when it joined: it asks every alive peer for
// its vector over gossip (the verify question, vector only, again every
// 500ms for at most 10s; a peer that does not answer is not waited for),
// and the records come by anti-entropy or a bootstrap from a peer's
// snapshot (package daemon/internal/cluster, catchup.go). What only a
// peer since gone reported (it left, or has been failed for 30s: a peer
// failed for a moment is still waited for), and origins whose records are
// held back by --max-clock-offset, are not waited for. Until then the
// reads of the view answer catching_up (the HTTP API: GET and HEAD of a
// key, the list of keys and /readyz, 503 with the progress, never
// not_found; the Redis door: -LOADING). Writes,
// subscriptions, status and the group routes are served. While the
// catch-up moves, every 10s the STATUS line says "CATCHING UP (pulling, N
// records behind)" and systemd is asked for one more minute
// (EXTEND_TIMEOUT_USEC), so a large view may outlast the unit's
// TimeoutStartSec; one that stops moving gets no extension and the start
// times out. The watchdog is pinged meanwhile while the store is healthy.
// A lone node, and one whose first join finds nobody, is ready at once;
// if a later join attempt finds the others, it catches up in the
// background and stays ready (it has served already).
//
// # Away from the fleet too long
//
// A node told to join that has had no connected peer for more than half
// of --tombstone-grace may hold values whose deletes the fleet has
// collected since. At start it refuses to (ErrAwayTooLong, naming
// --start-over); running, it leaves the cluster for good (its data port
// closes), answers reads of the view and every write with unavailable
// (503; the Redis door: -CLUSTERDOWN and the reason, for reads and
// writes), turns its shared view file not ready with no alive member of
// those known (localview.ErrAway), is unhealthy (/healthz, /readyz,
// the watchdog pings stop, so systemd restarts it into the refusal at
// start) and says why in /v1/status ("away"), the STATUS line (AWAY TOO
// LONG) and the log (tombstones.go).
//
// # A damaged log
//
// The store sets a damaged record of its log aside and pulls it back
// from a peer (see "Recovery" in package store); the daemon reports it:
// /v1/status has "repair" (the records still lost, each with whether a
// live peer holds it, and the totals since the start), the STATUS line
// starts with "REPAIRING, N records lost", the metrics
// cachecast_store_lost_records, _damaged_records_total and
// _repaired_records_total count them, and every 10s, when the number of
// lost records that no live peer holds changes, the log says so as an
// error naming `cachecast repair accept` (POST /v1/repair/accept), which
// gives them up. A node whose damaged records its peers hold is not ready
// until they are back when it starts (the catch-up waits for them).
// Meanwhile the node's new writes still reach its peers and the Redis
// follower (tracking, pub/sub) reads past a lost record, telling it
// once it is back.
//
// # The local API
//
// The HTTP API on the socket is package daemon/httpapi, whose package doc
// is the API's reference (the routes, their objects, errors, limits and
// roles); its wire format (error codes, statuses, the answer objects, the
// JSON appenders) is package wire, which package client shares. The
// daemon makes the socket's listener (package daemon/internal/access: the
// callers' credentials, the roles, the connection and memory limits) and
// gives the API the node through one adapter (node.go), the same one the
// Redis front door (package resp) reaches the node through.
//
// # Writes
//
// Every write goes through one method, Daemon.publish: it checks the
// caller, appends the batch to the store (which stamps origin, seq and HLC)
// and counts it. The HTTP API and the Redis front door reach it through
// the node adapter; the cluster layer extends that path (replication to
// the peer, fan-out) without touching the handlers.
//
// # The fan-out
//
// --transport picks how a write reaches the other nodes: "tcp" (the data
// port) or "nats" (a NATS cluster fans out; --nats-url and the other
// --nats-* flags). Over TCP, --tcp-fanout picks how: "direct" (each
// node pushes its own records to every peer, one hop, a connection to
// every peer while it writes), "tree" (each node relays every record it
// stores to its neighbours on a relay tree of degree 4 over the alive
// members: at most 5 push connections a node plus its replica whatever
// the fleet's size, a record at most 2 log_4(N) hops away;
// broadcast.Config.Tree) or "auto" (the default: direct below 16 alive
// members, the tree from 16; broadcast.Config.TreeFrom). Every node sees
// the same members, so all choose alike; while a membership change
// reaches them one by one, or with different --tcp-fanout values, the
// records a direct node does not relay reach the rest by the
// anti-entropy's pulls, within a few of its rounds.
// --tcp-fanout=tree with --transport=nats is refused (auto has nothing
// to choose there).
// The replica is pushed each write directly on either, so
// --replication=sync waits one round trip as before.
//
// # The shared view
//
// With --view-file (default "auto": the socket's path with ".view" for
// ".sock"; empty: off) the daemon mirrors its store's view into a
// shared-memory file in the format of package localview, which local
// processes map read-only and read with no system call. New, before the
// store recovers, takes a lock file beside it (<view>.lock: a second
// daemon on the same view is refused), clears the "ready" bit of a file an
// earlier daemon left and puts an empty, not ready generation in place;
// once the store is open, every change of the view (store.FollowView: any
// origin, deletes included) is written to the file, the changes of one
// publish (a record, an atomic batch, a PublishBatch) as one batch of the
// file that a reader's GetMany sees whole or not at all, by the store's
// follower itself when nothing is queued and it fits the file, and
// otherwise queued and applied by one goroutine, which loads the view,
// sets "ready" (once the node has caught up with its cluster: see
// "Catching up"), then applies each batch as it comes, builds the bigger
// files, and beats the heartbeat every 50ms. The file is 0640 with the
// socket's group. At each beat the mirror checks that the path still
// names its file: one deleted or replaced under it (the runtime directory
// cleaned) is put back as a new generation, the lock file taken again
// first (a view log warning); with the directory gone the view is off
// until it is back. A shutdown marks it closed (readers: not ready); a
// write error (a full tmpfs) turns it off with an error log while the
// daemon serves on, and every 5s the mirror starts over with a new file
// loaded from the store. On a tmpfs mounted huge=within_size (or always)
// the file is backed by 2 MiB pages, and random reads cost shorter page
// walks (systemd/run-cachecast.mount mounts one on /run/cachecast).
//
// # Metrics and the console
//
// With --metrics-addr, the same listener serves the operator console
// (package console, under /console; / redirects there), whose
// cross-node answers are console.go's: a question to every live member
// over gossip.Ask, beside verify's, each within its own timeout.
//
// With --metrics-addr, GET /metrics serves, on a registry of the daemon's
// own: cachecast_publish_messages_total, cachecast_publish_bytes_total,
// cachecast_api_errors_total{code}, cachecast_api_request_duration_seconds{route},
// cachecast_store_flush_duration_seconds (every flush that wrote something),
// cachecast_store_* (segments, mapped segments, log bytes, positions,
// records, view keys, view tombstones, tombstones collected, last flush,
// log_mismatches_total{kind}, and the lost, damaged and repaired records
// of "A damaged log" above),
// cachecast_replication_unconfirmed_total{status} (sync-replication
// publishes the replica did not confirm),
// cachecast_subscribers,
// cachecast_api_connections, cachecast_api_connections_evicted_total,
// cachecast_cursors,
// cachecast_cursor_oldest_lag_messages{cursor,topic,owner_uid} (the
// furthest-behind durable cursor, named), cachecast_node_info, cachecast_group_*{topic,
// group} (nodes, members, queues, inflight, backlog, delivered_total,
// acked_total, retries_total, dead_letters_total),
// cachecast_cluster_* (with a cluster: members{state}, fan-out queues and
// lag by peer, peers rejected at the handshake, bad frames, stalled peers,
// repair pulls, dropped gossip events, NATS disconnects and errors, own
// bytes sent, clocks (peers ahead, this clock behind, records held and
// refused), vector entries, anti-entropy exchanges, retired origins, data
// bytes and connections, gossip_reconnects_total{result}: gossip's tries
// to join failed members or, alone, the seeds, merged or failed),
// cachecast_log_lines_lost_total (log lines that could not be written: see
// NewLogger), cachecast_redis_* (connections, commands_total{command},
// unknown_commands_total, protocol_errors_total, tracking_clients,
// invalidations_total, slow_clients_disconnected_total, subscriptions,
// connections_refused_total, idle_closed_total,
// tracking_evicted_keys_total: the Redis front door), cachecast_view_{ready,generation,bytes,keys,queued}
// (the shared view, with --view-file), cachecast_node_{ready,healthy,
// degraded{reason},members_missing,away,disk_full,catching_up,
// repair_pending} (the node's health, 0 or 1, always exported: health.go),
// and the Go and process collectors. /healthz and /readyz are served on
// the metrics listener too, read-only.
//
// # The Redis front door
//
// The same node also speaks Redis's protocol (package resp has the
// reference: the key mapping topic:key, the commands, WAIT, client-side
// caching) on --redis-socket, by default beside --socket
// (cachecast.sock: cachecast-redis.sock; "off": none), with the same
// --socket-mode, --max-connections and credentials, and the same roles: a
// client needs the read role to be served at all (checked at its first
// command and again after a SIGHUP reloads the roles; without it the
// command gets NOPERM and the connection is closed, and a reload closes
// the subscribed and tracking connections that lost it at once), and its
// writes go through Daemon.publish, which needs publish.
// --redis-idle-timeout (5m) closes connections that send no command, but
// subscribed and tracking ones; --redis-tracking-max-keys (100,000)
// bounds what one tracking client is remembered to have cached. --redis-addr adds
// TCP (loopback unless --redis-allow-remote with --redis-users; TLS with
// --redis-tls-cert and --redis-tls-key). A TCP client has no uid: it holds
// the roles of the user of --redis-users it authenticates as (AUTH, HELLO
// AUTH), and before that read only without a users file, or NOAUTH with
// one (redisauth.go; docs/redis-users.md). AUTH on the socket narrows a
// uid's roles to the user's. GET /v1/status has a
// "redis" object with the server's counters (connections, commands,
// tracking_clients, invalidations, slow_clients_disconnected,
// protocol_errors, subscriptions, connections_refused, idle_closed,
// tracking_evicted_keys), the same as the cachecast_redis_* metrics.
package daemon
