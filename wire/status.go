package wire

// Status is the body of GET /v1/status.
type Status struct {
	Node struct {
		Name    string `json:"name"`
		Origin  string `json:"origin"`
		Version string `json:"version"`
	} `json:"node"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	Flush         string  `json:"flush"`
	Store         struct {
		Segments       int    `json:"segments"`
		MappedSegments int    `json:"mapped_segments"`
		LogBytes       int64  `json:"log_bytes"`
		WritePos       int64  `json:"write_pos"`
		FlushedPos     int64  `json:"flushed_pos"`
		OldestPos      int64  `json:"oldest_pos"`
		Records        uint64 `json:"records"`
		Keys           int    `json:"keys"`
	} `json:"store"`
	// Redis is the Redis front door's counters; absent when it is off.
	Redis *RedisStatus `json:"redis,omitempty"`
	// Degraded says why a node told to join (--join) runs alone past
	// --join-timeout; absent when it does not.
	Degraded string `json:"degraded,omitempty"`
	// View is the view's digest per topic and the vector it covers.
	View *ViewDigest `json:"view"`
	// CatchUp is the catch-up with the cluster before the node's first
	// ready; absent once it is done.
	CatchUp *CatchUpStatus `json:"catch_up,omitempty"`
}

// CatchUpStatus is where a node stands in its catch-up with the cluster
// before its first ready, in GET /v1/status and in a catching_up error.
type CatchUpStatus struct {
	// Phase is "joining" (the first join is on), "asking" (the peers are
	// asked for their vectors), "pulling" (records are coming) or "done".
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
