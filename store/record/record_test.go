package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
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
		{"expiring", Message{Topic: "prices", Key: "sku-1", Value: []byte("9.99"), ExpiresAt: 1700000005000}},
		{"scheduled", Message{Topic: "prices", Key: "sku-1", Tag: "sale", Value: []byte("7.99"), EffectiveAt: 1700000060000}},
		{"scheduled and expiring", Message{Topic: "p", Key: "k", Value: []byte("v"), EffectiveAt: 10, ExpiresAt: 20}},
		{"scheduled tombstone", Message{Topic: "p", Key: "k", Delete: true, EffectiveAt: 10}},
		{"cancel", Message{Topic: "p", Key: "k", Cancel: true, EffectiveAt: 10}},
		{"batch", Message{Topic: "p", Key: "k", Value: []byte("v"), BatchFollow: 99}},
		{"expiry change", Message{Topic: "p", Key: "k", Tag: "eu", Value: []byte("v"), ExpiresAt: 1700000009000, ExpiryOf: Stamp{Origin: 5, Seq: 6, HLC: MakeHLC(1699999999000, 1)}}},
		{"persist of a scheduled value", Message{Topic: "p", Key: "k", Value: []byte("v"), EffectiveAt: 10, ExpiryOf: Stamp{Origin: 5, Seq: 6, HLC: 7}}},
		{"increment", Message{Topic: "p", Key: "k", Value: []byte("-3"), CountOn: Stamp{Origin: 5, Seq: 6, HLC: MakeHLC(1699999999000, 1)}}},
		{"float increment in a batch", Message{Topic: "p", Key: "k", Value: []byte("1.5"), BatchFollow: 1, CountOn: Stamp{Origin: 5, Seq: 6, HLC: 7}}},
		{"increment after a delete", Message{Topic: "p", Key: "k", Value: []byte("2"), CountAbsent: true, CountOn: Stamp{Origin: 5, Seq: 6, HLC: MakeHLC(1699999999000, 1)}}},
		{"increment after an expiry", Message{Topic: "p", Key: "k", Value: []byte("1"), CountAbsent: true, ExpiresAt: 1699999999500, CountOn: Stamp{Origin: 5, Seq: 6, HLC: MakeHLC(1699999999000, 1)}}},
		{"increment of a key without a version", Message{Topic: "p", Key: "k", Value: []byte("1"), CountAbsent: true, CountOn: Stamp{HLC: MakeHLC(1699999000000, 0)}}},
		{"expiry change of a revival after a delete", Message{Topic: "p", Key: "k", Value: []byte("0"), ExpiresAt: 1700000009000, ExpiryAbsent: true, ExpiryOf: Stamp{Origin: 5, Seq: 6, HLC: MakeHLC(1699999999000, 1)}}},
		{"persist of a revival after an expiry", Message{Topic: "p", Key: "k", Value: []byte("0"), ExpiryAbsent: true, Gone: 1699999999500, ExpiryOf: Stamp{Origin: 5, Seq: 6, HLC: MakeHLC(1699999999000, 1)}}},
		{"expiry change of the revival of a key never held", Message{Topic: "p", Key: "k", Value: []byte("0"), ExpiresAt: 1700000009000, ExpiryAbsent: true, ExpiryOf: Genesis}},
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
				!bytes.Equal(got.Value, tc.m.Value) || got.Delete != tc.m.Delete ||
				got.ExpiresAt != tc.m.ExpiresAt || got.EffectiveAt != tc.m.EffectiveAt ||
				got.Cancel != tc.m.Cancel || got.BatchFollow != tc.m.BatchFollow || got.ExpiryOf != tc.m.ExpiryOf || got.CountOn != tc.m.CountOn || got.CountAbsent != tc.m.CountAbsent ||
				got.ExpiryAbsent != tc.m.ExpiryAbsent || got.Gone != tc.m.Gone {
				t.Errorf("message %+v, want %+v", got, tc.m)
			}
			wantVersion := byte(Version2)
			switch {
			case tc.m.CountAbsent:
				wantVersion = Version5
			case tc.m.ExpiryAbsent:
				wantVersion = Version6
			case tc.m.Counter():
				wantVersion = Version4
			case tc.m.ExpiryChange():
				wantVersion = Version3
			case !tc.m.timed():
				wantVersion = Version
			}
			if r[9] != wantVersion {
				t.Errorf("version %d, want %d", r[9], wantVersion)
			}
			wantEff := uint64(tc.m.EffectiveAt)
			switch {
			case wantEff == 0 && tc.m.ExpiryChange():
				wantEff = uint64(HLCMillis(tc.m.ExpiryOf.HLC)) // the target's, not its own
			case tc.m.Unversioned():
				wantEff = 0 // before every version
			case wantEff == 0 && tc.m.Counter():
				wantEff = uint64(HLCMillis(tc.m.CountOn.HLC))
			case wantEff == 0:
				wantEff = 1700000000000
			}
			if r.Effective() != wantEff {
				t.Errorf("effective %d, want %d", r.Effective(), wantEff)
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
	timed := encode(t, Message{Topic: "t", Key: "k", Value: []byte("v"), ExpiresAt: 20, EffectiveAt: 10}, Stamp{1, 1, 1})
	v2 := []struct {
		name    string
		corrupt func(b []byte)
	}{
		{"v1 with reserved word", func(b []byte) { b[9] = Version; b[44] = 1 }},
		{"v2 with nothing timed", func(b []byte) { clear(b[44:64]) }},
		{"expiry before effect", func(b []byte) { b[48] = 5 }},
		{"expiry past int64", func(b []byte) { b[55] = 0x80 }},
		{"cancel with a value", func(b []byte) { b[8] = byte(KindCancel); clear(b[48:56]) }},
		{"cancel in v1", func(b []byte) { b[8] = byte(KindCancel); b[9] = Version }},
		{"unknown version", func(b []byte) { b[9] = 4 }},
		{"expiry change in v2", func(b []byte) { b[8] = byte(KindExpiry) }},
	}
	for _, tc := range v2 {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), timed...)
			tc.corrupt(b)
			binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:Record(b).Size()], castagnoli))
			if r, err := Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got record %v, err %v; want ErrCorrupt", r, err)
			}
		})
	}
	change := encode(t, Message{Topic: "t", Key: "k", Value: []byte("v"), ExpiresAt: 20, ExpiryOf: Stamp{1, 1, 1}}, Stamp{2, 2, 2})
	revival := encode(t, Message{Topic: "t", Key: "k", Value: []byte("0"), ExpiresAt: 20, ExpiryAbsent: true, Gone: 10, ExpiryOf: Stamp{1, 1, 1}}, Stamp{2, 2, 2})
	for _, tc := range []struct {
		name    string
		good    []byte
		corrupt func(b []byte)
	}{
		{"value kind in v3", change, func(b []byte) { b[8] = byte(KindValue) }},
		{"v3 without a target origin", change, func(b []byte) { clear(b[72:80]) }},
		{"v3 without a target seq", change, func(b []byte) { clear(b[80:88]) }},
		{"v3 cut to a v2 header", change, func(b []byte) { b[9] = Version2 }},
		{"counter kind in v6", revival, func(b []byte) { b[8] = byte(KindCounter) }},
		{"v6 without a target origin", revival, func(b []byte) { clear(b[72:80]) }},
		{"v6 gone past int64", revival, func(b []byte) { b[95] = 0x80 }},
		{"v6 cut to a v3 header", revival, func(b []byte) { b[9] = Version3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), tc.good...)
			tc.corrupt(b)
			binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:Record(b).Size()], castagnoli))
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
		{Message{Topic: "t", Key: "k", ExpiresAt: 5}, nil},
		{Message{Topic: "t", Key: "k", EffectiveAt: 5, ExpiresAt: 6}, nil},
		{Message{Topic: "t", Key: "k", Cancel: true, EffectiveAt: 5}, nil},
		{Message{Topic: "t", ExpiresAt: 5}, ErrInvalid},
		{Message{Topic: "t", Key: "k", ExpiresAt: -1}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Delete: true, ExpiresAt: 5}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Cancel: true}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Cancel: true, EffectiveAt: 5, Value: []byte("v")}, ErrInvalid},
		{Message{Topic: "t", Key: "k", EffectiveAt: 6, ExpiresAt: 6}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("v"), ExpiresAt: 9, ExpiryOf: Stamp{1, 2, 3}}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("v"), ExpiryOf: Stamp{1, 2, 3}}, nil},
		{Message{Topic: "t", Key: "k", ExpiryOf: Stamp{Origin: 1, HLC: 3}}, ErrInvalid},
		{Message{Topic: "t", ExpiryOf: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Delete: true, ExpiryOf: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("7"), CountOn: Stamp{1, 2, 3}}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("-0.25"), CountOn: Stamp{1, 2, 3}}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("x"), CountOn: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("inf"), CountOn: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", CountOn: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), ExpiresAt: 5, CountOn: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountOn: Stamp{Origin: 1, HLC: 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountAbsent: true}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountAbsent: true, ExpiresAt: 5, CountOn: Stamp{1, 2, 3}}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountAbsent: true, ExpiresAt: 5}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountAbsent: true, CountOn: Stamp{Seq: 2}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountAbsent: true, EffectiveAt: 5}, ErrInvalid},
		{Message{Topic: "t", Key: "k", CountAbsent: true}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Delete: true, Value: []byte("1"), CountAbsent: true}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountOnEarlier: 1}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountOnEarlier: 2, CountAbsent: true}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("x"), CountOnEarlier: 1}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountOnEarlier: 1, CountOn: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountOnEarlier: 1, CountAbsent: true, ExpiresAt: 5}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountOnEarlier: 1, EffectiveAt: 5}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), CountOnEarlier: -1}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("0"), ExpiresAt: 9, ExpiryAbsent: true, Gone: 5, ExpiryOf: Stamp{1, 2, 3}}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("0"), ExpiryAbsent: true, ExpiryOf: Genesis}, nil},
		{Message{Topic: "t", Key: "k", Value: []byte("0"), ExpiryAbsent: true}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("0"), Gone: 5, ExpiryOf: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("0"), ExpiryAbsent: true, Gone: -1, ExpiryOf: Stamp{1, 2, 3}}, ErrInvalid},
		{Message{Topic: "t", Key: "k", Value: []byte("1"), ExpiryAbsent: true, CountAbsent: true}, ErrInvalid},
	}
	for i, tc := range cases {
		if err := tc.m.Validate(); !errors.Is(err, tc.want) {
			t.Errorf("case %d: %v, want %v", i, err, tc.want)
		}
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the decoder: it must never
// panic, and whatever it accepts must re-encode to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(encode(f, Message{Topic: "prices", Key: "sku", Tag: "eu", Value: []byte("1.00")}, Stamp{7, 1, 99}))
	f.Add(encode(f, Message{Topic: "t", Key: "k", Delete: true}, Stamp{1, 2, 3}))
	f.Add(encode(f, Message{Topic: "events", Value: []byte("x")}, Stamp{1, 2, 3})[:40])
	f.Add(make([]byte, 48))
	f.Add(encode(f, Message{Topic: "prices", Key: "sku", Value: []byte("7.99"), EffectiveAt: 1700000060000, ExpiresAt: 1700000070000}, Stamp{7, 2, 99}))
	f.Add(encode(f, Message{Topic: "prices", Key: "sku", Cancel: true, EffectiveAt: 1700000060000}, Stamp{7, 3, 99}))
	f.Add(encode(f, Message{Topic: "prices", Key: "sku", Value: []byte("1"), BatchFollow: 2}, Stamp{7, 4, 99}))
	f.Add(encode(f, Message{Topic: "prices", Key: "sku", Tag: "eu", Value: []byte("1.00"), ExpiresAt: 1700000070000, ExpiryOf: Stamp{7, 1, 99}}, Stamp{8, 5, 120}))
	f.Add(encode(f, Message{Topic: "prices", Key: "sku", Value: []byte("1"), EffectiveAt: 1700000060000, ExpiryOf: Stamp{7, 2, 99}, BatchFollow: 1}, Stamp{8, 6, 121}))
	f.Add(encode(f, Message{Topic: "prices", Key: "hits", Value: []byte("-2"), CountOn: Stamp{7, 1, 99}}, Stamp{8, 7, 122}))
	f.Add(encode(f, Message{Topic: "prices", Key: "hits", Value: []byte("0.5"), CountOn: Stamp{7, 1, 99}, BatchFollow: 1}, Stamp{8, 8, 123}))
	f.Add(encode(f, Message{Topic: "prices", Key: "hits", Value: []byte("1"), CountAbsent: true, ExpiresAt: 1700000070000, CountOn: Stamp{7, 1, 99}}, Stamp{8, 9, 124}))
	f.Add(encode(f, Message{Topic: "prices", Key: "hits", Value: []byte("1"), CountAbsent: true, CountOn: Stamp{HLC: 98}}, Stamp{8, 10, 125}))
	f.Add(encode(f, Message{Topic: "prices", Key: "hits", Value: []byte("0"), ExpiresAt: 1700000080000, ExpiryAbsent: true, Gone: 1700000070000, ExpiryOf: Stamp{7, 1, 99}}, Stamp{8, 11, 126}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		rc, cerr := DecodeChecked(b)
		switch {
		case err == nil && (cerr != nil || !bytes.Equal(rc, r)):
			t.Fatalf("DecodeChecked gave %x, %v where Decode accepts %x", []byte(rc), cerr, []byte(r))
		case err != nil && cerr == nil && !strings.Contains(err.Error(), "crc"):
			t.Fatalf("DecodeChecked accepts what Decode refuses for more than its CRC: %v", err)
		}
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

// TestDecodeChecked: DecodeChecked skips the CRC only: a record whose
// value changed decodes, one whose size or fields do not add up does not.
func TestDecodeChecked(t *testing.T) {
	good := encode(t, Message{Topic: "prices", Key: "sku", Value: []byte("1.00")}, Stamp{7, 1, 99})
	for _, tc := range []struct {
		name    string
		damage  func(b []byte)
		decode  bool // Decode accepts it
		checked bool // DecodeChecked accepts it
	}{
		{"intact", func([]byte) {}, true, true},
		{"a value byte changed", func(b []byte) { b[binary.LittleEndian.Uint32(b)-1] ^= 1 }, false, true},
		{"the size changed", func(b []byte) { b[0]++ }, false, false},
		{"an unknown version", func(b []byte) { b[9] = 99 }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			tc.damage(b)
			if _, err := Decode(b); (err == nil) != tc.decode {
				t.Errorf("Decode: %v, want accepted %t", err, tc.decode)
			}
			if _, err := DecodeChecked(b); (err == nil) != tc.checked {
				t.Errorf("DecodeChecked: %v, want accepted %t", err, tc.checked)
			}
		})
	}
}
