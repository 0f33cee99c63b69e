package command

import (
	"errors"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// Limits are the node's bounds on what a write carries. The zero value
// bounds nothing.
type Limits struct {
	// MaxValue bounds one message's value (--max-value-size).
	MaxValue int64
	// MaxBatch bounds the values of one batch together (--max-body-size).
	MaxBatch int64
}

// Message checks one message as every door does before it is written:
// its topic, key and tag names, its value against MaxValue, a delete's
// and a cancel's shape, how its time fields go together (TimeFields) and
// the record format's rules (record.Message.Validate).
// An expiry change and a counter increment are the package's own and
// pass the same checks. The clock is not read (see Times).
func (l Limits) Message(m *record.Message) *wire.Error {
	if e := wire.CheckName("topic", m.Topic); e != nil {
		return e
	}
	if m.Key != "" || m.Delete {
		if e := wire.CheckKey(m.Key); e != nil {
			return e
		}
	}
	if e := wire.CheckTag(m.Tag); e != nil {
		return e
	}
	if e := l.Value(len(m.Value)); e != nil {
		return e
	}
	if m.Delete && len(m.Value) > 0 {
		return wire.Errorf(wire.CodeBadRequest, "a delete carries no value")
	}
	if e := TimeFields(m); e != nil {
		return e
	}
	// The record format's own rules (an instant after 9999, a counter's
	// increment), which the store checks again.
	if err := m.Validate(); err != nil {
		code := wire.CodeBadRequest
		if errors.Is(err, record.ErrTooLarge) {
			code = wire.CodeValueTooLarge
		}
		return wire.Errorf(code, "%v", err)
	}
	return nil
}

// Value checks a value of n bytes against MaxValue.
func (l Limits) Value(n int) *wire.Error {
	if l.MaxValue > 0 && int64(n) > l.MaxValue {
		return wire.Errorf(wire.CodeValueTooLarge, "value of %d bytes exceeds --max-value-size (%s)", n, wire.FormatSize(l.MaxValue))
	}
	return nil
}

// Batch checks the values of msgs together against MaxBatch (each
// message is checked by Message).
func (l Limits) Batch(msgs []record.Message) *wire.Error {
	var total int64
	for i := range msgs {
		total += int64(len(msgs[i].Value))
	}
	if l.MaxBatch > 0 && total > l.MaxBatch {
		return wire.Errorf(wire.CodeBodyTooLarge, "a batch of %d bytes exceeds --max-body-size (%s)", total, wire.FormatSize(l.MaxBatch))
	}
	return nil
}
