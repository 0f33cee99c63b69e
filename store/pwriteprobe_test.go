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

// BenchmarkPwriteProbe is BenchmarkMapCopyProbe with pwrite for the copy
// (issue 37's pwrite question, measured, not built): 8 KB blocks appended
// with pwrite to fresh 64 MiB files, fallocated first or left sparse, on
// the file system under test, and another goroutine writing back what was
// written every 100 ms (fsys.SyncFileRange: the map probe's msync); a
// full file is handed to it to sync the rest and close. A write of whole
// pages fills them in the page cache without the zero-fill a mapped
// page's first touch pays, and costs a system call a record.
func BenchmarkPwriteProbe(b *testing.B) {
	for _, fallocated := range []bool{true, false} {
		name := "size=8KB/segment=64MB/fallocated"
		if !fallocated {
			name = "size=8KB/segment=64MB/sparse"
		}
		b.Run(name, func(b *testing.B) { pwriteProbe(b, fallocated) })
	}
}

// pwriteProbe is one case of BenchmarkPwriteProbe.
func pwriteProbe(b *testing.B, fallocated bool) {
	const size, fileSize = 8 << 10, 64 << 20
	dir := testkit.BenchDir(b)
	block := make([]byte, size)
	for i := range block {
		block[i] = byte(i)
	}
	var (
		mu      sync.Mutex
		cur     *os.File   // the file written now, under mu
		synced  int64      // how much of cur is synced, under mu
		full    []*os.File // files written to the end, to sync and close, under mu
		written atomic.Int64
	)
	flushOnce := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range full {
			if err := fsys.SyncFileRange(f, 0, fileSize); err != nil {
				b.Error(err)
			}
			f.Close()
		}
		full = full[:0]
		if w := written.Load(); cur != nil && w > synced {
			if err := fsys.SyncFileRange(cur, synced, w-synced); err != nil {
				b.Error(err)
			}
			synced = w
		}
	}
	stopFlusher := probeFlusher(flushOnce)
	newFile := func(n int) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, fsys.NumberName(uint64(n)*fileSize)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			b.Fatal(err)
		}
		if fallocated {
			if err := fsys.Allocate(f, fileSize); err != nil {
				b.Fatal(err)
			}
		}
		return f
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	files := 1
	f, off := newFile(0), 0
	mu.Lock()
	cur = f
	mu.Unlock()
	for i := 0; i < b.N; i++ {
		if off+size > fileSize {
			next := newFile(files)
			files++
			mu.Lock()
			full = append(full, f)
			cur, synced = next, 0
			written.Store(0)
			mu.Unlock()
			f, off = next, 0
		}
		if _, err := f.WriteAt(block, int64(off)); err != nil {
			b.Fatal(err)
		}
		off += size
		written.Store(int64(off))
	}
	b.StopTimer()
	stopFlusher()
	flushOnce()
	mu.Lock()
	cur.Close()
	mu.Unlock()
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
