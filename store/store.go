package store

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/store/internal/cursors"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/internal/index"
	"github.com/cachecast/cachecast/store/internal/segment"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// Store is a node's durable log with its indexes, its key/value view and
// its consumer cursors.
//
// Concurrency: every method is safe for concurrent use. Writes (Publish,
// PublishBatch, AppendRecord) are serialized by one lock, which covers the
// copy into the map and the index entries but not the flush a sync-mode
// writer waits for; reads never take it.
type Store struct {
	opts Options
	log  *zap.Logger
	dir  string

	lock    *os.File
	meta    *segment.Meta
	seglog  *segment.Log
	topics  *index.Topics
	origins *index.Origins
	view    *view.View
	// batches are the batches the view waits for the end of, by origin;
	// guarded by wmu.
	batches map[uint64]*openBatch
	cursors *cursors.File
	clock   *record.Clock
	guard   clockGuard // remote stamps ahead of the local clock
	origin  uint64

	wmu     sync.Mutex // the write lock
	nextSeq uint64
	// written is publish's scratch list of the records it encoded, kept
	// for the next publish so that it allocates nothing; guarded by wmu.
	written []record.Record
	// entries and poss are indexAll's, reused under the write lock.
	entries []index.Entry
	poss    []int64
	// moving is held by Bootstrap while it moves origins on, and moves
	// is odd meanwhile: Vector and LastSeq read all the moves or none.
	moving sync.RWMutex
	moves  atomic.Uint64
	closed atomic.Bool

	notify    notifier // every write
	ownNotify notifier // writes of this node's own records

	flusher   *flusher
	retention *retention
	writeErr  atomic.Pointer[error] // the first write that failed on an I/O error
	brokenErr atomic.Pointer[error] // the first failed view apply or undo: log, indexes and view disagree

	// lost is the records set aside as damaged and wanted back from the
	// peers; damaged and repaired count them (repair.go).
	lost              lostSet
	damaged, repaired atomic.Uint64
	scrubTo           int64 // the scrub checks the log below this (replay checked the rest)
	scrubbed          atomic.Bool

	applyFailures atomic.Uint64         // committed records the view could not take
	undoFailures  atomic.Uint64         // failed writes that could not be taken back
	fullErr       atomic.Pointer[error] // the last write refused for want of space, until one passes or room is back

	// removedTo is the log position up to which the index preparers were
	// asked to remove dropped chunks' files (removeDropped).
	removedTo int64
	// quietEnd is the log's end at the last housekeeping round (rest).
	quietEnd int64

	snapMu     sync.Mutex // one snapshot at a time
	snapCovers atomic.Int64
	// snapDone wakes the writers a full log holds back for a snapshot
	// (awaitSnapshot) after each one; snapFails counts those that failed.
	snapDone  notifier
	snapFails atomic.Uint64
	// snapAside is where a damaged view snapshot was set aside at Open
	// (the view then rebuilt from the log); "" when none was.
	snapAside string
	// viewLost says the view could not be rebuilt at Open (ViewFromPeers);
	// viewPending that no peer's snapshot has been taken since: while it
	// is, no snapshot is written, so that a restart does not take the
	// partial view for a whole one.
	viewLost     bool
	viewPending  atomic.Bool
	snapDropped  uint64 // view.Dropped at the last snapshot; guarded by snapMu
	snapshotKick chan struct{}

	digests digests // the last view digest taken (digest.go)

	done chan struct{}
	wg   sync.WaitGroup
}

// File names inside the data directory.
const (
	lockName     = "LOCK"
	metaName     = "meta"
	logDirName   = "log"
	indexDirName = "index"
	cursorsName  = "cursors"
	snapshotName = "snapshot"
)

// Open opens the store in opts.Dir, creating it if needed, and recovers:
// the log is checked from its last flushed position and cut at the first
// bad record, the indexes are cut to match and rebuilt from the log, and
// the view is loaded from its snapshot and brought up to date from the
// log. Only one process may have a directory open (ErrLocked).
func Open(opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fsys.FileError("mkdir", opts.Dir, err)
	}
	s := &Store{
		opts:         opts,
		log:          log,
		dir:          opts.Dir,
		clock:        record.NewClock(opts.Now),
		guard:        clockGuard{max: opts.MaxClockOffset, origins: map[uint64]*originClock{}},
		snapshotKick: make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	if err := s.open(); err != nil {
		s.closeParts()
		return nil, err
	}
	s.flusher = newFlusher(s.seglog, opts, &s.closed, log)
	s.retention = &retention{
		bytes: opts.RetentionBytes, age: opts.RetentionAge, whenFull: opts.WhenFull,
		seglog: s.seglog, topics: s.topics, origins: s.origins, cursors: s.cursors,
		snapCovers: &s.snapCovers, kickSnapshot: s.kickSnapshot, log: log,
	}
	s.wg.Add(4)
	go s.flushLoop()
	go s.snapshotLoop()
	s.view.OnTimeEvent(s.notify.notify)
	go func() {
		defer s.wg.Done()
		s.view.RunTimes(s.done)
	}()
	go s.scrub(s.scrubTo)
	return s, nil
}

func (s *Store) open() error {
	var err error
	if s.lock, err = lockDir(filepath.Join(s.dir, lockName)); err != nil {
		return err
	}
	fresh, err := s.openMeta()
	if err != nil {
		return err
	}
	if !fresh && s.meta.SegmentSize() != s.opts.SegmentSize {
		s.log.Warn("keeping the segment size the directory was made with",
			zap.Int64("segment-size", s.meta.SegmentSize()), zap.Int64("asked", s.opts.SegmentSize))
	}
	if err := s.checkRestart(fresh); err != nil {
		return err
	}
	s.origin = s.meta.Get(segment.OffOrigin)
	s.meta.Put(segment.OffCapacity, uint64(s.opts.RetentionBytes))
	if s.seglog, err = segment.Open(filepath.Join(s.dir, logDirName), s.meta, s.opts.MaxMappedSegments, s.log); err != nil {
		return err
	}
	end := s.seglog.End()
	if err = s.openIndexes(); errors.Is(err, ErrCorrupt) {
		// The indexes are derived data: set the damaged ones aside and
		// rebuild them from the log.
		idir := filepath.Join(s.dir, indexDirName)
		// In nanoseconds: a second damage found in the same second (a
		// crash loop) must not find the name taken.
		aside := fmt.Sprintf("%s.broken-%d", idir, time.Now().UnixNano())
		s.log.Error("indexes damaged, rebuilding them from the log", zap.String("moved-to", aside), zap.Error(err))
		s.closeIndexes()
		if rerr := os.Rename(idir, aside); rerr != nil {
			return fsys.FileError("rename", idir, rerr)
		}
		s.meta.Put(segment.OffIndexed, 0)
		err = s.openIndexes()
	}
	if err != nil {
		return err
	}
	if err = s.topics.Truncate(end); err != nil {
		return err
	}
	if err = s.origins.Truncate(end); err != nil {
		return err
	}
	// Index chunks dropped by retention whose files a crash left under
	// their names point below the log's oldest record (which recovery
	// synced into the metafile): they go again.
	if err = s.topics.DropBefore(s.seglog.Oldest()); err != nil {
		return err
	}
	if err = s.origins.DropBefore(s.seglog.Oldest()); err != nil {
		return err
	}
	s.removeDropped(s.seglog.Oldest())
	// A snapshot being written when the process died is never read.
	if tmps, _ := filepath.Glob(filepath.Join(s.dir, snapshotName+"*"+fsys.TmpSuffix)); len(tmps) > 0 {
		for _, tmp := range tmps {
			os.Remove(tmp)
		}
	}
	if err = s.loadLost(); err != nil {
		return err
	}
	if err = s.loadView(); err != nil {
		return err
	}
	err = s.replay()
	s.seglog.ForgetChecked() // from here on every read checks the CRC
	if err != nil {
		return err
	}
	s.nextSeq = s.origins.Last(s.origin) + 1
	s.clock.Floor(s.meta.Get(segment.OffLastHLC))
	if s.cursors, err = cursors.Open(filepath.Join(s.dir, cursorsName), s.log); err != nil {
		return err
	}
	s.cursors.SetLimits(s.opts.MaxCursors, s.opts.MaxCursorsPerOwner)
	s.log.Info("store open",
		zap.String("dir", s.dir), zap.String("origin", fmt.Sprintf("%016x", s.origin)),
		zap.Int64("oldest", s.seglog.Oldest()), zap.Int64("end", end),
		zap.Int64("snapshot-covers", s.snapCovers.Load()), zap.Int("keys", s.view.Len()))
	return nil
}

