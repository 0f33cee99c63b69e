// Package broadcast carries records between nodes: fan-out of each node's
// own records to every peer, anti-entropy repair, and the acknowledgements
// that sync replication waits for. It reads and appends through package
// store and takes its peer list from the membership layer (package gossip,
// wired by the daemon); it knows nothing of HTTP or of the local API.
//
// # Links
//
// Every node dials every peer's data port (one outbound link per peer,
// redialed with backoff while the peer is a member) and accepts the
// peers' links. A connection opens with the handshake of handshake.go,
// which proves the cluster key both ways (or TLS first, then the
// handshake, when TLS is configured) and derives the connection's session
// keys. Then frames flow (frame.go), each with an HMAC-SHA256 under the
// session key and its number in the stream, so that a frame changed,
// replayed, reordered or dropped on the way closes the connection before
// anything of it is applied (protocol 2; without a cluster key the MAC
// proves nothing, and without TLS the records travel unencrypted):
//
//   - the listener sends its whole version vector (origin -> highest seq
//     held) at once and every SyncInterval, and after each records frame
//     an ack with the origins it just appended;
//   - the dialer pushes its own records in seq order, starting after the
//     seq the listener says it holds, waking on every write to the store;
//   - the dialer pulls: for every origin where the listener's vector is
//     ahead of its own, it asks for the missing range (at most MaxPull
//     records at a time, again until caught up), and the listener answers
//     with the records straight from its log and a pullEnd.
//
// A stuck peer stalls nobody: every frame must be written within
// PeerTimeout (default 10s), and the dialer must hear from the listener
// within it (the vector comes every SyncInterval), else the connection is
// closed, counted (Stalls) and redialed. The connections a peer opened to
// this node are closed when membership drops it (it left or failed). A
// link's redial waits from 50ms doubling up to 2s, and starts again from
// 50ms after a connection that worked.
//
// # Protocol versions
//
// A node speaks the protocol versions [ProtocolMin, ProtocolMax] (both 2
// in this build: 1 had no frame MAC and is not spoken). Both hellos of
// the handshake carry the sender's range; each side takes the highest
// version in both (PeerStatus.Proto) or, with none in common, refuses the
// connection with ErrHandshake naming both ranges (the listener answers
// its hello first, so that the dialer can say so too). A build that adds
// a version keeps the previous one in its range until the whole fleet
// runs it; then the next build may raise ProtocolMin. Membership carries
// the same range (Protocols, gossip.Meta) and refuses such a member
// before any dial. Tests act as other builds by changing the range a new
// Node speaks (the package variable protocols).
//
// So a record reaches every live peer directly from its origin, and a
// node that missed records (down, cut off, joined late, or any gap at all)
// gets them from whichever peer has them, also after the origin is gone.
// The anti-entropy exchange runs over the data port every SyncInterval
// (default 1s) rather than through memberlist's push/pull, whose LAN
// default interval is 30s.
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
// order). The links stay for everything else: the vector exchange and the
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
// When a pull is answered "recycled" (the peer no longer has the start of
// the range), the node asks that peer for its view snapshot, merges it
// into its own view by the usual rule and moves each origin's sequence on
// to the snapshot's marks (store.Bootstrap); pulling then continues from
// there with records. A node that joins after the oldest records were
// recycled, or that was down longer than the retention, converges so.
//
// # Not yet
//
// Records are copied once into a send buffer on their way out; sending
// them straight from the map (pinned segments, writev) is a later step.
// The records a bootstrap skipped are not in the node's log, so a reader
// of a topic from the earliest position does not see them there.
package broadcast
