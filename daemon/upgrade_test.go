package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// TestFleetTooOld: three nodes on loopback, node2 speaking the data
// protocol of the builds before time fields (DataProtocolMax 3, so it
// refuses records with them). While it is alive, a write with an expiry
// or an effective time is refused on every node, the old one included:
// 409 fleet_too_old over HTTP (NDJSON batches too), ERR fleet_too_old
// over Redis, naming node2, and nothing is written. Ordinary writes and
// MSET (written as a batch of the older builds, one record at a time)
// reach all three, a counter increment is refused, and no node counts a
// bad frame. Once node2 has left,
// the same writes go through and reach node1.
func TestFleetTooOld(t *testing.T) {
	ds := startCluster(t, 3, func(i int, c *Config) {
		if i == 2 {
			hook(c, func(h *daemonhooks.Hooks) { h.DataProtocolMax = broadcast.ProtocolTimed - 1 })
		}
	})
	ctx := context.Background()
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	refusedHTTP := func(td *testDaemon, what string, r resp) {
		t.Helper()
		if r.status != 409 || r.errCode() != wire.CodeFleetTooOld || !strings.Contains(string(r.body), "node2 (protocol 3)") {
			t.Fatalf("%s on %s: %d %s; want 409 fleet_too_old naming node2", what, td.cfg.NodeName, r.status, r.body)
		}
	}
	for _, td := range []*testDaemon{ds[0], ds[2]} {
		refusedHTTP(td, "PUT with Cachecast-Expires", td.do("PUT", "/v1/topics/prices/keys/sale", strings.NewReader("1"), "Cachecast-Expires", future))
		refusedHTTP(td, "PUT with Cachecast-Effective-At", td.do("PUT", "/v1/topics/prices/keys/sale", strings.NewReader("1"), "Cachecast-Effective-At", future))
		refusedHTTP(td, "an NDJSON batch with a ttl_ms", postNDJSON(t, td, "prices", []string{`{"key":"a","value":"1"}`, `{"key":"b","value":"2","ttl_ms":60000}`}))
		rc := goRedis(t, td, 2)
		if err := rc.Set(ctx, "prices:sale", "1", time.Minute).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR fleet_too_old: ") {
			t.Fatalf("SET EX on %s: %v; want ERR fleet_too_old", td.cfg.NodeName, err)
		}
	}
	var cl wire.ClusterStatus
	if r := ds[0].do("GET", "/v1/cluster", nil); r.status != 200 || json.Unmarshal(r.body, &cl) != nil {
		t.Fatalf("GET /v1/cluster: %d %s", r.status, r.body)
	}
	for _, m := range cl.Members {
		want := uint8(broadcast.ProtocolMax)
		if m.Name == "node2" {
			want = broadcast.ProtocolTimed - 1
		}
		if m.TooOld != (m.Name == "node2") || m.Protocol != want {
			t.Fatalf("/v1/cluster member %s: protocol %d, too_old %v", m.Name, m.Protocol, m.TooOld)
		}
	}
	for _, td := range ds {
		if r := td.do("GET", "/v1/topics/prices/keys/sale", nil); r.status != 404 {
			t.Fatalf("%s serves a refused write: %d %s", td.cfg.NodeName, r.status, r.body)
		}
		if r := td.do("GET", "/v1/topics/prices/keys/a", nil); r.status != 404 {
			t.Fatalf("%s serves part of a refused batch: %d %s", td.cfg.NodeName, r.status, r.body)
		}
	}

	ds[0].put("prices", "plain", "1")
	must(goRedis(t, ds[0], 2).MSet(ctx, "prices:m1", "a", "prices:m2", "b").Result())
	ds[2].put("prices", "from-old", "2")
	for _, td := range ds {
		for key, want := range map[string]string{"plain": "1", "m1": "a", "m2": "b", "from-old": "2"} {
			testkit.Eventually(t, 20*time.Second, td.cfg.NodeName+" has "+key, func() bool {
				r := td.do("GET", "/v1/topics/prices/keys/"+key, nil)
				return r.status == 200 && string(r.body) == want
			})
		}
	}
	// A counter increment needs protocol 8: refused while node2 is alive.
	if err := goRedis(t, ds[0], 2).Incr(ctx, "prices:plain").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR fleet_too_old: ") {
		t.Fatalf("INCR with node2 alive: %v; want ERR fleet_too_old", err)
	}
	for _, td := range ds {
		if n := td.d.cluster.Broadcast().BadFrames(); n != 0 {
			t.Fatalf("%s counted %d bad frames", td.cfg.NodeName, n)
		}
	}

	ds[2].stop()
	testkit.Eventually(t, 20*time.Second, "node2 gone from the others' membership", func() bool {
		return len(ds[0].d.cluster.Gossip().Alive()) == 2 && len(ds[1].d.cluster.Gossip().Alive()) == 2
	})
	if r := ds[0].do("PUT", "/v1/topics/prices/keys/sale", strings.NewReader("9.99"), "Cachecast-Expires", future); r.status != 200 {
		t.Fatalf("PUT with Cachecast-Expires after node2 left: %d %s", r.status, r.body)
	}
	must(goRedis(t, ds[0], 2).Set(ctx, "prices:flash", "1.00", time.Minute).Result())
	if n := must(goRedis(t, ds[0], 2).Incr(ctx, "prices:plain").Result()); n != 2 {
		t.Fatalf("INCR after node2 left: %d, want 2", n)
	}
	for key, want := range map[string]string{"sale": "9.99", "flash": "1.00", "plain": "2"} {
		testkit.Eventually(t, 20*time.Second, fmt.Sprintf("node1 has %s", key), func() bool {
			r := ds[1].do("GET", "/v1/topics/prices/keys/"+key, nil)
			return r.status == 200 && string(r.body) == want
		})
	}
}
