package daemontest

import "testing"

// TestDivergentReadsEachNodeOnce: a record of node 2 still in flight to
// nodes 0 and 1 when a round of WaitConverged begins reaches node 0 in
// the middle of the round. Reading node 0 again for each comparison (as
// WaitConverged did) finds node 1 equal to node 0 before the record
// came and node 2 equal to it after, and the round passed with node 1
// lacking the record; divergent reads each node once and must name the
// node that differs.
func TestDivergentReadsEachNodeOnce(t *testing.T) {
	cases := []struct {
		name string
		// arrives is, for each node, after how many reads of the round
		// (of any node) it holds the record; -1: never in the round.
		arrives [3]int
		want    int
	}{
		{"all hold it", [3]int{0, 0, 0}, 0},
		{"node 0 gets it mid-round, node 1 after", [3]int{2, -1, 0}, 2},
		{"node 0 gets it at once, node 1 after", [3]int{0, -1, 0}, 1},
		{"node 1 gets it mid-round", [3]int{0, 1, 0}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reads := 0
			var per [3]int
			got := divergent(3, func(i int) nodeReading {
				r := nodeReading{vector: "map[1:7]"}
				if a := c.arrives[i]; a >= 0 && reads >= a {
					r.vector, r.digest[0] = "map[1:8]", 1
				}
				reads++
				per[i]++
				return r
			})
			if got != c.want {
				t.Errorf("divergent = node %d, want %d (0: none)", got, c.want)
			}
			for i, n := range per {
				if n > 1 {
					t.Errorf("node %d read %d times in one round", i, n)
				}
			}
		})
	}
}
