package segment

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// readAll reads every record of l and checks that they are the n records
// of size bytes the tests wrote (write), in order.
func readAll(t *testing.T, l *Log, n, size int) {
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
		return testkit.Resident(t, s0.data) == 0 && testkit.Resident(t, s1.data) == 0 && testkit.Resident(t, cur.data[:2*PrefaultWindow]) == 0
	}
	testkit.Eventually(t, 10*time.Second, "the written pages released", gone)
	if r := testkit.Resident(t, cur.data[tail-size:tail]); r == 0 {
		t.Errorf("the writer's last record's pages are not mapped, want them kept")
	}
	if l.Flushed() != 0 {
		t.Fatalf("flushed to %d before the release, want nothing flushed", l.Flushed())
	}

	// Every record reads back from the page cache.
	readAll(t, l, n, size)
	if testkit.Resident(t, s0.data) == 0 {
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
		if dirty, ok := testkit.DirtyPages(t, s.file.f, s.off, segSize); ok && dirty != 0 {
			t.Errorf("segment %d: %d pages still dirty after the flush", s.base/segSize, dirty)
		}
	}
	closeLog()
	l, _ = open()
	readAll(t, l, n, size)
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
	if testkit.Resident(t, first) == 0 {
		t.Fatal("the pages recovery read are not mapped")
	}
	l.releaseWritten() // what the preparer does each round
	if r := testkit.Resident(t, first); r == 0 {
		t.Fatal("the preparer released the recovered pages before the replay was done")
	}
	l.ForgetChecked()
	testkit.Eventually(t, 10*time.Second, "the recovered pages released after the replay", func() bool {
		l.kickPrepare()
		return testkit.Resident(t, first) == 0
	})
}

// TestRestReleasesTheWritersPages: at rest (Rest) the writer's segment
// leaves the resident set, its written pages and the window faulted in
// ahead of the writer, and so does the first window of the segment made
// ahead; the records read back whole, a Rest after a read drops the pages
// the read mapped, the writer's next commit has the preparer fault a
// window ahead of it in again, a flush writes back the pages released
// dirty, and the records read back after a reopen.
func TestRestReleasesTheWritersPages(t *testing.T) {
	const size, segSize = 64 << 10, 4 * PrefaultWindow
	dir := t.TempDir()
	l, closeLog := openReleaseLog(t, dir, segSize)
	n := 0
	writeTo := func(to int64) {
		t.Helper()
		for ; l.WritePos() < to; n++ {
			if _, err := write(l, n, size); err != nil {
				t.Fatal(err)
			}
			l.Commit()
		}
	}
	writeTo(3 * PrefaultWindow / 2) // a window and a half into segment 0, none flushed
	testkit.Eventually(t, 10*time.Second, "the next segment made", l.Prepared)
	l.mu.Lock()
	cur, next := l.cur, l.ready[0]
	l.mu.Unlock()
	page := fsys.PageSize
	w := int(l.End() - cur.base)
	ahead := func() int { return testkit.Resident(t, cur.data[w:min(w+PrefaultWindow, int(segSize))]) }
	if ahead() == 0 || testkit.Resident(t, cur.data[:w]) == 0 || testkit.Resident(t, next.data) == 0 {
		t.Fatalf("before the rest: %d pages ahead of the writer, %d behind it, %d of the next segment resident, want some of each",
			ahead(), testkit.Resident(t, cur.data[:w]), testkit.Resident(t, next.data))
	}

	rested := func() bool {
		l.Rest()
		return testkit.Resident(t, cur.data) == 0 && testkit.Resident(t, next.data) == 0
	}
	testkit.Eventually(t, 10*time.Second, "the writer's pages released at rest", rested)
	readAll(t, l, n, size)
	if testkit.Resident(t, cur.data) == 0 {
		t.Fatal("reading the records mapped none of their pages")
	}
	testkit.Eventually(t, 10*time.Second, "the pages the read mapped released at the next rest", rested)

	// The writer comes back: its commit kicks the preparer, which faults
	// a window ahead of it in again.
	writeTo(l.WritePos() + 1)
	w = int(l.End() - cur.base)
	testkit.Eventually(t, 10*time.Second, "a window faulted in ahead of the writer again", func() bool {
		return ahead() >= PrefaultWindow/page
	})

	if err := l.SyncTo(l.End()); err != nil {
		t.Fatal(err)
	}
	if dirty, ok := testkit.DirtyPages(t, cur.file.f, cur.off, int64(w)&^int64(page-1)); ok && dirty != 0 {
		t.Errorf("%d written pages still dirty after the flush", dirty)
	}
	closeLog()
	l, _ = openReleaseLog(t, dir, segSize)
	readAll(t, l, n, size)
}
