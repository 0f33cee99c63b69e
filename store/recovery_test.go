package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/internal/segment"
	"github.com/cachecast/cachecast/store/record"
)

// crash abandons the store the way a killed process does: no flush, no
// snapshot, no metafile update; what is in the page cache stays.
func (s *Store) crash() {
	s.closed.Store(true)
	close(s.done)
	s.wg.Wait()
	s.notify.notify()
	s.cursors.Close()
	s.origins.Close()
	s.topics.Close()
	s.seglog.Close()
	s.meta.Close()
	s.lock.Close()
}

// noFlushOptions keep the committed position at the start, so that a
// reopen checks every record.
func noFlushOptions(t testing.TB, dir string) Options {
	o := testOptions(t, dir)
	o.FlushInterval = time.Hour
	o.FlushBytes = 0
	return o
}

// writeRecords publishes n keyed messages of the given size and returns
// their positions.
func writeRecords(t testing.TB, s *Store, n, size int) []int64 {
	t.Helper()
	var pos []int64
	for i := 0; i < n; i++ {
		m := record.Message{Topic: "t", Key: fmt.Sprint(i), Value: value(i, size)}
		res, err := s.Publish(&m)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		pos = append(pos, res.Pos)
	}
	return pos
}

// readAll returns every record of the log, in order, checking that the
// sequence is gap-free from 1.
func readAll(t testing.TB, s *Store) []record.Record {
	t.Helper()
	var out []record.Record
	for pos := s.seglog.Oldest(); pos < s.seglog.End(); {
		next, err := s.seglog.Read(pos, func(r record.Record) error {
			out = append(out, r.Clone())
			return nil
		})
		if err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
		pos = next
	}
	for i, r := range out {
		if r.Seq() != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, r.Seq())
		}
	}
	return out
}

// segmentFile returns the path of the segment file holding pos and the
// offset of pos in it.
func segmentFile(s *Store, pos int64) (string, int64) {
	return s.seglog.SegmentPath(pos), s.seglog.FileOffset(pos)
}

// recoveryRecords records of recoverySize bytes: about 4 segments.
const recoveryRecords, recoverySize = 300, 700

func TestRecovery(t *testing.T) {
	const n, size = recoveryRecords, recoverySize
	cases := []struct {
		name string
		// damage breaks the files of a crashed store and says how many
		// records must survive and whether bytes must be copied aside.
		damage func(t *testing.T, s *Store, pos []int64) (keep int, aside bool)
	}{
		{"clean crash", func(t *testing.T, s *Store, pos []int64) (int, bool) { return n, false }},
		{"flipped byte mid-log", func(t *testing.T, s *Store, pos []int64) (int, bool) {
			path, off := segmentFile(s, pos[150])
			flip(t, path, off+record.HeaderSize+10)
			return 150, true
		}},
		{"torn last record", func(t *testing.T, s *Store, pos []int64) (int, bool) {
			path, off := segmentFile(s, pos[n-1])
			zero(t, path, off+record.HeaderSize+size/2, size/2)
			return n - 1, true
		}},
		{"garbage after the end", func(t *testing.T, s *Store, pos []int64) (int, bool) {
			path, off := segmentFile(s, pos[n-1])
			// The log cannot tell garbage after its end from the stale
			// bytes of a reused file's earlier use: it ends there and
			// discards it, with no copy.
			write(t, path, off+s.seglog.EntrySize(record.HeaderSize+len("t")+3+size), []byte("garbage!garbage!"))
			return n, false
		}},
		{"hole in the middle", func(t *testing.T, s *Store, pos []int64) (int, bool) {
			path, off := segmentFile(s, pos[100])
			zero(t, path, off, 8)
			return 100, false
		}},
		{"lost segment file", func(t *testing.T, s *Store, pos []int64) (int, bool) {
			path, _ := segmentFile(s, pos[200])
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			first := 200
			for first > 0 {
				if p, _ := segmentFile(s, pos[first-1]); p != path {
					break
				}
				first--
			}
			return first, false
		}},
	}
	// One segment a file (the layout before format 4), and two: the log
	// in two files, the damage in either.
	for _, slots := range []int64{1, 2} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("slots=%d/%s", slots, tc.name), func(t *testing.T) {
				testRecoveryCase(t, slots, tc.damage)
			})
		}
	}
}

