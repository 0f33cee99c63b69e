package view

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// snapTestView builds a view with several topics, tags, empty values,
// tombstones and a keyless record (ignored).
func snapTestView(tb testing.TB) *View {
	tb.Helper()
	v := New()
	recs := []viewRec{
		{topic: "prices", key: "sku-1", tag: "eu", value: "9.99", origin: 1, seq: 1, hlc: 100},
		{topic: "prices", key: "sku-2", value: "", origin: 1, seq: 2, hlc: 101},
		{topic: "prices", key: "sku-3", value: "1.00", origin: 2, seq: 1, hlc: 101},
		{topic: "prices", key: "sku-3", del: true, origin: 2, seq: 2, hlc: 150},
		{topic: "prices", key: "gone", del: true, origin: 3, seq: 1, hlc: 90},
		{topic: "stock", key: "sku-1", tag: "wh-7", value: string(bytes.Repeat([]byte{0, 1, 2, 0xff}, 300)), origin: 3, seq: 2, hlc: 120},
		{topic: "stock", key: "ключ", value: "значение", origin: 0xfeedface, seq: 9, hlc: record.MakeHLC(1_750_000_000_000, 5)},
		{topic: "events", value: "stream only", origin: 1, seq: 3, hlc: 130},
	}
	for _, r := range recs {
		v.Apply(r.record(tb))
	}
	return v
}

var snapTestMarks = map[uint64]uint64{1: 3, 2: 2, 3: 2, 0xfeedface: 9}

// snapEncode returns the bytes WriteSnapshot would write for v.
func snapEncode(tb testing.TB, v *View, covers int64, marks map[uint64]uint64) []byte {
	tb.Helper()
	topics, entries, version, ok := v.freezeSnapshot(snapVersion6)
	if !ok {
		tb.Fatalf("freezeSnapshot: the view needs version %d", version)
	}
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, topics, entries, covers, marks, version); err != nil {
		tb.Fatalf("encodeSnapshot: %v", err)
	}
	return buf.Bytes()
}

// snapViewsEqual compares everything a reader of the view can see, plus
// the digest (which covers the tombstones too).
func snapViewsEqual(t *testing.T, got, want *View) {
	t.Helper()
	if got.Digest() != want.Digest() {
		t.Fatal("digest differs")
	}
	if got.Len() != want.Len() {
		t.Fatalf("Len = %d, want %d", got.Len(), want.Len())
	}
	if !slices.Equal(got.Topics(), want.Topics()) {
		t.Fatalf("Topics = %+v, want %+v", got.Topics(), want.Topics())
	}
	for _, ti := range want.Topics() {
		keys := want.Keys(ti.Name, "", "", 0)
		if g := got.Keys(ti.Name, "", "", 0); !slices.Equal(g, keys) {
			t.Fatalf("Keys(%q) = %q, want %q", ti.Name, g, keys)
		}
		for _, k := range keys {
			ge, _ := got.Get(ti.Name, k)
			we, _ := want.Get(ti.Name, k)
			if !bytes.Equal(ge.Value, we.Value) || ge.Tag != we.Tag || ge.Stamp != we.Stamp {
				t.Fatalf("Get(%q, %q) = %+v, want %+v", ti.Name, k, ge, we)
			}
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		view   func(testing.TB) *View
		covers int64
		marks  map[uint64]uint64
	}{
		{"empty view, no marks", func(testing.TB) *View { return New() }, 0, nil},
		{"mixed view", snapTestView, 123456, snapTestMarks},
		{"many keys", func(tb testing.TB) *View {
			v := New()
			for i := range 5000 {
				r := viewPut(fmt.Sprintf("t%d", i%3), fmt.Sprintf("key-%05d", i), fmt.Sprint(i), 7, uint64(i+1), uint64(i+1))
				if i%10 == 0 {
					r = viewDel(r.topic, r.key, 7, uint64(i+1), uint64(i+1))
				}
				v.Apply(r.record(tb))
			}
			return v
		}, 1 << 40, map[uint64]uint64{7: 5000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "view.snap")
			v := tt.view(t)
			if err := WriteSnapshot(path, v, tt.covers, tt.marks); err != nil {
				t.Fatalf("WriteSnapshot: %v", err)
			}
			got, covers, marks, err := ReadSnapshot(path, nil)
			if err != nil {
				t.Fatalf("ReadSnapshot: %v", err)
			}
			if covers != tt.covers {
				t.Fatalf("covers = %d, want %d", covers, tt.covers)
			}
			if len(marks) != len(tt.marks) || !maps.Equal(marks, tt.marks) {
				t.Fatalf("marks = %v, want %v", marks, tt.marks)
			}
			snapViewsEqual(t, got, v)

			// The loaded view goes on applying by the same rule.
			r := viewPut("prices", "sku-1", "newer", 9, 1, record.MakeHLC(1<<40, 0)).record(t)
			if got.Apply(r) != v.Apply(r) || got.Digest() != v.Digest() {
				t.Fatal("the loaded view applies a new record differently")
			}

			// Writing again replaces the file and leaves no temporary
			// file behind.
			if err := WriteSnapshot(path, got, tt.covers+1, tt.marks); err != nil {
				t.Fatalf("second WriteSnapshot: %v", err)
			}
			if _, covers, _, err := ReadSnapshot(path, nil); err != nil || covers != tt.covers+1 {
				t.Fatalf("after the second write readSnapshot = covers %d, %v", covers, err)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Fatalf("directory holds %q, want only the snapshot", names)
			}
		})
	}
}

