package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
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

// TestAppendDeliveryChange: a line names the version a change applies
// to as wire.Of says: a version, the absence after one, or the absence
// of a key never held, which has no version (no origin, no seq).
func TestAppendDeliveryChange(t *testing.T) {
	v := Of{Origin: 0xc0ffee, Seq: 6}
	for _, c := range []struct {
		change Change
		of     Of
		want   string // the line's end
	}{
		{ChangeNone, Of{}, `"time":"1970-01-01T00:00:00.000Z"}`},
		{ChangeExpiry, v, `,"expiry_of":{"origin":"0000000000c0ffee","seq":6}}`},
		{ChangeExpiry, Of{Absent: true}, `,"expiry_of":{"absent":true}}`},
		{ChangeIncrement, v, `,"increment_of":{"origin":"0000000000c0ffee","seq":6}}`},
		{ChangeIncrement, Of{Origin: v.Origin, Seq: v.Seq, Absent: true}, `,"increment_of":{"origin":"0000000000c0ffee","seq":6,"absent":true}}`},
		{ChangeIncrement, Of{Absent: true}, `,"increment_of":{"absent":true}}`},
	} {
		d := Delivery{Key: []byte("k"), Value: []byte("3"), Origin: 1, Seq: 7, Time: time.UnixMilli(0), Change: c.change, Of: c.of}
		line := AppendDelivery(nil, &d)
		if !json.Valid(line) || !bytes.HasSuffix(line, []byte(c.want)) {
			t.Errorf("change %d of %+v: %s; want JSON ending in %s", c.change, c.of, line, c.want)
		}
	}
}
