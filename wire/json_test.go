package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " backslash \`, "ctl \x00\x01\x1f\x7f", "nl \n\r\t",
		"ünïcode 🔑", "bad \xff\xfe utf8", "\u2028\u2029", "<html>&amp;"} {
		b := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q encodes as %s, which is not JSON: %v", s, b, err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if strings.ContainsRune(s, utf8.RuneError) || !utf8.ValidString(s) {
			// Each invalid byte becomes one U+FFFD, as encoding/json does.
			var w bytes.Buffer
			for i := 0; i < len(s); {
				r, n := utf8.DecodeRuneInString(s[i:])
				w.WriteRune(r)
				i += n
			}
			want = w.String()
		}
		if back != want {
			t.Fatalf("%q -> %s -> %q; want %q", s, b, back, want)
		}
	}
}
