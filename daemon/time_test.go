package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/internal/faultnet"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
)

// fleetClock is the injected wall clock of a test's nodes: one base the
// test moves, and an offset per node (within --max-clock-offset, so that
// each node stops serving at its own clock's instant).
type fleetClock struct{ base atomic.Int64 } // Unix ms

func (c *fleetClock) of(offset time.Duration) func() time.Time {
	return func() time.Time { return time.UnixMilli(c.base.Load()).Add(offset) }
}

// clockOffsets are the nodes' offsets from the base: the fleet's clocks
// spread over 300 ms, within the default --max-clock-offset (500 ms).
var clockOffsets = []time.Duration{0, 150 * time.Millisecond, -150 * time.Millisecond}

// startTimedCluster is a 3-node cluster on clock.
func startTimedCluster(t *testing.T, clock *fleetClock) []*testDaemon {
	clock.base.Store(time.Now().UnixMilli())
	return startCluster(t, 3, func(i int, c *Config) { hook(c, func(h *daemonhooks.Hooks) { h.Clock = clock.of(clockOffsets[i]) }) })
}

// getValue is GET of (topic, key): the value, or "" for a 404.
func getValue(t *testing.T, td *testDaemon, topic, key string) string {
	t.Helper()
	r := td.do("GET", "/v1/topics/"+topic+"/keys/"+key, nil)
	switch r.status {
	case 200:
		return string(r.body)
	case 404:
		return ""
	}
	t.Fatalf("%s: GET %s/%s: %d %s", td.cfg.NodeName, topic, key, r.status, r.body)
	return ""
}

// postNDJSON publishes lines as one batch on td.
func postNDJSON(t *testing.T, td *testDaemon, topic string, lines []string, header ...string) resp {
	t.Helper()
	return td.do("POST", "/v1/topics/"+topic+"/messages", strings.NewReader(strings.Join(lines, "\n")),
		append([]string{"Content-Type", "application/x-ndjson"}, header...)...)
}

// TestClusterExpiry: values with TTLs from 50 ms to 5 s, published on two
// nodes through both doors, disappear on every node at the instant of its
// own clock (the nodes' clocks 150 ms apart); a subscriber hears each
// expiry; a node down across the expiries never serves the values when it
// comes back; no snapshot holds an expired value.
func TestClusterExpiry(t *testing.T) {
	t.Parallel()
	var clock fleetClock
	ds := startTimedCluster(t, &clock)
	t0 := clock.base.Load()
	ttls := []int64{50, 100, 250, 500, 1000, 2000, 5000}
	expires := map[string]int64{}
	var lines []string
	for i, ttl := range ttls {
		key := fmt.Sprintf("sku-%d", i)
		lines = append(lines, fmt.Sprintf(`{"key":%q,"value":"secret-price-%d","ttl_ms":%d}`, key, i, ttl))
		expires[key] = t0 + ttl // node0's clock is the base
	}
	if r := postNDJSON(t, ds[0], "prices", lines); r.status != 200 {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	// One through the Redis door of node1, whose clock is 150 ms ahead.
	rc := goRedis(t, ds[1], 2)
	must(rc.Do(context.Background(), "SET", "prices:redis-sku", "secret-price-r", "PX", "300").Result())
	expires["redis-sku"] = t0 + 150 + 300
	// And one by header, on node2 (150 ms behind).
	if r := ds[2].do("PUT", "/v1/topics/prices/keys/header-sku", strings.NewReader("secret-price-h"),
		"Cachecast-Expires", strconv.FormatInt(t0+700, 10)); r.status != 200 {
		t.Fatalf("PUT with Cachecast-Expires: %d %s", r.status, r.body)
	}
	expires["header-sku"] = t0 + 700

	waitVectors(t, ds)
	if r := ds[0].do("GET", "/v1/topics/prices/keys/sku-1", nil); r.header.Get("Cachecast-Expires") != msTimeOf(expires["sku-1"]) {
		t.Fatalf("Cachecast-Expires %q, want %q", r.header.Get("Cachecast-Expires"), msTimeOf(expires["sku-1"]))
	}

	// A subscriber of node2 hears the expiries.
	events := subscribeLines(t, ds[2], "/v1/topics/prices/subscribe?from=latest&events=expired")

	// node1 is down across the last expiry.
	down := ds[1]
	// Walk the clock over every instant: just before it, then at it, for
	// each node's own clock.
	var instants []int64
	for _, e := range expires {
		for _, off := range clockOffsets {
			instants = append(instants, e-off.Milliseconds()-1, e-off.Milliseconds())
		}
	}
	slices.Sort(instants)
	for _, base := range instants {
		if base < clock.base.Load() {
			continue
		}
		if base >= expires["sku-6"]-500 && down != nil {
			down.stop() // the last expiry passes while node1 is down
			down = nil
		}
		clock.base.Store(base)
		for i, td := range ds {
			if i == 1 && down == nil {
				continue
			}
			now := base + clockOffsets[i].Milliseconds()
			for key, e := range expires {
				got := getValue(t, td, "prices", key)
				if want := now < e; (got != "") != want {
					t.Fatalf("%s at its %+dms: %s = %q, want served %v (expires at %+dms)", td.cfg.NodeName, now-t0, key, got, want, e-t0)
				}
			}
		}
	}
	clock.base.Store(clock.base.Load() + 1000)

	// Every expiry reached the subscriber, once.
	seen := map[string]int{}
	testkit.Eventually(t, 10*time.Second, "the subscriber heard every expiry", func() bool {
		for {
			select {
			case l := <-events:
				var ev struct{ Event, Key string }
				if json.Unmarshal([]byte(l), &ev) == nil && ev.Event == "expired" {
					seen[ev.Key]++
				}
				continue
			default:
			}
			return len(seen) == len(expires)
		}
	})
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("the subscriber heard %s expire %d times", k, n)
		}
	}

	// node1 comes back after the expiries: it never serves them.
	back := startDaemon(t, ds[1].cfg)
	for key := range expires {
		if got := getValue(t, back, "prices", key); got != "" {
			t.Fatalf("node1, back after the expiries, serves %s = %q", key, got)
		}
	}

	// No snapshot holds an expired value.
	for _, td := range []*testDaemon{ds[0], ds[2], back} {
		if err := td.d.store.Snapshot(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(td.cfg.DataDir, "snapshot"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "secret-price") {
			t.Fatalf("%s: the snapshot holds an expired value", td.cfg.NodeName)
		}
	}
}

