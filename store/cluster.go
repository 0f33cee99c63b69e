package store

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// These methods serve the cluster layer: what a node tells its peers it
// holds, and the records it sends them.

// Vector returns, for every origin this node holds records of, the highest
// seq it holds (its version vector; seqs are gap-free per origin, so the
// highest is also the highest contiguous).
//
// A record set aside as damaged and not back yet (see Lost) is not held:
// the vector stops before it, so that anti-entropy pulls it from a peer.
func (s *Store) Vector() map[uint64]uint64 { return s.lost.capVector(s.LogVector()) }

// LastSeq returns the highest seq of origin this node holds, 0 if none.
// A record set aside as damaged and not back yet is not held (as Vector).
func (s *Store) LastSeq(origin uint64) uint64 { return s.lost.cap(origin, s.LogLast(origin)) }

// VectorFeed is a reader of the changes to Vector: the origins whose
// highest seq held changed, so that a caller keeping its own copy of the
// vector (the cluster layer's digest sums) reads only those, not the
// whole vector. A store has one reader at a time: a new VectorFeed takes
// over, and the older one reports from then on that it cannot tell.
type VectorFeed struct {
	s     *Store
	token uint64
}

// VectorFeed starts a reader of the changes to Vector.
func (s *Store) VectorFeed() *VectorFeed { return &VectorFeed{s: s, token: s.origins.NewReader()} }

// Changes calls fn with every origin whose entry in Vector may have
// changed since the last call (appended to, moved on by a bootstrap, a
// record set aside as damaged or back; some more than once, some that
// did not change) and returns true. It returns false, calling fn for
// none, when it cannot tell (the first call, too many changes since the
// last one, a log truncated at recovery, a newer reader): then the caller
// takes the whole Vector again. Read an origin's LastSeq after fn gave
// it: a change after that read is in the next call. One caller at a time.
func (f *VectorFeed) Changes(fn func(origin uint64)) bool {
	return f.s.origins.Changes(f.token, fn)
}

// LogLast returns the highest seq of origin in this node's log, 0 if
// none: LastSeq, except that a record set aside as damaged does not stop
// it. It is how far the records go that this node can send on (its
// pushes to peers that hold the lost one already, its followers of new
// records): a damaged old record must not hold its origin's new ones
// back. ReadOrigin reads up to it and stops at the lost record.
func (s *Store) LogLast(origin uint64) uint64 {
	// Lock-free but while a bootstrap moves origins on (one at a time,
	// each gone for a moment): then it waits for the moves to end.
	if m := s.moves.Load(); m%2 == 0 {
		if last := s.origins.Last(origin); s.moves.Load() == m {
			return last
		}
	}
	s.moving.RLock()
	defer s.moving.RUnlock()
	return s.origins.Last(origin)
}

// LogVector is LogLast for every origin: Vector, lost records not
// counted out.
func (s *Store) LogVector() map[uint64]uint64 {
	s.moving.RLock()
	defer s.moving.RUnlock()
	return s.origins.Vector()
}

// Changed returns a channel that is closed at the next write to the store
// (or when it closes). Take the channel before looking at the store's
// state, then wait on it, so that no write falls in between.
func (s *Store) Changed() <-chan struct{} { return s.notify.wait() }

// OwnChanged is Changed for this node's own records only: it fires when
// this node publishes (not when a peer's record arrives).
func (s *Store) OwnChanged() <-chan struct{} { return s.ownNotify.wait() }

// ReadOrigin calls fn with the records of origin from seq from up to seq
// to (inclusive), in order, straight out of the log's map: a record is
// valid only while fn runs (copy it, or write it out, inside fn). It stops
// at the first seq past the log's end (LogLast) and returns the seq after
// the last record it passed to fn. A seq this node held but has recycled
// gives ErrRecycled; a record set aside as damaged and not back yet gives
// ErrLost (next is its seq: a caller that may skip it reads on from
// next+1), one given up (AcceptLost) ErrRecycled.
func (s *Store) ReadOrigin(origin, from, to uint64, fn func(record.Record) error) (next uint64, err error) {
	if s.closed.Load() {
		return from, ErrClosed
	}
	if from == 0 {
		return from, fmt.Errorf("%w: seq 0", ErrInvalid)
	}
	last := min(to, s.LogLast(origin))
	read := func(r record.Record) error {
		if r.Kind() == record.KindLost {
			return errLostSlot
		}
		return fn(r)
	}
	reread := uint64(0) // a placeholder read again: restored meanwhile?
	for next = from; next <= last; next++ {
		pos, ok := s.origins.Get(origin, next)
		if !ok {
			return next, fmt.Errorf("%w: origin %016x seq %d", ErrRecycled, origin, next)
		}
		_, err := s.readIndexed(pos, read)
		if errors.Is(err, ErrCorrupt) {
			if err = s.damagedAt(pos, err); err == nil {
				next-- // read it again: its placeholder, or the record back
				continue
			}
		}
		switch {
		case errors.Is(err, errLostSlot) && s.isLost(origin, next):
			return next, fmt.Errorf("%w: origin %016x seq %d", ErrLost, origin, next)
		case errors.Is(err, errLostSlot) && reread != next:
			reread = next // not lost any more: back (read it again), or given up
			next--
			continue
		case errors.Is(err, errLostSlot):
			// Lost to a damaged log and given up (AcceptLost): a peer that
			// lacks it too takes it as recycled, and bootstraps.
			return next, fmt.Errorf("%w: origin %016x seq %d was lost to a damaged log", ErrRecycled, origin, next)
		case errors.Is(err, ErrBeyondEnd):
			return next, nil // indexed, not yet committed: the next call gets it
		case err != nil:
			return next, err
		}
	}
	return next, nil
}

