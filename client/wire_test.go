package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestDecodeAPIError(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		code   string
		msg    string
	}{
		{"wire format", 404, `{"error":{"code":"not_found","message":"no key"}}`, "not_found", "no key"},
		{"code only", 507, `{"error":{"code":"store_full"}}`, "store_full", ""},
		{"string error", 503, `{"error":"recovering"}`, "", "recovering"},
		{"plain text", 405, "Method Not Allowed\n", "", "Method Not Allowed"},
		{"empty", 502, "", "", ""},
		{"not an object", 500, `[1,2]`, "", "[1,2]"},
		{"invalid utf-8", 500, "bad \xff byte", "", "bad \uFFFD byte"},
		{"long", 500, strings.Repeat("é", 600), "", strings.Repeat("é", 256) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ParseAPIError(tt.status, []byte(tt.body))
			if e.Status != tt.status || e.Code != tt.code || e.Message != tt.msg {
				t.Errorf("got %+v, want %d %q %q", e, tt.status, tt.code, tt.msg)
			}
			if !strings.Contains(e.Error(), "HTTP") {
				t.Errorf("Error() %q", e.Error())
			}
		})
	}
	for _, tt := range []struct {
		e    APIError
		want bool
	}{
		{APIError{Status: 404, Code: CodeNotFound}, true},
		{APIError{Status: 404}, true},
		{APIError{Status: 404, Code: CodeRouteNotFound}, false},
		{APIError{Status: 400, Code: CodeNotFound}, false},
	} {
		if got := errors.Is(&tt.e, ErrNotFound); got != tt.want {
			t.Errorf("errors.Is(%+v, ErrNotFound) = %v", tt.e, got)
		}
	}
}