// openMeta opens the metafile, made around the log's segment files when
// it was lost (findLostLog), and reports whether it is a new one.
func (s *Store) openMeta() (fresh bool, err error) {
	slots := s.opts.segmentsPerFile
	if slots == 0 {
		slots = segment.SlotsFor(s.opts.SegmentSize, s.opts.RetentionBytes)
	}
	metaPath := filepath.Join(s.dir, metaName)
	found, lost, err := s.findLostLog(metaPath)
	if err != nil {
		return false, err
	}
	if lost {
		slots = found.Slots
	}
	if s.meta, fresh, err = segment.OpenMeta(metaPath, s.opts.SegmentSize, slots, time.Now().Unix(), s.log); err != nil {
		return false, err
	}
	if lost {
		if err := s.meta.Adopt(found); err != nil {
			return false, err
		}
		s.log.Warn("the metafile was missing or empty: made a new one around the log's segment files, whose records recovery checks again; the node goes on as a new origin",
			zap.String("metafile", metaPath), zap.Int64("oldest", found.Oldest), zap.Int64("segments-a-file", found.Slots),
			zap.String("origin", fmt.Sprintf("%016x", s.meta.Get(segment.OffOrigin))))
	}
	return fresh, nil
}

// findLostLog reads the log's segment files when the metafile at path is
// missing or empty (deleted, or emptied by a bad restore) and the log is
// still there: lost says the metafile is to be made around them
// (Meta.Adopt), not taken for a new directory's, whose recovery would set
// the whole log aside. When the files cannot be read for it, the error
// names the metafile and what to do, and nothing is changed.
func (s *Store) findLostLog(path string) (f segment.Found, lost bool, err error) {
	if lost, err = segment.MetaLost(path); err != nil || !lost {
		return f, false, err
	}
	f, lost, err = segment.FindLog(filepath.Join(s.dir, logDirName), s.opts.SegmentSize)
	if err != nil {
		return f, false, fmt.Errorf("%w: metafile %s is missing or empty, and the log beside it cannot be read without it: %v. "+
			"Nothing was changed: start the node with the --segment-size the directory was made with, "+
			"or move the data directory aside to start the node afresh from its peers", ErrCorrupt, path, err)
	}
	return f, lost, nil
}

func (s *Store) openIndexes() error {
	idir := filepath.Join(s.dir, indexDirName)
	var err error
	if s.topics, err = index.OpenTopics(filepath.Join(idir, "topic"), s.opts.IndexChunkEntries, 8, s.log); err != nil {
		return err
	}
	s.origins, err = index.OpenOrigins(filepath.Join(idir, "origin"), s.opts.IndexChunkEntries, 8, s.log)
	return err
}

// closeIndexes closes both indexes; the pointers stay (a closed index
// answers ErrClosed or nothing), so that Stats after Close is safe.
func (s *Store) closeIndexes() {
	if s.topics != nil {
		s.topics.Close()
	}
	if s.origins != nil {
		s.origins.Close()
	}
}

// checkRestart keeps the promise that no (origin, seq) is ever used for
// two messages. A store found open (its last process did not Close it)
// after the machine rebooted may have lost records that were appended
// but not flushed, and the fan-out may have sent them to peers already:
// stamping new messages with those seqs would make two messages of one
// identity. So the node continues as a new origin; the old origin's
// records stay valid and keep replicating. Found open on the same boot
// (the process was killed, the machine was not), the page cache kept
// every write and the origin stays.
func (s *Store) checkRestart(fresh bool) error {
	cur, ok := segment.KernelBootID()
	last := s.meta.BootID()
	if !fresh && s.meta.Get(segment.OffOpen) != 0 && (!ok || cur != last) {
		origin, err := segment.NewOrigin()
		if err != nil {
			return err
		}
		s.log.Warn("the store was not closed before the machine restarted: continuing as a new origin, so that no (origin, seq) is reused for another message",
			zap.String("old-origin", fmt.Sprintf("%016x", s.meta.Get(segment.OffOrigin))),
			zap.String("origin", fmt.Sprintf("%016x", origin)))
		s.meta.Put(segment.OffOrigin, origin)
	}
	s.meta.SetBootID(cur)
	s.meta.Put(segment.OffOpen, 1)
	return s.meta.Sync()
}

// lockDir takes an exclusive, non-blocking flock on path.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fsys.FileError("open", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another process", ErrLocked, filepath.Dir(path))
		}
		return nil, fsys.FileError("flock", path, err)
	}
	return f, nil
}

