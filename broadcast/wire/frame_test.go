package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

func TestAckRoundTrip(t *testing.T) {
	t.Parallel()
	for _, v := range []map[uint64]uint64{{}, {1: 2}, {7: 100, 8: 1, 0xffffffffffffffff: 3}} {
		got, err := DecodeAck(EncodeAck(v))
		if err != nil || len(got) != len(v) {
			t.Fatalf("%v: %v %v", v, got, err)
		}
		for k, s := range v {
			if got[k] != s {
				t.Fatalf("%v: got %v", v, got)
			}
		}
	}
}

func TestFrameDecodersRefuseJunk(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
	}{
		{"ack short", func() error { _, err := DecodeAck([]byte{1, 0}); return err }()},
		{"ack count lies", func() error { _, err := DecodeAck([]byte{2, 0, 0, 0, 1, 2, 3}); return err }()},
		{"pull short", func() error { _, err := DecodePull(make([]byte, 23)); return err }()},
		{"pull zero origin", func() error { _, err := DecodePull(make([]byte, 24)); return err }()},
		{"pull backwards", func() error {
			_, err := DecodePull(EncodePull(PullReq{Origin: 1, From: 5, To: 4}))
			return err
		}()},
		{"pullEnd bad status", func() error {
			b := EncodePullEnd(PullEnd{Origin: 1, Next: 2})
			b[16] = 9
			_, err := DecodePullEnd(b)
			return err
		}()},
		{"records zero size", SplitRecords(make([]byte, 64), func(record.Record) error { return nil })},
		{"records empty", SplitRecords(nil, func(record.Record) error { return nil })},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", tc.name, tc.err)
		}
	}
}

func TestFrameReaderLimits(t *testing.T) {
	t.Parallel()
	var unknown bytes.Buffer
	NewWriter(&unknown, nil, 0, nil).WriteFrame(FrameEntries+1, nil) // a valid MAC, an unknown type
	for _, b := range [][]byte{
		{0, 0, 0, 0},                // zero length
		{0xff, 0xff, 0xff, 0xff, 1}, // over MaxFrameSize
		unknown.Bytes(),
	} {
		if _, _, err := NewReader(bytes.NewReader(b), nil, 0, nil).Next(); !errors.Is(err, ErrBadFrame) {
			t.Errorf("% x: %v, want ErrBadFrame", b, err)
		}
	}
}

// testFrames writes a records frame, an ack and a pull with key and returns
// the stream and each frame's type and payload.
func testFrames(t *testing.T, key []byte) ([]byte, []byte, [][]byte) {
	t.Helper()
	rec := make([]byte, 128)
	m := record.Message{Topic: "prices", Key: "sku-1", Value: []byte("12.50")}
	rec = rec[:record.Encode(rec, &m, record.Stamp{Origin: 1, Seq: 1, HLC: 1})]
	var buf bytes.Buffer
	w := NewWriter(&buf, key, 0, nil)
	if err := w.WriteRecords([][]byte{rec, rec}); err != nil {
		t.Fatal(err)
	}
	ack := EncodeAck(map[uint64]uint64{1: 1})
	pull := EncodePull(PullReq{1, 2, 9})
	w.WriteFrame(FrameAck, ack)
	w.WriteFrame(FramePull, pull)
	return buf.Bytes(), []byte{FrameRecords, FrameAck, FramePull}, [][]byte{append(rec[:len(rec):len(rec)], rec...), ack, pull}
}

