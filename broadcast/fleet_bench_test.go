package broadcast

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// The fleet benchmark of issue 6: one origin's cost and its records'
// delivery on 5 and 20 nodes, with the fan-out over the data port (tcp:
// the origin pushes to every peer) and through NATS (the origin publishes
// once; one embedded NATS server in the same process fans out). Every node
// and the NATS server share this process, on 127.0.0.1. Run it once with
//
//	go test -run '^$' -bench BenchmarkFleet -benchtime 1x ./broadcast/
//
// One op is the whole measurement, in two phases:
//
//   - paced: the origin publishes 100-byte keyed values at fleetRate for
//     fleetWindow, a batch every millisecond as the clock allows.
//     origin-bytes/record is the origin's Node.BytesSent over the records
//     (its own records' bytes, pushed or published: one record is
//     160 bytes on the wire); origin-wire-bytes/record is everything
//     the origin wrote to its data-port sockets and to NATS (frames, acks,
//     vectors, pulls it served, the NATS protocol). p50-ms and p99-ms are
//     from Publish returning to the record being held by every other node.
//     cpu-us/record is the process's CPU time (user+system, getrusage)
//     over the records: the whole cluster's, every node's and the NATS
//     server's and the arrival watchers', not the origin's alone.
//     pulls/op is the anti-entropy pulls the nodes sent meanwhile.
//   - flat out: fleetSustained records published as fast as one publisher
//     can; records/s until every node holds them all.
const (
	fleetRate      = 5000
	fleetWindow    = 2 * time.Second
	fleetSustained = 50_000
)

func BenchmarkFleet(b *testing.B) {
	for _, transport := range []string{"tcp", "nats"} {
		for _, nodes := range []int{5, 20} {
			b.Run(fmt.Sprintf("transport=%s/nodes=%d", transport, nodes), func(b *testing.B) {
				benchFleet(b, transport, nodes)
			})
		}
	}
}

// fleetConn counts the bytes a node reads from and writes to the data port.
type fleetConn struct {
	net.Conn
	rx, tx *atomic.Uint64
}

func (c fleetConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rx.Add(uint64(n))
	return n, err
}

func (c fleetConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.tx.Add(uint64(n))
	return n, err
}

type fleetListener struct {
	net.Listener
	rx, tx *atomic.Uint64
}

func (l fleetListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return fleetConn{conn, l.rx, l.tx}, nil
}

// newFleetCluster starts size nodes as newBenchCluster does, with small
// stores (1 MiB segments: twenty stores in one process), fanning out
// through NATS when natsURL is set. tx holds each node's bytes written to
// the data port.
func newFleetCluster(b *testing.B, size int, natsURL string) (c *benchCluster, tx []*atomic.Uint64) {
	c = &benchCluster{b: b}
	dirs := make([]string, size)
	for i := range dirs {
		dirs[i] = testkit.BenchDir(b)
	}
	b.Cleanup(c.stop) // runs before the directories' cleanups and the NATS server's
	for i := 0; i < size; i++ {
		o := store.DefaultOptions(dirs[i])
		o.SegmentSize = 1 << 20 // the daemon's other defaults, IndexChunkEntries too
		st, err := store.Open(o)
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			st.Close()
			b.Fatal(err)
		}
		rx, out := new(atomic.Uint64), new(atomic.Uint64)
		var d net.Dialer
		cfg := Config{
			Store:    st,
			Listener: fleetListener{ln, rx, out},
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return fleetConn{conn, rx, out}, nil
			},
		}
		if natsURL != "" {
			cfg.NATS = &NATSConfig{URL: natsURL}
		}
		n, err := New(cfg)
		if err != nil {
			ln.Close()
			st.Close()
			b.Fatal(err)
		}
		n.Start()
		c.nodes = append(c.nodes, &testNode{name: fmt.Sprintf("n%d", i), dir: o.Dir, st: st, disk: st, n: n})
		c.rx = append(c.rx, rx)
		tx = append(tx, out)
	}
	return c, tx
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchFleet(b *testing.B, transport string, size int) {
	var natsURL string
	if transport == "nats" {
		natsURL = startNATSCluster(b, 1)[0].ClientURL() // shut down after the nodes
	}
	c, tx := newFleetCluster(b, size, natsURL)
	c.warmUp()
	src := c.nodes[0]
	origin := src.st.Origin()
	// wire is all the origin has written: data port, and NATS if any.
	wire := func() uint64 {
		n := tx[0].Load()
		if src.n.nats != nil {
			n += src.n.nats.Conn().Stats().OutBytes
		}
		return n
	}

	// Phase 1, paced.
	total := b.N * int(fleetWindow.Seconds()*fleetRate)
	base := src.st.LastSeq(origin)
	t0 := time.Now()
	pub := make([]time.Duration, total)
	watchers := watchArrivals(b, c.nodes[1:], origin, base, total, t0)
	sent0, wire0, pulls0, cpu0 := src.n.BytesSent(), wire(), c.pulls(), cpuTime(b)
	b.ResetTimer()
	pubTook := publishPaced(b, src, total, fleetRate, base, t0, pub)
	waitWatchers(b, watchers)
	cpu := cpuTime(b) - cpu0
	sent, wired, pulls := src.n.BytesSent()-sent0, wire()-wire0, c.pulls()-pulls0

	lat := make([]time.Duration, total)
	for i := range lat {
		var last time.Duration
		for _, w := range watchers {
			last = max(last, w.at[i])
		}
		lat[i] = max(0, last-pub[i]) // seen before Publish returned: no delay
	}
	sortDurations(lat)

	// Phase 2, flat out.
	var val [benchValueSize]byte
	m := record.Message{Topic: benchTopic, Value: val[:]}
	var last store.Result
	start := time.Now()
	for j := 0; j < fleetSustained; j++ {
		m.Key = benchKeyNames[j%benchKeys]
		var err error
		if last, err = src.st.Publish(&m); err != nil {
			b.Fatal(err)
		}
	}
	// Polling rather than watchers: they would wake on every append and
	// compete for the cores being measured.
	took := c.waitHolds(c.nodes[1:], origin, last.Seq, 200*time.Microsecond).Sub(start)
	b.StopTimer()

	n := float64(total)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(sent)/n, "origin-bytes/record")
	b.ReportMetric(float64(wired)/n, "origin-wire-bytes/record")
	b.ReportMetric(quantileMs(lat, 0.50), "p50-ms")
	b.ReportMetric(quantileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(quantileMs(lat, 1), "max-ms")
	b.ReportMetric(n/pubTook.Seconds(), "paced-records/s")
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-us/record")
	b.ReportMetric(float64(pulls)/float64(b.N), "pulls/op")
	b.ReportMetric(fleetSustained/took.Seconds(), "records/s")
}
