package command

import (
	"errors"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// code is e's code, "" for nil.
func code(e *wire.Error) string {
	if e == nil {
		return ""
	}
	return e.Code
}

func TestLimitsMessage(t *testing.T) {
	l := Limits{MaxValue: 8, MaxBatch: 12}
	tests := []struct {
		name string
		m    record.Message
		code string
		msg  string
	}{
		{"value", record.Message{Topic: "t", Key: "k", Value: []byte("12345678")}, "", ""},
		{"stream message", record.Message{Topic: "t", Value: []byte("v")}, "", ""},
		{"no topic", record.Message{Key: "k"}, wire.CodeInvalidName, "topic"},
		{"key too long", record.Message{Topic: "t", Key: strings.Repeat("k", wire.MaxAPIKeyLen+1)}, wire.CodeInvalidName, "key"},
		{"delete without key", record.Message{Topic: "t", Delete: true}, wire.CodeInvalidName, "key"},
		{"bad tag", record.Message{Topic: "t", Key: "k", Tag: "a b"}, wire.CodeInvalidName, "tag"},
		{"value too large", record.Message{Topic: "t", Key: "k", Value: []byte("123456789")}, wire.CodeValueTooLarge, "value of 9 bytes exceeds --max-value-size (8)"},
		{"delete with value", record.Message{Topic: "t", Key: "k", Delete: true, Value: []byte("v")}, wire.CodeBadRequest, "carries no value"},
		{"keyless expiry", record.Message{Topic: "t", ExpiresAt: 5}, wire.CodeBadRequest, "needs a key"},
		{"delete expires", record.Message{Topic: "t", Key: "k", Delete: true, ExpiresAt: 5}, wire.CodeBadRequest, "cannot expire"},
		{"expiry not after effective", record.Message{Topic: "t", Key: "k", ExpiresAt: 5, EffectiveAt: 5}, wire.CodeBadRequest, "not after effective_at"},
		{"cancel without instant", record.Message{Topic: "t", Key: "k", Cancel: true}, wire.CodeBadRequest, "a cancel needs"},
		{"cancel with value", record.Message{Topic: "t", Key: "k", Cancel: true, EffectiveAt: 5, Value: []byte("v")}, wire.CodeBadRequest, "a cancel carries"},
		{"instant after 9999", record.Message{Topic: "t", Key: "k", ExpiresAt: record.MaxInstant + 1}, wire.CodeBadRequest, "9999"},
		{"counter without stamp", record.Message{Topic: "t", Key: "k", Value: []byte("1"), CountOn: record.Stamp{Origin: 1}}, wire.CodeBadRequest, "counter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := l.Message(&tt.m)
			if code(e) != tt.code || e != nil && !strings.Contains(e.Message, tt.msg) {
				t.Fatalf("Message = %v; want %q containing %q", e, tt.code, tt.msg)
			}
		})
	}
	if e := (Limits{}).Message(&record.Message{Topic: "t", Key: "k", Value: make([]byte, 1<<20)}); e != nil {
		t.Fatalf("the zero Limits bound a value: %v", e)
	}
	batch := []record.Message{{Topic: "t", Key: "a", Value: []byte("123456")}, {Topic: "t", Key: "b", Value: []byte("1234567")}}
	if e := l.Batch(batch); code(e) != wire.CodeBodyTooLarge || !strings.Contains(e.Message, "13 bytes exceeds --max-body-size (12)") {
		t.Fatalf("Batch of 13 bytes = %v", e)
	}
	if e := l.Batch(batch[:1]); e != nil {
		t.Fatalf("Batch of 6 bytes = %v", e)
	}
}

