package cursors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"

	"github.com/cachecast/cachecast/store/internal/errs"
)

type curState struct {
	topic  string
	offset uint64
}

func openTestCursors(t testing.TB, path string) *File {
	t.Helper()
	c, err := Open(path, nil)
	if err != nil {
		t.Fatalf("openCursors: %v", err)
	}
	return c
}

// curSnapshot returns what the cursors hold, checking that list and get
// agree.
func curSnapshot(t testing.TB, c *File) map[string]curState {
	t.Helper()
	m := map[string]curState{}
	l := c.List()
	for i, e := range l {
		if i > 0 && l[i-1].Name >= e.Name {
			t.Fatalf("list not sorted: %q then %q", l[i-1].Name, e.Name)
		}
		topic, off, ok := c.Get(e.Name)
		if !ok || topic != e.Topic || off != e.Offset {
			t.Fatalf("get(%q) = %q %d %v, list says %q %d", e.Name, topic, off, ok, e.Topic, e.Offset)
		}
		m[e.Name] = curState{e.Topic, e.Offset}
	}
	return m
}

func TestCursorOps(t *testing.T) {
	type op struct {
		kind        string // set, delete
		name, topic string
		offset      uint64
		wantErr     error
	}
	long := strings.Repeat("n", maxCursorNameLen)
	for _, tc := range []struct {
		name string
		ops  []op
		want map[string]curState
	}{
		{"set one", []op{{kind: "set", name: "a", topic: "t", offset: 1}}, map[string]curState{"a": {"t", 1}}},
		{"move", []op{{kind: "set", name: "a", topic: "t", offset: 1}, {kind: "set", name: "a", topic: "t", offset: 9}},
			map[string]curState{"a": {"t", 9}}},
		{"change topic", []op{{kind: "set", name: "a", topic: "t", offset: 1}, {kind: "set", name: "a", topic: "u", offset: 0}},
			map[string]curState{"a": {"u", 0}}},
		{"same value twice", []op{{kind: "set", name: "a", topic: "t", offset: 1}, {kind: "set", name: "a", topic: "t", offset: 1}},
			map[string]curState{"a": {"t", 1}}},
		{"delete", []op{{kind: "set", name: "a", topic: "t", offset: 1}, {kind: "set", name: "b", topic: "t", offset: 2}, {kind: "delete", name: "a"}},
			map[string]curState{"b": {"t", 2}}},
		{"delete unknown", []op{{kind: "delete", name: "x"}}, map[string]curState{}},
		{"delete and set again", []op{{kind: "set", name: "a", topic: "t", offset: 1}, {kind: "delete", name: "a"}, {kind: "set", name: "a", topic: "t", offset: 3}},
			map[string]curState{"a": {"t", 3}}},
		{"limits", []op{
			{kind: "set", name: long, topic: strings.Repeat("t", maxCursorTopicLen), offset: 1<<64 - 1},
			{kind: "set", name: long + "x", topic: "t", wantErr: record.ErrTooLarge},
			{kind: "set", name: "a", topic: strings.Repeat("t", maxCursorTopicLen+1), wantErr: record.ErrTooLarge},
			{kind: "set", name: "", topic: "t", wantErr: record.ErrInvalid},
		}, map[string]curState{long: {strings.Repeat("t", maxCursorTopicLen), 1<<64 - 1}}},
		{"empty topic and binary name", []op{{kind: "set", name: "\x00\xff", topic: "", offset: 5}},
			map[string]curState{"\x00\xff": {"", 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cursors")
			c := openTestCursors(t, path)
			for _, op := range tc.ops {
				var err error
				switch op.kind {
				case "set":
					err = c.Set(op.name, op.topic, op.offset)
				case "delete":
					err = c.Delete(op.name)
				}
				if !errors.Is(err, op.wantErr) || (err == nil) != (op.wantErr == nil) {
					t.Fatalf("%s(%q): %v, want %v", op.kind, op.name, err, op.wantErr)
				}
			}
			if got := curSnapshot(t, c); !maps.Equal(got, tc.want) {
				t.Fatalf("cursors %v, want %v", got, tc.want)
			}
			if err := c.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c = openTestCursors(t, path)
			defer c.Close()
			if got := curSnapshot(t, c); !maps.Equal(got, tc.want) {
				t.Fatalf("after reopen: cursors %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCursorGrowAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cursors")
	c := openTestCursors(t, path)
	want := map[string]curState{}
	for i := range 100 {
		name := fmt.Sprintf("c%03d", i)
		if err := c.Set(name, "t"+name, uint64(i)); err != nil {
			t.Fatal(err)
		}
		want[name] = curState{"t" + name, uint64(i)}
	}
	for i := 0; i < 100; i += 3 {
		name := fmt.Sprintf("c%03d", i)
		if err := c.Delete(name); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
	}
	for i := 1; i < 100; i += 3 {
		name := fmt.Sprintf("c%03d", i)
		for k := range 3 { // several updates flip between the copies
			if err := c.Set(name, "moved", uint64(1000+i+k)); err != nil {
				t.Fatal(err)
			}
		}
		want[name] = curState{"moved", uint64(1002 + i)}
	}
	st, _ := os.Stat(path)
	if st.Size() != 128*cursorCellSize {
		t.Fatalf("file of %d bytes for 100 cursors, want 128 cells", st.Size())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openTestCursors(t, path)
	if got := curSnapshot(t, c); !maps.Equal(got, want) {
		t.Fatalf("after reopen: %d cursors, want %d", len(got), len(want))
	}
	// Freed cells are reused before the file grows.
	for i := range 30 {
		if err := c.Set(fmt.Sprintf("new%d", i), "t", 1); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if st, _ := os.Stat(path); st.Size() != 128*cursorCellSize {
		t.Fatalf("file grew to %d bytes though cells were free", st.Size())
	}
}

// curCellOf is the cell holding name.
func curCellOf(t *testing.T, c *File, name string) int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.byName[name]
	if !ok {
		t.Fatalf("no cell for %q", name)
	}
	return i
}

func TestCursorTornWrites(t *testing.T) {
	// Each case: a history of values for cursor "x" (nil: deleted), then
	// damage to the copy written last or the one before; the cursor must
	// come back at one of the last two values, never garbage.
	type val *curState
	v := func(topic string, off uint64) val { return &curState{topic, off} }
	for _, tc := range []struct {
		name    string
		history []val
		damage  string // "newest", "older", "both"
		want    val    // nil: absent
	}{
		{"update torn", []val{v("t", 1), v("t", 2)}, "newest", v("t", 1)},
		{"older copy damaged", []val{v("t", 1), v("t", 2)}, "older", v("t", 2)},
		{"both damaged", []val{v("t", 1), v("t", 2)}, "both", nil},
		{"create torn", []val{v("t", 1)}, "newest", nil},
		{"delete torn", []val{v("t", 1), v("t", 2), nil}, "newest", v("t", 2)},
		{"long history torn", []val{v("t", 1), v("t", 2), v("u", 3), v("u", 4), v("v", 5)}, "newest", v("u", 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cursors")
			c := openTestCursors(t, path)
			if err := c.Set("other", "o", 7); err != nil {
				t.Fatal(err)
			}
			cell := -1
			for _, h := range tc.history {
				var err error
				if h == nil {
					err = c.Delete("x")
				} else {
					err = c.Set("x", h.topic, h.offset)
					cell = curCellOf(t, c, "x")
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			newest := c.cells[cell].cur
			c.Close()
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			hit := func(k int) { // flip a byte of the name inside copy k
				off := int64(cell*cursorCellSize + k*cursorCopySize + cursorNameOff)
				b := []byte{0}
				f.ReadAt(b, off)
				b[0] ^= 0x5a
				f.WriteAt(b, off)
			}
			switch tc.damage {
			case "newest":
				hit(newest)
			case "older":
				hit(1 - newest)
			case "both":
				hit(0)
				hit(1)
			}
			f.Close()
			c = openTestCursors(t, path)
			defer c.Close()
			topic, off, ok := c.Get("x")
			switch {
			case tc.want == nil && ok:
				t.Fatalf("x = %q %d, want absent", topic, off)
			case tc.want != nil && (!ok || topic != tc.want.topic || off != tc.want.offset):
				t.Fatalf("x = %q %d %v, want %v", topic, off, ok, *tc.want)
			}
			if topic, off, ok := c.Get("other"); !ok || topic != "o" || off != 7 {
				t.Fatal("a neighbouring cursor was lost")
			}
			// The cell is usable again.
			if err := c.Set("x", "after", 99); err != nil {
				t.Fatal(err)
			}
			c.Close()
			c = openTestCursors(t, path)
			if topic, off, ok := c.Get("x"); !ok || topic != "after" || off != 99 {
				t.Fatalf("x after repair = %q %d %v", topic, off, ok)
			}
		})
	}
}

// curRawCopy encodes a copy the way the file holds it.
func curRawCopy(state byte, gen uint64, name, topic string, offset uint64) []byte {
	b := make([]byte, cursorCopySize)
	encodeCursorCopy(b, cursorCopy{state: state, gen: gen, name: name, topic: topic, offset: offset})
	return b
}

func TestCursorDuplicateName(t *testing.T) {
	// Two cells both claim "x": the newer generation wins, and the loser is
	// deleted on disk so that it cannot come back when the winner goes.
	file := make([]byte, 4*cursorCellSize)
	copy(file[0:], curRawCopy(cursorLive, 3, "x", "old", 1))
	copy(file[2*cursorCellSize:], curRawCopy(cursorLive, 9, "x", "new", 2))
	path := filepath.Join(t.TempDir(), "cursors")
	os.WriteFile(path, file, 0o600)
	c := openTestCursors(t, path)
	if topic, off, ok := c.Get("x"); !ok || topic != "new" || off != 2 {
		t.Fatalf("x = %q %d %v, want the newer", topic, off, ok)
	}
	if err := c.Delete("x"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c = openTestCursors(t, path)
	defer c.Close()
	if topic, off, ok := c.Get("x"); ok {
		t.Fatalf("a stale copy came back: x = %q %d", topic, off)
	}
}

func TestCursorOddFiles(t *testing.T) {
	valid := curRawCopy(cursorLive, 1, "keep", "t", 42)
	for _, tc := range []struct {
		name string
		file []byte
		want map[string]curState
	}{
		{"empty", nil, map[string]curState{}},
		{"shorter than a cell", []byte("garbage"), map[string]curState{}},
		{"one cell and a partial one", append(append(slices.Clone(valid), make([]byte, cursorCopySize)...), []byte("partial")...),
			map[string]curState{"keep": {"t", 42}}},
		{"unknown version", func() []byte {
			b := slices.Clone(valid)
			b[4] = 9
			binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], fsys.Castagnoli))
			return append(b, make([]byte, cursorCopySize)...)
		}(), map[string]curState{}},
		{"name length out of range", func() []byte {
			b := slices.Clone(valid)
			b[6] = 200
			binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], fsys.Castagnoli))
			return append(b, make([]byte, cursorCopySize)...)
		}(), map[string]curState{}},
		{"generation zero", append(curRawCopy(cursorLive, 0, "z", "t", 1), make([]byte, cursorCopySize)...), map[string]curState{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cursors")
			if tc.file != nil {
				os.WriteFile(path, tc.file, 0o600)
			}
			c := openTestCursors(t, path)
			if got := curSnapshot(t, c); !maps.Equal(got, tc.want) {
				t.Fatalf("cursors %v, want %v", got, tc.want)
			}
			// Enough sets to grow the file past its odd end.
			for i := range 40 {
				if err := c.Set(fmt.Sprintf("n%d", i), "t", uint64(i)); err != nil {
					t.Fatal(err)
				}
				tc.want[fmt.Sprintf("n%d", i)] = curState{"t", uint64(i)}
			}
			c.Close()
			c = openTestCursors(t, path)
			defer c.Close()
			if got := curSnapshot(t, c); !maps.Equal(got, tc.want) {
				t.Fatalf("after growing and reopening: %v, want %v", got, tc.want)
			}
			if st, _ := os.Stat(path); st.Size()%cursorCellSize != 0 {
				t.Fatalf("file of %d bytes is not whole cells", st.Size())
			}
		})
	}
}

// TestCursorDiskFull: growing the file fails with ErrDiskFull and loses
// nothing.
func TestCursorDiskFull(t *testing.T) {
	if !testkit.InFSizeChild(t) {
		return
	}
	path := filepath.Join(t.TempDir(), "cursors")
	c := openTestCursors(t, path)
	want := map[string]curState{}
	for i := range cursorMinCells {
		name := fmt.Sprintf("c%d", i)
		if err := c.Set(name, "t", uint64(i)); err != nil {
			t.Fatal(err)
		}
		want[name] = curState{"t", uint64(i)}
	}
	testkit.SetFSizeLimit(t, (cursorMinCells+4)*cursorCellSize)
	err := c.Set("one-too-many", "t", 1)
	testkit.SetFSizeLimit(t, 0)
	if !errors.Is(err, errs.ErrDiskFull) {
		t.Fatalf("set needing a bigger file: %v, want ErrDiskFull", err)
	}
	if got := curSnapshot(t, c); !maps.Equal(got, want) {
		t.Fatalf("cursors changed by a failed set: %v", got)
	}
	if err := c.Set("one-too-many", "t", 1); err != nil {
		t.Fatal(err)
	}
	want["one-too-many"] = curState{"t", 1}
	c.Close()
	c = openTestCursors(t, path)
	defer c.Close()
	if got := curSnapshot(t, c); !maps.Equal(got, want) {
		t.Fatalf("after reopen: %v", got)
	}
}

func TestCursorClosed(t *testing.T) {
	c := openTestCursors(t, filepath.Join(t.TempDir(), "cursors"))
	c.Set("a", "t", 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for name, err := range map[string]error{"set": c.Set("a", "t", 2), "delete": c.Delete("a"), "sync": c.Sync()} {
		if !errors.Is(err, errs.ErrClosed) {
			t.Errorf("%s after close: %v", name, err)
		}
	}
}

func TestCursorConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cursors")
	c := openTestCursors(t, path)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				name := fmt.Sprintf("g%d-%d", g, i%40)
				if err := c.Set(name, "t", uint64(i)); err != nil {
					t.Error(err)
					return
				}
				if _, off, ok := c.Get(name); !ok || off != uint64(i) {
					t.Errorf("get(%s) = %d %v", name, off, ok)
				}
				if i%10 == 0 {
					c.List()
					c.Sync()
				}
				if i%7 == 0 {
					c.Delete(fmt.Sprintf("g%d-%d", g, (i+1)%40))
				}
			}
		}()
	}
	wg.Wait()
	want := curSnapshot(t, c)
	c.Close()
	c = openTestCursors(t, path)
	defer c.Close()
	if got := curSnapshot(t, c); !maps.Equal(got, want) {
		t.Fatal("cursors differ after reopen")
	}
}

