package wire

// Fleet is the body of GET /v1/fleet: every member as the node asked sees
// it (GET /v1/cluster's list), each with the figures the member itself
// answered over gossip (its keys, its records, the records it published
// and applied, its flags), or why it did not answer. The operator console
// and `cachecast top` show it; a rate is the difference of two answers'
// counters over their times.
type Fleet struct {
	// Node is the node that answered; Time when (RFC 3339, milliseconds).
	Node string `json:"node"`
	Time string `json:"time"`
	// ClockBehind: most peers' records arrive stamped ahead of the
	// answering node's clock (see ClusterStatus).
	ClockBehind bool          `json:"clock_behind,omitempty"`
	Members     []FleetMember `json:"members"`
}

// FleetMember is one member of GET /v1/fleet. The fields from State to
// HeldRecords are the answering node's view of the member (as in
// ClusterMember); Summary is the member's own answer, nil when it did not
// answer in time (Error says why) or is not alive.
type FleetMember struct {
	Name      string `json:"name"`
	Origin    string `json:"origin"`
	State     string `json:"state"` // alive, suspect, dead, left
	Addr      string `json:"addr"`
	Self      bool   `json:"self,omitempty"`
	Connected bool   `json:"connected"`
	Protocol  uint8  `json:"protocol,omitempty"`
	TooOld    bool   `json:"too_old,omitempty"`
	// Lag is how far the member is behind the answering node, per origin.
	Lag               []OriginLag `json:"lag,omitempty"`
	ClockAhead        bool        `json:"clock_ahead,omitempty"`
	ClockAheadSeconds float64     `json:"clock_ahead_seconds,omitempty"`
	HeldRecords       int         `json:"held_records,omitempty"`
	// ClockOffsetSeconds is the member's clock (its summary's Time)
	// against the answering node's at the middle of the question's round
	// trip (RoundTripSeconds); 0 for the node itself and without a summary.
	ClockOffsetSeconds float64      `json:"clock_offset_seconds,omitempty"`
	RoundTripSeconds   float64      `json:"round_trip_seconds,omitempty"`
	Summary            *NodeSummary `json:"summary,omitempty"`
	Error              string       `json:"error,omitempty"`
}

