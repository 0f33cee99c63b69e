package daemontest_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/store/view"
)

// The followers of the timer that BenchmarkFlipFollowers times: each notes
// when it first learns of each key's flip.
const (
	followTimer      = "timer"      // the store's time events, in the daemon's process
	followStream     = "stream"     // an HTTP subscriber with events=effective
	followViewFile   = "viewfile"   // the shared view file (a localview reader)
	followInvalidate = "invalidate" // a Redis BCAST tracking client's invalidations (RESP2 redirect)
	followKeyspace   = "keyspace"   // Redis keyspace notifications (__keyevent@0__:set)
)

var followers = []string{followTimer, followStream, followViewFile, followInvalidate, followKeyspace}

// heard is when each follower of each node learned of each key's flip.
type heard struct {
	mu sync.Mutex
	at map[string][]map[string]time.Time // follower -> node -> key -> first arrival
	// cpu is the process's CPU time from the instant until all had heard.
	cpu time.Duration
}

func (h *heard) note(follower string, node int, key string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.at[follower][node]
	if _, ok := m[key]; !ok {
		m[key] = at
	}
}

func (h *heard) count(follower string, node int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.at[follower][node])
}

// BenchmarkFlipFollowers measures how long after the instant of a flip
// what follows the timer learns of it, on one daemon and across three
// (run with -benchtime 1x): 10,000 keys written, the same keys scheduled
// for one instant 2 s ahead (on the three, published on another node than
// the old values, so that the schedule travels). Per follower, over every
// key and node, p50/p99/max of (arrival - instant) in ms: the store's
// timer (its time events, in process), an HTTP subscriber with
// events=effective, the shared view file (a reader polling 200 of the
// keys every 200 µs), a Redis client tracking the topic (BCAST, its
// invalidations redirected to a RESP2 subscriber) and one subscribed to
// the keyspace's set events. Unlike BenchmarkScheduledFlipAcrossDaemons
// no reader spins on the daemons meanwhile: the figures are the
// followers' own. flip-cpu-ms is the process's CPU time from the instant
// until every follower had heard (the daemons' and this test's), which
// the machine's load does not change.
func BenchmarkFlipFollowers(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var c *daemontest.Cluster
			if nodes == 1 {
				c = &daemontest.Cluster{Nodes: []*daemontest.Node{daemontest.Start(b, nil)}}
			} else {
				c = daemontest.NewCluster(b, nodes, nil)
			}
			for i := 0; b.Loop(); i++ {
				h := followFlip(b, c, fmt.Sprintf("fl%d-", i), 10000, 200)
				b.ReportMetric(float64(h.cpu.Microseconds())/1000, "flip-cpu-ms")
				for _, f := range followers {
					lag := h.lags(f)
					b.ReportMetric(pct(lag, .5), f+"-p50-ms")
					b.ReportMetric(pct(lag, .99), f+"-p99-ms")
					b.ReportMetric(pct(lag, 1), f+"-max-ms")
				}
			}
		})
	}
}

// lags is every arrival's lag after the instant for follower f, sorted,
// in µs.
func (h *heard) lags(f string) []int {
	var out []int
	for _, m := range h.at[f] {
		for _, at := range m {
			out = append(out, int(at.Sub(h.instant()).Microseconds()))
		}
	}
	slices.Sort(out)
	return out
}

// instant is kept in the map under "" (set once by followFlip).
func (h *heard) instant() time.Time { return h.at[""][0][""] }

