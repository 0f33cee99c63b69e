package view

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"unsafe"

	"github.com/cachecast/cachecast/store/internal/btree"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// heapView keeps BenchmarkViewHeap's view reachable until the test binary
// writes its -memprofile, so that the profile's inuse_space shows where
// the view's bytes are, by the function that allocated them.
var heapView *View

// BenchmarkViewHeap is the daemon's heap view as issue 34's memory
// benchmark (test/bench-memory.sh) loads it: 1M keys prices:sku-NNNNNNN
// of 100-byte values, one Apply each, as a Redis SET publishes them, the
// values on the heap or in a shared view file (values=file, as
// --view-file-values keeps them). It reports the live heap bytes a key
// (runtime.ReadMemStats after a GC), their parts (heapParts), what the
// runtime holds in use for them once it handed every free page back
// (used: live objects, the free room in their spans, metadata; INFO's
// used_memory of a daemon at rest), the process's CPU time a key for
// the load (the collector's included) and what a release after the load
// costs (gctune.Quiet's debug.FreeOSMemory). The
// heap case runs last, so that its view is the one the profile holds:
//
//	go test -run '^$' -bench ViewHeap -benchtime 1x -memprofile mem.out -memprofilerate 1 ./store/view/
//	go tool pprof -sample_index=inuse_space -top view.test mem.out
func BenchmarkViewHeap(b *testing.B) {
	const keys = 1_000_000
	for _, where := range []string{"file", "heap"} {
		b.Run("values="+where, func(b *testing.B) {
			for b.Loop() {
				heapView = nil
				var before, after runtime.MemStats
				used0 := usedAfterRelease()
				runtime.GC()
				runtime.ReadMemStats(&before)
				v := New()
				if where == "file" {
					followFile(b, v)
				}
				cpu := testkit.ProcessCPU()
				loadSKUs(v, keys, bytes.Repeat([]byte("v"), 100))
				b.ReportMetric(float64(testkit.ProcessCPU()-cpu)/keys, "load-cpu-ns/key")
				// What gctune.Quiet's release costs the daemon once a
				// load went quiet: a collection, then every free page
				// handed back.
				cpu = testkit.ProcessCPU()
				debug.FreeOSMemory()
				b.ReportMetric(float64(testkit.ProcessCPU()-cpu)/1e6, "release-cpu-ms")
				runtime.GC()
				runtime.ReadMemStats(&after)
				heapView = v
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-B/key")
				b.ReportMetric(float64(usedAfterRelease()-used0)/keys, "used-B/key")
				for name, n := range heapParts(v) {
					b.ReportMetric(float64(n)/keys, name+"-B/key")
				}
			}
		})
	}
}

