package cluster

import (
	"maps"
	"testing"
	"time"

	"github.com/cachecast/cachecast/gossip"
)

// TestCatchTargetsWant: the vector a catch-up waits for keeps the part a
// peer reported while the peer is alive, suspect, or failed for less than
// catchUpGone (a loaded node's failure detector fails its peers for a
// moment: with both peers failed in one tick the old rule waited for
// nothing and the node was ready with 135,168 of 200,000 keys), and
// leaves it out once the peer left, has been failed for catchUpGone, or
// is forgotten. The steps run in order on one catchTargets.
func TestCatchTargetsWant(t *testing.T) {
	const a, b = uint64(0xa), uint64(0xb)
	ct := &catchTargets{
		vectors: map[string]map[uint64]uint64{
			"node0": {a: 200_000, b: 10},
			"node1": {a: 150_000, b: 30},
		},
		failed: map[string]time.Time{},
	}
	t0 := time.Unix(1_800_000_000, 0)
	members := func(s0, s1 gossip.State) []gossip.Member {
		return []gossip.Member{{Name: "fresh"}, {Name: "node0", State: s0}, {Name: "node1", State: s1}}
	}
	const (
		alive   = gossip.StateAlive
		suspect = gossip.StateSuspect
		dead    = gossip.StateDead
		left    = gossip.StateLeft
	)
	both := map[uint64]uint64{a: 200_000, b: 30}
	for _, step := range []struct {
		name    string
		at      time.Duration
		members []gossip.Member
		want    map[uint64]uint64
	}{
		{"both alive", 0, members(alive, alive), both},
		{"both suspect", time.Second, members(suspect, suspect), both},
		{"both failed for a moment", 2 * time.Second, members(dead, dead), both},
		{"both back", 3 * time.Second, members(alive, alive), both},
		{"node0 failed again", 4 * time.Second, members(dead, alive), both},
		{"node0 failed just under catchUpGone", 4*time.Second + catchUpGone - time.Millisecond, members(dead, alive), both},
		{"node0 failed for catchUpGone", 4*time.Second + catchUpGone, members(dead, alive), map[uint64]uint64{a: 150_000, b: 30}},
		{"node0 back, node1 left", 40 * time.Second, members(alive, left), map[uint64]uint64{a: 200_000, b: 10}},
		{"node1 forgotten", 41 * time.Second, members(alive, alive)[:2], map[uint64]uint64{a: 200_000, b: 10}},
		{"node0 failed anew: a new grace", 42 * time.Second, members(dead, alive)[:2], map[uint64]uint64{a: 200_000, b: 10}},
		{"node0 failed for catchUpGone too", 42*time.Second + catchUpGone, members(dead, alive)[:2], map[uint64]uint64{}},
	} {
		if got := ct.want(step.members, t0.Add(step.at)); !maps.Equal(got, step.want) {
			t.Errorf("%s: waits for %v, want %v", step.name, got, step.want)
		}
	}
}
