package mirror

import (
	"fmt"
	"iter"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"

	"github.com/cachecast/cachecast/store/view"
)

// viewHeartbeat is how often the mirror tells readers the view is current
// when nothing changes (localview.Reader.Fresh compares with it).
const viewHeartbeat = 50 * time.Millisecond

// Mirror keeps the shared view file (--view-file) equal to the store's
// view. The store calls enqueue under its view lock for every change, from
// any node, in the order the view applies them, and end once the changes
// of one publish (a record, an atomic batch, a PublishBatch) are all
// given. end writes them to the file as one batch of the file (a
// reader's GetMany sees it whole or not at all) right there when nothing
// is queued and the writer is free (the common case: the values are in
// the file when the publish returns); otherwise it queues them, and run
// applies the queue in order. So a publish is never held up by the file,
// even while the writer builds a bigger generation.
type Mirror struct {
	w       *localview.Writer
	values  *fileValues // w, as the view reads the values it keeps there
	lock    *os.File    // flock held for the daemon's life
	log     *zap.Logger
	st      *store.Store
	current iter.Seq[view.Change] // the view as of follow, applied first
	// Members is the cluster state the file's header carries (alive and
	// known members); nil for a lone node. Set before Run.
	Members func() (alive, known int)
	// CaughtUp says the node has caught up with its peers (cluster.CatchUp)
	// and serves: until then the file stays "not ready", as the socket's
	// reads answer catching_up; once it is false again (the node left its
	// cluster, away) the heartbeat clears ready. nil: always. Set before
	// Run.
	CaughtUp func() bool
	// Retry is how long after a write error Run tries again with a new
	// file (DefaultRetry unless set before Run).
	Retry time.Duration
	// ValuesInFile lets the store's view keep the values written into
	// the file there only (--view-file-values; store/view/file.go). Set
	// before Follow.
	ValuesInFile bool
	gid          int // the socket's group, for the files

	// wmu owns the Writer. run holds it while it loads the view and while
	// it drains the queue; enqueue applies a change itself only when it
	// gets wmu at once (TryLock: it never waits) and the queue is empty.
	wmu    sync.Mutex
	direct bool  // the view is loaded and healthy: enqueue may write
	err    error // a write of enqueue's that failed: run turns the view off

	// group is the changes given since the last end; only enqueue and
	// end touch it, under the view's lock.
	group []view.Change
	// written is drain's and serve's scratch: the changes they wrote,
	// queued or loaded, which the view may then keep in the file only
	// (at most writtenChunk, see keep).
	written []view.Change

	mu      sync.Mutex
	pending changeQueue
	kick    chan struct{}

	// For the metrics, set at each heartbeat.
	ready, generation, size, keys atomic.Int64

	closeOnce sync.Once
}

// queued is a change waiting in the mirror's queue; last marks the end of
// its group, a batch of the file.
type queued struct {
	view.Change
	last bool
}

// RegisterMetrics adds the view's gauges to reg.
func (vm *Mirror) RegisterMetrics(reg *prometheus.Registry) {
	gauge := func(name, help string, v func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v))
	}
	gauge("cachecast_view_ready", "1 while the shared view file (--view-file) is loaded and current, 0 otherwise.",
		func() float64 { return float64(vm.ready.Load()) })
	gauge("cachecast_view_generation", "Generation of the shared view file (one more at each growth or compaction).",
		func() float64 { return float64(vm.generation.Load()) })
	gauge("cachecast_view_bytes", "Size of the shared view file.", func() float64 { return float64(vm.size.Load()) })
	gauge("cachecast_view_keys", "Live keys in the shared view file.", func() float64 { return float64(vm.keys.Load()) })
	gauge("cachecast_view_queued", "Changes of the view waiting to be written to the file.", func() float64 {
		vm.mu.Lock()
		defer vm.mu.Unlock()
		return float64(vm.pending.n)
	})
}

// Open puts a new, not ready generation of the view file at path in
// place (before the store recovers, so that readers of an earlier
// daemon's file see "not ready" instead of values the recovery may
// change). A lock file beside it (<path>.lock) keeps a second daemon off
// the same path.
func Open(path string, log *zap.Logger) (*Mirror, error) {
	lock, err := lockViewFile(path)
	if err != nil {
		return nil, err
	}
	w, err := localview.Create(path, localview.WriterOptions{GID: -1})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("--view-file: %w", err)
	}
	return &Mirror{w: w, values: &fileValues{w}, lock: lock, log: log, gid: -1, kick: make(chan struct{}, 1), Retry: DefaultRetry}, nil
}

