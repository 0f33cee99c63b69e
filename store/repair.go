package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/internal/segment"
	"github.com/cachecast/cachecast/store/record"
)

// Repairing a damaged log from the fleet.
//
// A record of the log that fails its checks (a bad sector, a stray write:
// any damage under the flushed position, which recovery does not scan) is
// found by the scrub that walks the retained log after Open, by the
// replay, or by whichever reader meets it. The indexes still know the
// record: its place and size (topic index) and its (origin, seq) (origin
// index). So the store copies the slot's bytes aside to corrupt/ (synced,
// with the directory), notes the record in the lost file, and overwrites
// the slot with a placeholder of the same size (record.KindLost: the
// topic, origin and seq, zeros for the rest), so that the log reads on
// past it and every reader skips it (a subscriber past it continues).
//
// The records of a node's log are replicated, so a peer holds the lost
// one, its origin's own records included. Until it is back, LastSeq and
// Vector say this node holds its origin only up to the seq before it
// (LogLast and LogVector do not: what reads the log on, pushes and
// followers, goes past it, and ReadOrigin answers ErrLost at it):
// anti-entropy then pulls it from any peer that has it, and AppendRecord,
// seeing a lost (origin, seq), writes the record back into its slot (its
// bytes are the same everywhere, so it fits exactly), applies it to the
// view and drops it from the lost file; the log, its indexes and its
// offsets are as they were before the damage. Where no peer holds it,
// AcceptLost gives it up: the placeholder stays, the vector goes on past
// it, and a peer that lacks it too is answered as for a recycled record
// (it bootstraps from a snapshot).
//
// What it does not do: a record that is back is not delivered again to
// the topic readers (subscribers, groups) that passed its offset while it
// was lost (the daemon's follower of new records, the Redis door's
// tracking and pub/sub, is told it when it is back); a given-up record
// never travels, so a peer that lacks it too bootstraps from a snapshot.
// A replica that lost a record of its peer's acknowledges the peer's
// records only up to it, so the peer's --replication sync writes wait
// for it to be back. The scrub walks the log once, after Open; damage
// that appears later is found by the reader that meets it.
//
// The lost file (<dir>/lost) is JSON, written atomically:
//
//	{"lost":[{"origin":..,"seq":..,"topic":"..","pos":..,"size":..,
//	          "segment":"..","offset":..,"copied_to":"..","found":"<RFC 3339>"}]}
//
// Open reads it and checks each entry against its slot: a placeholder
// stays lost, the record itself (restored before a crash) is dropped,
// anything else is set aside again.

// lostName is the lost file's name in the store's directory.
const lostName = "lost"

// LostRecord is a record of this node's log that was found damaged and set
// aside, and that has not come back from a peer yet.
type LostRecord struct {
	Origin uint64 `json:"origin"`
	Seq    uint64 `json:"seq"`
	Topic  string `json:"topic"`
	// Pos and Size are the record's slot in the log.
	Pos  int64  `json:"pos"`
	Size uint32 `json:"size"`
	// Segment and Offset are where the slot is on disk.
	Segment string `json:"segment"`
	Offset  int64  `json:"offset"`
	// CopiedTo is the copy of the damaged bytes in corrupt/.
	CopiedTo string    `json:"copied_to"`
	Found    time.Time `json:"found"`
}

type lostKey struct{ origin, seq uint64 }

// lostSet is the records set aside and wanted back. Changed under the
// store's write lock; read from any goroutine (LastSeq, Vector).
type lostSet struct {
	n     atomic.Int64 // len(recs): the fast path of LastSeq and Vector
	mu    sync.Mutex
	recs  map[lostKey]LostRecord
	first map[uint64]uint64 // origin -> its lowest lost seq
}

func (l *lostSet) get(o, seq uint64) (LostRecord, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.recs[lostKey{o, seq}]
	return r, ok
}

// set replaces the records by recs, and returns the origins whose first
// lost seq changed (their entry in Vector may have).
func (l *lostSet) set(recs map[lostKey]LostRecord) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.first
	l.recs = recs
	l.first = map[uint64]uint64{}
	for k := range recs {
		if f, ok := l.first[k.origin]; !ok || k.seq < f {
			l.first[k.origin] = k.seq
		}
	}
	l.n.Store(int64(len(recs)))
	var changed []uint64
	for o, f := range l.first {
		if g, ok := old[o]; !ok || g != f {
			changed = append(changed, o)
		}
	}
	for o := range old {
		if _, ok := l.first[o]; !ok {
			changed = append(changed, o)
		}
	}
	return changed
}

