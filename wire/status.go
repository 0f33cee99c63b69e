package wire

// Status is the body of GET /v1/status.
type Status struct {
	// Node is the node's name (--node-name), origin ID and build version.
	Node struct {
		Name    string `json:"name"`
		Origin  string `json:"origin"`
		Version string `json:"version"`
	} `json:"node"`
	// UptimeSeconds is the time since the daemon started.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Flush is the flush mode, async or sync (--flush).
	Flush string `json:"flush"`
	// Store is the log's figures and the view's keys.
	Store StoreStatus `json:"store"`
	// Redis is the Redis front door's counters; absent when it is off.
	Redis *RedisStatus `json:"redis,omitempty"`
	// Degraded says why a node runs short of its cluster past
	// --join-timeout (alone though told to join or remembering members;
	// members it has seen missing); absent when it does not.
	Degraded string `json:"degraded,omitempty"`
	// Missing names the members this node has seen alive (or remembers)
	// and does not see alive now: a split, or members stopped; absent
	// when none is.
	Missing []string `json:"missing,omitempty"`
	// Away says why a node out of contact with its fleet for more than
	// half of --tombstone-grace left the cluster and stopped serving;
	// absent while it serves.
	Away string `json:"away,omitempty"`
	// View is the view's digest per topic and the vector it covers, as
	// at its At: the current one, or the last taken when the view
	// changed since and the node hashed it too recently to hash it
	// again (the hashing a status call causes is bounded).
	View *ViewDigest `json:"view"`
	// CatchUp is the catch-up with the cluster before the node's first
	// ready; absent once it is done.
	CatchUp *CatchUpStatus `json:"catch_up,omitempty"`
	// Repair is the repair of the node's damaged log; absent while
	// nothing was found damaged since the start.
	Repair *RepairStatus `json:"repair,omitempty"`
	// Observer is the consistency observer's summary; absent on a node
	// without a cluster.
	Observer *ObserverStatus `json:"observer,omitempty"`
}

// StoreStatus is the "store" object of GET /v1/status: the log's figures
// (positions are bytes into the log) and the view's keys.
type StoreStatus struct {
	Segments       int    `json:"segments"`        // retained, the one being written included
	MappedSegments int    `json:"mapped_segments"` // mapped: may pass segments by the next ones made ready ahead
	LogBytes       int64  `json:"log_bytes"`
	WritePos       int64  `json:"write_pos"`
	FlushedPos     int64  `json:"flushed_pos"`
	OldestPos      int64  `json:"oldest_pos"`
	Records        uint64 `json:"records"`
	Keys           int    `json:"keys"`
}

// CatchUpStatus is where a node stands in its catch-up with the cluster
// before its first ready, in GET /v1/status and in a catching_up error.
type CatchUpStatus struct {
	// Phase is "joining" (the first join is on), "asking" (the peers are
	// asked for their vectors), "pulling" (records are coming),
	// "snapshot" (the view was lost at the start with its snapshot: a
	// peer's snapshot is awaited) or "done".
	Phase string `json:"phase"`
	// LagRecords is how many records the node still lacks of what its
	// peers held when it joined (while pulling).
	LagRecords uint64 `json:"lag_records"`
}

// RedisStatus is the "redis" object of GET /v1/status.
type RedisStatus struct {
	Socket          string `json:"socket,omitempty"`
	Addr            string `json:"addr,omitempty"`
	Connections     int64  `json:"connections"`
	Commands        int64  `json:"commands"`
	TrackingClients int64  `json:"tracking_clients"`
	Invalidations   int64  `json:"invalidations"`
	SlowDisconnects int64  `json:"slow_clients_disconnected"`
	ProtocolErrors  int64  `json:"protocol_errors"`
	Subscriptions   int64  `json:"subscriptions"`
	// ConnectionsRefused counts the connections refused at
	// --max-connections or a peer's share of it.
	ConnectionsRefused int64 `json:"connections_refused"`
	// IdleClosed counts the connections closed after --redis-idle-timeout.
	IdleClosed int64 `json:"idle_closed"`
	// TrackingEvictedKeys counts the keys forgotten (and invalidated) for
	// tracking clients at --redis-tracking-max-keys.
	TrackingEvictedKeys int64 `json:"tracking_evicted_keys"`
}

// Cursor is one durable cursor in the answers of the cursor routes.
type Cursor struct {
	Name   string `json:"name"`
	Topic  string `json:"topic"`
	Offset uint64 `json:"offset"`
	// End is the topic's next offset, Lag the messages between.
	End uint64 `json:"end"`
	Lag uint64 `json:"lag"`
	// OwnerUID is the user that created the cursor; null when none is
	// recorded.
	OwnerUID *uint32 `json:"owner_uid"`
}

