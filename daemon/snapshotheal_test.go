package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
)

// A flipped byte in the view snapshot no longer keeps the node from
// starting: the snapshot is set aside into corrupt/, the view is rebuilt
// from the log (which holds every record), every key is served, and
// status reports the repair.
func TestDamagedSnapshotHeals(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	const n = 200
	for i := range n {
		td.put("prices", fmt.Sprintf("sku-%03d", i), fmt.Sprintf("v%d", i))
	}
	td.stop() // a clean stop writes the snapshot
	path := filepath.Join(cfg.DataDir, "snapshot")
	testkit.FlipMiddleByte(t, path)
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	td = startDaemon(t, cfg)
	for i := range n {
		r := td.do("GET", fmt.Sprintf("/v1/topics/prices/keys/sku-%03d", i), nil)
		if r.status != 200 || !strings.Contains(string(r.body), fmt.Sprintf("v%d", i)) {
			t.Fatalf("sku-%03d after the heal: %d %s", i, r.status, r.body)
		}
	}
	st := getStatus(t, td)
	if st.Repair == nil || !strings.HasPrefix(st.Repair.SnapshotSetAside, filepath.Join(cfg.DataDir, "corrupt")+"/") {
		t.Fatalf("status repair %+v, want the snapshot set aside into corrupt/", st.Repair)
	}
	aside, err := os.ReadFile(st.Repair.SnapshotSetAside)
	if err != nil || string(aside) != string(damaged) {
		t.Fatalf("the damaged snapshot's bytes were not kept aside: %v", err)
	}
}
