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
// (rounded up to its size class). The rest is the key index and the
// B-tree. value=0 is the same view with empty values: what the heap would
// keep if the values lived elsewhere (in the shared view file, issue 34's
// direction), measured instead of estimated. It runs first, so that the
// 100-byte view is the one the profile holds:
//
//	go test -run '^$' -bench ViewHeap -benchtime 1x -memprofile mem.out -memprofilerate 1 ./store/view/
//	go tool pprof -sample_index=inuse_space -top view.test mem.out
func BenchmarkViewHeap(b *testing.B) {
	const keys = 1_000_000
	for _, size := range []int{0, 100} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			value := []byte(strings.Repeat("v", size))
			for b.Loop() {
				heapView = nil
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				v := New()
				loadSKUs(v, keys, value)
				runtime.GC()
				runtime.ReadMemStats(&after)
				heapView = v
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-B/key")
			}
			b.ReportMetric(float64(unsafe.Sizeof(viewItem{})), "item-B/key")
			b.ReportMetric(float64(sizeClass(len("sku-0000000")+size)), "data-B/key")
		})
	}
}

// loadSKUs applies keys records prices:sku-NNNNNNN of value to v, one
// Apply each, as a Redis SET publishes them.
func loadSKUs(v *View, keys int, value []byte) {
	buf := make([]byte, 256)
	for i := range keys {
		m := &record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%07d", i), Value: value}
		n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: uint64(i + 1)})
		v.Apply(record.Record(buf[:n]))
	}
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