func TestTimes(t *testing.T) {
	const now = 1000
	tests := []struct {
		name            string
		m               record.Message
		times, effected string // the codes of Times and Effective
	}{
		{"nothing", record.Message{Topic: "t", Key: "k"}, "", ""},
		{"expiry ahead", record.Message{Topic: "t", Key: "k", ExpiresAt: now + 1}, "", ""},
		{"expiry past", record.Message{Topic: "t", Key: "k", ExpiresAt: now}, wire.CodeBadRequest, ""},
		{"effective ahead", record.Message{Topic: "t", Key: "k", EffectiveAt: now + 1}, "", ""},
		{"effective past", record.Message{Topic: "t", Key: "k", EffectiveAt: now}, wire.CodeBadRequest, wire.CodeBadRequest},
		{"cancel past", record.Message{Topic: "t", Key: "k", Cancel: true, EffectiveAt: now}, wire.CodeNotPending, wire.CodeNotPending},
		{"cancel ahead", record.Message{Topic: "t", Key: "k", Cancel: true, EffectiveAt: now + 1}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if e := Times(&tt.m, now); code(e) != tt.times {
				t.Errorf("Times = %v; want %q", e, tt.times)
			}
			if e := Effective(&tt.m, now); code(e) != tt.effected {
				t.Errorf("Effective = %v; want %q", e, tt.effected)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	pending := []view.PendingRecord{{Key: "k", Entry: view.Entry{EffectiveAt: 2000}}, {Key: "k", Entry: view.Entry{EffectiveAt: 3000}, Cancel: true}}
	tests := []struct {
		name string
		at   int64
		code string
	}{
		{"pending", 2000, ""},
		{"only a cancel there", 3000, wire.CodeNotPending},
		{"nothing there", 4000, wire.CodeNotPending},
		{"past", 500, wire.CodeNotPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, e := Cancel("t", "k", tt.at, 1000, pending)
			if code(e) != tt.code {
				t.Fatalf("Cancel = %v; want %q", e, tt.code)
			}
			if e == nil && (!m.Cancel || m.EffectiveAt != tt.at || m.Topic != "t" || m.Key != "k" || m.Validate() != nil) {
				t.Fatalf("Cancel message %+v", m)
			}
		})
	}
}

func TestExpire(t *testing.T) {
	tests := []struct {
		name    string
		x       Expire
		cur, at int64
		want    bool
	}{
		{"plain", Expire{}, 0, 5, true},
		{"NX without", Expire{NX: true}, 0, 5, true},
		{"NX with", Expire{NX: true}, 7, 5, false},
		{"XX without", Expire{XX: true}, 0, 5, false},
		{"XX with", Expire{XX: true}, 7, 5, true},
		{"GT over none", Expire{GT: true}, 0, 5, false},
		{"GT later", Expire{GT: true}, 4, 5, true},
		{"GT same", Expire{GT: true}, 5, 5, false},
		{"LT under none", Expire{LT: true}, 0, 5, true},
		{"LT earlier", Expire{LT: true}, 6, 5, true},
		{"LT later", Expire{LT: true}, 4, 5, false},
	}
	for _, tt := range tests {
		if got := tt.x.Allows(tt.cur, tt.at); got != tt.want {
			t.Errorf("%s: Allows(%d, %d) = %v; want %v", tt.name, tt.cur, tt.at, got, tt.want)
		}
	}
}

func TestExpiryChange(t *testing.T) {
	e := view.Entry{Value: []byte("12"), Base: []byte("10"), Tag: "tg", Stamp: record.Stamp{HLC: 9, Origin: 2, Seq: 3}, EffectiveAt: 400}
	for _, tt := range []struct {
		name    string
		at, now int64
		want    int64
	}{
		{"ahead", 5000, 1000, 5000},
		{"past", 300, 1000, 401}, // after the version's effective time
		{"zero past", 0, 1000, 401},
		{"past, no effective time", 300, 1000, 300},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := e
			if tt.name == "past, no effective time" {
				e.EffectiveAt = 0
			}
			if got := PastExpiry(tt.at, tt.now, e); got != tt.want {
				t.Fatalf("PastExpiry(%d, %d) = %d; want %d", tt.at, tt.now, got, tt.want)
			}
		})
	}
	m := view.ExpiryChange("t", "k", e, 5000)
	if !m.ExpiryChange() || m.ExpiryOf != e.Stamp || string(m.Value) != "10" || m.Tag != "tg" || m.ExpiresAt != 5000 || m.EffectiveAt != 400 {
		t.Fatalf("ExpiryChange = %+v: want bound to the version's stamp, with its base and tag", m)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	e.Base[0] = 'X'
	if string(m.Value) != "10" {
		t.Fatal("ExpiryChange shares the entry's bytes")
	}
	if m.ExpiryAbsent || m.Gone != 0 {
		t.Fatalf("ExpiryChange of a version = %+v: names an absence", m)
	}
	// A counter's revival: the change names the absence it serves.
	rev := view.Entry{Value: []byte("7"), Base: []byte("0"), Stamp: e.Stamp, Absence: &view.Absence{Of: e.Stamp, Gone: 350}}
	m = view.ExpiryChange("t", "k", rev, 5000)
	if !m.ExpiryAbsent || m.Gone != 350 || m.ExpiryOf != e.Stamp || string(m.Value) != "0" {
		t.Fatalf("ExpiryChange of a revival = %+v: want the absence after the version, gone 350, base 0", m)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestState(t *testing.T) {
	tests := []struct {
		name        string
		s           State
		read, write string
	}{
		{"serves", State{}, "", ""},
		{"away", State{Away: "gone"}, wire.CodeUnavailable, wire.CodeUnavailable},
		{"catching up", State{CatchUp: &wire.CatchUpStatus{Phase: "pulling", LagRecords: 7}}, wire.CodeCatchingUp, ""},
		{"joining", State{CatchUp: &wire.CatchUpStatus{Phase: "joining"}}, wire.CodeCatchingUp, ""},
		{"waiting for a peer's snapshot", State{CatchUp: &wire.CatchUpStatus{Phase: "snapshot"}}, wire.CodeCatchingUp, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w := tt.s.Read(), tt.s.Write()
			if code(r) != tt.read || code(w) != tt.write {
				t.Fatalf("Read %v, Write %v; want %q, %q", r, w, tt.read, tt.write)
			}
			if r != nil && r.Code == wire.CodeCatchingUp && r.CatchUp != tt.s.CatchUp {
				t.Fatal("catching_up without the progress")
			}
		})
	}
	if r := (State{CatchUp: &wire.CatchUpStatus{Phase: "pulling", LagRecords: 7}}).Read(); !strings.Contains(r.Message, "7 records behind") {
		t.Fatalf("catching up: %q", r.Message)
	}
}

func TestCount(t *testing.T) {
	tests := []struct {
		name  string
		by    string
		cur   string
		found bool
		value string
		cause error
	}{
		{"new key", "5", "", false, "5", nil},
		{"adds", "-2", "10", true, "8", nil},
		{"float", "0.5", "1", true, "1.5", nil},
		{"not an integer", "1", "x", true, "", view.ErrNotInteger},
		{"not a float", "0.5", "x", true, "", view.ErrNotFloat},
		{"overflow", "1", "9223372036854775807", true, "", view.ErrOverflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inc, e := ParseIncrement(tt.by)
			if e != nil {
				t.Fatal(e)
			}
			entry := view.Entry{Value: []byte(tt.cur), Stamp: record.Stamp{HLC: 1, Origin: 1, Seq: 1}}
			m, value, err := Count("t", "k", entry, tt.found, inc)
			if tt.cause != nil {
				var we *wire.Error
				if !errors.Is(err, tt.cause) || !errors.As(err, &we) || we.Code != wire.CodeConflict {
					t.Fatalf("Count = %v; want a conflict caused by %v", err, tt.cause)
				}
				return
			}
			if err != nil || string(value) != tt.value || m.Validate() != nil || tt.found != m.Counter() {
				t.Fatalf("Count = %+v, %q, %v; want %q (an increment on a found version)", m, value, err, tt.value)
			}
		})
	}
	for _, bad := range []string{"", "x", "1e999", " 1", "NaN"} {
		if _, e := ParseIncrement(bad); code(e) != wire.CodeBadRequest {
			t.Errorf("ParseIncrement(%q) = %v; want bad_request", bad, e)
		}
	}
}

// entries is a Reader over fixed entries (a lower floor's fake: the
// doors' tests run the daemon's node adapter).
type entries map[string]view.Entry

func (m entries) Counting(_, key string) (view.Entry, bool) {
	e, ok := m[key]
	return e, ok && e.Value != nil
}

func (m entries) PendingKey(string, string) []view.PendingRecord { return nil }

// TestIncr: the counter operation reads the key and gives the message
// (an increment of the version held, of the absence, or a transaction's
// own value written again) and the entry a later read of the transaction
// sees.
func TestIncr(t *testing.T) {
	v1 := record.Stamp{HLC: 9, Origin: 1, Seq: 1}
	tomb := record.Stamp{HLC: 5, Origin: 2, Seq: 3}
	n := entries{
		"held":    {Value: []byte("10"), Stamp: v1, Base: []byte("10")},
		"deleted": {Absence: &view.Absence{Of: tomb}},
		"never":   {Absence: &view.Absence{Horizon: 7}},
		"revived": {Value: []byte("4"), Stamp: record.Genesis, Base: []byte("0"), Absence: &view.Absence{Horizon: 7}},
		"tx":      {Value: []byte("2")},
	}
	tests := []struct {
		key, value string
		on         record.Stamp // the message's target
		absent     bool
		seen       record.Stamp // the stamp a later read sees
	}{
		{"held", "13", v1, false, v1},
		{"deleted", "3", tomb, true, tomb},
		{"never", "3", record.Stamp{HLC: record.MakeHLC(7, 0)}, true, record.Genesis},
		{"revived", "7", record.Stamp{HLC: record.MakeHLC(7, 0)}, true, record.Genesis},
		{"tx", "5", record.Stamp{}, false, record.Stamp{}},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			res, err := Incr(n, "t", tt.key, view.Increment{N: 3})
			m := res.Message
			switch {
			case err != nil || m.Validate() != nil:
				t.Fatalf("Incr: %+v, %v (valid: %v)", m, err, m.Validate())
			case string(res.Value) != tt.value || string(res.Entry.Value) != tt.value:
				t.Fatalf("value %q, entry %q; want %q", res.Value, res.Entry.Value, tt.value)
			case m.CountOn != tt.on || m.CountAbsent != tt.absent || res.Entry.Stamp != tt.seen:
				t.Fatalf("counts on %+v (absent %v), the transaction sees %+v; want %+v (%v), %+v", m.CountOn, m.CountAbsent, res.Entry.Stamp, tt.on, tt.absent, tt.seen)
			case tt.absent != (res.Entry.Absence != nil):
				t.Fatalf("the transaction's entry names the absence %+v", res.Entry.Absence)
			}
		})
	}
}

