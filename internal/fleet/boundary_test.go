package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// BenchmarkBoundaryLatency is issue 37's check of publish-to-visible at
// the store's boundaries, on boundaryNodes in-process nodes whose stores
// are on the disk (CACHECAST_BENCH_DIR, else the test's temporary
// directory), with boundarySegment segments (so 8 MiB files of 64 slots):
// one node publishes boundaryRecords keyless messages of 1 KiB to a new
// topic, one every boundaryEvery, and each is timed from the call of
// Publish to the moment the last node's follower (store.Follow) has it.
// The records that open a chunk of the topic's index (entries 512, 1536,
// 3584, 7680, 15872; every node's index of the topic starts with the
// round), a chunk of the publisher's origin index (seqs 512, 1536, ...
// of the origin), and those that open a segment of the publisher's log
// (about one in 110) are reported apart from the others; the p99.9 is of
// all. A boundary that costs the append path a file, an fsync or a page
// fault shows as that class's p99 and max far above the others'.
// Latencies in ms; *-publish-* are the publisher's Publish calls alone.
//
//	CACHECAST_BENCH_DIR=/var/tmp go test -run '^$' -bench BoundaryLatency -benchtime 2x ./internal/fleet/
func BenchmarkBoundaryLatency(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	f, err := Start(ctx, Options{Nodes: boundaryNodes, Dir: testkit.BenchDir(b), SegmentSize: boundarySegment})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	lat := boundaryRounds(b, func(topic string) map[string][]time.Duration { return boundaryRound(ctx, b, f, topic) })
	reportBoundaries(b, lat, "index", "segment", "other")
}

// boundaryRounds runs round with a new topic for each of b's rounds and
// returns the latencies of all, by class.
func boundaryRounds(b *testing.B, round func(topic string) map[string][]time.Duration) map[string][]time.Duration {
	lat := map[string][]time.Duration{}
	n := 0
	for b.Loop() {
		for class, ds := range round(fmt.Sprintf("boundary-%d", n)) {
			lat[class] = append(lat[class], ds...)
		}
		n++
	}
	return lat
}

// reportBoundaries reports the latencies of each class of records, and of
// the publisher's calls at them (class+"-publish"), and the p99.9 of all.
func reportBoundaries(b *testing.B, lat map[string][]time.Duration, classes ...string) {
	var all []time.Duration
	for _, class := range classes {
		ds := lat[class]
		all = append(all, ds...)
		b.ReportMetric(float64(len(ds)), class+"-records")
		b.ReportMetric(Quantile(ds, 0.5), class+"-p50-ms")
		b.ReportMetric(Quantile(ds, 0.99), class+"-p99-ms")
		b.ReportMetric(Quantile(ds, 1), class+"-max-ms")
		b.ReportMetric(Quantile(lat[class+"-publish"], 0.5), class+"-publish-p50-ms")
		b.ReportMetric(Quantile(lat[class+"-publish"], 1), class+"-publish-max-ms")
	}
	b.ReportMetric(Quantile(all, 0.999), "all-p99.9-ms")
}

const (
	boundaryNodes   = 5
	boundaryRecords = 16384
	boundarySegment = 128 << 10
	boundaryEvery   = 500 * time.Microsecond
)

// boundaryRound publishes a round to topic from the first node and
// returns the latencies of its records by class: at an index chunk's
// boundary, at a segment's, or elsewhere.
func boundaryRound(ctx context.Context, b *testing.B, f *Fleet, topic string) map[string][]time.Duration {
	nodes := f.Running()
	pub := nodes[0].Store()
	arrivals := newArrivals(len(nodes), boundaryRecords)
	fctx, stop := context.WithCancel(ctx)
	var done []<-chan struct{}
	for i, n := range nodes {
		done = append(done, n.Store().Follow(fctx, store.FollowOptions{Records: true}, func(fw store.Followed) {
			if r := fw.Record; r != nil && r.Origin() == pub.Origin() && string(r.Topic()) == topic {
				arrivals.note(i, r.Seq())
			}
		}, nil))
	}
	defer func() {
		stop()
		for _, d := range done {
			<-d
		}
	}()
	m := record.Message{Topic: topic, Value: make([]byte, 1<<10)}
	sent := make([]time.Time, boundaryRecords)
	took := make([]time.Duration, boundaryRecords) // Publish's own time
	class := make([]string, boundaryRecords)
	segment := int64(-1)
	next := time.Now()
	for i := range boundaryRecords {
		next = next.Add(boundaryEvery)
		time.Sleep(time.Until(next)) // the publisher's pace, not a wait on the fleet
		sent[i] = time.Now()
		res, err := pub.Publish(&m)
		if err != nil {
			b.Fatal(err)
		}
		took[i] = time.Since(sent[i])
		arrivals.first(i, res.Seq)
		seg := res.Pos / boundarySegment
		switch {
		case indexBoundary(uint64(i)) || indexBoundary(res.Seq-1):
			class[i] = "index"
		case segment >= 0 && seg != segment:
			class[i] = "segment"
		default:
			class[i] = "other"
		}
		segment = seg
	}
	at, err := arrivals.wait(ctx)
	if err != nil {
		b.Fatal(err)
	}
	lat := map[string][]time.Duration{}
	for i, t := range at {
		lat[class[i]] = append(lat[class[i]], t.Sub(sent[i]))
		lat[class[i]+"-publish"] = append(lat[class[i]+"-publish"], took[i])
	}
	return lat
}

// indexBoundary reports whether entry e of an index opens a new chunk:
// chunks start with 512 entries and double.
func indexBoundary(e uint64) bool {
	for at, size := uint64(512), uint64(1024); at <= e; at, size = at+size, 2*size {
		if at == e {
			return true
		}
	}
	return false
}

// arrivals keeps, for each record of a round, when the last node had it.
type arrivals struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each arrival
	nodes   int
	base    uint64               // the seq of the round's first record
	seen    map[uint64]int       // seq -> nodes that have it
	at      map[uint64]time.Time // seq -> when the last one had it
	records int
}

func newArrivals(nodes, records int) *arrivals {
	return &arrivals{changed: make(chan struct{}), nodes: nodes, seen: map[uint64]int{}, at: map[uint64]time.Time{}, records: records}
}

// first records the seq of the round's record i (the publisher's).
func (a *arrivals) first(i int, seq uint64) {
	if i == 0 {
		a.mu.Lock()
		a.base = seq
		a.mu.Unlock()
	}
}

func (a *arrivals) note(node int, seq uint64) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen[seq]++
	if a.seen[seq] == a.nodes {
		a.at[seq] = now
		close(a.changed)
		a.changed = make(chan struct{})
	}
}

// wait returns, in the round's order, when each record reached the last
// node, once every record has reached every node (or ctx ends).
func (a *arrivals) wait(ctx context.Context) ([]time.Time, error) {
	for {
		a.mu.Lock()
		n, changed := len(a.at), a.changed
		a.mu.Unlock()
		if n >= a.records {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d records reached every node: %w", n, a.records, ctx.Err())
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]time.Time, a.records)
	for i := range out {
		t, ok := a.at[a.base+uint64(i)]
		if !ok {
			return nil, fmt.Errorf("record %d (seq %d) not seen everywhere", i, a.base+uint64(i))
		}
		out[i] = t
	}
	return out, nil
}
