package index

import (
	"os"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestChunksLeaveTheResidentSet: while the writer writes, the full chunks
// behind the one before the writer's leave the process's resident set
// (their maps stay), the one before the writer's and the writer's stay; a
// chunk a reader mapped again stays while writes flow; at rest every
// chunk goes, the writer's and those made ahead too; every entry reads
// back the same from the page cache, a sync leaves no written page
// dirty, and the entries read back after a reopen.
func TestChunksLeaveTheResidentSet(t *testing.T) {
	const chunk = 1024 // entries of 16 bytes: 4 pages a chunk
	dir := t.TempDir()
	p := newPreparer(prepLater)
	defer p.stop()
	cfg := arrayConfig{entrySize: 16, chunkEntries: chunk, maxMapped: 16, prep: p}
	a, err := openArray(dir, 0, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.close() }()
	resident := func(c *arrayChunk) int {
		a.mu.RLock()
		defer a.mu.RUnlock()
		return testkit.Resident(t, c.data)
	}
	chunks := func() []*arrayChunk {
		a.mu.RLock()
		defer a.mu.RUnlock()
		return append([]*arrayChunk(nil), a.chunks...)
	}
	released := func(cs ...*arrayChunk) func() bool {
		return func() bool {
			for _, c := range cs {
				if resident(c) != 0 {
					return false
				}
			}
			return true
		}
	}

	// Six full chunks and half of a seventh: the first five go.
	n := uint64(6*chunk + chunk/2)
	appendEntries(t, a, 0, n)
	cs := chunks()
	if len(cs) != 7 {
		t.Fatalf("%d chunks, want 7", len(cs))
	}
	testkit.Eventually(t, 10*time.Second, "the chunks behind the writer's released", released(cs[:5]...))
	if resident(cs[5]) == 0 || resident(cs[6]) == 0 {
		t.Fatalf("resident pages: %d of the chunk before the writer's, %d of the writer's; want both mapped", resident(cs[5]), resident(cs[6]))
	}
	checkArray(t, a, 0, n)
	if resident(cs[0]) == 0 {
		t.Fatal("reading the first chunk mapped none of its pages")
	}

	// The writer crosses into the eighth chunk: the sixth goes, the
	// first, which the reader mapped again, stays.
	appendEntries(t, a, n, 7*chunk+2)
	n = 7*chunk + 2
	cs = chunks()
	testkit.Eventually(t, 10*time.Second, "the sixth chunk released", released(cs[5]))
	if resident(cs[0]) == 0 {
		t.Fatal("the chunk a reader mapped again was released while the writer writes")
	}

	// At rest, everything goes.
	next := preparedAhead(t, a)
	if resident(next[0]) == 0 {
		t.Fatal("the chunk made ahead is not faulted in")
	}
	a.releaseAtRest()
	if !released(append(cs, next...)...)() {
		for i, c := range append(cs, next...) {
			t.Logf("chunk %d (entry %d): %d pages resident", i, c.base, resident(c))
		}
		t.Fatal("pages left resident at rest")
	}
	checkArray(t, a, 0, n)

	if err := a.sync(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		f, err := os.Open(a.chunkPath(c.base))
		if err != nil {
			t.Fatal(err)
		}
		dirty, ok := testkit.DirtyPages(t, f, 0, int64(min(n, c.end())-c.base)*16)
		f.Close()
		if ok && dirty != 0 {
			t.Errorf("chunk at entry %d: %d pages dirty after the sync", c.base, dirty)
		}
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	if a, err = openArray(dir, 0, cfg, nil); err != nil {
		t.Fatal(err)
	}
	if a.len() != n {
		t.Fatalf("reopened with %d entries, want %d", a.len(), n)
	}
	checkArray(t, a, 0, n)
}