// msTimeOf is Unix ms as the API writes a time.
func msTimeOf(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// subscribeLines opens a subscription stream and sends its lines on the
// channel until the test ends.
func subscribeLines(t *testing.T, td *testDaemon, path string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", "http://cachecast"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.UnixClient(td.cfg.Socket, true, 0)
	res, err := c.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("subscribe %s: %v %v", path, err, res)
	}
	lines := make(chan string, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		res.Body.Close()
		wg.Wait()
	})
	return lines
}

// streamObjects waits for the first n lines of a stream subscribeLines
// reads, and returns them decoded; what names them for the message of a
// timeout.
func streamObjects(t *testing.T, lines <-chan string, n int, what string) []map[string]any {
	t.Helper()
	var got []map[string]any
	testkit.Eventually(t, 10*time.Second, what, func() bool {
		for {
			select {
			case l := <-lines:
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
				got = append(got, m)
				continue
			default:
			}
			return len(got) >= n
		}
	})
	return got
}

// TestClusterExpiryRealClock: the same on the real clock, TTLs from 50 ms
// to 1 s: every read that served a value started before its expiry, and
// every node stops serving it.
func TestClusterExpiryRealClock(t *testing.T) {
	ds := startCluster(t, 3, nil)
	ttls := []int64{50, 100, 200, 400, 1000}
	var lines []string
	for i, ttl := range ttls {
		lines = append(lines, fmt.Sprintf(`{"key":"k%d","value":"v","ttl_ms":%d}`, i, ttl))
	}
	r := postNDJSON(t, ds[0], "prices", lines)
	if r.status != 200 {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	var res struct{ Results []struct{ HLC string } }
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	h, _ := strconv.ParseUint(res.Results[0].HLC, 10, 64)
	stamped := int64(h >> 16)
	var wg sync.WaitGroup
	for _, td := range ds {
		for i, ttl := range ttls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("k%d", i)
				expiry := stamped + ttl
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					start := time.Now().UnixMilli()
					rr := td.do("GET", "/v1/topics/prices/keys/"+key, nil)
					if rr.status == 200 && start >= expiry {
						t.Errorf("%s served %s in a read started %d ms after its expiry", td.cfg.NodeName, key, start-expiry)
						return
					}
					if rr.status == 404 && start >= expiry {
						return // gone, and stays gone (checked below)
					}
					time.Sleep(time.Millisecond)
				}
				t.Errorf("%s still serves %s 10 s on", td.cfg.NodeName, key)
			}()
		}
	}
	wg.Wait()
	for _, td := range ds {
		for i := range ttls {
			if got := getValue(t, td, "prices", fmt.Sprintf("k%d", i)); got != "" {
				t.Fatalf("%s serves k%d again", td.cfg.NodeName, i)
			}
		}
	}
}

