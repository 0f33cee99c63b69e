package store

import (
	"errors"
	"fmt"
)

// These methods serve the cluster layer: what a node tells its peers it
// holds, and the records it sends them.

// Vector returns, for every origin this node holds records of, the highest
// seq it holds (its version vector; seqs are gap-free per origin, so the
// highest is also the highest contiguous).
func (s *Store) Vector() map[uint64]uint64 { return s.origins.vector() }

// LastSeq returns the highest seq of origin this node holds, 0 if none.
func (s *Store) LastSeq(origin uint64) uint64 { return s.origins.last(origin) }

// Changed returns a channel that is closed at the next write to the store
// (or when it closes). Take the channel before looking at the store's
// state, then wait on it, so that no write falls in between.
func (s *Store) Changed() <-chan struct{} { return s.notify.wait() }

// ReadOrigin calls fn with the records of origin from seq from up to seq
// to (inclusive), in order, straight out of the log's map: a record is
// valid only while fn runs (copy it, or write it out, inside fn). It stops
// at the first seq this node does not hold yet and returns the seq after
// the last record it passed to fn. A seq this node held but has recycled
// gives ErrRecycled.
func (s *Store) ReadOrigin(origin, from, to uint64, fn func(Record) error) (next uint64, err error) {
	if s.closed.Load() {
		return from, ErrClosed
	}
	if from == 0 {
		return from, fmt.Errorf("%w: seq 0", ErrInvalid)
	}
	last := min(to, s.origins.last(origin))
	for next = from; next <= last; next++ {
		pos, ok := s.origins.get(origin, next)
		if !ok {
			return next, fmt.Errorf("%w: origin %016x seq %d", ErrRecycled, origin, next)
		}
		if _, err := s.seglog.read(pos, fn); err != nil {
			if errors.Is(err, ErrBeyondEnd) {
				return next, nil // indexed, not yet committed: the next call gets it
			}
			return next, err
		}
	}
	return next, nil
}

// Digest is a SHA-256 over the whole view, tombstones included, in (topic,
// key) order: two nodes with equal digests hold the same view.
func (s *Store) Digest() [32]byte { return s.view.Digest() }
