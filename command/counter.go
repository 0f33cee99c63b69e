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