// TestFrameMAC: frames read back with the session key they were written
// with; with another key, or with any one byte of the stream changed, or
// with frames replayed, dropped or reordered, the reader refuses the frame
// and hands out nothing that differs from what was sent.
func TestFrameMAC(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	stream, types, payloads := testFrames(t, key)
	readAll := func(b, key []byte) (n int, err error) {
		fr := NewReader(bytes.NewReader(b), key, 0, nil)
		for {
			typ, p, err := fr.Next()
			if err != nil {
				return n, err
			}
			if n >= len(types) || typ != types[n] || !bytes.Equal(p, payloads[n]) {
				t.Fatalf("frame %d: the reader handed out type %d, % x; sent type %d", n, typ, p, types[min(n, len(types)-1)])
			}
			n++
		}
	}
	if n, err := readAll(stream, key); n != 3 || !errors.Is(err, io.EOF) {
		t.Fatalf("with the key: %d frames, %v", n, err)
	}
	if n, err := readAll(stream, []byte("another key")); n != 0 || !errors.Is(err, ErrBadFrame) {
		t.Fatalf("with another key: %d frames, %v; want none, ErrBadFrame", n, err)
	}
	for i := range stream {
		bad := bytes.Clone(stream)
		bad[i] ^= 0x20
		if n, err := readAll(bad, key); err == nil || errors.Is(err, io.EOF) || n == 3 {
			t.Fatalf("byte %d changed: read %d frames, %v; want a refusal", i, n, err)
		}
	}
	// The frames' boundaries: the records frame is first, ack and pull next.
	recEnd := 5 + len(payloads[0]) + macSize
	ackEnd := recEnd + 5 + len(payloads[1]) + macSize
	for name, b := range map[string][]byte{
		"replayed":  append(bytes.Clone(stream[:recEnd]), stream[:recEnd]...),
		"dropped":   append(bytes.Clone(stream[:recEnd]), stream[ackEnd:]...),
		"reordered": append(append(bytes.Clone(stream[:recEnd]), stream[ackEnd:]...), stream[recEnd:ackEnd]...),
	} {
		if n, err := readAll(b, key); n != 1 || !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: read %d frames, %v; want 1, then ErrBadFrame", name, n, err)
		}
	}
}

func TestHelloDecode(t *testing.T) {
	t.Parallel()
	h, _ := newHello(42, Range{2, 3})
	good := h.encode()
	with := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	tests := []struct {
		name string
		b    []byte
		want Range // zero: refused
	}{
		{"round trip", good, Range{2, 3}},
		{"a build of one version (max byte zero)", with(func(b []byte) { b[8] = 0 }), Range{2, 2}},
		{"min above max", with(func(b []byte) { b[7], b[8] = 4, 3 }), Range{}},
		{"min zero", with(func(b []byte) { b[7] = 0 }), Range{}},
		{"node ID zero", with(func(b []byte) { clear(b[16:24]) }), Range{}},
		{"http", []byte("GET / HTTP/1.1\r\n"), Range{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeHello(tt.b)
			if tt.want == (Range{}) {
				if !errors.Is(err, ErrHandshake) {
					t.Fatalf("decoded %+v, %v; want ErrHandshake", got, err)
				}
				return
			}
			if err != nil || got.protos != tt.want || got.node != 42 || got.nonce != h.nonce {
				t.Fatalf("got %+v, %v; want range %s", got, err, tt.want)
			}
		})
	}
}

func TestNegotiate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b Range
		want uint8 // 0: none in common
	}{
		{Range{2, 2}, Range{2, 2}, 2},
		{Range{2, 3}, Range{2, 2}, 2},
		{Range{2, 3}, Range{2, 3}, 3},
		{Range{2, 3}, Range{3, 4}, 3},
		{Range{3, 3}, Range{2, 2}, 0},
		{Range{2, 2}, Range{3, 5}, 0},
	}
	for _, tt := range tests {
		for _, pair := range [][2]Range{{tt.a, tt.b}, {tt.b, tt.a}} {
			v, ok := negotiate(pair[0], pair[1])
			if tt.want == 0 && ok || tt.want != 0 && (!ok || v != tt.want) {
				t.Errorf("negotiate(%s, %s) = %d, %v; want %d", pair[0], pair[1], v, ok, tt.want)
			}
		}
	}
}

