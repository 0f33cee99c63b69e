package localview

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview/viewbench"
)

// floorFileSize is the size of the daemon's view of 1M keys (16-byte
// keys, 100-byte values): 184 MiB, what BenchmarkLocalGet's file maps.
const floorFileSize = 92 * hugePage

// BenchmarkMemoryFloor is what one random memory access costs on this
// machine, and so what a Get can cost at best for each number of
// dependent accesses it makes: a pointer chase through entries=N 8-byte
// words, each on a cache line of its own drawn at random in a file of the
// view's size (mapped as a reader maps a view: MAP_SHARED, MADV_HUGEPAGE),
// linked in one random cycle so that every load waits for the one before
// and the hardware cannot guess the next. ns/op is one access. The file
// is in each directory of viewbench.BenchDirs (fs=temp, tmpfs, huge), and
// "anon" is the same in the process's own memory (anonymous, huge pages
// asked for): pmd-% says how much of it huge pages back.
//
// "timed" times each access by itself with two clock reads, as the
// benchmarks' p50 and p99 are taken; "clock" times nothing, the cost the
// clock adds to every such figure (reported as p50 and p99 as well).
//
// "region=N" chains every cache line of the first N MiB of the mapping
// instead: the size of the largest working set that the CPU's caches
// hold, past which an access costs as much as one over the whole file.
func BenchmarkMemoryFloor(b *testing.B) {
	dirs := append(viewbench.BenchDirs(), viewbench.Dir{Name: "anon"})
	for _, dir := range dirs {
		m, path, done := floorMapping(b, dir)
		for _, entries := range []int{1_000_000, 10_000} {
			start := floorChain(m, entries, rand.New(rand.NewPCG(uint64(entries), 7)))
			name := fmt.Sprintf("entries=%d/fs=%s", entries, dir.Name)
			b.Run(name, func(b *testing.B) { benchChase(b, m, start, path) })
			b.Run(name+"/timed", func(b *testing.B) {
				p := start
				lat := make([]time.Duration, 0, 1<<20)
				for b.Loop() {
					t0 := time.Now()
					p = int(*word(m, p))
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(t0))
					}
				}
				reportLatencies(b, lat)
				if p == -1 {
					b.Log(p)
				}
			})
		}
		for _, mib := range []int{1, 2, 4, 8, 32} {
			region := m[:mib<<20]
			start := floorChain(region, len(region)/64, rand.New(rand.NewPCG(uint64(mib), 8)))
			b.Run(fmt.Sprintf("region=%dMiB/fs=%s", mib, dir.Name), func(b *testing.B) { benchChase(b, m, start, path) })
		}
		done()
	}
	b.Run("clock", func(b *testing.B) {
		lat := make([]time.Duration, 0, 1<<20)
		for b.Loop() {
			t0 := time.Now()
			if len(lat) < cap(lat) {
				lat = append(lat, time.Since(t0))
			}
		}
		reportLatencies(b, lat)
	})
}

// benchChase follows the chain of m from start: ns/op and cpu-ns/op are
// one access.
func benchChase(b *testing.B, m []byte, start int, path string) {
	p := start
	cpu := testkit.StartThreadCPU()
	n := 0
	for b.Loop() {
		p = int(*word(m, p))
		n++
	}
	cpu.Report(b, n)
	reportShare(b, path)
	if p == -1 {
		b.Log(p) // keep the loads
	}
}

// reportShare is viewbench.ReportHugeShare for a file, and for the
// anonymous mapping ("" path) the share of the process's anonymous huge
// pages is not told apart: nothing is reported.
func reportShare(b *testing.B, path string) {
	if path != "" {
		viewbench.ReportHugeShare(b, path)
	}
}

// reportLatencies reports the p50 and p99 of lat.
func reportLatencies(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
}

// floorMapping maps floorFileSize bytes: a file in dir (anon: anonymous
// memory), written through once so that every page is there.
func floorMapping(b *testing.B, dir viewbench.Dir) (m []byte, path string, done func()) {
	if dir.Name == "anon" {
		m, err := unix.Mmap(-1, 0, floorFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			b.Fatal(err)
		}
		unix.Madvise(m, unix.MADV_HUGEPAGE)
		return m, "", func() { unix.Munmap(m) }
	}
	tmp, err := os.MkdirTemp(dir.Path, "ccfloor")
	if err != nil {
		b.Fatal(err)
	}
	path = filepath.Join(tmp, "floor")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, floorFileSize); err != nil {
		b.Fatal(err)
	}
	m, err = mapFile(int(f.Fd()), floorFileSize, unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		b.Fatal(err)
	}
	return m, path, func() { unix.Munmap(m); os.RemoveAll(tmp) }
}

// floorChain puts entries words on distinct cache lines of m drawn at
// random, each holding the offset of the next in one random cycle
// (Sattolo's), and returns the first's offset.
func floorChain(m []byte, entries int, rng *rand.Rand) int {
	clear(m) // every page there (the first time), nothing left of another chain
	lines := rng.Perm(len(m) / 64)[:entries]
	next := make([]int, entries) // a cycle through all entries
	for i := range next {
		next[i] = i
	}
	for i := entries - 1; i > 0; i-- {
		j := rng.IntN(i)
		next[i], next[j] = next[j], next[i]
	}
	for i, n := range next {
		*word(m, 64*lines[i]) = uint64(64 * lines[n])
	}
	return 64 * lines[0]
}
