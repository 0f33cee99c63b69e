package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// Proving the fleet identical (GET /v1/verify, `cachecast verify`).
//
// The node asked takes its own view digest (per topic, with the vector it
// covers) and sends its vector as a question to every live member over
// gossip (gossip.Ask: memberlist's TCP user messages, under the cluster
// key), since the members' sockets are on other machines and the data
// port has no frame for it. Each member waits (at most verifyCatchUp)
// until its vector covers the question's, then answers its own digest.
// When the vectors differ (writes in flight) the round is asked again,
// up to verifyRounds times, so that the digests compared cover one
// common vector. For each topic the digest most nodes hold is the
// reference; a node with another (or without the topic) differs on it.

const (
	verifyRounds  = 5
	verifyCatchUp = 3 * time.Second
	verifyAskWait = 10 * time.Second
)

// VerifyShare paces GET /v1/verify (VerifyTurns): after a verify
// that hashed this node's view for d in all, the next starts d times
// VerifyShare after it ended, so that callers looping on it while writes
// change the view keep this node's hashing (and, as their views are
// alike, each peer's answering them) under 1/(VerifyShare+1) of a core.
// A view that did not change is not hashed again
// (store.Store.ViewDigests): no wait.
const VerifyShare = 4

// VerifyTurns makes the callers of GET /v1/verify on a node take turns:
// one verify at a time, each one exact (Verify), paced by VerifyShare.
type VerifyTurns struct {
	turn chan struct{} // holds the verify under way
	next time.Time     // when the next may start; guarded by turn
}

// NewVerifyTurns returns a node's VerifyTurns.
func NewVerifyTurns() *VerifyTurns { return &VerifyTurns{turn: make(chan struct{}, 1)} }

// Verify is Verify once this caller's turn came: the verify under way
// ended, and the pause its hashing asks for (VerifyShare) passed. A
// caller whose ctx ends first gets an empty result (Identical false).
func (vt *VerifyTurns) Verify(ctx context.Context, st *store.Store, name string, c *Cluster) wire.VerifyResult {
	return vt.take(ctx, st.DigestStats, func() wire.VerifyResult { return Verify(ctx, st, name, c) })
}

// take runs verify in its turn; hashing reads how long the node hashed
// its view so far (store.Store.DigestStats).
func (vt *VerifyTurns) take(ctx context.Context, hashing func() (uint64, time.Duration), verify func() wire.VerifyResult) wire.VerifyResult {
	select {
	case vt.turn <- struct{}{}:
	case <-ctx.Done():
		return wire.VerifyResult{}
	}
	defer func() { <-vt.turn }()
	if wait := time.Until(vt.next); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return wire.VerifyResult{}
		}
	}
	_, before := hashing()
	res := verify()
	_, after := hashing()
	vt.next = time.Now().Add(VerifyShare * (after - before))
	return res
}

// WireDigest is a store's view digest as the wire carries it: origins
// and sums in hex.
func WireDigest(d store.ViewDigest) wire.ViewDigest {
	out := wire.ViewDigest{Vector: make(map[string]uint64, len(d.Vector)), Topics: make(map[string]string, len(d.Topics))}
	for o, seq := range d.Vector {
		out.Vector[wire.FormatOrigin(o)] = seq
	}
	for t, sum := range d.Topics {
		out.Topics[t] = hex.EncodeToString(sum[:])
	}
	if !d.At.IsZero() {
		out.At = d.At.UTC().Format(wire.TimeLayout)
	}
	return out
}

// verifyQuestion is what a node sends a member to ask for its digest.
// VectorOnly asks for the vector alone, at once (a node catching up asks
// so); a build that does not know it answers the whole digest, which
// holds the vector too.
type verifyQuestion struct {
	Vector     map[uint64]uint64 `json:"vector"`
	VectorOnly bool              `json:"vector_only,omitempty"`
}

// AnswerVerify answers a member's verify question: this node's digest
// once its vector covers the question's (or verifyCatchUp has passed).
func (c *Cluster) AnswerVerify(question []byte) []byte {
	var q verifyQuestion
	if err := json.Unmarshal(question, &q); err != nil {
		b, _ := json.Marshal(wire.VerifyNode{Name: c.cfg.NodeName, Error: "malformed question: " + err.Error()})
		return b
	}
	if q.VectorOnly {
		v := WireDigest(store.ViewDigest{Vector: c.st.Vector()})
		b, _ := json.Marshal(wire.VerifyNode{Name: c.cfg.NodeName, View: &v})
		return b
	}
	deadline := time.Now().Add(verifyCatchUp)
	for !Covers(c.st.Vector(), q.Vector) && time.Now().Before(deadline) {
		select {
		case <-c.st.Changed():
		case <-time.After(10 * time.Millisecond):
		}
	}
	v := WireDigest(c.st.ViewDigests())
	b, _ := json.Marshal(wire.VerifyNode{Name: c.cfg.NodeName, View: &v})
	return b
}

