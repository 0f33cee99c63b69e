package daemontest_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/testkit"
)

// put writes key=value on node n through its local API.
func put(t *testing.T, n *daemontest.Node, key, value string) {
	t.Helper()
	hc := testkit.UnixClient(n.Socket, false, 5*time.Second)
	req, _ := http.NewRequest(http.MethodPut, "http://x/v1/topics/t/keys/"+key, strings.NewReader(value))
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s on %s: %d %s", key, n.Config.NodeName, res.StatusCode, body)
	}
}

// TestPartitionHeals: a fleet cut in two keeps serving writes on both
// sides, which then differ; healed, it converges on one view, each key
// decided the same way everywhere.
func TestPartitionHeals(t *testing.T) {
	c := daemontest.NewCluster(t, 3, nil)
	put(t, c.Nodes[0], "before", "v")
	c.WaitConverged(10 * time.Second)

	c.Partition([]int{0}, []int{1, 2})
	testkit.Until(t, 10*time.Second, "node0's data links down", func() string {
		for _, m := range c.Nodes[0].D.ClusterStatus().Members {
			if !m.Self && m.Connected {
				return m.Name + " still connected"
			}
		}
		return ""
	})
	for j := range 20 {
		put(t, c.Nodes[0], fmt.Sprintf("k%d", j), "a")
		put(t, c.Nodes[1+j%2], fmt.Sprintf("k%d", j), "b")
	}
	if a, b := c.Nodes[0].D.Store().Digest(), c.Nodes[1].D.Store().Digest(); a == b {
		t.Fatal("the partition let writes through")
	}

	c.Heal()
	c.WaitConverged(20 * time.Second)
	for j := range 20 {
		e0, _ := c.Nodes[0].D.Store().Get("t", fmt.Sprintf("k%d", j))
		for _, n := range c.Nodes[1:] {
			e, _ := n.D.Store().Get("t", fmt.Sprintf("k%d", j))
			if string(e.Value) != string(e0.Value) || e.Stamp != e0.Stamp {
				t.Fatalf("k%d differs between node0 and %s", j, n.Config.NodeName)
			}
		}
	}
}
