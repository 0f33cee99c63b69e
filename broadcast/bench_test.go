package broadcast

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// The cluster benchmarks of issue 4: real stores on the test's file system
// (or CACHECAST_BENCH_DIR, e.g. /dev/shm), real nodes on 127.0.0.1, wired
// with SetPeers as membership would wire them, with the daemon's defaults
// (store.DefaultOptions, broadcast's default SyncInterval and MaxPull).
//
// Each benchmark's unit of work (one b.N) is a whole measurement: a window
// of fixed duration, or a fixed number of records. Run them once with
//
//	go test -run '^$' -bench . -benchtime 1x ./broadcast/
//
// Their figures are the custom metrics (p50-ms, records/s, ...); ns/op is
// suppressed where it would only repeat the window's length. rx-bytes/record
// is what a receiving node read from the data port per record it needed:
// a benchmark record is 160 bytes on the wire, a records frame adds 5 bytes and
// its ack 25; more than that is records that arrived twice.

const (
	benchValueSize  = 100
	benchKeys       = 10000 // distinct keys: the view stays small, as a cache's does
	benchTopic      = "prices"
	latencyWindow   = 2 * time.Second // one op of BenchmarkFanOutLatency
	replWindow      = 2 * time.Second // one op of BenchmarkPublishReplication
	sustainedPerOp  = 100_000         // records in one op of BenchmarkFanOutSustained
	catchUpPerOp    = 200_000         // records in one op of BenchmarkCatchUp
	benchSettleTime = 30 * time.Second
)

// benchKeyNames are the keys the benchmarks write, made once.
var benchKeyNames = func() []string {
	k := make([]string, benchKeys)
	for i := range k {
		k[i] = fmt.Sprintf("k%05d", i)
	}
	return k
}()

// benchCluster is an in-process cluster for benchmarks (newCluster takes a
// *testing.T and the test settings; this one the daemon's defaults).
type benchCluster struct {
	b     *testing.B
	nodes []*testNode
	rx    []*atomic.Uint64 // bytes each node read from the data port
}

func newBenchCluster(b *testing.B, size int, opts func(i int, o *store.Options)) *benchCluster {
	c := &benchCluster{b: b}
	dirs := make([]string, size)
	for i := range dirs {
		dirs[i] = testkit.BenchDir(b)
	}
	b.Cleanup(c.stop) // after the directories' cleanups: runs before them
	for i := 0; i < size; i++ {
		o := store.DefaultOptions(dirs[i])
		if opts != nil {
			opts(i, &o)
		}
		st, err := store.Open(o)
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			st.Close()
			b.Fatal(err)
		}
		rx := new(atomic.Uint64)
		var d net.Dialer
		n, err := New(Config{
			Store:    st,
			Listener: countingListener{ln, rx},
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return countingConn{conn, rx}, nil
			},
		})
		if err != nil {
			ln.Close()
			st.Close()
			b.Fatal(err)
		}
		n.Start()
		c.nodes = append(c.nodes, &testNode{name: fmt.Sprintf("n%d", i), dir: o.Dir, st: st, disk: st, n: n})
		c.rx = append(c.rx, rx)
	}
	return c
}

// countingConn counts the bytes a node reads from the data port, on the
// links it dialed and on the connections it accepted alike: what arrives
// twice (a pushed record also pulled from a third node) shows up there.
type countingConn struct {
	net.Conn
	rx *atomic.Uint64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rx.Add(uint64(n))
	return n, err
}

type countingListener struct {
	net.Listener
	rx *atomic.Uint64
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{conn, l.rx}, nil
}

// received is how many bytes the given nodes have read from the data
// port so far.
func (c *benchCluster) received(nodes ...*testNode) uint64 {
	var n uint64
	for i, tn := range c.nodes {
		if slices.Contains(nodes, tn) {
			n += c.rx[i].Load()
		}
	}
	return n
}

func (c *benchCluster) stop() {
	for _, tn := range c.nodes {
		if tn.n == nil {
			continue
		}
		tn.n.Close()
		if err := tn.st.Close(); err != nil {
			c.b.Error(err)
		}
		tn.n, tn.st, tn.disk = nil, nil, nil
	}
}

