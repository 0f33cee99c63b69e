package index

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// arrayEntry is the test content of entry i: never zero, different for
// every i.
func arrayEntry(i uint64) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, i+1)
	binary.LittleEndian.PutUint64(b[8:], ^i)
	return b
}

func openTestArray(t testing.TB, dir string, start, chunk uint64, maxMapped int) *array {
	t.Helper()
	a, err := openArray(dir, start, arrayConfig{entrySize: 16, chunkEntries: chunk, maxMapped: maxMapped}, nil)
	if err != nil {
		t.Fatalf("openArray: %v", err)
	}
	return a
}

func appendEntries(t testing.TB, a *array, from, to uint64) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := a.append(arrayEntry(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// checkArray reads every entry in [from, to) and checks it.
func checkArray(t testing.TB, a *array, from, to uint64) {
	t.Helper()
	buf := make([]byte, 16)
	for i := from; i < to; i++ {
		if err := a.read(i, buf); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if want := arrayEntry(i); string(buf) != string(want) {
			t.Fatalf("entry %d = %x, want %x", i, buf, want)
		}
	}
}

// chunkFiles lists the chunk bases present in dir.
func chunkFiles(t testing.TB, dir string) []uint64 {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bases []uint64
	for _, de := range des {
		if b, ok := fsys.ParseNumberName(de.Name()); ok {
			bases = append(bases, b)
		}
	}
	return bases
}

func mappedChunks(a *array) int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	n := 0
	for _, c := range a.chunks {
		if c.data != nil {
			n++
		}
	}
	if n != a.mapped {
		panic("array.mapped out of step with the chunks")
	}
	return n
}

func TestArrayChunkName(t *testing.T) {
	for _, base := range []uint64{0, 1, 4096, 1 << 40, 1<<64 - 1} {
		name := fsys.NumberName(base)
		if len(name) != 20 {
			t.Errorf("fsys.NumberName(%d) = %q, want 20 digits", base, name)
		}
		if got, ok := fsys.ParseNumberName(name); !ok || got != base {
			t.Errorf("fsys.ParseNumberName(%q) = %d, %v", name, got, ok)
		}
	}
	for _, name := range []string{"", "0", "0000000000000000000x", "000000000000000000000", "99999999999999999999",
		"00000000000000000000.tmp", "-0000000000000000001", "+0000000000000000001"} {
		if _, ok := fsys.ParseNumberName(name); ok {
			t.Errorf("fsys.ParseNumberName(%q) accepted", name)
		}
	}
	// Names sort in entry order.
	if !(fsys.NumberName(9) < fsys.NumberName(10) && fsys.NumberName(99999) < fsys.NumberName(100000)) {
		t.Error("chunk names do not sort numerically")
	}
}

func TestArrayAcrossChunks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		chunk     uint64
		maxMapped int
		n         uint64
	}{
		{"chunk=1", 1, 2, 50},
		{"chunk=4/mapped=2", 4, 2, 401},
		{"chunk=7/mapped=3", 7, 3, 700},
		{"chunk=256/mapped=2", 256, 2, 2000},
		{"chunk=4096/mapped=2", 4096, 2, 3000}, // one chunk
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := openTestArray(t, dir, 0, tc.chunk, tc.maxMapped)
			defer a.close()
			if a.len() != 0 || a.first() != 0 {
				t.Fatalf("new array: len %d first %d", a.len(), a.first())
			}
			appendEntries(t, a, 0, tc.n)
			if a.len() != tc.n {
				t.Fatalf("len = %d, want %d", a.len(), tc.n)
			}
			wantChunks := (tc.n + tc.chunk - 1) / tc.chunk
			if got := uint64(len(chunkFiles(t, dir))); got != wantChunks {
				t.Fatalf("%d chunk files, want %d", got, wantChunks)
			}
			checkArray(t, a, 0, tc.n)
			// Random reads map and unmap chunks; never more than allowed.
			buf := make([]byte, 16)
			for range 500 {
				i := rand.Uint64N(tc.n)
				if err := a.read(i, buf); err != nil {
					t.Fatal(err)
				}
				if string(buf) != string(arrayEntry(i)) {
					t.Fatalf("entry %d wrong after remapping", i)
				}
				if m := mappedChunks(a); m > tc.maxMapped {
					t.Fatalf("%d chunks mapped, at most %d allowed", m, tc.maxMapped)
				}
			}
			if err := a.sync(); err != nil {
				t.Fatal(err)
			}
			if a.synced.Load() != tc.n {
				t.Fatalf("synced = %d after sync, want %d", a.synced.Load(), tc.n)
			}
		})
	}
}

