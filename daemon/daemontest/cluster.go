package daemontest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/faultnet"
	"github.com/cachecast/cachecast/internal/testkit"
)

// Cluster is real daemons in the test's process, joined over gossip on
// loopback, their data ports dialed through one fault network, in the
// spirit of hashicorp/raft's testing.go: Partition cuts the fleet into
// sides, Heal joins it again, WaitConverged waits until every node holds
// the same view. Partition cuts the data ports alone, where the records
// travel, and gossip stays connected (the members see each other alive);
// PartitionAll cuts gossip too, so each side declares the other dead.
type Cluster struct {
	tb    testing.TB
	Net   *faultnet.Net
	Nodes []*Node
}

// NewCluster starts n daemons named node0..node(n-1), each joining the
// first, with configure's changes to node i's configuration, and waits
// until every node sees every other alive.
func NewCluster(tb testing.TB, n int, configure func(i int, cfg *daemon.Config)) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, Net: faultnet.New()}
	var seed []string
	for i := range n {
		name := fmt.Sprintf("node%d", i)
		node := Start(tb, func(cfg *daemon.Config) {
			cfg.NodeName = name
			cfg.GossipAddr = "127.0.0.1:0"
			cfg.DataAddr = "127.0.0.1:0"
			cfg.GossipProfile = "local"
			cfg.Join = seed
			cfg.JoinTimeout = 5 * time.Second
			*cfg = config.WithHooks(*cfg, daemonhooks.Hooks{DataDial: c.Net.Dialer(name), GossipUnreachable: c.Net.Unreachable(name)})
			if configure != nil {
				configure(i, cfg)
			}
		})
		c.Nodes = append(c.Nodes, node)
		if i == 0 {
			seed = []string{node.D.GossipAddr()}
		}
	}
	c.waitAlive()
	return c
}

// waitAlive waits until every node sees every node alive.
func (c *Cluster) waitAlive() {
	c.tb.Helper()
	testkit.Until(c.tb, 10*time.Second, "every node sees every other", func() string {
		for _, node := range c.Nodes {
			st := node.D.ClusterStatus()
			alive := 0
			for _, m := range st.Members {
				if m.State == "alive" {
					alive++
				}
			}
			if alive != len(c.Nodes) {
				return fmt.Sprintf("%s sees %d of %d members alive", node.Config.NodeName, alive, len(c.Nodes))
			}
		}
		return ""
	})
}

// Restart stops node i (it leaves the cluster) and starts it again with
// the same configuration, on its data directory and sockets (its TCP
// ports are new ones when they were :0), and waits until every node sees
// every other alive. Node i must not be the first, which the others join.
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	if i == 0 {
		c.tb.Fatal("daemontest: Restart(0): the other nodes join node 0")
	}
	old := c.Nodes[i]
	old.Stop()
	c.Nodes[i] = Start(c.tb, func(cfg *daemon.Config) { *cfg = old.Config })
	c.waitAlive()
}

// Partition cuts the data connections between nodes of different sides,
// both ways (a node in no side keeps every connection).
func (c *Cluster) Partition(sides ...[]int) { c.partition(false, sides) }

// PartitionAll cuts the data connections and the gossip between nodes of
// different sides, both ways: each side declares the other dead, as on a
// real network split. Heal lifts it; the gossip's reconnect merges the
// sides again.
func (c *Cluster) PartitionAll(sides ...[]int) { c.partition(true, sides) }

func (c *Cluster) partition(gossip bool, sides [][]int) {
	side := map[int]int{}
	for s, ids := range sides {
		for _, i := range ids {
			side[i] = s + 1
		}
	}
	for i, a := range c.Nodes {
		for j, b := range c.Nodes {
			if side[i] != 0 && side[j] != 0 && side[i] != side[j] {
				c.Net.Cut(a.Config.NodeName, b.D.DataAddr())
				if gossip {
					c.Net.Cut(a.Config.NodeName, b.D.GossipAddr())
				}
			}
		}
	}
}

// Heal lifts every cut: the nodes dial each other again and repair what
// they missed.
func (c *Cluster) Heal() { c.Net.Heal() }

// WaitConverged waits, at most within, until every node holds the same
// view (the same vector and the same digest), each node read once a
// round (see divergent).
func (c *Cluster) WaitConverged(within time.Duration) {
	c.tb.Helper()
	testkit.Until(c.tb, within, "the nodes converged", func() string {
		if i := c.firstDivergent(); i != 0 {
			return fmt.Sprintf("%s differs from %s", c.Nodes[i].Config.NodeName, c.Nodes[0].Config.NodeName)
		}
		return ""
	})
}

// Converged reports whether every node holds the same view now (the
// same vector and the same digest), each node read once (see divergent).
func (c *Cluster) Converged() bool { return c.firstDivergent() == 0 }

// firstDivergent is divergent of the nodes' readings now.
func (c *Cluster) firstDivergent() int {
	return divergent(len(c.Nodes), func(i int) nodeReading {
		st := c.Nodes[i].D.Store()
		return nodeReading{vector: fmt.Sprint(st.Vector()), digest: st.Digest()}
	})
}

// nodeReading is what WaitConverged compares of a node: its vector and
// its view's digest.
type nodeReading struct {
	vector string
	digest [32]byte
}

// divergent reads each of n nodes once (read), in order, and returns the
// first that differs from node 0, 0 when none does. Once the writers are
// done, every record is on its origin from the start of the round, so a
// round in which all agree has every record on every node. A node read
// more than once a round (node 0 for each comparison, as WaitConverged
// did) may take a record still in flight between its readings: it agrees
// with a node read before the record came, then with the origin, and the
// round passes while the first still lacks the record (the
// TestConvergeRandomOps failures of a key a Get found differing right
// after WaitConverged; TestDivergentReadsEachNodeOnce).
func divergent(n int, read func(i int) nodeReading) int {
	first := read(0)
	for i := 1; i < n; i++ {
		if read(i) != first {
			return i
		}
	}
	return 0
}
