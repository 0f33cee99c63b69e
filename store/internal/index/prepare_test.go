package index

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
)

// TestTopicsPrepare: a prepared index is the one the first Append uses,
// readers see the topic only once it has an entry, prepares racing with
// the writer make each index once, and Close closes what was prepared and
// never appended to.
func TestTopicsPrepare(t *testing.T) {
	dir := t.TempDir()
	ti := openTestTopics(t, dir, 1024)
	if err := ti.Prepare("a"); err != nil {
		t.Fatal(err)
	}
	if ti.Get("a") != nil {
		t.Fatal("a prepared topic is visible before its first entry")
	}
	prepared := ti.prepared["a"]
	if _, err := ti.Append([]byte("a"), Entry{Pos: 0, Size: 64}); err != nil {
		t.Fatal(err)
	}
	if got := ti.Get("a"); got == nil || got != prepared || got.Len() != 1 {
		t.Fatalf("Get(a) = %v, want the prepared index with one entry", got)
	}
	if err := ti.Prepare("a"); err != nil || len(ti.prepared) != 0 {
		t.Fatalf("Prepare of a known topic: %v, %d prepared", err, len(ti.prepared))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if err := ti.Prepare(fmt.Sprintf("t%d", (i+g)%50)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range 50 {
		if _, err := ti.Append(fmt.Appendf(nil, "t%d", i), Entry{Pos: int64(64 * (i + 1)), Size: 64}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := range 50 {
		if got := ti.Get(fmt.Sprintf("t%d", i)); got == nil || got.Len() != 1 {
			t.Fatalf("t%d: %v", i, got)
		}
	}
	if err := ti.Prepare("never"); err != nil {
		t.Fatal(err)
	}
	if err := ti.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ti.Prepare("late"); err == nil {
		t.Fatal("Prepare after Close succeeded")
	}
	ti = openTestTopics(t, dir, 1024)
	defer ti.Close()
	if got := ti.Get("a"); got == nil || got.Len() != 1 {
		t.Fatalf("after reopening, Get(a) = %v", got)
	}
}

// openPreparedArray opens an array of 16-byte entries whose chunks of
// first, 2*first, ... up to chunk entries are made ahead by p.
func openPreparedArray(t testing.TB, dir string, first, chunk uint64, p *preparer) *array {
	t.Helper()
	a, err := openArray(dir, 0, arrayConfig{entrySize: 16, chunkEntries: chunk, firstChunkEntries: first, maxMapped: 2, prep: p}, nil)
	if err != nil {
		t.Fatalf("openArray: %v", err)
	}
	return a
}

// preparedAhead is the chunks the preparer made ahead, once there are
// aheadChunks of them.
func preparedAhead(t *testing.T, a *array) []*arrayChunk {
	t.Helper()
	var next []*arrayChunk
	testkit.Eventually(t, 10*time.Second, "the next index chunks made ahead", func() bool {
		a.prepMu.Lock()
		defer a.prepMu.Unlock()
		next = slices.Clone(a.next)
		return len(next) == aheadChunks
	})
	return next
}

// bases is the first entries of chunks.
func bases(chunks []*arrayChunk) []uint64 {
	var b []uint64
	for _, c := range chunks {
		b = append(b, c.base)
	}
	return b
}

// TestArrayPreparesNextChunk: once the first chunk is half full, the
// next two are made ahead (their files on disk, all zeros, under their
// final names), and the writer crossing into one uses it and asks for
// the one after. A close removes the chunks made ahead and never
// written, and the array reopens with its entries.
func TestArrayPreparesNextChunk(t *testing.T) {
	p := newPreparer(prepLater)
	defer p.stop()
	dir := t.TempDir()
	a := openPreparedArray(t, dir, 4, 16, p)
	appendEntries(t, a, 0, 1)
	a.prepMu.Lock()
	if a.next != nil {
		t.Error("a chunk made ahead before the first one is half full")
	}
	a.prepMu.Unlock()
	appendEntries(t, a, 1, 2)
	next := preparedAhead(t, a)
	if got := bases(next); !slices.Equal(got, []uint64{4, 12}) || next[0].entries != 8 || next[1].entries != 16 {
		t.Fatalf("made ahead: chunks %v, want 4 (8 entries) and 12 (16)", got)
	}
	if files := chunkFiles(t, dir); !slices.Equal(files, []uint64{0, 4, 12}) {
		t.Fatalf("chunk files %v, want [0 4 12]", files)
	}
	appendEntries(t, a, 2, 6)
	if got := a.chunks[len(a.chunks)-1]; got != next[0] {
		t.Fatal("the writer made the chunk the preparer had made")
	}
	// The writer's second entry in chunk 4 asks for chunk 28.
	if got := bases(preparedAhead(t, a)); !slices.Equal(got, []uint64{12, 28}) {
		t.Fatalf("made ahead: chunks %v, want [12 28]", got)
	}
	appendEntries(t, a, 6, 9)
	checkArray(t, a, 0, 9)
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	if files := chunkFiles(t, dir); !slices.Equal(files, []uint64{0, 4}) {
		t.Fatalf("chunk files after close %v, want [0 4]", files)
	}
	a = openPreparedArray(t, dir, 4, 16, p)
	defer a.close()
	if a.len() != 9 {
		t.Fatalf("reopened with %d entries, want 9", a.len())
	}
	checkArray(t, a, 0, 9)
	appendEntries(t, a, 9, 40)
	checkArray(t, a, 0, 40)
}

// TestArrayOpenDropsUnusedChunks: after a crash, an empty chunk after a
// chunk that is not full was made ahead and never written: open removes
// it (and any empty one after it) and finds the length in the chunk
// before. An empty chunk after a full one is the writer's next and stays.
func TestArrayOpenDropsUnusedChunks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunks  [][2]uint64 // base, entries written (chunk sizes 4, 8, 16)
		wantLen uint64
		want    []uint64 // chunk files after open
	}{
		{"made ahead", [][2]uint64{{0, 4}, {4, 3}, {12, 0}}, 7, []uint64{0, 4}},
		{"made ahead of an empty first chunk", [][2]uint64{{0, 0}, {4, 0}}, 0, []uint64{0}},
		{"two made ahead", [][2]uint64{{0, 2}, {4, 0}, {12, 0}}, 2, []uint64{0}},
		{"next after a full chunk", [][2]uint64{{0, 4}, {4, 8}, {12, 0}}, 12, []uint64{0, 4, 12}},
		{"written", [][2]uint64{{0, 4}, {4, 5}}, 9, []uint64{0, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			size := uint64(4)
			for _, c := range tc.chunks {
				b := make([]byte, 16*size)
				for i := range c[1] {
					copy(b[16*i:], arrayEntry(c[0]+i))
				}
				if err := os.WriteFile(filepath.Join(dir, fsys.NumberName(c[0])), b, 0o640); err != nil {
					t.Fatal(err)
				}
				size *= 2
			}
			a := openPreparedArray(t, dir, 4, 16, nil)
			defer a.close()
			if a.len() != tc.wantLen {
				t.Fatalf("length %d, want %d", a.len(), tc.wantLen)
			}
			if files := chunkFiles(t, dir); !slices.Equal(files, tc.want) {
				t.Fatalf("chunk files %v, want %v", files, tc.want)
			}
			checkArray(t, a, 0, tc.wantLen)
			appendEntries(t, a, tc.wantLen, 40)
			checkArray(t, a, 0, 40)
		})
	}
}

// TestArrayTruncateDropsPreparedChunk: a truncation removes the chunk made
// ahead, so that the files stay contiguous whatever the truncation
// removes after it, and the array goes on (and reopens) from the cut.
func TestArrayTruncateDropsPreparedChunk(t *testing.T) {
	for _, cut := range []uint64{2, 4, 6} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			p := newPreparer(prepLater)
			defer p.stop()
			dir := t.TempDir()
			a := openPreparedArray(t, dir, 4, 16, p)
			appendEntries(t, a, 0, 9) // chunks 0 and 4, and 12 and 28 made ahead
			preparedAhead(t, a)
			if err := a.truncate(cut); err != nil {
				t.Fatal(err)
			}
			// A crash now: the files as they are, opened elsewhere.
			crashed := t.TempDir()
			for _, f := range chunkFiles(t, dir) {
				b, err := os.ReadFile(filepath.Join(dir, fsys.NumberName(f)))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(crashed, fsys.NumberName(f)), b, 0o640); err != nil {
					t.Fatal(err)
				}
			}
			reopened := openPreparedArray(t, crashed, 4, 16, nil)
			if reopened.len() != cut {
				t.Errorf("reopened with %d entries, want %d", reopened.len(), cut)
			}
			checkArray(t, reopened, 0, cut)
			reopened.close()
			appendEntries(t, a, cut, 30)
			checkArray(t, a, 0, 30)
			if err := a.close(); err != nil {
				t.Fatal(err)
			}
			a = openPreparedArray(t, dir, 4, 16, nil)
			defer a.close()
			checkArray(t, a, 0, 30)
		})
	}
}

