package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/testkit"
)

// TestExpiryChangeFeeds: EXPIRE and PERSIST reach every follower as what
// they are, a change of the expiry of the version the node held, not a
// new value: keyspace notifications name them expire and persist (no
// set), a tracking client's cached key is invalidated, the subscription
// stream shows the version they changed ("expiry_of") and its value,
// and TTL follows.
func TestExpiryChangeFeeds(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	ctx := context.Background()
	rc := goRedis(t, td, 2)
	must(rc.ConfigSet(ctx, "notify-keyspace-events", "KEA").Result())
	sub := rc.PSubscribe(ctx, "__keyspace@0__:prices:*")
	defer sub.Close()
	must(sub.Receive(ctx))
	lines := subscribeLines(t, td, "/v1/topics/prices/subscribe?from=latest")
	var iv invalidations
	cached := rueidisClient(t, td, rueidis.ClientOption{DisableAutoPipelining: true, OnInvalidations: iv.add})

	must(rc.Set(ctx, "prices:sku", "1.00", 0).Result())
	if v := must(cached.DoCache(ctx, cached.B().Get().Key("prices:sku").Cache(), time.Hour).ToString()); v != "1.00" {
		t.Fatalf("cached GET: %q", v)
	}
	if n := must(rc.Expire(ctx, "prices:sku", time.Hour).Result()); !n {
		t.Fatal("EXPIRE answered 0")
	}
	testkit.Eventually(t, 5*time.Second, "the EXPIRE invalidates the cached key", func() bool { return iv.has("prices:sku") })
	if ttl := must(rc.TTL(ctx, "prices:sku").Result()); ttl < 3590*time.Second || ttl > time.Hour {
		t.Fatalf("TTL after EXPIRE 3600: %v", ttl)
	}
	if n := must(rc.Persist(ctx, "prices:sku").Result()); !n {
		t.Fatal("PERSIST answered 0")
	}
	if ttl := must(rc.TTL(ctx, "prices:sku").Result()); ttl != -1 {
		t.Fatalf("TTL after PERSIST: %v", ttl)
	}
	if v := must(rc.Get(ctx, "prices:sku").Result()); v != "1.00" {
		t.Fatalf("GET after EXPIRE and PERSIST: %q", v)
	}

	for _, want := range []string{"set", "expire", "persist"} {
		select {
		case m := <-sub.Channel():
			if m.Channel != "__keyspace@0__:prices:sku" || m.Payload != want {
				t.Fatalf("notification %s %q, want __keyspace@0__:prices:sku %q", m.Channel, m.Payload, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s notification", want)
		}
	}

	got := streamObjects(t, lines, 3, "the three messages on the stream")
	set, expire, persist := got[0], got[1], got[2]
	of, _ := expire["expiry_of"].(map[string]any)
	switch {
	case set["expiry_of"] != nil:
		t.Fatalf("the SET's line names an expiry_of: %v", set)
	case of == nil || of["origin"] != set["origin"] || of["seq"] != set["seq"] || expire["value"] != "1.00" || expire["expires_at"] == nil:
		t.Fatalf("the EXPIRE's line %v does not name the SET's version %v with its value and expiry", expire, set)
	case persist["expiry_of"] == nil || persist["expires_at"] != nil:
		t.Fatalf("the PERSIST's line %v: want an expiry_of and no expires_at", persist)
	}
}

// TestFleetTooOldForExpiryChanges: beside a node of data protocol 6,
// which refuses records of version 3, EXPIRE and PERSIST are refused on
// every node with fleet_too_old naming it, and nothing is written; time
// fields, which protocol 6 carries, still go through.
func TestFleetTooOldForExpiryChanges(t *testing.T) {
	ds := startCluster(t, 2, func(i int, c *Config) {
		if i == 1 {
			hook(c, func(h *daemonhooks.Hooks) { h.DataProtocolMax = broadcast.ProtocolExpiry - 1 })
		}
	})
	ctx := context.Background()
	must(goRedis(t, ds[0], 2).Set(ctx, "prices:sku", "1.00", time.Hour).Result())
	for _, td := range ds {
		rc := goRedis(t, td, 2)
		testkit.Eventually(t, 20*time.Second, td.cfg.NodeName+" has the value", func() bool {
			v, err := rc.Get(ctx, "prices:sku").Result()
			return err == nil && v == "1.00"
		})
		for name, err := range map[string]error{
			"EXPIRE":  rc.Expire(ctx, "prices:sku", 2*time.Hour).Err(),
			"PERSIST": rc.Persist(ctx, "prices:sku").Err(),
		} {
			if err == nil || !strings.HasPrefix(err.Error(), "ERR fleet_too_old: ") || !strings.Contains(err.Error(), "node1 (protocol 6)") {
				t.Fatalf("%s on %s: %v; want ERR fleet_too_old naming node1", name, td.cfg.NodeName, err)
			}
		}
		if ttl := must(rc.TTL(ctx, "prices:sku").Result()); ttl > time.Hour || ttl < 59*time.Minute {
			t.Fatalf("TTL on %s after the refused changes: %v", td.cfg.NodeName, ttl)
		}
	}
}

// TestStreamNamesWhatAChangeAppliesTo: a subscription's line says what
// its record is. An increment is an "increment_of" the version it counts
// on, its value the increment (not an expiry change, not a write of the
// delta); one of a key's absence says "absent" (after the version named,
// or with no version for a key never held, as the revival of such a key
// has none); an expiry change of that revival is an "expiry_of" no
// version either. The revival of a key after a version (deleted, or
// expired) is served as that version (GET's Cachecast-Seq says it), and
// an expiry change of it is an "expiry_of" the absence after that
// version (record version 6), as the increments it follows, its value
// the revival's base "0".
func TestStreamNamesWhatAChangeAppliesTo(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	ctx := context.Background()
	rc := goRedis(t, td, 2)
	must(rc.Set(ctx, "stats:a", "5", 0).Result())
	must(rc.IncrBy(ctx, "stats:a", 3).Result())
	must(rc.IncrBy(ctx, "stats:hits", 3).Result())
	must(rc.Expire(ctx, "stats:hits", time.Hour).Result())
	must(rc.Set(ctx, "stats:b", "1", 0).Result())
	must(rc.Del(ctx, "stats:b").Result())
	must(rc.Incr(ctx, "stats:b").Result())
	must(rc.Expire(ctx, "stats:b", time.Hour).Result())
	must(rc.Set(ctx, "stats:c", "7", time.Millisecond).Result())
	testkit.Eventually(t, 10*time.Second, "stats:c expired", func() bool {
		return td.do("GET", "/v1/topics/stats/keys/c", nil).status == 404
	})
	must(rc.Incr(ctx, "stats:c").Result())
	must(rc.Expire(ctx, "stats:c", time.Hour).Result())
	for key, seq := range map[string]string{"b": "6", "c": "9"} {
		if r := td.do("GET", "/v1/topics/stats/keys/"+key, nil); r.status != 200 || string(r.body) != "1" || r.header.Get("Cachecast-Seq") != seq {
			t.Fatalf("GET stats/%s: %d %q seq %s; want the revival, 1, served as version %s", key, r.status, r.body, r.header.Get("Cachecast-Seq"), seq)
		}
	}

	lines := subscribeLines(t, td, "/v1/topics/stats/subscribe?from=earliest")
	got := streamObjects(t, lines, 11, "the messages on the stream")
	// of is the version a line names, as the line shows it: "" for
	// none, "absent" for an absence of no version, "seq N" for version N
	// of this node, "absent after seq N".
	of := func(m map[string]any, field string) string {
		o, ok := m[field].(map[string]any)
		if !ok {
			return ""
		}
		s := ""
		if seq, ok := o["seq"].(float64); ok {
			if o["origin"] != m["origin"] {
				t.Fatalf("%s %v names another node's version", field, o)
			}
			s = fmt.Sprintf("seq %d", int(seq))
		}
		switch a := o["absent"]; {
		case a == true && s == "":
			return "absent"
		case a == true:
			return "absent after " + s
		case a != nil || s == "":
			t.Fatalf("%s %v: want a version, or absent", field, o)
		}
		return s
	}
	want := []struct{ key, value, expiryOf, incrementOf string }{
		{"a", "5", "", ""},
		{"a", "3", "", "seq 1"},
		{"hits", "3", "", "absent"},
		{"hits", "0", "absent", ""},
		{"b", "1", "", ""},
		{"b", "", "", ""},
		{"b", "1", "", "absent after seq 6"},
		{"b", "0", "absent after seq 6", ""},
		{"c", "7", "", ""},
		{"c", "1", "", "absent after seq 9"},
		{"c", "0", "absent after seq 9", ""},
	}
	for i, w := range want {
		m := got[i]
		if m["key"] != w.key || m["value"] != w.value || of(m, "expiry_of") != w.expiryOf || of(m, "increment_of") != w.incrementOf {
			t.Errorf("line %d %v: want key %s value %q expiry_of %q increment_of %q", i, m, w.key, w.value, w.expiryOf, w.incrementOf)
		}
	}
}

// TestRevivalExpiryBesideProtocol9: beside a node of data protocol 9,
// which refuses records of version 6, an EXPIRE of a counter's revival
// is not refused: it is written as that build writes it, a version 3
// change naming the version only (its line's expiry_of has no
// "absent"), and both nodes serve the revival with its expiry.
func TestRevivalExpiryBesideProtocol9(t *testing.T) {
	ds := startCluster(t, 2, func(i int, c *Config) {
		if i == 1 {
			hook(c, func(h *daemonhooks.Hooks) { h.DataProtocolMax = broadcast.ProtocolRevival - 1 })
		}
	})
	ctx := context.Background()
	rc := goRedis(t, ds[0], 2)
	must(rc.Set(ctx, "stats:r", "5", 0).Result())
	must(rc.Del(ctx, "stats:r").Result())
	must(rc.IncrBy(ctx, "stats:r", 3).Result())
	old := goRedis(t, ds[1], 2)
	testkit.Eventually(t, 20*time.Second, "node1 has the revival", func() bool {
		v, err := old.Get(ctx, "stats:r").Result()
		return err == nil && v == "3"
	})
	if ok := must(rc.Expire(ctx, "stats:r", time.Hour).Result()); !ok {
		t.Fatal("EXPIRE of the revival found no key")
	}
	for _, c := range []*goredis.Client{rc, old} {
		testkit.Eventually(t, 20*time.Second, "the revival's expiry on both nodes", func() bool {
			ttl, err := c.TTL(ctx, "stats:r").Result()
			v, gerr := c.Get(ctx, "stats:r").Result()
			return err == nil && gerr == nil && v == "3" && ttl > 59*time.Minute && ttl <= time.Hour
		})
	}
	lines := subscribeLines(t, ds[0], "/v1/topics/stats/subscribe?from=earliest")
	got := streamObjects(t, lines, 4, "the messages on the stream")
	of, _ := got[3]["expiry_of"].(map[string]any)
	if of == nil || of["absent"] != nil || of["seq"] != got[1]["seq"] {
		t.Fatalf("the EXPIRE's line %v: want an expiry_of the deleted version %v without absent (record version 3)", got[3], got[1]["seq"])
	}
}