// parseVector reads the vector of an answer (origins in hex).
func parseVector(v *wire.ViewDigest) (map[uint64]uint64, error) {
	if v == nil {
		return nil, errors.New("no vector in the answer")
	}
	out := make(map[uint64]uint64, len(v.Vector))
	for o, seq := range v.Vector {
		id, err := strconv.ParseUint(o, 16, 64)
		if err != nil || len(o) != 16 {
			return nil, fmt.Errorf("origin %q: not 16 hex digits", o)
		}
		out[id] = seq
	}
	return out, nil
}

// Covers reports whether vector a holds every record b does.
func Covers(a, b map[uint64]uint64) bool {
	for o, seq := range b {
		if a[o] < seq {
			return false
		}
	}
	return true
}

// Verify (GET /v1/verify) asks every live member of c for its digest and
// compares them with the one of st, named name; the members seen but not
// alive now are named unreachable, and the fleet is not identical while
// any is. A node in no cluster (c nil) compares its own digest alone.
func Verify(ctx context.Context, st *store.Store, name string, c *Cluster) wire.VerifyResult {
	var nodes []wire.VerifyNode
	common := false
	for round := 0; round < verifyRounds && !common; round++ {
		own := st.ViewDigests()
		mine := WireDigest(own)
		nodes = []wire.VerifyNode{{Name: name, View: &mine}}
		if c != nil {
			nodes = append(nodes, c.askMembers(ctx, own.Vector)...)
		}
		common = sameVectors(nodes)
		if ctx.Err() != nil {
			break
		}
	}
	res := compareDigests(nodes, common)
	if c != nil {
		res.Unreachable = c.peers.missing()
		res.Identical = res.Identical && len(res.Unreachable) == 0
	}
	return res
}

// askMembers asks every live member but this node for its digest once it
// covers vector.
func (c *Cluster) askMembers(ctx context.Context, vector map[uint64]uint64) []wire.VerifyNode {
	question, _ := json.Marshal(verifyQuestion{Vector: vector})
	answers := c.AskAlive(ctx, question, verifyAskWait, nil)
	out := make([]wire.VerifyNode, 0, len(answers))
	for _, name := range slices.Sorted(maps.Keys(answers)) {
		v := wire.VerifyNode{Name: name}
		var n wire.VerifyNode
		switch a := answers[name]; {
		case a.Err != nil:
			v.Error = a.Err.Error()
		case json.Unmarshal(a.B, &n) != nil || n.View == nil && n.Error == "":
			v.Error = "malformed answer"
		default:
			v.View, v.Error = n.View, n.Error
		}
		out = append(out, v)
	}
	return out
}

// sameVectors reports whether every node answered with one vector.
func sameVectors(nodes []wire.VerifyNode) bool {
	for _, n := range nodes {
		if n.View == nil || !maps.Equal(n.View.Vector, nodes[0].View.Vector) {
			return false
		}
	}
	return true
}

// compareDigests finds, per topic, the digest most nodes hold (ties: the
// first node's, this one) and names the nodes that differ from it.
func compareDigests(nodes []wire.VerifyNode, common bool) wire.VerifyResult {
	res := wire.VerifyResult{CommonVector: common, Nodes: nodes}
	topics := map[string]bool{}
	answered := 0
	for _, n := range nodes {
		if n.View != nil {
			answered++
			for t := range n.View.Topics {
				topics[t] = true
			}
		}
	}
	differ := map[string][]string{}
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		count := map[string]int{}
		ref, best := "", 0
		for _, n := range nodes {
			if n.View == nil {
				continue
			}
			sum := n.View.Topics[t] // "" without the topic
			count[sum]++
			if count[sum] > best {
				ref, best = sum, count[sum]
			}
		}
		for _, n := range nodes {
			if n.View != nil && n.View.Topics[t] != ref {
				differ[n.Name] = append(differ[n.Name], t)
			}
		}
	}
	for _, n := range nodes {
		if ts := differ[n.Name]; ts != nil {
			res.Differ = append(res.Differ, wire.VerifyDiff{Node: n.Name, Topics: ts})
		}
	}
	res.Identical = common && answered == len(nodes) && len(res.Differ) == 0
	return res
}
