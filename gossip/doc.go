// Package gossip is cachecast's cluster membership, over
// github.com/hashicorp/memberlist (SWIM: random probes, indirect probes,
// suspicion, gossip of state changes, periodic full state push/pull).
//
// Gossip knows nothing of messages. It carries three things:
//
//   - membership: who is in the cluster and in what state (alive, left,
//     dead), with Events for changes;
//   - node metadata: each node's origin ID, data-port address and protocol
//     version (Meta, at most MetaMaxSize = 512 bytes, memberlist's limit);
//   - opaque state blobs for anti-entropy: Config.LocalState and
//     Config.MergeState ride on memberlist's push/pull exchange.
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
// Node it passes always says StateAlive (hashicorp/memberlist#293), while
// memberlist itself knows which it was (a dead notice sent by the node about
// itself is a leave). The delegate reads that private state by reflection,
// under memberlist's lock; tests pin the result (EventLeft vs EventFailed).
// Suspicion is not reported at all, so a suspected member stays alive here
// until it is declared dead.
//
// # Anti-entropy
//
// memberlist v0.7 runs push/pull over a TCP stream with one random peer
// every PushPullInterval (and during a join), calling Delegate.LocalState
// on each side and Delegate.MergeRemoteState with the other side's blob.
// MergeRemoteState is not told who sent the blob: memberlist reads the
// peer's node list and user state from the stream (net.go
// readRemoteState, mergeRemoteState) and passes only the bytes on. So this
// package wraps every blob in an envelope carrying the sender's name and
// metadata (encodeState), and MergeState's from is the sender as it
// describes itself, completed with the gossip address and state this node
// knows for that name. It is exact, not best-effort; it is as trustworthy
// as the gossip itself (encrypted and authenticated when keys are set).
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
