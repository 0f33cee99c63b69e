package store

import (
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// BenchmarkAppendReadOld is a follower catching up while the node
// publishes: each op appends an 8 KB record and reads the next of the
// records written before the timer (two 64 MiB segments, flushed), from
// the oldest on, round again at their end. Their pages leave the process's
// resident set once flushed (issue 34; segment/release.go) and come back
// from the page cache as the reader reaches them, released again as the
// writer goes on: this is what that costs the reader and the writer.
func BenchmarkAppendReadOld(b *testing.B) {
	const size, old = 8 << 10, 128 << 20
	s := benchStore(b, appendCase{size, 64 << 20, 16}, FlushAsync)
	defer s.Close()
	m := record.Message{Topic: "bench", Value: make([]byte, size-record.HeaderSize-len("bench"))}
	for s.seglog.End() < old {
		if _, err := s.Publish(&m); err != nil {
			b.Fatal(err)
		}
	}
	end := s.seglog.End()
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	var n int
	count := func(r record.Record) error { n += len(r); return nil }
	pos := s.seglog.Oldest()
	b.SetBytes(2 * size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Publish(&m); err != nil {
			b.Fatal(err)
		}
		next, err := s.seglog.Read(pos, count)
		if err != nil {
			b.Fatal(err)
		}
		if pos = next; pos >= end {
			pos = s.seglog.Oldest()
		}
	}
	closeUntimed(b, s)
}