// loadView reads the snapshot, if any. A log that has recycled segments
// needs its snapshot: without it the view would silently miss keys.
func (s *Store) loadView() error {
	path := filepath.Join(s.dir, snapshotName)
	oldest := s.seglog.Oldest()
	v, covers, _, err := view.ReadSnapshot(path, s.opts.Now)
	switch {
	case err == nil && covers >= oldest:
		s.view = v
		s.snapCovers.Store(covers)
		return nil
	case err == nil: // an older snapshot (restored, copied) than the log needs
		err = fmt.Errorf("%w: snapshot %s covers the log up to %d, but the log starts at %d", ErrCorrupt, path, covers, oldest)
		if s.opts.ViewFromPeers {
			return s.viewFromPeers(path, oldest, err)
		}
		return err
	case errors.Is(err, os.ErrNotExist) && oldest == 0:
		s.view = view.New()
		s.view.SetClock(s.opts.Now)
		return nil
	case s.opts.ViewFromPeers && oldest > 0 && (errors.Is(err, record.ErrCorrupt) || errors.Is(err, os.ErrNotExist)):
		return s.viewFromPeers(path, oldest, err)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: snapshot %s is missing and the log was recycled up to %d; the view cannot be rebuilt", ErrCorrupt, path, oldest)
	case errors.Is(err, record.ErrCorrupt) && oldest == 0:
		// The log holds every record: set the snapshot aside, as a
		// damaged log range is, and rebuild the view from the log.
		aside, aerr := setAside(s.dir, path)
		if aerr != nil {
			return fmt.Errorf("store: snapshot %s: %w; setting it aside: %w", path, err, aerr)
		}
		s.log.Warn("the view snapshot is damaged: set aside, rebuilding the view from the log",
			zap.String("snapshot", path), zap.String("moved-to", aside), zap.Error(err))
		s.snapAside = aside
		s.view = view.New()
		s.view.SetClock(s.opts.Now)
		return nil
	default:
		return fmt.Errorf("store: snapshot %s: %w (the log was recycled up to %d, so the view cannot be rebuilt from it: move the data directory aside and start the node afresh from its peers)", path, err, oldest)
	}
}

// viewFromPeers starts the view of a store whose snapshot is damaged (set
// aside) or missing while its log was recycled past the start: from what
// the log still holds (the replay applies it all), waiting for a peer's
// snapshot to bring the rest (Bootstrap ends the wait).
func (s *Store) viewFromPeers(path string, oldest int64, why error) error {
	if errors.Is(why, record.ErrCorrupt) || errors.Is(why, ErrCorrupt) {
		aside, err := setAside(s.dir, path)
		if err != nil {
			return fmt.Errorf("store: snapshot %s: %w; setting it aside: %w", path, why, err)
		}
		s.snapAside = aside
	}
	s.log.Warn("the view snapshot is damaged or missing and the log was recycled since: starting from what the log holds, the rest to come from a peer's snapshot",
		zap.String("snapshot", path), zap.String("moved-to", s.snapAside), zap.Int64("log-starts-at", oldest), zap.Error(why))
	s.viewLost = true
	s.viewPending.Store(true)
	s.view = view.New()
	s.view.SetClock(s.opts.Now)
	return nil
}

// ViewFromPeer says whether the view could not be rebuilt from this
// node's own files at Open (Options.ViewFromPeers), and whether it still
// waits for a peer's snapshot (Bootstrap); until one is taken its view
// lacks what the recycled part of the log held.
func (s *Store) ViewFromPeer() (lost, pending bool) { return s.viewLost, s.viewPending.Load() }

// setAside moves a damaged file of dir into dir/corrupt/ (renamed with
// the time), durably: both directories are synced.
func setAside(dir, path string) (string, error) {
	cdir := filepath.Join(dir, "corrupt")
	if err := os.MkdirAll(cdir, 0o750); err != nil {
		return "", fsys.FileError("mkdir", cdir, err)
	}
	to := filepath.Join(cdir, fmt.Sprintf("%s.%d.bad", filepath.Base(path), time.Now().Unix()))
	if err := os.Rename(path, to); err != nil {
		return "", fsys.FileError("rename", path, err)
	}
	if err := fsys.SyncDir(cdir); err != nil {
		return "", err
	}
	return to, fsys.SyncDir(dir)
}

// SnapshotSetAside is where a damaged view snapshot was set aside at Open
// (the view was rebuilt from the log); "" when none was.
func (s *Store) SnapshotSetAside() string { return s.snapAside }

