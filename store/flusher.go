package store

import (
	"fmt"
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
// commit), and under FlushSync it waits for the writers the last flush
// released to come back first (gather).
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

	mu  sync.Mutex // guards err
	err error      // the last flush's

	next     atomic.Pointer[flushDone] // the next flush's end: the writers waiting for a flush wait for it
	peak     atomic.Int32              // writers that waited for the last flush
	synced   atomic.Int64              // duration of the last flush that synced anything, ns
	gatherTo atomic.Int32              // gather waits for this many writers (0: gather is not waiting)
	gathered chan struct{}             // a writer tells gather that gatherTo writers wait
	timer    *time.Timer               // gather's deadline

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
		gathered:   make(chan struct{}, 1),
		timer:      time.NewTimer(time.Hour),
	}
	f.timer.Stop()
	f.next.Store(&flushDone{ch: make(chan struct{})})
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
	if err == nil && flushed {
		f.synced.Store(int64(took))
		if f.onFlush != nil {
			f.onFlush(took)
		}
	}
	if took > time.Second {
		f.log.Warn("slow flush", zap.Duration("took", took), zap.Int64("to", to))
	}
	if err != nil {
		f.log.Error("flush failed", zap.Int64("to", to), zap.Error(err))
	}
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	f.release(err)
	return err
}

// flushDone is one flush's end, for the writers waiting for it: closing
// ch wakes all of them at once (a sync.Cond's Broadcast made each woken
// writer take the cond's lock again, one after the other).
type flushDone struct {
	ch      chan struct{} // closed when the flush has ended
	err     error         // the flush's; set before ch is closed
	waiting atomic.Int32  // writers waiting for it
}

// release ends the current flushDone with err, waking its writers, and
// puts the next one in its place.
func (f *flusher) release(err error) {
	d := f.next.Swap(&flushDone{ch: make(chan struct{})})
	f.peak.Store(d.waiting.Load())
	d.err = err
	close(d.ch)
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
		for {
			// Take the next flush's end before looking at Flushed and
			// closed: a flush (or Close's wakeAll) that ends after the
			// look wakes this writer.
			d := f.next.Load()
			if f.seglog.Flushed() >= end || f.closed.Load() {
				break
			}
			f.arrive(d)
			f.kick()
			<-d.ch
			if d.err != nil && f.seglog.Flushed() < end {
				return fmt.Errorf("stored but not flushed: %w", d.err)
			}
		}
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

// arrive counts a writer waiting for d and tells gather when it is the
// one gather waits for.
func (f *flusher) arrive(d *flushDone) {
	if d.waiting.Add(1) == f.gatherTo.Load() {
		select {
		case f.gathered <- struct{}{}:
		default:
		}
	}
}

// wakeAll wakes every waiting writer (the store is closing: they see
// closed and give up).
func (f *flusher) wakeAll() {
	f.release(nil)
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
				f.gather(done, min(time.Duration(f.synced.Load())/2, maxGather))
			}
			f.flush()
		case <-t.C:
			tick()
		}
	}
}

// gather lets the writers that the last flush woke, on their way back with
// their next records, append before this flush takes the end of the log,
// so that one flush serves all of them (group commit). Without it a flush
// began as soon as the first of them waited again, the rest appended
// while it ran and waited for the one after: the writers fell into two
// halves taking turns, each flush carrying half of them. It waits until
// as many writers wait as waited for the last flush, for at most wait
// (run: half the last flush's time, at most maxGather), or until done is
// closed: a lone writer never waits, and when fewer come back the next
// flush waits for fewer.
func (f *flusher) gather(done <-chan struct{}, wait time.Duration) {
	target := f.peak.Load()
	if target <= 1 || f.next.Load().waiting.Load() >= target {
		return
	}
	select { // a signal left from an earlier gather
	case <-f.gathered:
	default:
	}
	f.gatherTo.Store(target)
	defer f.gatherTo.Store(0)
	if f.next.Load().waiting.Load() >= target {
		return
	}
	f.timer.Reset(wait)
	defer f.timer.Stop()
	select {
	case <-f.gathered:
	case <-f.timer.C:
	case <-done:
	}
}

// maxGather bounds gather's wait, whatever the last flush took: the
// writers it waits for come back in the time of a few appends.
const maxGather = 10 * time.Millisecond
