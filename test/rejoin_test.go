package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// restartStep stops one node of the README's layout (a the seed without
// --join, b and c joining a), writes a key on a node still up, and starts
// the stopped node again.
type restartStep struct {
	node     int  // index into a, b, c
	kill     bool // SIGKILL instead of SIGTERM
	noSeeds  bool // started again without --join
	writeVia int  // the node the key is written on while it is down
}

func (s restartStep) String() string {
	how := "SIGTERM"
	if s.kill {
		how = "SIGKILL"
	}
	seeds := "same flags"
	if s.noSeeds {
		seeds = "no --join"
	}
	return fmt.Sprintf("%s %s, restarted with %s", []string{"a", "b", "c"}[s.node], how, seeds)
}

// setJoin replaces the node's --join for its next start.
func setJoin(n *clusterNode, seeds []string) {
	args := n.opts.Args
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--join" {
			args[i+1] = strings.Join(seeds, ",")
		}
	}
}

// readmeLayout is the README's three nodes: a the seed without --join,
// b and c joining a.
func readmeLayout() []clusterSpec {
	return []clusterSpec{
		{Name: "a", Join: func([]string) []string { return nil }},
		{Name: "b", Join: func(g []string) []string { return g[:1] }},
		{Name: "c", Join: func(g []string) []string { return g[:1] }},
	}
}

// gossipToTheDead is memberlist's GossipToTheDeadTime in the local gossip
// profile (gossip/config.go), plus a few probe rounds: for so long after a
// member left or failed, memberlist still gossips to it and a restarted
// node is found that way. The island of issue 32 forms only after it.
const gossipToTheDead = 3 * time.Second

// waitGoneForgotten waits until every other node sees nodes[down] left or
// dead, and gossipToTheDead has passed since: from then on memberlist
// alone never talks to it again (it does not say when it stops; this is a
// wait on its timer).
func waitGoneForgotten(t *testing.T, nodes []*clusterNode, down int) {
	t.Helper()
	var goneAt time.Time
	testkit.Until(t, 15*time.Second, nodes[down].Name+" gone on every other node, and forgotten by memberlist", func() string {
		for i, n := range nodes {
			if i == down {
				continue
			}
			st, err := n.clusterStatus(t.Context())
			if err != nil {
				return err.Error()
			}
			for _, m := range st.Members {
				if m.Name == nodes[down].Name && m.State == "alive" {
					goneAt = time.Time{}
					return n.Name + " sees " + m.Name + " alive"
				}
			}
		}
		if goneAt.IsZero() {
			goneAt = time.Now()
		}
		if d := time.Since(goneAt); d < gossipToTheDead {
			return fmt.Sprintf("gone for %v of %v", d.Round(time.Millisecond), gossipToTheDead)
		}
		return ""
	})
}

// Every restart of a node of a three-node cluster, seed or not, SIGTERM or
// SIGKILL, with its flags or without seeds, ends in one cluster holding
// the write made meanwhile on every node, and the restarted node's own
// write reaching the others. The seed stopped with SIGTERM and started
// with the same flags is the island of issue 32: the others saw it leave
// and never called it back, and it had nobody to call. The orders run one
// after another on one cluster, so each also starts from a cluster that a
// restart reformed.
func TestClusterRestartOrdersReform(t *testing.T) {
	t.Parallel()
	const topic = "rejoin"
	nodes := startClusterNodes(t, readmeLayout())
	names := namesOf(nodes)
	waitClusterUp(t, nodes, names, false, 15*time.Second)
	steps := []restartStep{
		{node: 0, writeVia: 1},                            // the island of issue 32
		{node: 2, writeVia: 0},                            // c, whose seed is a
		{node: 0, kill: true, writeVia: 2},                // the seed crashes
		{node: 1, noSeeds: true, writeVia: 2},             // b forgets its seeds
		{node: 2, kill: true, noSeeds: true, writeVia: 1}, // c crashes, comes back without seeds
		{node: 0, noSeeds: true, writeVia: 1},             // a, as it always was
	}
	var keys []string
	for i, s := range steps {
		n := nodes[s.node]
		t.Logf("step %d: %v", i, s)
		if s.kill {
			n.Kill()
		} else {
			n.Stop()
		}
		waitGoneForgotten(t, nodes, s.node)
		key := fmt.Sprintf("while-%s-down-%d", n.Name, i)
		if _, err := nodes[s.writeVia].Client.Publish(ctx(t), topic, key, clusterValue(key, i), ""); err != nil {
			t.Fatalf("step %d: publish on %s: %v", i, nodes[s.writeVia].Name, err)
		}
		keys = append(keys, key)
		if s.noSeeds {
			setJoin(n, nil)
		}
		start := time.Now()
		n.Start()
		waitClusterUp(t, nodes, names, false, 20*time.Second)
		keys = append(keys, publishOwn(t, n, topic, i))
		waitEveryKey(t, nodes, topic, keys, fmt.Sprint("step ", i))
		t.Logf("step %d: one cluster again, every write everywhere, %v after the restart", i, time.Since(start).Round(time.Millisecond))
	}
	stopAll(nodes)
}