// replay brings the indexes and the view up to the end of the log. The
// indexes are re-fed from the metafile's indexed mark (below it every
// entry was synced); entries they hold already are skipped.
func (s *Store) replay() error {
	indexed := min(int64(s.meta.Get(segment.OffIndexed)), s.topics.LastPos()+1, s.origins.LastPos()+1)
	covers := s.snapCovers.Load()
	from := max(min(indexed, covers), s.seglog.Oldest())
	from -= from % record.Align
	end := s.seglog.End()
	s.scrubTo = from
	var n int
	start := time.Now()
	for pos := from; pos < end; {
		// Each record is indexed where it lies, at, which is pos or the
		// start of a later segment when pos was a segment's unused tail.
		var indexErr error // the indexes', not the log's: never a record to set aside
		next, err := s.readIndexedAt(pos, func(r record.Record, at int64) error {
			// Most records after a crash are indexed already: asking the
			// indexes to refuse them cost two formatted errors a record.
			if at >= indexed && !(s.topics.Holds(r.Topic(), at) && s.origins.Holds(r.Origin(), r.Seq())) {
				if err := s.index(r, at); err != nil && !errors.Is(err, ErrDuplicate) {
					indexErr = fmt.Errorf("store: rebuilding the indexes at %d: %w", at, err)
					return indexErr
				}
			}
			if at >= covers {
				s.applyRecord(r, at)
			}
			s.clock.Floor(r.HLC())
			n++
			return nil
		})
		if indexErr != nil {
			return indexErr
		}
		if errors.Is(err, ErrCorrupt) {
			// Damage under the flushed position: set the record aside
			// (repair.go) and read its placeholder.
			if err := s.setAside(pos, err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		pos = next
	}
	if n > 0 {
		s.log.Info("replayed the log", zap.Int64("from", from), zap.Int64("to", end),
			zap.Int("records", n), zap.Duration("took", time.Since(start)))
	}
	return nil
}

// Origin is this node's origin ID.
func (s *Store) Origin() uint64 { return s.origin }

// Result is the outcome of one append.
type Result struct {
	record.Stamp
	// Pos is the record's position in this node's log.
	Pos int64
	// Durable is true when a flush covers the record (always, on success,
	// under FlushSync).
	Durable bool
}

// Publish stamps m with this node's origin, its next sequence number and
// the clock, appends it, indexes it and applies it to the view. Under
// FlushSync it returns once the record is durable.
func (s *Store) Publish(m *record.Message) (Result, error) {
	var r Result
	if err := s.publish(std1(m), std1r(&r)); err != nil {
		return Result{}, err
	}
	return r, nil
}

// std1 views one message as a batch without allocating a slice header on
// the heap for the common case.
func std1(m *record.Message) []record.Message { return unsafe.Slice(m, 1) }

// PublishBatch publishes the messages as one unit: all are appended or
// none is.
func (s *Store) PublishBatch(ms []record.Message) ([]Result, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	results := make([]Result, len(ms))
	if err := s.publish(ms, results); err != nil {
		return nil, err
	}
	return results, nil
}

// PublishBatchInto is PublishBatch into the caller's results, one for
// each of ms, so that a caller that publishes batch after batch (the
// Redis door's pipelined SETs) allocates none: at 16 messages a batch,
// the results were 640 bytes of garbage a batch.
func (s *Store) PublishBatchInto(ms []record.Message, results []Result) error {
	if len(results) != len(ms) {
		return fmt.Errorf("%w: %d results for %d messages", ErrInvalid, len(results), len(ms))
	}
	if len(ms) == 0 {
		return nil
	}
	return s.publish(ms, results)
}

// publish appends ms and fills results, which has the same length.
func (s *Store) publish(ms []record.Message, results []Result) error {
	for i := range ms {
		if err := ms[i].Validate(); err != nil {
			return err
		}
		if ms[i].CountOnEarlier > i {
			return fmt.Errorf("%w: message %d counts on message %d of its batch, not an earlier one", ErrInvalid, i, ms[i].CountOnEarlier-1)
		}
		if (i == 0 || ms[i].Topic != ms[i-1].Topic) && s.topics.Get(ms[i].Topic) == nil {
			if err := s.prepareTopic(ms[i].Topic); err != nil {
				return err
			}
		}
	}
	var deadline time.Time
	for {
		end, err := s.publishLocked(ms, results)
		if err == nil {
			return s.flusher.waitDurable(end, results) // outside the lock: the next publish need not wait for this flush
		}
		if !s.awaitSnapshot(err, &deadline) {
			return err
		}
	}
}

// publishLocked appends and applies ms under the write lock and returns
// the log's end after them. The lock is released by a defer, on every
// path, a panic's too: a lock left held would hang every later write.
func (s *Store) publishLocked(ms []record.Message, results []Result) (end int64, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	start := s.seglog.WritePos()
	recs := s.written[:0]
	hlc := s.clock.NowN(len(ms))
	err = fsys.GuardDoing("writing", "the log", func() error {
		for i := range ms {
			m := &ms[i]
			if err := s.retention.makeRoom(m.EncodedSize()); err != nil {
				return err
			}
			buf, pos, err := s.seglog.Reserve(m.EncodedSize())
			if err != nil {
				return err
			}
			st := record.Stamp{Origin: s.origin, Seq: s.nextSeq + uint64(i), HLC: hlc + uint64(i)}
			if j := m.CountOnEarlier; j > 0 { // an INCR after a SET or DEL in one MULTI
				m.CountOn, m.CountOnEarlier = results[j-1].Stamp, 0
			}
			record.Encode(buf, m, st)
			if len(ms) == 1 {
				if err := s.index(record.Record(buf), pos); err != nil {
					return err
				}
			}
			results[i] = Result{Stamp: st, Pos: pos}
			recs = append(recs, record.Record(buf))
		}
		if len(ms) > 1 {
			return s.indexAll(recs, results)
		}
		return nil
	})
	s.written = recs[:0]
	if err != nil {
		clear(recs)
		s.failed(err)
		s.undo(start)
		return 0, err
	}
	s.nextSeq += uint64(len(ms))
	s.seglog.Commit()
	s.applyWritten(ms, results, recs)
	clear(recs)
	end = s.seglog.End()
	s.afterWrite()
	s.ownNotify.notify()
	return end, nil
}

// applyWritten applies the records publish just committed to the view,
// as one group for the view's follower. Applied after the commit so that
// the view never shows what a reader of the log cannot find. A record in
// the segment being written (the writer keeps it mapped) is applied from
// the bytes publish encoded, with no read of the log (its pin, its checks
// and its CRC: BenchmarkPublishRandom1M); one in an earlier segment, which
// a batch crossing a segment's end leaves unpinned, is read back. Called
// under the write lock.
func (s *Store) applyWritten(ms []record.Message, results []Result, recs []record.Record) {
	seg := s.seglog.SegmentSize()
	cur := results[len(results)-1].Pos / seg
	if results[0].Pos/seg == cur && s.batches[s.origin] == nil && !together(ms) {
		// The common case, every record in the segment being written and
		// none of a together batch: the view takes them all under one
		// hold of its lock.
		if err := fsys.GuardDoing("reading", "the log", func() error {
			s.view.ApplyBatch(recs)
			return nil
		}); err != nil {
			s.broken(&s.applyFailures, fmt.Errorf("applying the records from %d to the view: %w", results[0].Pos, err))
		}
		return
	}
	if len(ms) > 1 {
		s.view.Hold() // the view's follower gets the publish as one group
	}
	err := fsys.GuardDoing("reading", "the log", func() error {
		for i := range ms {
			if ms[i].Key == "" && ms[i].BatchFollow == 0 && s.batches[s.origin] == nil {
				continue
			}
			if pos := results[i].Pos; pos/seg == cur {
				s.applyRecord(recs[i], pos)
			} else {
				s.applyAt(pos)
			}
		}
		return nil
	})
	if err != nil {
		s.broken(&s.applyFailures, fmt.Errorf("applying the records from %d to the view: %w", results[0].Pos, err))
	}
	if len(ms) > 1 {
		s.view.Release()
	}
}

// together reports whether a message of ms belongs to a together batch
// (record.Together), which the view gets whole with its last record.
func together(ms []record.Message) bool {
	for i := range ms {
		if ms[i].BatchFollow != 0 {
			return true
		}
	}
	return false
}

// AppendRecord appends a record first accepted by another node (or by
// this one, returned by a peer after a wipe): it checks the record,
// refuses a duplicate (ErrDuplicate) or a gap in the origin's sequence
// (ErrOutOfOrder), holds (ErrHeld) or refuses (ErrClockAhead) one stamped
// too far ahead of the local clock (see "Clocks" in the package doc), and
// otherwise appends its bytes unchanged.
func (s *Store) AppendRecord(raw []byte) (Result, error) {
	r, err := record.Decode(raw)
	if err != nil {
		return Result{}, err
	}
	if r == nil || len(r) != len(raw) && len(raw) != record.Padded(len(r)) {
		return Result{}, fmt.Errorf("%w: record of %d bytes in %d", ErrInvalid, len(r), len(raw))
	}
	if r.Kind() == record.KindLost {
		return Result{}, fmt.Errorf("%w: a lost record's placeholder never travels", ErrInvalid)
	}
	if !s.topics.Has(r.Topic()) {
		if err := s.prepareTopic(string(r.Topic())); err != nil {
			return Result{}, err
		}
	}
	var deadline time.Time
	res, end, err := s.appendRecordLocked(r)
	for err != nil && s.awaitSnapshot(err, &deadline) {
		res, end, err = s.appendRecordLocked(r)
	}
	if err != nil || end == 0 { // end 0: a lost record restored into its slot, no flush to wait for
		return res, err
	}
	return res, s.flusher.waitDurable(end, std1r(&res))
}

// appendRecordLocked is AppendRecord's part under the write lock, which
// a defer releases on every path (as publishLocked's); end is the log's
// end after the record, 0 for a restored one.
func (s *Store) appendRecordLocked(r record.Record) (Result, int64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return Result{}, 0, ErrClosed
	}
	last := s.origins.Last(r.Origin())
	expect := max(last, s.heldTail(r.Origin())) + 1
	switch {
	case r.Seq() <= last:
		if res, ok, err := s.restore(r); ok { // a record this node lost, back from a peer
			return res, 0, err
		}
		return Result{}, 0, fmt.Errorf("%w: origin %016x seq %d (held up to %d)", ErrDuplicate, r.Origin(), r.Seq(), last)
	case r.Seq() < expect:
		return Result{}, 0, fmt.Errorf("%w: origin %016x seq %d (held already)", ErrHeld, r.Origin(), r.Seq())
	case r.Seq() != expect:
		// Also for an origin this node has nothing of: its first record
		// must be seq 1. Starting an origin in the middle would leave the
		// seqs before it missing for good, with the vector saying they are
		// held; a node starts an origin mid-sequence only from a snapshot
		// (Bootstrap).
		return Result{}, 0, fmt.Errorf("%w: origin %016x seq %d after %d", ErrOutOfOrder, r.Origin(), r.Seq(), expect-1)
	}
	if err := s.admitStamp(r); err != nil {
		return Result{}, 0, err
	}
	res, end, err := s.appendRemote(r)
	if err == nil {
		s.releaseHeld()
	}
	return res, end, err
}

// appendRemote appends a checked record of another node (or one of this
// node's, back from a peer) and applies it; end is the log's end after
// it, for waitDurable. Called under the write lock.
func (s *Store) appendRemote(r record.Record) (res Result, end int64, err error) {
	start := s.seglog.WritePos()
	err = fsys.GuardDoing("writing", "the log", func() error {
		if err := s.retention.makeRoom(len(r)); err != nil {
			return err
		}
		buf, pos, err := s.seglog.Reserve(len(r))
		if err != nil {
			return err
		}
		copy(buf, r)
		res = Result{Stamp: r.Stamp(), Pos: pos}
		return s.index(record.Record(buf), pos)
	})
	if err != nil {
		s.failed(err)
		s.undo(start)
		return Result{}, 0, err
	}
	s.clock.Observe(r.HLC())
	if r.Origin() == s.origin && r.Seq() >= s.nextSeq {
		// Our own record, back from a peer after this node lost it (a
		// power loss under FlushAsync): never stamp that seq again.
		s.nextSeq = r.Seq() + 1
		defer s.ownNotify.notify()
	}
	s.seglog.Commit()
	if len(r.Key()) > 0 || r.BatchFollow() != 0 || s.batches[r.Origin()] != nil {
		s.applyAt(res.Pos)
	}
	end = s.seglog.End()
	s.afterWrite()
	return res, end, nil
}

func std1r(r *Result) []Result { return unsafe.Slice(r, 1) }

// failed remembers a write that failed on an I/O error (a fault on a
// mapped page: the file under the map is damaged): the store is not
// healthy any more, and says so until a restart recovers it.
func (s *Store) failed(err error) {
	if errors.Is(err, ErrIO) {
		s.writeErr.CompareAndSwap(nil, &err)
	}
	if errors.Is(err, ErrDiskFull) {
		s.fullErr.Store(&err)
	}
}

// DiskFull is nil unless the last write was refused with ErrDiskFull and
// the file system still lacks room for a segment; then it is that error.
// It clears once the room for the next segment is back (space freed, the
// file system grown), which it checks with statfs when asked and after a
// write that passes: a small write that still fits in the current segment
// does not clear it. Reads go on
// while the disk is full; health reports it (the daemon's /healthz).
func (s *Store) DiskFull() error {
	p := s.fullErr.Load()
	if p == nil {
		return nil
	}
	if s.roomForSegment() {
		s.fullErr.CompareAndSwap(p, nil)
		return nil
	}
	return *p
}

// roomForSegment reports whether the file system has room for the next
// segment: a small write that still fits in the current segment says
// nothing about the next one, which the writer allocates whole.
func (s *Store) roomForSegment() bool {
	var st unix.Statfs_t
	return unix.Statfs(s.opts.Dir, &st) == nil && int64(st.Bavail)*int64(st.Bsize) >= s.opts.SegmentSize
}

// index adds the record at pos to the topic and origin indexes.
// prepareTopic makes a new topic's index before the writers' lock is
// taken: its directory, file and fsyncs under the lock stalled every
// writer for milliseconds (BenchmarkPublishLatencyHousekeeping), for a
// local publish and for a peer's record alike.
func (s *Store) prepareTopic(topic string) error {
	if err := fsys.GuardDoing("creating", "the topic index", func() error { return s.topics.Prepare(topic) }); err != nil {
		if errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("store: creating the index of topic %q: %w", topic, err)
	}
	return nil
}

func (s *Store) index(r record.Record, pos int64) error {
	_, terr := s.topics.Append(r.Topic(), index.Entry{Pos: pos, Size: uint32(len(r)), TagHash: record.TagHash(r.Tag()), HLC: r.HLC()})
	if terr != nil && !errors.Is(terr, ErrDuplicate) {
		return terr
	}
	if err := s.origins.Put(r.Origin(), r.Seq(), pos); err != nil {
		return err
	}
	return terr
}

// indexAll is index of each record of a publish (this node's, in log
// order), each index's entries of the publish published together (a run
// of one topic at a time): one store of an index's length for a
// pipeline's SETs instead of one each.
func (s *Store) indexAll(recs []record.Record, results []Result) error {
	for i := 0; i < len(recs); {
		topic := recs[i].Topic()
		es := s.entries[:0]
		for ; i < len(recs) && bytes.Equal(recs[i].Topic(), topic); i++ {
			r := recs[i]
			es = append(es, index.Entry{Pos: results[i].Pos, Size: uint32(len(r)), TagHash: record.TagHash(r.Tag()), HLC: r.HLC()})
		}
		s.entries = es[:0]
		if _, err := s.topics.AppendAll(topic, es); err != nil {
			return err
		}
	}
	poss := s.poss[:0]
	for i := range results {
		poss = append(poss, results[i].Pos)
	}
	s.poss = poss[:0]
	return s.origins.PutAll(recs[0].Origin(), recs[0].Seq(), poss)
}

// undo drops a failed write: the log's bytes after start and the index
// entries that point at them.
func (s *Store) undo(start int64) {
	if err := s.topics.Truncate(start); err != nil {
		s.broken(&s.undoFailures, fmt.Errorf("undoing the topic index entries from %d: %w", start, err))
	}
	if err := s.origins.Truncate(start); err != nil {
		s.broken(&s.undoFailures, fmt.Errorf("undoing the origin index entries from %d: %w", start, err))
	}
	if err := s.seglog.Rollback(start); err != nil {
		s.broken(&s.undoFailures, fmt.Errorf("undoing the log write from %d: %w", start, err))
	}
}

// applyAt applies the committed record at pos to the view.
func (s *Store) applyAt(pos int64) {
	if _, err := s.seglog.Read(pos, func(r record.Record) error {
		s.applyRecord(r, pos)
		return nil
	}); err != nil {
		s.broken(&s.applyFailures, fmt.Errorf("applying the record at %d to the view: %w", pos, err))
	}
}

// openBatch is the records of a batch, from one origin, that the view has
// not been given yet: it gets them all at once with the last one.
type openBatch struct {
	recs []record.Record
	from int64 // log position of the first
}

// applyRecord applies r, at pos in the log, to the view, holding the
// records of a batch until its last one comes (records of one origin come
// in seq order). A batch that breaks off (its origin lost the tail in a
// crash and went on) is applied as far as it got, so every node ends with
// the same view. Called under the write lock, or alone during recovery.
func (s *Store) applyRecord(r record.Record, pos int64) {
	o := r.Origin()
	b := s.batches[o]
	if b != nil {
		last := b.recs[len(b.recs)-1]
		if r.Seq() != last.Seq()+1 || r.BatchFollow()+1 != last.BatchFollow() {
			s.view.ApplyBatch(b.recs)
			delete(s.batches, o)
			b = nil
		}
	}
	switch {
	case r.BatchFollow() > 0:
		if b == nil {
			if s.batches == nil {
				s.batches = make(map[uint64]*openBatch)
			}
			b = &openBatch{from: pos}
			s.batches[o] = b
		}
		b.recs = append(b.recs, r.Clone())
	case b != nil:
		s.view.ApplyBatch(append(b.recs, r))
		delete(s.batches, o)
	default:
		s.view.Apply(r)
	}
}

// batchMarks lowers covers and marks below the open batches, whose
// records the view does not hold yet: a snapshot must not claim them.
// Called under the write lock.
func (s *Store) batchMarks(covers int64, marks map[uint64]uint64) int64 {
	for o, b := range s.batches {
		covers = min(covers, b.from)
		if m, ok := marks[o]; ok && m >= b.recs[0].Seq() {
			marks[o] = b.recs[0].Seq() - 1
		}
	}
	return covers
}

// broken counts a failure that leaves the log, its indexes and the view
// disagreeing (a record in the log the view lacks, index entries or bytes
// of a failed write left behind): the store is unhealthy from then on,
// until a restart rebuilds the view and the indexes from the log.
func (s *Store) broken(counter *atomic.Uint64, err error) {
	counter.Add(1)
	s.brokenErr.CompareAndSwap(nil, &err)
	s.log.Error("the store no longer matches its log; restart to rebuild it", zap.Error(err))
}

// afterWrite wakes readers and the flusher. Called under the write lock.
func (s *Store) afterWrite() {
	if s.fullErr.Load() != nil && s.roomForSegment() {
		s.fullErr.Store(nil) // a write passed and the next segment fits: there is room again
	}
	s.meta.Put(segment.OffLastHLC, s.clock.Last())
	s.notify.notify()
	end := s.seglog.End()
	s.flusher.written(end)
	if end-s.snapCovers.Load() >= s.retention.snapshotBytes() {
		s.kickSnapshot()
	}
}

// Get returns the live value of (topic, key).
func (s *Store) Get(topic, key string) (view.Entry, bool) { return s.view.Get(topic, key) }

// GetInto is Get reading a value the view keeps in the view file only
// into buf, which it returns for the next read (view.View.GetInto).
func (s *Store) GetInto(buf []byte, topic, key string) (view.Entry, []byte, bool) {
	return s.view.GetInto(buf, topic, key)
}

// Counting is Get for a counter command: for a key without a value, the
// entry's Absence says what the key had last (view.View.Counting).
func (s *Store) Counting(topic, key string) (view.Entry, bool) { return s.view.Counting(topic, key) }

// GetMany looks up several (topics[i], keys[i]) at one instant, under one
// hold of the view's lock: a batch is seen whole or not at all; into
// entries and found, of len(keys) at least, the values the view keeps in
// the view file only read into buf, which it returns for the next call
// (see view.View.GetMany).
func (s *Store) GetMany(topics, keys []string, entries []view.Entry, found []bool, buf []byte) []byte {
	return s.view.GetMany(topics, keys, entries, found, buf)
}

// WarmReads loads what reads of (topics[i], keys[i]) that follow soon
// will, so that their cache misses overlap (view.View.WarmReads).
func (s *Store) WarmReads(topics, keys []string) { s.view.WarmReads(topics, keys) }

// PendingKey lists the records of (topic, key) not in force yet.
func (s *Store) PendingKey(topic, key string) []view.PendingRecord {
	return s.view.PendingKey(topic, key)
}

// Pending lists the records of topic that are not in force yet (scheduled
// ones and cancels), by key, for keys after after, at most limit keys.
func (s *Store) Pending(topic, after string, limit int) []view.PendingRecord {
	return s.view.Pending(topic, after, limit)
}

// Expiring walks at most scan keys of topic after after, and returns
// those whose value in force expires (view.View.Expiring).
func (s *Store) Expiring(topic, after string, scan int) (keys []view.KeyedEntry, walked int, next string) {
	return s.view.Expiring(topic, after, scan)
}

// Keys lists live keys of a topic in order, after the given key, with the
// given prefix, at most limit of them.
func (s *Store) Keys(topic, prefix, after string, limit int) []string {
	return s.view.Keys(topic, prefix, after, limit)
}

// Topics lists every topic this node holds, with its live keys and the
// number of messages its index has seen.
func (s *Store) Topics() []view.TopicInfo {
	byName := map[string]view.TopicInfo{}
	for _, t := range s.view.Topics() {
		byName[t.Name] = t
	}
	for _, name := range s.topics.Names() {
		t := byName[name]
		t.Name = name
		if ti := s.topics.Get(name); ti != nil {
			t.Messages = ti.Len()
		}
		byName[name] = t
	}
	out := make([]view.TopicInfo, 0, len(byName))
	for _, t := range byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stats are figures about the store for status pages and metrics.
type Stats struct {
	Origin         uint64
	Flush          FlushMode
	Segments       int   // retained by the log, the one being written included
	MappedSegments int   // mapped, the next ones made ready ahead included (segment.Log.Counts)
	LogBytes       int64 // retained: WritePos - OldestPos
	WritePos       int64
	FlushedPos     int64
	OldestPos      int64
	SnapshotPos    int64
	Records        uint64 // retained in the log (all topics)
	Keys           int
	LastFlush      time.Duration
	// ApplyFailures counts committed records the view could not take,
	// UndoFailures failed writes that could not be taken back; either
	// makes the store unhealthy until a restart.
	ApplyFailures, UndoFailures uint64
}

// Stats returns the store's current figures.
func (s *Store) Stats() Stats {
	segs, mapped := s.seglog.Counts()
	end, oldest := s.seglog.End(), s.seglog.Oldest()
	return Stats{
		Origin:         s.origin,
		Flush:          s.opts.Flush,
		Segments:       segs,
		MappedSegments: mapped,
		LogBytes:       end - oldest,
		WritePos:       end,
		FlushedPos:     s.seglog.Flushed(),
		OldestPos:      oldest,
		SnapshotPos:    s.snapCovers.Load(),
		Records:        s.retainedRecords(),
		Keys:           s.view.Len(),
		LastFlush:      time.Duration(s.flusher.last.Load()),
		ApplyFailures:  s.applyFailures.Load(),
		UndoFailures:   s.undoFailures.Load(),
	}
}

// retainedRecords counts the records the topic indexes still reach.
func (s *Store) retainedRecords() uint64 {
	var n uint64
	for _, name := range s.topics.Names() {
		if ti := s.topics.Get(name); ti != nil {
			n += ti.Len() - ti.First()
		}
	}
	return n
}

// Healthy returns nil, or why the store cannot be trusted to take writes:
// the last flush failed, or unflushed data has waited far too long.
func (s *Store) Healthy() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if werr := s.writeErr.Load(); werr != nil {
		return fmt.Errorf("store: a write failed on an i/o error (restart to recover the log): %w", *werr)
	}
	if berr := s.brokenErr.Load(); berr != nil {
		return fmt.Errorf("store: the view or an index no longer matches the log (restart to rebuild them): %w", *berr)
	}
	return s.flusher.unhealthy()
}

// Flush makes everything appended so far durable.
func (s *Store) Flush() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.flusher.flush()
}

