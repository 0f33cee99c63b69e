package store

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/cursors"
	"github.com/cachecast/cachecast/store/internal/index"
	"github.com/cachecast/cachecast/store/internal/segment"
)

// retention keeps the log within its bounds: RetentionBytes before every
// write (makeRoom, as WhenFull says) and RetentionAge about once a second
// (agedUpTo), never recycling what the view's snapshot or a durable cursor
// still needs (floor).
//
// Concurrency: makeRoom and recycleTo run under the store's write lock;
// floor, agedUpTo and snapshotBytes from any goroutine.
type retention struct {
	bytes    int64
	age      time.Duration
	whenFull FullPolicy

	seglog       *segment.Log
	topics       *index.Topics
	origins      *index.Origins
	cursors      *cursors.File
	snapCovers   *atomic.Int64 // the store's: how far the view's snapshot covers the log
	kickSnapshot func()
	log          *zap.Logger
}

// makeRoom enforces RetentionBytes before a write of size bytes.
func (r *retention) makeRoom(size int) error {
	limit := r.bytes
	if limit == 0 {
		return nil
	}
	padded := r.seglog.EntrySize(size)
	need := r.seglog.RetainedAfter(size)
	if need <= limit {
		return nil
	}
	if r.whenFull == FullRefuse {
		return fmt.Errorf("%w: the log holds %d bytes, --retention-bytes is %d (--when-full refuse)", ErrFull, need-padded, limit)
	}
	upTo := r.seglog.WritePos() + padded + r.seglog.SegmentSize() - limit
	floor, holder := r.floor()
	if _, err := r.recycleTo(min(upTo, floor)); err != nil {
		return err
	}
	if r.seglog.WritePos()+padded-r.seglog.Oldest() > limit {
		r.kickSnapshot()
		covers := r.snapCovers.Load()
		err := fmt.Errorf("%w: the log holds %d bytes, --retention-bytes is %d, and the oldest segment is still needed by %s",
			ErrFull, r.seglog.WritePos()-r.seglog.Oldest(), limit, holderText(holder, covers))
		if holder == nil && floor < upTo {
			return &snapshotBehind{err: err, covers: covers}
		}
		return err
	}
	return nil
}

// snapshotBehind is makeRoom's ErrFull when only the view's snapshot
// holds the oldest segment back: the snapshot it asked for clears it, so
// the writer waits for that (Store.awaitSnapshot) before it gives up.
// covers is how far the snapshot covered the log at the refusal.
type snapshotBehind struct {
	err    error
	covers int64
}

func (e *snapshotBehind) Error() string { return e.err.Error() }
func (e *snapshotBehind) Unwrap() error { return e.err }

// holderText names what holds the log back: a durable cursor (with its
// owner), or else the snapshot.
func holderText(c *cursors.Entry, snapCovers int64) string {
	if c == nil {
		return fmt.Sprintf("the snapshot (it covers the log up to position %d; it is written again soon)", snapCovers)
	}
	owner := "no recorded owner"
	if c.Owned {
		owner = fmt.Sprintf("owner uid %d", c.Owner)
	}
	return fmt.Sprintf("durable cursor %q (%s) at offset %d of topic %q; move it on or delete it (DELETE /v1/cursors/%s)",
		c.Name, owner, c.Offset, c.Topic, c.Name)
}

// floor is the lowest log position something still needs: the view
// snapshot's coverage and every durable cursor's next record. holder is
// the cursor that sets it, nil when the snapshot does.
func (r *retention) floor() (floor int64, holder *cursors.Entry) {
	floor = r.snapCovers.Load()
	for _, c := range r.cursors.List() {
		ti := r.topics.Get(c.Topic)
		if ti == nil {
			continue
		}
		e, err := ti.Entry(c.Offset)
		if err == nil && e.Pos < floor {
			floor, holder = e.Pos, &c
		}
	}
	return floor, holder
}

// recycleTo retires the segments wholly before upTo and the index chunks
// that only point into them, and returns the new oldest position. Called
// under the write lock.
func (r *retention) recycleTo(upTo int64) (int64, error) {
	before := r.seglog.Oldest()
	oldest, err := r.seglog.Recycle(upTo)
	if oldest > before {
		r.log.Info("recycled log segments", zap.Int64("from", before), zap.Int64("to", oldest))
		if err := r.topics.DropBefore(oldest); err != nil {
			r.log.Warn("dropping topic index chunks failed", zap.Error(err))
		}
		if err := r.origins.DropBefore(oldest); err != nil {
			r.log.Warn("dropping origin index chunks failed", zap.Error(err))
		}
	}
	return oldest, err
}

// agedUpTo is the end of the sealed segments last written longer ago than
// RetentionAge (before now), -1 when there are none (or no age bound).
func (r *retention) agedUpTo(now time.Time) int64 {
	if r.age <= 0 {
		return -1
	}
	cutoff := now.Add(-r.age)
	var upTo int64 = -1
	for _, seg := range r.seglog.Sealed() {
		if seg.Written.After(cutoff) {
			break
		}
		upTo = seg.Base + r.seglog.SegmentSize()
	}
	return upTo
}

// snapshotBytes is how much the log may grow before a snapshot is written
// regardless of the interval: a quarter of the byte bound, so that
// recycling always has a recent snapshot to rely on.
func (r *retention) snapshotBytes() int64 {
	if r.bytes > 0 {
		return r.bytes / 4
	}
	return 1 << 30
}
