package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// fullWaitOptions bound the log to four 64 KiB segments, recycled, with
// no snapshot on the interval: only the log's growth (a quarter of the
// bound) and a refusal ask for one, so that writers outrun it.
func fullWaitOptions(t testing.TB) Options {
	o := testOptions(t, t.TempDir())
	o.RetentionBytes = 4 * o.SegmentSize
	o.WhenFull = FullRecycle
	o.SnapshotInterval = time.Hour
	return o
}

// TestWriterOutrunningTheSnapshotWaits: writers that fill the retention
// faster than the snapshot covers it are held back until it does, never
// refused, and lose nothing: 32 times the bound written by concurrent
// publishers, by batches, or as a peer's records, no call fails, every
// seq is in the log after the oldest retained, and every key has its
// latest value, after a reopen too.
func TestWriterOutrunningTheSnapshotWaits(t *testing.T) {
	for _, tc := range []struct {
		name           string
		writers, batch int
		peer           bool // AppendRecord of origin 42's records
	}{
		{name: "publishers", writers: 4, batch: 1},
		{name: "batches", writers: 2, batch: 16},
		{name: "peer", writers: 1, batch: 1, peer: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fullWaitOptions(t)
			s := openTest(t, o)
			const size, keys = 1000, 50
			total := int(32 * o.RetentionBytes / size)
			perWriter := total / tc.writers / tc.batch * tc.batch
			latest := map[string][]byte{} // key -> the value written last
			var mu sync.Mutex
			var wg sync.WaitGroup
			start := time.Now()
			for w := range tc.writers {
				wg.Go(func() {
					ms := make([]record.Message, tc.batch)
					for i := 0; i < perWriter; i += tc.batch {
						for j := range ms {
							n := i + j
							ms[j] = record.Message{Topic: "t", Key: fmt.Sprintf("w%d-k%d", w, n%keys), Value: value(w*perWriter+n, size)}
						}
						var err error
						switch {
						case tc.peer:
							// A millisecond apart: the view takes the later of two records by stamp.
							_, err = s.AppendRecord(encodePeer(&ms[0], 42, uint64(i+1), start.Add(time.Duration(i)*time.Millisecond)))
						case tc.batch > 1:
							_, err = s.PublishBatch(ms)
						default:
							_, err = s.Publish(&ms[0])
						}
						if err != nil {
							t.Errorf("writer %d, message %d: %v", w, i, err)
							return
						}
					}
					mu.Lock()
					defer mu.Unlock()
					for n := perWriter - keys; n < perWriter; n++ {
						latest[fmt.Sprintf("w%d-k%d", w, n%keys)] = value(w*perWriter+n, size)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			origin := s.Origin()
			if tc.peer {
				origin = 42
			}
			written := uint64(tc.writers * perWriter)
			if st := s.Stats(); st.OldestPos < 16*o.RetentionBytes || st.LogBytes > o.RetentionBytes {
				t.Fatalf("oldest position %d, %d bytes retained: the log was not recycled within its bound", st.OldestPos, st.LogBytes)
			}
			checkFullWaitStore(t, s, origin, written, latest)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			checkFullWaitStore(t, openTest(t, o), origin, written, latest)
		})
	}
}

// checkFullWaitStore checks that origin's seqs follow each other in the
// log from its oldest record up to written, and that every key of latest
// has its value.
func checkFullWaitStore(t *testing.T, s *Store, origin, written uint64, latest map[string][]byte) {
	t.Helper()
	if got := s.LastSeq(origin); got != written {
		t.Fatalf("origin at seq %d, want %d", got, written)
	}
	var prev uint64
	for pos := s.seglog.Oldest(); pos < s.seglog.End(); {
		next, err := s.seglog.Read(pos, func(r record.Record) error {
			if prev != 0 && r.Seq() != prev+1 {
				return fmt.Errorf("seq %d after %d", r.Seq(), prev)
			}
			prev = r.Seq()
			return nil
		})
		if err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
		pos = next
	}
	if prev != written {
		t.Fatalf("the log ends at seq %d, want %d", prev, written)
	}
	for k, v := range latest {
		if e, ok := s.Get("t", k); !ok || string(e.Value) != string(v) {
			t.Fatalf("key %s lost its latest value", k)
		}
	}
}

// openHeldBack opens a full-wait store whose snapshot cannot cover the
// log: a peer's together batch, half arrived, keeps the view's snapshot
// before it, for good.
func openHeldBack(t *testing.T, wait time.Duration) *Store {
	o := fullWaitOptions(t)
	o.fullWait = wait
	s := openTest(t, o)
	half := []record.Message{{Topic: "t", Key: "a", Value: []byte("1")}, {Topic: "t", Key: "b", Value: []byte("2")}}
	record.Together(half)
	if _, err := s.AppendRecord(encodePeer(&half[0], 42, 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	return s
}

// fillUntilRefused publishes 1,000-byte values until a publish fails, and
// returns its error and how long it took.
func fillUntilRefused(s *Store) (err error, took time.Duration) {
	for i := 0; i < 1000; i++ {
		m := record.Message{Topic: "t", Key: fmt.Sprint(i % 10), Value: value(i, 1000)}
		t0 := time.Now()
		if _, err = s.Publish(&m); err != nil {
			return err, time.Since(t0)
		}
	}
	return errors.New("1,000 KB written to a 256 KiB log whose snapshot cannot move"), 0
}

// TestFullWaitEndsAtTheDeadline: when no snapshot can cover the oldest
// segment, a write to the full log waits for the deadline and then fails
// with ErrFull naming the snapshot.
func TestFullWaitEndsAtTheDeadline(t *testing.T) {
	const wait = 300 * time.Millisecond
	s := openHeldBack(t, wait)
	err, took := fillUntilRefused(s)
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "still needed by the snapshot") {
		t.Fatalf("got %v, want ErrFull naming the snapshot", err)
	}
	if took < wait {
		t.Fatalf("refused after %v, before the %v deadline", took, wait)
	}
}

// TestFullWaitHoldsNoLock: a writer waiting for the snapshot holds no
// lock: a snapshot (which takes the write lock), reads and the cursors go
// on meanwhile, and Close ends the wait at once with ErrClosed.
func TestFullWaitHoldsNoLock(t *testing.T) {
	s := openHeldBack(t, time.Hour)
	refused := make(chan error, 1)
	go func() {
		err, _ := fillUntilRefused(s)
		refused <- err
	}()
	waitFor(t, "the writer to wait for the snapshot", s.snapDone.waiting.Load)
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if e, ok := s.Get("t", "0"); !ok || len(e.Value) != 1000 {
		t.Fatalf("read while a writer waits: %+v %v", e, ok)
	}
	if err := s.SetCursor("c", "t", 1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		t.Fatalf("the writer returned before Close: %v", err)
	default:
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the waiting writer got %v at Close, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the writer's wait")
	}
}