// skus are n keys sku-0000.. and their Redis names.
func skus(n int) (keys, names []string) {
	for i := range n {
		k := fmt.Sprintf("sku-%04d", i)
		keys, names = append(keys, k), append(names, "prices:"+k)
	}
	return keys, names
}

// publishAll publishes value(i) for every key as one NDJSON batch on td,
// with extra fields on each line.
func publishAll(t *testing.T, td *testDaemon, keys []string, value func(i int) string, extra string) {
	t.Helper()
	var lines []string
	for i, k := range keys {
		lines = append(lines, fmt.Sprintf(`{"key":%q,"value":%q%s}`, k, value(i), extra))
	}
	if r := postNDJSON(t, td, "prices", lines); r.status != 200 {
		t.Fatalf("%s: publish: %d %s", td.cfg.NodeName, r.status, r.body)
	}
}

// checkValues reads every key from td's Redis door in one MGET (one
// instant) and checks it against want(i).
func checkValues(t *testing.T, td *testDaemon, names []string, want func(i int) string, what string) {
	t.Helper()
	vals := must(goRedis(t, td, 2).MGet(context.Background(), names...).Result())
	for i, v := range vals {
		if s, _ := v.(string); s != want(i) {
			t.Fatalf("%s: %s: %s = %q, want %q", td.cfg.NodeName, what, names[i], s, want(i))
		}
	}
}

// TestClusterScheduledFlip: 1,000 SKUs scheduled for one instant 2 s
// ahead flip on every node at that instant of its own clock (the clocks
// 300 ms apart): the millisecond before, every node serves the value in
// force (a write for now published after the schedule included), at the
// instant the scheduled one; a subscriber hears each take effect; after
// the instant an ordinary write wins again.
func TestClusterScheduledFlip(t *testing.T) {
	t.Parallel()
	var clock fleetClock
	ds := startTimedCluster(t, &clock)
	const n = 1000
	keys, names := skus(n)
	instant := clock.base.Load() + 2000
	regular := func(i int) string { return fmt.Sprintf("regular-%d", i) }
	sale := func(i int) string { return fmt.Sprintf("sale-%d", i) }
	publishAll(t, ds[1], keys, regular, "")
	publishAll(t, ds[0], keys, sale, fmt.Sprintf(`,"effective_at":%d`, instant))
	// A write for now, published after the schedule, before the instant.
	clock.base.Add(500)
	publishAll(t, ds[2], keys[:10], func(i int) string { return "later-for-now" }, "")
	before := func(i int) string {
		if i < 10 {
			return "later-for-now"
		}
		return regular(i)
	}
	waitVectors(t, ds)
	events := subscribeLines(t, ds[2], "/v1/topics/prices/subscribe?from=latest&events=effective")
	for _, td := range ds {
		r := td.do("GET", "/v1/topics/prices/pending?limit=10000", nil)
		var p struct {
			Pending []struct {
				Key, Value  string
				EffectiveAt string `json:"effective_at"`
			}
		}
		if err := json.Unmarshal(r.body, &p); err != nil || r.status != 200 || len(p.Pending) != n || p.Pending[0].EffectiveAt != msTimeOf(instant) {
			t.Fatalf("%s: pending: %d, %d records (%v)", td.cfg.NodeName, r.status, len(p.Pending), err)
		}
	}
	// Each node flips at the instant of its own clock: the nodes whose
	// clock runs ahead first.
	order := []int{1, 0, 2} // offsets +150, 0, -150 ms
	for _, i := range order {
		td := ds[i]
		clock.base.Store(instant - clockOffsets[i].Milliseconds() - 1)
		checkValues(t, td, names, before, "1 ms before the instant")
		clock.base.Store(instant - clockOffsets[i].Milliseconds())
		checkValues(t, td, names, sale, "at the instant")
	}
	heard := map[string]bool{}
	testkit.Eventually(t, 10*time.Second, "the subscriber heard every SKU take effect", func() bool {
		for {
			select {
			case l := <-events:
				var ev struct{ Event, Key, Value string }
				if json.Unmarshal([]byte(l), &ev) == nil && ev.Event == "effective" && strings.HasPrefix(ev.Value, "sale-") {
					heard[ev.Key] = true
				}
				continue
			default:
			}
			return len(heard) == n
		}
	})
	// After the instant an ordinary write wins again.
	clock.base.Add(1000)
	publishAll(t, ds[1], keys[:10], func(i int) string { return "after" }, "")
	waitVectors(t, ds)
	for _, td := range ds {
		checkValues(t, td, names, func(i int) string {
			if i < 10 {
				return "after"
			}
			return sale(i)
		}, "after the instant and a new write")
		if r := td.do("GET", "/v1/topics/prices/pending", nil); !strings.Contains(string(r.body), `"pending":[]`) {
			t.Fatalf("%s: pending after the instant: %s", td.cfg.NodeName, r.body)
		}
	}
}

