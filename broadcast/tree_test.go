package broadcast

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// The relay tree is one spanning tree whatever the members' order: every
// node has at most k+1 neighbours, neighbourship goes both ways, every
// node is reached from the first, and no two nodes are more than
// 2 ceil(log_k N) hops apart.
func TestTreeNeighbours(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, k int }{{1, 4}, {2, 4}, {5, 4}, {6, 4}, {10, 3}, {25, 4}, {50, 2}, {200, 4}, {300, 4}, {300, 8}} {
		t.Run(fmt.Sprintf("n=%d,k=%d", tc.n, tc.k), func(t *testing.T) {
			ids := make([]uint64, tc.n)
			for i := range ids {
				ids[i] = uint64(i)*0x9e3779b97f4a7c15 + 7 // not in order
			}
			nb := map[uint64]map[uint64]bool{}
			for _, id := range ids {
				// Each node is given the members in another order.
				shuffled := slices.Clone(ids)
				slices.Reverse(shuffled[:len(shuffled)/2])
				nb[id] = treeNeighbours(id, shuffled, tc.k)
				if len(nb[id]) > tc.k+1 {
					t.Fatalf("%x has %d neighbours, more than k+1 = %d", id, len(nb[id]), tc.k+1)
				}
			}
			edges := 0
			for a, ns := range nb {
				for b := range ns {
					if !nb[b][a] {
						t.Fatalf("%x is %x's neighbour, not the other way", b, a)
					}
					edges++
				}
			}
			if edges != 2*(tc.n-1) {
				t.Fatalf("%d edges, a spanning tree of %d nodes has %d", edges/2, tc.n, tc.n-1)
			}
			// Hops from every node to every other (breadth first): all
			// reached, within the bound.
			bound := 2 * int(math.Ceil(math.Log(float64(tc.n))/math.Log(float64(tc.k))))
			for _, from := range []uint64{ids[0], ids[tc.n/2], ids[tc.n-1]} {
				dist := map[uint64]int{from: 0}
				queue := []uint64{from}
				for len(queue) > 0 {
					x := queue[0]
					queue = queue[1:]
					for y := range nb[x] {
						if _, ok := dist[y]; !ok {
							dist[y] = dist[x] + 1
							queue = append(queue, y)
						}
					}
				}
				if len(dist) != tc.n {
					t.Fatalf("%d of %d nodes reached from %x", len(dist), tc.n, from)
				}
				for y, d := range dist {
					if d > bound {
						t.Fatalf("%x is %d hops from %x, more than 2 ceil(log_k N) = %d", y, d, from, bound)
					}
				}
			}
		})
	}
	if nb := treeNeighbours(1, []uint64{2, 3}, 4); nb != nil {
		t.Fatalf("a node not among the members has neighbours %v", nb)
	}
}

// newTreeFleet starts size nodes relaying on a tree of degree k, each
// node's replica its successor in the list; syncInterval 0 is the test
// clusters' 50ms.
func newTreeFleet(t *testing.T, size, k int, syncInterval time.Duration) *testCluster {
	return startFleet(t, "tcp", size, func(cfg *Config) {
		cfg.Tree, cfg.TreeDegree = true, k
		if syncInterval > 0 {
			cfg.SyncInterval = syncInterval
		}
	})
}

// byTree returns the nodes in the tree's order (sorted by ID: index i's
// parent is (i-1)/k).
func byTree(nodes []*testNode) []*testNode {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b *testNode) int {
		if a.st.Origin() < b.st.Origin() {
			return -1
		}
		return 1
	})
	return out
}

// With the anti-entropy off (an hour's SyncInterval: no exchange, no
// keepalive in the test's time), every node's records reach all 20 nodes
// through the tree alone, and each node pushed to its tree neighbours and
// its replica only.
func TestTreeDeliversWithoutAntiEntropy(t *testing.T) {
	t.Parallel()
	const size, k = 20, 3
	c := newTreeFleet(t, size, k, time.Hour)
	for i, tn := range c.nodes {
		for j := 0; j < 10; j++ {
			publish(t, tn, fmt.Sprintf("k%d-%d", i, j%5), fmt.Sprint(j))
		}
	}
	c.waitConverged(60 * time.Second)
	for _, tn := range c.nodes {
		if s := tn.n.Stats(); s.Exchanges != 0 || tn.n.Pulls() != 0 {
			t.Fatalf("%s ran %d exchanges and %d pulls: the records did not all come by the tree's pushes", tn.name, s.Exchanges, tn.n.Pulls())
		}
		// An hour's idle timeout: every link that pushed is still open.
		if why := pushLinksOff(tn, k); why != "" {
			t.Fatal(why)
		}
	}
}

