package store

import (
	"context"
	"errors"
	"slices"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// Followed is one change of the store as Follow tells it: a record (Event
// nil) or a change of the view that no record brought (Event set: an
// expiry, a scheduled record taking effect; Record zero).
type Followed struct {
	// Record is the record, straight out of the log's map: valid only
	// while the follower's fn runs.
	Record record.Record
	// Event is the view's change that no record brought.
	Event *view.Change
}

// FollowOptions say what a follower wants told.
type FollowOptions struct {
	// Records: every origin's records (the node's own and its peers').
	Records bool
	// Events: the view's changes that no record brought (TimeEvents).
	Events bool
}

// Follow is the one reader of the store's changes for those who tell
// them on (the Redis door's tracking, pub/sub and keyspace events; the
// HTTP API's time events): from one goroutine of its own, from the moment
// it is called until ctx ends, it calls fn with what o asks for, in order
// per origin, once the view has it, and end (when not nil) after each
// round (the changes there were when it woke at a write or an event). The
// channel closes when the goroutine has ended. fn and end must not keep
// a record's bytes past their call, and may call the store.
//
// It reads to the log's end (LogVector): a record set aside as damaged
// is passed over, so that its origin's newer records are told at once,
// and told when it is back from a peer (late, out of order). The view's
// events are copied out before fn sees them (TimeEvents holds the view's
// read lock meanwhile). A follower that falls more than the view keeps
// behind the events loses the oldest (TimeEvents' lost).
//
// FollowView is the other reader, for the one follower that must see the
// view's changes under its lock, batch by batch (the shared view file).
func (s *Store) Follow(ctx context.Context, o FollowOptions, fn func(Followed), end func()) <-chan struct{} {
	f := &follower{s: s, o: o, fn: fn, seen: s.LogVector()}
	f.events, _ = s.TimeEvents(0, nil)
	// The lost records passed over (those lost before the start too),
	// told once they are back.
	for _, lr := range s.Lost() {
		if lr.Seq <= f.seen[lr.Origin] {
			f.passed = append(f.passed, originSeq{lr.Origin, lr.Seq})
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			changed := s.Changed()
			if o.Events {
				f.tellEvents()
			}
			if o.Records {
				f.tellRecords()
			}
			if end != nil {
				end()
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return done
}

// originSeq names one record.
type originSeq struct{ origin, seq uint64 }

// follower is one Follow's state, owned by its goroutine.
type follower struct {
	s      *Store
	o      FollowOptions
	fn     func(Followed)
	seen   map[uint64]uint64 // the last seq told (or passed over) by origin
	passed []originSeq       // lost records passed over, told once back
	events uint64            // the next time event's number
	timed  []view.Change     // the events of a round, copied out
}

// tellEvents tells the view's events since the last round.
func (f *follower) tellEvents() {
	f.timed = f.timed[:0]
	f.events, _ = f.s.TimeEvents(f.events, func(c view.Change) { f.timed = append(f.timed, c) })
	for i := range f.timed {
		f.fn(Followed{Event: &f.timed[i]})
	}
	clear(f.timed) // drop the references to the values
}

func (f *follower) deliver(r record.Record) error {
	f.fn(Followed{Record: r})
	return nil
}

// tellRecords tells the records of every origin since the last round,
// and those passed over that are back.
func (f *follower) tellRecords() {
	f.passed = slices.DeleteFunc(f.passed, func(p originSeq) bool {
		_, err := f.s.ReadOrigin(p.origin, p.seq, p.seq, f.deliver)
		return !errors.Is(err, ErrLost) // back (told now) or given up
	})
	for origin, last := range f.s.LogVector() {
		for from := f.seen[origin] + 1; from <= last; {
			next, err := f.s.ReadOrigin(origin, from, last, f.deliver)
			skip := true
			switch {
			case errors.Is(err, ErrLost):
				f.passed = append(f.passed, originSeq{origin, next})
			case errors.Is(err, ErrRecycled):
				// Gone from the log, or a lost record given up: nothing
				// to tell.
			default:
				skip = false // all there is (or closed): the next round goes on
			}
			if skip {
				next++
			}
			f.seen[origin] = next - 1
			if !skip {
				break
			}
			from = next
		}
	}
}