// TestArrayPrepareRacesWriter: a writer crossing many chunks while the
// preparer makes them ahead, readers reading behind it and syncs running,
// with the race detector on: every entry reads back, during and after,
// and each chunk is made once.
func TestArrayPrepareRacesWriter(t *testing.T) {
	p := newPreparer(prepLater)
	defer p.stop()
	dir := t.TempDir()
	a := openPreparedArray(t, dir, 4, 64, p)
	const n = 3000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			buf := make([]byte, 16)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l := a.len(); l > 0 {
					i := rand.Uint64N(l)
					if err := a.read(i, buf); err != nil || string(buf) != string(arrayEntry(i)) {
						t.Errorf("read %d: %x, %v", i, buf, err)
						return
					}
				}
				if err := a.sync(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	appendEntries(t, a, 0, n)
	close(stop)
	wg.Wait()
	checkArray(t, a, 0, n)
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	a = openPreparedArray(t, dir, 4, 64, nil)
	defer a.close()
	checkArray(t, a, 0, n)
	if a.len() != n {
		t.Fatalf("reopened with %d entries, want %d", a.len(), n)
	}
}

// TestArraySyncSyncsPreparedChunkDir: the preparer leaves the directory
// of the chunks it makes to sync; while the directory cannot be synced, a
// sync of the array fails rather than count entries of a chunk durable
// before the chunk's file is, and once the directory syncs again it
// succeeds.
func TestArraySyncSyncsPreparedChunkDir(t *testing.T) {
	fail := func(op string) error {
		if op == "syncdir" {
			return errors.New("injected EIO")
		}
		return nil
	}
	p := newPreparer(prepLater)
	defer p.stop()
	a := openPreparedArray(t, t.TempDir(), 4, 16, p)
	appendEntries(t, a, 0, 1) // the first chunk, made here
	fsys.FaultHook.Store(&fail)
	defer fsys.FaultHook.Store(nil)
	appendEntries(t, a, 1, 4)
	preparedAhead(t, a)
	appendEntries(t, a, 4, 6) // into the chunk made ahead
	preparedAhead(t, a)       // and the next two made: the preparer idle, no chunk made under the syncs below
	if err := a.sync(); !errors.Is(err, errs.ErrIO) {
		t.Fatalf("sync while the chunk's directory is not synced: %v, want ErrIO", err)
	}
	fsys.FaultHook.Store(nil)
	if err := a.sync(); err != nil {
		t.Fatal(err)
	}
	if a.dirDirty.Load() {
		t.Fatal("the directory is still to be synced after a sync")
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
}

// TestArrayReusesDroppedChunks: the files of dropped chunks are renamed
// .free (the last maxFreeChunks, the others deleted) by the preparer, once
// asked to, and
// become the next chunks made, the same inodes, reading as zeros: a crash
// once they are renamed or after the reuse reopens with the entries
// written and nothing else (and reuses the .free files it finds), and
// close leaves no .free file.
func TestArrayReusesDroppedChunks(t *testing.T) {
	p := newPreparer(prepLater)
	defer p.stop()
	dir := t.TempDir()
	a := openPreparedArray(t, dir, 4, 4, p)
	// 26 entries: past the ask in chunk 24 (its second entry), so that
	// the chunks made ahead are 28 and 32 however soon the preparer ran
	// (at 25, a preparer quicker than the writer had made 28 only).
	appendEntries(t, a, 0, 26)
	if got := bases(preparedAhead(t, a)); !slices.Equal(got, []uint64{28, 32}) {
		t.Fatalf("made ahead: chunks %v, want [28 32]", got)
	}
	kept := []uint64{inode(t, dir, 8), inode(t, dir, 12)}
	if err := a.dropChunksBefore(16, 0); err != nil {
		t.Fatal(err)
	}
	a.askReap(0)
	testkit.Eventually(t, 10*time.Second, "the preparer seeing to the dropped chunks' files", func() bool {
		a.prepMu.Lock()
		defer a.prepMu.Unlock()
		return len(a.dropped) == 0 && !a.reaping
	})
	if files := chunkFiles(t, dir); !slices.Equal(files, []uint64{16, 20, 24, 28, 32}) {
		t.Fatalf("chunk files after the drop %v", files)
	}
	if free := freeFiles(t, dir); len(free) != maxFreeChunks {
		t.Fatalf("files kept for reuse %v, want %d", free, maxFreeChunks)
	}
	crashCopy(t, dir, 16, 26)
	appendEntries(t, a, 26, 34) // into 28 and 32, past the asks at 30 and 34: 36 and 40 made
	next := preparedAhead(t, a)
	if got := bases(next); !slices.Equal(got, []uint64{36, 40}) {
		t.Fatalf("made ahead: chunks %v, want [36 40]", got)
	}
	for _, base := range []uint64{36, 40} {
		if ino := inode(t, dir, base); !slices.Contains(kept, ino) {
			t.Errorf("chunk %d is a new file (inode %d), not a dropped one's %v", base, ino, kept)
		}
	}
	if free := freeFiles(t, dir); len(free) != 0 {
		t.Fatalf("files kept for reuse after reusing them: %v", free)
	}
	crashCopy(t, dir, 16, 34)
	appendEntries(t, a, 34, 50)
	checkArray(t, a, 16, 50)
	if err := a.dropChunksBefore(40, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	if free := freeFiles(t, dir); len(free) != 0 {
		t.Fatalf("files kept for reuse after close: %v", free)
	}
	a = openPreparedArray(t, dir, 4, 4, nil)
	defer a.close()
	if a.first() != 40 || a.len() != 50 {
		t.Fatalf("reopened with entries [%d, %d), want [40, 50)", a.first(), a.len())
	}
	checkArray(t, a, 40, 50)
}

// TestArrayDropLeavesFilesToThePreparer: dropping chunks renames, deletes
// and syncs nothing on the writer's path when the array has a preparer:
// the files stay under their names until the preparer is asked to see to
// the chunks dropped up to their position (the store asks once the log's
// oldest position is in the metafile); a crash before that reopens the
// array as before the drop, every entry readable and the chunks
// contiguous.
func TestArrayDropLeavesFilesToThePreparer(t *testing.T) {
	p := newPreparer(prepLater)
	defer p.stop()
	dir := t.TempDir()
	a := openPreparedArray(t, dir, 4, 4, p)
	defer a.close()
	appendEntries(t, a, 0, 26) // past the ask in chunk 24: two made ahead (see TestArrayReusesDroppedChunks)
	preparedAhead(t, a)
	before := chunkFiles(t, dir)
	if err := a.dropChunksBefore(16, 100); err != nil {
		t.Fatal(err)
	}
	a.askReap(99) // not yet up to the drop's position: nothing asked of the preparer
	if a.first() != 16 {
		t.Fatalf("first entry %d after the drop, want 16", a.first())
	}
	if files := chunkFiles(t, dir); !slices.Equal(files, before) || len(freeFiles(t, dir)) != 0 {
		t.Fatalf("files after the drop %v (free %v), want them as before %v", files, freeFiles(t, dir), before)
	}
	crashCopy(t, dir, 0, 26)
	a.askReap(100)
	testkit.Until(t, 10*time.Second, "the preparer seeing to the dropped chunks' files", func() string {
		if files := chunkFiles(t, dir); files[0] != 16 || len(freeFiles(t, dir)) != maxFreeChunks {
			return fmt.Sprintf("files %v, free %v", files, freeFiles(t, dir))
		}
		return ""
	})
}

// crashCopy opens a copy of the array in dir, every file as it is now (a
// crash), and checks that it holds entries [first, n) and no more, and
// that its writer goes on, in the .free files it found.
func crashCopy(t *testing.T, dir string, first, n uint64) {
	t.Helper()
	crashed := t.TempDir()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, de.Name()), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	a := openPreparedArray(t, crashed, 4, 4, nil)
	defer a.close()
	if a.first() != first || a.len() != n {
		t.Fatalf("after a crash: entries [%d, %d), want [%d, %d)", a.first(), a.len(), first, n)
	}
	checkArray(t, a, first, n)
	free := freeFiles(t, crashed)
	if !slices.Equal(a.free, free) {
		t.Fatalf("reopened keeping %v for reuse, want %v", a.free, free)
	}
	appendEntries(t, a, n, n+12)
	checkArray(t, a, first, n+12)
	if left := freeFiles(t, crashed); len(left) != 0 {
		t.Fatalf("files left for reuse after three chunks made: %v", left)
	}
}

// freeFiles lists the .free files in dir.
func freeFiles(t *testing.T, dir string) []string {
	t.Helper()
	free, err := filepath.Glob(filepath.Join(dir, "*"+freeSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return free
}

// inode is the inode number of chunk base's file in dir.
func inode(t *testing.T, dir string, base uint64) uint64 {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, fsys.NumberName(base)))
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}
