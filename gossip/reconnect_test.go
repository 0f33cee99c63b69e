package gossip

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cachecast/cachecast/internal/faultnet"
	"github.com/cachecast/cachecast/internal/testkit"
)

// partition cuts the gossip of every node of side a from every node of
// side b, both ways.
func partition(fn *faultnet.Net, a, b []*tnode) {
	for _, x := range a {
		for _, y := range b {
			fn.Cut(x.cfg.NodeName, y.Addr())
			fn.Cut(y.cfg.NodeName, x.Addr())
		}
	}
}

// stateOfMember is name's state as n sees it ("" if n does not know it).
func stateOfMember(n *tnode, name string) string {
	for _, m := range n.Members() {
		if m.Name == name {
			return m.State.String()
		}
	}
	return ""
}

// waitForgotten waits until n sees each of names dead and memberlist's
// GossipToTheDeadTime has passed since (and a few probe rounds more, for
// memberlist to drop them at the end of one): from then on memberlist
// alone never talks to them again. memberlist does not say when it
// drops a dead node, so this is a wait on its timer.
func waitForgotten(t *testing.T, n *tnode, names ...string) {
	t.Helper()
	mc := n.prof.ml()
	after := mc.GossipToTheDeadTime + 10*mc.ProbeInterval
	testkit.Until(t, 3*bound, n.cfg.NodeName+" to forget "+fmt.Sprint(names), func() string {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, name := range names {
			e, ok := n.members[name]
			if !ok || e.m.State != StateDead {
				return name + " is not dead"
			}
			if d := time.Since(e.since); d < after {
				return fmt.Sprintf("%s dead for %v of %v", name, d, after)
			}
		}
		return ""
	})
}

// A partition of the gossip itself (2|1, both ways), long enough for both
// sides to declare the other dead and for memberlist to stop gossiping to
// the dead: once healed, the reconnect loop merges the sides again.
func TestReconnectAfterPartition(t *testing.T) {
	leakCheck(t)
	fn := faultnet.New()
	nodes := cluster(t, 3, func(c *Config) { c.Unreachable = fn.Unreachable(c.NodeName) })
	a, b, c := nodes[0], nodes[1], nodes[2]

	partition(fn, []*tnode{a, b}, []*tnode{c})
	waitForgotten(t, a, "node-2")
	waitForgotten(t, b, "node-2")
	waitForgotten(t, c, "node-0", "node-1")
	for _, n := range nodes {
		if _, ok := n.rec.find(EventFailed, "node-2"); n != c && !ok {
			t.Fatalf("%s: no EventFailed for node-2", n.cfg.NodeName)
		}
	}

	fn.Heal()
	healed := time.Now()
	for _, n := range nodes {
		testkit.Until(t, bound, n.cfg.NodeName+" to see all alive after the heal", func() string {
			if got := names(n.Alive()); len(got) != 3 {
				return fmt.Sprint(got)
			}
			return ""
		})
	}
	t.Logf("merged %v after the heal (ReconnectInterval %v)", time.Since(healed).Round(time.Millisecond), a.cfg.ReconnectInterval)
	var merged uint64
	for _, n := range nodes {
		_, m := n.Reconnects()
		merged += m
		n.mu.Lock()
		left := len(n.failed)
		n.mu.Unlock()
		if left != 0 {
			t.Errorf("%s still remembers %d failed members after the merge", n.cfg.NodeName, left)
		}
	}
	if merged == 0 {
		t.Errorf("no node counted a reconnect that merged")
	}
	if ev, ok := c.rec.find(EventJoined, "node-0"); !ok || ev.Member.State != StateAlive {
		t.Errorf("node-2: no EventJoined for node-0 after the heal: %v", c.rec.about("node-0"))
	}
}

