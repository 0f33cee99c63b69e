package wire

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	tests := []struct {
		kind, in string
		ok       bool
	}{
		{"topic", "prices", true},
		{"topic", "A.b_c-9", true},
		{"topic", "", false},
		{"topic", strings.Repeat("t", 128), true},
		{"topic", strings.Repeat("t", 129), false},
		{"topic", "with space", false},
		{"topic", "slash/inside", false},
		{"topic", "ünïcode", false},
		{"tag", "", true},
		{"tag", "blue", true},
		{"tag", strings.Repeat("t", 128), true},
		{"tag", strings.Repeat("t", 129), false},
		{"tag", "a|b", false},
		{"key", "sku/1", true},
		{"key", "ключ 🔑", true},
		{"key", "with space", true},
		{"key", "", false},
		{"key", strings.Repeat("k", 1024), true},
		{"key", strings.Repeat("k", 1025), false},
		{"key", "tab\there", false},
		{"key", "nul\x00", false},
		{"key", "del\x7f", false},
		{"key", "c1\u0085", false},
		{"key", "bad\xffutf8", false},
		{"key", "\uFFFD is fine", true},
	}
	for _, tt := range tests {
		var e *Error
		switch tt.kind {
		case "topic":
			e = CheckName("topic", tt.in)
		case "tag":
			e = CheckTag(tt.in)
		case "key":
			e = CheckKey(tt.in)
		}
		if (e == nil) != tt.ok {
			t.Errorf("%s %q: error %v; want ok=%v", tt.kind, tt.in, e, tt.ok)
		}
		if e != nil && e.Code != CodeInvalidName {
			t.Errorf("%s %q: code %s; want invalid_name", tt.kind, tt.in, e.Code)
		}
	}
}

// A name's offending character is shown as what it is: a UTF-8
// character with its bytes, a byte that is not UTF-8 in hex; never a byte
// read as Latin-1 (0xc3 shown as 'Ã').
func TestNameErrorShowsTheCharacter(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{CheckName("topic", "ünïcode"), `topic "ünïcode": 'ü' (bytes c3 bc) at byte 0 is not one of A-Z a-z 0-9 . _ -`},
		{CheckName("topic", "ab🔑"), `'🔑' (bytes f0 9f 94 91) at byte 2`},
		{CheckName("cursor name", "t\xff"), `cursor name "t\xff": byte 0xff at byte 1 (not UTF-8) is not one of`},
		{CheckName("topic", "with space"), `' ' at byte 4 is not one of`},
		{CheckTag("é"), `tag "é": 'é' (bytes c3 a9) at byte 0 is not one of`},
		{CheckKey("sku\xff"), "key: invalid UTF-8 at byte 3"},
		{CheckKey("sku-ключ\x01"), "key: control character U+0001 at byte 12"},
		{CheckKey("\x7f"), "key: control character U+007F at byte 0"},
	}
	for _, tt := range tests {
		if tt.err == nil || !strings.Contains(tt.err.Message, tt.want) || strings.Contains(tt.err.Message, "Ã") {
			t.Errorf("error %v; want one containing %q", tt.err, tt.want)
		}
	}
}
