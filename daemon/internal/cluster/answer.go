package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"
)

// SetAnswer answers the members' questions over gossip (gossip.Ask:
// memberlist's TCP user messages, under the cluster key): a forget
// question and verify's here; other, when not nil, is asked first and
// answers the questions that are its own (the console's), reporting
// whether it did.
func (c *Cluster) SetAnswer(other func(question []byte) ([]byte, bool)) {
	c.g.SetAnswer(func(from string, question []byte) []byte {
		var fq forgetQuestion
		if json.Unmarshal(question, &fq) == nil && fq.Forget != "" {
			return c.answerForget(from, fq.Forget)
		}
		if other != nil {
			if b, ok := other(question); ok {
				return b
			}
		}
		return c.AnswerVerify(question)
	})
}

// Answer is one member's answer to a question AskAlive asked.
type Answer struct {
	// B is the answer, nil when Err is set.
	B   []byte
	Err error
	// Sent and Came are when the question went out and the answer (or
	// the error) came, by AskAlive's clock.
	Sent, Came time.Time
}

// AskAlive asks question of every alive member but this node over
// gossip, at once, each within timeout, and returns their answers by
// member name. now stamps Sent and Came (nil: time.Now; the daemon's
// clock hook in tests).
func (c *Cluster) AskAlive(ctx context.Context, question []byte, timeout time.Duration, now func() time.Time) map[string]Answer {
	if now == nil {
		now = time.Now
	}
	var mu sync.Mutex
	out := map[string]Answer{}
	var wg sync.WaitGroup
	for _, m := range c.g.Alive() {
		if m.Name == c.cfg.NodeName {
			continue
		}
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			a := Answer{Sent: now()}
			a.B, a.Err = c.g.Ask(actx, m.Name, question)
			a.Came = now()
			mu.Lock()
			out[m.Name] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// PeerHolds is, per origin, the highest seq a connected peer says it
// holds.
func (c *Cluster) PeerHolds() map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, p := range c.b.Peers() {
		if !p.Connected {
			continue
		}
		for o, seq := range p.Holds {
			out[o] = max(out[o], seq)
		}
	}
	return out
}

// Degradation kinds, the reason label of cachecast_node_degraded.
const (
	// DegradedAlone: a node of a cluster (told to join, or that remembers
	// members) sees no other member alive.
	DegradedAlone = "alone"
	// DegradedMissing: a node sees fewer members alive than it has seen:
	// a split, or members stopped or failed.
	DegradedMissing = "members_missing"
)

// Degradation says why the node runs short of its cluster once it has
// served for more than --join-timeout (served: for how long; zero before
// it serves): kind is DegradedAlone for a node told to join (--join) or
// that remembers members, alone (a wrong cluster key, a firewall, every
// other member gone); DegradedMissing for one that sees fewer members
// alive than it has seen (a partition, members stopped or failed), with
// their names. kind and why are "" when it is not degraded. Such a node
// serves what it holds, but its view gets nothing from the members it
// misses: status says so and "cachecast status" exits 1.
func (c *Cluster) Degradation(served time.Duration) (kind string, missing []string, why string) {
	select {
	case <-c.joined:
	default:
		return "", nil, "" // the first join is still on
	}
	if served <= 0 || served < c.cfg.JoinTimeout {
		return "", nil, ""
	}
	missing = c.peers.missing()
	alive, _ := c.MemberCounts()
	switch {
	case alive > 1 && len(missing) == 0:
		return "", nil, ""
	case alive > 1:
		return DegradedMissing, missing, "members missing: " + strings.Join(missing, ", ") +
			" (seen alive, now failed, left or cut off; called back until --tombstone-grace passes)"
	case len(c.join) == 0 && len(missing) == 0:
		return "", nil, "" // the first node of a cluster, before anyone joined
	case len(missing) > 0:
		return DegradedAlone, missing, "alone: every other member is gone (missing: " + strings.Join(missing, ", ") + ")"
	case c.sawPeers.Load():
		return DegradedAlone, nil, "alone: every other member is gone"
	}
	return DegradedAlone, nil, "alone: no other member answered the join of --join (a wrong --cluster-key-file, a firewall, or the others are down; the log has the seeds' answers)"
}
