package localview_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/localview/viewtest"

	"go.uber.org/goleak"
)

// TestMain runs a child process's part when asked, else the tests, and
// fails the run if a test left a goroutine behind.
func TestMain(m *testing.M) {
	viewtest.RunChildIfAsked() // a reader process of TestGrowthWhileReading
	runWriterChildIfAsked()    // a writer process of TestWriterKilledMidUpdate
	runOpenChildIfAsked()      // a reader of TestReaderWithoutPermission
	goleak.VerifyTestMain(m)
}

// TestGrowthWhileReading grows a view from 0 to 1,000,000 keys (fewer
// under the race detector) while reader processes read it, then deletes
// and inserts half of them twice, so that the arena fills with garbage and
// is compacted. Readers never see a bad value or fail (a key not there yet
// is counted), they follow every generation, and the file stays within
// 1.5 times its key and value bytes plus 48 bytes a key.
func TestGrowthWhileReading(t *testing.T) {
	keys := 1_000_000
	if testkit.Race {
		keys = 200_000
	}
	dir, err := os.MkdirTemp("/dev/shm", "cachecast-view-") // a tmpfs, as /run
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	path := filepath.Join(dir, "view")
	w, err := localview.Create(path, localview.WriterOptions{GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetReady(true)
	readers := viewtest.StartReaders(t, 2, path, "grow", keys, true)

	const topic, size = "grow", 100
	published := make([]uint64, keys+keys/2)
	put := func(i int) {
		published[i]++
		if err := w.Put(topic, viewtest.Key(i), viewtest.Tag(published[i]), viewtest.Value(i, published[i], size), localview.Stamp{HLC: published[i]}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(i int) {
		if err := w.Delete(topic, viewtest.Key(i), localview.Stamp{}); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(live int) int { // topic, key, tag and value bytes of live keys
		return live * (len(topic) + len(viewtest.Key(0)) + 1 + size)
	}
	checkSize := func(when string, live int) {
		t.Helper()
		// The bound, plus the one huge page (2 MiB) a file over
		// that size may be rounded up by: a fixed cost, 1% at 1M keys
		// but 5% at the 200,000 keys of a run under the race detector.
		bound := raw(live)*3/2 + 48*live + 2<<20
		t.Logf("%s: %d keys, file %d bytes (%.1f a key; bound %d), generation %d",
			when, live, w.Size(), float64(w.Size())/float64(live), bound, w.Generation())
		if w.Size() > bound {
			t.Errorf("%s: file of %d bytes for %d keys, over the bound %d", when, w.Size(), live, bound)
		}
	}

	for i := range keys {
		put(i)
		if i%10 == 9 {
			put(i / 2) // and updates of keys already there
		}
	}
	checkSize("grown", keys)
	gen := w.Generation()
	// Round 1: half deleted, as many new keys (which the readers do not
	// read). Round 2: those deleted, the first half back.
	for i := range keys / 2 {
		del(i)
		put(keys + i)
	}
	checkSize("after round 1", keys)
	for i := range keys / 2 {
		del(keys + i)
		put(i)
	}
	checkSize("after round 2", keys)
	if w.Generation() == gen {
		t.Errorf("no compaction in two rounds of %d deletes and inserts", keys/2)
	}
	r, err := localview.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Keys(topic); err != nil || len(got) != keys {
		t.Fatalf("%d keys at the end: %v", len(got), err)
	}
	for i, c := range readers {
		viewtest.Verify(t, fmt.Sprintf("reader %d", i), c.Stop(t), published)
	}
}