// setLost replaces the lost records by recs, and puts the origins whose
// entry in Vector that moves in its change feed. Under the write lock.
func (s *Store) setLost(recs map[lostKey]LostRecord) {
	for _, o := range s.lost.set(recs) {
		s.origins.NoteChanged(o)
	}
}

// with returns a copy of the records with r added (add) or removed.
func (l *lostSet) with(r LostRecord, add bool) map[lostKey]LostRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := maps.Clone(l.recs)
	if out == nil {
		out = map[lostKey]LostRecord{}
	}
	if add {
		out[lostKey{r.Origin, r.Seq}] = r
	} else {
		delete(out, lostKey{r.Origin, r.Seq})
	}
	return out
}

// cap lowers last, origin's highest seq held, below its first lost seq.
func (l *lostSet) cap(origin, last uint64) uint64 {
	if l.n.Load() == 0 {
		return last
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.first[origin]; ok && f <= last {
		return f - 1
	}
	return last
}

// capVector applies cap to every origin of v.
func (l *lostSet) capVector(v map[uint64]uint64) map[uint64]uint64 {
	if l.n.Load() == 0 {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for o, f := range l.first {
		if last, ok := v[o]; ok && f <= last {
			if f == 1 {
				delete(v, o)
			} else {
				v[o] = f - 1
			}
		}
	}
	return v
}

func (l *lostSet) list() []LostRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Collect(maps.Values(l.recs))
	slices.SortFunc(out, func(a, b LostRecord) int {
		if a.Origin != b.Origin {
			return cmpU64(a.Origin, b.Origin)
		}
		return cmpU64(a.Seq, b.Seq)
	})
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lostFile is the lost file's content.
type lostFile struct {
	Lost []LostRecord `json:"lost"`
}

// decodeLostFile parses the lost file; entries that cannot name a slot
// are an error.
func decodeLostFile(b []byte) ([]LostRecord, error) {
	var f lostFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: lost file: %v", ErrCorrupt, err)
	}
	for _, r := range f.Lost {
		if r.Origin == 0 || r.Seq == 0 || r.Pos < 0 || r.Pos%record.Align != 0 || r.Size < record.HeaderSize || r.Topic == "" {
			return nil, fmt.Errorf("%w: lost file: entry %+v", ErrCorrupt, r)
		}
	}
	return f.Lost, nil
}

// writeLost makes recs the lost set, on disk first (atomically; the file
// goes when the set is empty) and then in memory. Under the write lock.
func (s *Store) writeLost(recs map[lostKey]LostRecord) error {
	path := filepath.Join(s.dir, lostName)
	if len(recs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fsys.FileError("remove", path, err)
		}
	} else {
		f := lostFile{Lost: slices.Collect(maps.Values(recs))}
		b, err := json.Marshal(f)
		if err != nil {
			return err
		}
		if err := fsys.CreateAtomic(path, fsys.WriteSynced(b)); err != nil {
			return err
		}
	}
	if err := fsys.SyncDir(s.dir); err != nil {
		return err
	}
	s.setLost(recs)
	return nil
}

// loadLost reads the lost file at Open and checks each entry against its
// slot (see the top of this file).
func (s *Store) loadLost() error {
	path := filepath.Join(s.dir, lostName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fsys.FileError("read", path, err)
	}
	entries, err := decodeLostFile(b)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, path)
	}
	recs := map[lostKey]LostRecord{}
	var again []int64
	for _, lr := range entries {
		if lr.Pos < s.seglog.Oldest() {
			continue // recycled since: nothing to repair
		}
		switch kind, err := s.slotKind(lr); {
		case err == nil && kind == record.KindLost:
			recs[lostKey{lr.Origin, lr.Seq}] = lr
		case err == nil:
			s.log.Info("a lost record was back before the restart", zap.String("origin", fmt.Sprintf("%016x", lr.Origin)), zap.Uint64("seq", lr.Seq))
		default:
			again = append(again, lr.Pos) // the placeholder never made it to the disk
		}
	}
	if err := s.writeLost(recs); err != nil {
		return err
	}
	for _, pos := range again {
		if err := s.setAside(pos, errors.New("listed in the lost file")); err != nil {
			return err
		}
	}
	return nil
}

