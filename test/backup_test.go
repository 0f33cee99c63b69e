package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
)

// TestBackupRestore backs up a node of a cluster of two while a writer
// publishes to it, refuses a damaged copy of the file, restores the file
// into a new node's empty data directory, starts that node in the
// cluster and checks that it has every key and cursor, an origin of its
// own, and that the three converge on the records written during and
// after the backup.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	nodes := startClusterNodes(t, []clusterSpec{{Name: "a"}, {Name: "b"}})
	waitClusterUp(t, nodes, namesOf(nodes), false, 30*time.Second)
	a := nodes[0]
	var keys []string
	var batch []client.Message
	for i := range 400 {
		k := fmt.Sprintf("sku-%03d", i)
		keys = append(keys, k)
		batch = append(batch, client.Message{Key: k, Value: []byte(fmt.Sprint("price-", i))})
	}
	if _, err := a.Client.PublishBatch(t.Context(), "prices", batch); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		offset uint64
	}{{"web-1", 100}, {"web-2", 399}} {
		if _, err := a.Client.SetCursor(t.Context(), c.name, "prices", c.offset); err != nil {
			t.Fatal(err)
		}
	}

	// A writer publishes all along the backup, and after it.
	stop := make(chan struct{})
	var written atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := a.Client.Publish(t.Context(), "load", fmt.Sprintf("k%d", i%50), []byte(fmt.Sprint(i)), ""); err != nil {
				t.Errorf("publish during the backup: %v", err)
				return
			}
			written.Add(1)
		}
	})
	file := filepath.Join(t.TempDir(), "a.backup")
	before := written.Load()
	r := cli(t, a.Node, "", "backup", file).ok(t, "backup")
	t.Logf("%s(%d writes went on during it)", r.stdout, written.Load()-before)

	// A damaged copy is refused and leaves the directory as it was.
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0x10
	badFile := filepath.Join(t.TempDir(), "bad.backup")
	if err := os.WriteFile(badFile, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	dataC := filepath.Join(t.TempDir(), "c-data")
	r = cli(t, a.Node, "", "restore", "--data-dir", dataC, badFile)
	if r.code != 1 || !strings.Contains(r.stderr, "SHA-256") {
		t.Fatalf("restore of a damaged file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(dataC); !os.IsNotExist(err) {
		t.Fatalf("a refused restore made %s: %v", dataC, err)
	}

	r = cli(t, a.Node, "", "restore", "--data-dir", dataC, file).ok(t, "restore")
	t.Log(r.stdout)
	// A directory that holds a node is refused.
	if r := cli(t, a.Node, "", "restore", "--data-dir", dataC, file); r.code != 1 || !strings.Contains(r.stderr, "not empty") {
		t.Fatalf("restore into a used directory: exit %d\n%s", r.code, r.stderr)
	}

	// Started as the cluster's nodes are: on new ports when one picked
	// was taken before the node bound it.
	c := startClusterNodes(t, []clusterSpec{{Name: "c", DataDir: dataC,
		Join: func([]string) []string { return []string{a.GossipAddr, nodes[1].GossipAddr} }}})[0]
	close(stop)
	wg.Wait()

	stA, err := a.Client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stC, err := c.Client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if stC.Node.Origin == stA.Node.Origin {
		t.Fatalf("the restored node took the backed-up node's origin %x", stA.Node.Origin)
	}
	curs, err := c.Client.Cursors(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, cu := range curs {
		got[cu.Name] = cu.Topic
	}
	if got["web-1"] != "prices" || got["web-2"] != "prices" {
		t.Errorf("the restored node's cursors: %v, want web-1 and web-2 on prices", curs)
	}

	all := []*clusterNode{a, nodes[1], c}
	view := waitConverged(t, all, "prices", keys, -1, 60*time.Second)
	for i, k := range keys {
		if view[k].Absent || view[k].Value != fmt.Sprint("price-", i) {
			t.Errorf("key %s after the restore: %+v", k, view[k])
		}
	}
	waitConverged(t, all, "load", nil, -1, 60*time.Second)
	waitVerified(t, c, 60*time.Second)
}
