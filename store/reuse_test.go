package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/internal/segment"
	"github.com/cachecast/cachecast/store/record"
)

// reuseOptions recycle after four 64 KiB segments, so that a few hundred
// records reuse segment files.
func reuseOptions(t testing.TB, dir string) Options {
	o := noFlushOptions(t, dir)
	o.RetentionBytes = 4 * o.SegmentSize
	return o
}

// publishRetrying publishes m, writing the snapshot that retention waits
// for when the log is full.
func publishRetrying(t testing.TB, s *Store, m *record.Message) Result {
	t.Helper()
	for range 100 {
		res, err := s.Publish(m)
		if err == nil {
			return res
		}
		if !errors.Is(err, ErrFull) {
			t.Fatalf("publish: %v", err)
		}
		if err := s.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the log stayed full")
	return Result{}
}

// checkRetained reads the log from its oldest record: seqs follow each
// other up to last, each record the value it was written with.
func checkRetained(t *testing.T, s *Store, last uint64, valueOf func(seq uint64) []byte) {
	t.Helper()
	var prev uint64
	for pos := s.seglog.Oldest(); pos < s.seglog.End(); {
		next, err := s.seglog.Read(pos, func(r record.Record) error {
			if prev != 0 && r.Seq() != prev+1 {
				return fmt.Errorf("seq %d after %d", r.Seq(), prev)
			}
			if !bytes.Equal(r.Value(), valueOf(r.Seq())) {
				return fmt.Errorf("seq %d is not what was written", r.Seq())
			}
			prev = r.Seq()
			return nil
		})
		if err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
		pos = next
	}
	if prev != last {
		t.Fatalf("the log ends at seq %d, want %d", prev, last)
	}
}

// TestReuseWithoutZeroing: recycled segment files are reused as they are
// (the same inode under the new segment's name, not zeroed), and a crash
// after reuse recovers exactly what was written since: recovery tells the
// stale records of a file's earlier use by their mark, in the current
// segment and behind every end; with one segment a file and with two.
func TestReuseWithoutZeroing(t *testing.T) {
	for _, slots := range []int64{1, 2} {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) { testReuseWithoutZeroing(t, slots) })
	}
}