// flushLoop is the flusher's goroutine: besides its flushes, every
// FlushInterval it releases the held records that are due, flushes,
// syncs the metafile, and about once a second does the housekeeping.
func (s *Store) flushLoop() {
	defer s.wg.Done()
	lastHousekeeping := time.Now()
	s.flusher.run(s.done, func() {
		s.releaseDue()
		s.flusher.flush()
		oldest := s.seglog.Oldest() // the sync writes this or later
		if err := s.meta.Sync(); err != nil {
			s.log.Warn("syncing the metafile failed", zap.Error(err))
		} else {
			s.removeDropped(oldest)
		}
		if time.Since(lastHousekeeping) < time.Second {
			return
		}
		lastHousekeeping = time.Now()
		s.housekeeping()
	})
}

// removeDropped has the index preparers rename free or delete the files
// of the index chunks retention dropped, up to the log's oldest position
// upTo, once the metafile says the log no longer holds what they point
// to (see index.Topics.RemoveDropped): none of it is on the writer's
// path. Open's goroutine, then the flusher's.
func (s *Store) removeDropped(upTo int64) {
	if upTo <= s.removedTo {
		return
	}
	s.removedTo = upTo
	s.topics.RemoveDropped(upTo)
	s.origins.RemoveDropped(upTo)
}