// errLostSlot stops a read at a lost record's placeholder.
var errLostSlot = errors.New("store: a lost record's placeholder")

// isLost says whether (origin, seq) is lost and wanted back.
func (s *Store) isLost(origin, seq uint64) bool {
	_, ok := s.lost.get(origin, seq)
	return ok
}

// Digest is a SHA-256 over the whole view, tombstones included, in (topic,
// key) order: two nodes with equal digests hold the same view.
func (s *Store) Digest() [32]byte { return s.view.Digest() }

// FollowView makes fn see every later change of the view, in the order the
// view applies them, whichever node the record came from, deletes
// included (view.Change.Deleted), and returns the view as it stood at that
// moment (tombstones included), so that a follower that applies the
// returned entries and then the changes misses nothing and sees nothing
// twice. fn runs under the view's write lock, on the goroutine applying a
// record: it must be quick (queue the change and return) and must not call
// the store. end, when not nil, runs (under the lock too) after the
// changes of one publish (a record, an atomic batch, the records of one
// PublishBatch) or of one settling of due instants are all given to fn:
// a follower that shows them together shows every batch whole. There is
// one follower; FollowView(nil, nil) stops it.
func (s *Store) FollowView(fn func(view.Change), end func()) iter.Seq[view.Change] {
	return s.view.FollowFrom(fn, end)
}

// ViewFileWritten tells the view that the follower wrote the changes cs
// into f, the shared view file, which then keeps the values the view need
// not (view.View.FileWritten). The caller is the follower's end, which
// runs under the view's lock.
func (s *Store) ViewFileWritten(f view.ValueFile, cs []view.Change) { s.view.FileWritten(f, cs) }

// ViewFileWrittenLater is ViewFileWritten for a caller that does not
// hold the view's lock.
func (s *Store) ViewFileWrittenLater(f view.ValueFile, cs []view.Change) {
	s.view.FileWrittenLater(f, cs)
}

// ViewFileLoaded is ViewFileWrittenLater for the changes FollowView
// returned (the view as it stood), which the follower wrote into f when
// it loaded the file (view.View.FileLoaded).
func (s *Store) ViewFileLoaded(f view.ValueFile, cs []view.Change) { s.view.FileLoaded(f, cs) }

// ViewValuesInFile is how many of the view's entries keep their value
// in the shared view file only (view.View.ValuesInFile).
func (s *Store) ViewValuesInFile() int { return s.view.ValuesInFile() }

// UnfileView copies every value the view keeps in the shared view file
// back to the heap: the follower calls it before it stops writing the
// file.
func (s *Store) UnfileView() { s.view.Unfile() }

// TimeEvents calls fn for each change of the view that no record
// brought (view.Change.Cause: an expiry, a scheduled record taking
// effect) from number from on (0: from the next one to come), and returns
// the number to ask for next and how many a follower that fell behind
// lost. Changed fires after each such event too. fn must not call the
// store.
func (s *Store) TimeEvents(from uint64, fn func(view.Change)) (next, lost uint64) {
	return s.view.TimeEvents(from, fn)
}

// SnapshotTo streams a snapshot of the view to w, for a peer that must
// bootstrap from it: straight from a clone of the view, with no file in
// between (the marks and the position it covers are taken as Snapshot
// takes them).
func (s *Store) SnapshotTo(w io.Writer) error {
	return s.SnapshotToVersion(w, record.Version2)
}

// SnapshotToVersion is SnapshotTo for a peer that reads snapshots up to
// version maxVersion (1: builds before time fields): while the view
// holds a time field, which only version 2 carries, it sends nothing and
// returns an error wrapping view.ErrSnapshotTooNew.
func (s *Store) SnapshotToVersion(w io.Writer, maxVersion int) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if s.viewPending.Load() {
		return errViewPending
	}
	covers, marks := s.snapshotMarks()
	return view.EncodeSnapshotUpTo(w, s.view, covers, marks, maxVersion)
}