// pushLinksOff says how tn's open links that pushed records go beyond
// its tree neighbours and its replica, at most k+2 of them; "" when
// they do not.
func pushLinksOff(tn *testNode, k int) string {
	n := tn.n
	n.mu.Lock()
	var bad []string
	pushing := 0
	for _, l := range n.links {
		if !l.pushing() {
			continue
		}
		pushing++
		if !l.tree.Load() && n.replica.Load() != l.peer.ID {
			bad = append(bad, l.peer.Name)
		}
	}
	n.mu.Unlock()
	if len(bad) > 0 || pushing > k+2 {
		return fmt.Sprintf("%s pushes on %d connections (k+1 = %d, plus its replica), to %v that are neither tree neighbours nor its replica",
			tn.name, pushing, k+1, bad)
	}
	return ""
}

// Under a steady load from every node, a node's push connections stay
// within its k+1 tree neighbours and its replica, whatever it writes, and
// the fleet converges when the load stops; with the direct fan-out the
// same load keeps a connection open to every peer.
func TestScaleTreePushConnectionsBounded(t *testing.T) {
	const size, k = 12, 3
	for _, tree := range []bool{true, false} {
		t.Run(fmt.Sprintf("tree=%v", tree), func(t *testing.T) {
			var c *testCluster
			if tree {
				c = newTreeFleet(t, size, k, 0)
			} else {
				c = newFleet(t, "tcp", size, 3, 0)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
			defer halt()           // before the cluster's cleanup closes the stores
			var published sync.Map // node index -> records published
			for i, tn := range c.nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 1; ; j++ {
						select {
						case <-stop:
							return
						case <-time.After(100 * time.Millisecond): // a steady rate, 10/s a node
						}
						m := record.Message{Topic: "prices", Key: fmt.Sprintf("k%d-%d", i, j%20), Value: []byte(fmt.Sprint(j))}
						if _, err := tn.st.Publish(&m); err != nil {
							t.Errorf("%s publish: %v", tn.name, err)
							return
						}
						published.Store(i, j)
					}
				}()
			}
			// Sample every node's push connections until every node has
			// published 10 records under the load.
			worst, off := 0, ""
			testkit.Until(t, 3*time.Minute, "10 records published by every node", func() string {
				for i, tn := range c.nodes {
					worst = max(worst, tn.n.OpenPushLinks())
					if why := pushLinksOff(tn, k); tree && off == "" {
						off = why
					}
					if j, _ := published.Load(i); j == nil || j.(int) < 10 {
						return fmt.Sprintf("%s published %v", tn.name, j)
					}
				}
				return ""
			})
			halt()
			if off != "" {
				t.Fatal(off)
			}
			c.waitConverged(60 * time.Second)
			t.Logf("tree %v: at most %d push connections open on a node under load (N-1 = %d, k+1 = %d)", tree, worst, size-1, k+1)
			if tree && worst > k+2 {
				t.Fatalf("a node had %d push connections open, more than k+1 = %d plus its replica", worst, k+1)
			}
			if !tree && worst < size/2 {
				t.Fatalf("the direct fan-out had at most %d push connections open under load; every writer pushes to all %d peers", worst, size-1)
			}
		})
	}
}