// TestClusterScheduledPartition: node1 and node2 are cut off from the
// others' data ports (where every record travels, pushed or repaired;
// gossip still sees them alive) when node0 publishes the schedule. node1,
// healed before the instant, flips at the instant of its own clock;
// node2, still cut off past the instant, serves the old values until it
// learns of the schedule, and the scheduled ones from then on. Neither
// restarts: what they learn comes over the healed network.
func TestClusterScheduledPartition(t *testing.T) {
	var clock fleetClock
	clock.base.Store(time.Now().UnixMilli())
	fn := faultnet.New()
	ds := startCluster(t, 3, func(i int, c *Config) {
		hook(c, func(h *daemonhooks.Hooks) { h.Clock = clock.of(clockOffsets[i]) })
		hook(c, func(h *daemonhooks.Hooks) { h.DataDial = fn.Dialer(c.NodeName) })
	})
	// cut cuts node i's data links to and from every other node; heal
	// mends those to the nodes not cut off.
	apart := map[int]bool{}
	links := func(i int, each func(from, addr string)) {
		for j, other := range ds {
			if j != i && !apart[j] {
				each(ds[i].cfg.NodeName, other.d.DataAddr())
				each(other.cfg.NodeName, ds[i].d.DataAddr())
			}
		}
	}
	cut := func(i int) { links(i, fn.Cut); apart[i] = true }
	heal := func(i int) { delete(apart, i); links(i, fn.Uncut) }
	const n = 100
	keys, names := skus(n)
	regular := func(i int) string { return fmt.Sprintf("regular-%d", i) }
	sale := func(i int) string { return fmt.Sprintf("sale-%d", i) }
	publishAll(t, ds[0], keys, regular, "")
	waitVectors(t, ds)

	cut(1)
	cut(2)
	testkit.Eventually(t, 10*time.Second, "node0's data links down", func() bool {
		for _, m := range ds[0].d.ClusterStatus().Members {
			if !m.Self && m.Connected {
				return false
			}
		}
		return true
	})
	instant := clock.base.Load() + 2000
	publishAll(t, ds[0], keys, sale, fmt.Sprintf(`,"effective_at":%d`, instant))

	clock.base.Add(200)
	heal(1)
	waitVectors(t, ds[:2])
	if r := ds[1].do("GET", "/v1/topics/prices/pending?limit=1000", nil); strings.Count(string(r.body), `"effective_at"`) != n {
		t.Fatalf("node1, healed before the instant: pending: %d %s", r.status, r.body)
	}
	clock.base.Store(instant - clockOffsets[1].Milliseconds() - 1)
	checkValues(t, ds[1], names, regular, "healed before the instant, 1 ms before it")
	clock.base.Store(instant - clockOffsets[1].Milliseconds())
	checkValues(t, ds[1], names, sale, "healed before the instant, at it")

	// node2 has been cut off for as long as node1 took to heal: it has
	// not heard of the schedule, past the instant of its own clock too.
	clock.base.Store(instant + 3000)
	checkValues(t, ds[2], names, regular, "still cut off, past the instant")
	heal(2)
	waitVectors(t, ds)
	checkValues(t, ds[2], names, sale, "healed after the instant, once it holds the records")
}

