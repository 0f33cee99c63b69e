// Package gossip is cachecast's cluster membership, over
// github.com/hashicorp/memberlist (SWIM: random probes, indirect probes,
// suspicion, gossip of state changes, periodic full state push/pull).
//
// Gossip knows nothing of messages. It carries two things:
//
//   - membership: who is in the cluster and in what state (alive, left,
//     dead), with Events for changes;
//   - node metadata: each node's origin ID, data-port address, range of
//     protocol versions and leaving flag (Meta, at most MetaMaxSize = 512
//     bytes, memberlist's limit). A member whose range has no version in
//     common with this node's is refused (ErrNoCommonProtocol), both in
//     its alive messages and at a join, which then fails saying why.
//
// Anti-entropy (the version vectors) does not ride on memberlist's
// push/pull exchange: package broadcast runs it over the data port every
// second, where memberlist's LAN push/pull runs every 30s.
//
// # Lifecycle
//
//	g, err := gossip.New(cfg)   // binds the port; nobody knows us yet
//	n, err := g.Join(ctx)       // seeds, with retries and backoff, bounded by JoinTimeout
//	for ev := range g.Events() { ... }
//	g.Leave(5 * time.Second)    // graceful: others see StateLeft, not a failure
//	g.Shutdown()                // memberlist's rule: Leave before Shutdown
//
// A node that stops without Leave is declared dead by the failure
// detector after its suspicion timeout (EventFailed).
//
// # Reconnect
//
// memberlist gossips to a dead member only for its GossipToTheDeadTime
// (2s local, 30s LAN, 60s WAN), then forgets it. So the two sides of a
// partition that lasted longer would each carry on alone until a
// restart. As Serf does, this package remembers the members that failed
// (EventFailed) with their address, and, unlike Serf, those that left
// (EventLeft) too: a node stopped cleanly and started again without seeds
// would otherwise stay an island (a cluster of one that the others never
// call). Config.Remembered adds the members seen before this start. It
// joins one of them every ReconnectInterval (30s LAN and WAN, 1s local)
// again, picked at random, with probability failed / alive so that a
// large cluster with a few failed members makes about one try per
// interval in all, not one per node. A node that sees no other member
// alive also tries its seeds (the last Join's), so one that lost every
// peer, or whose seeds were down when it started, joins as soon as they
// answer. A member is forgotten when it joins again (by name or ID) or
// ReconnectTimeout (24h) after it failed or left. A try is a Join of one address,
// with its keys, timeouts and protocol checks; Reconnects counts the tries
// and those that merged ("reconnected to the cluster", info; a failed try
// is logged at debug). The loop ends at Leave or Shutdown.
//
// # Events
//
// memberlist calls its event delegate with its node lock held, so the
// delegate never blocks: events go to a buffered channel, and an event that
// finds the buffer full is dropped, counted (DroppedEvents) and logged. The
// member table behind Members and Alive is updated whether or not the event
// fits, so a reader that fell behind resynchronises from Members. Members
// and Alive are built from the events only, never from memberlist's
// Members, whose *Node values memberlist keeps writing under its lock.
//
// A leave and a failure look alike to memberlist's NotifyLeave: in v0.7 the
// Node it passes always says StateAlive (hashicorp/memberlist#293). So
// Leave first sets the Leaving flag in this node's metadata and gossips it
// (memberlist's UpdateNode, waited for until the update has been sent its
// full number of times, at most half of Leave's timeout), and only then
// sends memberlist's leave, as Serf marks a member leaving before it
// leaves. A member whose last metadata says Leaving is reported EventLeft
// when memberlist drops it, any other EventFailed; the flag alone is no
// event. A node that missed the flag (it was cut off while it travelled,
// or the leave reached it first) reports the leave as a failure, which is
// what it would report without the flag; a node that crashes between the
// two steps is reported as left. memberlist's private state is never
// read. Suspicion is not reported at all, so a suspected member stays
// alive here until it is declared dead.
//
// # Encryption and key rotation
//
// With Config.Keys set, every packet and stream is encrypted with AES-GCM
// under the primary key (Keys[0]) and a received one is tried against every
// installed key; plaintext is refused (memberlist's GossipVerifyIncoming
// and GossipVerifyOutgoing). A node with another key, or with none, cannot
// join: its push/pull is refused and nobody learns its name. Keys are read
// with LoadKeyFile (one base64 key per line, the primary first) and made
// with GenerateKey; KeyID gives a fingerprint safe to log.
//
// To rotate from key A to key B without a partition, change the key file on
// every node and reload (SetKeys, on SIGHUP) in three passes, each finished
// on all nodes before the next starts:
//
//  1. add B as a secondary: the file holds A then B. Every node can now
//     read B, and still writes A.
//  2. make B primary: the file holds B then A. Nodes write B, which all
//     can read; those not yet switched still write A, which all can read.
//  3. remove A: the file holds B only.
//
// Skipping a pass splits the cluster until the passes catch up: a node that
// writes B before every node can read it is unreadable to the rest.
// Encryption itself cannot be switched on or off on a running node.
//
// # Profiles
//
// Config.Profile chooses memberlist's timers: "lan" (the default,
// memberlist's DefaultLANConfig), "wan" (DefaultWANConfig) or "local"
// (loopback tests: 200ms probes, 300ms push/pull, a dead node declared in
// a second or two).
//
// # Logs
//
// memberlist logs through a *log.Logger; its "[LEVEL] memberlist: text"
// lines are parsed back into zap entries at the matching level, under the
// logger name "memberlist".
package gossip