// wire links exactly the given nodes to each other, as membership would
// after a join or a failure; the other nodes are linked to nobody.
func (c *benchCluster) wire(members ...*testNode) {
	var peers []Peer
	for _, tn := range members {
		peers = append(peers, Peer{ID: tn.st.Origin(), Name: tn.name, Addr: tn.n.Addr()})
	}
	for _, tn := range c.nodes {
		if slices.Contains(members, tn) {
			tn.n.SetPeers(peers)
		} else {
			tn.n.SetPeers(nil)
		}
	}
}

// waitLinked waits until every node in members has a connected link to
// every other one and knows its vector.
func (c *benchCluster) waitLinked(members ...*testNode) {
	c.b.Helper()
	deadline := time.Now().Add(benchSettleTime)
	for {
		ok := true
		for _, tn := range members {
			ps := tn.n.Peers()
			if len(ps) != len(members)-1 {
				ok = false
			}
			for _, p := range ps {
				ok = ok && p.Connected
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.b.Fatalf("links not up within %s", benchSettleTime)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitHolds waits until every node in nodes holds origin's records up to
// seq, polling every poll; it returns when the last one got there (to
// within poll).
func (c *benchCluster) waitHolds(nodes []*testNode, origin, seq uint64, poll time.Duration) time.Time {
	c.b.Helper()
	deadline := time.Now().Add(benchSettleTime)
	for {
		all := true
		for _, tn := range nodes {
			all = all && tn.st.LastSeq(origin) >= seq
		}
		now := time.Now()
		if all {
			return now
		}
		if now.After(deadline) {
			for _, tn := range nodes {
				c.b.Logf("%s holds %016x up to %d of %d", tn.name, origin, tn.st.LastSeq(origin), seq)
			}
			c.b.Fatalf("records not everywhere within %s", benchSettleTime)
		}
		time.Sleep(poll)
	}
}

// warmUp publishes a few records on every node and waits until every node
// holds them all: links are up, buffers and goroutines warm.
func (c *benchCluster) warmUp() {
	c.b.Helper()
	c.wire(c.nodes...)
	c.waitLinked(c.nodes...)
	for _, tn := range c.nodes {
		var last store.Result
		for i := 0; i < 100; i++ {
			last = benchPublish(c.b, tn, i)
		}
		c.waitHolds(c.nodes, tn.st.Origin(), last.Seq, time.Millisecond)
	}
}

// pulls is how many pull requests the cluster's nodes have sent so far.
// While every node is linked to the origin, each pull during a fan-out
// fetches records that the origin is pushing anyway.
func (c *benchCluster) pulls() uint64 {
	var n uint64
	for _, tn := range c.nodes {
		n += tn.n.Pulls()
	}
	return n
}

func benchPublish(b *testing.B, tn *testNode, i int) store.Result {
	var val [benchValueSize]byte
	m := record.Message{Topic: benchTopic, Key: benchKeyNames[i%benchKeys], Value: val[:]}
	res, err := tn.st.Publish(&m)
	if err != nil {
		b.Fatalf("%s publish: %v", tn.name, err)
	}
	return res
}

// quantileMs returns the q-quantile of sorted durations (nearest rank) in ms.
func quantileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}

// arrivalWatcher records when each of origin's seqs in (base, base+len(at)]
// became visible on one node: it wakes on every write to the store
// (Changed), reads LastSeq and stamps every seq that appeared since.
type arrivalWatcher struct {
	st     testStore
	origin uint64
	base   uint64
	at     []time.Duration // since t0; 0 until seen
	t0     time.Time
	done   chan struct{}
}

func (w *arrivalWatcher) run(stop <-chan struct{}) {
	defer close(w.done)
	prev := w.base
	end := w.base + uint64(len(w.at))
	for prev < end {
		changed := w.st.Changed()
		if last := min(w.st.LastSeq(w.origin), end); last > prev {
			now := time.Since(w.t0)
			for s := prev + 1; s <= last; s++ {
				w.at[s-w.base-1] = now
			}
			prev = last
			continue
		}
		select {
		case <-changed:
		case <-stop:
			return
		}
	}
}

// BenchmarkFanOutLatency publishes 100-byte keyed values on one node at a
// fixed rate (a batch every millisecond, paced by the clock) for a window
// of two seconds per op, and measures for every message the time from
// Publish returning to the moment the last other node holds it.
func BenchmarkFanOutLatency(b *testing.B) {
	for _, nodes := range []int{3, 5} {
		for _, rate := range []int{2000, 10000} {
			b.Run(fmt.Sprintf("nodes=%d/rate=%d", nodes, rate), func(b *testing.B) {
				benchFanOutLatency(b, nodes, rate)
			})
		}
	}
}

func benchFanOutLatency(b *testing.B, nodes, rate int) {
	c := newBenchCluster(b, nodes, nil)
	c.warmUp()
	src := c.nodes[0]
	origin := src.st.Origin()
	total := b.N * int(latencyWindow.Seconds()*float64(rate))

	base := src.st.LastSeq(origin)
	t0 := time.Now()
	pub := make([]time.Duration, total)
	watchers := watchArrivals(b, c.nodes[1:], origin, base, total, t0)

	pulls, rx := c.pulls(), c.received(c.nodes...)
	b.ResetTimer()
	pubTook := publishPaced(b, src, total, rate, base, t0, pub)
	waitWatchers(b, watchers)
	b.StopTimer()

	lat := make([]time.Duration, total)
	for i := range lat {
		var last time.Duration
		for _, w := range watchers {
			last = max(last, w.at[i])
		}
		// A receiver may see the record before Publish has returned on a
		// busy core: that is no delay at all.
		lat[i] = max(0, last-pub[i])
	}
	sortDurations(lat)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(quantileMs(lat, 0.50), "p50-ms")
	b.ReportMetric(quantileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(quantileMs(lat, 0.999), "p999-ms")
	b.ReportMetric(quantileMs(lat, 1), "max-ms")
	b.ReportMetric(float64(total)/pubTook.Seconds(), "records/s")
	b.ReportMetric(float64(c.pulls()-pulls)/float64(b.N), "pulls/op")
	b.ReportMetric(float64(c.received(c.nodes...)-rx)/float64(total*(nodes-1)), "rx-bytes/record")
}

// BenchmarkFanOutSustained publishes 100,000 records per op from one node
// as fast as a single publisher can, and reports records a second until
// every node holds all of them.
func BenchmarkFanOutSustained(b *testing.B) {
	for _, nodes := range []int{3, 5} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			c := newBenchCluster(b, nodes, nil)
			c.warmUp()
			src := c.nodes[0]
			origin := src.st.Origin()
			var val [benchValueSize]byte
			m := record.Message{Topic: benchTopic, Value: val[:]}
			var took, pubTook time.Duration
			pulls, rx := c.pulls(), c.received(c.nodes...)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				var last store.Result
				for j := 0; j < sustainedPerOp; j++ {
					m.Key = benchKeyNames[j%benchKeys]
					var err error
					if last, err = src.st.Publish(&m); err != nil {
						b.Fatal(err)
					}
				}
				pubTook += time.Since(start)
				// Polling every 200µs rather than a watcher on Changed:
				// the watcher would wake on every append and compete
				// for the cores it measures.
				took += c.waitHolds(c.nodes[1:], origin, last.Seq, 200*time.Microsecond).Sub(start)
			}
			b.StopTimer()
			n := float64(b.N * sustainedPerOp)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(n/took.Seconds(), "records/s")
			b.ReportMetric(n/pubTook.Seconds(), "publish-records/s")
			b.ReportMetric(float64(c.pulls()-pulls)/float64(b.N), "pulls/op")
			b.ReportMetric(float64(c.received(c.nodes...)-rx)/(n*float64(nodes-1)), "rx-bytes/record")
		})
	}
}

