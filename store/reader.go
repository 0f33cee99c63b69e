package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cachecast/cachecast/store/internal/index"
	"github.com/cachecast/cachecast/store/record"
)

// StartFrom says where a TopicReader begins.
type StartFrom int

const (
	// FromLatest begins after the last message the topic holds now: the
	// reader sees everything appended after NewTopicReader returns.
	FromLatest StartFrom = iota
	// FromEarliest begins at the oldest message still retained.
	FromEarliest
	// FromOffset begins at Start.Offset (clamped to what is retained).
	FromOffset
	// FromTime begins at the first message whose HLC is at or after
	// Start.Time (to the index's approximation: the search is a binary
	// search over nearly ordered stamps, then a scan).
	FromTime
)

// Start is where a TopicReader begins.
type Start struct {
	From   StartFrom
	Offset uint64
	Time   time.Time
}

// Delivery is one message read from a topic.
type Delivery struct {
	// Offset is the message's offset in the topic on this node.
	Offset uint64
	// Record is a private copy of the message's record.
	Record record.Record
}

// TopicReader reads one topic in order, like a RocketMQ consumer reading a
// ConsumeQueue: offsets count the topic's messages on this node. It is not
// safe for concurrent use; make one per subscriber.
type TopicReader struct {
	s      *Store
	topic  string
	ti     *index.Topic
	off    uint64
	tags   [][]byte
	hashes []uint32
}

// NewTopicReader returns a reader of topic from start. With tags, only
// messages whose tag is one of them are returned; the filter runs on the
// index's tag hash first and reads the record only on a hash match.
func (s *Store) NewTopicReader(topic string, start Start, tags []string) (*TopicReader, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if topic == "" {
		return nil, fmt.Errorf("%w: empty topic", ErrInvalid)
	}
	r := &TopicReader{s: s, topic: topic, ti: s.topics.Get(topic)}
	for _, t := range tags {
		r.tags = append(r.tags, []byte(t))
		r.hashes = append(r.hashes, record.TagHash([]byte(t)))
	}
	switch start.From {
	case FromLatest:
		if r.ti != nil {
			r.off = r.ti.Len()
		}
	case FromEarliest:
		if r.ti != nil {
			r.off = r.ti.First()
		}
	case FromOffset:
		r.off = start.Offset
	case FromTime:
		if r.ti != nil {
			r.off = r.ti.SearchHLC(record.MakeHLC(start.Time.UnixMilli(), 0))
		}
	default:
		return nil, fmt.Errorf("%w: start %d", ErrInvalid, start.From)
	}
	return r, nil
}

// Offset is the offset of the next message Next will look at.
func (r *TopicReader) Offset() uint64 { return r.off }

// Next returns the next message, waiting for one to arrive until ctx ends
// (ctx.Err()) or the store closes (ErrClosed). Messages recycled before the
// reader reached them are skipped. A message already waiting is returned
// even when ctx has ended: Next with a cancelled context is a non-blocking
// read, which lets a caller drain what is there before it flushes.
func (r *TopicReader) Next(ctx context.Context) (Delivery, error) {
	for {
		wait := r.s.notify.wait()
		if r.s.closed.Load() {
			return Delivery{}, ErrClosed
		}
		if r.ti == nil {
			r.ti = r.s.topics.Get(r.topic)
		}
		if r.ti != nil {
			d, ok, err := r.scan()
			if err != nil || ok {
				return d, err
			}
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return Delivery{}, ctx.Err()
		}
	}
}

// scan looks at the entries from the reader's offset on for one that
// matches; ok is false when it reached the end of what is committed.
func (r *TopicReader) scan() (Delivery, bool, error) {
	if first := r.ti.First(); r.off < first {
		r.off = first
	}
	for r.off < r.ti.Len() {
		e, err := r.ti.Entry(r.off)
		if errors.Is(err, ErrRecycled) {
			r.off = r.ti.First()
			continue
		}
		if err != nil {
			return Delivery{}, false, err
		}
		if len(r.hashes) > 0 && !containsHash(r.hashes, e.TagHash) {
			r.off++
			continue
		}
		var rec record.Record
		_, err = r.s.readIndexed(e.Pos, func(x record.Record) error {
			if x.Kind() == record.KindLost {
				return nil // lost to a damaged log: skipped (repair.go)
			}
			if len(r.tags) > 0 && !containsTag(r.tags, x.Tag()) {
				return nil
			}
			rec = x.Clone()
			return nil
		})
		switch {
		case errors.Is(err, ErrBeyondEnd):
			// Indexed but not yet committed: wait for the commit.
			return Delivery{}, false, nil
		case errors.Is(err, ErrRecycled):
			r.off++
			continue
		case errors.Is(err, ErrCorrupt):
			if err := r.s.damagedAt(e.Pos, err); err != nil {
				return Delivery{}, false, err
			}
			continue // read it again: its placeholder, or the record back
		case err != nil:
			return Delivery{}, false, err
		}
		off := r.off
		r.off++
		if rec != nil {
			return Delivery{Offset: off, Record: rec}, true, nil
		}
	}
	return Delivery{}, false, nil
}

func containsHash(hs []uint32, h uint32) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}

func containsTag(tags [][]byte, tag []byte) bool {
	for _, t := range tags {
		if bytes.Equal(t, tag) {
			return true
		}
	}
	return false
}

// Close releases the reader.
func (r *TopicReader) Close() { r.ti = nil }

// TopicEnd is the offset one past topic's last message on this node (0
// for a topic it has never seen).
func (s *Store) TopicEnd(topic string) uint64 {
	if ti := s.topics.Get(topic); ti != nil {
		return ti.Len()
	}
	return 0
}

// ResumeOffset returns the offset in topic of the first message not
// covered by done (origin -> highest seq already handled; a missing origin
// is 0): a reader started there meets every message that is not covered,
// and covered ones only as far as they are mixed in with the others. Each
// origin's records lie in the log in seq order, so this is the least, over
// the origins this node holds, of the offset of (origin, done+1). When a
// record it needs was recycled it answers the oldest offset retained.
func (s *Store) ResumeOffset(topic string, done map[uint64]uint64) uint64 {
	// Under the writers' lock: a write indexes a record in its topic
	// before its origin, and between the two the topic's end counts the
	// record while the origins' vector does not: it would be answered as
	// covered, and a reader started there would never see it.
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ti := s.topics.Get(topic)
	if ti == nil {
		return 0
	}
	off := ti.Len()
	for origin, last := range s.origins.Vector() {
		d := done[origin]
		if d >= last {
			continue
		}
		pos, ok := s.origins.Get(origin, d+1)
		if !ok {
			return ti.First()
		}
		o, err := ti.SearchPos(pos)
		if err != nil {
			return ti.First()
		}
		off = min(off, o)
	}
	return off
}