// TestClusterBatchVisibleTogether: while batches of 100 keys are published
// on node0, readers hammering MGET over the batch's keys on every node, and
// the shared view file's GetMany on every node, never see a mix of two
// batches.
func TestClusterBatchVisibleTogether(t *testing.T) {
	ds := startCluster(t, 3, nil)
	keys, names := skus(100)
	const batches = 200
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var reads, viewReads atomic.Int64
	for _, td := range ds {
		r, err := localview.Open(td.cfg.ViewPath())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var items []localview.Item
			var buf []byte
			for ctx.Err() == nil {
				var err error
				if items, buf, err = r.GetMany([]string{"prices"}, keys, items, buf); err != nil {
					if !errors.Is(err, localview.ErrNotReady) {
						t.Errorf("%s: view GetMany: %v", td.cfg.NodeName, err)
						return
					}
					continue
				}
				viewReads.Add(1)
				time.Sleep(100 * time.Microsecond) // the daemons need the cores more
				for i, it := range items {
					if it.Found != items[0].Found || string(it.Value) != string(items[0].Value) {
						t.Errorf("%s: one view GetMany saw %s = %q and %s = %q: a mix of two batches", td.cfg.NodeName, keys[0], items[0].Value, keys[i], it.Value)
						cancel()
						return
					}
				}
			}
		}()
		rc := goRedis(t, td, 2)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				vals, err := rc.MGet(ctx, names...).Result()
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s: MGET: %v", td.cfg.NodeName, err)
					}
					return
				}
				reads.Add(1)
				first, _ := vals[0].(string)
				for i, v := range vals {
					if s, _ := v.(string); s != first {
						t.Errorf("%s: one MGET saw %s = %q and %s = %q: a mix of two batches", td.cfg.NodeName, names[0], first, names[i], s)
						cancel()
						return
					}
				}
			}
		}()
	}
	for b := range batches {
		publishAll(t, ds[0], keys, func(int) string { return fmt.Sprintf("batch-%d", b) }, "")
	}
	waitVectors(t, ds)
	cancel()
	wg.Wait()
	t.Logf("%d MGETs and %d view GetManys of 100 keys over %d batches", reads.Load(), viewReads.Load(), batches)
	if viewReads.Load() == 0 {
		t.Error("no view GetMany read anything")
	}
	for _, td := range ds {
		checkValues(t, td, names, func(int) string { return fmt.Sprintf("batch-%d", batches-1) }, "after the last batch")
	}
}

// TestViewFileTime: the shared view file drops a value at its expiry and
// takes a scheduled value at its instant (the view's timer tells the
// mirror), on an injected clock.
func TestViewFileTime(t *testing.T) {
	var clock fleetClock
	clock.base.Store(time.Now().UnixMilli())
	cfg := testConfig(t)
	hook(&cfg, func(h *daemonhooks.Hooks) { h.Clock = clock.of(0) })
	td := startDaemon(t, cfg)
	r, err := localview.Open(cfg.ViewPath())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t0 := clock.base.Load()
	td.put("prices", "promo", "5.00", "Cachecast-Expires", strconv.FormatInt(t0+1000, 10))
	td.put("prices", "sku-1", "12.50")
	td.put("prices", "sku-1", "9.99", "Cachecast-Effective-At", strconv.FormatInt(t0+2000, 10))
	viewValue := func(key string) string {
		v, _, _, err := r.Get("prices", key)
		if err != nil {
			return ""
		}
		return string(v)
	}
	waitView(t, r, "the promo and the regular price", func() bool {
		return viewValue("promo") == "5.00" && viewValue("sku-1") == "12.50"
	})
	clock.base.Store(t0 + 1000)
	waitView(t, r, "the promo's expiry", func() bool { return viewValue("promo") == "" })
	if got := viewValue("sku-1"); got != "12.50" {
		t.Fatalf("sku-1 = %q before its instant", got)
	}
	clock.base.Store(t0 + 2000)
	waitView(t, r, "the scheduled price", func() bool { return viewValue("sku-1") == "9.99" })
}