// testRecoveryCase writes TestRecovery's records in a directory of slots
// segments a file, crashes, damages the files and checks what recovery
// keeps.
func testRecoveryCase(t *testing.T, slots int64, damage func(*testing.T, *Store, []int64) (int, bool)) {
	const n, size = recoveryRecords, recoverySize
	dir := t.TempDir()
	o := noFlushOptions(t, dir)
	o.segmentsPerFile = slots
	s := openTest(t, o)
	pos := writeRecords(t, s, n, size)
	s.crash()
	keep, aside := damage(t, s, pos)

	s = openTest(t, o)
	defer s.Close()
	recs := readAll(t, s)
	if len(recs) != keep {
		t.Fatalf("recovered %d records, want %d", len(recs), keep)
	}
	for i, r := range recs {
		if !bytes.Equal(r.Value(), value(i, size)) {
			t.Fatalf("record %d differs", i)
		}
	}
	bad, _ := filepath.Glob(filepath.Join(dir, "corrupt", "*.bad"))
	if aside != (len(bad) > 0) {
		t.Fatalf("copied aside: %v, want %v", bad, aside)
	}
	// The view and the indexes agree with the truncated log.
	if _, ok := s.Get("t", fmt.Sprint(keep)); ok && keep < n {
		t.Fatalf("key %d survived the truncation in the view", keep)
	}
	if keep > 0 {
		if e, ok := s.Get("t", fmt.Sprint(keep-1)); !ok || !bytes.Equal(e.Value, value(keep-1, size)) {
			t.Fatalf("key %d lost", keep-1)
		}
	}
	// Appending goes on from the truncation point, and what was
	// cut off never comes back, also after another crash.
	more := record.Message{Topic: "t", Key: "after", Value: []byte("after")}
	res, err := s.Publish(&more)
	if err != nil || res.Seq != uint64(keep+1) {
		t.Fatalf("publish after recovery: %+v %v, want seq %d", res, err, keep+1)
	}
	s.crash()
	s = openTest(t, o)
	if got := readAll(t, s); len(got) != keep+1 || string(got[keep].Key()) != "after" {
		t.Fatalf("after a second crash: %d records", len(got))
	}
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b := readAt(t, path, off, 1)
	write(t, path, off, []byte{b[0] ^ 0x40})
}

func zero(t *testing.T, path string, off int64, n int) { write(t, path, off, make([]byte, n)) }