func TestSnapshotMissingFile(t *testing.T) {
	_, _, _, err := ReadSnapshot(filepath.Join(t.TempDir(), "none"), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadSnapshot of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestSnapshotWriteRejectsBadArguments(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "view.snap")
	for name, err := range map[string]error{
		"negative covers": WriteSnapshot(path, New(), -1, nil),
		"origin 0 mark":   WriteSnapshot(path, New(), 0, map[uint64]uint64{0: 1}),
	} {
		if !errors.Is(err, record.ErrInvalid) {
			t.Errorf("%s: %v, want record.ErrInvalid", name, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused write left %d files", len(ents))
	}
	// A directory that does not exist is an I/O error, not a panic.
	if err := WriteSnapshot(filepath.Join(dir, "no", "such", "dir"), New(), 0, nil); !errors.Is(err, errs.ErrIO) {
		t.Fatalf("write into a missing directory: %v, want errs.ErrIO", err)
	}
}

// snapFixCRC recomputes the trailer so that a test reaches the structure
// checks behind the CRC.
func snapFixCRC(b []byte) []byte {
	body := len(b) - snapTrailer
	binary.LittleEndian.PutUint32(b[body:], crc32.Checksum(b[:body], fsys.Castagnoli))
	return b
}

func TestSnapshotCorrupt(t *testing.T) {
	good := snapEncode(t, snapTestView(t), 4096, snapTestMarks)
	// Offsets into good: the first entry starts after the header, the
	// marks and the first topic's header and name ("events" is keyless,
	// so "prices" comes first).
	firstTopic := snapHeaderSize + len(snapTestMarks)*snapMarkSize
	firstEntry := firstTopic + snapTopicSize + len("prices") // "gone", a tombstone
	secondEntry := firstEntry + snapEntrySize + len("gone")  // "sku-1", a value
	set := func(off int, val ...byte) func([]byte) []byte {
		return func(b []byte) []byte { copy(b[off:], val); return snapFixCRC(b) }
	}
	put64 := func(off int, x uint64) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], x); return snapFixCRC(b) }
	}
	put16 := func(off int, x uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint16(b[off:], x); return snapFixCRC(b) }
	}
	tests := []struct {
		name    string
		corrupt func([]byte) []byte
	}{
		{"empty file", func([]byte) []byte { return nil }},
		{"header only", func(b []byte) []byte { return b[:snapHeaderSize] }},
		{"torn in the marks", func(b []byte) []byte { return b[:firstTopic-3] }},
		{"torn in an entry", func(b []byte) []byte { return b[:firstEntry+10] }},
		{"trailer missing", func(b []byte) []byte { return b[:len(b)-snapTrailer] }},
		{"trailer cut", func(b []byte) []byte { return b[:len(b)-1] }},
		{"trailing garbage", func(b []byte) []byte { return append(b, 0) }},
		{"trailing garbage with a good crc", func(b []byte) []byte { return snapFixCRC(append(b[:len(b)-4:len(b)-4], 0, 0, 0, 0, 0)) }},
		{"crc flipped", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }},
		{"value byte flipped", func(b []byte) []byte { b[len(b)-10] ^= 1; return b }},
		{"bad magic", set(0, 'X')},
		{"version 3", set(8, 3)},
		{"reserved set", set(12, 1)},
		{"negative covers", put64(16, 1<<63)},
		{"huge mark count", put64(24, 1<<62)},
		{"huge topic count", put64(32, 1<<62)},
		{"huge entry count", put64(40, 1<<62)},
		{"entry count too high", put64(40, 7)},
		{"entry count too low", put64(40, 3)},
		{"more topics than entries", put64(32, 7)},
		{"marks out of order", put64(snapHeaderSize, 3)},
		{"mark for origin 0", put64(snapHeaderSize, 0)},
		{"topic of zero entries", put64(firstTopic, 0)},
		{"topic of too many entries", put64(firstTopic, 1<<40)},
		{"topic name empty", put16(firstTopic+8, 0)},
		{"topic name too long", put16(firstTopic+8, 0xffff)},
		{"unknown entry flag", set(firstEntry, 2)},
		{"key length zero", put16(firstEntry+1, 0)},
		{"key length past the end", put16(firstEntry+1, 0xffff)},
		{"value length past the end", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[secondEntry+5:], 1<<30)
			return snapFixCRC(b)
		}},
		{"value length over the maximum", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[secondEntry+5:], 1<<31)
			return snapFixCRC(b)
		}},
		{"zero origin", put64(firstEntry+9, 0)},
		{"zero seq", put64(firstEntry+17, 0)},
		{"tombstone with a value", set(secondEntry, snapFlagTombstone)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.corrupt(bytes.Clone(good))
			path := filepath.Join(t.TempDir(), "view.snap")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			v, _, _, err := ReadSnapshot(path, nil)
			if !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("readSnapshot: %v, want record.ErrCorrupt", err)
			}
			if v != nil {
				t.Fatal("a corrupt snapshot returned a view")
			}
		})
	}
}