// RepairStatus is the "repair" object of GET /v1/status: the records of
// the node's log found damaged, set aside, and pulled back from the
// peers (see "A damaged log" in package daemon). Absent while nothing was
// ever damaged since the start.
type RepairStatus struct {
	// LostRecords is how many are still missing; Unavailable how many of
	// those no live peer holds (an operator may give them up: POST
	// /v1/repair/accept, `cachecast repair accept`).
	LostRecords int `json:"lost_records"`
	Unavailable int `json:"unavailable"`
	// DamagedTotal and RepairedTotal count, since the start, the records
	// set aside and those back from a peer.
	DamagedTotal  uint64 `json:"damaged_total"`
	RepairedTotal uint64 `json:"repaired_total"`
	// Lost lists the missing records (at most 100).
	Lost []LostRecord `json:"lost,omitempty"`
	// SnapshotSetAside is where a damaged view snapshot was moved at the
	// start (the view was rebuilt from the log); absent when none was.
	SnapshotSetAside string `json:"snapshot_set_aside,omitempty"`
	// ViewFromPeer says the view could not be rebuilt from the node's own
	// files at the start (a damaged or missing snapshot whose log was
	// recycled since): "waiting" until a peer's snapshot is taken (the
	// node is not ready meanwhile), then "done"; absent otherwise.
	ViewFromPeer string `json:"view_from_peer,omitempty"`
}

// LostRecord is one record of the node's log set aside as damaged.
type LostRecord struct {
	Origin string `json:"origin"`
	Seq    uint64 `json:"seq"`
	Topic  string `json:"topic"`
	// Segment and Offset say where it was on disk; CopiedTo where its
	// damaged bytes were saved.
	Segment  string `json:"segment"`
	Offset   int64  `json:"offset"`
	CopiedTo string `json:"copied_to"`
	Found    string `json:"found"` // RFC 3339
	// Available: a live peer holds it (it is being pulled back).
	Available bool `json:"available"`
}

// AcceptLostResult is the answer of POST /v1/repair/accept: the records
// given up.
type AcceptLostResult struct {
	Accepted []LostRecord `json:"accepted"`
}

// ForgetResult is the answer of POST /v1/cluster/forget/{name}: the
// member forgotten and, for each node asked (this one; with fleet=true
// every alive member too), what it did.
type ForgetResult struct {
	Member string       `json:"member"`
	Nodes  []ForgetNode `json:"nodes"`
}

// ForgetNode is one node's part of a ForgetResult.
type ForgetNode struct {
	Name string `json:"name"`
	// Held says the node remembered the member, or called it back,
	// before it forgot it.
	Held bool `json:"held"`
	// Error says why the node did not forget it; absent when it did.
	Error string `json:"error,omitempty"`
}

// ObserverStatus is the "observer" object of GET /v1/status: the
// consistency observer's summary (freshness of the records from peers,
// agreement of the view with theirs).
type ObserverStatus struct {
	// Summary is one line: the nines of agreement and the freshness p99.
	Summary string `json:"summary"`
	// Agreed and Differed count the conclusive comparisons of this node's
	// view digest with a peer's at a common vector since the start.
	Agreed   uint64 `json:"agreed"`
	Differed uint64 `json:"differed"`
	// AgreementRatio is Agreed / (Agreed + Differed); 1 before any.
	AgreementRatio float64 `json:"agreement_ratio"`
	// FreshnessP99Seconds is the p99 of the time from a peer's record's
	// stamp to its apply here (a histogram bucket's bound; 0 before any).
	FreshnessP99Seconds float64 `json:"freshness_p99_seconds"`
	// FreshnessP99Over says the p99 is past the histogram's last bucket:
	// FreshnessP99Seconds is then that bucket's bound, a lower bound.
	FreshnessP99Over bool `json:"freshness_p99_over,omitempty"`
	// Peers are the alive and missing members with the time since this
	// node last agreed with each.
	Peers []ObserverPeer `json:"peers,omitempty"`
	// Differences are the last comparisons that differed.
	Differences []ObserverDiff `json:"differences,omitempty"`
}

// ObserverPeer is one peer in ObserverStatus.
type ObserverPeer struct {
	Name string `json:"name"`
	// SecondsSinceAgreed is the time since this node last agreed with it
	// (since this node's start when it never did).
	SecondsSinceAgreed float64 `json:"seconds_since_agreed"`
	// LastResult is the last comparison's: agreed, differed,
	// no_common_vector, no_answer; "" before any.
	LastResult string `json:"last_result,omitempty"`
}

// ObserverDiff is a comparison that differed: the peer, the topics whose
// digests differed, and when.
type ObserverDiff struct {
	Peer   string   `json:"peer"`
	Topics []string `json:"topics"`
	At     string   `json:"at"`
}