func TestArrayReopen(t *testing.T) {
	for _, n := range []uint64{0, 1, 7, 8, 9, 64, 100} {
		dir := t.TempDir()
		a := openTestArray(t, dir, 0, 8, 2)
		appendEntries(t, a, 0, n)
		if err := a.close(); err != nil {
			t.Fatal(err)
		}
		// Reopened with another configured chunk size: the files keep
		// theirs, new chunks follow the configuration.
		a = openTestArray(t, dir, 0, 1024, 2)
		if a.len() != n || a.first() != 0 {
			t.Fatalf("n=%d: reopened with len %d first %d", n, a.len(), a.first())
		}
		for _, c := range a.chunks {
			if c.entries != 8 {
				t.Fatalf("n=%d: a chunk of %d entries after reopen, want the on-disk 8", n, c.entries)
			}
		}
		checkArray(t, a, 0, n)
		appendEntries(t, a, n, n+20)
		checkArray(t, a, 0, n+20)
		if err := a.close(); err != nil {
			t.Fatal(err)
		}
		a = openTestArray(t, dir, 0, 8, 2)
		checkArray(t, a, 0, n+20)
		a.close()
	}
}

func TestArrayStart(t *testing.T) {
	dir := t.TempDir()
	a := openTestArray(t, dir, 1000, 8, 2)
	if a.len() != 1000 || a.first() != 1000 {
		t.Fatalf("empty array at 1000: len %d first %d", a.len(), a.first())
	}
	buf := make([]byte, 16)
	if err := a.read(999, buf); !errors.Is(err, errs.ErrRecycled) {
		t.Fatalf("read below start: %v, want ErrRecycled", err)
	}
	if err := a.read(1000, buf); !errors.Is(err, errs.ErrBeyondEnd) {
		t.Fatalf("read at end: %v, want ErrBeyondEnd", err)
	}
	appendEntries(t, a, 1000, 1020)
	if got := chunkFiles(t, dir); !slices.Equal(got, []uint64{1000, 1008, 1016}) {
		t.Fatalf("chunk files %v", got)
	}
	a.close()
	// The start given to an existing array is ignored: the name decides.
	a = openTestArray(t, dir, 0, 8, 2)
	defer a.close()
	if a.first() != 1000 || a.len() != 1020 {
		t.Fatalf("reopened: first %d len %d", a.first(), a.len())
	}
	checkArray(t, a, 1000, 1020)
}

func TestArrayTruncate(t *testing.T) {
	const chunk, n = 8, 45 // chunks at 0, 8, ..., 40
	for _, tc := range []struct {
		name    string
		drop    uint64 // dropChunksBefore first
		at      uint64
		wantLen uint64
		chunks  int
	}{
		{"inside last chunk", 0, 43, 43, 6},
		{"inside an earlier chunk", 0, 19, 19, 3},
		{"at a chunk boundary", 0, 24, 24, 3},
		{"to zero", 0, 0, 0, 1},
		{"at len", 0, n, n, 6},
		{"past len", 0, n + 10, n, 6},
		{"below first", 16, 3, 16, 1},
		{"at first", 16, 16, 16, 1},
		{"after drop", 16, 30, 30, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := openTestArray(t, dir, 0, chunk, 2)
			appendEntries(t, a, 0, n)
			if err := a.dropChunksBefore(tc.drop, 0); err != nil {
				t.Fatal(err)
			}
			first := a.first()
			if err := a.truncate(tc.at); err != nil {
				t.Fatal(err)
			}
			check := func(a *array) {
				t.Helper()
				if a.len() != tc.wantLen || a.first() != first {
					t.Fatalf("len %d first %d, want %d %d", a.len(), a.first(), tc.wantLen, first)
				}
				if got := len(chunkFiles(t, dir)); got != tc.chunks {
					t.Fatalf("%d chunk files, want %d", got, tc.chunks)
				}
				checkArray(t, a, first, tc.wantLen)
				buf := make([]byte, 16)
				if err := a.read(tc.wantLen, buf); !errors.Is(err, errs.ErrBeyondEnd) {
					t.Fatalf("read at len after truncate: %v", err)
				}
			}
			check(a)
			if err := a.close(); err != nil {
				t.Fatal(err)
			}
			// The truncation is on disk: reopening finds the same length.
			a = openTestArray(t, dir, 0, chunk, 2)
			check(a)
			// Appending goes on from the cut.
			appendEntries(t, a, tc.wantLen, tc.wantLen+30)
			checkArray(t, a, first, tc.wantLen+30)
			a.close()
			a = openTestArray(t, dir, 0, chunk, 2)
			defer a.close()
			checkArray(t, a, first, tc.wantLen+30)
			if a.len() != tc.wantLen+30 {
				t.Fatalf("len %d after append and reopen, want %d", a.len(), tc.wantLen+30)
			}
		})
	}
}