// TestChangeExpiry: the expiry operation writes an expiry change bound to
// the version held, under its condition; an instant past (0 too: PERSIST
// is ExpiryChange to 0) becomes the version's first instant past.
func TestChangeExpiry(t *testing.T) {
	v := record.Stamp{HLC: 9, Origin: 1, Seq: 1}
	tests := []struct {
		name      string
		cur, at   int64
		x         Expire
		change    bool
		wantAt    int64
		wantValue string
	}{
		{"expire", 0, 5000, Expire{}, true, 5000, "10"},
		{"nx refuses an expiry", 3000, 5000, Expire{NX: true}, false, 0, ""},
		{"gt", 3000, 5000, Expire{GT: true}, true, 5000, "10"},
		{"lt refuses a later one", 3000, 5000, Expire{LT: true}, false, 0, ""},
		{"past", 0, 500, Expire{}, true, 500, "10"},
		{"at 0 is an instant past", 3000, 0, Expire{}, true, 1, "10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := view.Entry{Value: []byte("13"), Base: []byte("10"), Stamp: v, ExpiresAt: tt.cur}
			m, change := ChangeExpiry("t", "k", e, tt.at, 1000, tt.x)
			if change != tt.change {
				t.Fatalf("change %v, want %v", change, tt.change)
			}
			if change && (m.ExpiryOf != v || m.ExpiresAt != tt.wantAt || string(m.Value) != tt.wantValue || m.Validate() != nil) {
				t.Fatalf("message %+v; want an expiry change of %+v to %d carrying the base %q", m, v, tt.wantAt, tt.wantValue)
			}
		})
	}
}
