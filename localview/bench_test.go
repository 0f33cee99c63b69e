package localview_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/localview/viewtest"
)

// BenchmarkGetHot reads 1000 keys that stay in the CPU's caches: the cost
// of a Get itself (BenchmarkLocalGet in package daemon reads 1M keys at
// random from a daemon's view, which is mostly cache and TLB misses).
func BenchmarkGetHot(b *testing.B) {
	path := filepath.Join(b.TempDir(), "view")
	w, err := localview.Create(path, localview.WriterOptions{Gid: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	w.SetReady(true)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("sku-%012d", i)
		w.Put("prices", keys[i], "", make([]byte, 100), localview.Stamp{})
	}
	r, err := localview.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	cpu := viewtest.StartThreadCPU()
	n := 0
	for i := 0; b.Loop(); i++ {
		v, tag, _, err := r.GetInto(buf, "prices", keys[i%len(keys)])
		if err != nil || len(v) != 100 {
			b.Fatal(err)
		}
		buf = tag[:0]
		n++
	}
	cpu.Report(b, n)
}