func TestDecodeEvent(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Event
		err  bool
	}{
		{"text", `{"offset":12,"topic":"t","key":"k","tag":"x","value":"héllo","delete":false,"origin":"00000000000000ab","seq":3,"hlc":"18446744073709551615","time":"2025-01-02T03:04:05.678Z"}`,
			Event{Offset: 12, Topic: "t", Key: "k", Tag: "x", Value: []byte("héllo"), Origin: 0xab, Seq: 3, HLC: 1<<64 - 1,
				Time: time.Date(2025, 1, 2, 3, 4, 5, 678e6, time.UTC)}, false},
		{"base64", `{"offset":0,"topic":"t","key":"","value_base64":"/wA=","origin":"1","seq":1,"hlc":"5","time":""}`,
			Event{Topic: "t", Value: []byte{0xff, 0}, Origin: 1, Seq: 1, HLC: 5}, false},
		{"tombstone", `{"offset":1,"topic":"t","key":"k","delete":true,"origin":"ff","seq":2,"hlc":"7"}`,
			Event{Offset: 1, Topic: "t", Key: "k", Delete: true, Value: []byte{}, Origin: 0xff, Seq: 2, HLC: 7}, false},
		{"hlc as number", `{"hlc":123}`, Event{HLC: 123, Value: []byte{}}, false},
		{"clustering", `{"offset":5,"topic":"t","key":"k","value":"v","origin":"00000000deadbeef","seq":42,"hlc":"9","id":"00000000deadbeef-42","attempt":3,"queue":7}`,
			Event{Offset: 5, Topic: "t", Key: "k", Value: []byte("v"), Origin: 0xdeadbeef, Seq: 42, HLC: 9, ID: "00000000deadbeef-42", Attempt: 3, Queue: 7}, false},
		{"time fields", `{"offset":2,"key":"k","value":"9.99","origin":"ab","seq":2,"hlc":"9","time":"2025-01-02T03:04:05.678Z","expires_at":"2025-01-03T02:00:00.000Z","effective_at":"2025-01-03T00:00:00Z"}`,
			Event{Offset: 2, Key: "k", Value: []byte("9.99"), Origin: 0xab, Seq: 2, HLC: 9, Time: time.Date(2025, 1, 2, 3, 4, 5, 678e6, time.UTC),
				ExpiresAt: time.Date(2025, 1, 3, 2, 0, 0, 0, time.UTC), EffectiveAt: time.Date(2025, 1, 3, 0, 0, 0, 0, time.UTC)}, false},
		{"cancel", `{"key":"k","value":"","cancel":true,"effective_at":"2025-01-03T00:00:00.000Z"}`,
			Event{Key: "k", Value: []byte{}, Cancel: true, EffectiveAt: time.Date(2025, 1, 3, 0, 0, 0, 0, time.UTC)}, false},
		{"bad expires_at", `{"expires_at":"tomorrow"}`, Event{}, true},
		{"bad effective_at", `{"effective_at":1735862400000}`, Event{}, true},
		{"queue 0", `{"id":"0000000000000001-1","attempt":1,"queue":0}`, Event{Value: []byte{}, ID: "0000000000000001-1", Attempt: 1}, false},
		{"bad attempt", `{"attempt":"1"}`, Event{}, true},
		{"both values", `{"value":"a","value_base64":"YQ=="}`, Event{}, true},
		{"bad base64", `{"value_base64":"!!"}`, Event{}, true},
		{"bad origin", `{"origin":"xyz"}`, Event{}, true},
		{"origin too long", `{"origin":"00000000000000000001"}`, Event{}, true},
		{"hlc overflow", `{"hlc":"18446744073709551616"}`, Event{}, true},
		{"negative hlc", `{"hlc":"-1"}`, Event{}, true},
		{"bad time", `{"time":"yesterday"}`, Event{}, true},
		{"not json", `{"offset":`, Event{}, true},
		// encoding/json would read these keys as U+FFFD, another key.
		{"invalid utf-8 key", "{\"key\":\"z\xc3\"}", Event{}, true},
		{"half a surrogate pair", `{"key":"\ud800"}`, Event{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeEvent([]byte(tt.line))
			if tt.err {
				if !errors.Is(err, ErrBadResponse) {
					t.Fatalf("err %v, want ErrBadResponse", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameEvent(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func sameEvent(a, b Event) bool {
	return a.Offset == b.Offset && a.Topic == b.Topic && a.Key == b.Key && a.Tag == b.Tag &&
		bytes.Equal(a.Value, b.Value) && a.Delete == b.Delete && a.Origin == b.Origin &&
		a.Seq == b.Seq && a.HLC == b.HLC && a.Time.Equal(b.Time) &&
		a.ExpiresAt.Equal(b.ExpiresAt) && a.EffectiveAt.Equal(b.EffectiveAt) && a.Cancel == b.Cancel &&
		a.ID == b.ID && a.Attempt == b.Attempt && a.Queue == b.Queue &&
		sameOf(a.ExpiryOf, b.ExpiryOf) && sameOf(a.IncrementOf, b.IncrementOf)
}

func sameOf(a, b *VersionOf) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func TestAppendMessage(t *testing.T) {
	tests := []struct {
		m    Message
		want string
	}{
		{Message{Key: "k", Value: []byte("v")}, `{"key":"k","value":"v"}`},
		{Message{Key: "k", Tag: "t", Value: []byte{0xff}}, `{"key":"k","tag":"t","value_base64":"/w=="}`},
		{Message{Key: "k", Delete: true}, `{"key":"k","delete":true}`},
		{Message{}, `{}`},
		// U+2028 is escaped, as the daemon escapes it (one escaper: wire).
		{Message{Value: []byte("a\"b\\c\n\x00\x1f\u2028")}, `{"value":"a\"b\\c\n\u0000\u001f\u2028"}`},
		{Message{Key: "bad\xffkey"}, `{"key":"bad\ufffdkey"}`},
	}
	for _, tt := range tests {
		if got := string(appendMessage(nil, &tt.m)); got != tt.want {
			t.Errorf("appendMessage(%+v) = %s, want %s", tt.m, got, tt.want)
		}
	}
}

// FuzzDecodeEvent: no input panics, and what decodes survives a round trip
// through the wire form.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"offset":12,"topic":"t","key":"k","tag":"x","value":"v","delete":false,"origin":"00000000000000ab","seq":3,"hlc":"123","time":"2025-01-02T03:04:05.678Z"}`))
	f.Add([]byte(`{"value_base64":"/wA=","origin":"ffffffffffffffff","hlc":"18446744073709551615"}`))
	f.Add([]byte(`{"delete":true,"hlc":5,"time":"2025-01-02T03:04:05+02:00"}`))
	f.Add([]byte(`{"value":"a","value_base64":"YQ=="}`))
	f.Add([]byte(`{"value":"\ud800"}`))
	f.Add([]byte(`{"offset":5,"value":"v","origin":"00000000deadbeef","seq":42,"id":"00000000deadbeef-42","attempt":2,"queue":0}`))
	f.Add([]byte(`{"queue":3}`))
	f.Add([]byte(`{"value":"3","increment_of":{"origin":"00000000deadbeef","seq":6,"absent":true}}`))
	f.Add([]byte(`{"value":"0","expiry_of":{"absent":true}}`))
	f.Add([]byte(`{"expiry_of":{"origin":"zz"}}`))
	f.Add([]byte(`{"value":"9.99","expires_at":"2025-01-03T02:00:00.000Z","effective_at":"2025-01-03T00:00:00+01:00"}`))
	f.Add([]byte(`{"cancel":true,"effective_at":"2025-01-03T00:00:00.123456789Z"}`))
	f.Add([]byte(`{"value":"0","expires_at":"","expiry_of":{"origin":"00000000deadbeef","seq":2}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := decodeEvent(line)
		if err != nil {
			if !errors.Is(err, ErrBadResponse) {
				t.Fatalf("error %v does not wrap ErrBadResponse", err)
			}
			return
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		checkWireStrings(t, b)
		back, err := decodeEvent(b)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		// Time keeps milliseconds on the wire.
		ev.Time = ev.Time.Truncate(time.Millisecond)
		ev.ExpiresAt = ev.ExpiresAt.Truncate(time.Millisecond)
		ev.EffectiveAt = ev.EffectiveAt.Truncate(time.Millisecond)
		if !sameEvent(ev, back) {
			t.Fatalf("round trip: %+v -> %s -> %+v", ev, b, back)
		}
	})
}

// FuzzAppendMessage: the hand-written encoder makes valid JSON that the
// wire decoder reads back as the same message.
func FuzzAppendMessage(f *testing.F) {
	f.Add("k", "t", []byte("v"), false)
	f.Add("", "", []byte{}, true)
	f.Add("a\"b\\c\n", "tag", []byte{0xff, 0xfe}, false)
	f.Add("\x00\x1f\u2028é", "", []byte("\xed\xa0\x80"), false)
	f.Fuzz(func(t *testing.T, key, tag string, value []byte, del bool) {
		m := Message{Key: key, Tag: tag, Value: value, Delete: del}
		b := appendMessage(nil, &m)
		if !json.Valid(b) {
			t.Fatalf("invalid JSON %q", b)
		}
		var back Message
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("decoding %s: %v", b, err)
		}
		// Keys and tags are UTF-8 by the API's rules; what is not comes
		// back as encoding/json would have sent it.
		wantKey, wantTag := key, tag
		if !utf8.ValidString(key) {
			wantKey = viaEncodingJSON(t, key)
		}
		if !utf8.ValidString(tag) {
			wantTag = viaEncodingJSON(t, tag)
		}
		if back.Key != wantKey || back.Tag != wantTag || !bytes.Equal(back.Value, value) || back.Delete != del {
			t.Fatalf("round trip %+v -> %s -> %+v", m, b, back)
		}
	})
}

func viaEncodingJSON(t *testing.T, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzDecodeAPIError: any answer decodes to an error with the status
// kept and a UTF-8 message.
func FuzzDecodeAPIError(f *testing.F) {
	f.Add(404, []byte(`{"error":{"code":"not_found","message":"no key"}}`))
	f.Add(503, []byte(`{"error":"recovering"}`))
	f.Add(500, []byte("plain \xff text"))
	f.Add(400, []byte(`{"error":{"code":1}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := ParseAPIError(status, body)
		if e.Status != status {
			t.Fatalf("status %d, want %d", e.Status, status)
		}
		if !utf8.ValidString(e.Message) {
			t.Fatalf("message %q is not UTF-8", e.Message)
		}
		_ = e.Error()
	})
}

// FuzzPutResult: no input panics; what decodes survives a round trip.
func FuzzPutResult(f *testing.F) {
	f.Add([]byte(`{"topic":"t","key":"k","origin":"00ab000000000000","seq":7,"hlc":"123456789012345678","time":"2025-01-02T03:04:05.678Z","status":"ok"}`))
	f.Add([]byte(`{"status":"replica_timeout","hlc":1}`))
	f.Add([]byte(`{"origin":"-1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r PutResult
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		checkWireStrings(t, out)
		var back PutResult
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		r.Time = r.Time.Truncate(time.Millisecond)
		if back.Topic != r.Topic || back.Key != r.Key || back.Origin != r.Origin || back.Seq != r.Seq ||
			back.HLC != r.HLC || !back.Time.Equal(r.Time) || back.Status != r.Status {
			t.Fatalf("round trip %+v -> %s -> %+v", r, out, back)
		}
	})
}

// checkWireStrings checks that a marshaled object carries hlc as a
// decimal string and origin as 16 hex digits, as the wire does.
func checkWireStrings(t *testing.T, b []byte) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if h, ok := m["hlc"].(string); !ok {
		t.Fatalf("%s: hlc is not a string", b)
	} else if _, err := strconv.ParseUint(h, 10, 64); err != nil {
		t.Fatalf("%s: hlc is not a decimal string", b)
	}
	if o, ok := m["origin"].(string); !ok || len(o) != 16 {
		t.Fatalf("%s: origin is not 16 hex digits", b)
	}
}

func TestMarshalWireForm(t *testing.T) {
	ev, err := json.Marshal(Event{Offset: 3, Topic: "t", Key: "k", Value: []byte{0xff}, Origin: 0xab, Seq: 2, HLC: 1 << 60,
		Time: time.Date(2025, 1, 2, 3, 4, 5, 6e6, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"hlc":"1152921504606846976"`, `"origin":"00000000000000ab"`, `"value_base64":"/w=="`, `"time":"2025-01-02T03:04:05.006Z"`, `"offset":3`} {
		if !strings.Contains(string(ev), want) {
			t.Errorf("event %s lacks %s", ev, want)
		}
	}
	for _, absent := range []string{`"id"`, `"attempt"`, `"queue"`} {
		if strings.Contains(string(ev), absent) {
			t.Errorf("broadcasting event %s has %s", ev, absent)
		}
	}
	ev, err = json.Marshal(Event{ID: "00000000000000ab-2", Attempt: 1, Queue: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id":"00000000000000ab-2"`, `"attempt":1`, `"queue":0`} {
		if !strings.Contains(string(ev), want) {
			t.Errorf("clustering event %s lacks %s", ev, want)
		}
	}
	pr, err := json.Marshal(PutResult{Topic: "t", Origin: 1, Seq: 9, HLC: 77, Status: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"hlc":"77"`, `"origin":"0000000000000001"`, `"seq":9`, `"status":"ok"`} {
		if !strings.Contains(string(pr), want) {
			t.Errorf("result %s lacks %s", pr, want)
		}
	}
}