// heapParts is the live heap bytes of v's parts, by name: its items
// (item: 48 or 64 bytes each, a timedEntry 80), their bodies (body:
// key | tag | value, or key | tag in the file, rounded up to the size
// class), the key index (keyindex: slots, tables and directory) and the
// B-tree (btree: what a GC frees when the view's B-trees are replaced by
// empty ones; the view is of no use after). Timelines, marks and counters are not
// counted: the loads measured have none.
func heapParts(v *View) map[string]uint64 {
	classes := map[int]int{}
	class := func(n int) uint64 {
		if _, ok := classes[n]; !ok {
			classes[n] = sizeClass(n)
		}
		return uint64(classes[n])
	}
	parts := map[string]uint64{}
	for _, tv := range v.topics {
		for it := range tv.byKey.all() {
			switch {
			case it.timed:
				parts["item"] += class(80)
			case it.flags&itemWide != 0:
				parts["item"] += 64
			default:
				parts["item"] += 48
			}
			n := int(it.klen) + int(it.tlen)
			if !it.inFile() {
				n += int(it.vlen)
			}
			parts["body"] += class(n)
		}
		x := &tv.byKey
		parts["keyindex"] += class(8 * cap(x.dir))
		for i := 0; i < len(x.dir); i += 1 << (x.depth - x.dir[i].depth) {
			t := x.dir[i]
			parts["keyindex"] += class(int(unsafe.Sizeof(*t))) + class(cap(t.tags)) + class(8*cap(t.items))
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, tv := range v.topics {
		tv.order = btree.NewG(btreeDegree, itemLess)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	parts["btree"] = before.HeapAlloc - after.HeapAlloc
	return parts
}

// loadSKUs applies keys records prices:sku-NNNNNNN of value to v, one
// Apply each, as a Redis SET publishes them.
func loadSKUs(v *View, keys int, value []byte) { loadSKUsExpiring(v, keys, value, 0, 0) }

// loadSKUsExpiring is loadSKUs of values expiring at expires (0: none),
// stamped after seq0 (a load over another).
func loadSKUsExpiring(v *View, keys int, value []byte, expires int64, seq0 uint64) {
	buf := make([]byte, 256)
	for i := range keys {
		m := &record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%07d", i), Value: value, ExpiresAt: expires}
		st := record.Stamp{Origin: 1, Seq: seq0 + uint64(i+1), HLC: seq0 + uint64(i+1)}
		n := record.Encode(buf, m, st)
		v.Apply(record.Record(buf[:n]))
	}
}

// sizeClass is the runtime's allocation size for n bytes, as measured:
// the heap growth of many allocations of n bytes (up to 16 MiB of them).
func sizeClass(n int) int {
	count := min(1<<14, 1<<24/max(n, 1))
	var before, after runtime.MemStats
	keep := make([][]byte, count)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = make([]byte, n)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return int((after.HeapAlloc - before.HeapAlloc + uint64(count)/2) / uint64(count))
}

// BenchmarkOrderedRefs is the heap an ordered index of 8-byte references
// would keep a key (issue 34's direction: the shared view file as the
// view, the heap keeping only what the file cannot do): a B-tree of the
// view's degree over 1M uint64s, inserted in order (as
// BenchmarkViewHeap's keys arrive) and at random.
func BenchmarkOrderedRefs(b *testing.B) {
	const keys = 1_000_000
	for _, order := range []string{"in-order", "random"} {
		b.Run(order, func(b *testing.B) {
			refs := make([]uint64, keys)
			for i := range refs {
				refs[i] = uint64(i)
			}
			if order == "random" {
				rand.New(rand.NewPCG(1, 2)).Shuffle(keys, func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
			}
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				t := btree.NewG(btreeDegree, func(a, b uint64) bool { return a < b })
				for _, r := range refs {
					t.ReplaceOrInsert(r)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(t)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "heap-B/key")
			}
		})
	}
}

// BenchmarkSnapshotTree is the B-tree's heap a key (heapParts) of a view
// of 1M keys applied at random, then of a new view that took it from its
// snapshot (a restart, a fresh node's bootstrap), whose entries come in
// key order.
//
//	go test -run '^$' -bench SnapshotTree -benchtime 1x ./store/view/
func BenchmarkSnapshotTree(b *testing.B) {
	const keys = 1_000_000
	for b.Loop() {
		v := New()
		buf := make([]byte, 256)
		for j, i := range rand.New(rand.NewPCG(1, 2)).Perm(keys) {
			m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: []byte("19.99 EUR/unit  ")}
			n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(j + 1), HLC: uint64(j + 1)})
			v.Apply(record.Record(buf[:n]))
		}
		path := filepath.Join(b.TempDir(), "view.snap")
		if err := WriteSnapshot(path, v, 1, map[uint64]uint64{1: keys}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(heapParts(v)["btree"])/keys, "random-btree-B/key")
		runtime.KeepAlive(v) // or heapParts's second GC frees all of v
		w := applySnapshotFile(b, path, keys)
		b.ReportMetric(float64(heapParts(w)["btree"])/keys, "snapshot-btree-B/key")
		runtime.KeepAlive(w)
	}
}

// usedAfterRelease is the memory the runtime holds in use once it handed
// every free page back (INFO's used_memory at rest, the daemon's
// gctune.Quiet): the heap's live objects, the free room in its spans
// and the runtime's own metadata.
func usedAfterRelease() uint64 {
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64() - s[2].Value.Uint64()
}