// TestSnapshotOrderChecks builds files whose entries are fine one by one but
// out of order, with a correct CRC: the reader must still refuse them,
// because an unsorted or duplicated key would make the view differ from the
// writer's.
func TestSnapshotOrderChecks(t *testing.T) {
	entry := func(key string) []byte {
		var e [snapEntrySize]byte
		binary.LittleEndian.PutUint16(e[1:], uint16(len(key)))
		binary.LittleEndian.PutUint64(e[9:], 1)
		binary.LittleEndian.PutUint64(e[17:], 1)
		binary.LittleEndian.PutUint64(e[25:], 1)
		return append(e[:], key...)
	}
	topic := func(name string, keys ...string) []byte {
		var h [snapTopicSize]byte
		binary.LittleEndian.PutUint64(h[0:], uint64(len(keys)))
		binary.LittleEndian.PutUint16(h[8:], uint16(len(name)))
		b := append(h[:], name...)
		for _, k := range keys {
			b = append(b, entry(k)...)
		}
		return b
	}
	file := func(topics ...[]byte) []byte {
		var h [snapHeaderSize]byte
		copy(h[:], snapMagic)
		binary.LittleEndian.PutUint32(h[8:], snapVersion)
		n := 0
		b := h[:]
		for _, tp := range topics {
			n += int(binary.LittleEndian.Uint64(tp))
			b = append(b, tp...)
		}
		binary.LittleEndian.PutUint64(b[32:], uint64(len(topics)))
		binary.LittleEndian.PutUint64(b[40:], uint64(n))
		return snapFixCRC(append(b, 0, 0, 0, 0))
	}
	tests := []struct {
		name string
		file []byte
		ok   bool
	}{
		{"sorted", file(topic("a", "k1", "k2"), topic("b", "k1")), true},
		{"keys out of order", file(topic("a", "k2", "k1")), false},
		{"duplicate key", file(topic("a", "k1", "k1")), false},
		{"topics out of order", file(topic("b", "k1"), topic("a", "k1")), false},
		{"duplicate topic", file(topic("a", "k1"), topic("a", "k2")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := decodeSnapshot(bytes.NewReader(tt.file), int64(len(tt.file)), nil)
			if tt.ok && err != nil {
				t.Fatalf("decodeSnapshot: %v", err)
			}
			if !tt.ok && !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("decodeSnapshot: %v, want record.ErrCorrupt", err)
			}
		})
	}
}