func readAt(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// FuzzRecovery damages a small crashed log with the fuzzer's flips and
// cut, reopens it, and checks the promise: the recovered log is a prefix
// of what was written, every record in it intact, and appending goes on.
func FuzzRecovery(f *testing.F) {
	f.Add([]byte{0, 0, 0, 10, 0x40}, uint32(0))
	f.Add([]byte{1, 0, 2, 0, 0xff, 0, 0, 0, 0, 1}, uint32(70000))
	f.Add([]byte{}, uint32(130000))
	f.Add([]byte{2, 0, 0, 64, 0x01, 0, 0, 1, 0, 0x80}, uint32(0))
	// The log's framing: the mark of the first record (now stale: the
	// log is empty), the kind of the next segment's first one, and the
	// mark of the end marker the writer left at the end of segment 0 (the
	// log then ends there).
	f.Add([]byte{0, 0, 0, 0, 0x01}, uint32(0))
	f.Add([]byte{1, 0, 0, 4, 0x03}, uint32(0))
	f.Add([]byte{0, 0, 0xff, 0xf0, 0x01}, uint32(0))
	f.Fuzz(func(t *testing.T, flips []byte, cut uint32) {
		const n, size = 120, 1500 // three segments of 64 KiB
		dir := t.TempDir()
		o := noFlushOptions(t, dir)
		o.segmentsPerFile = 2 // two files, and two segments in one
		s := openTest(t, o)
		writeRecords(t, s, n, size)
		segs := s.seglog.End()/o.SegmentSize + 1
		s.crash()
		// Each flip is 5 bytes: segment, offset (3 bytes), xor mask.
		for i := 0; i+5 <= len(flips); i += 5 {
			off := (int64(flips[i+1])<<16 | int64(flips[i+2])<<8 | int64(flips[i+3])) % o.SegmentSize
			path, off := segmentFile(s, int64(flips[i])%segs*o.SegmentSize+off)
			b := readAt(t, path, off, 1)
			write(t, path, off, []byte{b[0] ^ flips[i+4]})
		}
		if cut > 0 {
			path, off := segmentFile(s, int64(cut)%(segs*o.SegmentSize))
			if err := os.Truncate(path, off); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Open(o)
		if err != nil {
			t.Fatalf("open after damage: %v", err)
		}
		defer s.Close()
		recs := readAll(t, s)
		for i, r := range recs {
			if !bytes.Equal(r.Value(), value(i, size)) || string(r.Key()) != fmt.Sprint(i) {
				t.Fatalf("record %d is not what was written", i)
			}
		}
		m := record.Message{Topic: "t", Key: "next", Value: []byte("x")}
		res, err := s.Publish(&m)
		if err != nil || res.Seq != uint64(len(recs)+1) {
			t.Fatalf("publish after recovery: %+v %v", res, err)
		}
	})
}

func TestFaultInjection(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.Flush = FlushSync
	s := openTest(t, o)
	defer s.Close()
	writeRecords(t, s, 10, 100)

	fail := func(op string) func(string) error {
		return func(got string) error {
			if got == op {
				return errors.New("injected EIO")
			}
			return nil
		}
	}
	t.Run("sync fails", func(t *testing.T) {
		h := fail("sync")
		fsys.FaultHook.Store(&h)
		m := record.Message{Topic: "t", Key: "k", Value: []byte("v")}
		_, err := s.Publish(&m)
		fsys.FaultHook.Store(nil)
		if !errors.Is(err, ErrIO) {
			t.Fatalf("publish under a failing sync: %v, want ErrIO", err)
		}
		if s.Healthy() == nil {
			t.Fatal("healthy after a failed flush")
		}
		if _, err := s.Publish(&m); err != nil {
			t.Fatalf("publish after the fault cleared: %v", err)
		}
		if err := s.Healthy(); err != nil {
			t.Fatalf("still unhealthy after a good flush: %v", err)
		}
	})
	t.Run("allocation fails", func(t *testing.T) {
		h := fail("allocate")
		fsys.FaultHook.Store(&h)
		defer fsys.FaultHook.Store(nil)
		before := s.Stats().WritePos
		// Fill the current segment and the prepared one, so that the
		// writer must make a segment under the fault.
		var err error
		for i := 0; i < 400 && err == nil; i++ {
			m := record.Message{Topic: "t", Key: "fill", Value: value(i, 1000)}
			_, err = s.Publish(&m)
		}
		if !errors.Is(err, ErrIO) && !errors.Is(err, ErrDiskFull) {
			t.Fatalf("got %v, want an allocation error", err)
		}
		if s.Stats().WritePos <= before {
			t.Fatal("nothing was written before the fault")
		}
		fsys.FaultHook.Store(nil)
		m := record.Message{Topic: "t", Key: "fill", Value: []byte("ok")}
		if _, err := s.Publish(&m); err != nil {
			t.Fatalf("publish after the fault cleared: %v", err)
		}
	})
	readAll(t, s)
}

// TestFlushOfUnmappedSegments checks the flush of segments whose maps were
// dropped before the flusher came to them (more segments written between
// two flushes than may be mapped): each is synced through a map of its
// range made for that, a failure there is the flush's, and what was
// flushed is there after a crash.
func TestFlushOfUnmappedSegments(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.MaxMappedSegments = 2
	o.FlushInterval = time.Hour // only the test's Flush calls flush
	o.FlushBytes = 0
	s := openTest(t, o)
	writeRecords(t, s, 100, 4000) // about 7 segments of 64 KiB
	// The preparer drops the maps over the bound once it runs after the
	// writer's last switch.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		segs, mapped := s.seglog.Counts()
		if mapped < segs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d segments still mapped after a minute: none to flush unmapped", mapped, segs)
		}
	}
	fail := func(op string) error {
		if op == "sync" {
			return errors.New("injected EIO")
		}
		return nil
	}
	h := fail
	fsys.FaultHook.Store(&h)
	err := s.Flush()
	fsys.FaultHook.Store(nil)
	if !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), "not mapped") {
		t.Fatalf("flush of an unmapped segment under a failing sync: %v, want ErrIO from the sync of its range, not mapped", err)
	}
	if s.seglog.Flushed() >= s.seglog.End() {
		t.Fatal("the failed flush moved the flushed end")
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("flush after the fault cleared: %v", err)
	}
	if got, want := s.seglog.Flushed(), s.seglog.End(); got != want {
		t.Fatalf("flushed to %d, want the end %d", got, want)
	}
	want := readAll(t, s)
	s.crash()
	s = openTest(t, o)
	got := readAll(t, s)
	if len(got) != len(want) || len(got) != 100 {
		t.Fatalf("after the crash: %d records, want %d (100)", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d differs after the crash", i)
		}
	}
}

