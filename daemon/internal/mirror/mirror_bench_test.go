package mirror

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// BenchmarkViewMirror1M is the shared view's mirror alone (no store): the
// changes of publishes of 100 random keys among 1,000,000 (16-byte keys,
// 100-byte values, in place), given to the mirror as the store's follower
// gets them, each publish one batch of the file. cpu-ns/op is the
// thread's CPU time a change (the machine is shared: the wall time counts
// other processes), changes/s the rate one core sustains.
func BenchmarkViewMirror1M(b *testing.B) {
	const keys, batch = 1_000_000, 100
	vm, err := Open(filepath.Join(b.TempDir(), "view"), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close()
	if err := vm.w.Reserve(keys, keys*(16+100+6)); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 100)
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("sku-%012d", i) // 16 bytes
		if err := vm.w.Put("prices", names[i], "", value, localview.Stamp{}); err != nil {
			b.Fatal(err)
		}
	}
	vm.w.SetReady(true)
	vm.direct = true
	group := make([]view.Change, batch)
	rng := rand.New(rand.NewPCG(3, 4))
	b.ReportAllocs()
	cpu := testkit.StartThreadCPU()
	n := 0
	for i := 0; b.Loop(); i++ {
		for j := range group {
			group[j] = view.Change{Topic: "prices", Key: names[rng.IntN(keys)]}
			group[j].Value = value
			group[j].Stamp = record.Stamp{HLC: uint64(i), Origin: 1, Seq: uint64(n + j)}
		}
		for _, c := range group {
			vm.enqueue(c)
		}
		vm.end()
		n += batch
	}
	cpu.Report(b, n)
	if vm.pending.n != 0 {
		b.Fatalf("%d changes queued: the benchmark meant the direct path", vm.pending.n)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "changes/s")
}