// TestRedisExpiredEvents: keyspace notifications hear an expiry on the
// real clock: __keyevent@0__:expired names the key.
func TestRedisExpiredEvents(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	ctx := context.Background()
	rc := goRedis(t, td, 2)
	must(rc.ConfigSet(ctx, "notify-keyspace-events", "Ex").Result())
	sub := rc.PSubscribe(ctx, "__keyevent@0__:*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	must(rc.Set(ctx, "prices:flash", "1.00", 150*time.Millisecond).Result())
	select {
	case m := <-sub.Channel():
		if m.Channel != "__keyevent@0__:expired" || m.Payload != "prices:flash" {
			t.Fatalf("notification %s %q, want __keyevent@0__:expired prices:flash", m.Channel, m.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no expired notification")
	}
	if n := must(rc.Exists(ctx, "prices:flash").Result()); n != 0 {
		t.Fatalf("EXISTS after the expiry: %d", n)
	}
}

// TestScheduleCancelAndStream: a subscriber sees a scheduled message when
// it is published, with its effective_at; DELETE .../pending/{key} cancels
// it (a second cancel is 409 not_pending), the value in force stays at the
// instant, and a scheduled delete deletes at its instant.
func TestScheduleCancelAndStream(t *testing.T) {
	var clock fleetClock
	clock.base.Store(time.Now().UnixMilli())
	cfg := testConfig(t)
	hook(&cfg, func(h *daemonhooks.Hooks) { h.Clock = clock.of(0) })
	td := startDaemon(t, cfg)
	t0 := clock.base.Load()
	at := strconv.FormatInt(t0+1000, 10)
	lines := subscribeLines(t, td, "/v1/topics/prices/subscribe?from=latest")
	td.put("prices", "sku-1", "12.50")
	td.put("prices", "sku-1", "9.99", "Cachecast-Effective-At", at)
	td.put("prices", "sku-2", "3.00")
	if r := td.do("DELETE", "/v1/topics/prices/keys/sku-2", nil, "Cachecast-Effective-At", at); r.status != 200 {
		t.Fatalf("scheduled delete: %d %s", r.status, r.body)
	}
	got := streamObjects(t, lines, 4, "the four messages on the stream")
	if got[1]["value"] != "9.99" || got[1]["effective_at"] != msTimeOf(t0+1000) || got[0]["effective_at"] != nil {
		t.Fatalf("the stream's lines: %v", got)
	}
	if r := td.do("DELETE", "/v1/topics/prices/pending/sku-1?effective_at="+at, nil); r.status != 200 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if r := td.do("DELETE", "/v1/topics/prices/pending/sku-1?effective_at="+at, nil); r.status != 409 || r.errCode() != "not_pending" {
		t.Fatalf("a second cancel: %d %s", r.status, r.body)
	}
	r := td.do("GET", "/v1/topics/prices/pending", nil)
	var p struct {
		Pending []struct {
			Key            string
			Cancel, Delete bool
		}
	}
	if err := json.Unmarshal(r.body, &p); err != nil || len(p.Pending) != 2 || p.Pending[0].Key != "sku-1" || !p.Pending[0].Cancel ||
		p.Pending[1].Key != "sku-2" || !p.Pending[1].Delete {
		t.Fatalf("pending after the cancel (want the cancel of sku-1 and the delete of sku-2): %s", r.body)
	}
	clock.base.Store(t0 + 1000)
	if v := getValue(t, td, "prices", "sku-1"); v != "12.50" {
		t.Fatalf("sku-1 at the cancelled instant = %q, want 12.50", v)
	}
	if v := getValue(t, td, "prices", "sku-2"); v != "" {
		t.Fatalf("sku-2 after its scheduled delete = %q", v)
	}
	if r := td.do("PUT", "/v1/topics/prices/keys/sku-3", strings.NewReader("x"), "Cachecast-Effective-At", strconv.FormatInt(t0, 10)); r.status != 400 {
		t.Fatalf("effective_at in the past: %d %s", r.status, r.body)
	}
}
