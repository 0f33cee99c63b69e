package broadcast

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var (
	fuzzySeed  = flag.Uint64("fuzzy.seed", 0, "seed of TestRandomFaults (0: from the clock)")
	fuzzySteps = flag.Int("fuzzy.steps", 60, "steps of TestRandomFaults")
)

// TestRandomFaults runs a 5-node cluster through a seeded random schedule
// of writes, node stops and restarts, partitions and heals, then heals
// everything and checks that all nodes converge to one view and that no
// acknowledged write is missing anywhere. Rerun a failure with
// -fuzzy.seed=N (the seed is logged).
func TestRandomFaults(t *testing.T) {
	t.Parallel()
	eachTransport(t, testRandomFaults)
}

func testRandomFaults(t *testing.T, transport string) {
	seed := *fuzzySeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -fuzzy.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := newClusterOn(t, transport, 5, nil)
	acked := map[uint64]uint64{} // origin -> highest acknowledged seq

	for step := 0; step < *fuzzySteps; step++ {
		live := c.live()
		switch op := rng.IntN(10); {
		case op < 6: // a burst of writes on random live nodes
			for i := 0; i < 1+rng.IntN(30); i++ {
				tn := live[rng.IntN(len(live))]
				res := publish(t, tn, fmt.Sprintf("k%d", rng.IntN(40)), fmt.Sprintf("s%d-%d", step, i))
				acked[res.Origin] = max(acked[res.Origin], res.Seq)
			}
		case op == 6 && len(live) > 2: // stop a node
			tn := live[rng.IntN(len(live))]
			t.Logf("step %d: stop %s", step, tn.name)
			tn.shutdown(t)
			c.wire()
		case op == 7: // restart a stopped node on its data
			for _, tn := range c.nodes {
				if tn.n == nil && tn.dir != "" {
					t.Logf("step %d: restart %s", step, tn.name)
					dir := tn.dir
					tn.dir = "" // replaced by the new node
					c.add(tn.name+"'", dir)
					c.wire()
					break
				}
			}
		case op == 8: // partition the live nodes in two
			cut := 1 + rng.IntN(len(live)-1)
			rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
			t.Logf("step %d: partition %d|%d", step, cut, len(live)-cut)
			for _, x := range live[:cut] {
				for _, y := range live[cut:] {
					c.net.cutOff(x.name, y.n.Addr())
					c.net.cutOff(y.name, x.n.Addr())
				}
			}
		case op == 9:
			t.Logf("step %d: heal", step)
			c.net.heal()
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}

	c.net.heal()
	for _, tn := range c.nodes {
		if tn.n == nil && tn.dir != "" {
			dir := tn.dir
			tn.dir = ""
			c.add(tn.name+"'", dir)
		}
	}
	c.wire()
	c.waitConverged(20 * time.Second)
	for _, tn := range c.live() {
		v := tn.st.Vector()
		for o, s := range acked {
			if v[o] < s {
				t.Fatalf("%s holds origin %016x up to %d, %d was acknowledged", tn.name, o, v[o], s)
			}
		}
	}
}