func testReuseWithoutZeroing(t *testing.T, slots int64) {
	dir := t.TempDir()
	o := reuseOptions(t, dir)
	o.segmentsPerFile = slots
	s := openTest(t, o)
	const size = 1500
	val := func(seq uint64) []byte { return value(int(seq), size) }
	var last uint64
	write := func(n int) {
		for range n {
			m := record.Message{Topic: "t", Key: fmt.Sprint(last % 50), Value: val(s.nextSeq)}
			last = publishRetrying(t, s, &m).Seq
		}
	}
	// A reused file keeps its inode under its new name.
	names := map[uint64]map[string]bool{}
	look := func() {
		segs, _ := filepath.Glob(filepath.Join(dir, logDirName, "0*"))
		for _, p := range segs {
			var st syscall.Stat_t
			if syscall.Stat(p, &st) == nil && !strings.HasSuffix(p, ".free") {
				if names[st.Ino] == nil {
					names[st.Ino] = map[string]bool{}
				}
				names[st.Ino][filepath.Base(p)] = true
			}
		}
	}
	for range 30 {
		write(20) // 600 records: about 14 segments through a bound of 4
		look()
	}
	reused := 0
	for _, n := range names {
		if len(n) > 1 {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("no segment file was reused")
	}
	t.Logf("%d files reused for later segments", reused)
	s.crash()

	for round := range 3 {
		s = openTest(t, o)
		checkRetained(t, s, last, val)
		write(150 + 37*round) // more reuse, and ends that fall elsewhere
		checkRetained(t, s, last, val)
		s.crash()
	}
	s = openTest(t, o)
	checkRetained(t, s, last, val)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLegacyLogWithoutMarks: a log written before records were framed
// with their segment's mark (records back to back, the metafile without a
// marked-from position) recovers whole, and what is written after it is
// framed and recovers too.
func TestLegacyLogWithoutMarks(t *testing.T) {
	dir := t.TempDir()
	o := noFlushOptions(t, dir)
	o.segmentsPerFile = 1 // the layout of the builds that wrote no marks
	s := openTest(t, o)
	origin := s.Origin()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	writeLegacyLog(t, o, origin, 100, 1500)
	m, _, err := segment.OpenMeta(filepath.Join(dir, metaName), o.SegmentSize, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Put(segment.OffMarkedFrom, 0)
	m.SetPos(segment.OffCommitted, 0) // nothing flushed: recovery checks every record
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	m.Close()

	s = openTest(t, o)
	recs := readAll(t, s)
	if len(recs) != 100 {
		t.Fatalf("%d records recovered from the legacy log, want 100", len(recs))
	}
	for i, r := range recs {
		if !bytes.Equal(r.Value(), value(i, 1500)) {
			t.Fatalf("legacy record %d is not what was written", i)
		}
	}
	writeRecords(t, s, 30, 1500) // framed, into the third segment and the next
	end := s.seglog.End()
	s.crash()
	s = openTest(t, o)
	if got := len(readAll(t, s)); got != 130 || s.seglog.End() != end {
		t.Fatalf("%d records, end %d after the framed ones; want 130, %d", got, s.seglog.End(), end)
	}
}

// writeLegacyLog replaces the log of the closed store in o.Dir with n
// records of size bytes of origin as an older version wrote them:
// unframed, each where the last one ended, or at the start of the next
// segment when it did not fit.
func writeLegacyLog(t *testing.T, o Options, origin uint64, n, size int) {
	t.Helper()
	logDir := filepath.Join(o.Dir, logDirName)
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(logDir, 0o750); err != nil {
		t.Fatal(err)
	}
	segs := [][]byte{make([]byte, o.SegmentSize)}
	var off int64
	for i := range n {
		m := record.Message{Topic: "t", Key: fmt.Sprint(i), Value: value(i, size)}
		if off+int64(record.Padded(m.EncodedSize())) > o.SegmentSize {
			segs, off = append(segs, make([]byte, o.SegmentSize)), 0
		}
		k := record.Encode(segs[len(segs)-1][off:], &m, record.Stamp{Origin: origin, Seq: uint64(i + 1), HLC: uint64(i + 1)})
		off += int64(record.Padded(k))
	}
	for k, b := range segs {
		if err := os.WriteFile(filepath.Join(logDir, fmt.Sprintf("%020d", int64(k)*o.SegmentSize)), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFreshStoreAllocatesAWindow: a new store with the default 64 MiB
// segments allocates a window ahead of its writer in its segment and in
// the next, not two whole segments, and grows as it is written.
func TestFreshStoreAllocatesAWindow(t *testing.T) {
	dir := t.TempDir()
	o := DefaultOptions(dir)
	s := openTest(t, o)
	logDir := filepath.Join(dir, logDirName)
	allocated := func() (files int, bytes int64) {
		segs, _ := filepath.Glob(filepath.Join(logDir, "0*"))
		for _, p := range segs {
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err == nil {
				bytes += st.Blocks * 512
			}
		}
		return len(segs), bytes
	}
	testkit.Eventually(t, 10*time.Second, "the next segment prepared", func() bool {
		n, _ := allocated()
		return n == 2
	})
	if _, b := allocated(); b > 4*segment.PrefaultWindow {
		t.Fatalf("a fresh store allocated %d bytes of log, want at most %d", b, 4*segment.PrefaultWindow)
	}
	m := record.Message{Topic: "t", Value: make([]byte, 1<<20)}
	for range 24 {
		if _, err := s.Publish(&m); err != nil {
			t.Fatal(err)
		}
	}
	if _, b := allocated(); b < 24<<20 {
		t.Fatalf("%d bytes allocated under 24 MiB of records", b)
	}
}
