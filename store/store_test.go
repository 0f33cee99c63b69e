package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cachecast/cachecast/store/internal/segment"
	"github.com/cachecast/cachecast/store/record"
)

// testOptions are small: 64 KiB segments so that a test crosses many.
func testOptions(t testing.TB, dir string) Options {
	o := DefaultOptions(dir)
	o.SegmentSize = 64 << 10
	o.MaxMappedSegments = 4
	o.IndexChunkEntries = 1024
	o.FlushInterval = 10 * time.Millisecond
	return o
}

func openTest(t testing.TB, o Options) *Store {
	t.Helper()
	s, err := Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() }) // a no-op (ErrClosed) when the test closed it
	return s
}

// value is the deterministic value of message i, so that a test can check
// a record byte for byte without remembering it.
func value(i int, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i*31 + j)
	}
	copy(b, fmt.Sprintf("v%d:", i))
	return b
}

func TestPublishGetReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, testOptions(t, dir))
	origin := s.Origin()
	const n = 3000 // ~1.4 MB: more than 20 segments of 64 KiB
	for i := 0; i < n; i++ {
		m := record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%d", i%500), Tag: "eu", Value: value(i, 400)}
		res, err := s.Publish(&m)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if res.Seq != uint64(i+1) || res.Origin != origin {
			t.Fatalf("publish %d: stamp %+v", i, res.Stamp)
		}
	}
	check := func(s *Store) {
		t.Helper()
		for k := 0; k < 500; k++ {
			e, ok := s.Get("prices", fmt.Sprintf("sku-%d", k))
			last := n - 500 + k
			if !ok || !bytes.Equal(e.Value, value(last, 400)) {
				t.Fatalf("sku-%d: got %q ok=%v, want value of message %d", k, e.Value[:8], ok, last)
			}
		}
		if got := len(s.Keys("prices", "", "", 10000)); got != 500 {
			t.Fatalf("keys: %d, want 500", got)
		}
	}
	check(s)
	if st := s.Stats(); st.Segments < 20 {
		t.Fatalf("only %d segments; the test should cross many", st.Segments)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, testOptions(t, dir))
	defer s.Close()
	if s.Origin() != origin {
		t.Fatalf("origin changed across restart: %x -> %x", origin, s.Origin())
	}
	check(s)
	m := record.Message{Topic: "prices", Key: "after", Value: []byte("x")}
	res, err := s.Publish(&m)
	if err != nil || res.Seq != n+1 {
		t.Fatalf("publish after reopen: %+v %v, want seq %d", res, err, n+1)
	}
}

