package client

import (
	"context"
	"net/http"
)

// ClusterStatus is the daemon's GET /v1/cluster answer: the members as the
// node sees them. Origins are 16-digit hex strings here, as on the wire.
type ClusterStatus struct {
	Node    string `json:"node"`
	Origin  string `json:"origin"`
	Replica string `json:"replica,omitempty"`
	// ClockBehind: most peers' records arrive stamped ahead of the
	// answering node's clock beyond its --max-clock-offset: its clock is
	// most likely behind.
	ClockBehind bool            `json:"clock_behind,omitempty"`
	Members     []ClusterMember `json:"members"`
}

// ClusterMember is one member of the cluster.
type ClusterMember struct {
	Name      string      `json:"name"`
	Origin    string      `json:"origin"`
	State     string      `json:"state"` // alive, suspect, dead, left
	Addr      string      `json:"addr"`
	DataAddr  string      `json:"data_addr"`
	Connected bool        `json:"connected"`
	Self      bool        `json:"self,omitempty"`
	Lag       []OriginLag `json:"lag,omitempty"`
	// ClockAhead: the member's records persistently arrive stamped ahead
	// of the answering node's clock beyond --max-clock-offset, by
	// ClockAheadSeconds for the last one. HeldRecords wait there for its
	// clock; RefusedRecords counts the offers refused as too far ahead.
	ClockAhead        bool    `json:"clock_ahead,omitempty"`
	ClockAheadSeconds float64 `json:"clock_ahead_seconds,omitempty"`
	HeldRecords       int     `json:"held_records,omitempty"`
	RefusedRecords    uint64  `json:"refused_records,omitempty"`
}

// OriginLag is how far a member is behind the answering node on one
// origin, as of the last exchange between them (at most a second old).
type OriginLag struct {
	Origin  string  `json:"origin"`
	Records uint64  `json:"records"`
	Seconds float64 `json:"seconds"`
}

// Cluster returns the cluster's members as the daemon sees them.
func (c *Client) Cluster(ctx context.Context) (*ClusterStatus, error) {
	var st ClusterStatus
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/cluster"}, nil)}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Verify is the daemon's GET /v1/verify answer: every live node's view
// digest at one common vector, and the nodes that differ from most.
type Verify struct {
	Identical    bool         `json:"identical"`
	CommonVector bool         `json:"common_vector"`
	Nodes        []VerifyNode `json:"nodes"`
	Differ       []VerifyDiff `json:"differ,omitempty"`
}

// VerifyNode is one node's digest: a SHA-256 (hex) per topic and the
// vector (origin in hex -> highest seq) it covers, or why there is none.
type VerifyNode struct {
	Name string `json:"name"`
	View *struct {
		Vector map[string]uint64 `json:"vector"`
		Topics map[string]string `json:"topics"`
	} `json:"view,omitempty"`
	Error string `json:"error,omitempty"`
}

// VerifyDiff names a node whose view differs from most nodes' on topics.
type VerifyDiff struct {
	Node   string   `json:"node"`
	Topics []string `json:"topics"`
}

// Verify asks the daemon to compare every live node's view digest.
func (c *Client) Verify(ctx context.Context) (*Verify, error) {
	var v Verify
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/verify"}, nil)}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
