package store

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/segment"
)

// flusher makes the log durable and tells the writers that wait for it.
// Its goroutine (run) flushes at once when kicked (a sync-mode writer
// waiting, FlushBytes reached) and does the store's timed work on every
// FlushInterval tick; Flush and Close flush on their own goroutines. One
// flush serves every writer waiting for a position it covers (group
// commit).
//
// Concurrency: every method is safe for concurrent use; flushes may run
// on two goroutines at once (the log's SyncTo serializes what matters).
type flusher struct {
	seglog     *segment.Log
	mode       FlushMode
	interval   time.Duration
	flushBytes int64
	onFlush    func(took time.Duration)
	log        *zap.Logger
	closed     *atomic.Bool // the store's: waiting writers give up once it is set

	mu   sync.Mutex // guards err; cond wakes the writers waiting for a flush
	cond *sync.Cond
	err  error // the last flush's

	kicks     chan struct{}
	last      atomic.Int64 // duration of the last flush, ns
	pendingAt atomic.Int64 // when the oldest unflushed write was made, unix ns (0: none)
}

func newFlusher(seglog *segment.Log, o Options, closed *atomic.Bool, log *zap.Logger) *flusher {
	f := &flusher{
		seglog:     seglog,
		mode:       o.Flush,
		interval:   o.FlushInterval,
		flushBytes: o.FlushBytes,
		onFlush:    o.OnFlush,
		log:        log,
		closed:     closed,
		kicks:      make(chan struct{}, 1),
	}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// flush syncs the log to its current end and wakes waiting writers.
func (f *flusher) flush() error {
	to := f.seglog.End()
	start := time.Now()
	if to > f.seglog.Flushed() {
		f.pendingAt.Store(0)
	}
	flushed := to > f.seglog.Flushed()
	err := f.seglog.SyncTo(to)
	took := time.Since(start)
	f.last.Store(int64(took))
	if f.onFlush != nil && err == nil && flushed {
		f.onFlush(took)
	}
	if took > time.Second {
		f.log.Warn("slow flush", zap.Duration("took", took), zap.Int64("to", to))
	}
	if err != nil {
		f.log.Error("flush failed", zap.Int64("to", to), zap.Error(err))
	}
	f.mu.Lock()
	f.err = err
	f.cond.Broadcast()
	f.mu.Unlock()
	return err
}

// kick asks the flusher goroutine for a flush; it never blocks.
func (f *flusher) kick() {
	select {
	case f.kicks <- struct{}{}:
	default:
	}
}

// written notes a write that ended the log at end: it starts the clock of
// the oldest unflushed write and kicks a flush once FlushBytes wait
// (FlushAsync). Called under the write lock.
func (f *flusher) written(end int64) {
	if f.pendingAt.Load() == 0 {
		f.pendingAt.Store(time.Now().UnixNano())
	}
	if f.mode == FlushAsync && f.flushBytes > 0 && end-f.seglog.Flushed() >= f.flushBytes {
		f.kick()
	}
}

// waitDurable returns once the log is flushed up to end under FlushSync;
// under FlushAsync it only records whether it already is.
func (f *flusher) waitDurable(end int64, results []Result) error {
	if f.mode == FlushSync {
		f.mu.Lock()
		for f.seglog.Flushed() < end && !f.closed.Load() {
			f.kick()
			f.cond.Wait()
			if f.err != nil && f.seglog.Flushed() < end {
				err := f.err
				f.mu.Unlock()
				return fmt.Errorf("stored but not flushed: %w", err)
			}
		}
		f.mu.Unlock()
	}
	durable := f.seglog.Flushed() >= end
	for i := range results {
		results[i].Durable = durable
	}
	if !durable && f.mode == FlushSync {
		return fmt.Errorf("stored but not flushed: %w", ErrClosed)
	}
	return nil
}

// wakeAll wakes every waiting writer (the store is closing: they see
// closed and give up).
func (f *flusher) wakeAll() {
	f.mu.Lock()
	f.cond.Broadcast()
	f.mu.Unlock()
}

// unhealthy says why the log's durability is in doubt: the last flush
// failed, or unflushed data has waited past wedgedAfter (nil: neither).
func (f *flusher) unhealthy() error {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("store: last flush failed: %w", err)
	}
	if at := f.pendingAt.Load(); at != 0 {
		if wait := time.Since(time.Unix(0, at)); wait > wedgedAfter+f.interval {
			return fmt.Errorf("store: unflushed data has waited %s", wait.Round(time.Millisecond))
		}
	}
	return nil
}

// wedgedAfter is how long a write may wait for a flush before the store
// calls itself unhealthy.
const wedgedAfter = 10 * time.Second

// run is the flusher goroutine: it flushes when kicked and calls tick
// every FlushInterval, until done is closed.
func (f *flusher) run(done <-chan struct{}, tick func()) {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-f.kicks:
			if f.mode == FlushSync {
				// Writers woken by the last flush are on their way back
				// with their next records: let them append before this
				// flush takes the end of the log, so that one flush
				// serves more of them (group commit).
				runtime.Gosched()
			}
			f.flush()
		case <-t.C:
			tick()
		}
	}
}