// A node whose seeds were unreachable when it joined (it started while
// they were down, or cut off) joins them by itself once they answer.
func TestReconnectSeedsWhenAlone(t *testing.T) {
	leakCheck(t)
	fn := faultnet.New()
	mod := func(c *Config) {
		c.Unreachable = fn.Unreachable(c.NodeName)
		c.JoinTimeout = 300 * time.Millisecond
	}
	ca, cb := testConfig(t, "node-0", 0x1000), testConfig(t, "node-1", 0x1001)
	mod(&ca)
	mod(&cb)
	a, b := start(t, ca, true), start(t, cb, true)
	partition(fn, []*tnode{a}, []*tnode{b})
	b.cfg.Join = []string{a.Addr()}
	if _, err := b.Join(context.Background()); !errors.Is(err, ErrJoin) {
		t.Fatalf("Join across the cut = %v, want ErrJoin", err)
	}
	fn.Heal()
	for _, n := range []*tnode{a, b} {
		testkit.Eventually(t, bound, n.cfg.NodeName+" to see both alive", func() bool { return len(n.Alive()) == 2 })
	}
	// Members show alive before the reconnect loop counts its merge.
	testkit.Eventually(t, bound, "node-1 to count a reconnect that merged", func() bool {
		_, merged := b.Reconnects()
		return merged > 0
	})
}

// A member that left gracefully is called back as one that crashed is
// (a node stopped cleanly and started again without seeds is otherwise an
// island), until ReconnectTimeout, and then forgotten. Two nodes: once
// node-1 has left, node-0 is alone and picks it at every interval.
func TestReconnectLeft(t *testing.T) {
	leakCheck(t)
	obs, logs := observer.New(zapcore.DebugLevel)
	nodes := cluster(t, 2, func(c *Config) {
		if c.NodeName == "node-0" {
			c.Logger = zap.New(zapcore.NewTee(c.Logger.Core(), obs))
			c.ReconnectTimeout = 3 * time.Second
		}
	})
	a, left := nodes[0], nodes[1]
	if err := left.Leave(bound); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, bound, "node-0 to see node-1 leave", func() bool { return stateOfMember(a, "node-1") == "left" })
	if err := left.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*bound, "node-0 to give up on node-1 after ReconnectTimeout", func() bool {
		return logs.FilterMessage("stopped reconnecting to a failed member").FilterField(zap.String("member", "node-1")).Len() == 1
	})
	tries, _ := a.Reconnects()
	// Every try is logged (with "to"); each at node-1's address.
	logged := logs.Filter(func(e observer.LoggedEntry) bool { _, ok := e.ContextMap()["to"]; return ok }).All()
	for _, e := range logged {
		addrs, _ := e.ContextMap()["addrs"].([]any)
		if m := e.ContextMap()["member"]; m != "node-1" || !slices.Contains(addrs, any(left.Addr())) {
			t.Errorf("node-0 reconnect to %v at %v, want node-1 at %s", m, addrs, left.Addr())
		}
	}
	if tries < 2 || uint64(len(logged)) != tries {
		t.Errorf("%d reconnects logged, %d tries counted; want the same, at least 2 (one a second for 3 s)", len(logged), tries)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.failed) != 0 {
		t.Errorf("node-0 still remembers %v", a.failed)
	}
}

// A node started without seeds but with Config.Remembered naming a member
// of a running cluster joins it by itself: the reconnect loop calls the
// remembered member back.
func TestReconnectRemembered(t *testing.T) {
	leakCheck(t)
	nodes := cluster(t, 2, nil)
	cfg := testConfig(t, "node-x", 0x2000)
	cfg.Remembered = []Remembered{
		{Name: "node-x", ID: 0x2000, Addr: "127.0.0.1:1", Since: time.Now()}, // itself: skipped
		{Name: "node-1", ID: 0x1001, Addr: nodes[1].Addr(), Since: time.Now()},
	}
	x := start(t, cfg, true)
	testkit.Eventually(t, bound, "node-x to find node-0 and node-1", func() bool {
		return stateOfMember(x, "node-0") == "alive" && stateOfMember(x, "node-1") == "alive"
	})
	// The members show up while the reconnect's join is still returning:
	// its count comes a moment later.
	testkit.Eventually(t, bound, "node-x to count the merge its reconnect made", func() bool {
		_, merged := x.Reconnects()
		return merged > 0
	})
}

