// Package broadcast carries records between nodes: fan-out of each node's
// own records to every peer, anti-entropy repair with a few random peers
// at a time, and the acknowledgements
// that sync replication waits for. It reads and appends through a Store
// (package store's, from the daemon; an in-memory one, internal/memstore,
// in its unit tests) and takes its peer list from the membership layer
// (package gossip, wired by the daemon); it knows nothing of HTTP or of
// the local API.
//
// # Links
//
// A node has a link to every peer, but a link holds a connection only
// while it has something to do: this node's records to push that the
// peer has not acknowledged, a pull, a snapshot, an exchange (below), or
// the peer is the replica (SetReplica), whose connection stays open. A
// connection that had nothing to do for IdleTimeout (default 2s) is
// closed by its dialer; the link dials again when it has something. A
// connection opens with the handshake of package wire, which proves the
// cluster key both ways (or TLS first, then the handshake, when TLS is
// configured) and derives the connection's session keys. Then frames
// flow (package wire), each with an HMAC-SHA256 under the session key and its
// number in the stream, so that a frame changed, replayed, reordered or
// dropped on the way closes the connection before anything of it is
// applied (without a cluster key the MAC proves nothing, and without TLS
// the records travel unencrypted). On protocol 3:
//
//   - the listener sends the seq it holds of the dialer's origin at once
//     (where pushing starts), an empty ack every SyncInterval (it is
//     alive), and after each records frame an ack with the origins it
//     just appended;
//   - the dialer pushes its own records in seq order, starting after the
//     seq the listener says it holds, waking on every write to the store;
//   - the dialer pulls: for every origin where the peer's vector (as last
//     learned) is ahead of its own, it asks for the missing range (at
//     most MaxPull records at a time, again until caught up), and the
//     listener answers with the records straight from its log and a
//     pullEnd.
//
// (Protocol 2, spoken to a build of [2,2], sends the whole vector at once
// and every SyncInterval instead, and has no exchanges.)
//
// # Anti-entropy
//
// Every SyncInterval (default 1s) a node starts exchanges with Fanout
// (default 3) peers picked at random: the dialer sends its vector, the
// listener answers with its own, and each side pulls what the other has
// and it lacks (the listener through its own link to the dialer). At
// most Fanout exchanges are in flight (one still dialing counts; one
// whose dial fails is given up at once), so a slow or unreachable peer
// costs one slot, not a backlog. This is push-pull gossip over random
// peers: while few nodes hold a record, each round multiplies them by
// about 1+2×Fanout (each holder reaches Fanout peers and is reached by
// about as many), and once most hold it the rest miss it with a
// probability that squares each round, so it reaches all N nodes in
// about log_{1+2k}(N) + log log N rounds (Karp et al., "Randomized Rumor
// Spreading", FOCS 2000): 4-6 rounds for N = 1,000 and k = 3, a few
// seconds, plus the pulls' round trips. The direct fan-out (pushes, or
// NATS) delivers nearly everything first; exchanges repair what it
// missed.
//
// On protocol 5 an exchange sends digests first, and entries only where
// the vectors differ; on protocol 6 the digests compare the vectors at a
// cut a few SyncIntervals back, so that records still on their way make
// no difference. Package digest explains both, what they cost, and keeps
// this node's side of them (digest.Index); the node feeds it the
// retirements and the gaps it sees, and carries its frames.
//
// A peer of protocol 3 or 4 (an older build) gets the whole-vector
// exchange: the dialer sends its vector, the listener answers with its
// own; per node and round about 2×Fanout vectors sent and as many
// received, each of one entry per live origin. A digest frame on such a
// connection is refused as a bad frame, as the older build would. A
// peer of protocol 5 gets digests of the whole vector (its sums frames
// carry no cut).
//
// # Connections
//
// A node's open data-port connections: the replica's, about
// Fanout×(IdleTimeout/SyncInterval + 1) for its exchanges, as many
// accepted from peers exchanging with it, and those pulling from it or
// it from them; none of that depends on N. The pushes depend on the
// fan-out. With the direct one (the default over the data port) each
// origin pushes every record to every peer, so a node that writes more
// often than IdleTimeout keeps a connection to every peer open, and
// every node one from every writer. With the relay tree (Config.Tree) a
// node pushes to its tree neighbours only, at most TreeDegree+1 of them,
// plus its replica, whatever N is. Under NATS only the replica is
// pushed to. OpenPushLinks counts the connections that pushed within
// the last IdleTimeout.
//
// # Fan-out: direct, relay tree, NATS
//
// The ways a record reaches every node, with what each costs (N nodes,
// LAN round trip r, SyncInterval s); nothing is refused: a fleet of any
// size works on each, only the price changes:
//
//   - direct (Config.Tree off, TCP; with Config.TreeFrom, below that
//     many members): one hop, r plus the origin's N-1 writes; the origin's CPU, bytes and connections per
//     record grow with N, which puts the crossover to NATS at a few tens
//     of writing nodes (docs/cluster.md, from make bench-fleet);
//   - the relay tree (Config.Tree, cachecastd --tcp-fanout=tree): the
//     alive members sorted by ID laid out as a k-ary heap (k =
//     TreeDegree, default 4: node i's parent is (i-1)/k, its children
//     ki+1..ki+k), the same tree on every node that has the same
//     members. Each node pushes every record it stores, of any origin
//     (pushed to it, pulled, its own), to each tree neighbour that lacks
//     it: flooding on a tree. A link keeps a push position per origin
//     (relayed: the highest seq pushed, or known held from the peer's
//     acks and from the records the peer sent, which are never sent
//     back), and the writer wakes on every origin's append (relay, on
//     the origins that moved on). So a node holds at most k+1 push
//     connections (plus its replica, which is pushed its own records
//     directly, for sync replication) and receives each record about
//     once, in at most the tree's diameter of hops, 2 ceil(log_k N) (6
//     at N = 25, 10 at N = 1,000 with k = 4): some 10r plus a frame's
//     write at each hop. The origin's cost per record is flat in N;
//     a node's work per record is its k+1 neighbours' writes. A link's
//     writer gathers a turn's records, its own and every other origin's
//     the neighbour lacks, into one frame (up to batch.Records records
//     and batch.FrameBytes), and the listener acks once for the records
//     frames that came in together: under load a hop costs a write and
//     an ack per turn, not per origin. With Config.TreeFrom (cachecastd
//     --tcp-fanout=auto, the default, from DefaultTreeFrom members) the
//     tree is used only from that fleet size; every node told the same
//     members switches alike.
//   - NATS (Config.NATS): one publish per record, the servers fan out;
//     about 2r, flat in N for the origin, and the data-port links keep
//     only the replica's, the exchanges' and the pulls'.
//
// The tree's gaps, and what fills them. A record is stored once whatever
// the number of ways it arrives by: store.AppendRecord drops a duplicate
// (origin, seq) (ErrDuplicate; appendAll does not even ask it for one at
// or below the origin's LastSeq), so a record that comes twice (the
// origin's direct push to its replica and the tree's, or two trees while
// members disagree) costs a frame, nothing else. A record can be missed:
// the tree changes when membership does, and a new neighbour is pushed,
// of the other origins, only what this node stores from then on (the
// earlier records it has from its former neighbours, or pulls them:
// pushing every origin's whole log on a guess costs more); and while
// an inner node is dead but not yet dropped by membership (memberlist's
// suspicion, seconds), its subtree gets no pushes at all. A node that receives
// records past a gap drops them (each origin stays gap-free) and pulls
// the gap and them from the neighbour that sent them (it holds them)
// within about a SyncInterval (mayPull); what no neighbour sends is
// found by the exchanges, log_{1+2k}(N) + log log N rounds for a record
// few nodes hold (Anti-entropy above; k = Fanout), a few seconds at
// N = 1,000, and a cut-off subtree needs only one of its nodes to pull a
// record from outside: the tree then carries it to the rest. Records
// relayed on a connection that failed are pushed again: as the
// connection ends, each origin's push position moves back to what the
// peer is known to hold (rewindRelay), and the link dials again. Mixed
// fan-outs in one fleet work (the tree is computed over every member,
// whatever it runs) but a direct node does not relay, so its tree
// neighbours' subtrees get by exchanges what passes through it: set the
// same fan-out on every node.
//
//   - pushes to k random peers and the exchanges for the rest (not
//     built): bounded at once, but the rest wait for exchange rounds,
//     log_{1+2k}(N) + log log N of them (4-6 s at N = 1,000, k = 3,
//     s = 1s), a hundred times NATS's latency.
//
// # Retired origins
//
// An origin (a node's ID) that has not been a peer for RetireAfter
// (default 24h; the clock of each origin starts when this node first
// sees it absent) is retired: it is left out of the vectors this node
// sends, so vectors follow the live fleet, not every machine that ever
// ran. Retiring changes what is sent, never what is stored: the store
// keeps every origin's last seq, so a record of a retired origin offered
// again is still a duplicate and is dropped (nothing comes back), and its
// records stay in the log and the view. A vector frame (on protocol 5,
// the opening sums frame and its answer) carries the
// number of retired origins and a digest of (origin, seq) over them; when
// two nodes' digests differ (one retired an origin the other did not, or
// they hold different seqs of one) each sends the other its retired list
// in full. The receiver pulls what it lacks of them (so a late peer that
// alone holds a retired origin's last records still gives them) and
// retires those origins too unless they are peers here (so the fleet's
// retired sets agree, and the digests match again after one exchange; a
// node restarted with an empty set learns it so too). An origin that is a
// peer again is not retired. PeerStatus.RetiredHolds is what a peer holds
// of the retired origins as of the last exchange (its list, or this
// node's when the digests matched), for a caller that needs every live
// node's holding of them (the daemon's tombstone collection).
//
// # Counters
//
// Stats returns, since New: VectorEntriesSent and VectorEntriesReceived
// ((origin, seq) entries of acks, vectors, retired lists and entries
// frames, and the tree nodes of sums and entries frames, each counted as
// one entry), ExchangeEntries (the part of both the exchanges' vector,
// sums and entries frames carried; the rest, acks, is a cost per record
// pushed),
// BytesSent and BytesReceived (every handshake and frame byte on the data
// port, records included; TLS's own bytes are not counted), OpenOutbound
// and OpenInbound (connections open now), Rounds, Exchanges, Dials,
// IdleCloses and Retired. VectorEntries is the sum of the two entry
// counts. The daemon exports them as cachecast_cluster_vector_entries_total,
// _data_bytes_total, _data_connections, _anti_entropy_exchanges_total and
// _retired_origins.
//
// A stuck peer stalls nobody: every frame must be written within
// PeerTimeout (default 10s), and the dialer must hear from the listener
// within it (an ack comes every SyncInterval), else the connection is
// closed, counted (Stalls) and redialed. The connections a peer opened to
// this node are closed when membership drops it (it left or failed). A
// link's redial waits from 50ms doubling up to 2s, and starts again from
// 50ms after a connection that worked.
//
// # Protocol versions
//
// A node speaks the protocol versions [ProtocolMin, ProtocolMax] (package
// wire lists what each adds, and how two nodes agree on one at the
// handshake: PeerStatus.Proto). Membership carries the same range
// (Protocols, gossip.Meta) and refuses a member with none in common
// before any dial. Tests act as other builds by changing the range a new
// Node speaks (the package variable protocols, or Config.ProtoMax).
//
// A connection below ProtocolTimed (4) never carries a record of version
// 2: a push stops before this node's first such record and holds back
// the rest of its origin (which must stay gap-free on the peer; logged,
// PeerStatus.HeldBack), a pull is answered up to it (its pullEnd a
// SyncInterval late, since an older build asks again at once), and a
// snapshot is sent only while the view has no time field. Such a record
// arriving on such a connection is refused as a bad frame, as the older
// build refuses it. Under NATS, version 2 records are left out of the
// messages while a peer (Peer.Proto) is below 4; the others pull them.
// Records of version 3 (expiry changes) travel the same way from
// ProtocolExpiry (7) on, records of version 4 (counter increments)
// from ProtocolCounter (8) on, records of version 5 from
// ProtocolAbsent (9) on, and records of version 6 from ProtocolRevival
// (10) on: the record version a connection carries
// follows its protocol (wire.MaxRecordVersion), and so does the snapshot
// version sent to a peer.
// The daemon refuses to write them meanwhile (fleet_too_old), so this is
// only for a member that comes back on an old build after they were
// written.
//
// So a record reaches every live peer directly from its origin, and a
// node that missed records (down, cut off, joined late, or any gap at all)
// gets them from whichever peer has them, also after the origin is gone.
// The anti-entropy exchanges run over the data port every SyncInterval
// rather than through memberlist's push/pull, whose LAN default interval
// is 30s.
//
// A receiver checks each record's CRC and appends it through
// store.AppendRecord, which deduplicates on (origin, seq) and keeps each
// origin gap-free; a record that skips ahead is dropped and fetched again
// by the next pull. A record stamped beyond the store's MaxClockOffset
// ahead of this node's clock is held or refused by the store (see
// "Clocks" in package store); the vector does not cover it until it is
// appended, so pulls offer it again meanwhile. A malformed frame or a corrupt record closes that one
// connection with a logged reason; nothing else is affected.
//
// # NATS
//
// With Config.NATS the fan-out goes through a NATS cluster instead of the
// pushes: each node publishes a batch of its own records once, on
// <prefix>.<origin>, and subscribes to <prefix>.>; what arrives takes the
// same path as a pushed frame (CRC check, deduplication, per-origin
// order). The links stay for everything else: the vector exchanges and the
// pulls (NATS core is at most once: a record it dropped is found missing
// by its seq and pulled), snapshots, and a direct push to the replica peer
// only (SetReplica), so that sync replication waits one TCP round trip.
// The origin's bytes sent per record stay flat as the fleet grows.
//
// # Replication
//
// WaitReplica(peer, seq) returns once the peer has acknowledged holding
// this node's record seq, that is once the peer appended it under its own
// flush mode. The daemon uses it for --replication=sync and reports a
// distinct status when the peer is missing or slower than the timeout.
//
// # Bootstrap
//
// A node takes a peer's view snapshot instead of records in three cases:
// its store lost its view at start (store.ViewFromPeer: a damaged or
// missing snapshot past a recycled log; the first peer to answer sends
// it), a pull is answered "recycled" (the peer no longer has the start of the
// range: the node joined after the oldest records were recycled, or was
// down longer than the retention), or the node lacks more than
// Config.BootstrapRecords (100,000) of the peer's records and holds fewer
// than it lacks (a fresh or wiped node, for which a snapshot is much
// cheaper than every record appended, indexed and applied). One link at
// a time bootstraps; the others pull nothing meanwhile. A peer pushes
// nothing to a node that lacks more than BootstrapRecords of its records
// until the node holds all but BootstrapRecords of them, by a snapshot or
// by pulls, whichever the node chose: the peer does not guess that choice
// from the node's vector as it last learned it, which may be old, or torn
// by the bootstrap in progress (the origins move on one at a time). The
// snapshot's sender encodes it from a clone of its view straight into
// frames (store.SnapshotTo); the node hands each frame, once its MAC is
// checked, through a pipe to store.Bootstrap on a goroutine of its own,
// outside the link's lock, so that the snapshot is applied as it arrives
// (no file, held once in memory: as the view's entries). Bootstrap
// checks the CRC on the way, puts the entries into the live view by the
// usual rule as it reads them (no second view is built; into a topic
// nothing else wrote since it was empty, as on a fresh node, in bulk: no
// lookups, entries cut from slabs, the B-tree filled on a second core)
// and, once the snapshot's end has come and its CRC matched, moves each
// origin's sequence on to the snapshot's marks, all of them at once for
// the readers of the vector; pulling then continues from there with
// records. A snapshot cut off on its way moves no origin (what it brought
// stays in the view, records of the peer's by the rule). Both ends log
// the snapshot's bytes and times (sent, received, applied).
//
// # Not yet
//
// Records are copied once into a send buffer on their way out; sending
// them straight from the map (pinned segments, writev) is a later step.
// The records a bootstrap skipped are not in the node's log, so a reader
// of a topic from the earliest position does not see them there.
//
// # Layout
//
// Package wire holds the data port's bytes (the handshake, the frames
// and their payloads), package digest one node's side of the digest
// exchanges; both stand alone, tested and fuzzed on their own. This
// package is the node that drives them: the per-peer link (link.go),
// each of its connections a session with a method per frame type the
// peer sends (session.go), its writer's turns (push.go), the snapshots
// it takes and serves (snapshot.go), the listener's side of a link
// (inbound.go), the node that owns the links, the anti-entropy rounds
// and retirement (node.go, antientropy.go), the counters (stats.go),
// the relay tree (tree.go) and the NATS fan-out (internal/natsfan;
// records are read out of the log in batches by internal/batch).
//
// It is about 3,500 lines, a third of them comments (this doc alone is
// 330): more than the 2,500 the house aims at, because the link, its
// sessions, the listener's side and the node share one state machine,
// what each peer holds and what is pulled from whom (link.holds,
// Node.mayPull, the relay tree's positions), which a package boundary
// would cut through: each of them reads and moves the others' state
// under their locks. What stands alone is out of it (wire, digest,
// internal/natsfan, internal/batch).
//
// Its tests run their clusters in one process on the in-memory store
// (internal/memstore: the view of package store/view over records held
// in slices), over real loopback TCP through internal/faultnet's cuts; a
// test that needs files (retention and recycling, a store's snapshot)
// sets testCluster.disk, and TestStoresAgree holds the two stores to the
// same behaviour.
package broadcast
