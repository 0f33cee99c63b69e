package command

import (
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// ParseIncrement reads an increment as the local API takes one: an
// integer, or else a finite float (INCRBYFLOAT's kind).
func ParseIncrement(s string) (view.Increment, *wire.Error) {
	if n, ok := view.ParseInt([]byte(s)); ok {
		return view.Increment{N: n}, nil
	}
	if f, ok := view.ParseFloat([]byte(s)); ok {
		return view.Increment{F: f, Float: true}, nil
	}
	return view.Increment{}, wire.Errorf(wire.CodeBadRequest, "increment %q: want an integer or a finite float", s)
}

// Reader is what an operation reads of its node: the view (for the
// Redis door inside MULTI, the view under the transaction's own writes).
// The daemon's node adapter is one, for both doors.
type Reader interface {
	// Counting is the entry of (topic, key) for a counter command: for
	// a key without a value, its Absence (view.View.Counting).
	Counting(topic, key string) (view.Entry, bool)
	// PendingKey lists the records of (topic, key) not in force yet.
	PendingKey(topic, key string) []view.PendingRecord
}

// Batch is a Reader of a transaction's view (the Redis door's MULTI),
// whose writes are one batch: WrittenBy names the message of the batch
// so far (1-based; 0: none) that wrote the version of (topic, key) a
// read sees, and whether it was a delete.
type Batch interface {
	WrittenBy(topic, key string) (msg int, deleted bool)
}

// Counted is what a counter operation decided: the message to write,
// the key's value after it on this node, and the entry a later read of
// the same transaction sees (the version counted on with the new value,
// or the revival of the absence counted on).
type Counted struct {
	Message record.Message
	Value   []byte
	Entry   view.Entry
}

// Incr is the counter operation, whatever door took it: it reads (topic,
// key) of n and adds inc by the counters' rule (Count).
func Incr(n Reader, topic, key string, inc view.Increment) (Counted, error) {
	e, found := n.Counting(topic, key)
	m, value, err := Count(topic, key, e, found, inc)
	if err != nil {
		return Counted{}, err
	}
	seen := view.Entry{Value: value, Tag: e.Tag, Stamp: e.Stamp, ExpiresAt: e.ExpiresAt, EffectiveAt: e.EffectiveAt, Base: e.Base}
	switch {
	case m.CountAbsent:
		// The revival: a later increment counts on the same absence, an
		// expiry change names the revival's version.
		seen = view.Entry{Value: value, Stamp: e.Absence.Of, Base: []byte("0"), Absence: e.Absence}
		if seen.Stamp.Origin == 0 {
			seen.Stamp = record.Genesis
		}
	case !found || e.Stamp.Origin == 0:
		seen.Stamp, seen.EffectiveAt, seen.Base = record.Stamp{}, 0, nil
	}
	if b, ok := n.(Batch); ok && !m.Counter() {
		// A key the batch wrote has no stamp yet: the increment counts
		// on the batch's message that wrote it (on the absence after it
		// for a delete), which the store stamps first. One the batch
		// wrote that has expired since stays a write of the sum.
		if j, deleted := b.WrittenBy(topic, key); j > 0 && (found || deleted) {
			m = record.Message{Topic: m.Topic, Key: m.Key, Value: inc.Text(), CountOnEarlier: j, CountAbsent: deleted}
		}
	}
	return Counted{Message: m, Value: value, Entry: seen}, nil
}

// Count adds inc to (topic, key), whose entry on this node is e (found:
// it has a value), by the counters' one rule (view.Count: an increment
// bound to the version this node holds, which every node counts once),
// and returns the message to write and the key's value after it on this
// node. A value that is no number of the increment's kind, or a sum out
// of range, is a conflict that wraps view.ErrNotInteger, ErrNotFloat or
// ErrOverflow.
func Count(topic, key string, e view.Entry, found bool, inc view.Increment) (record.Message, []byte, error) {
	m, value, err := view.Count(topic, key, e, found, inc)
	if err != nil {
		return m, nil, &caused{wire.Errorf(wire.CodeConflict, "key %q of topic %q: %v", key, topic, err), err}
	}
	return m, value, nil
}

// caused is a refusal with a cause of a lower floor: errors.As finds the
// *wire.Error, errors.Is the cause.
type caused struct {
	e     *wire.Error
	cause error
}

func (c *caused) Error() string   { return c.e.Error() }
func (c *caused) Unwrap() []error { return []error{c.e, c.cause} }
