package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// A node of three whose flushed log takes 64 bytes of garbage starts
// again (with its snapshot, or without one), sets the damaged records
// aside, pulls them back from its peers (its own origin's too) and
// converges: `cachecast verify` finds the fleet identical, a reader of
// the topic from the start reads every message, and status says what
// happened.
func TestDamagedLogHealsFromTheFleet(t *testing.T) {
	t.Parallel()
	for _, snap := range []bool{true, false} {
		t.Run(map[bool]string{true: "with its snapshot", false: "without a snapshot"}[snap], func(t *testing.T) {
			const perNode = 200
			ds := startCluster(t, 3, nil)
			var ownPos int64 // where node2's own record 100 is in its log
			for i := range perNode {
				for n, td := range ds {
					m := record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%d-%d", n, i), Value: bytes.Repeat([]byte{byte('a' + n)}, 150)}
					res, err := td.d.store.Publish(&m)
					if err != nil {
						t.Fatal(err)
					}
					if n == 2 && res.Seq == 100 {
						ownPos = res.Pos
					}
				}
			}
			testkit.Eventually(t, 20*time.Second, "the three nodes to hold every record", func() bool {
				for _, td := range ds {
					if total(td.d.store.Vector()) != 3*perNode {
						return false
					}
				}
				return true
			})
			c := ds[2]
			cfg := c.cfg
			cfg.Join = []string{ds[0].d.cluster.Gossip().Addr()}
			c.stop()
			if !snap {
				if err := os.Remove(filepath.Join(cfg.DataDir, "snapshot")); err != nil {
					t.Fatal(err)
				}
			}
			// With its snapshot, the garbage hits the node's own records
			// (its peers hold them: they were pushed to them); without
			// one, whatever lies in the middle of the log.
			at := int64(-1)
			if snap {
				at = ownPos + 16
			}
			corruptLog(t, filepath.Join(cfg.DataDir, "log"), at)
			own := c.d.store.Origin()

			c = startDaemon(t, cfg) // ready once caught up: the lost records are back
			st := c.d.store
			testkit.Eventually(t, 20*time.Second, "the lost records back", func() bool {
				damaged, repaired := st.RepairStats()
				return damaged > 0 && repaired == damaged && len(st.Lost()) == 0
			})
			damaged, _ := st.RepairStats()
			t.Logf("%d records set aside and pulled back", damaged)
			if snap && st.LastSeq(own) != perNode {
				t.Fatalf("the node holds its own origin up to %d, want %d", st.LastSeq(own), perNode)
			}
			testkit.Eventually(t, 20*time.Second, "verify to find the fleet identical", func() bool {
				return c.d.node.Verify(context.Background()).Identical
			})
			// A reader from the start reads every message: none is lost,
			// none ends the stream.
			r, err := st.NewTopicReader("prices", store.Start{From: store.FromEarliest}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for n := 0; n < 3*perNode; n++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := r.Next(ctx)
				cancel()
				if err != nil {
					t.Fatalf("reading the topic after %d messages: %v", n, err)
				}
			}
			rs := getStatus(t, c).Repair
			if rs == nil || rs.DamagedTotal != damaged || rs.RepairedTotal != damaged || rs.LostRecords != 0 {
				t.Fatalf("status repair: %+v", rs)
			}
			if _, err := os.Stat(filepath.Join(cfg.DataDir, "corrupt")); err != nil {
				t.Fatalf("the damaged bytes were not copied aside: %v", err)
			}
		})
	}
}

