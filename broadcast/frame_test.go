package broadcast

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cachecast/cachecast/store"
)

func TestAckRoundTrip(t *testing.T) {
	for _, v := range []map[uint64]uint64{{}, {1: 2}, {7: 100, 8: 1, 0xffffffffffffffff: 3}} {
		got, err := decodeAck(encodeAck(v))
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
	cases := []struct {
		name string
		err  error
	}{
		{"ack short", func() error { _, err := decodeAck([]byte{1, 0}); return err }()},
		{"ack count lies", func() error { _, err := decodeAck([]byte{2, 0, 0, 0, 1, 2, 3}); return err }()},
		{"pull short", func() error { _, err := decodePull(make([]byte, 23)); return err }()},
		{"pull zero origin", func() error { _, err := decodePull(make([]byte, 24)); return err }()},
		{"pull backwards", func() error {
			_, err := decodePull(encodePull(pullReq{origin: 1, from: 5, to: 4}))
			return err
		}()},
		{"pullEnd bad status", func() error {
			b := encodePullEnd(pullEnd{origin: 1, next: 2})
			b[16] = 9
			_, err := decodePullEnd(b)
			return err
		}()},
		{"records zero size", splitRecords(make([]byte, 64), func(store.Record) error { return nil })},
		{"records empty", splitRecords(nil, func(store.Record) error { return nil })},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", tc.name, tc.err)
		}
	}
}

func TestFrameReaderLimits(t *testing.T) {
	for _, b := range [][]byte{
		{0, 0, 0, 0},                // zero length
		{0xff, 0xff, 0xff, 0xff, 1}, // over MaxFrameSize
		{1, 0, 0, 0, 9},             // unknown type
	} {
		if _, _, err := newFrameReader(bytes.NewReader(b)).next(); !errors.Is(err, ErrBadFrame) {
			t.Errorf("% x: %v, want ErrBadFrame", b, err)
		}
	}
}

func TestHelloDecode(t *testing.T) {
	h, _ := newHello(42)
	got, err := decodeHello(h.encode())
	if err != nil || got != h {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	bad := h.encode()
	bad[7] = 99
	if _, err := decodeHello(bad); !errors.Is(err, ErrHandshake) {
		t.Fatalf("wrong protocol: %v", err)
	}
	if _, err := decodeHello([]byte("GET / HTTP/1.1\r\n")); !errors.Is(err, ErrHandshake) {
		t.Fatalf("http: %v", err)
	}
}

// FuzzFrames feeds arbitrary bytes to every decoder of the data port: none
// may panic, and what one accepts must encode back to the same bytes.
func FuzzFrames(f *testing.F) {
	rec := make([]byte, 64)
	m := store.Message{Topic: "t", Key: "k", Value: []byte("v")}
	rec = rec[:store.EncodeRecord(rec, &m, store.Stamp{Origin: 1, Seq: 1, HLC: 1})]
	f.Add(append([]byte{byte(len(rec) + 1), 0, 0, 0, frameRecords}, rec...))
	f.Add(append([]byte{21, 0, 0, 0, frameAck}, encodeAck(map[uint64]uint64{1: 2})...))
	f.Add(append([]byte{25, 0, 0, 0, framePull}, encodePull(pullReq{1, 1, 9})...))
	f.Add(append([]byte{18, 0, 0, 0, framePullEnd}, encodePullEnd(pullEnd{1, 9, 0})...))
	h, _ := newHello(7)
	f.Add(h.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeHello(b)
		fr := newFrameReader(bytes.NewReader(b))
		for {
			typ, p, err := fr.next()
			if err != nil {
				return
			}
			switch typ {
			case frameAck:
				if v, err := decodeAck(p); err == nil && !bytes.Equal(encodeAck(v), p) && len(v) == int(p[0]) {
					// Map order differs; compare as sets.
					back, _ := decodeAck(encodeAck(v))
					if len(back) != len(v) {
						t.Fatal("ack round trip")
					}
				}
			case framePull:
				if r, err := decodePull(p); err == nil && !bytes.Equal(encodePull(r), p) {
					t.Fatal("pull round trip")
				}
			case framePullEnd:
				if e, err := decodePullEnd(p); err == nil && !bytes.Equal(encodePullEnd(e), p) {
					t.Fatal("pullEnd round trip")
				}
			case frameRecords:
				splitRecords(p, func(r store.Record) error {
					if _, err := store.DecodeRecord(r); err != nil {
						t.Fatal("split handed out a bad record")
					}
					return nil
				})
			}
		}
	})
}
