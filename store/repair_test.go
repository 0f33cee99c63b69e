package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// damagedStore writes n records (size bytes of value each) and closes the
// store cleanly, keeps a pristine copy of the record bytes, then writes 64
// bytes of garbage over flushed records in the middle of a segment. It
// returns the options to reopen it, the pristine records by seq (1-based)
// and the seqs the garbage hit.
func damagedStore(t *testing.T, n, size int, keepSnapshot bool) (Options, []record.Record, []uint64) {
	return damagedStoreWith(t, n, size, keepSnapshot, bytes.Repeat([]byte{0xa5, 0x5a, 0xc3, 0x3c}, 16), -24)
}

// damagedStoreWith is damagedStore with the damage given: the bytes, at
// the offset from record n/2+2's start.
func damagedStoreWith(t *testing.T, n, size int, keepSnapshot bool, garbage []byte, from int64) (Options, []record.Record, []uint64) {
	t.Helper()
	o := testOptions(t, t.TempDir())
	s := openTest(t, o)
	pos := writeRecords(t, s, n, size)
	origin := s.Origin()
	pristine := make([]record.Record, n+1)
	if _, err := s.ReadOrigin(origin, 1, uint64(n), func(r record.Record) error {
		pristine[r.Seq()] = r.Clone()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	at := pos[n/2+1] + from
	path, off := segmentFile(s, at)
	var hit []uint64
	for i, p := range pos {
		if p < at+int64(len(garbage)) && at < p+int64(record.Padded(pristine[i+1].Size())) {
			hit = append(hit, uint64(i+1))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !keepSnapshot {
		if err := os.Remove(filepath.Join(o.Dir, snapshotName)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, path, off, garbage)
	return o, pristine, hit
}

// A node whose flushed log has 64 bytes of garbage starts (with a snapshot
// or without), sets the damaged records aside (their bytes copied to
// corrupt/, a placeholder in their place), stops its vector before them,
// lets a reader of the topic read on past them, and takes them back from
// a peer in place: the log, the view and the vector are whole again.
func TestDamagedRecordsComeBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		snap    bool
		garbage []byte
		from    int64 // offset from a record's start
		hits    int
	}{
		{"garbage with a snapshot", true, bytes.Repeat([]byte{0xa5, 0x5a, 0xc3, 0x3c}, 16), -24, 2},
		{"garbage without a snapshot", false, bytes.Repeat([]byte{0xa5, 0x5a, 0xc3, 0x3c}, 16), -24, 2},
		// A header lost to zeros reads like a segment's unused tail; the
		// records after it say it is not.
		{"zeroed header with a snapshot", true, make([]byte, 48), 0, 1},
		{"zeroed header without a snapshot", false, make([]byte, 48), 0, 1},
	} {
		snap := tc.snap
		t.Run(tc.name, func(t *testing.T) {
			const n, size = 200, 300
			o, pristine, hit := damagedStoreWith(t, n, size, snap, tc.garbage, tc.from)
			if len(hit) != tc.hits {
				t.Fatalf("the damage hit %v, want %d records", hit, tc.hits)
			}
			s := openTest(t, o)
			var lost []LostRecord
			testkit.Eventually(t, 10*time.Second, "the damage to be found", func() bool {
				lost = s.Lost()
				return len(lost) == len(hit)
			})
			for i, lr := range lost {
				if lr.Seq != hit[i] || lr.Origin != s.Origin() || lr.Topic != "t" || int(lr.Size) != pristine[lr.Seq].Size() {
					t.Fatalf("lost %+v, want seq %d of %d bytes", lr, hit[i], pristine[hit[i]].Size())
				}
				aside, err := os.ReadFile(lr.CopiedTo)
				if err != nil || len(aside) != record.Padded(int(lr.Size)) {
					t.Fatalf("the copy aside %s: %d bytes, %v", lr.CopiedTo, len(aside), err)
				}
			}
			first := hit[0]
			if got := s.LastSeq(s.Origin()); got != first-1 {
				t.Fatalf("LastSeq with seq %d lost: %d, want %d", first, got, first-1)
			}
			if v := s.Vector()[s.Origin()]; v != first-1 {
				t.Fatalf("Vector with seq %d lost: %d", first, v)
			}
			// The log goes on past it: a read stops at it, and reads on
			// from the seq after it.
			if got := s.LogLast(s.Origin()); got != n || s.LogVector()[s.Origin()] != n {
				t.Fatalf("LogLast with seq %d lost: %d, want %d", first, got, n)
			}
			read := 0
			next, err := s.ReadOrigin(s.Origin(), 1, n, func(record.Record) error { read++; return nil })
			if !errors.Is(err, ErrLost) || next != first || read != int(first-1) {
				t.Fatalf("ReadOrigin over a lost record: next %d, %d read, %v; want %d, ErrLost", next, read, err, first)
			}
			if next, err := s.ReadOrigin(s.Origin(), hit[len(hit)-1]+1, n, func(record.Record) error { return nil }); err != nil || next != n+1 {
				t.Fatalf("ReadOrigin past the lost records: next %d, %v", next, err)
			}
			// Readers read on past the damage.
			got := readTopic(t, s, n-len(hit))
			if len(got) != n-len(hit) {
				t.Fatalf("the reader got %d messages, want %d", len(got), n-len(hit))
			}
			key := string(pristine[first].Key())
			if _, ok := s.Get("t", key); ok != snap {
				t.Fatalf("key %s of a lost record in the view: %v (the snapshot has it: %v)", key, ok, snap)
			}

			// The peers send them back (a duplicate first: it changes nothing).
			if _, err := s.AppendRecord(pristine[first-1]); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("a held record again: %v", err)
			}
			for _, seq := range hit {
				if _, err := s.AppendRecord(pristine[seq]); err != nil {
					t.Fatalf("restoring seq %d: %v", seq, err)
				}
			}
			if len(s.Lost()) != 0 || s.LastSeq(s.Origin()) != n {
				t.Fatalf("after the repair: lost %v, LastSeq %d", s.Lost(), s.LastSeq(s.Origin()))
			}
			if e, ok := s.Get("t", key); !ok || !bytes.Equal(e.Value, pristine[first].Value()) {
				t.Fatalf("key %s after the repair: %q %v", key, e.Value, ok)
			}
			if _, err := s.ReadOrigin(s.Origin(), 1, n, func(r record.Record) error {
				if !bytes.Equal(r, pristine[r.Seq()]) {
					t.Fatalf("seq %d differs after the repair", r.Seq())
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if got := readTopic(t, s, n); len(got) != n {
				t.Fatalf("the reader got %d messages after the repair, want %d", len(got), n)
			}
			if _, err := os.Stat(filepath.Join(o.Dir, lostName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the lost file after the repair: %v", err)
			}
			damaged, repaired := s.RepairStats()
			if damaged != uint64(len(hit)) || repaired != uint64(len(hit)) {
				t.Fatalf("RepairStats %d %d", damaged, repaired)
			}
		})
	}
}

// The lost records survive a restart (the lost file), and once given up
// (AcceptLost) the vector goes on past them and a read of them answers
// as for a recycled record.
func TestLostRecordsAcrossRestartAndAccept(t *testing.T) {
	const n, size = 120, 300
	o, pristine, hit := damagedStore(t, n, size, true)
	s := openTest(t, o)
	testkit.Eventually(t, 10*time.Second, "the damage to be found", func() bool { return len(s.Lost()) == len(hit) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, o)
	if got := s.Lost(); len(got) != len(hit) || s.LastSeq(s.Origin()) != hit[0]-1 {
		t.Fatalf("after a restart: lost %v, LastSeq %d", got, s.LastSeq(s.Origin()))
	}
	if _, err := s.AppendRecord(pristine[hit[0]]); err != nil {
		t.Fatalf("restoring seq %d after the restart: %v", hit[0], err)
	}
	gone, err := s.AcceptLost()
	if err != nil || len(gone) != len(hit)-1 {
		t.Fatalf("AcceptLost: %v %v", gone, err)
	}
	if s.LastSeq(s.Origin()) != n || len(s.Lost()) != 0 {
		t.Fatalf("after AcceptLost: LastSeq %d, lost %v", s.LastSeq(s.Origin()), s.Lost())
	}
	next, err := s.ReadOrigin(s.Origin(), 1, n, func(record.Record) error { return nil })
	if !errors.Is(err, ErrRecycled) || next != hit[1] {
		t.Fatalf("ReadOrigin over a given-up record: next %d, %v; want %d, ErrRecycled", next, err, hit[1])
	}
	if got := readTopic(t, s, n-len(hit)+1); len(got) != n-len(hit)+1 {
		t.Fatalf("the reader got %d messages", len(got))
	}
	// A placeholder never travels.
	ph := make([]byte, record.Padded(100))
	record.EncodeLost(ph, []byte("t"), record.Stamp{Origin: 7, Seq: 1, HLC: 1}, 100)
	if _, err := s.AppendRecord(ph); !errors.Is(err, ErrInvalid) {
		t.Fatalf("appending a placeholder: %v", err)
	}
}

// readTopic reads topic t from the earliest offset until want messages
// came or none comes for a while, failing on an error.
func readTopic(t *testing.T, s *Store, want int) []Delivery {
	t.Helper()
	r, err := s.NewTopicReader("t", Start{From: FromEarliest}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []Delivery
	for len(out) < want {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, err := r.Next(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("reading the topic after %d messages: %v", len(out), err)
		}
		out = append(out, d)
	}
	return out
}

// FuzzDecodeLostFile: the lost file's decoder refuses what cannot name a
// slot and never panics.
func FuzzDecodeLostFile(f *testing.F) {
	f.Add([]byte(`{"lost":[{"origin":1,"seq":2,"topic":"t","pos":8,"size":100,"segment":"s","offset":8,"copied_to":"c","found":"2026-12-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"lost":[]}`))
	f.Add([]byte(`{"lost":[{"origin":0}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := decodeLostFile(b)
		if err != nil {
			return
		}
		for _, r := range recs {
			if r.Origin == 0 || r.Seq == 0 || r.Pos < 0 || r.Pos%record.Align != 0 || r.Size < record.HeaderSize || r.Topic == "" {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}

// BenchmarkScrub is what the scrub after Open costs: one pass over a
// retained log of 64 MiB (records of 256 bytes), checking every record.
func BenchmarkScrub(b *testing.B) {
	s := benchStore(b, appendCase{256, 64 << 20, 16}, FlushAsync)
	defer s.Close()
	m := record.Message{Topic: "bench", Value: make([]byte, 256-record.HeaderSize-len("bench"))}
	batch := make([]record.Message, 1000)
	for i := range batch {
		batch[i] = m
	}
	for s.seglog.End() < 64<<20 {
		if _, err := s.PublishBatch(batch); err != nil {
			b.Fatal(err)
		}
	}
	end := s.seglog.End()
	b.SetBytes(end)
	b.ResetTimer()
	for range b.N {
		s.wg.Add(1)
		s.scrub(end)
	}
	b.StopTimer()
	if len(s.Lost()) != 0 {
		b.Fatal("the scrub found damage in a sound log")
	}
}

// The end of a segment: the writer went on to the next segment because
// the next record did not fit, and left its end marker there. Stray bytes
// in that unused tail, on the end marker or after it, are not a record:
// nothing is set aside or lost, the open succeeds (found by FuzzRecovery:
// the replay after a crash failed the open; with the end marker damaged
// recovery ended the log there) and the scrub after a clean stop reads on
// to the end. The zeroed header of the segment's last record, with its
// entry's prefix or without, is damage, set aside like any other, and so
// is its prefix damaged into the end marker's (which read the next
// segment's first record in its place).
func TestSegmentTailOrZeroedLastRecord(t *testing.T) {
	zeros := func(n int, at int64) func(int) ([]byte, int64) {
		return func(entry int) ([]byte, int64) { return make([]byte, n), at - int64(entry) }
	}
	for _, tc := range []struct {
		name  string
		crash bool // a crash before any flush: the replay reads the damage
		// damage returns the bytes to write and their offset from the
		// end of the entry of the segment's last record, given its size.
		damage func(entry int) ([]byte, int64)
		lost   int
	}{
		{"stray bytes on the end marker", false, strayBytes(0), 0},
		{"stray bytes on the end marker, after a crash", true, strayBytes(0), 0},
		{"stray bytes after the end marker", false, strayBytes(8), 0},
		{"stray bytes after the end marker, after a crash", true, strayBytes(8), 0},
		{"zeroed prefix and header of the last record", false, zeros(8+record.HeaderSize, 0), 1},
		{"zeroed header of the last record", false, zeros(record.HeaderSize, 8), 1},
		{"the last record's prefix reads as the end marker", false, func(entry int) ([]byte, int64) { return []byte{2, 0, 0, 0}, 4 - int64(entry) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n, size = 200, 700
			o := testOptions(t, t.TempDir())
			if tc.crash {
				o = noFlushOptions(t, o.Dir)
			}
			core, logs := observer.New(zap.WarnLevel)
			o.Logger = zap.New(core)
			s := openTest(t, o)
			pos := writeRecords(t, s, n, size)
			seg := s.seglog.SegmentSize()
			i := 0 // the last record of the first segment
			for pos[i+1] < seg {
				i++
			}
			var entry int
			if _, err := s.ReadOrigin(s.Origin(), uint64(i+1), uint64(i+1), func(r record.Record) error {
				entry = int(s.seglog.EntrySize(r.Size()))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			end := pos[i] + int64(entry)
			if seg-end < 16 {
				t.Fatalf("the first segment's tail is %d bytes, too small for the test", seg-end)
			}
			path, _ := segmentFile(s, pos[i])
			if tc.crash {
				s.crash()
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			b, at := tc.damage(entry)
			write(t, path, end+at, b)

			s = openTest(t, o)
			defer s.Close()
			testkit.Eventually(t, 10*time.Second, "the scrub to end", s.Scrubbed)
			if lost := s.Lost(); len(lost) != tc.lost || (tc.lost == 1 && lost[0].Seq != uint64(i+1)) {
				t.Fatalf("lost %+v, want %d (seq %d)", lost, tc.lost, i+1)
			}
			if tc.lost == 0 && logs.FilterMessage("the scrub of the log stops at a damaged record").Len() > 0 {
				t.Fatalf("the scrub stopped at the tail: %v", logs.All())
			}
			got := readTopic(t, s, n-tc.lost)
			if len(got) != n-tc.lost {
				t.Fatalf("the reader got %d messages, want %d", len(got), n-tc.lost)
			}
			for j := 1; j < len(got); j++ {
				if got[j].Record.Seq() <= got[j-1].Record.Seq() {
					t.Fatalf("the reader got seq %d after seq %d (a record read in another's place)", got[j].Record.Seq(), got[j-1].Record.Seq())
				}
			}
		})
	}
}

// strayBytes are two set bits at offset at of a segment's unused tail.
func strayBytes(at int64) func(int) ([]byte, int64) {
	return func(int) ([]byte, int64) { return []byte{0x01, 0x80}, at }
}
