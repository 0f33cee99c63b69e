package store

import (
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
// 4 MiB segments.
func BenchmarkPublishLatencyHousekeeping(b *testing.B) {
	for _, tc := range []struct {
		name            string
		topics, recycle bool
	}{
		{"alone", false, false},
		{"new-topics", true, false},
		{"recycle", false, true},
		{"both", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := testOptions(b, b.TempDir())
			o.SegmentSize = 4 << 20
			o.MaxMappedSegments = 8
			o.IndexChunkEntries = 64 << 10
			o.SnapshotInterval = 50 * time.Millisecond
			if tc.recycle {
				o.RetentionBytes = 16 << 20
				o.WhenFull = FullRecycle
			}
			s := openTest(b, o)
			defer s.Close()
			keys := make([]string, 10_000)
			for i := range keys {
				keys[i] = fmt.Sprintf("sku-%06d", i)
			}
			value := make([]byte, 100)
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
						if _, err := s.Publish(&m); err != nil {
							b.Error(err)
							return
						}
						created++
					}
				})
			}
			lat := make([]time.Duration, 0, 1<<20)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				m := record.Message{Topic: "prices", Key: keys[i%len(keys)], Value: value}
				t0 := time.Now()
				if _, err := s.Publish(&m); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			q := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
			}
			b.ReportMetric(q(0.5), "p50-us")
			b.ReportMetric(q(0.99), "p99-us")
			b.ReportMetric(q(0.999), "p99.9-us")
			b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e3, "max-us")
			b.ReportMetric(float64(created), "topics")
			b.ReportMetric(float64(s.Stats().OldestPos>>20), "recycled-MiB")
		})
	}
}

// TestPublishNewTopicsConcurrently: publishers making new topics at once
// (each prepares its index before the writer lock) lose nothing and
// make each index once.
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
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, testOptions(t, dir))
	var n uint64
	for _, ti := range s.Topics() {
		n += ti.Messages
	}
	if len(s.Topics()) != 40 || n != 400 {
		t.Fatalf("%d topics, %d messages after reopening; want 40 and 400", len(s.Topics()), n)
	}
}