// TestIndexRebuild damages the indexes (a chunk file of the topic index
// goes missing) and checks that the store sets them aside, rebuilds them
// from the log, and serves every record again.
func TestIndexRebuild(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	s := openTest(t, o)
	writeRecords(t, s, 3000, 10) // three chunks of 1024 entries
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	chunks, _ := filepath.Glob(filepath.Join(dir, indexDirName, "topic", "t", "0*"))
	if len(chunks) < 3 {
		t.Fatalf("want at least 3 index chunks, have %v", chunks)
	}
	sort.Strings(chunks)
	if err := os.Remove(chunks[1]); err != nil {
		t.Fatal(err)
	}
	// Twice, the second at once after the first (as in a crash loop):
	// each damaged set goes aside under its own name.
	for rebuild := 1; rebuild <= 2; rebuild++ {
		if rebuild == 2 {
			if err := os.Remove(chunks[1]); err != nil {
				t.Fatal(err)
			}
		}
		s = openTest(t, o)
		r, err := s.NewTopicReader("t", Start{From: FromEarliest}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for i := 0; i < 3000; i++ {
			d, err := r.Next(ctx)
			if err != nil || d.Offset != uint64(i) || !bytes.Equal(d.Record.Value(), value(i, 10)) {
				t.Fatalf("rebuild %d, entry %d: offset %d, %v", rebuild, i, d.Offset, err)
			}
		}
		cancel()
		r.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if aside, _ := filepath.Glob(filepath.Join(dir, indexDirName+".broken-*")); len(aside) != rebuild {
			t.Fatalf("rebuild %d: damaged indexes set aside as %v", rebuild, aside)
		}
	}
}

// TestNewOriginAfterReboot: a store left open (its process died) keeps its
// origin when the machine did not restart (the page cache kept every
// write), and takes a new one when it did (unflushed records may be gone
// while peers hold them: their seqs must not be stamped again).
func TestNewOriginAfterReboot(t *testing.T) {
	dir := t.TempDir()
	o := noFlushOptions(t, dir)
	s := openTest(t, o)
	first := s.Origin()
	writeRecords(t, s, 10, 10)
	s.crash()

	s = openTest(t, o) // same boot
	if s.Origin() != first {
		t.Fatalf("origin changed after a crash on the same boot: %x -> %x", first, s.Origin())
	}
	s.crash()

	// Pretend the machine rebooted: another boot ID in the metafile.
	m, _, err := segment.OpenMeta(filepath.Join(dir, metaName), o.SegmentSize, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := m.BootID()
	id[0] ^= 0xff
	m.SetBootID(id)
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	m.Close()
	s = openTest(t, o)
	second := s.Origin()
	if second == first {
		t.Fatal("kept the origin after a reboot with the store left open")
	}
	if got := s.LastSeq(first); got != 10 {
		t.Fatalf("the old origin's records: last seq %d, want 10", got)
	}
	m1 := record.Message{Topic: "t", Key: "new", Value: []byte("x")}
	res, err := s.Publish(&m1)
	if err != nil || res.Origin != second || res.Seq != 1 {
		t.Fatalf("first publish as the new origin: %+v %v", res, err)
	}
	if e, ok := s.Get("t", "3"); !ok || !bytes.Equal(e.Value, value(3, 10)) || e.Stamp.Origin != first {
		t.Fatalf("an old record after the switch: %+v %v", e, ok)
	}
	// A clean close, then a reboot: nothing was lost, the origin stays.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m, _, err = segment.OpenMeta(filepath.Join(dir, metaName), o.SegmentSize, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	id = m.BootID()
	id[0] ^= 0xff
	m.SetBootID(id)
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	m.Close()
	s = openTest(t, o)
	defer s.Close()
	if s.Origin() != second {
		t.Fatalf("origin changed after a clean close and a reboot: %x -> %x", second, s.Origin())
	}
}

// TestRebuiltIndexesNameWhereRecordsLie: indexes rebuilt from the log (here
// all of them, lost) give every record the position the writer gave it,
// the first record of each segment included (the replay indexed it at
// the previous segment's unused tail, where the walk from record to
// record found it: a repair of it then named the wrong slot), and the
// view is whole again.
func TestRebuiltIndexesNameWhereRecordsLie(t *testing.T) {
	const n, size = 300, 700 // about 4 segments of 64 KiB
	dir := t.TempDir()
	s := openTest(t, testOptions(t, dir))
	pos := writeRecords(t, s, n, size)
	origin := s.Origin()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, indexDirName)); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, testOptions(t, dir))
	segs := 0
	for i, want := range pos {
		if want%s.seglog.SegmentSize() == 0 {
			segs++
		}
		if got, ok := s.origins.Get(origin, uint64(i+1)); !ok || got != want {
			t.Fatalf("seq %d is indexed at %d (%v), the writer put it at %d", i+1, got, ok, want)
		}
	}
	if segs < 3 {
		t.Fatalf("the records start %d segments, too few for the test", segs)
	}
	if got := readTopic(t, s, n); len(got) != n {
		t.Fatalf("the reader got %d messages, want %d", len(got), n)
	}
	for i := range n {
		if e, ok := s.Get("t", fmt.Sprint(i)); !ok || !bytes.Equal(e.Value, value(i, size)) {
			t.Fatalf("key %d after the rebuild: %v", i, ok)
		}
	}
}

// TestReadsCheckTheCRCAfterOpen: the replay reads the records recovery
// has just checked without checking their CRCs again, and no read after
// Open does so: a record damaged after Open in the range recovery
// checked reads as ErrCorrupt.
func TestReadsCheckTheCRCAfterOpen(t *testing.T) {
	dir := t.TempDir()
	o := noFlushOptions(t, dir)
	s := openTest(t, o)
	pos := writeRecords(t, s, 50, 300)
	s.crash() // nothing was flushed: recovery checks every record
	s = openTest(t, o)
	if got := len(readAll(t, s)); got != 50 {
		t.Fatalf("recovered %d records, want 50", got)
	}
	path, off := segmentFile(s, pos[20])
	flip(t, path, off+record.HeaderSize+10) // the file's page is the map's
	if _, err := s.seglog.Read(pos[20], func(record.Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of a record damaged after Open: %v, want ErrCorrupt", err)
	}
}
