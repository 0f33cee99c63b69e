package store

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/record"
)

// The clock guard keeps a peer whose clock runs ahead from poisoning this
// node: a record stamped far in the future would win every concurrent
// write to its key and, observed by the HLC, drag this node's clock (and
// every stamp it makes from then on) along for good. See "Clocks" in the
// package doc for what is held, refused and flagged.
const (
	// HardClockOffsetFactor times MaxClockOffset is the hard bound: a
	// record stamped further ahead than that is refused, not held.
	HardClockOffsetFactor = 10
	// MaxHeldRecords and MaxHeldBytes bound the records held in memory,
	// over all origins. Past either, a record that would be held is
	// refused instead (anti-entropy offers it again later).
	MaxHeldRecords = 4096
	MaxHeldBytes   = 16 << 20
	// clockAheadStreak records in a row stamped beyond MaxClockOffset
	// flag their origin as persistently ahead...
	clockAheadStreak = 3
	// ...until one arrives within the bound, or none has arrived ahead
	// for clockAheadWindow.
	clockAheadWindow = time.Minute
	// clockLogEvery rate-limits the guard's logs, per origin.
	clockLogEvery = 10 * time.Second
)

// clockGuard is the state of the guard. Everything but the counters is
// guarded by the store's write lock.
type clockGuard struct {
	max     time.Duration // MaxClockOffset; 0: no guard
	origins map[uint64]*originClock
	bytes   int // of the held records

	heldNow atomic.Int64  // records held now
	held    atomic.Uint64 // records ever held
	refused atomic.Uint64 // records refused (each offer counts)
}

// originClock is what the guard knows of one origin that has sent a
// record stamped ahead of the local clock.
type originClock struct {
	// held are records of the origin, in seq order from the one after the
	// last it appended, without a gap: the first is stamped beyond the
	// offset, the others follow it (held so that the origin's sequence
	// stays gap-free in the log).
	held     []record.Record
	streak   int           // records in a row stamped beyond the offset
	ahead    time.Duration // how far ahead the last record was stamped
	aheadAt  time.Time     // local wall time of the last record beyond the offset
	heldN    uint64
	refusedN uint64
	loggedAt time.Time
}

// OriginClock is what the clock guard knows of one origin's stamps.
type OriginClock struct {
	// Ahead is how far ahead of the local wall clock the origin's last
	// record was stamped when it arrived (negative: behind, as a record
	// in transit or an old one is).
	Ahead time.Duration
	// Flagged: the origin's stamps are persistently ahead (its last
	// records in a row were beyond MaxClockOffset, the last one less than
	// a minute ago).
	Flagged bool
	// Held is the number of its records held now; HeldTotal and Refused
	// count since the store opened (Refused counts each offer).
	Held      int
	HeldTotal uint64
	Refused   uint64
}

// ClockStats are the guard's totals.
type ClockStats struct {
	MaxOffset time.Duration
	HeldNow   int64
	HeldTotal uint64
	Refused   uint64
}

// ClockStats returns the guard's totals.
func (s *Store) ClockStats() ClockStats {
	g := &s.guard
	return ClockStats{MaxOffset: g.max, HeldNow: g.heldNow.Load(), HeldTotal: g.held.Load(), Refused: g.refused.Load()}
}

// OriginClocks returns, for every origin that has sent a record stamped
// beyond MaxClockOffset since the store opened, what the guard knows of
// it.
func (s *Store) OriginClocks() map[uint64]OriginClock {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := s.now()
	out := make(map[uint64]OriginClock, len(s.guard.origins))
	for o, oc := range s.guard.origins {
		out[o] = OriginClock{
			Ahead:     oc.ahead,
			Flagged:   oc.streak >= clockAheadStreak && now.Sub(oc.aheadAt) < clockAheadWindow,
			Held:      len(oc.held),
			HeldTotal: oc.heldN,
			Refused:   oc.refusedN,
		}
	}
	return out
}

// now is the local wall clock (Options.Now, time.Now by default).
func (s *Store) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// heldTail is the last seq held of origin, 0 when none is. Called under
// the write lock.
func (s *Store) heldTail(origin uint64) uint64 {
	if oc := s.guard.origins[origin]; oc != nil && len(oc.held) > 0 {
		return oc.held[len(oc.held)-1].Seq()
	}
	return 0
}

