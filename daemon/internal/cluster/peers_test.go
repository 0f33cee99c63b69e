package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/gossip"
)

// The remembered peers survive a save and a load, without this node,
// without members unseen for longer than the grace; the ones not alive
// are missing; the first join takes --join and a few of them.
func TestPeerBook(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	grace := time.Hour
	pb := loadPeerBook(dir, "self", grace, now, zap.NewNop())
	members := []gossip.Member{
		{Name: "self", ID: 1, Addr: "127.0.0.1:1", State: gossip.StateAlive},
		{Name: "b", ID: 2, Addr: "127.0.0.1:2", DataAddr: "127.0.0.1:12", State: gossip.StateAlive},
		{Name: "c", ID: 3, Addr: "127.0.0.1:3", State: gossip.StateAlive},
		{Name: "d", ID: 4, Addr: "127.0.0.1:4", State: gossip.StateAlive},
	}
	pb.update(members, now.Add(-2*grace)) // d seen long ago only
	members = members[:3]
	pb.update(members, now.Add(-time.Minute))
	members[2].State = gossip.StateLeft
	pb.update(members, now)
	if got := pb.missing(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("missing = %v, want [c] (d past the grace)", got)
	}
	pb.save(now, false)
	if _, err := os.Stat(filepath.Join(dir, peersFile+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}

	again := loadPeerBook(dir, "self", grace, now.Add(time.Minute), zap.NewNop())
	var names []string
	for _, r := range again.remembered() {
		names = append(names, r.Name)
		if r.Name == "b" && (r.ID != 2 || r.Addr != "127.0.0.1:2") {
			t.Errorf("b remembered as %+v", r)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"b", "c"}) {
		t.Fatalf("remembered %v, want [b c]", names)
	}
	if got := again.missing(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("after a restart, missing = %v, want [b c] until they are seen", got)
	}
	seeds := again.seeds([]string{"127.0.0.1:9", "127.0.0.1:2"})
	slices.Sort(seeds)
	if !slices.Equal(seeds, []string{"127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:9"}) {
		t.Fatalf("seeds = %v", seeds)
	}
	if late := loadPeerBook(dir, "self", grace, now.Add(2*grace), zap.NewNop()); len(late.remembered()) != 0 {
		t.Fatalf("remembered past the grace: %v", late.remembered())
	}
}

// A damaged peers.json is an empty book, not a failed start.
func TestPeerBookDamaged(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, peersFile), []byte("{\"version\":1,\"peers\":[{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pb := loadPeerBook(dir, "self", time.Hour, time.Now(), zap.NewNop()); len(pb.remembered()) != 0 {
		t.Fatalf("remembered from a damaged file: %v", pb.remembered())
	}
}

// parsePeers never panics and keeps only entries with a name and an
// address.
func FuzzParsePeers(f *testing.F) {
	f.Add([]byte(`{"version":1,"peers":[{"name":"b","origin":"0000000000000002","addr":"127.0.0.1:2","data_addr":"127.0.0.1:12","seen_ms":1}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		peers, err := parsePeers(b)
		if err != nil {
			return
		}
		for _, p := range peers {
			if p.Name == "" || p.Addr == "" {
				t.Fatalf("kept %+v", p)
			}
		}
	})
}
