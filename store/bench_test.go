package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/internal/segment"
	"github.com/cachecast/cachecast/store/record"
)

// The append benchmarks are named so that they sit beside SkyWalking
// Satellite's mmap-queue benchmarks (BenchmarkEnqueue and
// BenchmarkEnqueueAndDequeue, segmentSize x maxInMemSegments x message).
// They publish keyless stream messages: the log, the topic index and the
// origin index take every record, the view ignores them (a keyed message
// also costs the copy of its value into the view).

type appendCase struct {
	size, segment, mapped int
}

func (c appendCase) name() string {
	return fmt.Sprintf("size=%s/segment=%s/mapped=%d", byteSize(c.size), byteSize(c.segment), c.mapped)
}

var appendCases = []appendCase{
	{8 << 10, 128 << 10, 18},
	{8 << 10, 256 << 10, 10},
	{8 << 10, 512 << 10, 6},
	{8 << 10, 256 << 10, 20},
	{16 << 10, 128 << 10, 10},
	{128, 64 << 20, 16},
	{8 << 10, 64 << 20, 16},
	{1 << 20, 64 << 20, 16},
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func benchStore(b *testing.B, c appendCase, flush FlushMode, tune ...func(*Options)) *Store {
	o := DefaultOptions(testkit.BenchDir(b))
	o.SegmentSize = int64(c.segment)
	o.MaxMappedSegments = c.mapped
	o.Flush = flush
	// Keep the disk use of a long run bounded: the benchmark measures
	// recycling too, as a long-running node does.
	o.RetentionBytes = max(int64(1<<30), 4*o.SegmentSize)
	for _, f := range tune {
		f(&o)
	}
	s, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkAppend(b *testing.B) {
	for _, c := range appendCases {
		b.Run(c.name(), func(b *testing.B) {
			s := benchStore(b, c, FlushAsync)
			defer s.Close()
			m := record.Message{Topic: "bench", Value: make([]byte, c.size-record.HeaderSize-len("bench"))}
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Publish(&m); err != nil {
					b.Fatal(err)
				}
			}
			closeUntimed(b, s)
		})
	}
}

// closeUntimed stops the timer and closes the store, as Satellite's
// benchmarks stop theirs before closing the queue: the final flush and
// snapshot of Close are not part of the appends measured. The flushes of
// the async flusher during the run are.
func closeUntimed(b *testing.B, s *Store) {
	b.StopTimer()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkAppendRead(b *testing.B) {
	for _, c := range appendCases {
		b.Run(c.name(), func(b *testing.B) {
			s := benchStore(b, c, FlushAsync)
			defer s.Close()
			m := record.Message{Topic: "bench", Value: make([]byte, c.size-record.HeaderSize-len("bench"))}
			out := make([]byte, 0, c.size)
			copyOut := func(r record.Record) error { out = append(out[:0], r...); return nil }
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := s.Publish(&m)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.seglog.Read(res.Pos, copyOut); err != nil {
					b.Fatal(err)
				}
			}
			closeUntimed(b, s)
		})
	}
}

// BenchmarkAppendSync measures group commit: N writers, 1 KB records,
// each write waits for a flush that covers it. cpu-ns/op is the process's
// CPU time a record, which holds on a loaded machine where records/s does
// not; records/flush is how many records a flush carried, us/flush how
// long a flush took (the device's part, which a loaded disk moves).
func BenchmarkAppendSync(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			var flushes, flushTime atomic.Int64
			s := benchStore(b, appendCase{1 << 10, 64 << 20, 16}, FlushSync, func(o *Options) {
				o.OnFlush = func(took time.Duration) {
					flushes.Add(1)
					flushTime.Add(int64(took))
				}
			})
			defer s.Close()
			b.SetBytes(1 << 10)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := testkit.ProcessCPU()
			flushes0, flushTime0 := flushes.Load(), flushTime.Load()
			var wg sync.WaitGroup
			per := b.N / writers
			for w := 0; w < writers; w++ {
				n := per
				if w == 0 {
					n += b.N % writers
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := record.Message{Topic: "bench", Value: make([]byte, 1<<10-record.HeaderSize-len("bench"))}
					for i := 0; i < n; i++ {
						if _, err := s.Publish(&m); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			if n := flushes.Load() - flushes0; n > 0 {
				b.ReportMetric(float64(b.N)/float64(n), "records/flush")
				b.ReportMetric(float64(flushTime.Load()-flushTime0)/float64(n)/1e3, "us/flush")
			}
		})
	}
}

// BenchmarkRecover opens a 1 GiB log left by a crash: every record after
// the last flush is checked (here: all of them, nothing was flushed), the
// indexes are found complete, and the view (no snapshot) is rebuilt from
// the log. The records are 8 KiB updates of recoverKeys keys, as prices
// are updated again and again, so every record is applied to the view and
// the view ends at recoverKeys keys of 8 KiB values. cpu-ms/op is the
// process's CPU time during the timed Opens.
func BenchmarkRecover(b *testing.B) {
	const total = 1 << 30
	const recoverKeys = 4096
	dir := testkit.BenchDir(b)
	o := DefaultOptions(dir)
	o.FlushInterval = time.Hour
	o.FlushBytes = 0
	s, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, recoverKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("sku-%05d", i) // all of one length: every record is 8 KiB
	}
	m := record.Message{Topic: "bench", Value: make([]byte, 8<<10-record.HeaderSize-len("bench")-len(keys[0]))}
	var records uint64
	for written := 0; written < total; written += 8 << 10 {
		m.Key = keys[records%recoverKeys]
		if _, err := s.Publish(&m); err != nil {
			b.Fatal(err)
		}
		records++
	}
	lastKey := keys[(records-1)%recoverKeys]
	s.crash()
	b.SetBytes(total)
	b.ResetTimer()
	var cpu int64 // of the timed Opens: what a recovery costs, on a loaded machine too
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Back to the state of a crash before any flush.
		mm, _, err := segment.OpenMeta(filepath.Join(dir, metaName), o.SegmentSize, 1, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		mm.SetPos(segment.OffCommitted, 0)
		if err := mm.Sync(); err != nil {
			b.Fatal(err)
		}
		mm.Close()
		os.Remove(filepath.Join(dir, snapshotName))
		b.StartTimer()
		cpu0 := testkit.ProcessCPU()
		s, err := Open(o)
		cpu += testkit.ProcessCPU() - cpu0
		if err != nil {
			b.Fatal(err)
		}
		if got := s.Stats().WritePos; got < total {
			b.Fatalf("recovered %d bytes of %d", got, total)
		}
		if got := s.Stats().Keys; got != recoverKeys {
			b.Fatalf("view rebuilt with %d keys, want %d", got, recoverKeys)
		}
		if e, ok := s.Get("bench", lastKey); !ok || e.Stamp.Seq != records {
			b.Fatalf("view: %s has seq %d (found %v), want the last record's %d", lastKey, e.Stamp.Seq, ok, records)
		}
		b.StopTimer()
		s.crash()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkAccumulate appends CACHECAST_ACCUMULATE_GB gigabytes of 8 KB
// records (default 2) and reports the rate of the first and the last
// gigabyte and the resident memory at the end: the rate must stay flat and
// the memory bounded by the mapped segments. `make bench-accumulate` runs
// it with 20 GB; it is not part of CI.
func BenchmarkAccumulate(b *testing.B) {
	gb := 2
	if v, err := strconv.Atoi(os.Getenv("CACHECAST_ACCUMULATE_GB")); err == nil && v > 0 {
		gb = v
	}
	s := benchStore(b, appendCase{8 << 10, 64 << 20, 16}, FlushAsync)
	defer s.Close()
	m := record.Message{Topic: "bench", Value: make([]byte, 8<<10-record.HeaderSize-len("bench"))}
	perGB := (1 << 30) / (8 << 10)
	var first, last float64
	for g := 0; g < gb; g++ {
		start := time.Now()
		for i := 0; i < perGB; i++ {
			if _, err := s.Publish(&m); err != nil {
				b.Fatal(err)
			}
		}
		rate := float64(1<<30) / time.Since(start).Seconds() / 1e9
		if g == 0 {
			first = rate
		}
		last = rate
		b.Logf("GB %2d: %.2f GB/s, rss %d MB", g+1, rate, rssMB())
	}
	b.ReportMetric(first, "first-GB/s")
	b.ReportMetric(last, "last-GB/s")
	b.ReportMetric(float64(rssMB()), "rss-MB")
}

// rssMB reads the resident set size of this process.
func rssMB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return kb / 1024
		}
	}
	return -1
}