// admitStamp decides on a remote record that is next in its origin's
// sequence (after the log and the held records): nil to append it now,
// ErrHeld when it was held, ErrClockAhead when it was refused. Called
// under the write lock.
func (s *Store) admitStamp(r record.Record) error {
	g := &s.guard
	if g.max <= 0 || r.Origin() == s.origin {
		// This node's own record, back from a peer, was stamped by this
		// clock; holding it would let Publish give its seq to another
		// message meanwhile.
		return nil
	}
	now := s.now()
	ahead := record.HLCTime(r.HLC()).Sub(now)
	oc := g.origins[r.Origin()]
	if oc == nil {
		if ahead <= g.max {
			return nil // the common case: nothing to note
		}
		oc = &originClock{}
		g.origins[r.Origin()] = oc
	}
	oc.ahead = ahead
	if ahead <= g.max {
		oc.streak = 0
	} else {
		oc.streak++
		oc.aheadAt = now
	}
	switch {
	case ahead > HardClockOffsetFactor*g.max:
		return s.refuseStamp(r, oc, now, fmt.Sprintf("more than %d times --max-clock-offset", HardClockOffsetFactor))
	case ahead <= g.max && len(oc.held) == 0:
		return nil
	case int(g.heldNow.Load()) >= MaxHeldRecords || g.bytes+len(r) > MaxHeldBytes:
		return s.refuseStamp(r, oc, now, "the held records are at their bound")
	}
	oc.held = append(oc.held, record.Record(append([]byte(nil), r...)))
	g.bytes += len(r)
	g.heldNow.Add(1)
	g.held.Add(1)
	oc.heldN++
	if now.Sub(oc.loggedAt) >= clockLogEvery {
		oc.loggedAt = now
		s.log.Warn("holding a peer's records stamped ahead of the local clock until it catches up",
			zap.String("origin", fmt.Sprintf("%016x", r.Origin())), zap.Uint64("seq", r.Seq()),
			zap.Duration("ahead", ahead), zap.Duration("max-clock-offset", g.max),
			zap.Int("held", len(oc.held)), zap.Uint64("held-total", oc.heldN))
	}
	return fmt.Errorf("%w: origin %016x seq %d, stamped %s ahead", ErrHeld, r.Origin(), r.Seq(), ahead)
}

// refuseStamp counts and logs a refused record.
func (s *Store) refuseStamp(r record.Record, oc *originClock, now time.Time, why string) error {
	s.guard.refused.Add(1)
	oc.refusedN++
	if now.Sub(oc.loggedAt) >= clockLogEvery {
		oc.loggedAt = now
		s.log.Warn("refusing a peer's record stamped too far ahead of the local clock; anti-entropy offers it again",
			zap.String("origin", fmt.Sprintf("%016x", r.Origin())), zap.Uint64("seq", r.Seq()),
			zap.Duration("ahead", oc.ahead), zap.Duration("max-clock-offset", s.guard.max),
			zap.String("why", why), zap.Uint64("refused-total", oc.refusedN))
	}
	return fmt.Errorf("%w: origin %016x seq %d, stamped %s ahead (%s)", ErrClockAhead, r.Origin(), r.Seq(), oc.ahead, why)
}

// releaseHeld appends the held records whose stamps the local clock has
// caught up with (to within MaxClockOffset), each origin's in seq order,
// with the records held behind them. Called under the write lock.
func (s *Store) releaseHeld() {
	g := &s.guard
	if g.heldNow.Load() == 0 {
		return
	}
	now := s.now()
	for o, oc := range g.origins {
		for len(oc.held) > 0 && record.HLCTime(oc.held[0].HLC()).Sub(now) <= g.max {
			r := oc.held[0]
			s.dropHeld(oc, 1)
			if r.Seq() != s.origins.Last(o)+1 {
				// The origin moved on without them (a bootstrap from a
				// snapshot): what is left is stale.
				s.dropHeld(oc, len(oc.held))
				break
			}
			if _, _, err := s.appendRemote(r); err != nil {
				// Not lost: anti-entropy offers them again.
				s.log.Warn("appending a held record failed; dropping the origin's held records",
					zap.String("origin", fmt.Sprintf("%016x", o)), zap.Uint64("seq", r.Seq()), zap.Error(err))
				s.dropHeld(oc, len(oc.held))
				break
			}
		}
	}
}

// dropHeld forgets the first n held records of oc.
func (s *Store) dropHeld(oc *originClock, n int) {
	for _, r := range oc.held[:n] {
		s.guard.bytes -= len(r)
	}
	clear(oc.held[:n])
	oc.held = oc.held[n:]
	if len(oc.held) == 0 {
		oc.held = nil
	}
	s.guard.heldNow.Add(-int64(n))
}

// releaseDue runs releaseHeld from the flusher's timer, when something
// is held.
func (s *Store) releaseDue() {
	if s.guard.heldNow.Load() == 0 {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.closed.Load() {
		s.releaseHeld()
	}
}

// boundStamp is the greatest stamp the clock may observe from data this
// node did not stamp itself (a peer's snapshot): at most MaxClockOffset
// ahead of the local wall clock, so that a skewed peer's entries do not
// drag the clock along.
func (s *Store) boundStamp(h uint64) uint64 {
	if s.guard.max <= 0 {
		return h
	}
	limit := record.MakeHLC(s.now().Add(s.guard.max).UnixMilli(), record.MaxLogical)
	if h > limit {
		s.log.Warn("a peer's snapshot holds stamps ahead of the local clock beyond --max-clock-offset; the clock follows them only that far",
			zap.Time("stamp", record.HLCTime(h)), zap.Duration("max-clock-offset", s.guard.max))
		return limit
	}
	return h
}
