package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cachecast/cachecast/wire"
)

// ClusterStatus is the daemon's GET /v1/cluster answer: the members as the
// node sees them. Origins are 16-digit hex strings here, as on the wire.
type ClusterStatus = wire.ClusterStatus

// ClusterMember is one member of the cluster.
type ClusterMember = wire.ClusterMember

// OriginLag is how far a member is behind the answering node on one
// origin, as of the last exchange between them (at most a second old).
type OriginLag = wire.OriginLag

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
type Verify = wire.VerifyResult

// VerifyNode is one node's digest: a SHA-256 (hex) per topic and the
// vector (origin in hex -> highest seq) it covers, or why there is none.
type VerifyNode = wire.VerifyNode

// VerifyDiff names a node whose view differs from most nodes' on topics.
type VerifyDiff = wire.VerifyDiff

// Verify asks the daemon to compare every live node's view digest.
func (c *Client) Verify(ctx context.Context) (*Verify, error) {
	var v Verify
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/verify"}, nil)}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Fleet is the daemon's GET /v1/fleet answer: every member with the
// figures it answered about itself, or why it did not.
type Fleet = wire.Fleet

// FleetMember is one member of Fleet; NodeSummary its own figures.
type (
	FleetMember = wire.FleetMember
	NodeSummary = wire.NodeSummary
)

// Fleet asks the daemon for every member's figures; the daemon asks each
// live member over gossip and waits at most timeout for each (0: the
// daemon's default, 2s).
func (c *Client) Fleet(ctx context.Context, timeout time.Duration) (*Fleet, error) {
	var q url.Values
	if timeout > 0 {
		q = url.Values{"timeout": {timeout.String()}}
	}
	var f Fleet
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/fleet"}, q)}, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// KeyAcross is the daemon's GET /v1/topics/{topic}/nodes/{key} answer:
// one key as every member holds it; KeyOnMember one member's answer.
type (
	KeyAcross   = wire.KeyAcross
	KeyOnMember = wire.KeyOnMember
)

// KeyAcross asks the daemon for key as every live member holds it, each
// given at most timeout to answer (0: the daemon's default, 2s).
func (c *Client) KeyAcross(ctx context.Context, topic, key string, timeout time.Duration) (*KeyAcross, error) {
	var q url.Values
	if timeout > 0 {
		q = url.Values{"timeout": {timeout.String()}}
	}
	var k KeyAcross
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/topics/", topic, "/nodes/", key}, q)}, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// KeyHistory is the daemon's GET /v1/topics/{topic}/history/{key} answer:
// the key's records in its topic's log on that node, newest first;
// HistoryRecord one of them.
type (
	KeyHistory    = wire.KeyHistory
	HistoryRecord = wire.HistoryRecord
)

// KeyHistory asks the daemon for key's records in its topic's log, newest
// first: at most limit of them, reading at most scan messages of the
// topic back (0 for either: the daemon's default, 20 and 10000).
// Truncated in the answer says the scan stopped before the topic's oldest
// message.
func (c *Client) KeyHistory(ctx context.Context, topic, key string, limit, scan int) (*KeyHistory, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if scan > 0 {
		q.Set("scan", strconv.Itoa(scan))
	}
	var h KeyHistory
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/topics/", topic, "/history/", key}, q)}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}