// NodeSummary is what a member answers about itself for GET /v1/fleet:
// cheap figures only (no view digest), so that a console may ask for it
// every second.
type NodeSummary struct {
	Name          string  `json:"name"`
	Version       string  `json:"version"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Time is the member's wall clock when it answered (RFC 3339,
	// milliseconds): the difference with the answering node's is its
	// clock offset, give or take the question's round trip.
	Time string `json:"time"`
	Keys int    `json:"keys"`
	// Records counts the records appended or replayed since the store
	// opened; Published the records of the member's own origin it holds,
	// Applied those of every other origin (their sum is its vector's).
	Records   uint64 `json:"records"`
	Published uint64 `json:"published"`
	Applied   uint64 `json:"applied"`
	// Degraded, Away and CatchUp are as in Status; ClockBehind as in
	// ClusterStatus.
	Degraded    string         `json:"degraded,omitempty"`
	Away        string         `json:"away,omitempty"`
	ClockBehind bool           `json:"clock_behind,omitempty"`
	CatchUp     *CatchUpStatus `json:"catch_up,omitempty"`
	Healthy     bool           `json:"healthy"`
	// Observer is the member's consistency observer (as in Status, its
	// peers and differences left out): its freshness p99 and agreement;
	// absent on a node without a cluster.
	Observer *ObserverStatus `json:"observer,omitempty"`
}

// KeyAcross is the body of GET /v1/topics/{topic}/nodes/{key}: one key
// as every live member holds it, asked over gossip with a timeout per
// member. Same is true only when every member answered and every answer
// is the same entry (value, tag, stamp, expiry, pending records); a
// member that did not answer is never counted as the same.
type KeyAcross struct {
	Topic string        `json:"topic"`
	Key   string        `json:"key"`
	Same  bool          `json:"same"`
	Nodes []KeyOnMember `json:"nodes"`
}

// KeyOnMember is one member's answer in KeyAcross. Answered is false when
// it did not answer in time, or not at all (Error says why); Found is
// false when it answered that it holds no live value for the key (Entry
// nil; Pending may still list scheduled records). Differs: the member's
// answer is not the one most answering members gave.
type KeyOnMember struct {
	Name     string     `json:"name"`
	Self     bool       `json:"self,omitempty"`
	Answered bool       `json:"answered"`
	Error    string     `json:"error,omitempty"`
	Found    bool       `json:"found"`
	Entry    *KeyEntry  `json:"entry,omitempty"`
	Pending  []KeyEntry `json:"pending,omitempty"`
	Differs  bool       `json:"differs,omitempty"`
}

// KeyEntry is a value as the console shows it: Value is the text when it
// is UTF-8, else hex (Binary), cut at a preview's length (Truncated);
// SHA256 is the whole value's, what members are compared on.
type KeyEntry struct {
	Value     string `json:"value"`
	Binary    bool   `json:"binary,omitempty"`
	Size      int    `json:"size"`
	Truncated bool   `json:"truncated,omitempty"`
	SHA256    string `json:"sha256"`
	Tag       string `json:"tag"`
	Origin    string `json:"origin"`
	Seq       uint64 `json:"seq"`
	HLC       string `json:"hlc"`
	// Time is the HLC's wall time; ExpiresAt and EffectiveAt are empty
	// when unset (RFC 3339, milliseconds).
	Time        string `json:"time"`
	ExpiresAt   string `json:"expires_at,omitempty"`
	EffectiveAt string `json:"effective_at,omitempty"`
	// Delete and Cancel mark a pending scheduled delete and a cancel.
	Delete bool `json:"delete,omitempty"`
	Cancel bool `json:"cancel,omitempty"`
}

// KeyHistory is the body of GET /v1/topics/{topic}/history/{key}: the
// key's records in its topic's log on the node asked, newest first. The
// log is read from the topic's last message back, within the route's
// bounds (?limit= records of the key, ?scan= messages of the topic, and
// a budget of bytes); Scanned counts the messages looked at. Truncated is
// true when the scan stopped before the topic's oldest message retained:
// older records of the key may be in the log. A node holds only what its
// retention keeps, and none of what it took from a peer's snapshot.
type KeyHistory struct {
	Topic     string          `json:"topic"`
	Key       string          `json:"key"`
	Records   []HistoryRecord `json:"records"`
	Scanned   uint64          `json:"scanned"`
	Truncated bool            `json:"truncated"`
}

// HistoryRecord is one record of a key in KeyHistory: Kind is "write",
// "delete", "cancel" (of the scheduled records at its effective_at),
// "expiry" (a change of the expiry of the version Target names, to
// expires_at; none: no expiry; with Absent and no Target, of the revival
// of a key never held) or "counter" (an increment, its value, of the
// version Target names, or with Absent of the key's absence after that
// version: deleted or expired, or with no Target never held by the
// node); Offset is its offset in the topic on the node asked. The fields
// of KeyEntry are the record's (value, tag, origin, seq, hlc, time,
// expires_at, effective_at).
type HistoryRecord struct {
	Offset uint64 `json:"offset"`
	Kind   string `json:"kind"`
	KeyEntry
	Target *Version `json:"target,omitempty"`
	Absent bool     `json:"absent,omitempty"`
}

// Version names one version of a key: the stamp of the record that
// wrote it.
type Version struct {
	HLC    string `json:"hlc"`
	Origin string `json:"origin"`
	Seq    uint64 `json:"seq"`
}

// GroupsAcross is the body of GET /v1/fleet/groups: every member's
// consumer groups as it answered (its GET /v1/groups: the allocation, and
// its own part, members, in-flight messages, backlog and counters), asked
// over gossip as GET /v1/fleet asks. Node is the node that answered.
type GroupsAcross struct {
	Node  string           `json:"node"`
	Nodes []GroupsOnMember `json:"nodes"`
}

// GroupsOnMember is one member's answer in GroupsAcross. Answered is
// false when it did not answer in time, or not at all (Error says why);
// a member that answered but does not serve yet says so in Error, with
// no groups.
type GroupsOnMember struct {
	Name     string        `json:"name"`
	Self     bool          `json:"self,omitempty"`
	Answered bool          `json:"answered"`
	Error    string        `json:"error,omitempty"`
	Groups   []GroupStatus `json:"groups"`
}