// fileValues is a Writer as the view's ValueFile: the view reads the
// values it keeps out of its heap there (issue 34, store/view/file.go).
type fileValues struct{ *localview.Writer }

// AppendValue is the Writer's, with the view's stamp.
func (f *fileValues) AppendValue(dst []byte, topic, key string, st record.Stamp, at uint32) ([]byte, uint32, bool) {
	return f.Writer.AppendValue(dst, topic, key, fileStamp(st), at)
}

// fileStamp is st as the file holds it: as every answer shows a version
// (record.Stamp.Shown), the zero stamp for a counter made on a key no
// node held, which has no version of its own.
func fileStamp(st record.Stamp) localview.Stamp {
	st = st.Shown()
	return localview.Stamp{HLC: st.HLC, Origin: st.Origin, Seq: st.Seq}
}

// lockViewFile takes the lock file beside the view file at path, which
// keeps a second daemon off the path.
func lockViewFile(path string) (*os.File, error) {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return nil, fmt.Errorf("--view-file: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("--view-file: %s is in use by another cachecastd: %w", path, err)
	}
	return lock, nil
}

// relock takes the lock file again when the one held is no longer at its
// path (the runtime directory was deleted): another daemon may have made
// a new one, and then this one must keep off the path.
func (vm *Mirror) relock() error {
	path := vm.w.Path() + ".lock"
	var mine, there syscall.Stat_t
	if syscall.Fstat(int(vm.lock.Fd()), &mine) == nil && syscall.Stat(path, &there) == nil &&
		mine.Dev == there.Dev && mine.Ino == there.Ino {
		return nil
	}
	lock, err := lockViewFile(vm.w.Path())
	if err != nil {
		return err
	}
	vm.lock.Close()
	vm.lock = lock
	return nil
}

// UseSocketGroup gives the view file the socket's group: whoever may use
// the API may read the view.
func (vm *Mirror) UseSocketGroup(socket string) error {
	fi, err := os.Stat(socket)
	if err != nil {
		return fmt.Errorf("--view-file: %w", err)
	}
	vm.gid = int(fi.Sys().(*syscall.Stat_t).Gid)
	if err := vm.w.SetGroup(vm.gid); err != nil {
		return fmt.Errorf("--view-file: %w", err)
	}
	return nil
}

// Follow starts queueing the store's changes; run applies them.
func (vm *Mirror) Follow(st *store.Store) {
	vm.st = st
	vm.current = st.FollowView(vm.enqueue, vm.end)
}

// enqueue is the store's follower: it keeps the change for end.
func (vm *Mirror) enqueue(c view.Change) { vm.group = append(vm.group, c) }

// end is the store's end of a group of changes. It runs under the view's
// lock, so it never waits: it writes the group itself, as one batch of the
// file, when it can, or queues it.
func (vm *Mirror) end() {
	g := vm.group
	vm.group = g[:0]
	if len(g) == 0 {
		return
	}
	defer clear(g) // drop the references to the values
	from, failed := vm.writeDirect(g)
	if failed {
		vm.wake()
		return
	}
	// The view keeps the values just written in the file only (it holds
	// the lock: end runs under it).
	if vm.ValuesInFile && vm.st != nil {
		vm.st.ViewFileWritten(vm.values, g[:from])
	}
	if from == len(g) {
		return
	}
	vm.mu.Lock()
	first := vm.pending.n == 0
	for i := from; i < len(g); i++ {
		vm.pending.push(queued{Change: g[i], last: i == len(g)-1})
	}
	vm.mu.Unlock()
	if first {
		vm.wake()
	}
}

