package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// A flipped byte in the view snapshot of a node whose log retention has
// recycled since: the log cannot rebuild the view, so the node (b of a
// 2-node cluster) starts with what its log holds, takes a's snapshot over
// the fan-out's bootstrap, is ready only then, serves every key (those
// only the recycled part of its log held included) and reports the repair
// in status. It used to refuse to start ("start the node afresh from its
// peers"), a restart loop under systemd.
func TestDamagedSnapshotPastRecycledLogFromPeer(t *testing.T) {
	t.Parallel()
	args := []string{"--segment-size", "1MiB", "--retention-bytes", "2MiB", "--max-value-size", "64KiB",
		"--flush-interval", "20ms", "--snapshot-interval", "100ms"}
	nodes := startClusterNodes(t, []clusterSpec{{Name: "a", Args: args}, {Name: "b", Args: args}})
	a, b := nodes[0], nodes[1]
	waitClusterUp(t, nodes, []string{"a", "b"}, false, 20*time.Second)

	// Keys written on both nodes first: their records are the ones the
	// retention recycles on b.
	var keys []string
	for i := range 100 {
		n := []*clusterNode{a, b}[i%2]
		k := fmt.Sprintf("sku-%03d", i)
		if r := httpDo(t, n.Node, "PUT", "/v1/topics/prices/keys/"+k, strings.NewReader("v-"+k)); r.status != 200 {
			t.Fatalf("PUT %s on %s: %d %s", k, n.Name, r.status, r.body)
		}
		keys = append(keys, k)
	}
	waitConverged(t, nodes, "prices", keys, 100, 20*time.Second)
	first := filepath.Join(b.DataDir, "log", fmt.Sprintf("%020d", 0))
	filler := strings.Repeat("f", 60<<10)
	testkit.Until(t, 60*time.Second, "b's retention to recycle its first segment", func() string {
		for i := range 16 {
			if r := httpDo(t, a.Node, "PUT", fmt.Sprintf("/v1/topics/filler/keys/f%d", i%4), strings.NewReader(filler)); r.status != 200 {
				return fmt.Sprintf("PUT filler: %d %s", r.status, r.body)
			}
		}
		if _, err := os.Stat(first); err == nil {
			return first + " is still there"
		}
		return ""
	})

	b.Stop() // a clean stop writes the snapshot
	path := filepath.Join(b.DataDir, "snapshot")
	testkit.FlipMiddleByte(t, path)
	// With no peer up, b starts but is not ready: it waits for one.
	a.Stop()
	if err := b.StartProcess(); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, 20*time.Second, "b, alone, to wait for a peer's snapshot", func() string {
		st, err := b.status(t.Context())
		if err != nil {
			return err.Error()
		}
		if st.Repair == nil || st.Repair.ViewFromPeer != "waiting" || st.CatchUp == nil || st.CatchUp.Phase != "snapshot" {
			return fmt.Sprintf("repair %+v, catch-up %+v", st.Repair, st.CatchUp)
		}
		return ""
	})
	if r := httpDo(t, b.Node, "GET", "/readyz", nil); r.status != 503 {
		t.Fatalf("b's /readyz while it waits for a peer: %d %s", r.status, r.body)
	}
	if r := httpDo(t, b.Node, "GET", "/v1/topics/prices/keys/sku-000", nil); r.status != 503 || r.code() != "catching_up" {
		t.Fatalf("a read on b while it waits for a peer: %d %s", r.status, r.body)
	}
	t0 := time.Now()
	a.Start()
	if err := b.WaitReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("b ready %v after a came back", time.Since(t0).Round(time.Millisecond))

	for _, k := range keys {
		if r := httpDo(t, b.Node, "GET", "/v1/topics/prices/keys/"+k, nil); r.status != 200 || !strings.Contains(string(r.body), "v-"+k) {
			t.Fatalf("%s on b after the repair: %d %s", k, r.status, r.body)
		}
	}
	st, err := b.status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Repair == nil || st.Repair.ViewFromPeer != "done" || !strings.HasPrefix(st.Repair.SnapshotSetAside, filepath.Join(b.DataDir, "corrupt")+"/") {
		t.Fatalf("status repair %+v, want the snapshot set aside and the view from a peer done", st.Repair)
	}
	out := cli(t, b.Node, "", "status")
	if !strings.Contains(out.stdout, "the view taken from a peer's snapshot") {
		t.Fatalf("cachecast status:\n%s", out.stdout)
	}
	for _, want := range []string{"the view snapshot is damaged or missing and the log was recycled since", "asking for the peer's snapshot"} {
		if !strings.Contains(b.Logs(), want) {
			t.Fatalf("b's log lacks %q", want)
		}
	}
	// Whole again, it writes a snapshot: a second restart loads it.
	b.Stop()
	b.Start()
	if strings.Count(b.Logs(), "the view snapshot is damaged or missing") != 1 {
		t.Fatal("the second restart did not load the snapshot written after the repair")
	}
}