// A node in the middle of the tree killed (and still a member: membership
// has not noticed) cuts its subtree off the pushes; the anti-entropy's
// exchanges and pulls still bring every record to the subtree, and once
// membership drops the node the tree is rebuilt around it.
func TestTreeInnerNodeKilled(t *testing.T) {
	t.Parallel()
	const size, k = 16, 3
	c := newTreeFleet(t, size, k, 0)
	tree := byTree(c.nodes)
	dead := tree[1] // a child of the root, with children 4-6 and theirs
	var subtree []*testNode
	for i := range tree {
		for j := i; j > 0; j = (j - 1) / k {
			if j == 1 {
				subtree = append(subtree, tree[i])
				break
			}
		}
	}
	if len(subtree) < 5 {
		t.Fatalf("subtree of %d nodes", len(subtree))
	}
	for _, tn := range c.nodes {
		publish(t, tn, "hello-"+tn.name, "v")
	}
	c.waitConverged(60 * time.Second)
	deadID := dead.st.Origin()
	dead.shutdown(t)
	start := time.Now()
	for j := 0; j < 30; j++ {
		publish(t, tree[0], fmt.Sprintf("root-%d", j%10), fmt.Sprint(j))
		publish(t, tree[2], fmt.Sprintf("two-%d", j%10), fmt.Sprint(j))
	}
	// The bound of the anti-entropy, not a goal: a few rounds of 50ms
	// on a quiet machine, more under -race on busy cores.
	c.waitConverged(60 * time.Second)
	t.Logf("the %d nodes under the killed one converged %v after the writes began", len(subtree)-1, time.Since(start).Round(time.Millisecond))

	// Membership drops it: the tree is rebuilt over the 15 left, and the
	// records flow through it again.
	c.wire()
	for _, tn := range c.live() {
		if nb := tn.n.TreeNeighbours(); len(nb) == 0 || len(nb) > k+1 || slices.Contains(nb, deadID) {
			t.Fatalf("%s's tree neighbours after the rebuild: %v", tn.name, nb)
		}
	}
	for j := 0; j < 30; j++ {
		publish(t, subtree[1], fmt.Sprintf("sub-%d", j%10), fmt.Sprint(j))
	}
	c.waitConverged(60 * time.Second)
	// Links that pushed on the old tree close once idle (IdleTimeout).
	testkit.Until(t, 30*time.Second, "pushes only to tree neighbours and replicas", func() string {
		for _, tn := range c.live() {
			if why := pushLinksOff(tn, k); why != "" {
				return why
			}
		}
		return ""
	})
}

// newStar starts a relay tree of 5 nodes of degree 4 with the
// anti-entropy off: the root (returned first) and its four leaves, each
// leaf's replica the root, so that a leaf's records reach the others
// only through the root's relaying.
func newStar(t *testing.T) (root *testNode, leaves []*testNode, c *testCluster) {
	c = newTreeFleet(t, 5, 4, time.Hour)
	tree := byTree(c.nodes)
	root, leaves = tree[0], tree[1:]
	root.n.SetReplica(leaves[0].st.Origin())
	for _, l := range leaves {
		l.n.SetReplica(root.st.Origin())
	}
	return root, leaves, c
}

// A relaying node pushes whatever its neighbour lacks, of every origin,
// in one frame a turn: the root, cut off from its leaves while each of
// them wrote, then healed, pushes each leaf the three other leaves'
// records in one frame, not one frame per origin.
func TestTreeRelayBatchesOrigins(t *testing.T) {
	t.Parallel()
	root, leaves, c := newStar(t)
	for _, l := range leaves {
		c.net.cutOff(root.name, l.n.Addr())
	}
	for _, l := range leaves {
		for j := 0; j < 5; j++ {
			publish(t, l, fmt.Sprintf("%s-%d", l.name, j), fmt.Sprint(j))
		}
	}
	testkit.Until(t, 30*time.Second, "the root to hold every leaf's records", func() string {
		for _, l := range leaves {
			if s := root.st.LastSeq(l.st.Origin()); s < 5 {
				return fmt.Sprintf("the root holds %d of %s's 5 records", s, l.name)
			}
		}
		return ""
	})
	before := root.n.pushFrames.Load()
	c.net.heal()
	c.waitConverged(60 * time.Second)
	frames := root.n.pushFrames.Load() - before
	t.Logf("the root pushed %d frames to its %d leaves, each lacking %d origins' records", frames, len(leaves), len(leaves)-1)
	if frames > uint64(len(leaves)) {
		t.Fatalf("the root pushed %d records frames to %d leaves: more than one a leaf, so not every origin's records went in one", frames, len(leaves))
	}
}

