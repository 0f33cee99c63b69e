package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// TestGather checks the flusher's wait for the writers the last flush woke:
// it waits until as many wait again as waited for it, and no longer than
// its deadline or the store's end; a lone writer never waits.
func TestGather(t *testing.T) {
	for _, tc := range []struct {
		name    string
		peak    int32         // writers that waited for the last flush
		before  int           // writers waiting before gather begins
		during  int           // writers that come while it waits
		wait    time.Duration // gather's deadline
		closing bool          // the store closes while it waits
	}{
		{name: "a lone writer", peak: 1, wait: time.Hour},
		{name: "all back already", peak: 3, before: 3, wait: time.Hour},
		{name: "waits for the last of them", peak: 3, before: 1, during: 2, wait: time.Hour},
		{name: "none back: the deadline", peak: 3, wait: time.Millisecond},
		{name: "none back: the store closes", peak: 3, wait: time.Hour, closing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var closed atomic.Bool
			f := newFlusher(nil, DefaultOptions(t.TempDir()), &closed, zap.NewNop())
			f.peak.Store(tc.peak)
			d := f.next.Load()
			for range tc.before {
				f.arrive(d)
			}
			done := make(chan struct{})
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				f.gather(done, tc.wait)
			}()
			for i := range tc.during {
				// gather must be waiting: not every writer is back.
				testkit.Until(t, time.Minute, "gather to wait", func() string {
					select {
					case <-returned:
						t.Fatalf("gather returned with %d of %d writers back", tc.before+i, tc.peak)
					default:
					}
					if f.gatherTo.Load() == 0 {
						return "it has not begun to wait"
					}
					return ""
				})
				f.arrive(d)
			}
			if tc.closing {
				close(done)
			}
			select {
			case <-returned:
			case <-time.After(time.Minute):
				t.Fatal("gather still waiting after a minute")
			}
			if got := f.gatherTo.Load(); got != 0 {
				t.Fatalf("gather left gatherTo at %d", got)
			}
		})
	}
}

// TestSyncFlushIsDurable: under FlushSync a publish returns only once a
// flush covers its record, with one writer and with many; many writers
// share their flushes (group commit).
func TestSyncFlushIsDurable(t *testing.T) {
	for _, writers := range []int{1, 16} {
		t.Run(fmt.Sprintf("writers=%d", writers), func(t *testing.T) {
			o := testOptions(t, t.TempDir())
			o.Flush = FlushSync
			var flushes atomic.Int64
			o.OnFlush = func(time.Duration) { flushes.Add(1) }
			s := openTest(t, o)
			const each = 50
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						m := record.Message{Topic: "t", Key: fmt.Sprint(w), Value: value(i, 100)}
						res, err := s.Publish(&m)
						if err != nil {
							t.Error(err)
							return
						}
						if flushed := s.Stats().FlushedPos; !res.Durable || flushed < res.Pos {
							t.Errorf("writer %d, publish %d returned before a flush covered it: %+v flushed %d", w, i, res, flushed)
							return
						}
					}
				})
			}
			wg.Wait()
			if n := flushes.Load(); writers > 1 && n > int64(writers*each/2) {
				t.Errorf("%d writers' %d records took %d flushes: they do not share them", writers, writers*each, n)
			}
		})
	}
}

// TestCloseReleasesSyncWriters: writers waiting for a sync flush when the
// store closes all return, each with its record durable or ErrClosed.
func TestCloseReleasesSyncWriters(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.Flush = FlushSync
	s := openTest(t, o)
	var published atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				m := record.Message{Topic: "t", Key: fmt.Sprint(w), Value: value(i, 100)}
				res, err := s.Publish(&m)
				switch {
				case errors.Is(err, ErrClosed):
					return
				case err != nil:
					t.Error(err)
					return
				case !res.Durable:
					t.Errorf("writer %d, publish %d: not durable under FlushSync", w, i)
					return
				}
				published.Add(1)
			}
		})
	}
	testkit.Eventually(t, time.Minute, "200 records published", func() bool { return published.Load() >= 200 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	go func() {
		wg.Wait()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("writers still waiting a minute after Close")
	}
}
