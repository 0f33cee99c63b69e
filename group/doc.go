// Package group is clustering consumption: a consumer group spread over
// the nodes shares a topic's messages, each handled by one member, as
// RocketMQ's clustering model does. Broadcasting (every subscriber of every
// node sees everything) needs none of this and stays in the daemon.
//
// # Queues and allocation
//
// A topic is split into a fixed number of queues (Config.Queues, the same
// on every node): a message goes to queue fnv32a(key) mod Q, a message
// without a key to seq mod Q, so one key's messages stay in one queue and
// keep their order inside the group. The queues are divided among the
// live nodes that host members of the group, in the order of their IDs,
// by RocketMQ's AllocateMessageQueueAveragely; a node divides its queues
// among its members the same way. Which node hosts which group is itself
// replicated data: HostsTopic holds a key per (topic, group, node) with
// the node's member count and queue count (a member cannot join on a node
// whose queue count differs from that of the group's live hosts: the
// allocation needs one count), and a node that leaves or restarts writes a
// tombstone. A node writes its entry once the change has stood for
// Config.HostsInterval (a second), and only if it still differs from what
// it wrote (the member count alone is no reason): members that come and go
// within a second write nothing, and churn at most one record a second per
// group; other nodes learn of a new host that much later. A dead node's
// entry is ignored because gossip no longer
// counts it alive. Every node recomputes the allocation at each membership
// event and every Config.Interval, so a rebalance follows a death within
// memberlist's failure detection plus one interval.
//
// # Positions
//
// Every node holds every message, at offsets of its own; what a group has
// handled is therefore kept as a vector per queue: per origin, the highest
// seq such that every message of that origin in the queue up to it is
// settled (acknowledged or dead-lettered). Each origin's messages lie in
// every node's log in seq order, so the vector is exact, and a node taking
// a queue over finds where to start with the origin index (Store.
// ResumeOffset). Positions are written to OffsetsTopic, one key per queue,
// when acks move them (before the ack is answered) and every
// CommitInterval otherwise, and reach the other nodes by the ordinary
// fan-out. A group with no position yet starts at the earliest message
// retained: nothing published is skipped; reset it to latest to skip
// history.
//
// # Handover
//
// A rebalance between live nodes hands each moving queue over: the node
// giving it up stops delivering from it, waits until its members have
// settled what they hold (at most Config.Handover), and writes the
// queue's position with no owner; the node taking it over waits for that
// release (at most Config.Handover and a second more) and starts from the
// released position. A position names its owner for this. A dead owner is
// not waited for, and a node restarting releases what it served before.
// So the averaged allocation, which moves some queues between the
// survivors when a node dies, duplicates nothing while the survivors'
// members keep acknowledging.
//
// Delivery is exactly once per message while membership is stable and
// across a handover, at least once across a node's death: the next owner
// delivers again what the dead node had in flight unacknowledged (and
// what was acknowledged there but whose position had not reached a live
// node yet; with --replication=sync an ack answers once the replica holds
// the position). Two nodes that briefly disagree on the membership may
// both serve a queue for a moment: at least once, again.
//
// # Owners
//
// A group belongs, on each node, to the Owner whose member first joined it
// there; the claim is written to OwnersTopic (a key per group and node)
// before that member is served, and read back at New, so it outlives the
// members and a restart. Only the owner or an admin joins the group or
// reads its dead letters, and a message is settled only by the owner of
// the member it was delivered to. A group with no recorded owner on the
// node (from before owners were recorded) is adopted by its next joiner.
//
// # Acks, retries, dead letters
//
// A member settles each message by its ID ("<origin>-<seq>"): ack, or nack
// to refuse it. One not acknowledged within Config.AckTimeout, or refused,
// is delivered again after Config.Backoff (retry n waits Backoff[n-1], the
// last repeating), at most Config.MaxRetries times, as RocketMQ counts
// reconsume times: a message is delivered at most 1+MaxRetries times, then
// written to the group's dead-letter topic (DeadLetterTopic) with the
// reason of the last failure and the number of attempts. The back-off
// timers live in memory on the owning node; the count of failed attempts
// is written with the queue's position, so the next owner (after a
// handover, a crash or a restart) goes on counting and waits the back-off
// of the last failure again. A failure not yet written when a node dies
// (an ack timeout less than Config.CommitInterval before) is not counted.
// A member that disconnects gives its messages back without counting an
// attempt. Replay moves dead letters into the group's retry
// topic (RetryTopic), which the group reads next to its topic with its own
// vector: a replayed message goes to the group again but not to
// broadcasting subscribers, and does not touch the key's value in the view.
//
// # Reset
//
// Reset writes a new position to every queue under a higher epoch; the
// owners adopt it at their next check, dropping what they hold in flight.
// A position with a lower epoch than the one a node holds is not written
// over it.
//
// # Limits
//
// A node reads each group's topic once for all its members. A message for
// a member at its max_inflight is parked, in order, until it has room,
// and the reader goes on for the others; only past 10,000 parked messages
// does the reader wait. Every member of a group, on every node, must name
// the same tags, as RocketMQ requires: a message one node's filter skips
// counts as handled. A member with other tags, or on a node with another
// queue count, is refused while the group has live hosts that differ.
//
// # The store
//
// A Manager reads the node's store through Store (store.go): the values
// of its internal topics, the topics' logs in order, the node's vector
// and its change signal; StoreOf makes one of a *store.Store, and it
// writes through Config.Write. The package's unit tests run on a store
// held in memory, held to the real one's answers by a test of its own;
// the daemon's tests run groups on real stores and real clusters.
package group