// TestSnapshotEveryCutAndFlip cuts the file at every length and flips
// every bit of it: each must be refused (the CRC-32C catches any single-bit
// error; the structure checks come first for many).
func TestSnapshotEveryCutAndFlip(t *testing.T) {
	good := snapEncode(t, snapTestView(t), 77, snapTestMarks)
	for n := range len(good) {
		if _, _, _, err := decodeSnapshot(bytes.NewReader(good[:n]), int64(n), nil); !errors.Is(err, record.ErrCorrupt) {
			t.Fatalf("cut at %d of %d: %v, want record.ErrCorrupt", n, len(good), err)
		}
	}
	b := bytes.Clone(good)
	for i := range b {
		for bit := range 8 {
			b[i] ^= 1 << bit
			if _, _, _, err := decodeSnapshot(bytes.NewReader(b), int64(len(b)), nil); !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("bit %d of byte %d flipped: %v, want record.ErrCorrupt", bit, i, err)
			}
			b[i] ^= 1 << bit
		}
	}
}

// TestSnapshotIsAConsistentCut checks that a snapshot holds the view as it
// was when the write began, while Apply goes on during the write.
func TestSnapshotIsAConsistentCut(t *testing.T) {
	v := New()
	for i := range 2000 {
		v.Apply(viewPut("t", fmt.Sprintf("k%04d", i), "before", 1, uint64(i+1), uint64(i+1)).record(t))
	}
	want := v.Digest()
	topics, entries := v.freeze()

	// Change every key, delete some, add topics, after the freeze.
	for i := range 2000 {
		r := viewPut("t", fmt.Sprintf("k%04d", i), "after", 2, uint64(i+1), uint64(10_000+i))
		if i%3 == 0 {
			r = viewDel(r.topic, r.key, 2, uint64(i+1), uint64(10_000+i))
		}
		v.Apply(r.record(t))
		v.Apply(viewPut(fmt.Sprintf("new%d", i%5), "k", "v", 3, uint64(i+1), uint64(10_000+i)).record(t))
	}
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, topics, entries, 0, nil, snapVersion); err != nil {
		t.Fatal(err)
	}
	got, _, _, err := decodeSnapshot(bytes.NewReader(buf.Bytes()), int64(buf.Len()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest() != want {
		t.Fatal("the snapshot holds changes applied after it began")
	}
	if e, ok := got.Get("t", "k0000"); !ok || string(e.Value) != "before" {
		t.Fatalf("Get from the snapshot = %+v, %v", e, ok)
	}

	// And the same with the real writer racing a writer (for -race).
	path := filepath.Join(t.TempDir(), "view.snap")
	racing := make([]record.Record, 2000)
	for i := range racing {
		racing[i] = viewPut("t", fmt.Sprintf("k%04d", i), "racing", 4, uint64(i+1), uint64(20_000+i)).record(t)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, r := range racing {
			v.Apply(r)
		}
	}()
	for range 3 {
		if err := WriteSnapshot(path, v, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if _, _, _, err := ReadSnapshot(path, nil); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadSnapshot feeds arbitrary bytes to the snapshot reader. It must
// never panic, must refuse with record.ErrCorrupt, and what it accepts must encode
// back to the same bytes (the format has one encoding per view).
func FuzzReadSnapshot(f *testing.F) {
	seeds := [][]byte{
		snapEncode(f, New(), 0, nil),
		snapEncode(f, snapTestView(f), 4096, snapTestMarks),
		func() []byte {
			v := New()
			v.Apply(viewPut("t", "k", "v", 1, 1, 1).record(f))
			v.Apply(viewDel("t", "x", 2, 1, 2).record(f))
			return snapEncode(f, v, 64, map[uint64]uint64{1: 1, 2: 1})
		}(),
		func() []byte {
			// Version 2: an expiry, a pending value, a cancel, a
			// scheduled delete (instants far ahead, so nothing expires).
			v := New()
			far := int64(4_000_000_000_000)
			for _, r := range []timeRec{
				{key: "a", value: "x", expires: far, origin: 1, seq: 1, hlc: record.MakeHLC(1, 0)},
				{key: "b", value: "old", origin: 1, seq: 2, hlc: record.MakeHLC(2, 0)},
				{key: "b", value: "sale", eff: far, expires: far + 10, origin: 1, seq: 3, hlc: record.MakeHLC(3, 0)},
				{key: "c", value: "sale", eff: far, origin: 1, seq: 4, hlc: record.MakeHLC(4, 0)},
				{key: "c", cancel: true, eff: far, origin: 1, seq: 5, hlc: record.MakeHLC(5, 0)},
				{key: "d", del: true, eff: far, origin: 1, seq: 6, hlc: record.MakeHLC(6, 0)},
			} {
				v.Apply(r.record(f))
			}
			return snapEncode(f, v, 64, map[uint64]uint64{1: 6})
		}(),
		func() []byte {
			// Version 3: expiry changes of a value, of a scheduled
			// value, and of a version not held before (its marks).
			v := New()
			far := int64(4_000_000_000_000)
			a := timeRec{key: "a", value: "x", origin: 1, seq: 1, hlc: record.MakeHLC(1, 0)}
			b := timeRec{key: "b", value: "sale", eff: far, origin: 1, seq: 2, hlc: record.MakeHLC(2, 0)}
			v.Apply(a.record(f))
			v.Apply(b.record(f))
			v.Apply(expiryRec(f, "a", "x", 0, record.Stamp{Origin: 1, Seq: 1, HLC: a.hlc}, far, 2, 1, record.MakeHLC(3, 0)))
			v.Apply(expiryRec(f, "b", "sale", far, record.Stamp{Origin: 1, Seq: 2, HLC: b.hlc}, far+5, 2, 2, record.MakeHLC(4, 0)))
			v.Apply(expiryRec(f, "c", "y", 0, record.Stamp{Origin: 3, Seq: 1, HLC: record.MakeHLC(2, 1)}, 0, 2, 3, record.MakeHLC(5, 0)))
			return snapEncode(f, v, 64, map[uint64]uint64{1: 2, 2: 3})
		}(),
		func() []byte {
			// Version 4: a counter with increments of two origins, a
			// float one, and one waiting for a version not held yet.
			v := New()
			a := timeRec{key: "a", value: "10", origin: 1, seq: 1, hlc: record.MakeHLC(1, 0)}
			aSt := record.Stamp{Origin: 1, Seq: 1, HLC: a.hlc}
			v.Apply(a.record(f))
			v.Apply(incRec(f, "3", aSt, 2, 1, record.MakeHLC(2, 0)))
			v.Apply(incRec(f, "0.5", aSt, 1, 2, record.MakeHLC(3, 0)))
			m := &record.Message{Topic: "prices", Key: "b", Value: []byte("-1"), CountOn: record.Stamp{Origin: 3, Seq: 1, HLC: record.MakeHLC(2, 1)}}
			buf := make([]byte, record.Padded(m.EncodedSize()))
			record.Encode(buf, m, record.Stamp{Origin: 2, Seq: 2, HLC: record.MakeHLC(4, 0)})
			r, err := record.Decode(buf)
			if err != nil {
				f.Fatal(err)
			}
			v.Apply(r)
			return snapEncode(f, v, 64, map[uint64]uint64{1: 2, 2: 2})
		}(),
		func() []byte {
			// Version 5: counters on absences, a key's genesis and a
			// deleted key's.
			v := New()
			d := timeRec{key: "k", del: true, origin: 1, seq: 1, hlc: record.MakeHLC(1, 0)}
			v.Apply(d.record(f))
			v.Apply(absRec(f, "2", record.Stamp{Origin: 1, Seq: 1, HLC: d.hlc}, 0, 2, 1, record.MakeHLC(2, 0)))
			m := &record.Message{Topic: "prices", Key: "g", Value: []byte("0.5"), CountAbsent: true, CountOn: record.Stamp{HLC: record.MakeHLC(1, 0)}}
			v.Apply(stamped(f, m, record.Stamp{Origin: 2, Seq: 2, HLC: record.MakeHLC(3, 0)}))
			return snapEncode(f, v, 64, map[uint64]uint64{1: 1, 2: 2})
		}(),
		func() []byte {
			// Version 6: changes of revivals, the marks' absences: of a
			// deleted key's revival with its count, and of one whose
			// increments have not come (its counter counts nothing).
			v := New()
			far := int64(4_000_000_000_000)
			d := timeRec{key: "k", del: true, origin: 1, seq: 1, hlc: record.MakeHLC(1, 0)}
			dSt := record.Stamp{Origin: 1, Seq: 1, HLC: d.hlc}
			v.Apply(d.record(f))
			v.Apply(absRec(f, "2", dSt, 0, 2, 1, record.MakeHLC(2, 0)))
			v.Apply(revivalRec(f, dSt, 0, far, 2, 2, record.MakeHLC(3, 0)))
			m := &record.Message{Topic: "prices", Key: "e", Value: []byte("0"), ExpiresAt: far, ExpiryOf: record.Stamp{Origin: 3, Seq: 1, HLC: record.MakeHLC(2, 1)}, ExpiryAbsent: true, Gone: 5}
			v.Apply(stamped(f, m, record.Stamp{Origin: 2, Seq: 3, HLC: record.MakeHLC(4, 0)}))
			return snapEncode(f, v, 64, map[uint64]uint64{1: 1, 2: 3})
		}(),
	}
	for _, s := range seeds {
		f.Add(s)
		for _, cut := range []int{len(s) - 1, len(s) - snapTrailer, len(s) / 2, snapHeaderSize} {
			f.Add(s[:cut])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(data []byte) {
			v, covers, marks, err := decodeSnapshot(bytes.NewReader(data), int64(len(data)), nil)
			// The same bytes as a stream of unknown size (a bootstrap's),
			// in reads of a byte, are taken or refused alike, into the
			// same view.
			sv, _, _, serr := decodeSnapshot(iotest.OneByteReader(bytes.NewReader(data)), -1, nil)
			if (err == nil) != (serr == nil) {
				t.Fatalf("as a file: %v; as a stream: %v", err, serr)
			}
			if serr != nil && !errors.Is(serr, record.ErrCorrupt) {
				t.Fatalf("stream error not wrapping record.ErrCorrupt: %v", serr)
			}
			if err == nil && !bytes.Equal(snapEncode(t, sv, covers, marks), snapEncode(t, v, covers, marks)) {
				t.Fatal("the stream read into another view than the file")
			}
			if err != nil {
				if !errors.Is(err, record.ErrCorrupt) {
					t.Fatalf("error not wrapping record.ErrCorrupt: %v", err)
				}
				return
			}
			again := snapEncode(t, v, covers, marks)
			if binary.LittleEndian.Uint32(data[8:]) >= snapVersion2 {
				// Versions 2 to 4 rebuild each key's records by the rule, which
				// may keep fewer than the file lists (one a key, once an
				// ordinary write is above them): the file it writes back
				// must read back to itself.
				v2, c2, m2, err := decodeSnapshot(bytes.NewReader(again), int64(len(again)), nil)
				if err != nil {
					t.Fatalf("accepted %d bytes whose re-encoding is refused: %v", len(data), err)
				}
				if third := snapEncode(t, v2, c2, m2); !bytes.Equal(third, again) {
					t.Fatalf("a version 2 snapshot does not settle after one rewrite")
				}
				return
			}
			if !bytes.Equal(again, data) {
				t.Fatalf("accepted %d bytes that encode back to %d different bytes", len(data), len(again))
			}
		}
		check(data)
		// With the CRC made right, mutations reach the structure checks.
		if len(data) >= snapHeaderSize+snapTrailer {
			check(snapFixCRC(bytes.Clone(data)))
		}
	})
}

// snapBench is the 1-million-key view the snapshot benchmarks share.
var snapBench struct {
	once sync.Once
	v    *View
}

// snapBenchView returns the shared view and the path of a snapshot of it in
// a directory of b's own.
func snapBenchView(b *testing.B) (*View, string) {
	snapBench.once.Do(func() {
		v := New()
		buf := make([]byte, 256)
		for i := range 1_000_000 {
			m := &record.Message{Topic: "prices", Key: viewBenchKey(i), Value: []byte("19.99 EUR/unit  ")}
			n := record.Encode(buf, m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: uint64(i + 1)})
			v.Apply(record.Record(buf[:n]))
		}
		snapBench.v = v
	})
	path := filepath.Join(b.TempDir(), "view.snap")
	if err := WriteSnapshot(path, snapBench.v, 1, map[uint64]uint64{1: 1_000_000}); err != nil {
		b.Fatal(err)
	}
	return snapBench.v, path
}

func snapBenchSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// BenchmarkSnapshotWrite writes a snapshot of 1 million keys (16-byte keys
// and values), fsync and rename included.
func BenchmarkSnapshotWrite(b *testing.B) {
	v, path := snapBenchView(b)
	b.SetBytes(snapBenchSize(b, path))
	marks := map[uint64]uint64{1: 1_000_000}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := WriteSnapshot(path, v, 1, marks); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotRead loads the snapshot BenchmarkSnapshotWrite writes.
func BenchmarkSnapshotRead(b *testing.B) {
	_, path := snapBenchView(b)
	b.SetBytes(snapBenchSize(b, path))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, _, _, err := ReadSnapshot(path, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplySnapshot puts the snapshot BenchmarkSnapshotWrite writes
// into an empty live view, as a fresh node's bootstrap does
// (View.ApplySnapshot, reading the file as a stream).
func BenchmarkApplySnapshot(b *testing.B) {
	_, path := snapBenchView(b)
	b.SetBytes(snapBenchSize(b, path))
	b.ReportAllocs()
	cpu := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		applySnapshotFile(b, path, 1_000_000)
	}
	// The CPU time, which a busy machine changes less than the wall time.
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// applySnapshotFile returns a new view that applied the snapshot at path,
// which holds keys keys.
func applySnapshotFile(b *testing.B, path string, keys int) *View {
	v := New()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	_, _, err = v.ApplySnapshot(f)
	f.Close()
	if err != nil || v.Len() != keys {
		b.Fatalf("ApplySnapshot: %d keys, %v", v.Len(), err)
	}
	return v
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestApplySnapshot puts a snapshot of several batches into a live view
// that is empty, that already holds some of its keys (older and newer),
// and that a writer changes while the snapshot goes in: each ends as the
// view that applied both sets of records in any order, and a follower
// sees every entry the snapshot brought. The snapshot's first topic holds
// more than streamHint entries, so that its map is grown on the way.
func TestApplySnapshot(t *testing.T) {
	const keys = streamHint + 3*applyBatchSize + 17
	snapRecs := make([]viewRec, 0, keys+1)
	for i := range keys {
		r := viewPut("prices", viewBenchKey(i), fmt.Sprintf("v%d", i), 1, uint64(i+1), uint64(1000+i))
		if i%97 == 0 {
			r = viewDel("prices", viewBenchKey(i), 1, uint64(i+1), uint64(1000+i))
		}
		snapRecs = append(snapRecs, r)
	}
	snapRecs = append(snapRecs, viewPut("stock", "sku-1", "3", 1, keys+1, 5000))
	// live: records of another origin, some older than the snapshot's
	// (even hlc 1..) and some newer (odd: hlc 1e6..), on keys spread
	// over every batch and on keys the snapshot lacks.
	var live []viewRec
	for i := 0; i < keys+50; i += 7 {
		hlc := uint64(1 + i)
		if i%2 == 1 {
			hlc = uint64(1_000_000 + i)
		}
		live = append(live, viewPut("prices", viewBenchKey(i), "live", 2, uint64(len(live)+1), hlc))
	}
	src := New()
	for _, r := range snapRecs {
		src.Apply(r.record(t))
	}
	path := filepath.Join(t.TempDir(), "snap")
	if err := WriteSnapshot(path, src, 1, map[uint64]uint64{1: keys + 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		before, along []viewRec // applied before the snapshot, and while it goes in
	}{
		{name: "empty view"},
		{name: "live keys first", before: live},
		{name: "writer meanwhile", along: live},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := New()
			for _, r := range slices.Concat(snapRecs, tc.before, tc.along) {
				want.Apply(r.record(t))
			}
			v := New()
			for _, r := range tc.before {
				v.Apply(r.record(t))
			}
			seen := map[string]bool{}
			for range v.FollowFrom(func(c Change) { seen[c.Topic+"/"+c.Key] = true }, nil) {
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if len(tc.along) > 0 {
					// Once the first batch is in: the next batches meet
					// these records.
					for v.Len() == 0 {
						runtime.Gosched()
					}
				}
				for _, r := range tc.along {
					v.Apply(r.record(t))
				}
			}()
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			marks, maxHLC, err := v.ApplySnapshot(f)
			<-done
			if err != nil {
				t.Fatal(err)
			}
			if marks[1] != keys+1 || maxHLC != 1000+keys-1 {
				t.Fatalf("marks %v, max HLC %d", marks, maxHLC)
			}
			snapViewsEqual(t, v, want)
			for _, r := range snapRecs {
				if e, ok := want.Get(r.topic, r.key); (ok || r.del) && e.Stamp.Origin == 1 && !seen[r.topic+"/"+r.key] {
					t.Fatalf("the follower did not see %s/%s", r.topic, r.key)
				}
			}
		})
	}
}

// TestApplySnapshotDamaged streams snapshots that are cut short, damaged,
// followed by stray bytes or broken off by a failed read into a live
// view: each is refused (record.ErrCorrupt, or errs.ErrIO for the read)
// with no marks, and what it left in the view is entries of the snapshot
// put by the rule: nothing the view held is lost or made older. (A byte
// damaged on the way is the transport's to catch, as the link's MACs do:
// the CRC at the end cannot take back the entries before it, so there
// only the refusal is checked.)
func TestApplySnapshotDamaged(t *testing.T) {
	src := New()
	for i := range 3*applyBatchSize + 5 {
		src.Apply(viewPut("prices", viewBenchKey(i), fmt.Sprintf("v%d", i), 1, uint64(i+1), uint64(1000+i)).record(t))
	}
	good := snapEncode(t, src, 1, map[uint64]uint64{1: 3*applyBatchSize + 5})
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	for _, tc := range []struct {
		name    string
		r       io.Reader
		want    error
		damaged bool
	}{
		{"empty", bytes.NewReader(nil), record.ErrCorrupt, false},
		{"cut in the middle", bytes.NewReader(good[:len(good)/2]), record.ErrCorrupt, false},
		{"no trailer", bytes.NewReader(good[:len(good)-snapTrailer]), record.ErrCorrupt, false},
		{"a byte flipped", bytes.NewReader(flipped), record.ErrCorrupt, true},
		{"bytes after the trailer", bytes.NewReader(append(bytes.Clone(good), 0)), record.ErrCorrupt, false},
		{"read fails", io.MultiReader(bytes.NewReader(good[:len(good)/2]), iotest.ErrReader(errors.New("link down"))), errs.ErrIO, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := New()
			// A key the snapshot has, newer here, and one it lacks.
			v.Apply(viewPut("prices", viewBenchKey(7), "newer", 2, 1, 1_000_000).record(t))
			v.Apply(viewPut("stock", "own", "mine", 2, 2, 5).record(t))
			marks, _, err := v.ApplySnapshot(tc.r)
			if !errors.Is(err, tc.want) || marks != nil {
				t.Fatalf("marks %v, err %v; want %v", marks, err, tc.want)
			}
			if tc.damaged {
				return
			}
			if e, ok := v.Get("prices", viewBenchKey(7)); !ok || string(e.Value) != "newer" {
				t.Fatalf("the newer value was lost: %q %v", e.Value, ok)
			}
			if e, ok := v.Get("stock", "own"); !ok || string(e.Value) != "mine" {
				t.Fatalf("the view's own key was lost: %q %v", e.Value, ok)
			}
			for _, k := range v.Keys("prices", "", "", 0) {
				if e, _ := v.Get("prices", k); k != viewBenchKey(7) {
					if w, ok := src.Get("prices", k); !ok || !bytes.Equal(e.Value, w.Value) || e.Stamp != w.Stamp {
						t.Fatalf("key %s holds %q, the snapshot %q", k, e.Value, w.Value)
					}
				}
			}
		})
	}
}
