package store

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/internal/fsys"
)

// The probes write probeBlock-byte blocks to fresh files of probeFileSize
// bytes: an 8 KB append with default segments, without the store.
const probeBlock, probeFileSize = 8 << 10, 64 << 20

// BenchmarkMapCopyProbe is the ceiling BenchmarkAppend's default-segment
// 8 KB case is held against (issue 17): it copies 8 KB blocks into fresh,
// fallocated 64 MiB files mapped shared on the same file system, and
// another goroutine msyncs what was written every 100 ms, as the async
// flusher does; a full file's map is handed to it to sync the rest and
// unmap. Nothing else: no record, no CRC, no index, no recycling.
func BenchmarkMapCopyProbe(b *testing.B) {
	b.Run("size=8KB/segment=64MB/mapped=16", func(b *testing.B) {
		dir := testkit.BenchDir(b)
		runProbe(b, probeTarget[[]byte]{
			open: func(n int) []byte {
				f := probeFile(b, dir, n, true)
				defer f.Close()
				d, err := fsys.Map(f, probeFileSize)
				if err != nil {
					b.Fatal(err)
				}
				return d
			},
			write: func(d, block []byte, off int) { copy(d[off:], block) },
			sync:  func(d []byte, from, to int64) error { return fsys.SyncRange(d, int(from), int(to)) },
			close: fsys.Unmap,
		})
	})
}

// BenchmarkPwriteProbe is BenchmarkMapCopyProbe with pwrite for the copy
// (issue 37's pwrite question, measured, not built): 8 KB blocks appended
// with pwrite to fresh 64 MiB files, fallocated first or left sparse, and
// what was written written back every 100 ms (fsys.SyncFileRange: the map
// probe's msync); a full file is synced to its end and closed. A write of
// whole pages fills them in the page cache without the zero-fill a mapped
// page's first touch pays, and costs a system call a record.
func BenchmarkPwriteProbe(b *testing.B) {
	for _, fallocated := range []bool{true, false} {
		name := "size=8KB/segment=64MB/fallocated"
		if !fallocated {
			name = "size=8KB/segment=64MB/sparse"
		}
		b.Run(name, func(b *testing.B) {
			dir := testkit.BenchDir(b)
			runProbe(b, probeTarget[*os.File]{
				open: func(n int) *os.File { return probeFile(b, dir, n, fallocated) },
				write: func(f *os.File, block []byte, off int) {
					if _, err := f.WriteAt(block, int64(off)); err != nil {
						b.Fatal(err)
					}
				},
				sync:  func(f *os.File, from, to int64) error { return fsys.SyncFileRange(f, from, to-from) },
				close: (*os.File).Close,
			})
		})
	}
}

// probeTarget is how a probe writes a file: as a map, or with pwrite.
type probeTarget[T any] struct {
	open  func(n int) T                    // the n-th file, fresh
	write func(t T, block []byte, off int) // block at off
	sync  func(t T, from, to int64) error  // writes [from, to) back and waits
	close func(t T) error
}

// runProbe appends b.N blocks of probeBlock bytes to files of
// probeFileSize bytes, one after the other (p says how), and another
// goroutine writes back what was written every 100 ms, as the async
// flusher does; a full file is handed to it to sync the rest and close,
// so that only whole pages it has synced are dropped.
func runProbe[T any](b *testing.B, p probeTarget[T]) {
	block := make([]byte, probeBlock)
	for i := range block {
		block[i] = byte(i)
	}
	var (
		mu      sync.Mutex
		cur     T     // the file written now, under mu
		synced  int64 // how much of cur is synced, under mu
		full    []T   // files written to the end, to sync and close, under mu
		written atomic.Int64
	)
	flushOnce := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, t := range full {
			if err := p.sync(t, 0, probeFileSize); err != nil {
				b.Error(err)
			}
			if err := p.close(t); err != nil {
				b.Error(err)
			}
		}
		full = full[:0]
		if w := written.Load(); w > synced {
			if err := p.sync(cur, synced, w); err != nil {
				b.Error(err)
			}
			synced = w
		}
	}
	b.SetBytes(probeBlock)
	b.ReportAllocs()
	b.ResetTimer()
	t, off, files := p.open(0), 0, 1
	cur = t // before the flusher starts
	stopFlusher := probeFlusher(flushOnce)
	for i := 0; i < b.N; i++ {
		if off+probeBlock > probeFileSize {
			next := p.open(files)
			files++
			mu.Lock()
			full = append(full, t)
			cur, synced = next, 0
			written.Store(0)
			mu.Unlock()
			t, off = next, 0
		}
		p.write(t, block, off)
		off += probeBlock
		written.Store(int64(off))
	}
	b.StopTimer()
	stopFlusher()
	flushOnce()
	if err := p.close(cur); err != nil {
		b.Error(err)
	}
}

// probeFile makes the n-th file of a probe in dir, fallocated or sparse.
func probeFile(b *testing.B, dir string, n int, fallocated bool) *os.File {
	f, err := os.OpenFile(filepath.Join(dir, fsys.NumberName(uint64(n)*probeFileSize)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		b.Fatal(err)
	}
	if fallocated {
		if err := fsys.Allocate(f, probeFileSize); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// probeFlusher runs flush every 100 ms (the async flusher's default
// cadence) on a goroutine of its own until the stop it returns is
// called, which waits for it: the probes' writeback.
func probeFlusher(flush func()) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				flush()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