// pingPong is a TCP echo of 100-byte messages on 127.0.0.1: the loopback
// round trip the replication benchmark compares itself with, measured in
// the same run, through the same Go runtime and scheduler.
type pingPong struct {
	ln   net.Listener
	conn net.Conn
	buf  []byte
	done chan struct{}
}

func newPingPong(b *testing.B) *pingPong {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := &pingPong{ln: ln, buf: make([]byte, benchValueSize), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, benchValueSize)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	if p.conn, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		ln.Close()
		<-p.done
		b.Fatal(err)
	}
	return p
}

func (p *pingPong) roundTrip(b *testing.B) time.Duration {
	start := time.Now()
	if _, err := p.conn.Write(p.buf); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(p.conn, p.buf); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func (p *pingPong) close() {
	p.conn.Close()
	p.ln.Close()
	<-p.done
}

// replicaOf is the peer the daemon replicates tn's writes to: its
// successor on the ring of node IDs (daemon/internal/cluster Cluster.Replica).
func (c *benchCluster) replicaOf(tn *testNode) *testNode {
	ring := slices.Clone(c.nodes)
	sort.Slice(ring, func(i, j int) bool { return ring[i].st.Origin() < ring[j].st.Origin() })
	i := sort.Search(len(ring), func(i int) bool { return ring[i].st.Origin() > tn.st.Origin() })
	return ring[i%len(ring)]
}

// BenchmarkPublishReplication measures the latency of one publish on a
// 3-node cluster, one at a time, for a window of two seconds per op:
// mode=async is Publish alone, mode=sync is Publish then WaitReplica on
// the replica, as the daemon answers --replication=sync. Every publish
// starts on an idle cluster (the previous one acknowledged by every peer).
// Each op also times a 100-byte loopback ping-pong after every publish
// (rtt-*), and mode=sync a plain Publish after every sync one (async-*),
// so that the
// cost sync adds (added-* = sync - async, per quantile) is read against
// one round trip plus the replica's flush (peer-flush-*: the replica's
// flushes, from its store's OnFlush, during the window) of the same run.
func BenchmarkPublishReplication(b *testing.B) {
	for _, mode := range []string{"async", "sync"} {
		for _, flush := range []store.FlushMode{store.FlushAsync, store.FlushSync} {
			b.Run(fmt.Sprintf("mode=%s/flush=%s", mode, flush), func(b *testing.B) {
				benchPublishReplication(b, mode == "sync", flush)
			})
		}
	}
}

func benchPublishReplication(b *testing.B, syncMode bool, flush store.FlushMode) {
	const size = 3
	var fmu sync.Mutex
	var flushes [size][]time.Duration // per node
	recording := false
	c := newBenchCluster(b, size, func(i int, o *store.Options) {
		o.Flush = flush
		o.OnFlush = func(took time.Duration) {
			fmu.Lock()
			if recording {
				flushes[i] = append(flushes[i], took)
			}
			fmu.Unlock()
		}
	})
	c.warmUp()
	src := c.nodes[0]
	replica := c.replicaOf(src)
	replicaID := replica.st.Origin()
	ping := newPingPong(b)
	defer ping.close()

	// quiesce waits until every peer has acknowledged seq: the cluster is
	// idle again, so that each publish and each ping is measured alone,
	// not beside the tail of the previous one's fan-out.
	ctx := context.Background()
	wait := func(peer, seq uint64) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := src.n.WaitReplica(wctx, peer, seq); err != nil {
			b.Fatalf("replica wait: %v", err)
		}
	}
	quiesce := func(seq uint64) {
		for _, tn := range c.nodes {
			if tn != src {
				wait(tn.st.Origin(), seq)
			}
		}
	}

	var lat, base, rtt []time.Duration
	i := 0
	b.ResetTimer()
	fmu.Lock()
	recording = true
	fmu.Unlock()
	for op := 0; op < b.N; op++ {
		end := time.Now().Add(replWindow)
		for time.Now().Before(end) {
			start := time.Now()
			res := benchPublish(b, src, i)
			if syncMode {
				wait(replicaID, res.Seq)
			}
			lat = append(lat, time.Since(start))
			i++
			quiesce(res.Seq)
			if syncMode {
				// The baseline: a plain publish, interleaved with the
				// sync ones, under the same conditions.
				start := time.Now()
				res := benchPublish(b, src, i)
				base = append(base, time.Since(start))
				i++
				quiesce(res.Seq)
			}
			rtt = append(rtt, ping.roundTrip(b))
		}
	}
	b.StopTimer()
	fmu.Lock()
	recording = false
	fmu.Unlock()

	sortDurations(lat)
	sortDurations(rtt)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(len(lat)), "publishes")
	b.ReportMetric(quantileMs(lat, 0.50), "p50-ms")
	b.ReportMetric(quantileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(quantileMs(rtt, 0.50), "rtt-p50-ms")
	b.ReportMetric(quantileMs(rtt, 0.99), "rtt-p99-ms")
	if syncMode {
		sortDurations(base)
		b.ReportMetric(quantileMs(base, 0.50), "async-p50-ms")
		b.ReportMetric(quantileMs(base, 0.99), "async-p99-ms")
		b.ReportMetric(quantileMs(lat, 0.50)-quantileMs(base, 0.50), "added-p50-ms")
		b.ReportMetric(quantileMs(lat, 0.99)-quantileMs(base, 0.99), "added-p99-ms")
	}
	if flush == store.FlushSync {
		// Under FlushSync the replica acknowledges after its own flush:
		// that flush is part of what sync may add.
		fmu.Lock()
		pf := flushes[slices.Index(c.nodes, replica)]
		sortDurations(pf)
		b.ReportMetric(quantileMs(pf, 0.50), "peer-flush-p50-ms")
		b.ReportMetric(quantileMs(pf, 0.99), "peer-flush-p99-ms")
		fmu.Unlock()
	}
}

