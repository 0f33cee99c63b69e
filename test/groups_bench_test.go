package test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
)

// groupBenchArgs are the daemon flags of the consumer group benchmarks:
// the replication a fleet runs with, and a short ack timeout.
var groupBenchArgs = []string{"--replication", "sync", "--ack-timeout", "5s"}

// BenchmarkGroupRate measures how many messages a consumer group handles
// per second with one member, then with three (one per node), on three
// nodes holding the same 30,000 keyed messages. Each member handles its
// messages one at a time, sleeping 200µs for each (the work; a short
// sleep takes longer on a busy machine, and us-work-per-msg says how long
// it took), and acknowledges every 20ms; then both again with no work, for
// what the daemons themselves sustain. Each phase uses a fresh group, which starts at
// the earliest message; the clock runs from the first subscription to the
// last message handled (joins and rebalances included).
func BenchmarkGroupRate(b *testing.B) {
	const (
		topic    = "rate"
		messages = 30000
		keys     = 1000
		batch    = 500
		work     = 200 * time.Microsecond
	)
	nodes := startGroupCluster(b, groupBenchArgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := 0; i < messages; i += batch {
		msgs := make([]client.Message, 0, batch)
		for j := i; j < i+batch; j++ {
			k := fmt.Sprintf("k%04d", j%keys)
			msgs = append(msgs, client.Message{Key: k, Value: clusterValue(k, j/keys)})
		}
		// Spread over the nodes, so that the queues hold every origin.
		if _, err := nodes[(i/batch)%len(nodes)].Client.PublishBatch(ctx, topic, msgs); err != nil {
			b.Fatal(err)
		}
	}
	if why := testkit.Poll(b, 30*time.Second, func() string {
		for _, n := range nodes {
			if got := topicMessages(ctx, n, topic); got != messages {
				return fmt.Sprintf("%s holds %d messages of %s", n.Name, got, topic)
			}
		}
		return ""
	}); why != "" {
		b.Fatal(why)
	}

	b.ResetTimer()
	var one, three, dups1, dups3, worked, bare1, bare3 float64
	for i := range b.N {
		r, d, w := groupRate(b, nodes[:1], topic, fmt.Sprintf("one-%d", i), messages, work)
		one += r
		dups1 += float64(d)
		worked += w.Seconds() * 1e6
		r, d, _ = groupRate(b, nodes, topic, fmt.Sprintf("three-%d", i), messages, work)
		three += r
		dups3 += float64(d)
		// No work at all: what the daemons deliver and take acks for.
		r, _, _ = groupRate(b, nodes[:1], topic, fmt.Sprintf("bare-one-%d", i), messages, 0)
		bare1 += r
		r, _, _ = groupRate(b, nodes, topic, fmt.Sprintf("bare-three-%d", i), messages, 0)
		bare3 += r
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(one/n, "msgs/s-1-member")
	b.ReportMetric(three/n, "msgs/s-3-members")
	b.ReportMetric(three/n/3, "msgs/s-per-member-of-3")
	b.ReportMetric(three/one, "ratio-3:1")
	b.ReportMetric(dups1/n, "dups-1-member")
	b.ReportMetric(dups3/n, "dups-3-members")
	b.ReportMetric(worked/n, "us-work-per-msg")
	b.ReportMetric(bare1/n, "msgs/s-1-member-no-work")
	b.ReportMetric(bare3/n, "msgs/s-3-members-no-work")
	for _, nd := range nodes {
		nd.Stop()
	}
}

// groupRate runs one member of group on each of nodes until every one
// of messages was handled, and returns the messages handled per second,
// how many deliveries were duplicates, and the time the work of one
// message took on average.
func groupRate(b *testing.B, nodes []*clusterNode, topic, group string, messages int, work time.Duration) (rate float64, dups int, worked time.Duration) {
	b.Helper()
	log := newGroupLog()
	start := time.Now()
	var members []*groupMember
	for _, n := range nodes {
		members = append(members, startGroupMember(b, log, "member-"+n.Name, n.Name, n.Client, topic, group, work))
	}
	deadline := time.After(3 * time.Minute)
	var first time.Time
	for log.distinct() < messages {
		select {
		case <-log.notify:
			if first.IsZero() && log.distinct() > 0 {
				first = time.Now()
			}
		case <-deadline:
			b.Fatalf("%s: %d of %d messages handled after 3 minutes", group, log.distinct(), messages)
		}
	}
	took := time.Since(start)
	b.Logf("%s: %d messages in %v, %v of them before the first delivery (the group's start)", group, messages,
		took.Round(time.Millisecond), first.Sub(start).Round(time.Millisecond))
	for _, m := range members {
		m.Close()
	}
	dels, _ := log.snapshot()
	var total time.Duration
	for _, m := range members {
		total += time.Duration(m.worked.Load())
	}
	return float64(messages) / took.Seconds(), len(dels) - messages, total / time.Duration(len(dels))
}

// BenchmarkGroupRebalance runs a group with one member on each of three
// nodes while a and b publish 1,000 keyed messages/s, SIGKILLs c, and
// measures the time from the kill until a and b show c dead or gone on
// /v1/cluster (memberlist's failure detection, profile local) and until a
// survivor delivers messages of c's queues again: the first of them, and
// every one of them.
func BenchmarkGroupRebalance(b *testing.B) {
	const (
		topic   = "rebalance"
		group   = "g"
		keysPer = 150
		batch   = 5
		period  = 10 * time.Millisecond
	)
	var detect, first, all, dups float64
	for range b.N {
		b.StopTimer()
		nodes := startGroupCluster(b, groupBenchArgs...)
		a, bn, c := nodes[0], nodes[1], nodes[2]
		log := newGroupLog()
		var members []*groupMember
		for _, n := range nodes {
			members = append(members, startGroupMember(b, log, "member-"+n.Name, n.Name, n.Client, topic, group, 0))
		}
		cQueues := waitAllocated(b, nodes, topic, group, 20*time.Second)["c"]

		pctx, cancel := context.WithCancel(context.Background())
		pubs := []*groupPublisher{
			{n: a, topic: topic, total: 1 << 30, batch: batch, period: period},
			{n: bn, topic: topic, total: 1 << 30, batch: batch, period: period},
		}
		var wg sync.WaitGroup
		for i, p := range pubs {
			for k := range keysPer {
				p.keys = append(p.keys, fmt.Sprintf("k%03d", i*keysPer+k))
			}
			wg.Go(func() { p.run(pctx) })
		}
		time.Sleep(1500 * time.Millisecond)

		b.StartTimer()
		killAt := time.Now()
		c.Kill()
		var gone time.Duration
		if why := testkit.Poll(b, 30*time.Second, func() string {
			for _, n := range []*clusterNode{a, bn} {
				st, err := n.clusterStatus(context.Background())
				if err != nil {
					return err.Error()
				}
				if !nodeGone(st, "c") {
					return n.Name + " sees c alive"
				}
			}
			gone = time.Since(killAt)
			return ""
		}); why != "" {
			b.Fatalf("30s after the kill: %s", why)
		}
		var took map[int]time.Duration
		if why := testkit.Poll(b, 30*time.Second, func() string {
			took = map[int]time.Duration{}
			dels, _ := log.snapshot()
			for _, d := range dels {
				if d.node != "c" && d.at.After(killAt) && slices.Contains(cQueues, d.queue) {
					if _, ok := took[d.queue]; !ok {
						took[d.queue] = d.at.Sub(killAt)
					}
				}
			}
			if len(took) < len(cQueues) {
				return fmt.Sprintf("%d of c's %d queues delivered again", len(took), len(cQueues))
			}
			return ""
		}); why != "" {
			b.Fatalf("30s after the kill: %s", why)
		}
		b.StopTimer()
		cancel()
		wg.Wait()
		for _, m := range members {
			m.Close()
		}
		lo, hi := time.Hour, time.Duration(0)
		for _, d := range took {
			lo, hi = min(lo, d), max(hi, d)
		}
		detect += gone.Seconds() * 1000
		first += lo.Seconds() * 1000
		all += hi.Seconds() * 1000
		dels, _ := log.snapshot()
		seen := map[string]bool{}
		for _, d := range dels {
			if seen[d.id] {
				dups++
			}
			seen[d.id] = true
		}
		a.Stop()
		bn.Stop()
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(detect/n, "ms-failure-detection")
	b.ReportMetric(first/n, "ms-first-redelivery")
	b.ReportMetric(all/n, "ms-all-queues-redelivered")
	b.ReportMetric(dups/n, "duplicates")
}
