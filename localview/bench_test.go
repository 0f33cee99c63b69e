package localview_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
)

// BenchmarkGetHot reads 1000 keys that stay in the CPU's caches: the cost
// of a Get itself (BenchmarkLocalGet in package daemon reads 1M keys at
// random from a daemon's view, which is mostly cache and TLB misses).
func BenchmarkGetHot(b *testing.B) {
	path := filepath.Join(b.TempDir(), "view")
	w, err := localview.Create(path, localview.WriterOptions{GID: -1})
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
	// The writer beats every 50ms, as the daemon's mirror does (a reader
	// of a view whose heartbeat stopped looks at the path now and then).
	w.Heartbeat(time.Now())
	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				w.Heartbeat(time.Now())
			}
		}
	}()
	defer func() { close(stop); <-beating }()
	r, err := localview.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	cpu := testkit.StartThreadCPU()
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

// BenchmarkWriterPut is the writer's cost a change: a 100-byte value
// rewritten in place, over 10,000 keys (in cache, as a Redis benchmark's
// -r 10000) and over 1,000,000 (a miss on the slot and on the record).
func BenchmarkWriterPut(b *testing.B) {
	for _, keys := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "view")
			w, err := localview.Create(path, localview.WriterOptions{GID: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			w.SetReady(true)
			if err := w.Reserve(keys, int64(keys)*122); err != nil {
				b.Fatal(err)
			}
			names := make([]string, keys)
			value := make([]byte, 100)
			for i := range names {
				names[i] = fmt.Sprintf("sku-%012d", i)
				w.Put("prices", names[i], "", value, localview.Stamp{})
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(keys)
			b.ReportAllocs()
			cpu := testkit.StartThreadCPU()
			n := 0
			for i := 0; b.Loop(); i++ {
				value[0] = byte(i)
				if err := w.Put("prices", names[order[i%keys]], "", value, localview.Stamp{HLC: uint64(i), Origin: 1, Seq: uint64(i)}); err != nil {
					b.Fatal(err)
				}
				n++
			}
			cpu.Report(b, n)
		})
	}
}
