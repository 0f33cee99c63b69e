package localview

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallFile is a valid view file of a few entries, cut to the bytes in
// use (the writer's files have a mostly empty arena), for fuzz seeds.
func smallFile(t testing.TB) (data []byte, recs []int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "view")
	w, err := create(path, WriterOptions{GID: -1}, 64, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetReady(true)
	w.Put("prices", "sku-1", "eu", []byte("12.50"), Stamp{HLC: 1, Origin: 7, Seq: 1})
	w.Put("prices", "sku-2", "", []byte("a longer value, more than a word"), Stamp{HLC: 2, Origin: 7, Seq: 2})
	w.Put("fx", "sku-1", "", []byte("1.08"), Stamp{HLC: 3, Origin: 8, Seq: 1})
	w.Put("prices", "gone", "", []byte("x"), Stamp{HLC: 4, Origin: 8, Seq: 2})
	w.Delete("prices", "gone", Stamp{HLC: 5, Origin: 8, Seq: 3})
	w.Heartbeat(time.Now())
	for i := 0; i <= w.mask; i++ {
		if s := le64(w.m, headerSize+8*i); s != 0 {
			recs = append(recs, int(uint32(s))*8)
		}
	}
	data = append([]byte(nil), w.m[:w.used]...)
	binary.LittleEndian.PutUint64(data[offFileSize:], uint64(w.used))
	binary.LittleEndian.PutUint64(data[offArenaSize:], uint64(w.used-w.arenaOff))
	return data, recs
}

// readAll exercises every read of a Reader on the file at path; it must
// never panic, whatever the file holds.
func readAll(path string) error {
	r, err := Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	var buf [64]byte
	for _, k := range [][2]string{{"prices", "sku-1"}, {"prices", "sku-2"}, {"fx", "sku-1"}, {"prices", "gone"}, {"", ""}} {
		r.GetInto(buf[:0], k[0], k[1])
	}
	r.GetMany([]string{"prices"}, []string{"sku-1", "sku-2", "gone", ""}, nil, nil)
	r.GetMany([]string{"prices", "fx"}, []string{"sku-2", "sku-1"}, nil, nil)
	r.Keys("prices")
	r.Scan("fx", func(string, []byte, []byte, Stamp) bool { return true })
	r.Status()
	return r.Fresh(time.Hour)
}

func TestSmallFileReads(t *testing.T) {
	data, _ := smallFile(t)
	path := filepath.Join(t.TempDir(), "view")
	os.WriteFile(path, data, 0o600)
	r := openReader(t, path)
	v, tag, st, err := r.Get("prices", "sku-1")
	if err != nil || string(v) != "12.50" || tag != "eu" || st != (Stamp{HLC: 1, Origin: 7, Seq: 1}) {
		t.Fatalf("%q %q %+v %v", v, tag, st, err)
	}
	if _, _, _, err := r.Get("prices", "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted: %v", err)
	}
}

// TestDamagedFiles: each damage is reported as ErrCorrupt (or the key as
// not found), never a crash or bytes from outside a record.
func TestDamagedFiles(t *testing.T) {
	good, recs := smallFile(t)
	put64 := func(off int, v uint64) func([]byte) []byte {
		return func(d []byte) []byte { binary.LittleEndian.PutUint64(d[off:], v); return d }
	}
	put32 := func(off int, v uint32) func([]byte) []byte {
		return func(d []byte) []byte { binary.LittleEndian.PutUint32(d[off:], v); return d }
	}
	slotOf := func(rec int) int {
		for i := 0; ; i++ {
			if int(uint32(le64(good, headerSize+8*i)))*8 == rec {
				return headerSize + 8*i
			}
		}
	}
	cases := []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"magic", func(d []byte) []byte { d[0] = 'X'; return d }},
		{"version 1", put32(offVersion, 1)}, // the old layouts
		{"version 2", put32(offVersion, 2)},
		{"file size", put64(offFileSize, uint64(len(good)+1))},
		{"slot count not a power of two", put64(offSlotCount, 3)},
		{"slot count huge", put64(offSlotCount, 1<<40)},
		{"arena inside the table", put64(offArenaOff, 8)},
		{"arena too long", put64(offArenaSize, 1<<40)},
		{"slot outside the arena", func(d []byte) []byte {
			for _, r := range recs {
				s := slotOf(r)
				binary.LittleEndian.PutUint64(d[s:], le64(d, s)&^0xffffffff|0x0fffffff)
			}
			return d
		}},
		{"capacity", func(d []byte) []byte {
			for _, r := range recs {
				binary.LittleEndian.PutUint32(d[r+recCap:], 1<<30)
			}
			return d
		}},
		{"lengths", func(d []byte) []byte {
			for _, r := range recs {
				binary.LittleEndian.PutUint32(d[r+recValueLen:], 1<<20)
			}
			return d
		}},
		{"truncated", func(d []byte) []byte { return d[:100] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "view")
			os.WriteFile(path, c.damage(append([]byte(nil), good...)), 0o600)
			r, err := Open(path)
			if err == nil {
				_, _, _, err = r.Get("prices", "sku-1")
				if err == nil {
					_, _, _, err = r.Get("prices", "sku-2")
				}
				if err == nil {
					_, _, _, err = r.Get("fx", "sku-1")
				}
				r.Close()
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestRandomMutations: random bytes of a valid file changed, thousands of
// times; every read returns (anything) without crashing.
func TestRandomMutations(t *testing.T) {
	defer func(d time.Duration) { busyTimeout = d }(busyTimeout)
	busyTimeout = time.Millisecond
	good, _ := smallFile(t)
	rng := rand.New(rand.NewPCG(1, 2))
	path := filepath.Join(t.TempDir(), "view")
	for range 2000 {
		d := append([]byte(nil), good...)
		for range 1 + rng.IntN(8) {
			if rng.IntN(2) == 0 {
				d[rng.IntN(len(d))] = byte(rng.Uint32())
			} else {
				d[rng.IntN(min(len(d), headerSize+512))] = byte(rng.Uint32())
			}
		}
		os.WriteFile(path, d, 0o600)
		readAll(path)
	}
}

// TestFileTruncatedUnderTheMapping: the pages past the new end fault; the
// reader (Get, GetMany) reports ErrCorrupt instead of dying of SIGBUS.
func TestFileTruncatedUnderTheMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	w := newWriter(t, path)
	w.SetReady(true)
	w.Put("t", "k", "", []byte("v"), Stamp{})
	r := openReader(t, path)
	if err := os.Truncate(path, headerSize); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := r.Get("t", "k"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get from a truncated file: %v", err)
	}
	if _, _, err := r.GetMany([]string{"t"}, []string{"k"}, nil, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetMany from a truncated file: %v", err)
	}
}

// TestNotAFile: a FIFO or a directory at the path is refused at once
// (a FIFO's open does not wait for a writer).
func TestNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		if _, err := Open(p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Open(%s): %v, want ErrCorrupt", p, err)
		}
	}
}

func FuzzReader(f *testing.F) {
	defer func(d time.Duration) { busyTimeout = d }(busyTimeout)
	busyTimeout = time.Millisecond
	good, _ := smallFile(f)
	f.Add(good)
	f.Add(good[:headerSize])
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "view")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		readAll(path)
	})
}
