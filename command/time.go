package command

import (
	"strings"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// TimeFields checks how a message's time fields go together (DESIGN.md,
// "Time"): a cancel has a key, the effective time it cancels and nothing
// else; an expiry or an effective time needs a key; a delete does not
// expire; the expiry comes after the effective time.
func TimeFields(m *record.Message) *wire.Error {
	switch {
	case m.Cancel && (m.Key == "" || m.EffectiveAt == 0):
		return wire.Errorf(wire.CodeBadRequest, `a cancel needs a key and the "effective_at" of the records it cancels`)
	case m.Cancel && (len(m.Value) > 0 || m.Delete || m.ExpiresAt != 0):
		return wire.Errorf(wire.CodeBadRequest, "a cancel carries no value, delete or expiry")
	case (m.ExpiresAt != 0 || m.EffectiveAt != 0) && m.Key == "":
		return wire.Errorf(wire.CodeBadRequest, "an expiry or an effective time needs a key (a keyless message is not kept in the view)")
	case m.Delete && m.ExpiresAt != 0:
		return wire.Errorf(wire.CodeBadRequest, "a delete cannot expire")
	case m.ExpiresAt != 0 && m.EffectiveAt != 0 && m.ExpiresAt <= m.EffectiveAt:
		return wire.Errorf(wire.CodeBadRequest, "the expiry %s is not after effective_at %s", FormatMs(m.ExpiresAt), FormatMs(m.EffectiveAt))
	}
	return nil
}

// Times checks a message's time fields (TimeFields) and then against the
// node's clock now (Unix ms): an expiry ahead (Effective for the rest).
// The Redis door does not ask for the expiry ahead: there an instant
// past means the value expires at once, as in Redis.
func Times(m *record.Message, now int64) *wire.Error {
	if e := TimeFields(m); e != nil {
		return e
	}
	if m.ExpiresAt != 0 && m.ExpiresAt <= now {
		return wire.Errorf(wire.CodeBadRequest, "the expiry %s is not ahead of this node's clock (%s)", FormatMs(m.ExpiresAt), FormatMs(now))
	}
	return Effective(m, now)
}

// Effective checks a message's effective time against the node's clock
// now (Unix ms): a scheduled write is ahead (bad_request otherwise), and
// so is the instant a cancel cancels (not_pending otherwise: nothing
// there is pending any more).
func Effective(m *record.Message, now int64) *wire.Error {
	switch {
	case m.EffectiveAt != 0 && m.EffectiveAt <= now && m.Cancel:
		return wire.Errorf(wire.CodeNotPending, "effective_at %s is not ahead of this node's clock (%s): nothing there is pending any more", FormatMs(m.EffectiveAt), FormatMs(now))
	case m.EffectiveAt != 0 && m.EffectiveAt <= now:
		return wire.Errorf(wire.CodeBadRequest, "effective_at %s is not ahead of this node's clock (%s); write without it for now", FormatMs(m.EffectiveAt), FormatMs(now))
	}
	return nil
}

// FormatMs is Unix milliseconds in the wire's time layout.
func FormatMs(ms int64) string { return string(wire.AppendUnixMilli(nil, ms)) }

// CancelKey is the cancel operation: Cancel of the records of (topic,
// key) that n holds pending.
func CancelKey(n Reader, topic, key string, at, now int64) (record.Message, *wire.Error) {
	return Cancel(topic, key, at, now, n.PendingKey(topic, key))
}

// Cancel is the cancel of the records of (topic, key) scheduled for at
// (Unix ms), given what is pending for the key on this node (its
// PendingKey) and the clock now: not_pending when at is not ahead or
// nothing but cancels is pending there.
func Cancel(topic, key string, at, now int64, pending []view.PendingRecord) (record.Message, *wire.Error) {
	m := record.Message{Topic: strings.Clone(topic), Key: strings.Clone(key), Cancel: true, EffectiveAt: at}
	if e := TimeFields(&m); e != nil {
		return m, e
	}
	if e := Effective(&m, now); e != nil {
		return m, e
	}
	for _, p := range pending {
		if !p.Cancel && p.EffectiveAt == at {
			return m, nil
		}
	}
	return m, wire.Errorf(wire.CodeNotPending, "nothing of key %q in topic %q is pending at %s", key, topic, FormatMs(at))
}

// Expire is a condition of an expiry change (Redis's EXPIRE options):
// NX only where the version has no expiry, XX only where it has one, GT
// only to a later expiry, LT only to an earlier one (no expiry counts as
// infinite for both).
type Expire struct{ NX, XX, GT, LT bool }

// Check says whether the options go together, as Redis words it.
func (x Expire) Check() *wire.Error {
	switch {
	case x.NX && (x.XX || x.GT || x.LT):
		return wire.Errorf(wire.CodeBadRequest, "NX and XX, GT or LT options at the same time are not compatible")
	case x.GT && x.LT:
		return wire.Errorf(wire.CodeBadRequest, "GT and LT options at the same time are not compatible")
	}
	return nil
}

// Allows says whether an expiry change to at may be written over a
// version whose expiry is cur (0: none).
func (x Expire) Allows(cur, at int64) bool {
	switch {
	case x.NX && cur != 0, x.XX && cur == 0,
		x.GT && (cur == 0 || at <= cur), x.LT && cur != 0 && at >= cur:
		return false
	}
	return true
}

// ChangeExpiry is the expiry operation (the EXPIRE family, GETEX EX):
// whether x allows giving e, the version of (topic, key) this node
// holds, the expiry at (an instant, Unix ms) at the clock now, and the
// expiry change that does (view.ExpiryChange, an instant past as PastExpiry
// makes it). A PERSIST is ExpiryChange to 0.
func ChangeExpiry(topic, key string, e view.Entry, at, now int64, x Expire) (record.Message, bool) {
	if !x.Allows(e.ExpiresAt, at) {
		return record.Message{}, false
	}
	return view.ExpiryChange(topic, key, e, PastExpiry(at, now, e)), true
}

// PastExpiry is the expiry at of the version e as an expiry change
// writes it at the clock now (Unix ms): an instant already past becomes
// the version's first instant past, never 0 (which is "none") nor at or
// before its effective time, so that the version expires now.
func PastExpiry(at, now int64, e view.Entry) int64 {
	if at <= now {
		return max(at, 1, e.EffectiveAt+1)
	}
	return at
}