// writeDirect writes g into the file itself, as one batch, when wmu is
// free and nothing is queued (this group is next in order). It returns
// how many of g's changes it wrote: a change that needs a new generation
// stops it, and the rest is queued for run (a rebuild must not hold the
// view's lock), which ends the batch left open here; failed says a write
// failed (vm.err says how: the rest is dropped, run starts over). wmu is
// released by a defer on every path: a panic here, on the goroutine of a
// publish (net/http recovers an HTTP handler's), must not leave it held,
// which would stop the mirror for good and queue every later change. The
// panic goes on, and the mirror starts over with a new file, as after a
// write error.
func (vm *Mirror) writeDirect(g []view.Change) (from int, failed bool) {
	if !vm.wmu.TryLock() {
		return 0, false
	}
	defer func() {
		if p := recover(); p != nil {
			vm.direct, vm.err = false, fmt.Errorf("view file: a panic writing it: %v", p)
			vm.wmu.Unlock()
			vm.wake()
			panic(p)
		}
		vm.wmu.Unlock()
	}()
	// pending is read here without mu: only end appends to it (one call
	// at a time, under the view's lock) and only drain empties it,
	// holding wmu, which this call holds now.
	if !vm.direct || vm.pending.n != 0 {
		return 0, false
	}
	if len(g) > 1 {
		// Every key's slot and record first, so that their cache misses
		// overlap instead of coming one per change.
		vm.w.Touch(len(g), func(i int) (string, string) { return g[i].Topic, g[i].Key })
	}
	vm.w.BeginBatch()
	for ; from < len(g); from++ {
		done, err := vm.tryApply(g[from])
		if err != nil {
			vm.direct, vm.err = false, err
			return from, true
		}
		if !done {
			return from, false
		}
	}
	vm.w.EndBatch()
	return from, false
}

func (vm *Mirror) wake() {
	select {
	case vm.kick <- struct{}{}:
	default:
	}
}

// DefaultRetry is how long after a write error the mirror tries again with
// a new file (the tmpfs may have room by then).
const DefaultRetry = 5 * time.Second

// Run serves the view until stop is closed. An error writing the file (a
// full tmpfs) turns the view off: readers see "not ready" and fall back to
// the socket, the daemon goes on, and every Retry the mirror starts
// over with a new file loaded from the store.
func (vm *Mirror) Run(stop <-chan struct{}) {
	defer vm.Close()
	for {
		err := vm.serve(stop)
		if err == nil {
			return
		}
		vm.wmu.Lock()
		vm.fail(err)
		vm.wmu.Unlock()
		for {
			select {
			case <-stop:
				return
			case <-time.After(vm.Retry):
			}
			if err = vm.restart(); err == nil {
				break
			}
			vm.log.Warn("view file: starting over failed; trying again later", zap.Duration("in", vm.Retry), zap.Error(err))
		}
	}
}

// restart replaces the writer with a new one on a new file (the old one
// superseded) and follows the store again.
func (vm *Mirror) restart() error {
	if err := vm.relock(); err != nil {
		return err
	}
	w, err := localview.Create(vm.w.Path(), localview.WriterOptions{GID: vm.gid})
	if err != nil {
		return err
	}
	vm.wmu.Lock()
	old := vm.w
	vm.w, vm.values, vm.err = w, &fileValues{w}, nil
	vm.wmu.Unlock()
	old.Close()
	vm.current = vm.st.FollowView(vm.enqueue, vm.end)
	return nil
}