// The whole fleet stops (each node with SIGTERM, as a fleet-wide
// `systemctl restart` does, or with SIGKILL, as a power cut does) and
// starts again in every order of a, b and c, each started once the one
// before answers on its socket (up, alone, and not waiting to be ready):
// whichever comes first finds nobody, and must still end in one cluster
// with the others once they come, because each remembers its peers (a,
// the README's seed, has no --join at all).
// The six orders alternate SIGTERM and SIGKILL on one cluster.
func TestClusterColdRestartEveryOrder(t *testing.T) {
	t.Parallel()
	const topic = "cold"
	nodes := startClusterNodes(t, readmeLayout())
	names := namesOf(nodes)
	waitClusterUp(t, nodes, names, false, 15*time.Second)
	orders := [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	var keys []string
	for i, order := range orders {
		kill := i%2 == 1
		before := fmt.Sprintf("before-stop-%d", i)
		if _, err := nodes[i%3].Client.Publish(ctx(t), topic, before, clusterValue(before, i), ""); err != nil {
			t.Fatalf("order %d: publish: %v", i, err)
		}
		keys = append(keys, before)
		waitConverged(t, nodes, topic, keys, int64(len(keys)), 20*time.Second)
		for _, n := range nodes {
			if kill {
				n.Kill()
			} else {
				n.Stop()
			}
		}
		start := time.Now()
		for _, j := range order {
			n := nodes[j]
			if err := n.StartProcess(); err != nil {
				t.Fatalf("order %d: start %s: %v", i, n.Name, err)
			}
			testkit.Until(t, 15*time.Second, n.Name+" answers on its socket", func() string {
				if _, err := n.clusterStatus(t.Context()); err != nil {
					return err.Error()
				}
				return ""
			})
		}
		for _, n := range nodes {
			if err := n.WaitReady(30 * time.Second); err != nil {
				t.Fatalf("order %d: %v", i, err)
			}
		}
		waitClusterUp(t, nodes, names, false, 30*time.Second)
		for _, n := range nodes {
			keys = append(keys, publishOwn(t, n, topic, i))
		}
		waitEveryKey(t, nodes, topic, keys, fmt.Sprint("order ", i))
		t.Logf("order %d (%s, started %s): one cluster, every write everywhere, %v after the first start",
			i, map[bool]string{false: "SIGTERM", true: "SIGKILL"}[kill], orderNames(nodes, order), time.Since(start).Round(time.Millisecond))
	}
	stopAll(nodes)
}

// publishOwn publishes on n a key of its own for step i and returns it.
func publishOwn(t *testing.T, n *clusterNode, topic string, i int) string {
	t.Helper()
	own := fmt.Sprintf("from-%s-after-%d", n.Name, i)
	if _, err := n.Client.Publish(ctx(t), topic, own, clusterValue(own, i), ""); err != nil {
		t.Fatalf("step %d: publish on %s: %v", i, n.Name, err)
	}
	return own
}

// waitEveryKey waits for nodes to converge on keys (one message each)
// and fails the test, naming the step, if one is absent.
func waitEveryKey(t *testing.T, nodes []*clusterNode, topic string, keys []string, step string) {
	t.Helper()
	view := waitConverged(t, nodes, topic, keys, int64(len(keys)), 20*time.Second)
	for _, k := range keys {
		if view[k].Absent {
			t.Fatalf("%s: %s absent", step, k)
		}
	}
}

// orderNames spells a start order as "b, a, c".
func orderNames(nodes []*clusterNode, order []int) string {
	s := make([]string, len(order))
	for i, j := range order {
		s[i] = nodes[j].Name
	}
	return strings.Join(s, ", ")
}