// BenchmarkRead reads one record back from the map through the log's read
// path (pin, the fault guard, the header and CRC check, the callback),
// which every reader of the log takes: topic readers, the view's apply,
// pulls and pushes.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{128, 8 << 10} {
		b.Run("size="+byteSize(size), func(b *testing.B) {
			s := benchStore(b, appendCase{size, 64 << 20, 16}, FlushAsync)
			defer s.Close()
			m := record.Message{Topic: "bench", Value: make([]byte, size-record.HeaderSize-len("bench"))}
			res, err := s.Publish(&m)
			if err != nil {
				b.Fatal(err)
			}
			var n int
			count := func(r record.Record) error { n += len(r); return nil }
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.seglog.Read(res.Pos, count); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTopicRead is the consumer path: a TopicReader over a topic
// already written, each Next an index lookup, the record's read from the
// map and its copy out (Delivery.Record is a private copy). With
// "tags=1of4" the topic's messages carry one of four tags round robin and
// the reader asks for one of them: the index's tag hash skips three
// entries in four without reading their records. A reader that reaches the
// end starts again from the earliest message.
func BenchmarkTopicRead(b *testing.B) {
	tags := []string{"t0", "t1", "t2", "t3"}
	for _, size := range []int{128, 8 << 10} {
		for _, filter := range []string{"all", "1of4"} {
			b.Run(fmt.Sprintf("size=%s/tags=%s", byteSize(size), filter), func(b *testing.B) {
				s := benchStore(b, appendCase{size, 64 << 20, 16}, FlushAsync)
				defer s.Close()
				records := (32 << 20) / size
				m := record.Message{Topic: "bench", Value: make([]byte, size-record.HeaderSize-len("bench")-len(tags[0]))}
				for i := 0; i < records; i++ {
					m.Tag = tags[i%len(tags)]
					if _, err := s.Publish(&m); err != nil {
						b.Fatal(err)
					}
				}
				var want []string
				if filter == "1of4" {
					want = tags[1:2]
				}
				done, cancel := context.WithCancel(context.Background())
				cancel() // Next does not wait: the topic is written already
				open := func() *TopicReader {
					r, err := s.NewTopicReader("bench", Start{From: FromEarliest}, want)
					if err != nil {
						b.Fatal(err)
					}
					return r
				}
				r := open()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					d, err := r.Next(done)
					if errors.Is(err, context.Canceled) {
						r.Close()
						r = open()
						d, err = r.Next(done)
					}
					if err != nil {
						b.Fatal(err)
					}
					if want != nil && string(d.Record.Tag()) != want[0] {
						b.Fatalf("offset %d: tag %q, want %q", d.Offset, d.Record.Tag(), want[0])
					}
				}
				b.StopTimer()
				r.Close()
			})
		}
	}
}

// BenchmarkCreateFile is what creating a segment's file costs on the file
// system under test: an O_CREAT|O_EXCL open and a close, one new name a
// time, in a fresh directory. make bench-satellite runs it beside the
// small-segment cells, which create a file every 15-16 records in both
// queues: on a journal-less ext4 a creation passes over every inode
// freed there in the last minutes, so its cost moves with what was
// deleted before (BENCHMARKS.md, issue 17).
func BenchmarkCreateFile(b *testing.B) {
	dir := testkit.BenchDir(b)
	for i := 0; i < b.N; i++ {
		f, err := os.OpenFile(filepath.Join(dir, fsys.NumberName(uint64(i))), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
