package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// BenchmarkPublishRandom1M is the store's publish path for updates of
// existing keys picked at random among 1,000,000 (16-byte keys, 100-byte
// values, async flush, the default segments, on $CACHECAST_BENCH_DIR or
// the temporary directory): each update misses the caches on its key, as
// a Redis SET or an HTTP PUT over a big key space does. batch=1 is Publish
// of one message (the Redis SET, the HTTP PUT), batch=100 PublishBatch of
// 100. view=in-place is a view no one froze since the keys were written:
// an update copies the record into the key's item. view=frozen has a
// follower that takes each change (as the daemon's shared-view mirror
// does, without its file) and a freeze of the view (a snapshot, a digest,
// the follower's start) just before the loop: the first update of a key
// after a freeze makes a new item and puts it in the B-tree, and nearly
// every update of the loop is one. cpu-ns/msg is the process's CPU time
// a message (getrusage: the publisher, the flusher, the runtime). Each
// case's store is filled once per process and kept for every -count.
//
//	go test -run '^$' -bench PublishRandom1M -count 6 ./store/
func BenchmarkPublishRandom1M(b *testing.B) {
	for _, batch := range []int{1, 100} {
		for _, mode := range []string{"in-place", "frozen"} {
			b.Run(fmt.Sprintf("batch=%d/view=%s", batch, mode), func(b *testing.B) {
				bs := publishBenchStore(b, fmt.Sprint(batch, mode), mode == "frozen")
				if mode == "frozen" {
					bs.s.view.Freeze()
				}
				rng := rand.New(rand.NewPCG(1, uint64(bs.n)))
				msgs := make([]record.Message, batch)
				value := make([]byte, 100)
				var digits []byte
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := testkit.ProcessCPU()
				n := 0
				var err error
				for b.Loop() {
					for j := range msgs {
						digits = strconv.AppendInt(digits[:0], int64(bs.n+n+j), 10)
						copy(value, digits)
						msgs[j] = record.Message{Topic: "prices", Key: bs.names[rng.IntN(len(bs.names))], Value: value}
					}
					if batch == 1 {
						_, err = bs.s.Publish(&msgs[0])
					} else {
						_, err = bs.s.PublishBatch(msgs)
					}
					if err != nil {
						b.Fatal(err)
					}
					n += batch
				}
				b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(n), "cpu-ns/msg")
				b.StopTimer()
				bs.n += n
				if mode == "frozen" && bs.changes < bs.n {
					b.Fatalf("the follower saw %d changes of %d", bs.changes, bs.n)
				}
			})
		}
	}
}

// publishBench is a store filled with the benchmark's keys.
type publishBench struct {
	s       *Store
	dir     string
	names   []string
	n       int // messages published by the benchmark's loops so far
	changes int // the follower's, counted from the loops' start
}

var (
	publishBenchMu     sync.Mutex
	publishBenchStores = map[string]*publishBench{}
)

// publishBenchStore opens (once per name and process) a store holding
// 1,000,000 keys, with a follower of its view when follow is set.
// closePublishBenchStores closes them after every benchmark of the run.
func publishBenchStore(b *testing.B, name string, follow bool) *publishBench {
	publishBenchMu.Lock()
	defer publishBenchMu.Unlock()
	if bs := publishBenchStores[name]; bs != nil {
		return bs
	}
	root := os.Getenv("CACHECAST_BENCH_DIR")
	dir, err := os.MkdirTemp(root, "cachecast-publish-bench")
	if err != nil {
		b.Fatal(err)
	}
	o := DefaultOptions(dir)
	o.SnapshotInterval = time.Hour // no freeze but the benchmark's
	s, err := Open(o)
	if err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	bs := &publishBench{s: s, dir: dir, names: make([]string, 1_000_000)}
	publishBenchStores[name] = bs
	value := make([]byte, 100)
	msgs := make([]record.Message, 0, 1000)
	for i := range bs.names {
		bs.names[i] = fmt.Sprintf("sku-%012d", i)
		msgs = append(msgs, record.Message{Topic: "prices", Key: bs.names[i], Value: value})
		if len(msgs) == cap(msgs) {
			if _, err := s.PublishBatch(msgs); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	if follow {
		for range s.FollowView(func(view.Change) { bs.changes++ }, nil) {
		}
	}
	return bs
}

// closePublishBenchStores closes and removes the benchmark's stores.
func closePublishBenchStores() {
	publishBenchMu.Lock()
	defer publishBenchMu.Unlock()
	for name, bs := range publishBenchStores {
		bs.s.FollowView(nil, nil)
		bs.s.Close()
		os.RemoveAll(bs.dir)
		delete(publishBenchStores, name)
	}
}

// BenchmarkPublishSET10k is the store's part of redis-benchmark's SET
// (-r 10000, -d 100): updates of keys picked at random among 10,000
// (12-byte keys, 100-byte values, async flush), one Publish at a time
// (batch=1: -c 1, -c 50) or 16 to a PublishBatchInto (batch=16: the
// pipelined SETs of one read, -P 16, results in a reused slice as the
// Redis door's), with a follower that keeps each
// publish's changes together and drops them at its end, as the daemon's
// shared-view mirror does before it writes its file. cpu-ns/msg is the
// process's CPU time a message (getrusage).
//
//	go test -run '^$' -bench PublishSET10k -count 6 ./store/
func BenchmarkPublishSET10k(b *testing.B) {
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			o := DefaultOptions(b.TempDir())
			o.SnapshotInterval = time.Hour // no freeze but the follower's start
			s, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			names := make([]string, 10_000)
			value := make([]byte, 100)
			for i := range names {
				names[i] = fmt.Sprintf("%012d", i)
				if _, err := s.Publish(&record.Message{Topic: "key", Key: names[i], Value: value}); err != nil {
					b.Fatal(err)
				}
			}
			var group []view.Change
			changes := 0
			for range s.FollowView(func(c view.Change) { group = append(group, c) }, func() {
				changes += len(group)
				clear(group)
				group = group[:0]
			}) {
			}
			defer func() { s.FollowView(nil, nil) }() // nil stops the follower
			rng := rand.New(rand.NewPCG(2, 3))
			msgs := make([]record.Message, batch)
			results := make([]Result, batch)
			var digits []byte
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := testkit.ProcessCPU()
			n := 0
			for b.Loop() {
				for j := range msgs {
					digits = strconv.AppendInt(digits[:0], int64(n+j), 10)
					copy(value, digits)
					msgs[j] = record.Message{Topic: "key", Key: names[rng.IntN(len(names))], Value: value}
				}
				if batch == 1 {
					_, err = s.Publish(&msgs[0])
				} else {
					err = s.PublishBatchInto(msgs, results)
				}
				if err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(n), "cpu-ns/msg")
			b.StopTimer()
			if changes < n {
				b.Fatalf("the follower saw %d changes of %d", changes, n)
			}
		})
	}
}