// Records a relaying node pushed on a connection that then failed are
// pushed again on the next one, with no anti-entropy to pull them: here
// a frame the root relays is damaged on its way (the leaf refuses it and
// drops the connection).
func TestTreeRelayRepushesAfterFailedConnection(t *testing.T) {
	t.Parallel()
	root, leaves, c := newStar(t)
	var damaged atomic.Bool
	c.net.SetTamper(func(from string, p []byte) {
		if from == root.name && bytes.Contains(p, []byte("lost-on-the-way")) && damaged.CompareAndSwap(false, true) {
			p[len(p)-1] ^= 0xff // the frame's MAC
		}
	})
	publish(t, leaves[0], "k", "lost-on-the-way")
	testkit.Until(t, 30*time.Second, "a relayed frame damaged and refused", func() string {
		bad := uint64(0)
		for _, l := range leaves {
			bad += l.n.BadFrames()
		}
		if !damaged.Load() || bad == 0 {
			return fmt.Sprintf("damaged %v, %d bad frames refused by the leaves", damaged.Load(), bad)
		}
		return ""
	})
	c.waitConverged(60 * time.Second)
	for _, tn := range c.nodes {
		if tn.n.Pulls() != 0 {
			t.Fatalf("%s pulled %d times: the record was not pushed again", tn.name, tn.n.Pulls())
		}
	}
}

// With Config.TreeFrom the fan-out follows the fleet's size: 6 nodes
// (TreeFrom 5) relay on the tree; cut down to 3 they push to every peer;
// grown to 7 they relay again. With the anti-entropy off, the pushes
// alone bring every record written in each phase to every node.
func TestTreeFromFollowsFleetSize(t *testing.T) {
	t.Parallel()
	const k = 2
	c := startFleet(t, "tcp", 6, func(cfg *Config) {
		cfg.Tree, cfg.TreeFrom, cfg.TreeDegree = true, 5, k
		cfg.SyncInterval = time.Hour
	})
	phase := func(name string, tree bool) {
		t.Helper()
		for _, tn := range c.live() {
			if nb := tn.n.TreeNeighbours(); (len(nb) > 0) != tree {
				t.Fatalf("%s, %d nodes: %s's tree neighbours %v", name, len(c.live()), tn.name, nb)
			}
			for j := 0; j < 5; j++ {
				publish(t, tn, fmt.Sprintf("%s-%s-%d", name, tn.name, j), fmt.Sprint(j))
			}
		}
		c.waitConverged(60 * time.Second)
		for _, tn := range c.live() {
			if tn.n.Pulls() != 0 {
				t.Fatalf("%s: %s pulled: the pushes did not bring everything", name, tn.name)
			}
		}
	}
	phase("six", true)
	for _, tn := range c.nodes[3:] {
		tn.shutdown(t)
	}
	c.wire()
	phase("three", false)
	for _, tn := range c.live() {
		// The direct fan-out: a writer pushes to both its peers.
		if got := tn.n.OpenPushLinks(); got != 2 {
			t.Fatalf("three nodes, direct: %s pushes on %d connections, want 2", tn.name, got)
		}
	}
	for i := 0; i < 4; i++ {
		c.add(fmt.Sprintf("m%d", i), t.TempDir())
	}
	c.wire()
	// The new nodes lack the earlier phases' records, which only the
	// pulls would bring: they are left out of this phase's check.
	for _, tn := range c.live() {
		if nb := tn.n.TreeNeighbours(); len(nb) == 0 || len(nb) > k+1 {
			t.Fatalf("seven nodes: %s's tree neighbours %v", tn.name, nb)
		}
		publish(t, tn, "seven-"+tn.name, "v")
	}
	testkit.Until(t, 60*time.Second, "every node to hold the records written on seven", func() string {
		for _, tn := range c.live() {
			for _, from := range c.live() {
				if _, ok := tn.st.Get("prices", "seven-"+from.name); !ok {
					return fmt.Sprintf("%s lacks %s's record", tn.name, from.name)
				}
			}
		}
		return ""
	})
}
