package segment

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// resident counts the pages of b mapped in this process now
// (/proc/self/pagemap's present bit): the process's resident set, not the
// page cache (mincore's), which keeps a released page.
func resident(t *testing.T, b []byte) int {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatalf("pagemap: %v", err)
	}
	defer f.Close()
	page := uintptr(fsys.PageSize)
	first := uintptr(unsafe.Pointer(unsafe.SliceData(b))) / page
	entries := make([]byte, 8*((uintptr(len(b))+page-1)/page))
	if _, err := f.ReadAt(entries, int64(first*8)); err != nil {
		t.Fatalf("pagemap: %v", err)
	}
	n := 0
	for i := 0; i < len(entries); i += 8 {
		if binary.LittleEndian.Uint64(entries[i:])&(1<<63) != 0 {
			n++
		}
	}
	return n
}

// dirtyPages reports how many pages of s's file are dirty in the page
// cache (cachestat); ok is false where that cannot be told: a tmpfs, or a
// kernel without cachestat.
func dirtyPages(t *testing.T, s *segment) (dirty uint64, ok bool) {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(s.file.f.Fd()), &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		return 0, false
	}
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(s.file.f.Fd()), &unix.CachestatRange{Off: uint64(s.off), Len: uint64(len(s.data))}, &st, 0); err != nil {
		t.Logf("cachestat: %v", err)
		return 0, false
	}
	return st.Dirty, true
}

// openReleaseLog opens the log in dir with segments of segSize and 8
// mapped (above ReleaseAbove), closed at the test's end; closeAll closes
// it before that, once.
func openReleaseLog(t *testing.T, dir string, segSize int64) (l *Log, closeAll func()) {
	t.Helper()
	m, _, err := OpenMeta(filepath.Join(dir, "meta"), segSize, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err = Open(filepath.Join(dir, "log"), m, 8, zap.NewNop())
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	var once sync.Once
	closeAll = func() { once.Do(func() { l.Close(); m.Close() }) }
	t.Cleanup(closeAll)
	return l, closeAll
}

// TestWrittenPagesLeaveTheResidentSet: a window behind the committed end,
// flushed or not, the pages of sealed segments and of the writer's
// segment leave the process's resident set (the maps stay); the records
// read back whole from the page cache, the writer's last pages stay
// mapped, a sealed segment a reader mapped again is released again, and
// a flush after the release makes every record durable (they read back
// after a reopen).
func TestWrittenPagesLeaveTheResidentSet(t *testing.T) {
	const size, segSize = 64 << 10, 4 * PrefaultWindow
	dir := t.TempDir()
	open := func() (*Log, func()) { return openReleaseLog(t, dir, segSize) }
	l, closeLog := open()

	// Two sealed segments and 3.25 windows of the third, none flushed:
	// the edge (the committed end less a window) is 2.25 windows into the
	// third, so its first two windows go too.
	n := 0
	for l.WritePos() < 2*segSize+13*PrefaultWindow/4 {
		if _, err := write(l, n, size); err != nil {
			t.Fatal(err)
		}
		l.Commit()
		n++
	}
	seg := func(i int64) *segment {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.segs[i]
	}
	s0, s1, cur := seg(0), seg(1), seg(2)
	tail := l.WritePos() - cur.base
	if l.cur != cur || tail < 3*PrefaultWindow {
		t.Fatalf("the writer is %d bytes into segment %d, want 3 windows into segment 2", tail, l.cur.base/segSize)
	}
	gone := func() bool {
		l.kickPrepare()
		return resident(t, s0.data) == 0 && resident(t, s1.data) == 0 && resident(t, cur.data[:2*PrefaultWindow]) == 0
	}
	testkit.Eventually(t, 10*time.Second, "the written pages released", gone)
	if r := resident(t, cur.data[tail-size:tail]); r == 0 {
		t.Errorf("the writer's last record's pages are not mapped, want them kept")
	}
	if l.Flushed() != 0 {
		t.Fatalf("flushed to %d before the release, want nothing flushed", l.Flushed())
	}

	// Every record reads back from the page cache.
	readAll := func(l *Log) {
		t.Helper()
		i := 0
		for pos := l.Oldest(); pos < l.End(); i++ {
			next, err := l.Read(pos, func(r record.Record) error {
				want := testMessage(i, size)
				if r.Seq() != uint64(i+1) || !bytes.Equal(r.Value(), want.Value) {
					t.Fatalf("record %d at %d: seq %d, value differs: %v", i, pos, r.Seq(), !bytes.Equal(r.Value(), want.Value))
				}
				return nil
			})
			if err != nil {
				t.Fatalf("read at %d: %v", pos, err)
			}
			pos = next
		}
		if i != n {
			t.Fatalf("read %d records, wrote %d", i, n)
		}
	}
	readAll(l)
	if resident(t, s0.data) == 0 {
		t.Fatalf("reading the first segment mapped none of its pages")
	}
	testkit.Eventually(t, 10*time.Second, "the pages a reader mapped again released", gone)

	// The pages released dirty are written back by the flush: none of the
	// sealed segments' is dirty after it (cachestat, Linux 6.5+; a tmpfs
	// keeps its pages dirty, and an older kernel cannot tell).
	if err := l.SyncTo(l.End()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*segment{s0, s1} {
		if dirty, ok := dirtyPages(t, s); ok && dirty != 0 {
			t.Errorf("segment %d: %d pages still dirty after the flush", s.base/segSize, dirty)
		}
	}
	closeLog()
	l, _ = open()
	readAll(l)
}

// TestReplayKeepsRecoveredPages: after a crash the pages recovery has just
// read stay mapped for the store's replay, which reads them again at once:
// the preparer releases none of them until ForgetChecked, and then does.
func TestReplayKeepsRecoveredPages(t *testing.T) {
	const size, segSize = 64 << 10, 4 * PrefaultWindow
	dir := t.TempDir()
	open := func() (*Log, func()) { return openReleaseLog(t, dir, segSize) }
	l, closeLog := open()
	for n := 0; l.WritePos() < 3*PrefaultWindow; n++ {
		if _, err := write(l, n, size); err != nil {
			t.Fatal(err)
		}
		l.Commit()
	}
	closeLog() // nothing flushed: the next Open checks every record
	l, _ = open()
	if !l.replaying() {
		t.Fatal("recovery checked nothing")
	}
	l.mu.Lock()
	first := l.segs[0].data[:PrefaultWindow] // a window behind the end: released once the replay is done
	l.mu.Unlock()
	if resident(t, first) == 0 {
		t.Fatal("the pages recovery read are not mapped")
	}
	l.releaseWritten() // what the preparer does each round
	if r := resident(t, first); r == 0 {
		t.Fatal("the preparer released the recovered pages before the replay was done")
	}
	l.ForgetChecked()
	testkit.Eventually(t, 10*time.Second, "the recovered pages released after the replay", func() bool {
		l.kickPrepare()
		return resident(t, first) == 0
	})
}