func TestArrayDropChunksBefore(t *testing.T) {
	const chunk, n = 8, 45
	for _, tc := range []struct {
		drop      []uint64
		wantFirst uint64
	}{
		{[]uint64{0}, 0},
		{[]uint64{7}, 0},
		{[]uint64{8}, 8},
		{[]uint64{15}, 8},
		{[]uint64{17, 30}, 24},
		{[]uint64{40}, 40},
		{[]uint64{45}, 40}, // never the last chunk
		{[]uint64{1000}, 40},
		{[]uint64{30, 8}, 24}, // never back
	} {
		dir := t.TempDir()
		a := openTestArray(t, dir, 0, chunk, 2)
		appendEntries(t, a, 0, n)
		for _, d := range tc.drop {
			if err := a.dropChunksBefore(d, 0); err != nil {
				t.Fatal(err)
			}
		}
		check := func(a *array) {
			t.Helper()
			if a.first() != tc.wantFirst || a.len() != n {
				t.Fatalf("drop %v: first %d len %d, want %d %d", tc.drop, a.first(), a.len(), tc.wantFirst, n)
			}
			if files := chunkFiles(t, dir); files[0] != tc.wantFirst {
				t.Fatalf("drop %v: first chunk file %d", tc.drop, files[0])
			}
			buf := make([]byte, 16)
			if tc.wantFirst > 0 {
				if err := a.read(tc.wantFirst-1, buf); !errors.Is(err, errs.ErrRecycled) {
					t.Fatalf("drop %v: read below first: %v", tc.drop, err)
				}
			}
			checkArray(t, a, tc.wantFirst, n)
		}
		check(a)
		a.close()
		a = openTestArray(t, dir, 0, chunk, 2)
		check(a)
		// Append after dropping still works, then drop everything but the last.
		appendEntries(t, a, n, n+8)
		if err := a.dropChunksBefore(n+8, 0); err != nil {
			t.Fatal(err)
		}
		if a.first() != 48 {
			t.Fatalf("first %d after dropping all but the last chunk", a.first())
		}
		checkArray(t, a, 48, n+8)
		a.close()
	}
}

