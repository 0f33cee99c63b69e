package wire

// ClusterStatus is the body of GET /v1/cluster: the members as the node
// sees them. Origins are 16-digit hex strings.
type ClusterStatus struct {
	Node    string `json:"node"`
	Origin  string `json:"origin"`
	Replica string `json:"replica,omitempty"`
	// ClockBehind: most peers' records arrive stamped ahead of this
	// node's clock beyond --max-clock-offset; this node's clock is most
	// likely behind.
	ClockBehind bool            `json:"clock_behind,omitempty"`
	Members     []ClusterMember `json:"members"`
}

// ClusterMember is one member as the node sees it, with how far it is
// behind each origin the node holds.
type ClusterMember struct {
	Name     string `json:"name"`
	Origin   string `json:"origin"`
	State    string `json:"state"` // alive, suspect, dead, left
	Addr     string `json:"addr"`
	DataAddr string `json:"data_addr"`
	// Connected: the member's data port is reachable (the last connection
	// to it worked and no dial failed since); connections open on demand
	// and close when idle, so one need not be open now.
	Connected bool        `json:"connected"`
	Self      bool        `json:"self,omitempty"`
	Lag       []OriginLag `json:"lag,omitempty"`
	// ClockAhead: the member's records persistently arrive stamped
	// beyond --max-clock-offset ahead of the node's clock (its clock is
	// ahead, or the node's behind: see ClockBehind); ClockAheadSeconds is
	// by how much its last record was. HeldRecords of its records wait
	// there for the node's clock; RefusedRecords counts the offers
	// refused as too far ahead.
	ClockAhead        bool    `json:"clock_ahead,omitempty"`
	ClockAheadSeconds float64 `json:"clock_ahead_seconds,omitempty"`
	HeldRecords       int     `json:"held_records,omitempty"`
	RefusedRecords    uint64  `json:"refused_records,omitempty"`
	// Protocol is the highest data-port protocol the member speaks (its
	// gossip metadata). TooOld: it is below 4, so it cannot read records
	// with time fields, and writes with them are refused (fleet_too_old)
	// while it is alive. HeldBack is the first of this node's records
	// held back from it for that reason (0: none).
	Protocol uint8  `json:"protocol,omitempty"`
	TooOld   bool   `json:"too_old,omitempty"`
	HeldBack uint64 `json:"held_back,omitempty"`
}

// OriginLag is how far a member is behind the node on one origin, as of
// the member's last report (at most a sync interval old); Seconds is the
// age of the oldest record it lacks.
type OriginLag struct {
	Origin  string  `json:"origin"`
	Records uint64  `json:"records"`
	Seconds float64 `json:"seconds"`
}
