package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

func TestDecodeMessages(t *testing.T) {
	const max = 16
	tests := []struct {
		name     string
		body     string
		ndjson   bool
		want     []record.Message
		wantCode string
		wantMsg  string
	}{
		{name: "one", body: `{"key":"k","tag":"t","value":"v"}`,
			want: []record.Message{{Topic: "T", Key: "k", Tag: "t", Value: []byte("v")}}},
		{name: "base64", body: `{"key":"k","value_base64":"AAEC"}`,
			want: []record.Message{{Topic: "T", Key: "k", Value: []byte{0, 1, 2}}}},
		{name: "no value", body: `{"key":"k"}`, want: []record.Message{{Topic: "T", Key: "k"}}},
		{name: "null value is no value", body: `{"key":"k","value":null}`, want: []record.Message{{Topic: "T", Key: "k"}}},
		{name: "stream message", body: `{"value":"v"}`, want: []record.Message{{Topic: "T", Value: []byte("v")}}},
		{name: "delete", body: `{"key":"k","delete":true}`, want: []record.Message{{Topic: "T", Key: "k", Delete: true}}},
		{name: "ndjson", ndjson: true, body: "{\"key\":\"a\",\"value\":\"1\"}\n\n  \n{\"key\":\"b\",\"value\":\"2\"}",
			want: []record.Message{{Topic: "T", Key: "a", Value: []byte("1")}, {Topic: "T", Key: "b", Value: []byte("2")}}},
		{name: "ndjson crlf", ndjson: true, body: "{\"key\":\"a\"}\r\n{\"key\":\"b\"}\r\n",
			want: []record.Message{{Topic: "T", Key: "a"}, {Topic: "T", Key: "b"}}},
		{name: "value at the limit", body: `{"key":"k","value":"0123456789abcdef"}`,
			want: []record.Message{{Topic: "T", Key: "k", Value: []byte("0123456789abcdef")}}},

		{name: "empty", body: "", wantCode: wire.CodeBadJSON},
		{name: "empty ndjson", body: "\n\n", ndjson: true, wantCode: wire.CodeBadRequest},
		{name: "malformed", body: `{"key":`, wantCode: wire.CodeBadJSON},
		{name: "not an object", body: `["k"]`, wantCode: wire.CodeBadJSON},
		{name: "wrong type", body: `{"key":1}`, wantCode: wire.CodeBadJSON, wantMsg: `field "key"`},
		{name: "unknown field", body: `{"key":"k","vaule":"x"}`, wantCode: wire.CodeBadJSON, wantMsg: "vaule"},
		{name: "two objects without ndjson", body: "{\"key\":\"a\"}\n{\"key\":\"b\"}", wantCode: wire.CodeBadJSON, wantMsg: "application/x-ndjson"},
		{name: "trailing garbage", body: `{"key":"a"}]`, wantCode: wire.CodeBadJSON},
		{name: "two objects on a line", ndjson: true, body: `{"key":"a"} {"key":"b"}`, wantCode: wire.CodeBadJSON, wantMsg: "line 1"},
		{name: "bad line names its number", ndjson: true, body: "{\"key\":\"a\"}\n{oops}\n", wantCode: wire.CodeBadJSON, wantMsg: "line 2"},
		{name: "both values", body: `{"key":"k","value":"a","value_base64":"YQ=="}`, wantCode: wire.CodeBadRequest},
		{name: "bad base64", body: `{"key":"k","value_base64":"!!!"}`, wantCode: wire.CodeBadBase64},
		{name: "base64 bad padding", body: `{"key":"k","value_base64":"YQ="}`, wantCode: wire.CodeBadBase64},
		{name: "value too large", body: `{"key":"k","value":"0123456789abcdefX"}`, wantCode: wire.CodeValueTooLarge},
		{name: "base64 value too large", body: `{"key":"k","value_base64":"MDEyMzQ1Njc4OWFiY2RlZlg="}`, wantCode: wire.CodeValueTooLarge},
		{name: "key too long", body: `{"key":"` + strings.Repeat("k", 1025) + `"}`, wantCode: wire.CodeInvalidName},
		{name: "key control char", body: `{"key":"a\u0000b"}`, wantCode: wire.CodeInvalidName},
		{name: "bad tag", body: `{"key":"k","tag":"a b"}`, wantCode: wire.CodeInvalidName},
		{name: "delete without key", body: `{"delete":true}`, wantCode: wire.CodeInvalidName},
		{name: "delete with value", body: `{"key":"k","delete":true,"value":"x"}`, wantCode: wire.CodeBadRequest},
		{name: "delete not bool", body: `{"key":"k","delete":"yes"}`, wantCode: wire.CodeBadJSON},

		// Strings exactly as sent, or refused: encoding/json would turn each
		// of these into U+FFFD, merging distinct keys.
		{name: "surrogate pair escape", body: `{"key":"\ud83d\udd11"}`, want: []record.Message{{Topic: "T", Key: "🔑"}}},
		{name: "U+FFFD escape is a character", body: `{"key":"\ufffd"}`, want: []record.Message{{Topic: "T", Key: "\uFFFD"}}},
		{name: "escaped backslash before u", body: `{"key":"a\\ud800"}`, want: []record.Message{{Topic: "T", Key: `a\ud800`}}},
		{name: "invalid UTF-8 key", body: "{\"key\":\"z\xc3\",\"value\":\"x\"}", wantCode: wire.CodeBadJSON, wantMsg: `field "key": invalid UTF-8 (byte 0xc3) at byte 9`},
		{name: "invalid UTF-8 key on line 2", ndjson: true, body: "{\"key\":\"z\xc3\",\"value\":\"x\"}\n{\"key\":\"z\xc4\",\"value\":\"y\"}\n",
			wantCode: wire.CodeBadJSON, wantMsg: "line 1: field \"key\""},
		{name: "invalid UTF-8 value", body: "{\"key\":\"g1\",\"value\":\"\xff\xfe\"}", wantCode: wire.CodeBadJSON, wantMsg: `field "value": invalid UTF-8 (byte 0xff) at byte 21: JSON strings must be valid UTF-8 (send a binary value as "value_base64")`},
		{name: "invalid UTF-8 value after an escape", ndjson: true, body: "{\"key\":\"a\"}\n{\"key\":\"q\\n\",\"value\":\"\xff\"}", wantCode: wire.CodeBadJSON, wantMsg: `line 2: field "value"`},
		{name: "invalid UTF-8 tag", body: "{\"key\":\"k\",\"tag\":\"\x80\"}", wantCode: wire.CodeBadJSON, wantMsg: `field "tag"`},
		{name: "invalid UTF-8 field name", body: "{\"key\xff\":\"k\"}", wantCode: wire.CodeBadJSON, wantMsg: "a field name"},
		{name: "truncated UTF-8 at the end", body: "{\"key\":\"k\xe2\x82\"}", wantCode: wire.CodeBadJSON, wantMsg: "invalid UTF-8"},
		{name: "lone high surrogate", body: `{"key":"\ud800"}`, wantCode: wire.CodeBadJSON, wantMsg: `field "key": the escape \ud800 is half a UTF-16 surrogate pair at byte 8`},
		{name: "lone low surrogate", body: `{"key":"k","value":"\uDC00x"}`, wantCode: wire.CodeBadJSON, wantMsg: `field "value"`},
		{name: "high surrogate then not a low one", body: `{"key":"\ud800\u0041"}`, wantCode: wire.CodeBadJSON, wantMsg: "surrogate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := decodeMessages("T", []byte(tt.body), tt.ndjson, max, 1)
			if tt.wantCode != "" {
				if e == nil || e.Code != tt.wantCode || !strings.Contains(e.Message, tt.wantMsg) {
					t.Fatalf("decode = %v, %v; want %s containing %q", got, e, tt.wantCode, tt.wantMsg)
				}
				return
			}
			if e != nil {
				t.Fatalf("decode: %v", e)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d messages; want %d", len(got), len(tt.want))
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Topic != w.Topic || g.Key != w.Key || g.Tag != w.Tag || g.Delete != w.Delete || !bytes.Equal(g.Value, w.Value) {
					t.Fatalf("message %d = %+v; want %+v", i, g, w)
				}
			}
		})
	}
}