// BenchmarkCatchUp: a node is out of the cluster (no node links to it)
// while 200,000 records of 100 bytes are written on another and fanned out
// to the third; then membership lets it back in. It reports records a
// second from SetPeers until it holds them all: dial, handshake, push
// from the origin and pulls from both peers.
func BenchmarkCatchUp(b *testing.B) {
	c := newBenchCluster(b, 3, nil)
	c.warmUp()
	src, down := c.nodes[0], c.nodes[2]
	live := c.nodes[:2]
	origin := src.st.Origin()
	ms := make([]record.Message, 1000)
	var val [benchValueSize]byte
	var took time.Duration
	var rx uint64
	pulls := down.n.Pulls()
	b.ResetTimer()
	for op := 0; op < b.N; op++ {
		b.StopTimer()
		c.wire(live...)
		c.waitLinked(live...)
		for j := 0; j < catchUpPerOp; j += len(ms) {
			for k := range ms {
				ms[k] = record.Message{Topic: benchTopic, Key: benchKeyNames[(j+k)%benchKeys], Value: val[:]}
			}
			if _, err := src.disk.PublishBatch(ms); err != nil {
				b.Fatal(err)
			}
		}
		target := src.st.LastSeq(origin)
		c.waitHolds(live[1:], origin, target, time.Millisecond)
		if got := down.st.LastSeq(origin); target-got != catchUpPerOp {
			b.Fatalf("the node that is down holds %d, want %d", got, target-catchUpPerOp)
		}
		b.StartTimer()

		start := time.Now()
		rx0 := c.received(down)
		c.wire(c.nodes...)
		took += c.waitHolds([]*testNode{down}, origin, target, 200*time.Microsecond).Sub(start)
		rx += c.received(down) - rx0
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(b.N*catchUpPerOp)/took.Seconds(), "records/s")
	b.ReportMetric(float64(down.n.Pulls()-pulls)/float64(b.N), "pulls/op")
	b.ReportMetric(float64(rx)/float64(b.N*catchUpPerOp), "rx-bytes/record")
}