// syncIndexes syncs both indexes and then records in the metafile how far
// they are durable.
func (s *Store) syncIndexes() error {
	upTo := s.seglog.End()
	if err := s.topics.Sync(); err != nil {
		s.log.Warn("syncing topic indexes failed", zap.Error(err))
		return err
	}
	if err := s.origins.Sync(); err != nil {
		s.log.Warn("syncing origin indexes failed", zap.Error(err))
		return err
	}
	s.meta.Put(segment.OffIndexed, uint64(upTo))
	return nil
}

// snapshotLoop writes view snapshots when asked, apart from the flusher
// so that a big view never delays a sync-mode writer's flush.
func (s *Store) snapshotLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case <-s.snapshotKick:
		}
		if err := s.Snapshot(); err != nil {
			s.log.Warn("snapshot failed", zap.Error(err))
		}
	}
}

// housekeeping runs about once a second: index syncs, snapshots when the
// log has grown, retention by age.
func (s *Store) housekeeping() {
	s.syncIndexes()
	if err := s.cursors.Sync(); err != nil {
		s.log.Warn("syncing cursors failed", zap.Error(err))
	}
	grown := s.seglog.End() - s.snapCovers.Load()
	if grown > 0 && time.Since(s.lastSnapshotTime()) > s.opts.SnapshotInterval {
		s.kickSnapshot()
	}
	if s.opts.RetentionAge > 0 {
		s.retireAged()
	}
	s.rest()
}