// FuzzDecodeMessages feeds the batch decoder arbitrary bodies. Whatever it
// accepts must be UTF-8 with every string as sent, pass every check the
// API promises (so the store never sees a bad name or an oversize value),
// and survive a round trip through the NDJSON the daemon itself writes.
func FuzzDecodeMessages(f *testing.F) {
	for _, seed := range []string{
		`{"key":"k","tag":"t","value":"v"}`,
		`{"key":"k","value_base64":"AAEC"}`,
		`{"key":"k","delete":true}`,
		"{\"key\":\"a\",\"value\":\"1\"}\n{\"key\":\"b\",\"value\":\"\\u00ff\"}\n",
		`{"value":"stream"}`,
		`{"key":"a\u0000"}`,
		`{"key":"k","value":"a","value_base64":"YQ=="}`,
		`{"key":`,
		"",
		`{"key":"k","value":"v","ttl_ms":5000}`,
		`{"key":"k","value":"v","expires_at":"2030-01-01T00:00:00Z","effective_at":1893456000000}`,
		`{"key":"k","cancel":true,"effective_at":"2030-01-01T00:00:00.5+01:00"}`,
		`{"key":"k","delete":true,"effective_at":1893456000000}`,
		`{"ttl_ms":5}`,
		`{"key":"k","ttl_ms":5,"expires_at":6}`,
		`{"key":"k","expires_at":"yesterday"}`,
		"{\"key\":\"a\",\"value\":\"1\",\"effective_at\":9}\n{\"key\":\"b\",\"value\":\"2\",\"effective_at\":9}\n",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	const max = 64
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		msgs, e := decodeMessages("topic", body, ndjson, max, 1)
		if e != nil {
			if msgs != nil {
				t.Fatalf("error %v with %d messages", e, len(msgs))
			}
			if wire.HTTPStatus(e.Code) < 400 || wire.HTTPStatus(e.Code) >= 500 {
				t.Fatalf("decode error %v maps to status %d", e, wire.HTTPStatus(e.Code))
			}
			return
		}
		// JSON text is UTF-8, and no string was rewritten on the way.
		if !utf8.Valid(body) {
			t.Fatalf("accepted %q, which is not UTF-8", body)
		}
		for l := range bytes.SplitSeq(body, []byte{'\n'}) {
			if !stringsAsSent(l) {
				t.Fatalf("accepted %q, whose strings encoding/json rewrites", body)
			}
		}
		if len(msgs) == 0 || !ndjson && len(msgs) != 1 {
			t.Fatalf("%d messages (ndjson=%v)", len(msgs), ndjson)
		}
		var again []byte
		for _, m := range msgs {
			if m.Topic != "topic" || len(m.Value) > max || wire.CheckTag(m.Tag) != nil ||
				m.Key != "" && wire.CheckKey(m.Key) != nil || m.Delete && (m.Key == "" || len(m.Value) > 0) {
				t.Fatalf("accepted a bad message: %+v", m)
			}
			if err := m.Validate(); err != nil {
				t.Fatalf("accepted a message the store refuses: %+v: %v", m, err)
			}
			// Re-encode as the daemon would and decode again.
			again = append(again, `{"key":`...)
			again = wire.AppendString(again, m.Key)
			again = append(again, `,"tag":`...)
			again = wire.AppendString(again, m.Tag)
			if utf8.Valid(m.Value) {
				again = append(again, `,"value":`...)
				again = wire.AppendString(again, string(m.Value))
			} else {
				again = append(again, `,"value_base64":"`...)
				again = append(again, []byte(b64(m.Value))...)
				again = append(again, '"')
			}
			if m.Delete {
				again = append(again, `,"delete":true`...)
			}
			if m.Cancel {
				again = append(again, `,"cancel":true`...)
			}
			if m.ExpiresAt != 0 {
				again = fmt.Appendf(again, `,"expires_at":%d`, m.ExpiresAt)
			}
			if m.EffectiveAt != 0 {
				again = fmt.Appendf(again, `,"effective_at":%d`, m.EffectiveAt)
			}
			again = append(again, "}\n"...)
		}
		back, e := decodeMessages("topic", again, true, max, 1)
		if e != nil {
			t.Fatalf("round trip of %q: %v", again, e)
		}
		for i := range msgs {
			a, b := msgs[i], back[i]
			if a.Key != b.Key || a.Tag != b.Tag || a.Delete != b.Delete || !bytes.Equal(a.Value, b.Value) ||
				a.Cancel != b.Cancel || a.ExpiresAt != b.ExpiresAt || a.EffectiveAt != b.EffectiveAt || a.BatchFollow != b.BatchFollow {
				t.Fatalf("round trip changed message %d: %+v -> %+v", i, a, b)
			}
		}
	})
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// FuzzFastMessage checks the message decoder against encoding/json, the
// reference, both ways. Whatever fastMessage accepts, encoding/json (strict,
// as the daemon runs it) accepts too, with the same fields. And decodeWire
// (fastMessage, then its fallback) accepts exactly what encoding/json reads
// without rewriting a string (invalid UTF-8 or half a surrogate pair, which
// encoding/json turns into U+FFFD) and refuses everything else, so two keys
// that differ there are never stored as one.
func FuzzFastMessage(f *testing.F) {
	for _, seed := range []string{
		`{"key":"k","tag":"t","value":"v"}`,
		` { "value_base64" : "AAEC" , "key":"k" } `,
		`{"key":"k","delete":true}`,
		`{"key":"k","delete":false,"value":""}`,
		`{}`,
		`{"key":"k","key":"j"}`,
		`{"key":"\u00ff"}`,
		`{"other":1}`,
		`{"key":"k"}x`,
		"{\"key\":\"z\xc3\",\"value\":\"x\"}",
		"{\"key\":\"g1\",\"value\":\"\xff\xfe\"}",
		`{"key":"\ud800","value":"\ud83d\udd11"}`,
		`{"key":"\ufffd\\ud800","key":"k"}`,
		`{"key":"k","value":"v","ttl_ms":5000}`,
		`{"key":"k","value":"v","expires_at":"2030-01-01T00:00:00Z","effective_at":1893456000000}`,
		`{"key":"k","cancel":true,"effective_at":"2030-01-01T00:00:00.5+01:00"}`,
		`{"key":"k","ttl_ms":-5,"cancel":false}`,
		`{"key":"k","ttl_ms":5e3}`,
		`{"key":"k","expires_at":1.5e12}`,
		`{"key":"k","expires_at":0}`,
		`{"key":"k","effective_at":"\u0032030-01-01T00:00:00Z"}`,
		`{"key":"k","effective_at":null,"ttl_ms":null}`,
		`{"key":"k","ttl_ms":99999999999999999999}`,
		`{"key":"k","expires_at":"yesterday"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var slow wireMessage
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		slowErr := dec.Decode(&slow)
		slowOK := slowErr == nil && len(bytes.TrimSpace(b[dec.InputOffset():])) == 0
		faithful := utf8.Valid(b) && stringsAsSent(b)
		str := func(p *string) string {
			if p == nil {
				return "<nil>"
			}
			return *p
		}
		num := func(p *int64) string {
			if p == nil {
				return "<nil>"
			}
			return strconv.FormatInt(*p, 10)
		}
		at := func(p *wireInstant) string {
			if p == nil {
				return "<nil>"
			}
			return strconv.FormatInt(int64(*p), 10)
		}
		same := func(w wireMessage) bool {
			if w.raw != nil {
				v := string(w.raw)
				w.Value = &v
			}
			return w.Key == slow.Key && w.Tag == slow.Tag && w.Delete == slow.Delete && w.Cancel == slow.Cancel &&
				str(w.Value) == str(slow.Value) && str(w.ValueBase64) == str(slow.ValueBase64) &&
				num(w.TTLMs) == num(slow.TTLMs) && at(w.ExpiresAt) == at(slow.ExpiresAt) && at(w.EffectiveAt) == at(slow.EffectiveAt)
		}

		if fast, ok := fastMessage(b); ok {
			if !slowOK {
				t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", b, slowErr)
			}
			if !same(fast) {
				t.Fatalf("%q: fast %+v, encoding/json %+v", b, fast, slow)
			}
		}

		w, e := decodeWire(b)
		switch {
		case slowOK && faithful && e != nil:
			t.Fatalf("%q: refused (%v); encoding/json reads it as sent: %+v", b, e, slow)
		case slowOK && faithful && !same(w):
			t.Fatalf("%q: decoded %+v, encoding/json %+v", b, w, slow)
		case !(slowOK && faithful) && e == nil:
			t.Fatalf("%q: accepted as %+v; encoding/json refuses it (%v) or rewrites a string (faithful=%v)", b, w, slowErr, faithful)
		case e != nil && e.Code != wire.CodeBadJSON:
			t.Fatalf("%q: refused as %s; want bad_json", b, e.Code)
		}
	})
}

// stringsAsSent reports whether every string of the JSON text b (a prefix
// up to encoding/json's first syntax error) holds, after encoding/json
// decodes it, no U+FFFD the text did not spell: encoding/json writes one
// for each invalid byte and each half surrogate pair. The fuzz test's
// reference, independent of checkJSONStrings: it lets encoding/json find
// the strings and only counts.
func stringsAsSent(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		off := dec.InputOffset()
		if s, ok := tok.(string); ok {
			lit := b[prev:off]
			lit = lit[bytes.IndexByte(lit, '"'):]
			if strings.Count(s, "\uFFFD") != spelledFFFD(lit) {
				return false
			}
		}
		prev = off
	}
}

// spelledFFFD counts the U+FFFD a JSON string literal spells: as itself,
// or as the escape \ufffd.
func spelledFFFD(lit []byte) int {
	n := 0
	for i := 0; i < len(lit); {
		switch {
		case lit[i] == '\\' && i+5 < len(lit) && lit[i+1] == 'u':
			if strings.EqualFold(string(lit[i+2:i+6]), "fffd") {
				n++
			}
			i += 6
		case lit[i] == '\\':
			i += 2
		default:
			r, size := utf8.DecodeRune(lit[i:])
			if r == utf8.RuneError && size == 3 {
				n++
			}
			i += size
		}
	}
	return n
}

// TestFastMessageTimeFields: the time fields in their usual shapes take
// the fast path, with the values encoding/json gives; the shapes it
// leaves to encoding/json (a sign, an exponent, an escape, null, an
// instant parseInstant refuses) report !ok.
func TestFastMessageTimeFields(t *testing.T) {
	tests := []struct {
		in                  string
		ok                  bool
		ttl, expires, effec int64 // 0: absent
		cancel              bool
	}{
		{`{"key":"k","value":"v","ttl_ms":5000}`, true, 5000, 0, 0, false},
		{`{"key":"k","expires_at":1893456000000 , "effective_at":"2030-01-01T00:00:00Z"}`, true, 0, 1893456000000, 1893456000000, false},
		{`{"key":"k","cancel":true,"effective_at":"2030-01-01T00:00:00.5+01:00"}`, true, 0, 0, 1893452400500, true},
		{`{"key":"k","cancel":false}`, true, 0, 0, 0, false},
		{`{"key":"k","ttl_ms":0}`, true, 0, 0, 0, false}, // decoded as 0; decodeMessage refuses it
		{`{"key":"k","ttl_ms":-5}`, false, 0, 0, 0, false},
		{`{"key":"k","ttl_ms":5e3}`, false, 0, 0, 0, false},
		{`{"key":"k","ttl_ms":05}`, false, 0, 0, 0, false},
		{`{"key":"k","expires_at":1.5e12}`, false, 0, 0, 0, false},
		{`{"key":"k","expires_at":0}`, false, 0, 0, 0, false},
		{`{"key":"k","expires_at":"yesterday"}`, false, 0, 0, 0, false},
		{`{"key":"k","effective_at":"\u0032030-01-01T00:00:00Z"}`, false, 0, 0, 0, false},
		{`{"key":"k","ttl_ms":null}`, false, 0, 0, 0, false},
		{`{"key":"k","cancel":true,"cancel":true}`, false, 0, 0, 0, false},
	}
	for _, tt := range tests {
		w, ok := fastMessage([]byte(tt.in))
		if ok != tt.ok {
			t.Fatalf("%s: fast path %v, want %v", tt.in, ok, tt.ok)
		}
		if !ok {
			continue
		}
		get := func(p *int64) int64 {
			if p == nil {
				return 0
			}
			return *p
		}
		inst := func(p *wireInstant) int64 {
			if p == nil {
				return 0
			}
			return int64(*p)
		}
		if tt.ttl != 0 && get(w.TTLMs) != tt.ttl || tt.ttl == 0 && w.TTLMs != nil && *w.TTLMs != 0 ||
			inst(w.ExpiresAt) != tt.expires || inst(w.EffectiveAt) != tt.effec || w.Cancel != tt.cancel {
			t.Fatalf("%s: ttl %v expires %v effective %v cancel %v", tt.in, get(w.TTLMs), inst(w.ExpiresAt), inst(w.EffectiveAt), w.Cancel)
		}
	}
}

// BenchmarkDecodeMessage is the decoding of one message object of a
// batch: plain, with ttl_ms, and with two instants (a number and an RFC
// 3339 string), by decodeWire (the fast path) and, for comparison, by
// encoding/json as the fallback runs it (path=json).
func BenchmarkDecodeMessage(b *testing.B) {
	for _, tt := range []struct{ name, body string }{
		{"plain", `{"key":"sku-000042","value":"19.99 EUR/unit"}`},
		{"ttl", `{"key":"sku-000042","value":"19.99 EUR/unit","ttl_ms":7200000}`},
		{"instants", `{"key":"sku-000042","value":"19.99 EUR/unit","effective_at":1796169600000,"expires_at":"2026-12-02T02:00:00Z"}`},
	} {
		body := []byte(tt.body)
		for _, path := range []string{"fast", "json"} {
			b.Run("fields="+tt.name+"/path="+path, func(b *testing.B) {
				if _, ok := fastMessage(body); !ok {
					b.Fatal("not on the fast path")
				}
				b.ReportAllocs()
				for b.Loop() {
					if path == "fast" {
						if _, e := decodeWire(body); e != nil {
							b.Fatal(e)
						}
					} else {
						var w wireMessage
						if e := decodeStrict(body, &w, "message object"); e != nil {
							b.Fatal(e)
						}
					}
				}
			})
		}
	}
}