func TestArrayErrors(t *testing.T) {
	dir := t.TempDir()
	a := openTestArray(t, dir, 0, 4, 2)
	appendEntries(t, a, 0, 10)
	if err := a.append(make([]byte, 15)); !errors.Is(err, record.ErrInvalid) {
		t.Errorf("short entry: %v", err)
	}
	if err := a.append(make([]byte, 16)); !errors.Is(err, record.ErrInvalid) {
		t.Errorf("zero entry: %v", err)
	}
	if a.len() != 10 {
		t.Errorf("len %d after refused appends", a.len())
	}
	buf := make([]byte, 16)
	if err := a.read(10, buf); !errors.Is(err, errs.ErrBeyondEnd) {
		t.Errorf("read at len: %v", err)
	}
	if err := a.read(1<<63, buf); !errors.Is(err, errs.ErrBeyondEnd) {
		t.Errorf("read far: %v", err)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	if err := a.close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	for name, err := range map[string]error{
		"read":     a.read(0, buf),
		"append":   a.append(arrayEntry(10)),
		"truncate": a.truncate(0),
		"drop":     a.dropChunksBefore(8, 0),
		"sync":     a.sync(),
	} {
		if !errors.Is(err, errs.ErrClosed) {
			t.Errorf("%s after close: %v, want ErrClosed", name, err)
		}
	}
	if _, err := openArray(dir, 0, arrayConfig{entrySize: 0}, nil); !errors.Is(err, record.ErrInvalid) {
		t.Errorf("entry size 0: %v", err)
	}
}

func TestArrayOpenDamagedDir(t *testing.T) {
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		a := openTestArray(t, dir, 0, 4, 2)
		appendEntries(t, a, 0, 10) // chunks 0, 4, 8
		a.close()
		return dir
	}
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, dir string)
		wantErr error
		wantLen uint64
	}{
		{"gap", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, fsys.NumberName(4)))
		}, record.ErrCorrupt, 0},
		{"short chunk", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, fsys.NumberName(4)), 20)
		}, record.ErrCorrupt, 0},
		{"leftover tmp", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, fsys.NumberName(12)+fsys.TmpSuffix), []byte("x"), 0o600)
		}, nil, 10},
		{"stranger", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o600)
		}, nil, 10},
		{"zero tail chunk", func(t *testing.T, dir string) {
			// A crash right after the next chunk was made.
			os.WriteFile(filepath.Join(dir, fsys.NumberName(12)), make([]byte, 64), 0o600)
			os.Truncate(filepath.Join(dir, fsys.NumberName(8)), 0)
			os.Truncate(filepath.Join(dir, fsys.NumberName(8)), 64)
			f, _ := os.OpenFile(filepath.Join(dir, fsys.NumberName(8)), os.O_WRONLY, 0)
			for i := uint64(8); i < 12; i++ {
				f.WriteAt(arrayEntry(i), int64(i-8)*16)
			}
			f.Close()
		}, nil, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := setup(t)
			tc.damage(t, dir)
			a, err := openArray(dir, 0, arrayConfig{entrySize: 16, chunkEntries: 4, maxMapped: 2}, nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("open: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.close()
			if a.len() != tc.wantLen {
				t.Fatalf("len %d, want %d", a.len(), tc.wantLen)
			}
			checkArray(t, a, 0, tc.wantLen)
			if _, err := os.Stat(filepath.Join(dir, fsys.NumberName(12)+fsys.TmpSuffix)); !os.IsNotExist(err) {
				t.Errorf("leftover tmp file not removed: %v", err)
			}
		})
	}
}

// TestArrayConcurrentReaders runs one writer, several readers that map and
// unmap chunks all the time, and a syncer, under -race.
func TestArrayConcurrentReaders(t *testing.T) {
	t.Run("fixed chunks", func(t *testing.T) { testArrayConcurrentReaders(t, 0) })
	t.Run("growing chunks", func(t *testing.T) { testArrayConcurrentReaders(t, 2) })
}