// The table of failed members: who is remembered for reconnect, and what
// makes it forgotten.
func TestFailedTable(t *testing.T) {
	dead := Member{Name: "a", ID: 1, Addr: "127.0.0.1:1", State: StateDead}
	tests := []struct {
		name   string
		alive  []Member // in the member table before
		fail   []Member // NotifyLeave, in order
		join   *Member  // then NotifyJoin
		remain []string
	}{
		{"failed is remembered", nil, []Member{dead}, nil, []string{"a"}},
		{"left is too", nil, []Member{{Name: "a", ID: 1, Addr: "127.0.0.1:1", State: StateLeft}}, nil, []string{"a"}},
		{"failed then left is remembered", nil, []Member{dead, {Name: "a", ID: 1, Addr: "127.0.0.1:1", State: StateLeft}}, nil, []string{"a"}},
		{"alive again is forgotten", nil, []Member{dead, {Name: "a", ID: 1, Addr: "127.0.0.1:1", State: StateAlive}}, nil, nil},
		{"no address", nil, []Member{{Name: "a", ID: 1, State: StateDead}}, nil, nil},
		{"its address taken by an alive member", []Member{{Name: "b", ID: 2, Addr: "127.0.0.1:1"}}, []Member{dead}, nil, nil},
		{"back under its name", nil, []Member{dead}, &Member{Name: "a", ID: 1, Addr: "127.0.0.1:9"}, nil},
		{"back under its ID", nil, []Member{dead}, &Member{Name: "a2", ID: 1, Addr: "127.0.0.1:9"}, nil},
		{"another node at its address", nil, []Member{dead}, &Member{Name: "c", ID: 3, Addr: "127.0.0.1:1"}, nil},
		{"another node elsewhere", nil, []Member{dead}, &Member{Name: "c", ID: 3, Addr: "127.0.0.1:3"}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &Gossip{log: zap.NewNop(), members: map[string]*entry{}, failed: map[string]failure{}}
			for _, m := range tt.alive {
				g.members[m.Name] = &entry{m: m}
			}
			for _, m := range tt.fail {
				g.failedLocked(m)
			}
			if tt.join != nil {
				g.rejoinedLocked(*tt.join)
			}
			var got []string
			for name := range g.failed {
				got = append(got, name)
			}
			if !slices.Equal(got, tt.remain) {
				t.Fatalf("failed = %v, want %v", got, tt.remain)
			}
		})
	}
}

// Forget drops a failed or remembered member from the reconnect list (a
// member removed for good), and only it.
func TestForget(t *testing.T) {
	g := &Gossip{log: zap.NewNop(), members: map[string]*entry{}, failed: map[string]failure{}}
	g.failedLocked(Member{Name: "a", ID: 1, Addr: "127.0.0.1:1", State: StateDead})
	g.failedLocked(Member{Name: "b", ID: 2, Addr: "127.0.0.1:2", State: StateLeft})
	for _, tt := range []struct {
		name   string
		was    bool
		remain []string
	}{
		{"c", false, []string{"a", "b"}},
		{"a", true, []string{"b"}},
		{"a", false, []string{"b"}},
	} {
		if was := g.Forget(tt.name); was != tt.was {
			t.Fatalf("Forget(%s) = %v, want %v", tt.name, was, tt.was)
		}
		got := slices.Sorted(maps.Keys(g.failed))
		if !slices.Equal(got, tt.remain) {
			t.Fatalf("after Forget(%s): failed = %v, want %v", tt.name, got, tt.remain)
		}
	}
}
