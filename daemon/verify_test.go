package daemon

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

func (td *testDaemon) verify() wire.VerifyResult {
	td.t.Helper()
	r := td.do("GET", "/v1/verify", nil)
	if r.status != 200 {
		td.t.Fatalf("GET /v1/verify: %d %s", r.status, r.body)
	}
	var res wire.VerifyResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		td.t.Fatalf("GET /v1/verify: %v: %s", err, r.body)
	}
	return res
}

// TestVerifyCluster: on three nodes holding the same view, GET /v1/verify
// answers identical with every node's digest at one vector (and
// /v1/status shows the same digest); once one node's view differs on a
// topic at the same vector, it names that node and that topic.
func TestVerifyCluster(t *testing.T) {
	t.Parallel()
	ds := startCluster(t, 3, nil)
	for i := range 20 {
		ds[i%3].put("prices", fmt.Sprintf("sku-%d", i), fmt.Sprintf("v%d", i))
	}
	ds[1].put("stock", "sku-1", "4")
	testkit.Eventually(t, 20*time.Second, "the cluster verified identical", func() bool { return ds[2].verify().Identical })
	res := ds[0].verify()
	if !res.Identical || !res.CommonVector || len(res.Nodes) != 3 || res.Differ != nil {
		t.Fatalf("identical cluster: %+v", res)
	}
	var st wire.Status
	if err := json.Unmarshal(ds[1].do("GET", "/v1/status", nil).body, &st); err != nil {
		t.Fatal(err)
	}
	if st.View == nil || st.View.Topics["prices"] != res.Nodes[0].View.Topics["prices"] || len(st.View.Vector) != 3 {
		t.Fatalf("status view digest %+v; want the verified one, %+v", st.View, res.Nodes[0].View)
	}

	// Divergence no anti-entropy can see: the same (origin, seq) of an
	// origin that is no node, with another value on node2, appended to
	// all three at once, so every vector says the same.
	forged := func(value string) []byte {
		m := record.Message{Topic: "prices", Key: "forged", Value: []byte(value)}
		b := make([]byte, 256)
		return b[:record.Encode(b, &m, record.Stamp{Origin: 0xf0f0, Seq: 1, HLC: 1})]
	}
	var wg sync.WaitGroup
	for i, td := range ds {
		value := "one"
		if i == 2 {
			value = "two"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := td.d.store.AppendRecord(forged(value)); err != nil {
				t.Errorf("%s: %v", td.cfg.NodeName, err)
			}
		}()
	}
	wg.Wait()
	res = ds[0].verify()
	want := []wire.VerifyDiff{{Node: "node2", Topics: []string{"prices"}}}
	if res.Identical || !res.CommonVector || !slices.EqualFunc(res.Differ, want, func(a, b wire.VerifyDiff) bool {
		return a.Node == b.Node && slices.Equal(a.Topics, b.Topics)
	}) {
		t.Fatalf("diverged cluster: %+v; want node2 differing on prices", res)
	}
}

// TestStatusKeepsTheViewDigest: GET /v1/status hashes the view once and
// answers that digest again while the view holds it, however often it is
// called (cachecast_store_view_digests_total does not move), at the
// current vector (a message without a key moves the vector, not the
// view), with the time of the call; a write makes it hash again, and
// its answer is the view's digest as a full hash gives it.
func TestStatusKeepsTheViewDigest(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, testConfig(t))
	for i := range 50 {
		td.put("prices", fmt.Sprintf("sku-%d", i), fmt.Sprint(i))
	}
	first := getStatus(t, td).View
	hashes, _ := td.d.store.DigestStats()
	td.do("POST", "/v1/topics/prices/messages", strings.NewReader(`{"value":"no key"}`+"\n"), "Content-Type", "application/x-ndjson")
	var last *wire.ViewDigest
	for range 100 {
		last = getStatus(t, td).View
	}
	if n, _ := td.d.store.DigestStats(); n != hashes {
		t.Fatalf("100 status calls on an unchanged view took %d hashes of it", n-hashes)
	}
	if !maps.Equal(last.Topics, first.Topics) || maps.Equal(last.Vector, first.Vector) || last.At < first.At {
		t.Fatalf("status digest after a message without a key %+v; want the first one's digest %+v at the new vector, not taken earlier", last, first)
	}
	td.put("prices", "sku-1", "changed")
	// Status hashes the changed view once its last hash is far enough
	// behind (statusHashShare): until then it answers the last digest.
	var d *wire.ViewDigest
	vector := cluster.WireDigest(store.ViewDigest{Vector: td.d.store.Vector()}).Vector
	testkit.Eventually(t, 10*time.Second, "status to show the write", func() bool {
		d = getStatus(t, td).View
		return maps.Equal(d.Vector, vector)
	})
	want := cluster.WireDigest(store.ViewDigest{Vector: td.d.store.Vector(), Topics: td.d.store.ViewDigests().Topics})
	if n, _ := td.d.store.DigestStats(); n != hashes+1 || !maps.Equal(d.Topics, want.Topics) || !maps.Equal(d.Vector, want.Vector) || maps.Equal(d.Topics, first.Topics) {
		t.Fatalf("status after a write: %+v (%d hashes since), want the view's digest %+v", d, n-hashes, want)
	}
}

// TestVerifyOfAnUnchangedView: GET /v1/verify hashes the view when it
// changed since the last digest, and not when it did not (a loop of
// verifies on a quiet node costs no hash); every answer is exact.
func TestVerifyOfAnUnchangedView(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, testConfig(t))
	td.put("prices", "sku-1", "12.75")
	check := func(what string, wantHashes uint64) {
		t.Helper()
		before, _ := td.d.store.DigestStats()
		res := td.verify()
		after, _ := td.d.store.DigestStats()
		want := cluster.WireDigest(td.d.store.ViewDigests())
		if !res.Identical || len(res.Nodes) != 1 || !maps.Equal(res.Nodes[0].View.Topics, want.Topics) || after-before != wantHashes {
			t.Fatalf("%s: %+v after %d hashes; want the view's digest %v after %d", what, res, after-before, want.Topics, wantHashes)
		}
	}
	check("first", 1)
	check("again", 0)
	td.put("prices", "sku-1", "13.00")
	check("after a write", 1)
}
