package fleet

import (
	"context"
	"strings"
	"testing"
	"time"
)

// fanout is broadcast's default Config.Fanout: the peers a node
// exchanges vectors with each interval.
const fanout = 3

// maxVectorEntries is the most vector entries a node of an n-node fleet
// may send and receive per anti-entropy interval: each exchange sends
// and receives a vector of n entries, a node starts fanout exchanges and
// takes about as many, with room for twice that (the acks after pushed
// frames, a busy interval). Linear in n; the full mesh was 2n(n-1).
func maxVectorEntries(n int) float64 { return 2 * 4 * fanout * float64(n) }

// maxConns bounds a node's open data-port connections whatever n is: a
// few exchanges each way plus the replica (2 x (1 + 3 x fanout), see
// README "How far one cluster goes"), with room for connections closing.
const maxConns = 2*(1+3*fanout) + 4

// TestScaleFleet25 runs 25 in-process nodes over TCP: every node's records
// reach every node (identical vectors and view digests), also after a
// 2|3 partition of the data ports heals and after a tenth of the nodes
// restart, and an idle node's cost stays within bounds: its vector
// entries per interval within maxVectorEntries (linear in n) and its
// open connections within maxConns (whatever n). Speed is for make bench-fleet.
func TestScaleFleet25(t *testing.T) {
	const nodes = 25
	const sync = time.Second
	RaiseFileLimit()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	begin := time.Now()
	phase := func(what string) { t.Logf("%s after %v", what, time.Since(begin).Round(time.Millisecond)) }
	f, err := Start(ctx, Options{Nodes: nodes, Dir: t.TempDir(), SyncInterval: sync})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	phase("started")

	idle := f.Measure(ctx, nil, 3*sync)
	perInterval := idle.VectorEntries * sync.Seconds()
	t.Logf("idle per node: %.0f vector entries per interval, %.1f connections (most %d), %.0f bytes/s out",
		perInterval, idle.Conns, idle.MaxConns, idle.TxBps)
	if perInterval > maxVectorEntries(nodes) {
		t.Errorf("a node handles %.0f vector entries per interval, more than %.0f", perInterval, maxVectorEntries(nodes))
	}
	if perInterval == 0 {
		t.Errorf("no vector entries counted: anti-entropy is not running")
	}
	if idle.MaxConns > maxConns {
		t.Errorf("a node holds %d data connections, more than %d", idle.MaxConns, maxConns)
	}

	converge := func(what string) {
		t.Helper()
		if _, err := f.WaitConverged(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	f.Partition(2 * nodes / 5)
	l := f.StartLoad(500)
	time.Sleep(500 * time.Millisecond)
	l.Stop()
	f.Heal()
	converge("after the partition healed")
	phase("healed")

	down := []*Node{f.nodes[3], f.nodes[13]}
	for _, n := range down {
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.PublishEach(); err != nil {
		t.Fatal(err)
	}
	phase("two stopped")
	for _, n := range down {
		if err := n.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.WaitMembers(ctx, f.nodes); err != nil {
		t.Fatal(err)
	}
	phase("restarted")
	converge("after two nodes restarted")
	phase("converged")
	for _, n := range down {
		if n.Store().LastSeq(f.nodes[0].Store().Origin()) == 0 {
			t.Errorf("%s holds nothing of n000 after its restart", n.Name)
		}
	}
}

// TestFileLimitRefusesDirect: a fleet of direct pushes whose sockets
// alone pass the open-file limit is refused at once, saying why, and
// the tree's is not refused for it.
func TestFileLimitRefusesDirect(t *testing.T) {
	opts := Options{Nodes: 1 << 20, Dir: t.TempDir()}
	if _, err := Start(t.Context(), opts); err == nil || !strings.Contains(err.Error(), "open-file limit") {
		t.Fatalf("Start of %d direct nodes: %v, want the open-file limit named", opts.Nodes, err)
	}
	opts.Tree = true
	if err := checkFileLimit(opts); err != nil {
		t.Fatalf("the tree refused: %v", err)
	}
}
