package test

import (
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/record"
)

// TestVerifyCLI: `cachecast verify` on three cachecastd processes holding
// the same view exits 0; once one node's view differs on a topic at the
// same vector (records of one (origin, seq) but two values, pushed over
// the data port as a peer would, so no anti-entropy can see it), it exits
// 1 naming that node and that topic.
func TestVerifyCLI(t *testing.T) {
	t.Parallel()
	nodes := startClusterNodes(t, threeNodes())
	defer stopAll(nodes)
	waitClusterUp(t, nodes, namesOf(nodes), true, 15*time.Second)
	cli(t, nodes[0].Node, "", "publish", "prices", "sku-1", "12.50").ok(t, "publish")
	cli(t, nodes[1].Node, "", "publish", "stock", "sku-1", "4").ok(t, "publish")
	testkit.Eventually(t, 20*time.Second, "verify to pass", func() bool {
		return cli(t, nodes[2].Node, "", "verify").code == 0
	})
	r := cli(t, nodes[0].Node, "", "verify").ok(t, "verify")
	for _, n := range nodes {
		if !strings.Contains(r.stdout, n.Name+" ") {
			t.Fatalf("verify does not list node %s:\n%s", n.Name, r.stdout)
		}
	}

	for i, n := range nodes {
		value := "one"
		if n.Name == "c" {
			value = "two"
		}
		m := record.Message{Topic: "prices", Key: "forged", Value: []byte(value)}
		rec := make([]byte, 256)
		rec = rec[:record.Encode(rec, &m, record.Stamp{Origin: 0xf0f0, Seq: 1, HLC: 1})]
		conn, _, err := dataDial(n.DataAddr, nil, 0x1badc0ffee+uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write(conn.frame(1, rec)); err != nil { // 1: records
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 20*time.Second, "verify to see node c differ", func() bool {
		r = cli(t, nodes[0].Node, "", "verify")
		return r.code == 1 && strings.Contains(r.stderr, "views differ: c (prices)")
	})
	if !strings.Contains(r.stdout, "differs on prices") || strings.Contains(r.stdout, "stock") && strings.Contains(r.stdout, "differs on stock") {
		t.Fatalf("verify output:\n%s", r.stdout)
	}
}
