package record

import (
	"bytes"
	"errors"
	"testing"
)

func encode(t testing.TB, m Message, st Stamp) []byte {
	t.Helper()
	b := make([]byte, Padded(m.EncodedSize()))
	Encode(b, &m, st)
	return b
}

func TestRecordRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		m    Message
	}{
		{"value", Message{Topic: "prices", Key: "sku-1", Tag: "eu", Value: []byte("12.50")}},
		{"no tag", Message{Topic: "prices", Key: "sku-1", Value: []byte("x")}},
		{"stream", Message{Topic: "events", Value: []byte("clicked")}},
		{"empty value", Message{Topic: "t", Key: "k"}},
		{"tombstone", Message{Topic: "t", Key: "k", Delete: true}},
		{"binary", Message{Topic: "t", Key: "\x00\xff", Value: []byte{0, 1, 2, 255}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Stamp{Origin: 0xabcdef, Seq: 42, HLC: MakeHLC(1700000000000, 3)}
			b := encode(t, tc.m, st)
			r, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Stamp() != st {
				t.Errorf("stamp %+v, want %+v", r.Stamp(), st)
			}
			got := r.Message()
			if got.Topic != tc.m.Topic || got.Key != tc.m.Key || got.Tag != tc.m.Tag ||
				!bytes.Equal(got.Value, tc.m.Value) || got.Delete != tc.m.Delete {
				t.Errorf("message %+v, want %+v", got, tc.m)
			}
			if r.Size() != tc.m.EncodedSize() {
				t.Errorf("size %d, want %d", r.Size(), tc.m.EncodedSize())
			}
		})
	}
}

func TestRecordCorruption(t *testing.T) {
	good := encode(t, Message{Topic: "t", Key: "k", Value: []byte("value")}, Stamp{1, 1, 1})
	cases := []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"flipped value byte", func(b []byte) []byte { b[len(b)-4] ^= 1; return b }},
		{"flipped origin", func(b []byte) []byte { b[17] ^= 0x80; return b }},
		{"size too large", func(b []byte) []byte { b[0] = 0xff; b[1] = 0xff; return b }},
		{"size below header", func(b []byte) []byte { b[0] = 10; return b }},
		{"cut short", func(b []byte) []byte { return b[:HeaderSize+2] }},
		{"crc zeroed", func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b }},
		{"fields disagree", func(b []byte) []byte { b[10]++; return b }},
		{"three bytes", func(b []byte) []byte { return b[:3] }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.corrupt(append([]byte(nil), good...))
			if r, err := Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got record %v, err %v; want ErrCorrupt", r, err)
			}
		})
	}
	if r, err := Decode(make([]byte, 64)); r != nil || err != nil {
		t.Fatalf("zeros: got %v, %v; want nothing written", r, err)
	}
}

func TestMessageValidate(t *testing.T) {
	cases := []struct {
		m    Message
		want error
	}{
		{Message{Topic: "t"}, nil},
		{Message{}, ErrInvalid},
		{Message{Topic: "t", Delete: true}, ErrInvalid},
		{Message{Topic: string(make([]byte, MaxTopicBytes+1))}, ErrTooLarge},
		{Message{Topic: "t", Key: string(make([]byte, MaxKeyBytes+1))}, ErrTooLarge},
	}
	for i, tc := range cases {
		if err := tc.m.Validate(); !errors.Is(err, tc.want) {
			t.Errorf("case %d: %v, want %v", i, err, tc.want)
		}
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the decoder: it must never
// panic, and whatever it accepts must re-encode to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encode(f, Message{Topic: "prices", Key: "sku", Tag: "eu", Value: []byte("1.00")}, Stamp{7, 1, 99}))
	f.Add(encode(f, Message{Topic: "t", Key: "k", Delete: true}, Stamp{1, 2, 3}))
	f.Add(encode(f, Message{Topic: "events", Value: []byte("x")}, Stamp{1, 2, 3})[:40])
	f.Add(make([]byte, 48))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil || r == nil {
			return
		}
		m := r.Message()
		again := make([]byte, m.EncodedSize())
		Encode(again, &m, r.Stamp())
		if !bytes.Equal(again, r) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, []byte(r))
		}
	})
}