// publishPaced publishes total keyed records on src at rate a second (in
// batches every millisecond), checks their seqs follow base, stores each
// one's publish time (since t0) in pub, and returns how long it took.
func publishPaced(b *testing.B, src *testNode, total, rate int, base uint64, t0 time.Time, pub []time.Duration) time.Duration {
	var val [benchValueSize]byte
	m := record.Message{Topic: benchTopic, Value: val[:]}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	perNs := float64(rate) / float64(time.Second)
	for sent := 0; sent < total; {
		<-tick.C
		due := min(total, int(float64(time.Since(start))*perNs))
		for ; sent < due; sent++ {
			m.Key = benchKeyNames[sent%benchKeys]
			res, err := src.st.Publish(&m)
			if err != nil {
				b.Fatal(err)
			}
			if res.Seq != base+uint64(sent)+1 {
				b.Fatalf("publish got seq %d, want %d", res.Seq, base+uint64(sent)+1)
			}
			pub[sent] = time.Since(t0)
		}
	}
	return time.Since(start)
}

// waitWatchers waits until every watcher has seen every record.
func waitWatchers(b *testing.B, watchers []*arrivalWatcher) {
	timeout := time.After(benchSettleTime)
	for _, w := range watchers {
		select {
		case <-w.done:
		case <-timeout:
			b.Fatalf("records not on every node within %s", benchSettleTime)
		}
	}
}

// watchArrivals starts a watcher on each node that timestamps the arrival
// of origin's records base+1 .. base+total; they stop when the benchmark
// ends.
func watchArrivals(b *testing.B, nodes []*testNode, origin, base uint64, total int, t0 time.Time) []*arrivalWatcher {
	stop := make(chan struct{})
	var watchers []*arrivalWatcher
	for _, tn := range nodes {
		w := &arrivalWatcher{st: tn.st, origin: origin, base: base, at: make([]time.Duration, total), t0: t0, done: make(chan struct{})}
		watchers = append(watchers, w)
		go w.run(stop)
	}
	b.Cleanup(func() {
		close(stop)
		for _, w := range watchers {
			<-w.done
		}
	})
	return watchers
}