// A lone node (nobody holds its records) says so, and an operator gives
// the lost records up: the vector goes on, readers read past them.
func TestDamagedLogWithNoPeerIsAccepted(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	for i := range 300 {
		td.put("prices", fmt.Sprintf("sku-%d", i), strings.Repeat("v", 150))
	}
	td.stop()
	corruptLog(t, filepath.Join(cfg.DataDir, "log"), -1)
	td = startDaemon(t, cfg)
	st := td.d.store
	testkit.Eventually(t, 10*time.Second, "the damage found", func() bool { return st.Scrubbed() && len(st.Lost()) > 0 })
	lost := len(st.Lost())
	rs := getStatus(t, td).Repair
	if rs == nil || rs.LostRecords != lost || rs.Unavailable != lost || len(rs.Lost) != lost || rs.Lost[0].Available || rs.Lost[0].CopiedTo == "" {
		t.Fatalf("status repair of a lone node: %+v", rs)
	}
	if line := td.d.statusLine(); !strings.HasPrefix(line, fmt.Sprintf("REPAIRING, %d records lost", lost)) {
		t.Fatalf("STATUS line %q", line)
	}
	if r := td.do("POST", "/v1/repair/accept", nil); r.status != 200 || strings.Count(string(r.body), `"seq"`) != lost {
		t.Fatalf("POST /v1/repair/accept: %d %s", r.status, r.body)
	}
	if n := len(st.Lost()); n != 0 || st.LastSeq(st.Origin()) != 300 {
		t.Fatalf("after accept: %d lost, LastSeq %d", n, st.LastSeq(st.Origin()))
	}
	if rs := getStatus(t, td).Repair; rs == nil || rs.LostRecords != 0 || rs.DamagedTotal != uint64(lost) {
		t.Fatalf("status repair after accept: %+v", rs)
	}
	r, err := st.NewTopicReader("prices", store.Start{From: store.FromEarliest}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for n := 0; n < 300-lost; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("reading the topic after %d messages: %v", n, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a message past the end: %v", err)
	}
}

// Both nodes of two lost the same record of node0's (nobody holds it),
// yet node0's new writes travel: node0 pushes past its own lost record,
// node1 takes them, and the Redis follower of each node (pub/sub here;
// client tracking reads the same follower) tells them. Before, node0
// pushed nothing past the record and both followers stopped before it,
// until the record came back or `cachecast repair accept`. Once the
// record turns up it is pulled back and told too.
func TestLostRecordDoesNotHoldBackNewWrites(t *testing.T) {
	t.Parallel()
	const before, after = 200, 20
	ds := startCluster(t, 2, nil)
	own := ds[0].d.store.Origin()
	for i := range before {
		ds[0].put("prices", fmt.Sprintf("old-%d", i), strings.Repeat("v", 150))
	}
	testkit.Eventually(t, 10*time.Second, "node1 to hold node0's records", func() bool {
		return ds[1].d.store.LastSeq(own) == before
	})
	var raw []byte
	if _, err := ds[0].d.store.ReadOrigin(own, before/2, before/2, func(r record.Record) error {
		raw = r.Clone()
		return nil
	}); err != nil || raw == nil {
		t.Fatalf("reading seq %d: %v", before/2, err)
	}
	cfgs := []Config{ds[0].cfg, ds[1].cfg}
	ds[1].stop()
	ds[0].stop()
	for _, cfg := range cfgs {
		corruptRecord(t, filepath.Join(cfg.DataDir, "log"), raw)
	}
	// node0 remembers node1 (peers.json) and calls it at start, up to
	// the join timeout, before it is ready: node1 starts after it here.
	cfgs[0].JoinTimeout = 500 * time.Millisecond
	a := startDaemon(t, cfgs[0])
	cfgs[1].Join = []string{a.d.cluster.Gossip().Addr()}
	b := startDaemon(t, cfgs[1])
	for _, td := range []*testDaemon{a, b} {
		st := td.d.store
		testkit.Until(t, 10*time.Second, td.cfg.NodeName+" to find the damage", func() string {
			if lost := st.Lost(); !st.Scrubbed() || len(lost) != 1 || lost[0].Origin != own || lost[0].Seq != before/2 {
				return fmt.Sprintf("lost %+v", lost)
			}
			return ""
		})
		if got := st.LastSeq(own); got != before/2-1 {
			t.Fatalf("%s holds node0's records up to %d, want %d", td.cfg.NodeName, got, before/2-1)
		}
	}
	ctx := context.Background()
	var subs []*goredis.PubSub
	for _, td := range []*testDaemon{a, b} {
		sub := goRedis(t, td, 3).PSubscribe(ctx, "prices:*")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	for i := range after {
		a.put("prices", fmt.Sprintf("new-%d", i), fmt.Sprintf("n%d", i))
	}
	testkit.Until(t, 10*time.Second, "node1 to take node0's new writes", func() string {
		if got := b.d.store.LogLast(own); got != before+after {
			return fmt.Sprintf("node1's log holds node0's records up to %d, want %d", got, before+after)
		}
		return ""
	})
	// The log's end moves when a record is appended, the view a moment
	// later when it is applied: wait for the view too.
	testkit.Until(t, 10*time.Second, "node1's view to hold node0's new writes", func() string {
		for i := range after {
			if e, ok := b.d.store.Get("prices", fmt.Sprintf("new-%d", i)); !ok || string(e.Value) != fmt.Sprintf("n%d", i) {
				return fmt.Sprintf("node1's new-%d: %q %v", i, e.Value, ok)
			}
		}
		return ""
	})
	for n, sub := range subs {
		for i := range after {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			m, err := sub.ReceiveMessage(rctx)
			cancel()
			if err != nil || m.Channel != fmt.Sprintf("prices:new-%d", i) || m.Payload != fmt.Sprintf("n%d", i) {
				t.Fatalf("node%d's subscriber, message %d: %+v %v", n, i, m, err)
			}
		}
	}
	// The record turns up (as a peer would give it back) on node1: node1
	// tells it to its subscriber, late; node0 pulls it from node1 and
	// tells it too; the two are whole and identical.
	if _, err := b.d.store.AppendRecord(raw); err != nil {
		t.Fatalf("giving the lost record back to node1: %v", err)
	}
	lostKey := fmt.Sprintf("prices:old-%d", before/2-1)
	for n, sub := range subs {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := sub.ReceiveMessage(rctx)
		cancel()
		if err != nil || m.Channel != lostKey {
			t.Fatalf("node%d's subscriber, the record back: %+v %v; want %s", n, m, err, lostKey)
		}
	}
	for _, td := range []*testDaemon{a, b} {
		if lost, got := td.d.store.Lost(), td.d.store.LastSeq(own); len(lost) != 0 || got != before+after {
			t.Fatalf("%s after the repair: lost %v, LastSeq %d", td.cfg.NodeName, lost, got)
		}
	}
	testkit.Eventually(t, 10*time.Second, "verify to find the two identical", func() bool {
		return a.d.node.Verify(ctx).Identical
	})
}

// corruptRecord writes 32 bytes of garbage into the middle of raw, a
// record, where it lies in the log's first segment.
func corruptRecord(t *testing.T, dir string, raw []byte) {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("%020d", 0))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, raw)
	if at < 0 || len(raw) < 96 {
		t.Fatalf("the record (%d bytes) is not in %s", len(raw), path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5, 0x5a, 0xc3, 0x3c}, 8), int64(at+48)); err != nil {
		t.Fatal(err)
	}
}

// corruptLog writes 64 bytes of garbage at offset at of the log's first
// segment, or in the middle of its written part when at is negative.
func corruptLog(t *testing.T, dir string, at int64) {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("%020d", 0))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	off := int64(end/2) &^ 7
	if at >= 0 {
		off = at
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5, 0x5a, 0xc3, 0x3c}, 16), off); err != nil {
		t.Fatal(err)
	}
}

func total(v map[uint64]uint64) uint64 {
	var n uint64
	for _, s := range v {
		n += s
	}
	return n
}
