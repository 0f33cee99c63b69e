package store

import (
	"slices"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// BenchmarkPublishIndexBoundaries publishes boundaryRecords keyless
// messages (100-byte values, default options, async flush) one at a time
// to a new topic of a new store each round, and times each Publish
// apart: the records that open a new chunk of the topic's index and of
// the origin's (both start with 512 entries and double: records 512,
// 1536, 3584, 7680 and 15872 of the round; the origin index numbers from
// seq 1, so its boundaries fall on the same records) against all the
// others (the round's first record, which makes both indexes, is
// neither), and the records after them apart too ("ask": where both
// indexes ask their preparers for the chunks after, which a writer this
// fast wakes). A chunk made on the append path shows as a boundary p50
// and max far above the others'. Figures in µs; ns/op is a whole round.
//
//	go test -run '^$' -bench PublishIndexBoundaries -benchtime 20x -count 3 ./store/
func BenchmarkPublishIndexBoundaries(b *testing.B) {
	var atBoundary, asking, elsewhere []time.Duration
	boundary := make([]bool, boundaryRecords+1)
	for at, size := 512, 1024; at < boundaryRecords; at, size = at+size, 2*size {
		boundary[at] = true
	}
	m := record.Message{Topic: "bench", Value: make([]byte, 100)}
	for b.Loop() {
		b.StopTimer()
		s, err := Open(DefaultOptions(testkit.BenchDir(b)))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i := range boundaryRecords {
			t0 := time.Now()
			if _, err := s.Publish(&m); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			switch {
			case boundary[i]:
				atBoundary = append(atBoundary, d)
			case i > 0 && boundary[i-1]:
				asking = append(asking, d)
			case i > 0:
				elsewhere = append(elsewhere, d)
			}
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	for _, q := range []struct {
		name string
		lat  []time.Duration
	}{{"boundary", atBoundary}, {"ask", asking}, {"other", elsewhere}} {
		slices.Sort(q.lat)
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		b.ReportMetric(us(q.lat[len(q.lat)/2]), q.name+"-p50-µs")
		b.ReportMetric(us(q.lat[len(q.lat)*99/100]), q.name+"-p99-µs")
		b.ReportMetric(us(q.lat[len(q.lat)-1]), q.name+"-max-µs")
	}
}

// boundaryRecords is a round of BenchmarkPublishIndexBoundaries: five
// index chunk boundaries.
const boundaryRecords = 16384
