package gossip

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	tests := []Meta{
		{},
		{ID: 1, DataAddr: "127.0.0.1:7947", Proto: ProtocolVersion},
		{ID: ^uint64(0), DataAddr: "[2001:db8::1]:65535", Proto: 255},
		{ID: 0x0123456789abcdef, DataAddr: "node-7.cachecast.example.internal:7947", Proto: 1},
		{ID: 42, DataAddr: strings.Repeat("a", MetaMaxSize-metaHeader-2)}, // exactly at the limit
		{ID: 7, DataAddr: "10.0.0.7:7947", Proto: 1, Leaving: true},
		{ID: 43, DataAddr: strings.Repeat("a", MetaMaxSize-metaHeader-3), Leaving: true}, // at the limit, leaving
		{ID: 8, DataAddr: "10.0.0.8:7947", Proto: 3, ProtoMin: 2},
		{ID: 9, DataAddr: "10.0.0.9:7947", Proto: 3, ProtoMin: 2, Leaving: true},
	}
	for _, m := range tests {
		if m.ProtoMin == 0 {
			m.ProtoMin = m.Proto // what a node of one version decodes as
		}
		b, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("EncodeMeta(%+v): %v", m, err)
		}
		if len(b) > MetaMaxSize {
			t.Fatalf("EncodeMeta(%+v) = %d bytes, over %d", m, len(b), MetaMaxSize)
		}
		got, err := DecodeMeta(b)
		if err != nil {
			t.Fatalf("DecodeMeta(EncodeMeta(%+v)): %v", m, err)
		}
		if got != m {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
		// Fields added by a later version at the end are ignored: flag
		// bits other than Leaving, and bytes after the flags.
		if len(b)+3 > MetaMaxSize {
			continue
		}
		if m.Proto == 0 {
			continue // no proto min can follow
		}
		later := append(b[:len(b):len(b)], 0xfe, m.Proto, 0x01)
		if m.Leaving || m.ProtoMin != m.Proto {
			later = append(b[:len(b):len(b)], 0x01)
		}
		if m.Leaving && m.ProtoMin == m.Proto {
			later = append(b[:len(b):len(b)], m.Proto, 0x01)
		}
		got, err = DecodeMeta(later)
		if err != nil || got != m {
			t.Fatalf("with trailing bytes: got %+v, %v; want %+v", got, err, m)
		}
	}
}

func TestMetaSizeLimit(t *testing.T) {
	// The largest data address that fits: header, a 2-byte uvarint length.
	max := MetaMaxSize - metaHeader - 2
	if b, err := EncodeMeta(Meta{ID: 1, DataAddr: strings.Repeat("x", max)}); err != nil || len(b) != MetaMaxSize {
		t.Fatalf("at the limit: %d bytes, %v", len(b), err)
	}
	_, err := EncodeMeta(Meta{ID: 1, DataAddr: strings.Repeat("x", max+1)})
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("over the limit: err = %v, want ErrMetaTooLarge", err)
	}
	if _, err := DecodeMeta(make([]byte, MetaMaxSize+1)); !errors.Is(err, ErrBadMeta) {
		t.Fatalf("decoding %d bytes: err = %v, want ErrBadMeta", MetaMaxSize+1, err)
	}
}

func TestDecodeMetaErrors(t *testing.T) {
	good, _ := EncodeMeta(Meta{ID: 7, DataAddr: "10.0.0.1:7947", Proto: 1})
	tests := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"short header", good[:metaHeader-1]},
		{"no address length", good[:metaHeader]},
		{"unknown format", append([]byte{2}, good[1:]...)},
		{"format zero", append([]byte{0}, good[1:]...)},
		{"address truncated", good[:len(good)-1]},
		{"length beyond end", append(append([]byte(nil), good[:metaHeader]...), 0x80, 0x80, 0x80, 0x80, 0x01)},
		{"unterminated uvarint", append(append([]byte(nil), good[:metaHeader]...), bytes.Repeat([]byte{0xff}, 11)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := DecodeMeta(tt.b); !errors.Is(err, ErrBadMeta) {
				t.Fatalf("DecodeMeta = %+v, %v; want ErrBadMeta", m, err)
			}
		})
	}
}

func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []Meta{{}, {ID: 1, DataAddr: "127.0.0.1:7947", Proto: 1}, {ID: ^uint64(0), DataAddr: "[::1]:1"}, {ID: 2, DataAddr: "127.0.0.1:7948", Proto: 1, Leaving: true}} {
		b, _ := EncodeMeta(m)
		f.Add(b)
	}
	b, _ := EncodeMeta(Meta{ID: 3, DataAddr: "127.0.0.1:7949", Proto: 3, ProtoMin: 2})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrBadMeta) {
				t.Fatalf("error does not wrap ErrBadMeta: %v", err)
			}
			return
		}
		// Whatever decodes re-encodes, within the limit, to the same Meta.
		enc, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("decoded %+v does not re-encode: %v", m, err)
		}
		if got, err := DecodeMeta(enc); err != nil || got != m {
			t.Fatalf("re-decode: %+v, %v; want %+v", got, err, m)
		}
		// Up to the data address the re-encoding is the input; after it
		// only the Leaving bit and proto min are kept.
		fixed := enc[:metaHeader+uvarintLen(uint64(len(m.DataAddr)))+len(m.DataAddr)]
		if !bytes.HasPrefix(b, fixed) {
			t.Fatalf("re-encoding %x is not a prefix of the input %x", enc, b)
		}
	})
}