func testArrayConcurrentReaders(t *testing.T, firstChunk uint64) {
	dir := t.TempDir()
	a, err := openArray(dir, 0, arrayConfig{entrySize: 16, chunkEntries: 16, firstChunkEntries: firstChunk, maxMapped: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	const n = 1000
	var wg sync.WaitGroup
	var done atomic.Bool
	var reads atomic.Int64
	errc := make(chan error, 8)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16)
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for !done.Load() {
				l := a.len()
				if l == 0 {
					continue
				}
				i := rng.Uint64N(l)
				if r == 0 {
					i = l - 1 // the newest entry, in the chunk being written
				}
				if err := a.read(i, buf); err != nil {
					errc <- err
					return
				}
				if string(buf) != string(arrayEntry(i)) {
					errc <- errors.New("reader saw a wrong entry")
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if err := a.sync(); err != nil {
				errc <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	appendEntries(t, a, 0, n)
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if m := mappedChunks(a); m > 2 {
		t.Fatalf("%d chunks mapped", m)
	}
	checkArray(t, a, 0, n)
	t.Logf("%d concurrent reads", reads.Load())
}

// TestArrayDiskFull makes the file system refuse a new chunk: the append
// fails with ErrDiskFull, nothing written before is lost, and appending
// works again once space is back.
func TestArrayDiskFull(t *testing.T) {
	if !testkit.InFSizeChild(t) {
		return
	}
	dir := t.TempDir()
	a := openTestArray(t, dir, 0, 1024, 2) // 16 KiB chunks
	defer a.close()
	appendEntries(t, a, 0, 1024)
	testkit.SetFSizeLimit(t, 8<<10)
	err := a.append(arrayEntry(1024))
	testkit.SetFSizeLimit(t, 0)
	if !errors.Is(err, errs.ErrDiskFull) {
		t.Fatalf("append needing a chunk over the size limit: %v, want ErrDiskFull", err)
	}
	if a.len() != 1024 {
		t.Fatalf("len %d after a failed append", a.len())
	}
	checkArray(t, a, 0, 1024)
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Fatalf("%d files after a failed chunk creation, want 1", len(des))
	}
	appendEntries(t, a, 1024, 1100)
	checkArray(t, a, 0, 1100)
}

// TestArrayChunksGrow: an array's first chunk holds firstChunkEntries and
// each next one twice as many, up to chunkEntries; reads, reopening,
// truncating into a small chunk and dropping chunks all follow the sizes
// on disk.
func TestArrayChunksGrow(t *testing.T) {
	open := func(dir string) *array {
		t.Helper()
		a, err := openArray(dir, 0, arrayConfig{entrySize: 16, chunkEntries: 64, firstChunkEntries: 4, maxMapped: 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	sizes := func(dir string) []int64 {
		t.Helper()
		var out []int64
		for _, b := range chunkFiles(t, dir) {
			fi, err := os.Stat(filepath.Join(dir, fsys.NumberName(b)))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fi.Size()/16)
		}
		return out
	}
	dir := t.TempDir()
	a := open(dir)
	appendEntries(t, a, 0, 1)
	if got := sizes(dir); !slices.Equal(got, []int64{4}) {
		t.Fatalf("after one entry: chunks of %v entries, want [4]", got)
	}
	appendEntries(t, a, 1, 300)
	wantBases := []uint64{0, 4, 12, 28, 60, 124, 188, 252}
	if got := chunkFiles(t, dir); !slices.Equal(got, wantBases) {
		t.Fatalf("chunk files %v, want %v", got, wantBases)
	}
	if got := sizes(dir); !slices.Equal(got, []int64{4, 8, 16, 32, 64, 64, 64, 64}) {
		t.Fatalf("chunks of %v entries", got)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 16)
	for range 2000 { // random reads map and unmap chunks of every size
		i := rng.Uint64N(300)
		if err := a.read(i, buf); err != nil || string(buf) != string(arrayEntry(i)) {
			t.Fatalf("read %d: %x %v", i, buf, err)
		}
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}

	a = open(dir)
	if a.len() != 300 {
		t.Fatalf("reopened with len %d", a.len())
	}
	checkArray(t, a, 0, 300)
	if err := a.truncate(10); err != nil { // inside the second chunk
		t.Fatal(err)
	}
	if got := chunkFiles(t, dir); !slices.Equal(got, []uint64{0, 4}) {
		t.Fatalf("after truncate(10): chunk files %v", got)
	}
	appendEntries(t, a, 10, 40) // the next chunks grow again from the last
	if got := sizes(dir); !slices.Equal(got, []int64{4, 8, 16, 32}) {
		t.Fatalf("after growing again: chunks of %v entries", got)
	}
	if err := a.dropChunksBefore(20, 0); err != nil {
		t.Fatal(err)
	}
	if a.first() != 12 {
		t.Fatalf("first %d after dropping the chunks below 20, want 12", a.first())
	}
	checkArray(t, a, 12, 40)
	a.close()
	a = open(dir)
	defer a.close()
	if a.first() != 12 || a.len() != 40 {
		t.Fatalf("reopened: first %d len %d", a.first(), a.len())
	}
	checkArray(t, a, 12, 40)
}
