package view

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/cachecast/cachecast/store/record"
)

// heapView keeps BenchmarkViewHeap's view reachable until the test binary
// writes its -memprofile, so that the profile's inuse_space shows where
// the view's bytes are, by the function that allocated them.
var heapView *View

// BenchmarkViewHeap is the daemon's heap view as issue 34's memory
// benchmark (test/bench-memory.sh) loads it: 1M keys prices:sku-NNNNNNN
// of 100-byte values, one Apply each, as a Redis SET publishes them. It
// reports the heap bytes per key (runtime.ReadMemStats, after a GC) and
// what the fixed parts cost: the item, the key and value's allocation
// (rounded up to its size class). The rest is the map and the B-tree:
//
//	go test -run '^$' -bench ViewHeap -benchtime 1x -memprofile mem.out -memprofilerate 1 ./store/view/
//	go tool pprof -sample_index=inuse_space -top view.test mem.out
func BenchmarkViewHeap(b *testing.B) {
	const keys, size = 1_000_000, 100
	value := []byte(strings.Repeat("v", size))
	buf := make([]byte, 256)
	for b.Loop() {
		heapView = nil
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		v := New()
		for i := range keys {
			m := &record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%07d", i), Value: value}
			n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: uint64(i + 1)})
			v.Apply(record.Record(buf[:n]))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heapView = v
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-B/key")
	}
	data := sizeClass(len("sku-0000000") + size)
	b.ReportMetric(float64(unsafe.Sizeof(viewItem{})), "item-B/key")
	b.ReportMetric(float64(data), "data-B/key")
}

// sizeClass is the runtime's allocation size for n bytes, as measured:
// the heap growth of many allocations of n bytes.
func sizeClass(n int) int {
	const count = 1 << 14
	var before, after runtime.MemStats
	keep := make([][]byte, count)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = make([]byte, n)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return int((after.HeapAlloc - before.HeapAlloc + count/2) / count)
}
