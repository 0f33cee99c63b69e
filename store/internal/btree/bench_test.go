package btree

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	google "github.com/google/btree"
)

// entry stands for the view's item: the tree holds pointers and compares
// the keys they point at (a miss each, as in the view).
type entry struct{ key string }

func entryLess(a, b *entry) bool { return a.key < b.key }

// tree is what the benchmarks ask of a B-tree, so that the fork and the
// library it came from run the same code in one binary.
type tree interface {
	ReplaceOrInsert(*entry) (*entry, bool)
	Delete(*entry) (*entry, bool)
	Get(*entry) (*entry, bool)
	Len() int
	ascendFrom(pivot *entry, fn func(*entry) bool)
	clone() tree
}

type fork struct{ *BTreeG[*entry] }

func (t fork) ascendFrom(p *entry, fn func(*entry) bool) { t.AscendGreaterOrEqual(p, fn) }
func (t fork) clone() tree                               { return fork{t.Clone()} }

type library struct{ *google.BTreeG[*entry] }

func (t library) ascendFrom(p *entry, fn func(*entry) bool) { t.AscendGreaterOrEqual(p, fn) }
func (t library) clone() tree                               { return library{t.Clone()} }

var impls = []struct {
	name string
	make func() tree
}{
	{"fork", func() tree { return fork{NewG(32, entryLess)} }},
	{"google", func() tree { return library{google.NewG(32, entryLess)} }},
}

// benchKeys is n entries sku-NNNNNNN in ascending order and the same
// entries shuffled.
func benchKeys(n int) (asc, shuffled []*entry) {
	asc = make([]*entry, n)
	for i := range asc {
		asc[i] = &entry{fmt.Sprintf("sku-%07d", i)}
	}
	shuffled = append([]*entry(nil), asc...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	return asc, shuffled
}

// BenchmarkLoad fills a tree of degree 32 (the view's) with 1M entries in
// ascending or random order, the fork beside github.com/google/btree
// v1.1.3 in one run, and reports the heap the tree keeps a key (after a
// GC; the entries themselves not counted) and the time an insert.
//
//	go test -run '^$' -bench Load -benchtime 3x ./store/internal/btree/
func BenchmarkLoad(b *testing.B) {
	const n = 1_000_000
	asc, shuffled := benchKeys(n)
	for _, order := range []string{"ascending", "random"} {
		keys := asc
		if order == "random" {
			keys = shuffled
		}
		for _, impl := range impls {
			b.Run(order+"/"+impl.name, func(b *testing.B) {
				var heap uint64
				for b.Loop() {
					var before, after runtime.MemStats
					b.StopTimer()
					runtime.GC()
					runtime.ReadMemStats(&before)
					b.StartTimer()
					t := impl.make()
					for _, k := range keys {
						t.ReplaceOrInsert(k)
					}
					b.StopTimer()
					runtime.GC()
					runtime.ReadMemStats(&after)
					runtime.KeepAlive(t)
					heap = after.HeapAlloc - before.HeapAlloc
					b.StartTimer()
				}
				b.ReportMetric(float64(heap)/n, "heap-B/key")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/insert")
			})
		}
	}
}

// BenchmarkOps runs one operation at a time on a tree of 1M entries
// loaded in ascending order (the fork's full nodes, the library's half
// full ones), the fork beside github.com/google/btree in one run: a Get
// of a random key, a listing of 10 keys from a random one, a Delete and
// an insert back of a random key, and a replace of a random key in the
// tree just cloned (the copy-on-write path of a write after a freeze).
//
//	go test -run '^$' -bench Ops ./store/internal/btree/
func BenchmarkOps(b *testing.B) {
	const n = 1_000_000
	asc, shuffled := benchKeys(n)
	for _, impl := range impls {
		t := impl.make()
		for _, k := range asc {
			t.ReplaceOrInsert(k)
		}
		b.Run("get/"+impl.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := t.Get(shuffled[i%n]); !ok {
					b.Fatal("missing")
				}
				i++
			}
		})
		b.Run("list10/"+impl.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				c := 0
				t.ascendFrom(shuffled[i%n], func(*entry) bool { c++; return c < 10 })
				i++
			}
		})
		b.Run("delete-insert/"+impl.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				k := shuffled[i%n]
				t.Delete(k)
				t.ReplaceOrInsert(k)
				i++
			}
		})
		b.Run("clone-replace/"+impl.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if i%1000 == 0 {
					t = t.clone()
				}
				t.ReplaceOrInsert(shuffled[i%n])
				i++
			}
		})
		if t.Len() != n {
			b.Fatalf("Len %d, want %d", t.Len(), n)
		}
	}
}