// curValidLiveCopies decodes, independently of the code under test, every
// valid live copy at a copy boundary of b.
func curValidLiveCopies(b []byte) map[Entry]bool {
	out := map[Entry]bool{}
	for off := 0; off+cursorCopySize <= len(b)/cursorCellSize*cursorCellSize; off += cursorCopySize {
		p := b[off : off+cursorCopySize]
		if crc32.Checksum(p[4:], crc32.MakeTable(crc32.Castagnoli)) != binary.LittleEndian.Uint32(p) {
			continue
		}
		nl, tl := int(p[6]), int(p[7])
		if p[4] != 1 || p[5] != 1 || nl == 0 || nl > 128 || tl > 128 || binary.LittleEndian.Uint64(p[8:]) == 0 {
			continue
		}
		out[Entry{
			Name:   string(p[24 : 24+nl]),
			Topic:  string(p[152 : 152+tl]),
			Offset: binary.LittleEndian.Uint64(p[16:]),
		}] = true
	}
	return out
}

// curFuzzDir is a temporary directory on tmpfs when there is one: msync and
// fsync cost nothing there, so the fuzzer (and its minimizer) runs many
// more inputs per second. The code under test is the same.
func curFuzzDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "cachecast-fuzz-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FuzzCursorFile opens a cursors file made of fuzzed bytes: it must never
// panic, every cursor it returns must come from a valid copy in the file,
// and the file must stay usable (set, delete, reopen).
func FuzzCursorFile(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("not a cursor file"))
	f.Add(make([]byte, cursorCellSize))
	// A real file with a few cursors, one updated, one deleted.
	{
		dir := f.TempDir()
		path := filepath.Join(dir, "cursors")
		c, err := Open(path, nil)
		if err != nil {
			f.Fatal(err)
		}
		c.Set("alpha", "prices", 10)
		c.Set("beta", "orders", 3)
		c.Set("alpha", "prices", 11)
		c.Set("gamma", "t", 1)
		c.Delete("gamma")
		c.Close()
		b, _ := os.ReadFile(path)
		f.Add(b[:4*cursorCellSize])
		torn := slices.Clone(b[:4*cursorCellSize])
		torn[cursorCopySize+30] ^= 1 // alpha's newest copy
		f.Add(torn)
		f.Add(b[:cursorCellSize+700]) // cut inside a cell
	}
	// Two cells naming the same cursor.
	dup := make([]byte, 2*cursorCellSize)
	copy(dup, curRawCopy(cursorLive, 5, "x", "a", 1))
	copy(dup[cursorCellSize+cursorCopySize:], curRawCopy(cursorLive, 5, "x", "b", 2))
	f.Add(dup)

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64*cursorCellSize {
			return
		}
		path := filepath.Join(curFuzzDir(t), "cursors")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Open(path, nil)
		if err != nil {
			t.Fatalf("open of a damaged file failed instead of ignoring the damage: %v", err)
		}
		valid := curValidLiveCopies(data)
		got := curSnapshot(t, c)
		for name, s := range got {
			if !valid[Entry{Name: name, Topic: s.topic, Offset: s.offset}] {
				t.Fatalf("cursor %q (%q, %d) has no valid slot in the file", name, s.topic, s.offset)
			}
		}
		// The file stays usable.
		if err := c.Set("fuzz", "t", 77); err != nil {
			t.Fatal(err)
		}
		got["fuzz"] = curState{"t", 77}
		for name := range got {
			if name != "fuzz" && len(name)%2 == 0 {
				if err := c.Delete(name); err != nil {
					t.Fatal(err)
				}
				delete(got, name)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		c, err = Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if after := curSnapshot(t, c); !maps.Equal(after, got) {
			t.Fatalf("after set, delete and reopen: %v, want %v", after, got)
		}
	})
}

