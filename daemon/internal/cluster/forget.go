package cluster

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/wire"
)

// Forgetting a member removed for good.
//
// A node counts a member it has seen and that is not alive now as
// missing (degraded members_missing or alone, verify's unreachable) and
// calls it back, for max(24h, --tombstone-grace) (peers.go): a machine
// taken out of the fleet for good would keep every node degraded that
// long. POST /v1/cluster/forget/{name} (`cachecast peers forget NAME`,
// admin) drops it from the node's remembered peers (peers.json) and from
// gossip's reconnect list; with fleet=true the node also asks every alive
// member to do the same, over gossip's Ask as verify asks, and says which
// did. A member alive now is refused (conflict), on each node, and so is
// the node itself. A forgotten member that joins again later is a member
// as any other.

// forgetQuestion asks a peer to forget a member.
type forgetQuestion struct {
	Forget string `json:"forget"`
}

// forgetAnswer is a peer's answer to a forgetQuestion. Done is set by
// every build that knows the question: an older one answers it as a
// verify question, without it.
type forgetAnswer struct {
	Name  string `json:"name"`
	Done  bool   `json:"done"`
	Held  bool   `json:"held"`
	Error string `json:"error,omitempty"`
}

// Forget forgets name here and, with fleet, on every alive member
// (POST /v1/cluster/forget/{name}).
func (c *Cluster) Forget(ctx context.Context, name string, fleet bool) (wire.ForgetResult, error) {
	res := wire.ForgetResult{Member: name}
	held, err := c.forgetHere(name, "")
	if err != nil {
		return res, err
	}
	res.Nodes = append(res.Nodes, wire.ForgetNode{Name: c.cfg.NodeName, Held: held})
	if fleet {
		res.Nodes = append(res.Nodes, c.askForget(ctx, name)...)
	}
	return res, nil
}

// forgetHere forgets name on this node (asked by from, "" for the local
// API) and reports whether it remembered or called it back.
func (c *Cluster) forgetHere(name, from string) (bool, error) {
	if name == c.cfg.NodeName {
		return false, wire.Errorf(wire.CodeConflict, "%s is this node", name)
	}
	held, err := c.peers.forget(name)
	if err != nil {
		return false, wire.Errorf(wire.CodeConflict, "%v", err)
	}
	called := c.g.Forget(name)
	c.peers.save(time.Now(), false)
	if c.peers.empty() {
		c.sawPeers.Store(false) // nobody left to miss: not "alone" for want of it
	}
	fields := []zap.Field{zap.String("member", name), zap.Bool("remembered", held), zap.Bool("called-back", called)}
	if from != "" {
		fields = append(fields, zap.String("asked-by", from))
	}
	c.log.Info("forgot a member removed for good", fields...)
	return held || called, nil
}

// answerForget answers a peer's forgetQuestion.
func (c *Cluster) answerForget(from, name string) []byte {
	a := forgetAnswer{Name: c.cfg.NodeName, Done: true}
	held, err := c.forgetHere(name, from)
	a.Held = held
	if err != nil {
		a.Error = err.Error()
	}
	b, _ := json.Marshal(a)
	return b
}

// askForget asks every alive member but this node to forget name, at
// once, each for up to verifyAskWait; their answers by name.
func (c *Cluster) askForget(ctx context.Context, name string) []wire.ForgetNode {
	question, _ := json.Marshal(forgetQuestion{Forget: name})
	answers := c.AskAlive(ctx, question, verifyAskWait, nil)
	out := make([]wire.ForgetNode, 0, len(answers))
	for _, member := range slices.Sorted(maps.Keys(answers)) {
		n := wire.ForgetNode{Name: member}
		var a forgetAnswer
		switch ans := answers[member]; {
		case ans.Err != nil:
			n.Error = "no answer: " + ans.Err.Error()
		case json.Unmarshal(ans.B, &a) != nil || !a.Done:
			n.Error = "it does not know the question (a build older than this one?): forget it there with its own `cachecast peers forget`"
		default:
			n.Held, n.Error = a.Held, a.Error
		}
		out = append(out, n)
	}
	return out
}
