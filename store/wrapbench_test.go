package store

import (
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/record"
)

// BenchmarkAppendWrapped is BenchmarkAppend in a long-running node's
// steady state: the log is at its bound (RetentionBytes of wrapRetention)
// and has wrapped before the timer starts, so every append goes into
// space retention gave back, as on a node that has run for a while.
func BenchmarkAppendWrapped(b *testing.B) {
	for _, c := range appendCases[:5] {
		b.Run(c.name(), func(b *testing.B) {
			o := DefaultOptions(testkit.BenchDir(b))
			o.SegmentSize = int64(c.segment)
			o.MaxMappedSegments = c.mapped
			o.RetentionBytes = wrapRetention
			s, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			m := record.Message{Topic: "bench", Value: make([]byte, c.size-record.HeaderSize-len("bench"))}
			for written := 0; written < 3*wrapRetention; written += c.size {
				publishRetrying(b, s, &m)
			}
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				publishRetrying(b, s, &m)
			}
			closeUntimed(b, s)
		})
	}
}

const wrapRetention = 32 << 20