// serve loads the view, marks the file ready, then applies what is queued
// and beats the heartbeat. It returns nil when stop is closed, or the
// first error writing the file.
func (vm *Mirror) serve(stop <-chan struct{}) error {
	vm.wmu.Lock()
	t0 := time.Now()
	n := 0
	var bytes int64
	for c := range vm.current {
		n++
		bytes += int64(len(c.Topic) + len(c.Key) + len(c.Tag) + len(c.Value))
	}
	err := vm.w.Reserve(n, bytes)
	vm.w.BeginBatch() // the file is not ready yet: one batch is enough
	for c := range vm.current {
		if err != nil {
			break
		}
		if err = vm.apply(c); err == nil && vm.ValuesInFile {
			vm.keep(c, true)
		}
	}
	if err == nil {
		vm.tell(true)
	}
	clear(vm.written)
	vm.written = vm.written[:0]
	vm.w.EndBatch()
	vm.current = nil
	var batch [][]queued
	if err == nil {
		batch, _, err = vm.drain(batch)
	}
	if err != nil {
		vm.wmu.Unlock()
		return err
	}
	vm.beat(t0)
	vm.direct = true
	vm.log.Info("view file loaded", zap.String("view-file", vm.w.Path()), zap.Int("keys", vm.w.Len()),
		zap.Int("bytes", vm.w.Size()), zap.Duration("took", time.Since(t0)))
	vm.markReady()
	vm.wmu.Unlock()

	tick := time.NewTicker(viewHeartbeat)
	defer tick.Stop()
	kicked := false // since the last heartbeat
	for {
		ticked := false
		select {
		case <-stop:
			return nil
		case <-tick.C:
			ticked = true
		case <-vm.kick:
			kicked = true
		}
		vm.wmu.Lock()
		var taken time.Time
		err := vm.err
		if err == nil {
			batch, taken, err = vm.drain(batch)
		}
		if err == nil && ticked {
			if !kicked {
				batch = vm.shrink(batch)
			}
			kicked = false
		}
		if err == nil && ticked && !vm.w.Linked() {
			err = vm.relink()
		}
		if err != nil {
			vm.wmu.Unlock()
			return err
		}
		// Every change made before taken is in the file now: the view is
		// current as of then (a mirror falling behind shows as an old
		// heartbeat, and Fresh fails).
		vm.beat(taken)
		if vm.ready.Load() == 0 {
			vm.markReady()
		} else if vm.CaughtUp != nil && !vm.CaughtUp() {
			vm.w.SetReady(false) // the node stopped serving (away): so do its readers
			vm.ready.Store(0)
			vm.log.Warn("view file not ready: the node stopped serving", zap.String("view-file", vm.w.Path()))
		}
		vm.wmu.Unlock()
	}
}

// keepQueued is the most changes the queue's blocks keep room for once
// the queue went unused for a heartbeat.
const keepQueued = 1024

// shrink drops the queue's spare blocks past keepQueued: a burst the
// file's writer fell behind grows them (24-32 B a key at 1M keys loaded
// by redis-cli --pipe), and they would keep that room at rest. The
// caller holds wmu, drained the queue and got no kick for a heartbeat.
func (vm *Mirror) shrink(batch [][]queued) [][]queued {
	vm.mu.Lock()
	vm.pending.trim(keepQueued)
	vm.mu.Unlock()
	if cap(batch) > keepQueued/queueBlock {
		return nil
	}
	return batch
}

// writtenChunk is how many written changes the view is told of at once
// (tell): each chunk holds its write lock for a fraction of a
// millisecond, and written is made once with room for them (176 KB)
// and kept. A queue drained whole before its changes were told grew
// written to the queue's length, and kept the queued values on the heap
// till then: at 1M keys loaded by redis-cli --pipe, 227 of the 867
// bytes allocated a SET (BENCHMARKS.md, "Memory per key").
const writtenChunk = 1024

// keep adds c, written into the file, to written, and tells the view
// once written is full. The caller holds wmu.
func (vm *Mirror) keep(c view.Change, loaded bool) {
	if vm.written == nil {
		vm.written = make([]view.Change, 0, writtenChunk)
	}
	vm.written = append(vm.written, c)
	if len(vm.written) == writtenChunk {
		vm.tell(loaded)
	}
}

// tell tells the view that the changes in written, loaded (serve's load
// of the view) or queued (drain), are in the file (their values may stay
// there only) and empties written. The caller holds wmu.
func (vm *Mirror) tell(loaded bool) {
	if len(vm.written) == 0 || vm.st == nil {
		return
	}
	if loaded {
		vm.st.ViewFileLoaded(vm.values, vm.written)
	} else {
		vm.st.ViewFileWrittenLater(vm.values, vm.written)
	}
	clear(vm.written)
	vm.written = vm.written[:0]
}

// relink puts a new generation at the path when the file there is no
// longer the writer's (deleted with its runtime directory, or replaced):
// readers of the old file, marked superseded, move to the new one, and
// readers opening the path find it. It fails when the directory is gone
// (the view is off until it is back: run starts over every Retry) or
// another daemon holds the path now. The caller holds wmu.
func (vm *Mirror) relink() error {
	vm.log.Warn("view file: the path no longer names the file; making a new one", zap.String("view-file", vm.w.Path()))
	if err := vm.relock(); err != nil {
		return err
	}
	return vm.w.Compact()
}

