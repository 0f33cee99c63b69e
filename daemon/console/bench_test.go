package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/testkit"
)

// benchPhase is how long each case runs before the other takes its turn.
const benchPhase = 3 * time.Second

// BenchmarkConsolePublish is the console's cost to the node serving it:
// the latency of publishes on node0 of three (one PUT at a time on its
// socket) with no console open, and with five, each asking as the page
// does: the fleet view (GET /v1/fleet, every member asked over gossip)
// and a key's view (GET /v1/topics/{t}/nodes/{k}) once a second each,
// and the Traffic view's tail of the topic being published (server-sent
// events, linger=100ms), as if each browser had all three open. The two
// cases take turns every benchPhase within one run, so that the load of
// whatever else runs on the machine falls on both alike; each publish counts for the case in
// force when it started. It reports each case's p50 and p99, the ratio
// of the p99s (5 consoles ÷ none), and the process's CPU time (the three
// nodes, the publisher, the consoles) per publish in each case, a cost
// that holds on a loaded machine where the latencies do not:
//
//	go test -run '^$' -bench ConsolePublish -benchtime 300000x -count 5 ./daemon/console/
func BenchmarkConsolePublish(b *testing.B) {
	c := daemontest.NewCluster(b, 3, func(i int, cfg *daemon.Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	pub := testkit.UnixClient(c.Nodes[0].Socket, true, 10*time.Second)
	b.Cleanup(pub.CloseIdleConnections)
	if _, err := put(c.Nodes[0], "bench", "k-1", "v"); err != nil {
		b.Fatal(err)
	}
	base := "http://" + c.Nodes[0].D.MetricsAddr() + "/console/api/v1"
	var open atomic.Bool
	tailURL := base + "/topics/bench/subscribe?from=latest&linger=100ms" // as the Traffic view asks
	stop, polls := openConsoles(b, 5, &open, tailURL, base+"/fleet", base+"/topics/bench/nodes/k-1")
	defer stop()

	var lat [2][]time.Duration // [0]: no console, [1]: five
	body := strings.Repeat("x", 100)
	var cpu [2]int64 // the process's CPU time in each case: every node, the publisher and the consoles
	phase, switched, cpu0 := 0, time.Now(), testkit.ProcessCPU()
	b.ResetTimer()
	for i := range b.N {
		if time.Since(switched) > benchPhase {
			now := testkit.ProcessCPU()
			cpu[phase] += now - cpu0
			phase, switched, cpu0 = 1-phase, time.Now(), now
			open.Store(phase == 1)
		}
		req, _ := http.NewRequest("PUT", fmt.Sprintf("http://cachecast/v1/topics/bench/keys/k-%d", i%1000), strings.NewReader(body))
		t0 := time.Now()
		res, err := pub.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		lat[phase] = append(lat[phase], time.Since(t0))
		if res.StatusCode != http.StatusOK {
			b.Fatalf("PUT: %d", res.StatusCode)
		}
	}
	cpu[phase] += testkit.ProcessCPU() - cpu0
	b.StopTimer()
	stop()
	if len(lat[0]) == 0 || len(lat[1]) == 0 {
		// The probe run of one publish, or a -benchtime shorter than two
		// phases: nothing to compare.
		b.Logf("%d publishes: shorter than two phases of %s, nothing reported (give -benchtime more)", b.N, benchPhase)
		return
	}
	q := func(l []time.Duration, q float64) float64 {
		slices.Sort(l)
		return float64(l[int(q*float64(len(l)-1))].Nanoseconds()) / 1e3
	}
	none99, five99 := q(lat[0], 0.99), q(lat[1], 0.99)
	b.ReportMetric(q(lat[0], 0.50), "p50-µs-none")
	b.ReportMetric(none99, "p99-µs-none")
	b.ReportMetric(q(lat[1], 0.50), "p50-µs-5consoles")
	b.ReportMetric(five99, "p99-µs-5consoles")
	b.ReportMetric(five99/none99, "p99-ratio")
	none, five := float64(cpu[0])/1e3/float64(len(lat[0])), float64(cpu[1])/1e3/float64(len(lat[1]))
	b.ReportMetric(none, "cpu-µs/publish-none")
	b.ReportMetric(five, "cpu-µs/publish-5consoles")
	b.ReportMetric(float64(polls.Load()), "console-requests")
}

// openConsoles starts n consoles that GET each of urls once a second, as
// the page does, and keep a tail of tail open, while open is true, until
// stop; polls counts their answered requests.
func openConsoles(b *testing.B, n int, open *atomic.Bool, tail string, urls ...string) (stop func(), polls *atomic.Int64) {
	polls = new(atomic.Int64)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		hc := &http.Client{Timeout: 10 * time.Second}
		wg.Go(func() {
			defer hc.CloseIdleConnections()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			var closeTail func()
			defer func() {
				if closeTail != nil {
					closeTail()
				}
			}()
			for {
				if tail != "" && open.Load() && closeTail == nil {
					closeTail = openTail(b, hc, tail)
				} else if !open.Load() && closeTail != nil {
					closeTail()
					closeTail = nil
				}
				for _, u := range urls {
					if !open.Load() {
						break
					}
					res, err := hc.Get(u)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						b.Errorf("GET %s: %d", u, res.StatusCode)
						return
					}
					polls.Add(1)
				}
				select {
				case <-quit:
					return
				case <-tick.C:
				}
			}
		})
	}
	return sync.OnceFunc(func() { close(quit); wg.Wait() }), polls
}

// openTail opens a tail as the Traffic view does (server-sent events from
// the latest message) and reads it until the returned function is called.
func openTail(b *testing.B, hc *http.Client, url string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	tc := &http.Client{Transport: hc.Transport} // no timeout on a stream
	res, err := tc.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		cancel()
		b.Errorf("tail %s: %v %v", url, err, res)
		return func() {}
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = io.Copy(io.Discard, res.Body) }()
	return func() { cancel(); res.Body.Close(); <-done }
}
