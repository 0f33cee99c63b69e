package store

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// BenchmarkPublishLatencyHousekeeping is one writer's publish latency
// (p50, p99, p99.9, max over every publish of the run) while the store
// does the work that holds its locks: another goroutine publishing to a
// new topic every millisecond (each creates its topic's index: files,
// fsyncs), and the log recycling its oldest segments as it reaches
// RetentionBytes with WhenFull=recycle (munmap, rename, delete), beside
// the same writer alone. 100-byte values over 10,000 keys, async flush,
// 4 MiB segments; then 8 KB values over 100 keys (a view the snapshot
// keeps up with) on the default 64 MiB segments, alone
// and recycling them (the munmap of a whole 64 MiB map, under the
// segment log's mutex and the store's write lock), and 100-byte values
// with index chunks of 1,024 entries, so that the topic and origin
// indexes roll to a new chunk file every 1,024 publishes and, past 8
// mapped chunks, sync and unmap the oldest under the index's write lock.
func BenchmarkPublishLatencyHousekeeping(b *testing.B) {
	for _, tc := range []struct {
		name            string
		topics, recycle bool
		peerTopics      bool  // a peer's records make the new topics
		segment         int64 // 0: 4 MiB
		valueSize       int   // 0: 100
		chunkEntries    int   // 0: 64Ki
		keys            int   // 0: 10,000
	}{
		{name: "alone"},
		{name: "new-topics", topics: true},
		{name: "peer-new-topics", topics: true, peerTopics: true},
		{name: "recycle", recycle: true},
		{name: "both", topics: true, recycle: true},
		{name: "alone-64MiB-8KB", segment: 64 << 20, valueSize: 8 << 10, keys: 100},
		{name: "recycle-64MiB-8KB", recycle: true, segment: 64 << 20, valueSize: 8 << 10, keys: 100},
		{name: "index-roll-1024", chunkEntries: 1024},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := testOptions(b, b.TempDir())
			o.SegmentSize = cmp.Or(tc.segment, 4<<20)
			o.MaxMappedSegments = 8
			o.IndexChunkEntries = cmp.Or(tc.chunkEntries, 64<<10)
			o.SnapshotInterval = 50 * time.Millisecond
			if tc.recycle {
				o.RetentionBytes = 4 * o.SegmentSize
				o.WhenFull = FullRecycle
			}
			s := openTest(b, o)
			defer s.Close()
			keys := make([]string, cmp.Or(tc.keys, 10_000))
			for i := range keys {
				keys[i] = fmt.Sprintf("sku-%06d", i)
			}
			value := make([]byte, cmp.Or(tc.valueSize, 100))
			stop := make(chan struct{})
			var wg sync.WaitGroup
			created := 0
			if tc.topics {
				wg.Go(func() {
					tick := time.NewTicker(time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						m := record.Message{Topic: fmt.Sprintf("new-%d", created), Key: "k", Value: value}
						var err error
						if tc.peerTopics {
							_, err = s.AppendRecord(encodePeer(&m, 42, uint64(created+1), time.Now()))
						} else {
							_, err = s.Publish(&m)
						}
						if err != nil {
							b.Error(err)
							return
						}
						created++
					}
				})
			}
			// The publishes that did the housekeeping themselves: those
			// that recycled a segment, or appended the first entry of a
			// new index chunk (chunks of 512 entries, then chunkEntries).
			lat, kept := make([]time.Duration, 0, 1<<20), []time.Duration(nil)
			rolls := func(n uint64) bool {
				return tc.chunkEntries > 0 && n >= 512 && (n-512)%uint64(tc.chunkEntries) == 0
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				m := record.Message{Topic: "prices", Key: keys[i%len(keys)], Value: value}
				oldest, roll := s.seglog.Oldest(), rolls(uint64(i))
				t0 := time.Now()
				if _, err := s.Publish(&m); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0)
				lat = append(lat, d)
				if roll || s.seglog.Oldest() != oldest {
					kept = append(kept, d)
				}
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			q := func(lat []time.Duration, p float64) float64 {
				return us(lat[min(len(lat)-1, int(p*float64(len(lat))))])
			}
			slices.Sort(lat)
			b.ReportMetric(q(lat, 0.5), "p50-us")
			b.ReportMetric(q(lat, 0.99), "p99-us")
			b.ReportMetric(q(lat, 0.999), "p99.9-us")
			b.ReportMetric(us(lat[len(lat)-1]), "max-us")
			if len(kept) > 0 {
				slices.Sort(kept)
				b.ReportMetric(float64(len(kept)), "housekeeping-publishes")
				b.ReportMetric(q(kept, 0.5), "housekeeping-p50-us")
				b.ReportMetric(us(kept[len(kept)-1]), "housekeeping-max-us")
			}
			b.ReportMetric(float64(created), "topics")
			b.ReportMetric(float64(s.Stats().OldestPos>>20), "recycled-MiB")
		})
	}
}

// TestPublishNewTopicsConcurrently: publishers and a peer's records making
// new topics at once (each prepares its index before the writer lock)
// lose nothing and make each index once.
func TestPublishNewTopicsConcurrently(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, testOptions(t, dir))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				m := record.Message{Topic: fmt.Sprintf("t%d", (i+g)%40), Key: "k", Value: []byte("v")}
				if _, err := s.Publish(&m); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// A peer's records make new topics too (AppendRecord prepares their
	// indexes before the lock as well), some of them the same topics.
	wg.Go(func() {
		for i := range 100 {
			m := record.Message{Topic: fmt.Sprintf("t%d", 20+i%40), Key: "p", Value: []byte("v")}
			if _, err := s.AppendRecord(encodePeer(&m, 42, uint64(i+1), time.Now())); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, testOptions(t, dir))
	var n uint64
	for _, ti := range s.Topics() {
		n += ti.Messages
	}
	if len(s.Topics()) != 60 || n != 500 {
		t.Fatalf("%d topics, %d messages after reopening; want 60 and 500", len(s.Topics()), n)
	}
}
