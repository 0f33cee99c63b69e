// Package cluster is a cachecast node's part in its fleet, everything the
// daemon does with the other nodes: it joins them (gossip for membership,
// the broadcast node for records; cluster.go), remembers the members it
// has seen (peers.go, <data-dir>/peers.json), picks the replica and waits
// for it (--replica, --replication=sync, the Redis door's WAIT), catches
// up with the peers before the node serves reads (catchup.go), proves the
// fleet identical (verify.go, GET /v1/verify), forgets a member removed
// for good (forget.go), keeps the contact file and the rule for a node
// away longer than --tombstone-grace allows (away.go), says why a node
// runs short of its fleet (Degradation), measures freshness and
// agreement as a client would (observer.go, the idea of Meta's Polaris)
// and exports the cachecast_cluster_* metrics (metrics.go).
//
// The nodes ask each other questions over gossip (gossip.Ask:
// memberlist's TCP user messages under the cluster key): verify's, the
// catch-up's (verify's, vector only), forget's, and the console's, which
// the daemon answers (SetAnswer).
//
// The daemon (package daemon) owns a Cluster unless --gossip-addr is
// empty, wires it to the store, the consumer groups and the doors, and
// starts and stops it; Config is the part of the daemon's settings the
// cluster takes. Every goroutine here is owned: the membership and join
// loops by the Cluster (Close waits for them), CatchUp and Observer.Run
// by their caller, which stops them by closing the channel it passes.
package cluster