// FuzzFrames feeds arbitrary bytes to the frame reader and to every
// decoder of the data port: none may panic, and what one accepts must
// encode back to the same bytes. The input is a frame's type byte and
// payload; the fuzzer seals it with the MAC of a test key (else nearly
// nothing would pass the reader), and also reads the raw bytes as a stream.
func FuzzFrames(f *testing.F) {
	rec := make([]byte, 64)
	m := record.Message{Topic: "t", Key: "k", Value: []byte("v")}
	rec = rec[:record.Encode(rec, &m, record.Stamp{Origin: 1, Seq: 1, HLC: 1})]
	f.Add(append([]byte{FrameRecords}, rec...))
	f.Add(append([]byte{FrameAck}, EncodeAck(map[uint64]uint64{1: 2})...))
	f.Add(append([]byte{FramePull}, EncodePull(PullReq{1, 1, 9})...))
	f.Add(append([]byte{FramePullEnd}, EncodePullEnd(PullEnd{1, 9, 0})...))
	f.Add(append([]byte{FrameVector}, EncodeVector(VectorMsg{Live: map[uint64]uint64{1: 2}, Retired: 1, Digest: RetiredDigest(map[uint64]uint64{3: 4})})...))
	f.Add(append([]byte{FrameRetired}, EncodeAck(map[uint64]uint64{3: 4})...))
	h, _ := newHello(7, Range{ProtocolMin, ProtocolMax})
	f.Add(h.encode())
	key := []byte("fuzz key")
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeHello(b)
		fr := NewReader(bytes.NewReader(b), key, 0, nil)
		for {
			if _, _, err := fr.Next(); err != nil {
				break
			}
		}
		if len(b) == 0 {
			return
		}
		var sealed bytes.Buffer
		NewWriter(&sealed, key, 0, nil).WriteFrame(b[0], b[1:])
		typ, p, err := NewReader(&sealed, key, 0, nil).Next()
		if err != nil {
			if b[0] >= FrameRecords && b[0] <= FrameEntries {
				t.Fatalf("a sealed frame of type %d refused: %v", b[0], err)
			}
			return
		}
		if typ != b[0] || !bytes.Equal(p, b[1:]) {
			t.Fatal("the reader changed a sealed frame")
		}
		switch typ {
		case FrameAck:
			if v, err := DecodeAck(p); err == nil && !bytes.Equal(EncodeAck(v), p) && len(v) == int(p[0]) {
				// Map order differs; compare as sets.
				back, _ := DecodeAck(EncodeAck(v))
				if len(back) != len(v) {
					t.Fatal("ack round trip")
				}
			}
		case FrameVector:
			if m, err := DecodeVector(p); err == nil && len(m.Live) <= 1 && !bytes.Equal(EncodeVector(m), p) {
				t.Fatal("vector round trip")
			}
		case FramePull:
			if r, err := DecodePull(p); err == nil && !bytes.Equal(EncodePull(r), p) {
				t.Fatal("pull round trip")
			}
		case FramePullEnd:
			if e, err := DecodePullEnd(p); err == nil && !bytes.Equal(EncodePullEnd(e), p) {
				t.Fatal("pullEnd round trip")
			}
		case FrameRecords:
			SplitRecords(p, func(r record.Record) error {
				if _, err := record.Decode(r); err != nil {
					t.Fatal("split handed out a bad record")
				}
				return nil
			})
		}
	})
}

// BenchmarkFrameMAC writes a records frame of about a megabyte (the size
// a link batches) and reads it back through the MAC check: the cost of
// frame authentication per byte, on both ends.
func BenchmarkFrameMAC(b *testing.B) {
	rec := make([]byte, 256)
	m := record.Message{Topic: "prices", Key: "sku-1", Value: bytes.Repeat([]byte("x"), 100)}
	rec = rec[:record.Encode(rec, &m, record.Stamp{Origin: 1, Seq: 1, HLC: 1})]
	recs := make([][]byte, (1<<20)/len(rec))
	for i := range recs {
		recs[i] = rec
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	var buf bytes.Buffer
	w := NewWriter(&buf, key, 0, nil)
	fr := NewReader(&buf, key, 0, nil)
	b.SetBytes(int64(len(recs) * len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.WriteRecords(recs); err != nil {
			b.Fatal(err)
		}
		if _, _, err := fr.Next(); err != nil {
			b.Fatal(err)
		}
	}
}
