package jsonstr

import "testing"

func TestCheck(t *testing.T) {
	tests := []struct {
		name, text, want string // want "": no problem
	}{
		{"plain", `{"key":"k","value":"héllo 🔑"}`, ""},
		{"escapes", `{"key":"a\"b\\c\n\u00e9\ufffd"}`, ""},
		{"surrogate pair", `{"key":"\ud83d\udd11"}`, ""},
		{"escaped backslash before u", `{"key":"\\ud800"}`, ""},
		{"bytes outside strings are left to encoding/json", "{\"key\":1}\xff", ""},
		{"invalid byte in a value", "{\"key\":\"k\",\"value\":\"\xff\"}", `field "value": invalid UTF-8 (byte 0xff) at byte 20`},
		{"truncated sequence", "{\"key\":\"\xe2\x82\"}", `field "key": invalid UTF-8 (byte 0xe2) at byte 8`},
		{"in a field name", "{\"k\xc3\":\"v\"}", `a field name: invalid UTF-8 (byte 0xc3) at byte 3`},
		{"in an array", "{\"ack\":[\"a\",\"\x80\"]}", `field "ack": invalid UTF-8 (byte 0x80) at byte 13`},
		{"a bare string", "\"\xff\"", `a string: invalid UTF-8 (byte 0xff) at byte 1`},
		{"lone high surrogate", `{"key":"x\ud800"}`, `field "key": the escape \ud800 is half a UTF-16 surrogate pair at byte 9`},
		{"lone low surrogate", `{"key":"\uDC00"}`, `field "key": the escape \uDC00 is half a UTF-16 surrogate pair at byte 8`},
		{"high then not low", `{"key":"\ud800\u0041"}`, `field "key": the escape \ud800 is half a UTF-16 surrogate pair at byte 8`},
		{"high at the end", `{"key":"\udbff`, `field "key": the escape \udbff is half a UTF-16 surrogate pair at byte 8`},
	}
	for _, tt := range tests {
		got := ""
		if p := Check([]byte(tt.text)); p != nil {
			got = p.Error()
		}
		if got != tt.want {
			t.Errorf("%s: Check(%q) = %q; want %q", tt.name, tt.text, got, tt.want)
		}
	}
}
