package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// A fresh node joining a cluster that holds 200,000 keys never answers
// "not found" for a key the others hold: until it has caught up with the
// vectors its peers reported at join, its reads (GET, list, the Redis
// door's GET and MGET) answer catching_up / -LOADING with the lag, and
// /readyz, the shared view's ready bit and the daemon's ready flag say
// not ready; then it is ready, and holds every key.
func TestFreshNodeCatchesUpBeforeServingReads(t *testing.T) {
	const keys = 200_000
	ds := startCluster(t, 2, nil)
	a := ds[0]
	value := func(i int) string { return fmt.Sprintf("price-%d", i) }
	batch := make([]record.Message, 0, 5000)
	for i := range keys {
		batch = append(batch, record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%06d", i), Value: []byte(value(i))})
		if len(batch) == cap(batch) {
			if _, err := a.d.store.PublishBatch(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	want := a.d.store.Vector()
	testkit.Eventually(t, 3*time.Minute, "node1 to hold the 200,000 keys", func() bool {
		return cluster.Covers(ds[1].d.store.Vector(), want)
	})

	cfg := clusterConfig(t, "fresh", []string{a.d.cluster.Gossip().Addr()})
	cfg.RedisSocket = strings.TrimSuffix(cfg.Socket, ".sock") + ".redis"
	d, err := New(cfg, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	if err != nil {
		t.Fatal(err)
	}
	// The pollers start before Run: their first requests wait in the
	// socket's backlog and are answered while the node joins. GET
	// /v1/status at the end answers the digest the test's ViewDigests took
	// just before (the store keeps it while the view holds it), not a hash
	// of 200,000 keys (5 to 9 s under -race on two busy cores).
	td := &testDaemon{t: t, d: d, cfg: cfg, c: testkit.UnixClient(cfg.Socket, true, 10*time.Second)}
	rc := goredis.NewClient(&goredis.Options{Network: "unix", Addr: cfg.RedisSocket, MaxRetries: -1, Protocol: 2})
	defer rc.Close()
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		mu       sync.Mutex
		bad      []string
		catching atomic.Int64 // catching_up / LOADING answers seen
		served   atomic.Int64 // keys served
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	poll := func(name string, once func(i int)) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				once(rand.IntN(keys))
			}
		})
	}
	poll("http get", func(i int) {
		r := td.do("GET", fmt.Sprintf("/v1/topics/prices/keys/sku-%06d", i), nil)
		switch {
		case r.status == 200 && string(r.body) == value(i):
			served.Add(1)
		case r.status == 503 && r.errCode() == wire.CodeCatchingUp && strings.Contains(string(r.body), `"catch_up":{"phase":`):
			catching.Add(1)
		default:
			fail("GET sku-%06d: %d %s", i, r.status, r.body)
		}
	})
	poll("http list", func(i int) {
		r := td.do("GET", fmt.Sprintf("/v1/topics/prices/keys?prefix=sku-%04d&limit=100", i/100), nil)
		switch {
		case r.status == 200 && strings.Count(string(r.body), "sku-") == 100:
		case r.status == 503 && r.errCode() == wire.CodeCatchingUp:
			catching.Add(1)
		default:
			fail("list sku-%04d*: %d %.200s", i/100, r.status, r.body)
		}
	})
	poll("redis", func(i int) {
		k1, k2 := fmt.Sprintf("prices:sku-%06d", i), fmt.Sprintf("prices:sku-%06d", (i+1)%keys)
		vs, err := rc.MGet(context.Background(), k1, k2).Result()
		switch {
		case err == nil && len(vs) == 2 && vs[0] == value(i) && vs[1] == value((i+1)%keys):
			served.Add(1)
		case err != nil && strings.HasPrefix(err.Error(), "LOADING "):
			catching.Add(1)
		case err != nil && (errors.Is(err, goredis.ErrClosed) || strings.Contains(err.Error(), "use of closed network connection")):
			// rc closed at the end
		default:
			fail("MGET %s %s: %v %v", k1, k2, vs, err)
		}
	})
	var readyzEarly atomic.Bool // /readyz said catching_up while the node was not ready
	poll("readyz", func(int) {
		// Ready is read before the request: read after its answer, it
		// may have come true meanwhile.
		wasReady := d.ready.Load()
		r := td.do("GET", "/readyz", nil)
		switch {
		case r.status == 503 && r.errCode() == wire.CodeCatchingUp:
			readyzEarly.Store(true)
		case r.status == 503 && r.errCode() == wire.CodeUnavailable && !wasReady:
			// Caught up, and Run is about to say ready.
		case r.status != 200:
			fail("/readyz: %d %s", r.status, r.body)
		}
		time.Sleep(time.Millisecond)
	})
	viewReadyEarly := make(chan error, 1)
	wg.Go(func() {
		// The shared view's reader: not ready before the daemon is.
		for {
			r, err := localview.Open(cfg.ViewPath())
			if err == nil {
				ferr := r.Fresh(time.Minute)
				r.Close()
				if ferr == nil && !d.catch.CaughtUp() {
					viewReadyEarly <- errors.New("the shared view is ready before the catch-up ended")
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	td.cancel = cancel
	td.runErr = make(chan error, 1)
	go func() { td.runErr <- d.Run(ctx) }()
	t.Cleanup(td.stop)
	// The pollers end before the daemon stops, also when a wait below
	// fails the test: past its end a poller's failed request would fail a
	// finished test.
	stopPollers := sync.OnceFunc(func() {
		close(stop)
		rc.Close() // a poller blocked on Redis returns
		wg.Wait()
	})
	t.Cleanup(stopPollers)
	testkit.Eventually(t, 3*time.Minute, "the fresh node to be ready", d.ready.Load)
	// Past ready every read is served: let the pollers see it a while.
	n := served.Load()
	testkit.Eventually(t, 2*time.Minute, "reads served after ready", func() bool { return served.Load() > n+200 })
	stopPollers()
	select {
	case err := <-viewReadyEarly:
		t.Error(err)
	default:
	}
	if len(bad) > 0 {
		t.Fatalf("wrong answers from the fresh node:\n%s", strings.Join(bad, "\n"))
	}
	if catching.Load() == 0 || !readyzEarly.Load() {
		t.Fatalf("never saw the node catching up (%d catching_up answers, /readyz early: %v): the test proves nothing", catching.Load(), readyzEarly.Load())
	}
	if got := d.store.Vector(); !cluster.Covers(got, want) {
		t.Fatalf("ready with vector %v, the peers held %v", got, want)
	}
	if x, y := d.store.ViewDigests().Topics, a.d.store.ViewDigests().Topics; !maps.Equal(x, y) {
		t.Fatalf("the fresh node's view differs from node0's")
	}
	if cs := getStatus(t, td).CatchUp; cs != nil {
		t.Fatalf("/v1/status of a ready node shows a catch-up: %+v", cs)
	}
	t.Logf("catching_up answers %d, reads served %d", catching.Load(), served.Load())
}

// A node whose first join finds nobody (the first node of a cluster) is
// ready at once, with nothing to catch up with.
func TestFirstNodeReadyAtOnce(t *testing.T) {
	td := startDaemon(t, clusterConfig(t, "first", nil))
	if !td.d.catch.CaughtUp() {
		t.Fatalf("catch-up of the first node: %+v", td.d.catch.Status())
	}
	if r := td.do("GET", "/v1/topics/prices/keys/nope", nil); r.status != 404 || r.errCode() != wire.CodeNotFound {
		t.Fatalf("GET of a missing key on a ready node: %d %s", r.status, r.body)
	}
}
