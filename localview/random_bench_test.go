package localview

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview/viewbench"
)

// BenchmarkGetRandom reads 1,000,000 keys (16 bytes, 100-byte values) at
// random, as BenchmarkLocalGet in package daemon does, beside what the
// memory alone costs in the same run: "memory" loads the key's slot and
// then three words of its record, 64 bytes apart, with no compare and no
// copy: the two dependent cache and TLB misses a Get cannot avoid;
// "one-miss" one load at a place the hash gives, in a region the arena's
// size: what a Get would cost at best with the records in the table.
// "one-at-a-time" makes each read wait for the one before (the next key
// depends on its result), which is a read's latency; "independent" lets
// the CPU overlap the misses of successive reads, which is a loop's
// throughput.
func BenchmarkGetRandom(b *testing.B) { forEachRandomView(b, benchGetRandom) }

// BenchmarkGetManyRandom reads the view of BenchmarkGetRandom n keys at a
// time with GetMany ("n=N", keys at random) and whole with Scan ("scan");
// cpu-ns/op is a key's. (A loop of its own: an operation is a call, of
// 10 to 1,000,000 keys, so it wants another -benchtime than the reads.)
func BenchmarkGetManyRandom(b *testing.B) { forEachRandomView(b, benchGetManyRandom) }

// forEachRandomView builds a view of 1,000,000 keys in each directory of
// viewbench.BenchDirs (the default temporary one, then a tmpfs and a
// huge-page tmpfs the environment names) and runs bench over it, with
// "/fs=NAME" to add to the names for a directory other than the default,
// and the keys in a random order, one's bytes after the other's: finding
// the next key costs a loop no miss of its own.
func forEachRandomView(b *testing.B, bench func(b *testing.B, w *Writer, r *Reader, suffix string, keys []string)) {
	const n = 1_000_000
	var all strings.Builder
	for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
		fmt.Fprintf(&all, "sku-%012d", i)
	}
	keys := make([]string, n)
	for i, s := 0, all.String(); i < n; i++ {
		keys[i] = s[16*i : 16*i+16]
	}
	for _, dir := range viewbench.BenchDirs() {
		suffix := ""
		if dir.Path != "" {
			suffix = "/fs=" + dir.Name
		}
		func() {
			tmp, err := os.MkdirTemp(dir.Path, "ccview")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(tmp)
			w, err := Create(filepath.Join(tmp, "view"), WriterOptions{GID: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			w.SetReady(true)
			w.Heartbeat(time.Now())
			if err := w.Reserve(n, int64(n)*122); err != nil {
				b.Fatal(err)
			}
			value := make([]byte, 100)
			for i := range n {
				w.Put("prices", fmt.Sprintf("sku-%012d", i), "", value, Stamp{})
			}
			r, err := Open(w.Path())
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			bench(b, w, r, suffix, keys)
		}()
	}
}

// benchGetRandom is BenchmarkGetRandom over the view r of keys.
func benchGetRandom(b *testing.B, w *Writer, r *Reader, suffix string, keys []string) {
	value := make([]byte, 100)
	cases := []struct {
		name string
		read func(key string) int
	}{
		{"memory", func(key string) int {
			s := load64(r.m, r.slots+8*(int(Hash("prices", key))&r.mask))
			off := int(uint32(s)) * 8
			return int(load64(r.m, off) + load64(r.m, off+64) + load64(r.m, min(off+128, r.end-8)))
		}},
		{"one-miss", func(key string) int {
			// One load at a place given by the hash, in a region as
			// large as the arena: the floor of a layout with the
			// records in the table (one miss and its TLB miss).
			span := (r.end - r.arena) / 64
			return int(load64(r.m, r.arena+64*(int(Hash("prices", key))%span)))
		}},
		{"get", func(key string) int {
			v, _, _, err := r.GetInto(value[:0], "prices", key)
			if err != nil {
				b.Fatal(err)
			}
			return len(v)
		}},
	}
	// keys=hot reads 10,000 of the keys (those first in the random
	// order: a random sample) at random, a set whose slots and records
	// fit the CPU's caches: a Get's cost without the memory's.
	sets := []struct {
		name string
		keys []string
	}{{"", keys}, {"/keys=hot", keys[:hotKeys]}}
	for _, set := range sets {
		for _, c := range cases {
			for _, chained := range []bool{true, false} {
				if set.name != "" && c.name == "one-miss" {
					continue // one miss of a random place: the same for any key set
				}
				name := c.name + set.name + map[bool]string{true: "/one-at-a-time", false: "/independent"}[chained] + suffix
				benchReads(b, name, w, set.keys, c.read, chained)
			}
		}
	}
}

// hotKeys is how many keys BenchmarkGetRandom's keys=hot reads.
const hotKeys = 10_000

// benchReads runs read over keys as one sub-benchmark of
// BenchmarkGetRandom: chained makes each read wait for the one before.
func benchReads(b *testing.B, name string, w *Writer, keys []string, read func(key string) int, chained bool) {
	n := len(keys)
	b.Run(name, func(b *testing.B) {
		cpu := testkit.StartThreadCPU()
		sum, i, z := 0, 0, 0
		for b.Loop() {
			x := read(keys[(i+z)%n])
			sum += x
			if chained {
				z = x >> 62 & 1 // 0, known only once the read is done
			}
			i++
		}
		cpu.Report(b, i)
		viewbench.ReportHugeShare(b, w.Path())
		if sum == 42 {
			b.Log(sum) // keep the loads
		}
	})
}

// benchGetManyRandom is BenchmarkGetManyRandom over the view r of keys.
func benchGetManyRandom(b *testing.B, _ *Writer, r *Reader, suffix string, keys []string) {
	n := len(keys)
	// A Scan of the topic's 1M keys: cpu-ns/op is a key's.
	b.Run("scan"+suffix, func(b *testing.B) {
		cpu := testkit.StartThreadCPU()
		seen := 0
		for b.Loop() {
			if err := r.Scan("prices", func(string, []byte, []byte, Stamp) bool { seen++; return true }); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b, seen)
	})
	// GetMany of n keys at random at a time: cpu-ns/op is a key's.
	for _, many := range []int{10, 100} {
		b.Run(fmt.Sprintf("n=%d%s", many, suffix), func(b *testing.B) {
			topics := []string{"prices"}
			var items []Item
			buf := make([]byte, 0, 100*many)
			cpu := testkit.StartThreadCPU()
			calls := 0
			for b.Loop() {
				at := calls * many % (n - many)
				var err error
				if items, buf, err = r.GetMany(topics, keys[at:at+many], items, buf); err != nil || !items[many-1].Found {
					b.Fatal(err)
				}
				calls++
			}
			cpu.Report(b, calls*many)
		})
	}
}