// markReady sets the file's ready bit once the node has caught up; the
// heartbeat asks again until it has. The caller holds wmu.
func (vm *Mirror) markReady() {
	if vm.CaughtUp != nil && !vm.CaughtUp() {
		return
	}
	vm.w.SetReady(true)
	vm.ready.Store(1)
	vm.log.Info("view file ready", zap.String("view-file", vm.w.Path()), zap.Int("keys", vm.w.Len()))
}

// drain applies the queue until it is empty and returns when it last
// found it empty. Each group of the queue is a batch of the file (one
// end left open continues). batch is its scratch, returned for the next
// call. The caller holds wmu.
func (vm *Mirror) drain(batch [][]queued) ([][]queued, time.Time, error) {
	for {
		vm.mu.Lock()
		batch = vm.pending.take(batch)
		taken := time.Now()
		vm.mu.Unlock()
		if len(batch) == 0 {
			return batch, taken, nil
		}
		for _, b := range batch {
			for i := range b {
				if err := vm.applyQueued(b[i]); err != nil {
					// Not told: the file failed, and a new one's load must
					// not tell the view of changes it has not written yet.
					clear(vm.written)
					vm.written = vm.written[:0]
					return batch, taken, err
				}
				b[i] = queued{} // drop the references to the values
			}
		}
		vm.tell(false)
		vm.mu.Lock()
		vm.pending.giveBack(batch)
		vm.mu.Unlock()
		clear(batch) // the blocks are the queue's spares now
		batch = batch[:0]
	}
}

// applyQueued writes c, a change of the queue, into the file, ending the
// file's batch at the end of its group, and keeps it in written for the
// view when its value may stay in the file only. The caller holds wmu.
func (vm *Mirror) applyQueued(c queued) error {
	vm.w.BeginBatch()
	if err := vm.apply(c.Change); err != nil {
		return err
	}
	if c.last {
		vm.w.EndBatch()
	}
	if vm.ValuesInFile {
		vm.keep(c.Change, false)
	}
	return nil
}

// tryApply is apply without a rebuild: false when the change needs one.
func (vm *Mirror) tryApply(c view.Change) (bool, error) {
	if c.Deleted {
		return true, vm.apply(c) // a delete is in place
	}
	return vm.w.TryPut(c.Topic, c.Key, c.Tag, c.Value, fileStamp(c.Stamp))
}

func (vm *Mirror) apply(c view.Change) error {
	st := fileStamp(c.Stamp)
	if c.Deleted {
		return vm.w.Delete(c.Topic, c.Key, st)
	}
	return vm.w.Put(c.Topic, c.Key, c.Tag, c.Value, st)
}

// beat says the view is current as of asOf. The caller holds wmu.
func (vm *Mirror) beat(asOf time.Time) {
	if vm.Members != nil {
		vm.w.SetCluster(vm.Members())
	}
	vm.w.Heartbeat(asOf)
	vm.generation.Store(int64(vm.w.Generation()))
	vm.size.Store(int64(vm.w.Size()))
	vm.keys.Store(int64(vm.w.Len()))
}

// fail turns the view off after a write error. The caller holds wmu.
func (vm *Mirror) fail(err error) {
	vm.direct = false
	vm.ready.Store(0)
	vm.st.FollowView(nil, nil)
	vm.st.UnfileView() // the values back to the heap before the file goes
	vm.w.SetReady(false)
	vm.mu.Lock()
	vm.pending.reset()
	vm.mu.Unlock()
	vm.log.Error("view file off: readers get \"not ready\"; starting over later", zap.String("view-file", vm.w.Path()),
		zap.Duration("in", vm.Retry), zap.Error(err))
}

// Close stops following the store and closes the file (readers see "not
// ready": the daemon stopped). It is safe to call more than once.
func (vm *Mirror) Close() {
	vm.closeOnce.Do(func() {
		if vm.st != nil {
			vm.st.FollowView(nil, nil) // returns once no enqueue runs
			vm.st.UnfileView()         // the values back to the heap before the file goes
		}
		vm.wmu.Lock()
		defer vm.wmu.Unlock()
		vm.direct = false
		vm.ready.Store(0)
		if err := vm.w.Close(); err != nil {
			vm.log.Warn("closing the view file", zap.Error(err))
		}
		vm.lock.Close()
	})
}