// rest drops the log's and the indexes' pages the writer keeps in the
// resident set (its segment, the windows faulted in ahead, the index
// chunks it writes and those made ahead) once the log's end is where the
// last round found it, a second or more without a write, and every round
// after while it stays there (dropping what a reader mapped meanwhile):
// at rest the daemon holds its view, not the pages of its log
// (segment.Log.Rest, index's release.go). The flusher's goroutine.
func (s *Store) rest() {
	end := s.seglog.End()
	quiet := end == s.quietEnd
	s.quietEnd = end
	if !quiet {
		return
	}
	s.seglog.Rest()
	s.topics.Rest()
	s.origins.Rest()
}

func (s *Store) lastSnapshotTime() time.Time {
	st, err := os.Stat(filepath.Join(s.dir, snapshotName))
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// retireAged recycles sealed segments older than RetentionAge that
// nothing needs any more.
func (s *Store) retireAged() {
	upTo := s.retention.agedUpTo(time.Now())
	if upTo < 0 {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return
	}
	floor, _ := s.retention.floor()
	if _, err := s.retention.recycleTo(min(upTo, floor)); err != nil {
		s.log.Warn("recycling aged segments failed", zap.Error(err))
	}
}

// awaitSnapshot is a write's back-pressure when the log is full and only
// the view's snapshot holds its oldest segment back (err is a
// snapshotBehind; the refusal asked for a snapshot): it waits, holding no
// lock, for a snapshot to cover more of the log than at the refusal, and
// says whether to try the write again. It gives up, and the write returns
// err, on any other error, when the view waits for a peer's snapshot (no
// snapshot is written meanwhile), when a snapshot fails, and once the
// deadline passes (set at the write's first wait: fullWait from then).
// At Close it says to try again, which finds the store closed.
func (s *Store) awaitSnapshot(err error, deadline *time.Time) bool {
	var behind *snapshotBehind
	if !errors.As(err, &behind) || s.viewPending.Load() {
		return false
	}
	if deadline.IsZero() {
		*deadline = time.Now().Add(cmp.Or(s.opts.fullWait, defaultFullWait))
	}
	timer := time.NewTimer(time.Until(*deadline))
	defer timer.Stop()
	fails := s.snapFails.Load()
	s.kickSnapshot() // again: the one the refusal asked for may have failed since
	for {
		done := s.snapDone.wait() // before the loads below: a snapshot after them wakes it
		switch {
		case s.snapCovers.Load() > behind.covers:
			return true
		case s.snapFails.Load() != fails:
			return false
		}
		select {
		case <-done:
		case <-s.done:
			return true
		case <-timer.C:
			return s.snapCovers.Load() > behind.covers
		}
	}
}

func (s *Store) kickSnapshot() {
	select {
	case s.snapshotKick <- struct{}{}:
	default:
	}
}

// Snapshot writes the view's snapshot now and records the log position it
// covers, which lets retention recycle the segments before it.
func (s *Store) Snapshot() error { return s.snapshot(false) }

// snapshotMarks takes the log position a snapshot covers and its
// per-origin marks, under the writers' lock.
func (s *Store) snapshotMarks() (covers int64, marks map[uint64]uint64) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	covers = s.seglog.End()
	marks = s.Vector() // not past a record lost to a damaged log (repair.go)
	return s.batchMarks(covers, marks), marks
}

