package test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// observerBound is the seconds since a node last agreed with a peer past
// which the peer counts as not agreeing (the alert rule's threshold is
// larger; the test's observe interval is 100 ms).
const observerBound = 2.0

// sinceAgreed is node's cachecast_observer_seconds_since_agreed for peer.
func sinceAgreed(metricsAddr, peer string) (float64, error) {
	return scrapeSeries(metricsAddr, `cachecast_observer_seconds_since_agreed{peer="`+peer+`"}`)
}

// lateRecords is how many records of origin node `from` metricsAddr's
// node applied more than 1 s after their stamp, by the per-node and the
// per-origin freshness histograms.
func lateRecords(t *testing.T, metricsAddr, from string) (perNode, perOrigin float64) {
	t.Helper()
	get := func(series string) float64 {
		v, err := scrapeSeries(metricsAddr, series)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	perNode = get("cachecast_observer_freshness_seconds_count") - get(`cachecast_observer_freshness_seconds_bucket{le="1"}`)
	perOrigin = get(`cachecast_observer_origin_freshness_seconds_count{origin="`+from+`"}`) -
		get(`cachecast_observer_origin_freshness_seconds_bucket{origin="`+from+`",le="1"}`)
	return perNode, perOrigin
}

// A node of three frozen with SIGSTOP shows in the others' agreement
// metrics (seconds since agreed with it grows past observerBound on both,
// while a still agrees with the running b) and, once resumed, in its own freshness metrics (the records written
// meanwhile reached it more than 1 s after their stamp, per node and per
// origin); the others agree with it again. The times are measured,
// printed and bounded.
func TestObserverSeesAPausedNode(t *testing.T) {
	t.Parallel()
	var specs []clusterSpec
	metrics := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		metrics[name] = freeDataAddr(t)
		specs = append(specs, clusterSpec{Name: name, Args: []string{"--observe-interval", "100ms", "--metrics-addr", metrics[name]}})
	}
	nodes := startClusterNodes(t, specs)
	waitClusterUp(t, nodes, namesOf(nodes), false, 20*time.Second)
	a, frozen := nodes[0], nodes[2]
	n := 0
	write := func() {
		n++
		if r := httpDo(t, a.Node, "PUT", fmt.Sprintf("/v1/topics/prices/keys/sku-%d", n%20), strings.NewReader(fmt.Sprint("v", n))); r.status != 200 {
			t.Fatalf("PUT on a: %d %s", r.status, r.body)
		}
	}
	for range 20 {
		write()
	}
	agreeing := func(what string) {
		testkit.Until(t, 20*time.Second, what, func() string {
			for _, on := range []string{"a", "b"} {
				s, err := sinceAgreed(metrics[on], "c")
				if err != nil {
					return err.Error()
				}
				if s >= observerBound {
					return fmt.Sprintf("%s last agreed with c %.1f s ago", on, s)
				}
			}
			return ""
		})
	}
	agreeing("a and b to agree with c")
	lateBefore, lateFromABefore := lateRecords(t, metrics["c"], "a")

	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Signal(syscall.SIGCONT) }) // never leave it stopped for the kill
	paused := time.Now()
	seen := map[string]time.Duration{}
	testkit.Until(t, 20*time.Second, "a and b to stop agreeing with the paused c", func() string {
		write() // c misses these
		for _, on := range []string{"a", "b"} {
			if s, err := sinceAgreed(metrics[on], "c"); err == nil && s > observerBound && seen[on] == 0 {
				seen[on] = time.Since(paused)
			}
		}
		if len(seen) < 2 {
			return fmt.Sprintf("seen on %v", seen)
		}
		return ""
	})
	t.Logf("paused c seen as not agreeing (past %v s since agreed) on a after %v, on b after %v",
		observerBound, seen["a"].Round(time.Millisecond), seen["b"].Round(time.Millisecond))
	for on, took := range seen {
		if took > 10*time.Second {
			t.Errorf("%s saw the paused c after %v, more than 10 s", on, took)
		}
	}
	// The comparisons with c wait for its answer on their own: a goes on
	// agreeing with the running b while c is still paused. (Waited for:
	// the writes of the loop above, still on their way, can make a and b
	// differ for a moment, the longer the busier the machine.)
	testkit.Until(t, 10*time.Second, "a to agree with the running b while c is paused", func() string {
		if s, err := sinceAgreed(metrics["a"], "b"); err != nil || s >= observerBound {
			return fmt.Sprintf("a last agreed with b %.1f s ago (%v)", s, err)
		}
		return ""
	})
	time.Sleep(time.Until(paused.Add(1500 * time.Millisecond))) // what c missed is more than 1 s old when it resumes
	written := n

	if err := frozen.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	agreeing("a and b to agree with c again")
	t.Logf("a and b agree with c again %v after it resumed", time.Since(resumed).Round(time.Millisecond))
	late, lateFromA := lateRecords(t, metrics["c"], "a")
	t.Logf("c applied %v records more than 1 s after their stamp (%v of them from a); %d written on a while it was paused",
		late-lateBefore, lateFromA-lateFromABefore, written-20)
	if late <= lateBefore || lateFromA <= lateFromABefore {
		t.Errorf("c's freshness shows no late record after the pause: per node %v -> %v, from a %v -> %v",
			lateBefore, late, lateFromABefore, lateFromA)
	}
}