// followFlip schedules n keys for one instant and notes when each
// follower of each node learns of each key's flip (the view file: of the
// sample keys), until all have.
func followFlip(tb testing.TB, c *daemontest.Cluster, name string, n, sample int) *heard {
	tb.Helper()
	lead := 2 * time.Second
	var topic string
	var instant time.Time
	for attempt := 0; ; attempt++ {
		topic = fmt.Sprintf("%s%d", name, attempt)
		var ok bool
		if instant, ok = scheduleFlipOn(tb, c, topic, n, lead); ok {
			break
		}
		if attempt == 3 {
			tb.Fatalf("the schedule of %d keys did not reach every node 1.5 s before its instant, %s ahead", n, lead)
		}
		lead *= 2
	}
	h := &heard{at: map[string][]map[string]time.Time{"": {{"": instant}}}}
	for _, f := range followers {
		for range c.Nodes {
			h.at[f] = append(h.at[f], map[string]time.Time{})
		}
	}
	var sampled []string
	for i := 0; i < n; i += max(1, n/sample) {
		sampled = append(sampled, fmt.Sprintf("sku-%05d", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var closers []func() error // what ctx does not stop: go-redis's blocked reads
	for i, nd := range c.Nodes {
		// The store's time events, in process: when the timer settled
		// each key.
		st := nd.D.Store()
		next, _ := st.TimeEvents(0, nil)
		wg.Go(func() {
			for ctx.Err() == nil {
				changed := st.Changed()
				at := time.Now() // one reading: fn runs under the view's read lock
				var keys []string
				next, _ = st.TimeEvents(next, func(ch view.Change) {
					if ch.Topic == topic && ch.Cause == view.CauseEffective {
						keys = append(keys, ch.Key)
					}
				})
				for _, k := range keys {
					h.note(followTimer, i, k, at)
				}
				select {
				case <-ctx.Done():
				case <-changed:
				}
			}
		})
		// An HTTP subscriber: the arrival of each line, its key found
		// without decoding the rest.
		hc := testkit.UnixClient(nd.Socket, false, 0)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/v1/topics/"+topic+"/subscribe?from=latest&events=effective", nil)
		res, err := hc.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			tb.Fatalf("subscribe on %s: %v", nd.Config.NodeName, err)
		}
		wg.Go(func() {
			defer res.Body.Close()
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				at := time.Now()
				line := sc.Bytes()
				if !bytes.HasPrefix(line, []byte(`{"event":"effective"`)) {
					continue
				}
				if k, ok := jsonField(line, `"key":"`); ok {
					h.note(followStream, i, k, at)
				}
			}
		})
		// The view file: 200 keys polled every 200 µs.
		r, err := localview.Open(nd.Config.ViewPath())
		if err != nil {
			tb.Fatal(err)
		}
		wg.Go(func() {
			defer r.Close()
			topics := []string{topic}
			var items []localview.Item
			var buf []byte
			for ctx.Err() == nil && h.count(followViewFile, i) < len(sampled) {
				items, buf, err = r.GetMany(topics, sampled, items, buf)
				at := time.Now()
				if err == nil {
					for j, it := range items {
						if it.Found && bytes.HasPrefix(it.Value, []byte("sale-")) {
							h.note(followViewFile, i, sampled[j], at)
						}
					}
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
		// Redis: a subscriber of __redis__:invalidate that a BCAST
		// tracking client redirects to, and a keyspace subscriber.
		rc := goredis.NewClient(&goredis.Options{Network: "unix", Addr: nd.D.RedisSocketPath(), Protocol: 2,
			DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, PoolSize: 3})
		if err := rc.ConfigSet(ctx, "notify-keyspace-events", "E$").Err(); err != nil {
			tb.Fatal(err)
		}
		// The invalidations' subscriber first, so that it is the one
		// subscribed connection CLIENT LIST shows.
		inv := rc.Subscribe(ctx, "__redis__:invalidate")
		if _, err := inv.Receive(ctx); err != nil { // the subscription's confirmation
			tb.Fatal(err)
		}
		ids, err := rc.ClientList(ctx).Result()
		if err != nil {
			tb.Fatal(err)
		}
		subID := subscriberID(ids)
		ks := rc.Subscribe(ctx, "__keyevent@0__:set")
		if _, err := ks.Receive(ctx); err != nil {
			tb.Fatal(err)
		}
		tracker := rc.Conn()
		if err := tracker.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", subID, "BCAST", "PREFIX", topic+":").Err(); err != nil {
			tb.Fatal(err)
		}
		prefix := topic + ":"
		closers = append(closers, inv.Close, ks.Close, tracker.Close, rc.Close)
		wg.Go(func() {
			for {
				m, err := inv.ReceiveMessage(ctx)
				if err != nil {
					return
				}
				at := time.Now()
				for _, k := range m.PayloadSlice {
					if strings.HasPrefix(k, prefix) {
						h.note(followInvalidate, i, k[len(prefix):], at)
					}
				}
			}
		})
		wg.Go(func() {
			for {
				m, err := ks.ReceiveMessage(ctx)
				if err != nil {
					return
				}
				if k, ok := strings.CutPrefix(m.Payload, prefix); ok {
					h.note(followKeyspace, i, k, time.Now())
				}
			}
		})
	}
	// The process's CPU time from the instant until every follower has
	// heard: what the flip costs, whatever the load (three daemons'
	// timers and followers, and this test's followers).
	cpuAt := make(chan int64, 1)
	go func() {
		time.Sleep(time.Until(instant))
		cpuAt <- testkit.ProcessCPU()
	}()
	testkit.Until(tb, time.Until(instant)+60*time.Second, "every follower of every node learned of every key", func() string {
		for _, f := range followers {
			want := n
			if f == followViewFile {
				want = len(sampled)
			}
			for i := range c.Nodes {
				if got := h.count(f, i); got != want {
					return fmt.Sprintf("%s of %s: %d of %d", f, c.Nodes[i].Config.NodeName, got, want)
				}
			}
		}
		return ""
	})
	h.cpu = time.Duration(testkit.ProcessCPU() - <-cpuAt)
	cancel()
	for _, c := range closers {
		c()
	}
	wg.Wait()
	return h
}

// scheduleFlipOn is scheduleFlip for one node as well as several: the
// schedule is published on the second node when there is one.
func scheduleFlipOn(tb testing.TB, c *daemontest.Cluster, topic string, n int, lead time.Duration) (time.Time, bool) {
	if len(c.Nodes) > 1 {
		return scheduleFlip(tb, c, topic, n, lead)
	}
	var old, sale strings.Builder
	for i := range n {
		fmt.Fprintf(&old, "{\"key\":\"sku-%05d\",\"value\":\"old-%d\"}\n", i, i)
	}
	post(tb, c.Nodes[0], topic, old.String())
	instant := time.Now().Add(lead).Truncate(time.Millisecond)
	for i := range n {
		fmt.Fprintf(&sale, "{\"key\":\"sku-%05d\",\"value\":\"sale-%d\",\"effective_at\":%d}\n", i, i, instant.UnixMilli())
	}
	post(tb, c.Nodes[0], topic, sale.String())
	return instant, time.Until(instant) > 1500*time.Millisecond
}

// jsonField is the string after name in line, up to its closing quote
// (the keys here need no escapes).
func jsonField(line []byte, name string) (string, bool) {
	i := bytes.Index(line, []byte(name))
	if i < 0 {
		return "", false
	}
	rest := line[i+len(name):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// subscriberID is the id of the connection of CLIENT LIST that is
// subscribed to a channel (sub=1).
func subscriberID(list string) int64 {
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " sub=1") {
			continue
		}
		var id int64
		if _, err := fmt.Sscanf(line, "id=%d", &id); err == nil {
			return id
		}
	}
	return 0
}
