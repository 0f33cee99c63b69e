package localview_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/localview/viewtest"
)

func TestGetMany(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	w, err := localview.Create(path, localview.WriterOptions{GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := localview.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.GetMany([]string{"t"}, []string{"a"}, nil, nil); !errors.Is(err, localview.ErrNotReady) {
		t.Fatalf("before ready: %v", err)
	}
	w.SetReady(true)
	w.Put("t", "a", "x", []byte("1"), localview.Stamp{HLC: 1})
	w.Put("t", "b", "", []byte("22"), localview.Stamp{HLC: 2})
	w.Put("u", "a", "", []byte("333"), localview.Stamp{HLC: 3})
	w.Put("t", "gone", "", []byte("4"), localview.Stamp{HLC: 4})
	w.Delete("t", "gone", localview.Stamp{HLC: 5})
	for _, c := range []struct {
		name   string
		topics []string
		keys   []string
		want   []string // "" for not found
	}{
		{"one topic", []string{"t"}, []string{"a", "b", "missing", "gone"}, []string{"x=1", "=22", "", ""}},
		{"a topic each", []string{"t", "u", "u"}, []string{"a", "a", "b"}, []string{"x=1", "=333", ""}},
		{"no keys", []string{"t"}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			items, _, err := r.GetMany(c.topics, c.keys, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != len(c.keys) {
				t.Fatalf("%d items for %d keys", len(items), len(c.keys))
			}
			for i, it := range items {
				got := ""
				if it.Found {
					got = string(it.Tag) + "=" + string(it.Value)
				}
				if got != c.want[i] {
					t.Errorf("key %s: %q, want %q", c.keys[i], got, c.want[i])
				}
			}
		})
	}
	if _, _, err := r.GetMany([]string{"t", "u"}, []string{"a", "b", "c"}, nil, nil); !errors.Is(err, localview.ErrInvalid) {
		t.Errorf("2 topics for 3 keys: %v", err)
	}
	// With the items and buffer passed back, a read allocates nothing.
	topics, keys := []string{"t"}, []string{"a", "b", "missing"}
	items, buf, _ := r.GetMany(topics, keys, nil, nil)
	if n := testing.AllocsPerRun(100, func() { items, buf, _ = r.GetMany(topics, keys, items, buf) }); n != 0 {
		t.Errorf("%v allocations a GetMany", n)
	}
}

// TestGetManyWhileBatchesArePublished: a writer publishes batches of 64
// keys, one after another (every key at the batch's counter, in values of
// sizes that change, so that records are outgrown and replaced), with
// single puts between them and inside them that grow the file through
// several generations (a rebuild in the middle of a batch), and a key that
// each batch deletes or puts back. Readers in two goroutines and two other
// processes read the batch's keys with GetMany all along: every read sees
// all of one batch, never a mix of two, never an older one after a newer
// (or gives up with ErrBusy, counted: keys that never stop changing
// starve a reader, see GetMany).
func TestGetManyWhileBatchesArePublished(t *testing.T) {
	const keys = 64
	batches := uint64(3000)
	if testkit.Race {
		batches = 800
	}
	path := filepath.Join(t.TempDir(), "view")
	w, err := localview.Create(path, localview.WriterOptions{GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	size := func(i int, c uint64) int { return 16 + int((c*7+uint64(i))%185) }
	values := make([][]byte, keys)
	publish := func(c uint64) {
		// The values are made before the batch starts, as the daemon's
		// are in memory before it writes them: a writer that rewrote
		// the keys without a pause would starve GetMany (see its doc).
		for i := range values {
			values[i] = viewtest.Value(i, c, size(i, c))
		}
		w.BeginBatch()
		for i := range keys {
			if err := w.Put("t", viewtest.Key(i), viewtest.Tag(c), values[i], localview.Stamp{HLC: c}); err != nil {
				t.Error(err)
			}
			if i == keys/2 && c%16 == 0 {
				// Enough new keys, now and then, for a new generation
				// in the middle of a batch.
				for j := range 500 {
					w.Put("fill", fmt.Sprintf("%d-%d", c, j), "", make([]byte, 64), localview.Stamp{HLC: c})
				}
			}
		}
		extra := viewtest.Key(keys)
		if c%2 == 0 {
			w.Put("t", extra, viewtest.Tag(c), viewtest.Value(keys, c, 16), localview.Stamp{HLC: c})
		} else {
			w.Delete("t", extra, localview.Stamp{HLC: c})
		}
		w.EndBatch()
		w.Put("other", viewtest.Key(int(c%100)), "", []byte("between batches"), localview.Stamp{HLC: c})
		w.Heartbeat(time.Now())
	}
	publish(1)
	w.SetReady(true)
	children := viewtest.StartBatchReaders(t, 2, path, "t", keys)

	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 2)
	reads, busy := make([]int, 2), make([]int, 2)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- readBatches(path, keys, done, &reads[g], &busy[g])
		}()
	}
	gen0 := w.Generation()
	for c := uint64(2); c <= batches; c++ {
		publish(c)
	}
	close(done)
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	t.Logf("%d batches over generations %d to %d; in-process GetManys: %v (gave up: %v)", batches, gen0, w.Generation(), reads, busy)
	for g, n := range reads {
		if n == 0 {
			t.Errorf("reader goroutine %d read nothing", g)
		}
	}
	if w.Generation() < gen0+2 {
		t.Errorf("the file grew through %d generations only: the test meant more", w.Generation()-gen0)
	}
	for i, c := range children {
		rep := c.Stop(t)
		published := make([]uint64, keys)
		for j := range published {
			published[j] = batches
		}
		viewtest.Verify(t, fmt.Sprintf("reader process %d", i), rep, published)
		if rep.Batches < 2 {
			t.Errorf("reader process %d saw %d batches: it read while nothing changed", i, rep.Batches)
		}
	}
}

// readBatches reads keys 0..keys (the last one each batch deletes or puts
// back) with GetMany until done closes, and returns the first read that
// is not all of one batch.
func readBatches(path string, keys int, done <-chan struct{}, reads, busy *int) error {
	r, err := localview.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	names := make([]string, keys+1)
	for i := range names {
		names[i] = viewtest.Key(i)
	}
	topics := []string{"t"}
	var items []localview.Item
	var buf []byte
	var last uint64
	for {
		select {
		case <-done:
			return nil
		default:
		}
		items, buf, err = r.GetMany(topics, names, items, buf)
		if errors.Is(err, localview.ErrBusy) {
			// It gave up on keys that kept changing (a reader slowed
			// down, under the race detector on a busy machine): the
			// caller would use the socket. Never a wrong answer.
			*busy++
			continue
		}
		if err != nil {
			return fmt.Errorf("GetMany: %w", err)
		}
		*reads++
		var batch uint64
		for i, it := range items {
			if !it.Found {
				if i == keys && batch%2 == 1 {
					continue // deleted by odd batches
				}
				return fmt.Errorf("key %d not found (batch %d)", i, batch)
			}
			c, err := viewtest.Check(i, it.Value, it.Tag)
			if err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
			if i == 0 {
				batch = c
			} else if c != batch {
				return fmt.Errorf("a mixed batch: key 0 at %d, key %d at %d", batch, i, c)
			}
		}
		if batch%2 == 1 && items[keys].Found {
			return fmt.Errorf("batch %d deleted key %d, read at %d", batch, keys, batch)
		}
		if batch < last {
			return fmt.Errorf("batch %d after %d", batch, last)
		}
		last = batch
	}
}