func TestTopicReader(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	defer s.Close()
	for i := 0; i < 200; i++ {
		tag := []string{"a", "b", "c"}[i%3]
		m := record.Message{Topic: "t", Key: fmt.Sprint(i), Tag: tag, Value: value(i, 1000)}
		if _, err := s.Publish(&m); err != nil {
			t.Fatal(err)
		}
		other := record.Message{Topic: "other", Value: []byte("noise")}
		if _, err := s.Publish(&other); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cases := []struct {
		name  string
		start Start
		tags  []string
		want  []int
	}{
		{"earliest", Start{From: FromEarliest}, nil, seq(0, 200, 1)},
		{"offset", Start{From: FromOffset, Offset: 150}, nil, seq(150, 200, 1)},
		{"tag a", Start{From: FromEarliest}, []string{"a"}, seq(0, 200, 3)},
		{"tags b or c", Start{From: FromEarliest}, []string{"b", "c"}, without(seq(0, 200, 1), seq(0, 200, 3))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.NewTopicReader("t", tc.start, tc.tags)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for _, i := range tc.want {
				d, err := r.Next(ctx)
				if err != nil {
					t.Fatalf("next (want %d): %v", i, err)
				}
				if d.Offset != uint64(i) || !bytes.Equal(d.Record.Value(), value(i, 1000)) {
					t.Fatalf("got offset %d, want %d", d.Offset, i)
				}
			}
		})
	}

	// latest sees only what comes after it, and wakes up for it.
	r, err := s.NewTopicReader("t", Start{From: FromLatest}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Delivery, 1)
	go func() {
		d, err := r.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	time.Sleep(20 * time.Millisecond)
	m := record.Message{Topic: "t", Key: "late", Value: []byte("late")}
	if _, err := s.Publish(&m); err != nil {
		t.Fatal(err)
	}
	if d := <-got; string(d.Record.Key()) != "late" || d.Offset != 200 {
		t.Fatalf("latest reader got offset %d key %q", d.Offset, d.Record.Key())
	}
}

// TestResumeOffsetDuringPublish: a message being published while
// ResumeOffset runs is not skipped: its offset is never below the answer
// when what was done does not cover it (a consumer group that took its
// queues at that moment started past it and never delivered it).
func TestResumeOffsetDuringPublish(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	for i := 0; i < 300; i++ {
		done := s.Vector() // everything so far is handled
		end := s.TopicEnd("t")
		published := make(chan error, 1)
		go func() {
			_, err := s.Publish(&record.Message{Topic: "t", Key: fmt.Sprint(i), Value: []byte("v")})
			published <- err
		}()
		for waiting := true; waiting; {
			select {
			case err := <-published:
				if err != nil {
					t.Fatal(err)
				}
				waiting = false
			default:
			}
			if off := s.ResumeOffset("t", done); off > end {
				t.Fatalf("message %d at offset %d: ResumeOffset answered %d, past it", i, end, off)
			}
		}
	}
}

func seq(from, to, step int) []int {
	var out []int
	for i := from; i < to; i += step {
		out = append(out, i)
	}
	return out
}

func without(a, b []int) []int {
	drop := map[int]bool{}
	for _, x := range b {
		drop[x] = true
	}
	var out []int
	for _, x := range a {
		if !drop[x] {
			out = append(out, x)
		}
	}
	return out
}

func TestBatchAllOrNothing(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	defer s.Close()
	before := s.Stats()
	// The third message is larger than a segment: the batch must leave no trace,
	// although the first two were already copied into the map.
	batch := []record.Message{
		{Topic: "t", Key: "a", Value: value(1, 30000)},
		{Topic: "t", Key: "b", Value: value(2, 30000)},
		{Topic: "t", Key: "c", Value: value(3, 70000)},
	}
	if _, err := s.PublishBatch(batch); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	after := s.Stats()
	if after.WritePos != before.WritePos || after.Keys != 0 {
		t.Fatalf("a failed batch left a trace: %+v", after)
	}
	if _, ok := s.Get("t", "a"); ok {
		t.Fatal("a failed batch is visible in the view")
	}
	res, err := s.PublishBatch(batch[:2])
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Seq != 1 || res[1].Seq != 2 {
		t.Fatalf("seqs after a failed batch: %d %d, want 1 2", res[0].Seq, res[1].Seq)
	}
	r, _ := s.NewTopicReader("t", Start{From: FromEarliest}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, k := range []string{"a", "b"} {
		d, err := r.Next(ctx)
		if err != nil || string(d.Record.Key()) != k {
			t.Fatalf("reader: %v key %q, want %q", err, d.Record.Key(), k)
		}
	}
}

func TestAppendRecordFromPeer(t *testing.T) {
	a := openTest(t, testOptions(t, t.TempDir()))
	defer a.Close()
	b := openTest(t, testOptions(t, t.TempDir()))
	defer b.Close()
	var recs [][]byte
	for i := 0; i < 5; i++ {
		m := record.Message{Topic: "t", Key: "k", Value: value(i, 10)}
		res, err := a.Publish(&m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.seglog.Read(res.Pos, func(r record.Record) error { recs = append(recs, r.Clone()); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		rec  []byte
		want error
	}{
		{recs[0], nil},
		{recs[0], ErrDuplicate},
		{recs[2], ErrOutOfOrder},
		{recs[1], nil},
		{append(append([]byte(nil), recs[2][:20]...), 0xff), ErrCorrupt},
		{recs[2], nil},
	}
	for i, tc := range cases {
		if _, err := b.AppendRecord(tc.rec); !errors.Is(err, tc.want) {
			t.Fatalf("case %d: %v, want %v", i, err, tc.want)
		}
	}
	e, ok := b.Get("t", "k")
	if !ok || !bytes.Equal(e.Value, value(2, 10)) || e.Stamp.Origin != a.Origin() {
		t.Fatalf("peer view: %+v %v", e, ok)
	}
	// The node's own sequence is untouched by records of other origins.
	m := record.Message{Topic: "t", Key: "own"}
	if res, err := b.Publish(&m); err != nil || res.Seq != 1 {
		t.Fatalf("own publish: %+v %v", res, err)
	}
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, testOptions(t, dir))
	defer s.Close()
	if _, err := Open(testOptions(t, dir)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}

func TestRetention(t *testing.T) {
	for _, policy := range []FullPolicy{FullRecycle, FullRefuse} {
		t.Run(policy.String(), func(t *testing.T) {
			o := testOptions(t, t.TempDir())
			o.RetentionBytes = 4 * o.SegmentSize
			o.WhenFull = policy
			s := openTest(t, o)
			defer s.Close()
			var err error
			var written int
			for i := 0; i < 2000 && err == nil; i++ {
				if i%100 == 99 {
					// Recycling waits for the snapshot to cover a segment.
					if err := s.Snapshot(); err != nil {
						t.Fatal(err)
					}
				}
				m := record.Message{Topic: "t", Key: fmt.Sprint(i % 10), Value: value(i, 1000)}
				_, err = s.Publish(&m)
				if err == nil {
					written++
				}
			}
			st := s.Stats()
			if st.LogBytes > o.RetentionBytes {
				t.Fatalf("log holds %d bytes, bound %d", st.LogBytes, o.RetentionBytes)
			}
			switch policy {
			case FullRefuse:
				if !errors.Is(err, ErrFull) {
					t.Fatalf("refuse: got %v after %d writes, want ErrFull", err, written)
				}
			case FullRecycle:
				if err != nil || st.OldestPos == 0 {
					t.Fatalf("recycle: %v, oldest %d", err, st.OldestPos)
				}
				// Every key still has its latest value, and a reopen keeps it.
				for k := 0; k < 10; k++ {
					if e, ok := s.Get("t", fmt.Sprint(k)); !ok || !bytes.Equal(e.Value, value(1990+k, 1000)) {
						t.Fatalf("key %d lost its latest value after recycling", k)
					}
				}
				s.Close()
				s = openTest(t, o)
				for k := 0; k < 10; k++ {
					if e, ok := s.Get("t", fmt.Sprint(k)); !ok || !bytes.Equal(e.Value, value(1990+k, 1000)) {
						t.Fatalf("key %d lost after reopen of a recycled log", k)
					}
				}
				r, _ := s.NewTopicReader("t", Start{From: FromEarliest}, nil)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				d, err := r.Next(ctx)
				if err != nil || d.Offset == 0 {
					t.Fatalf("earliest after recycling: offset %d, %v", d.Offset, err)
				}
				// The files on disk stay bounded: the retained segments, the
				// one made ahead, and the few kept for reuse.
				files, _ := filepath.Glob(filepath.Join(o.Dir, logDirName, "*"))
				if bound := int(o.RetentionBytes/o.SegmentSize) + 2 + segment.MaxFreeSegments; len(files) > bound {
					t.Fatalf("%d files in the log directory, bound %d", len(files), bound)
				}
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	base := DefaultOptions("d")
	cases := []struct {
		name string
		edit func(*Options)
		ok   bool
	}{
		{"defaults", func(*Options) {}, true},
		{"no dir", func(o *Options) { o.Dir = "" }, false},
		{"tiny segment", func(o *Options) { o.SegmentSize = 4096 }, false},
		{"unaligned segment", func(o *Options) { o.SegmentSize = 1<<20 + 1 }, false},
		{"one map", func(o *Options) { o.MaxMappedSegments = 1 }, false},
		{"retention below two segments", func(o *Options) { o.RetentionBytes = o.SegmentSize }, false},
		{"negative age", func(o *Options) { o.RetentionAge = -1 }, false},
	}
	for _, tc := range cases {
		o := base
		tc.edit(&o)
		if err := o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	code := m.Run()
	closePublishBenchStores()
	if code == 0 {
		// Every store closed in the tests must have stopped its goroutines.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestReadOriginAndVector(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	defer s.Close()
	writeRecords(t, s, 20, 10)
	if v := s.Vector(); len(v) != 1 || v[s.Origin()] != 20 {
		t.Fatalf("vector %v", v)
	}
	cases := []struct {
		from, to, next uint64
		want           []uint64
	}{
		{1, 3, 4, []uint64{1, 2, 3}},
		{18, 100, 21, []uint64{18, 19, 20}},
		{21, 30, 21, nil},
		{5, 4, 5, nil},
	}
	for _, tc := range cases {
		var got []uint64
		next, err := s.ReadOrigin(s.Origin(), tc.from, tc.to, func(r record.Record) error {
			got = append(got, r.Seq())
			return nil
		})
		if err != nil || next != tc.next || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ReadOrigin(%d, %d) = %v next %d err %v; want %v next %d", tc.from, tc.to, got, next, err, tc.want, tc.next)
		}
	}
	if _, err := s.ReadOrigin(12345, 1, 5, func(record.Record) error { return nil }); err != nil {
		t.Errorf("unknown origin: %v", err)
	}
}

func TestBootstrapFromSnapshot(t *testing.T) {
	a := openTest(t, testOptions(t, t.TempDir()))
	defer a.Close()
	writeRecords(t, a, 50, 10)
	tomb := record.Message{Topic: "t", Key: "3", Delete: true}
	if _, err := a.Publish(&tomb); err != nil {
		t.Fatal(err)
	}
	dirB := t.TempDir()
	b := openTest(t, testOptions(t, dirB))
	m := record.Message{Topic: "t", Key: "own", Value: []byte("mine")}
	if _, err := b.Publish(&m); err != nil {
		t.Fatal(err)
	}
	// A's snapshot, as a bootstrap reads it off the link.
	var snap bytes.Buffer
	if err := a.SnapshotTo(&snap); err != nil {
		t.Fatal(err)
	}
	good := snap.Bytes()
	// A snapshot cut short moves no origin on (the entries before the cut
	// may be in the view: records of A's, by the rule).
	if _, err := b.Bootstrap(bytes.NewReader(good[:len(good)-1])); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("snapshot cut short: %v, want ErrCorrupt", err)
	}
	if b.LastSeq(a.Origin()) != 0 {
		t.Fatalf("a snapshot cut short moved origin A on to %d", b.LastSeq(a.Origin()))
	}
	if e, ok := b.Get("t", "own"); !ok || string(e.Value) != "mine" {
		t.Fatal("a snapshot cut short lost the node's own key")
	}
	moved, err := b.Bootstrap(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if moved[a.Origin()] != 51 || b.LastSeq(a.Origin()) != 51 {
		t.Fatalf("moved %v, last %d; want origin at 51", moved, b.LastSeq(a.Origin()))
	}
	check := func(s *Store) {
		t.Helper()
		for i := 0; i < 50; i++ {
			e, ok := s.Get("t", fmt.Sprint(i))
			if i == 3 {
				if ok {
					t.Fatal("the tombstone did not come across")
				}
				continue
			}
			if !ok || !bytes.Equal(e.Value, value(i, 10)) {
				t.Fatalf("key %d after bootstrap: %v", i, ok)
			}
		}
		if e, ok := s.Get("t", "own"); !ok || string(e.Value) != "mine" {
			t.Fatal("bootstrap lost the node's own key")
		}
	}
	check(b)
	// Catching up goes on with records after the mark.
	next := record.Message{Topic: "t", Key: "after", Value: []byte("x")}
	res, err := a.Publish(&next)
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	a.ReadOrigin(a.Origin(), res.Seq, res.Seq, func(r record.Record) error { raw = r.Clone(); return nil })
	if _, err := b.AppendRecord(raw); err != nil {
		t.Fatalf("record after the mark: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTest(t, testOptions(t, dirB))
	defer b.Close()
	check(b)
	if b.LastSeq(a.Origin()) != 52 {
		t.Fatalf("after restart: origin at %d, want 52", b.LastSeq(a.Origin()))
	}
}

// TestStoreFullNamesCursor checks that a cursor holding the log back is
// named in store_full, with its owner, and that deleting it lets writes on.
func TestStoreFullNamesCursor(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.RetentionBytes = 4 * o.SegmentSize
	s := openTest(t, o)
	if err := s.SetCursorAs(65534, false, "pin", "t", 0); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i < 2000 && err == nil; i++ {
		if i%100 == 99 {
			if err := s.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		m := record.Message{Topic: "t", Key: fmt.Sprint(i % 10), Value: value(i, 1000)}
		_, err = s.Publish(&m)
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("a cursor at offset 0 did not hold the log: %v", err)
	}
	for _, want := range []string{`durable cursor "pin"`, "owner uid 65534", `topic "t"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("store_full %q lacks %q", err, want)
		}
	}
	cs := s.Cursors()
	if len(cs) != 1 || cs[0].Lag() == 0 || cs[0].End == 0 {
		t.Fatalf("cursors: %+v", cs)
	}
	if err := s.DeleteCursorAs(65533, false, "pin"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("another user deleted the cursor: %v", err)
	}
	if err := s.DeleteCursorAs(65534, false, "pin"); err != nil {
		t.Fatal(err)
	}
	m := record.Message{Topic: "t", Key: "k", Value: value(1, 1000)}
	if _, err := s.Publish(&m); err != nil {
		t.Fatalf("a write after the cursor is gone: %v", err)
	}
}

// An error of the file system names its operation and file once: the
// os error already says "mkdir <dir>", so the store does not say it again.
func TestOpenErrorSaysThePathOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(testOptions(t, file))
	if err == nil {
		t.Fatal("a store opened in a file")
	}
	if !errors.Is(err, ErrIO) || strings.Count(err.Error(), file) != 1 || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("error %q: want ErrIO naming %s once, with its cause", err, file)
	}
}

// TestPublishBatchInto: the results go into the caller's slice, which
// must have one for each message; a mismatch writes nothing.
func TestPublishBatchInto(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	msgs := func(n int) []record.Message {
		ms := make([]record.Message, n)
		for i := range ms {
			ms[i] = record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%d", i), Value: value(i, 40)}
		}
		return ms
	}
	var seq uint64
	for _, tc := range []struct {
		name          string
		msgs, results int
		err           error
	}{
		{"empty", 0, 0, nil},
		{"one", 1, 1, nil},
		{"sixteen", 16, 16, nil},
		{"too few results", 3, 2, ErrInvalid},
		{"too many results", 2, 3, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := make([]Result, tc.results)
			ms := msgs(tc.msgs)
			err := s.PublishBatchInto(ms, results)
			if !errors.Is(err, tc.err) {
				t.Fatalf("PublishBatchInto: %v, want %v", err, tc.err)
			}
			if err != nil {
				if last := s.origins.Last(s.Origin()); last != seq {
					t.Fatalf("a refused batch wrote: last seq %d, want %d", last, seq)
				}
				return
			}
			for i, r := range results {
				seq++
				if r.Origin != s.Origin() || r.Seq != seq || !r.Durable && s.opts.Flush == FlushSync {
					t.Fatalf("result %d: %+v, want seq %d", i, r, seq)
				}
				if e, ok := s.Get("prices", ms[i].Key); !ok || e.Stamp.Seq != seq || !bytes.Equal(e.Value, ms[i].Value) {
					t.Fatalf("%s: %+v (found %v), want seq %d", ms[i].Key, e, ok, seq)
				}
			}
		})
	}
}