// errViewPending refuses to send the snapshot of a view that waits for a
// peer's itself (ViewFromPeer): its marks claim records whose values it
// lacks.
var errViewPending = errors.New("store: this node's view waits for a peer's snapshot itself")

// Bootstrap takes a peer's snapshot, read from r as SnapshotTo streams it
// (from the link, as it arrives: no file), for a node that needs records
// it can no longer pull: the snapshot's entries are put into the view by
// the usual rule as they are read (no second view is built: the entries
// are held once), and once the whole snapshot is read and its CRC
// checked, for every origin it covers beyond what this node holds, the
// origin's sequence moves on to the snapshot's mark, so that catching up
// continues from there with records. The writers' lock is held only for
// that last step, and readers of Vector and LastSeq see the origins
// before it or after it, never some moved and some not: records appended
// meanwhile meet the snapshot's entries in the view by the same rule. A
// snapshot refused on the way (cut short, damaged) moves no origin; the
// entries read before it stay in the view, as records of the peer's put
// by the rule (r must deliver what the peer sent: the link checks each
// frame's MAC). The merged view is snapshotted at once, so a restart
// keeps it. It returns the origins it moved on.
func (s *Store) Bootstrap(r io.Reader) (map[uint64]uint64, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	marks, maxHLC, err := s.view.ApplySnapshot(r)
	if err != nil {
		return nil, err
	}
	moved, err := s.bootstrapLocked(marks, maxHLC)
	if err != nil {
		return moved, err
	}
	s.log.Info("bootstrapped from a peer's snapshot", zap.Int("keys", s.view.Len()), zap.Int("origins-moved", len(moved)))
	if s.viewPending.CompareAndSwap(true, false) {
		s.log.Info("the view lost at open is whole again from the peer's snapshot")
	}
	return moved, s.snapshot(true)
}

// bootstrapLocked is Bootstrap's last step, under the write lock, which
// a defer releases on every path, a panic's too (as publishLocked's): a
// lock left held would hang every later write.
func (s *Store) bootstrapLocked(marks map[uint64]uint64, maxHLC uint64) (map[uint64]uint64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	s.clock.Observe(s.boundStamp(maxHLC))
	moved, err := s.moveOrigins(marks)
	if err != nil {
		return moved, err
	}
	s.notify.notify()
	return moved, nil
}

// moveOrigins moves every origin of marks beyond what this node holds on
// to its mark, with moves odd meanwhile; a defer makes it even again and
// releases moving on every path, so that a panic on the way leaves no
// reader of LastSeq or Vector waiting for good. Under the write lock.
func (s *Store) moveOrigins(marks map[uint64]uint64) (map[uint64]uint64, error) {
	moved := map[uint64]uint64{}
	s.moving.Lock()
	s.moves.Add(1) // odd: LogLast waits for the moves
	defer func() {
		s.moves.Add(1)
		s.moving.Unlock()
	}()
	for origin, mark := range marks {
		if mark <= s.origins.Last(origin) {
			continue
		}
		if err := s.origins.Reset(origin, mark+1); err != nil {
			return moved, err
		}
		moved[origin] = mark
		if origin == s.origin && mark >= s.nextSeq {
			s.nextSeq = mark + 1
		}
	}
	return moved, nil
}

// CollectTombstones drops from the view (and so from later snapshots) the
// tombstones stamped before cutoff that every live node holds: held(origin)
// is the highest seq of origin that every live node holds, this one
// included. It returns how many it dropped; a snapshot follows. The caller
// (the daemon's --tombstone-grace) picks cutoff and says who is live; see
// store/view's gc.go for why that is safe.
func (s *Store) CollectTombstones(cutoff time.Time, held map[uint64]uint64) int {
	own := s.Vector()
	n := s.view.CollectTombstones(cutoff.UnixMilli(), func(origin, seq uint64) bool {
		return seq <= held[origin] && seq <= own[origin]
	})
	if n > 0 {
		s.kickSnapshot()
	}
	return n
}

// RaiseHorizon raises the view's horizon to at (view.View.RaiseHorizon):
// tombstones stamped before it may have been collected, here or by the
// peer whose snapshot this node took.
func (s *Store) RaiseHorizon(at time.Time) { s.view.RaiseHorizon(at.UnixMilli()) }

// Tombstones reports the tombstones the view holds and those collected
// since the store opened.
func (s *Store) Tombstones() (live int, collected uint64) {
	return s.view.Tombstones(), s.view.Collected()
}
