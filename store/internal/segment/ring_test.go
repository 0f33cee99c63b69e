package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// TestRingReusesFilesInPlace: with several segments a file, the file after
// the writer's is made ahead of it (so a writer that finds no segment
// ready at a file's first slot makes no file); recycled files are let go
// of by the preparer and kept open, and the files made next are those
// same inodes under new names; a reopen finds the one left free, and the
// log reads back what it retains.
func TestRingReusesFilesInPlace(t *testing.T) {
	const slots = 4
	dir := t.TempDir()
	m, _, err := OpenMeta(filepath.Join(dir, "meta"), testSegSize, slots, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(filepath.Join(dir, "log"), m, 4, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeAll := func() { once.Do(func() { l.Close(); m.Close() }) }
	t.Cleanup(closeAll)
	fileSize := int64(slots * testSegSize)
	exists := func(base int64) bool {
		_, err := os.Stat(filepath.Join(dir, "log", segmentName(base)))
		return err == nil
	}
	testkit.Eventually(t, 10*time.Second, "the second file made ahead of the writer", func() bool { return exists(fileSize) })

	inode := func(base int64) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "log", segmentName(base)), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	const size = 256 << 10
	n := 0
	writeTo := func(end int64) {
		t.Helper()
		for l.WritePos() < end {
			if _, err := write(l, n, size); err != nil {
				t.Fatal(err)
			}
			l.Commit()
			n++
		}
	}
	writeTo(2*fileSize + 1) // into the third file
	first, second := inode(0), inode(fileSize)
	if got, err := l.Recycle(2 * fileSize); got != 2*fileSize || err != nil {
		t.Fatalf("recycled up to %d (%v), want %d", got, err, 2*fileSize)
	}
	testkit.Until(t, 10*time.Second, "the preparer keeping both recycled files for reuse", func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.retiring) > 0 || len(l.free) < 2 {
			return "not yet"
		}
		for _, f := range l.free {
			if f.f == nil {
				return f.path + " closed"
			}
		}
		return ""
	})
	// The fourth file was made ahead before the recycling; the fifth and
	// the sixth, made ahead as the writer enters the fourth and the fifth,
	// are the recycled ones.
	writeTo(4*fileSize + 1)
	testkit.Eventually(t, 10*time.Second, "the sixth file made ahead", func() bool { return exists(5 * fileSize) })
	reused := map[uint64]bool{inode(4 * fileSize): true, inode(5 * fileSize): true}
	if !reused[first] || !reused[second] {
		t.Fatalf("files 5 and 6 are not the recycled files 1 and 2 (inodes %v, recycled %d and %d)", reused, first, second)
	}
	if _, err := l.Recycle(3 * fileSize); err != nil { // the third file, free at Close
		t.Fatal(err)
	}
	end := l.End()
	if err := l.SyncTo(end); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	closeAll()
	if _, err := os.Stat(filepath.Join(dir, "log", segmentName(2*fileSize)+freeSuffix)); err != nil {
		t.Fatalf("the recycled third file: %v", err)
	}

	m, _, err = OpenMeta(filepath.Join(dir, "meta"), testSegSize, slots, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err = Open(filepath.Join(dir, "log"), m, 4, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	once = sync.Once{}
	if l.Oldest() != 3*fileSize || l.End() != end {
		t.Fatalf("reopened log holds [%d, %d), want [%d, %d)", l.Oldest(), l.End(), 3*fileSize, end)
	}
	l.mu.Lock()
	free := len(l.free)
	l.mu.Unlock()
	if free != 1 {
		t.Fatalf("%d free files after the reopen, want the recycled third", free)
	}
	for pos := l.Oldest(); pos < end; {
		if pos, err = l.Read(pos, func(record.Record) error { return nil }); err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
	}
}

// TestCrashBeforeRecycledFileRenamed: Recycle leaves the renaming of a
// recycled file to the preparer; a crash before it finds the file under
// its name. A reopen takes it for free when the metafile was synced after
// the recycling, and retains it (the log reading on from it, no gap) when
// the metafile still counts it; either way it holds every record after.
func TestCrashBeforeRecycledFileRenamed(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprintf("metafile-synced=%v", synced), func(t *testing.T) {
			dir := t.TempDir()
			l, closeLog := openTestLog(t, dir)
			for n := 0; l.WritePos() < 3*testSegSize+1; n++ {
				if _, err := write(l, n, 64<<10); err != nil {
					t.Fatal(err)
				}
				l.Commit()
			}
			end := l.End()
			if err := l.SyncTo(end); err != nil {
				t.Fatal(err)
			}
			if got, err := l.Recycle(2 * testSegSize); got != 2*testSegSize || err != nil {
				t.Fatalf("recycled up to %d (%v)", got, err)
			}
			if synced {
				if err := l.meta.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			closeLog()
			for _, base := range []int64{0, testSegSize} {
				p := filepath.Join(dir, "log", segmentName(base))
				if err := os.Rename(p+freeSuffix, p); err != nil {
					t.Fatalf("the recycled file was not renamed free: %v", err)
				}
			}
			l, _ = openTestLog(t, dir)
			oldest := int64(0)
			if synced {
				oldest = 2 * testSegSize
			}
			if l.Oldest() != oldest || l.End() != end {
				t.Fatalf("reopened log holds [%d, %d), want [%d, %d)", l.Oldest(), l.End(), oldest, end)
			}
			for pos := l.Oldest(); pos < end; {
				var err error
				if pos, err = l.Read(pos, func(record.Record) error { return nil }); err != nil {
					t.Fatalf("read at %d: %v", pos, err)
				}
			}
		})
	}
}
