package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func sample(t testing.TB, snap []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	meta := Meta{Version: "v1", Node: "n1", Origin: "00000000000000ab", Created: time.Unix(1, 0).UTC(),
		Cursors: []Cursor{{Name: "c", Topic: "t", Offset: 7, Owner: 1000, Owned: true}}}
	if err := Write(&b, meta, func(w io.Writer) error { _, err := w.Write(snap); return err }); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 31, 32, 33, 5000, 3 << 20} {
		snap := bytes.Repeat([]byte{0x5a, 0x01, 0xff}, size/3+1)[:size]
		file := sample(t, snap)
		rd, err := NewReader(bytes.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rd.Snapshot())
		if err != nil || !bytes.Equal(got, snap) {
			t.Fatalf("size %d: snapshot of %d bytes back, %v", size, len(got), err)
		}
		if rd.Meta.Format != Format || rd.Meta.Node != "n1" || len(rd.Meta.Cursors) != 1 || rd.Meta.Cursors[0].Offset != 7 {
			t.Fatalf("meta %+v", rd.Meta)
		}
	}
}

func TestRefused(t *testing.T) {
	good := sample(t, []byte("a snapshot's bytes"))
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 0x40; return b }
	newer := bytes.Clone(good)
	binary.LittleEndian.PutUint32(newer[8:], Format+1)
	older := bytes.Clone(good)
	binary.LittleEndian.PutUint32(older[8:], MinFormat-1)
	for _, tt := range []struct {
		name string
		file []byte
		want error
		says string
	}{
		{"empty", nil, ErrCorrupt, "too short"},
		{"bad magic", flip(0), ErrCorrupt, "CCBACKUP"},
		{"newer format", newer, ErrFormat, "this build reads formats"},
		{"older format", older, ErrFormat, "this build reads formats"},
		{"flipped meta byte", flip(headSize + 3), ErrCorrupt, ""},
		{"flipped snapshot byte", flip(len(good) - sumSize - 2), ErrCorrupt, "SHA-256"},
		{"flipped checksum byte", flip(len(good) - 1), ErrCorrupt, "SHA-256"},
		{"cut short", good[:len(good)-10], ErrCorrupt, ""},
		{"trailing bytes", append(bytes.Clone(good), 0), ErrCorrupt, "SHA-256"},
	} {
		_, err := Verify(bytes.NewReader(tt.file))
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want %v saying %q", tt.name, err, tt.want, tt.says)
		}
	}
}