// TestCursorOwners checks who may move and delete a cursor: its owner,
// an override (an admin), the store itself; another user gets
// ErrNotOwner and changes nothing. The owner survives a reopen, and a
// cursor with no owner (an older file) is adopted by its first setter.
func TestCursorOwners(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cursors")
	c := openTestCursors(t, path)
	alice := Owner{uid: 1001, known: true}
	bob := Owner{uid: 1002, known: true}
	admin := Owner{uid: 0, known: true, override: true}
	if err := c.SetAs(alice, "a", "t", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Set("legacy", "t", 5); err != nil { // no owner recorded
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		op   func() error
		want error
	}{
		{"bob moves alice's", func() error { return c.SetAs(bob, "a", "t", 0) }, errs.ErrNotOwner},
		{"bob deletes alice's", func() error { return c.DeleteAs(bob, "a") }, errs.ErrNotOwner},
		{"alice moves hers", func() error { return c.SetAs(alice, "a", "t", 2) }, nil},
		{"admin moves alice's", func() error { return c.SetAs(admin, "a", "t", 3) }, nil},
		{"the store moves alice's", func() error { return c.Set("a", "t", 4) }, nil},
		{"bob adopts the legacy one", func() error { return c.SetAs(bob, "legacy", "t", 6) }, nil},
		{"alice moves bob's adopted one", func() error { return c.SetAs(alice, "legacy", "t", 7) }, errs.ErrNotOwner},
	} {
		if err := tc.op(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openTestCursors(t, path)
	defer c.Close()
	got := map[string]Entry{}
	for _, e := range c.List() {
		got[e.Name] = e
	}
	want := map[string]Entry{
		"a":      {Name: "a", Topic: "t", Offset: 4, Owner: 1001, Owned: true},
		"legacy": {Name: "legacy", Topic: "t", Offset: 6, Owner: 1002, Owned: true},
	}
	if !maps.Equal(got, want) {
		t.Fatalf("after reopen: %+v, want %+v", got, want)
	}
	if err := c.DeleteAs(alice, "a"); err != nil {
		t.Fatal(err)
	}
}

// TestCursorLimits checks --max-cursors and --max-cursors-per-uid: a new
// cursor past either is ErrCursorLimit and writes nothing, moving an
// existing one is always allowed, and a delete makes room.
func TestCursorLimits(t *testing.T) {
	c := openTestCursors(t, filepath.Join(t.TempDir(), "cursors"))
	defer c.Close()
	c.max, c.perOwner = 5, 2
	alice := Owner{uid: 1001, known: true}
	bob := Owner{uid: 1002, known: true}
	for _, tc := range []struct {
		who  Owner
		name string
		want error
	}{
		{alice, "a1", nil},
		{alice, "a2", nil},
		{alice, "a3", errs.ErrCursorLimit}, // alice's third
		{alice, "a1", nil},                 // a move, not a new one
		{bob, "b1", nil},
		{bob, "b2", nil},
		{System, "s1", nil}, // the store is not a user: only --max-cursors
		{System, "s2", errs.ErrCursorLimit},
	} {
		if err := c.SetAs(tc.who, tc.name, "t", 9); !errors.Is(err, tc.want) {
			t.Errorf("uid %d sets %s: %v, want %v", tc.who.uid, tc.name, err, tc.want)
		}
	}
	if n := len(c.List()); n != 5 {
		t.Fatalf("%d cursors, want 5", n)
	}
	err := c.SetAs(alice, "a3", "t", 9)
	if err == nil || !strings.Contains(err.Error(), "--max-cursors") {
		t.Fatalf("the refusal does not name the flag: %v", err)
	}
	if err := c.DeleteAs(alice, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetAs(alice, "a3", "t", 9); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}