// slotKind is the kind of the valid record in lr's slot with lr's
// (origin, seq), or an error.
func (s *Store) slotKind(lr LostRecord) (record.Kind, error) {
	var kind record.Kind
	_, err := s.readIndexed(lr.Pos, func(r record.Record) error {
		if r.Origin() != lr.Origin || r.Seq() != lr.Seq || len(r) != int(lr.Size) {
			return fmt.Errorf("%w: another record in the slot", ErrCorrupt)
		}
		kind = r.Kind()
		return nil
	})
	return kind, err
}

// readIndexed reads the record at pos (a position an index names, or the
// next one of a walk from record to record: the replay, the scrub): a
// zeroed header with records after it (a page lost to zeros) is damage,
// not the segment's unused tail. It is the tail, stray bytes and all, when
// the indexes know no record at pos and the writer went on to the next
// segment there (the rule recovery uses to find the log's end).
func (s *Store) readIndexed(pos int64, fn func(record.Record) error) (int64, error) {
	return s.readIndexedAt(pos, func(r record.Record, _ int64) error { return fn(r) })
}

// readIndexedAt is readIndexed, with fn told where the record lies (pos,
// or the start of a later segment when pos was a segment's unused tail).
func (s *Store) readIndexedAt(pos int64, fn func(r record.Record, at int64) error) (int64, error) {
	next, err := s.seglog.ReadExact(pos, fn)
	if errors.Is(err, segment.ErrNothingHere) {
		if _, _, known := s.origins.Find(pos); !known {
			if tail, terr := s.seglog.MovedOnAt(pos); terr == nil && tail {
				return s.readIndexedAt(next, fn)
			}
		}
		return next, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return next, err
}

// damagedAt handles a read of the committed record at pos that failed
// with cause (ErrCorrupt): it sets the record aside unless it reads well
// now (set aside or restored meanwhile). nil means "read it again".
func (s *Store) damagedAt(pos int64, cause error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if _, err := s.readIndexed(pos, func(record.Record) error { return nil }); err == nil {
		return nil
	}
	return s.setAside(pos, cause)
}

// setAside replaces the damaged record at pos by its placeholder, after
// saving its bytes and listing it in the lost file. Under the write lock
// (or in Open). It fails with cause when the indexes do not know the
// record (damage past what they hold: the record cannot be named).
func (s *Store) setAside(pos int64, cause error) error {
	origin, seq, ok := s.origins.Find(pos)
	topic, e, tok := s.topics.Find(pos)
	if !ok || !tok || int(e.Size) < record.HeaderSize+len(topic) {
		return fmt.Errorf("%w; the indexes do not know the record at %d, so it cannot be set aside and pulled back from a peer", cause, pos)
	}
	slot := record.Padded(int(e.Size))
	aside, err := s.seglog.CopyAside(pos, slot)
	if err != nil {
		return err
	}
	lr := LostRecord{Origin: origin, Seq: seq, Topic: topic, Pos: pos, Size: e.Size,
		Segment: s.seglog.SegmentPath(pos), Offset: s.seglog.FileOffset(pos), CopiedTo: aside, Found: time.Now().UTC()}
	if err := s.writeLost(s.lost.with(lr, true)); err != nil {
		return err
	}
	buf := make([]byte, slot)
	record.EncodeLost(buf, []byte(topic), record.Stamp{Origin: origin, Seq: seq, HLC: e.HLC}, int(e.Size))
	if err := s.seglog.Overwrite(pos, buf); err != nil {
		return err
	}
	s.damaged.Add(1)
	s.log.Error("a damaged record of the log was set aside; pulling it back from the peers",
		zap.String("segment-path", lr.Segment), zap.Int64("offset", lr.Offset), zap.Uint32("size", e.Size),
		zap.String("topic", topic), zap.String("origin", fmt.Sprintf("%016x", origin)), zap.Uint64("seq", seq),
		zap.String("copied-to", aside), zap.Error(cause))
	return nil
}

// restore writes r, a record this node lost, back into its slot and
// applies it. ok is false when r is not a lost record. Under the write
// lock.
func (s *Store) restore(r record.Record) (res Result, ok bool, err error) {
	lr, ok := s.lost.get(r.Origin(), r.Seq())
	if !ok {
		return Result{}, false, nil
	}
	if len(r) != int(lr.Size) {
		return Result{}, true, fmt.Errorf("%w: origin %016x seq %d of %d bytes, the lost record had %d", ErrInvalid, r.Origin(), r.Seq(), len(r), lr.Size)
	}
	if lr.Pos >= s.seglog.Oldest() {
		buf := make([]byte, record.Padded(len(r)))
		copy(buf, r)
		if err := s.seglog.Overwrite(lr.Pos, buf); err != nil {
			s.failed(err)
			return Result{}, true, err
		}
	}
	if err := s.writeLost(s.lost.with(lr, false)); err != nil {
		// The record is back in its slot; the next Open finds it there
		// and drops the entry.
		s.log.Warn("updating the lost file failed", zap.Error(err))
		s.setLost(s.lost.with(lr, false))
	}
	if len(r.Key()) > 0 {
		s.view.Apply(r)
	}
	s.repaired.Add(1)
	s.notify.notify()
	s.log.Info("a lost record is back from a peer", zap.String("origin", fmt.Sprintf("%016x", lr.Origin)),
		zap.Uint64("seq", lr.Seq), zap.String("topic", lr.Topic), zap.Int("still-lost", int(s.lost.n.Load())))
	return Result{Stamp: r.Stamp(), Pos: lr.Pos, Durable: true}, true, nil
}

// Lost lists the records of this node's log set aside as damaged and not
// back yet, by origin and seq.
func (s *Store) Lost() []LostRecord { return s.lost.list() }

// AcceptLost gives up the lost records (no peer holds them): their
// placeholders stay, this node's vector goes on past them, and they are
// not pulled any more. It returns what it gave up.
func (s *Store) AcceptLost() ([]LostRecord, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	gone := s.lost.list()
	if err := s.writeLost(nil); err != nil {
		return nil, err
	}
	for _, lr := range gone {
		s.log.Warn("gave up a lost record", zap.String("origin", fmt.Sprintf("%016x", lr.Origin)),
			zap.Uint64("seq", lr.Seq), zap.String("topic", lr.Topic), zap.String("copied-to", lr.CopiedTo))
	}
	s.notify.notify()
	return gone, nil
}

// RepairStats counts the records found damaged and set aside, and those
// pulled back from a peer, since Open.
func (s *Store) RepairStats() (damaged, repaired uint64) { return s.damaged.Load(), s.repaired.Load() }

// Scrubbed reports whether the scrub after Open has ended: it checked
// the whole retained log, or stopped at damage it could not set aside
// (logged).
func (s *Store) Scrubbed() bool { return s.scrubbed.Load() }

// scrub walks the retained log up to end once, after Open, checking every
// record, so that damage under the flushed position is found without
// waiting for a reader to meet it. It stops at the first damage it cannot
// set aside, or when the store closes.
func (s *Store) scrub(end int64) {
	defer s.wg.Done()
	defer s.scrubbed.Store(true)
	t0 := time.Now()
	pos := s.seglog.Oldest()
	var n int
	for pos < end {
		select {
		case <-s.done:
			return
		default:
		}
		next, err := s.readIndexed(pos, func(record.Record) error { return nil })
		switch {
		case err == nil:
			pos = next
			n++
		case errors.Is(err, ErrCorrupt):
			if err := s.damagedAt(pos, err); err != nil {
				s.log.Error("the scrub of the log stops at a damaged record", zap.Int64("pos", pos), zap.Error(err))
				return
			}
		case errors.Is(err, ErrRecycled):
			pos = max(pos, s.seglog.Oldest())
		default:
			if !errors.Is(err, ErrClosed) {
				s.log.Warn("the scrub of the log stopped", zap.Int64("pos", pos), zap.Error(err))
			}
			return
		}
	}
	s.log.Debug("scrubbed the log", zap.Int("records", n), zap.Duration("took", time.Since(t0)))
}
