package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// A member stopped for good stays missing on the others (degraded, verify
// not identical) until it is forgotten: POST /v1/cluster/forget/{name}
// with fleet=true on one node makes every alive node forget it (its
// peers.json too), after which none is degraded and verify passes. Alive
// members and the node itself are refused.
func TestForgetMemberRemovedForGood(t *testing.T) {
	t.Parallel()
	ds := startCluster(t, 3, nil)
	for _, tc := range []struct{ name, want string }{
		{"node1", "is alive"},
		{"node0", "is this node"},
	} {
		r := ds[0].do("POST", "/v1/cluster/forget/"+tc.name, nil)
		if r.status != 409 || !strings.Contains(string(r.body), tc.want) {
			t.Fatalf("forget %s: %d %s, want 409 %q", tc.name, r.status, r.body, tc.want)
		}
	}
	ds[2].stop()
	testkit.Until(t, 20*time.Second, "node0 and node1 to miss node2", func() string {
		for _, td := range ds[:2] {
			if v := td.splitView(); v.kind != cluster.DegradedMissing || !slices.Equal(v.missing, []string{"node2"}) || v.verifyOK {
				return fmt.Sprintf("%s: %+v", td.cfg.NodeName, v)
			}
		}
		return ""
	})

	r := ds[0].do("POST", "/v1/cluster/forget/node2?fleet=true", nil)
	var res wire.ForgetResult
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("forget node2: %d %s", r.status, r.body)
	}
	want := []wire.ForgetNode{{Name: "node0", Held: true}, {Name: "node1", Held: true}}
	if res.Member != "node2" || !slices.Equal(res.Nodes, want) {
		t.Fatalf("forget node2: %+v, want %+v", res, want)
	}
	for _, td := range ds[:2] {
		if v := td.splitView(); v.kind != "" || len(v.missing) != 0 || !v.verifyOK {
			t.Errorf("%s after the forget: %+v, want whole", td.cfg.NodeName, v)
		}
		b, err := os.ReadFile(filepath.Join(td.cfg.DataDir, "peers.json"))
		if err != nil || strings.Contains(string(b), `"node2"`) {
			t.Errorf("%s's peers.json after the forget (%v):\n%s", td.cfg.NodeName, err, b)
		}
	}
	// Asked again, nobody holds it any more.
	r = ds[1].do("POST", "/v1/cluster/forget/node2?fleet=1", nil)
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil || !slices.Equal(res.Nodes, []wire.ForgetNode{{Name: "node1"}, {Name: "node0"}}) {
		t.Fatalf("forget node2 again: %d %s", r.status, r.body)
	}
}