// snapshot writes the snapshot; unless forced, not when the log has not
// moved since the last one.
func (s *Store) snapshot(force bool) error {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.viewPending.Load() {
		return nil // a partial view: the next Open must not take it for whole
	}
	// Everything below covers is in the view already; the snapshot may
	// hold more (writes applied while it is written), which replaying them
	// again on restart does not change.
	covers, marks := s.snapshotMarks()
	dropped := s.view.Dropped() + s.view.Collected() // values and tombstones the snapshot holds and the view no longer
	if !force && covers == s.snapCovers.Load() && dropped == s.snapDropped && s.lastSnapshotTime() != (time.Time{}) {
		return nil
	}
	defer s.snapDone.notify()
	if err := view.WriteSnapshot(filepath.Join(s.dir, snapshotName), s.view, covers, marks); err != nil {
		s.snapFails.Add(1)
		return err
	}
	s.snapCovers.Store(covers)
	s.snapDropped = dropped
	s.meta.SetPos(segment.OffWatermark, covers)
	return s.meta.Sync()
}

// Cursor returns a durable named cursor: the topic it reads and the offset
// of the next message.
func (s *Store) Cursor(name string) (topic string, offset uint64, ok bool) {
	return s.cursors.Get(name)
}

// SetCursor records a durable named cursor. It is synced with the next
// housekeeping pass (about a second): a crash may roll it back a little,
// which redelivers, never skips.
func (s *Store) SetCursor(name, topic string, offset uint64) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.cursors.Set(name, topic, offset)
}

// CursorInfo is one durable named cursor.
type CursorInfo struct {
	Name   string
	Topic  string
	Offset uint64
	// Owner is the user ID that created the cursor, when Owned (a cursor
	// set by the store itself, or written by an older version, has none).
	Owner uint32
	Owned bool
	// End is the topic's next offset now: End-Offset messages wait for
	// the cursor (0 when the cursor is at or past the end).
	End uint64
}

// Lag is the number of messages of the topic past the cursor.
func (c CursorInfo) Lag() uint64 {
	if c.End > c.Offset {
		return c.End - c.Offset
	}
	return 0
}

// Cursors lists the durable cursors, sorted by name.
func (s *Store) Cursors() []CursorInfo {
	var out []CursorInfo
	for _, c := range s.cursors.List() {
		out = append(out, s.cursorInfo(c))
	}
	return out
}

// LookupCursor returns one durable cursor as Cursors lists it.
func (s *Store) LookupCursor(name string) (CursorInfo, bool) {
	c, ok := s.cursors.Lookup(name)
	if !ok {
		return CursorInfo{}, false
	}
	return s.cursorInfo(c), true
}

func (s *Store) cursorInfo(c cursors.Entry) CursorInfo {
	ci := CursorInfo{Name: c.Name, Topic: c.Topic, Offset: c.Offset, Owner: c.Owner, Owned: c.Owned}
	if ti := s.topics.Get(c.Topic); ti != nil {
		ci.End = ti.Len()
	}
	return ci
}

// SetCursorAs creates or moves a durable cursor for the user uid, who owns
// the cursors it creates. Moving a cursor another user owns is ErrNotOwner
// unless override is set (an admin); a new cursor past MaxCursors or
// MaxCursorsPerOwner is ErrCursorLimit. Synced as SetCursor is.
func (s *Store) SetCursorAs(uid uint32, override bool, name, topic string, offset uint64) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.cursors.SetAs(cursors.User(uid, override), name, topic, offset)
}

// DeleteCursorAs removes a durable cursor for the user uid: ErrNotOwner
// when another user owns it and override is not set. Removing an unknown
// one is not an error.
func (s *Store) DeleteCursorAs(uid uint32, override bool, name string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.cursors.DeleteAs(cursors.User(uid, override), name)
}

// DeleteCursor removes a durable cursor; removing an unknown one is not an
// error. Retention no longer waits for it.
func (s *Store) DeleteCursor(name string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.cursors.Delete(name)
}

// Close flushes, writes the snapshot, and closes every file. It waits for
// no reader: a TopicReader blocked in Next returns ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	if s.closed.Swap(true) {
		s.wmu.Unlock()
		return ErrClosed
	}
	s.wmu.Unlock()
	close(s.done)
	s.wg.Wait()
	s.notify.notify()
	s.ownNotify.notify()
	s.flusher.wakeAll()

	var errs []error
	errs = append(errs, s.flusher.flush(), s.closeSnapshot())
	if errors.Join(errs...) == nil {
		s.meta.Put(segment.OffOpen, 0) // closed cleanly: nothing can be lost
	}
	errs = append(errs, s.closeParts())
	return errors.Join(errs...)
}

// closeSnapshot writes the snapshot at Close. On a disk too full for it
// the previous snapshot stays (the new one is written beside it and
// renamed over it only once whole), and with the log it still holds every
// record: that is logged, not an error, so a clean stop on a nearly full
// disk stays clean.
func (s *Store) closeSnapshot() error {
	if s.viewPending.Load() {
		s.log.Warn("stopped before a peer's snapshot made the view whole: no snapshot written, the next start takes one from a peer again")
		return nil
	}
	err := s.Snapshot()
	if errors.Is(err, ErrDiskFull) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		s.log.Warn("no room for the view snapshot at close: the previous snapshot is kept, and the log holds what it lacks",
			zap.String("dir", s.dir), zap.Error(err))
		return nil
	}
	return err
}

// closeParts closes whatever is open, in reverse order of opening.
func (s *Store) closeParts() error {
	var errs []error
	if s.cursors != nil {
		errs = append(errs, s.cursors.Sync(), s.cursors.Close())
	}
	if s.origins != nil && s.topics != nil && s.meta != nil && s.seglog != nil {
		errs = append(errs, s.syncIndexes())
	}
	s.closeIndexes()
	if s.seglog != nil {
		errs = append(errs, s.seglog.Close())
	}
	if s.meta != nil {
		errs = append(errs, s.meta.Sync(), s.meta.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}

// notifier wakes readers waiting for new records. It makes a channel only
// when someone waits, so a write with no reader waiting allocates nothing,
// and takes no lock either: waiting says whether there is a channel. A
// reader that checks for records after wait (the order every waiter
// follows) misses none: the writer moves the log's end before it loads
// waiting, the reader stores waiting before it loads the end.
type notifier struct {
	mu      sync.Mutex
	ch      chan struct{}
	waiting atomic.Bool // ch != nil
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
		n.waiting.Store(true)
	}
	return n.ch
}

func (n *notifier) notify() {
	if !n.waiting.Load() {
		return
	}
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
		n.waiting.Store(false)
	}
	n.mu.Unlock()
}
