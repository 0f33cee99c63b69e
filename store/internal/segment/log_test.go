package segment

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// testSegSize is two prefault windows, so that the writer itself
// allocates the second window of a segment it crossed into.
const testSegSize = 2 * PrefaultWindow

// openTestLog opens the log in dir; it is closed at the test's end unless
// the test closed it (close) before.
func openTestLog(t *testing.T, dir string) (l *Log, close func()) {
	t.Helper()
	m, _, err := OpenMeta(filepath.Join(dir, "meta"), testSegSize, 1, 0, nil)
	if err != nil {
		t.Fatalf("open meta: %v", err)
	}
	l, err = Open(filepath.Join(dir, "log"), m, 2, zap.NewNop())
	if err != nil {
		m.Close()
		t.Fatalf("open log: %v", err)
	}
	var once sync.Once
	close = func() {
		once.Do(func() {
			l.Close()
			m.Close()
		})
	}
	t.Cleanup(close)
	return l, close
}

func testMessage(i, size int) record.Message {
	return record.Message{Topic: "t", Key: fmt.Sprint(i), Value: bytes.Repeat([]byte{byte(i + 1)}, size)}
}

// write reserves and encodes message i (seq i+1) and returns its position.
func write(l *Log, i, size int) (int64, error) {
	m := testMessage(i, size)
	buf, pos, err := l.Reserve(m.EncodedSize())
	if err != nil {
		return 0, err
	}
	record.Encode(buf, &m, record.Stamp{Origin: 1, Seq: uint64(i + 1), HLC: uint64(i + 1)})
	return pos, nil
}

// TestRollbackAcrossSegmentAfterDiskFull: a write (a batch) crosses from
// one segment into the next, then the disk fills under it, and the
// segment it crossed from is unmapped meanwhile if nothing pins it (the
// preparer's or a reader's eviction; forced here). The rollback zeroes
// what the write reserved in both segments, takes the writer back, never
// panics, and the log reads back exactly the committed records, a record
// written after the rollback at the rolled-back position, and nothing of
// the failed write, before and after a reopen.
func TestRollbackAcrossSegmentAfterDiskFull(t *testing.T) {
	const size = 1 << 20
	dir := t.TempDir()
	l, closeLog := openTestLog(t, dir)
	var committed []int
	n := 0
	for {
		m := testMessage(n, size)
		if l.WritePos()+l.EntrySize(m.EncodedSize()) > testSegSize {
			break
		}
		if _, err := write(l, n, size); err != nil {
			t.Fatalf("record %d: %v", n, err)
		}
		l.Commit()
		committed = append(committed, n)
		n++
	}
	start := l.WritePos()

	// The failed write: one record into the next segment's first window
	// (the segment change), then records until its second window's
	// allocation fails.
	if pos, err := write(l, n, size); err != nil || pos/testSegSize != 1 {
		t.Fatalf("the crossing record at %d: %v, want it in segment 1", pos, err)
	}
	full := func(op string) error {
		if op == "allocate" {
			return syscall.ENOSPC
		}
		return nil
	}
	fsys.FaultHook.Store(&full)
	defer fsys.FaultHook.Store(nil)
	var err error
	for i := n + 1; err == nil && i < n+16; i++ {
		_, err = write(l, i, size)
	}
	if !errors.Is(err, errs.ErrDiskFull) {
		t.Fatalf("writing past the next segment's first window with no space: %v, want ErrDiskFull", err)
	}
	l.mu.Lock()
	maxMapped := l.maxMapped
	l.maxMapped = 0 // evict every segment nothing pins
	l.evictLocked()
	l.maxMapped = maxMapped
	first, second := l.segs[0], l.segs[1]
	if first.data == nil {
		t.Errorf("the segment a write crossed from was unmapped before the write committed or rolled back")
	}
	l.mu.Unlock()

	if err := l.Rollback(start); err != nil {
		t.Fatalf("rollback to %d: %v", start, err)
	}
	fsys.FaultHook.Store(nil)
	if l.WritePos() != start || l.cur != first {
		t.Fatalf("after the rollback the writer is at %d in segment %d, want %d in segment 0", l.WritePos(), l.cur.base/testSegSize, start)
	}
	l.mu.Lock()
	if first.pins != 1 || second.pins != 0 || len(l.crossed) != 0 {
		t.Errorf("pins after the rollback: %d and %d, %d crossed; want 1 (the writer) and 0, none", first.pins, second.pins, len(l.crossed))
	}
	// Under the lock: nothing pins the next segment now, and the
	// preparer may unmap it meanwhile.
	if second.data != nil && !fsys.IsZero(second.data) {
		t.Errorf("the next segment still holds bytes of the rolled-back write")
	}
	l.mu.Unlock()

	// The next write goes where the failed one began.
	if pos, err := write(l, n, 100); err != nil || pos != start {
		t.Fatalf("the write after the rollback at %d: %v, want %d", pos, err, start)
	}
	l.Commit()
	committed = append(committed, n)
	check := func(l *Log) {
		t.Helper()
		var got []record.Record
		for pos := l.Oldest(); pos < l.End(); {
			next, err := l.Read(pos, func(r record.Record) error {
				got = append(got, r.Clone())
				return nil
			})
			if err != nil {
				t.Fatalf("read at %d: %v", pos, err)
			}
			pos = next
		}
		if len(got) != len(committed) {
			t.Fatalf("the log holds %d records, %d committed", len(got), len(committed))
		}
		for i, r := range got {
			want := testMessage(committed[i], len(r.Value()))
			if r.Seq() != uint64(committed[i]+1) || string(r.Key()) != want.Key || !bytes.Equal(r.Value(), want.Value) {
				t.Fatalf("record %d is seq %d key %q, want seq %d key %q", i, r.Seq(), r.Key(), committed[i]+1, want.Key)
			}
		}
	}
	check(l)
	if err := l.SyncTo(l.End()); err != nil {
		t.Fatalf("sync: %v", err)
	}
	closeLog()
	l, _ = openTestLog(t, dir)
	check(l)
}
