package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// TestDiskFull runs the store on a real, tiny file system (a 1 MiB tmpfs
// the test mounts itself; it needs root, as CI has) until the disk is full,
// and checks the promise: a clear ErrDiskFull, no crash, nothing written
// before lost, the store still readable; and once space is given back,
// writing goes on.
func TestDiskFull(t *testing.T) {
	mnt, remount := testkit.Tmpfs(t, "1m")

	o := testOptions(t, mnt)
	s := openTest(t, o)
	var acked int
	var err error
	for i := 0; i < 10000; i++ {
		m := record.Message{Topic: "t", Key: fmt.Sprint(i), Value: value(i, 2000)}
		if _, err = s.Publish(&m); err != nil {
			break
		}
		acked++
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("after %d writes: %v, want ErrDiskFull", acked, err)
	}
	if acked == 0 {
		t.Fatal("nothing fit on the file system")
	}
	t.Logf("%d writes acknowledged, then: %v", acked, err)
	if !errors.Is(s.DiskFull(), ErrDiskFull) {
		t.Fatalf("DiskFull() = %v on a full disk", s.DiskFull())
	}
	// Still full: the same clear error, again and again, nothing torn.
	for i := 0; i < 5; i++ {
		m := record.Message{Topic: "t", Key: "more", Value: value(i, 2000)}
		if _, err := s.Publish(&m); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("retry %d on a full disk: %v", i, err)
		}
	}
	// A write small enough for what is left of the current segment may
	// pass; the disk is still full for the next segment, and says so.
	tiny := record.Message{Topic: "t", Key: "tiny", Value: []byte("x")}
	tinies := 0
	if _, err := s.Publish(&tiny); err == nil {
		if !errors.Is(s.DiskFull(), ErrDiskFull) {
			t.Fatalf("DiskFull() = %v after a tiny write passed, with no room for the next segment", s.DiskFull())
		}
		tinies++
	}
	t.Logf("a tiny write on the full disk: %d passed", tinies)
	check := func(s *Store) {
		t.Helper()
		for i := 0; i < acked; i++ {
			e, ok := s.Get("t", fmt.Sprint(i))
			if !ok || !bytes.Equal(e.Value, value(i, 2000)) {
				t.Fatalf("key %d lost on a full disk", i)
			}
		}
		if recs := readAll(t, s); len(recs) != acked+tinies {
			t.Fatalf("log holds %d records, %d acknowledged", len(recs), acked+tinies)
		}
	}
	check(s)
	if err := s.Close(); err != nil { // no room for its snapshot: the previous one stays, the log is enough
		t.Fatalf("Close on a full disk: %v, want a clean stop", err)
	}

	// Give the file system room, reopen, and go on.
	remount("8m")
	s = openTest(t, o)
	defer s.Close()
	check(s)
	m := record.Message{Topic: "t", Key: "after", Value: []byte("room again")}
	if res, err := s.Publish(&m); err != nil || res.Seq != uint64(acked+tinies+1) {
		t.Fatalf("publish after space came back: %+v %v", res, err)
	}
}

// TestDiskFullInTheWindow is TestDiskFull with the default 64 MiB segments
// on a 12 MiB tmpfs: the segment files are sparse, and the disk fills when
// the writer (or the preparer) allocates the next window ahead of the
// writer: a clear ErrDiskFull, no fault on a page, nothing lost.
func TestDiskFullInTheWindow(t *testing.T) {
	mnt, _ := testkit.Tmpfs(t, "12m")

	o := DefaultOptions(mnt)
	s := openTest(t, o)
	const size = 256 << 10
	var acked int
	var err error
	for i := 0; i < 1000; i++ {
		m := record.Message{Topic: "t", Key: fmt.Sprint(i), Value: value(i, size)}
		if _, err = s.Publish(&m); err != nil {
			break
		}
		acked++
	}
	if !errors.Is(err, ErrDiskFull) || acked == 0 {
		t.Fatalf("after %d writes: %v, want ErrDiskFull after some", acked, err)
	}
	t.Logf("%d writes of %d KiB acknowledged, then: %v", acked, size>>10, err)
	if err := s.Healthy(); err != nil && !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Healthy() = %v: a full disk is no i/o error", err)
	}
	for i := 0; i < acked; i++ {
		if e, ok := s.Get("t", fmt.Sprint(i)); !ok || !bytes.Equal(e.Value, value(i, size)) {
			t.Fatalf("key %d lost on a full disk", i)
		}
	}
	if recs := readAll(t, s); len(recs) != acked {
		t.Fatalf("log holds %d records, %d acknowledged", len(recs), acked)
	}
}

// TestDiskFullBatches is TestDiskFull with batches of 16 over two topics
// (runs of each within a batch): a batch is acknowledged whole or refused
// whole, and the log, the indexes and the view hold exactly the
// acknowledged messages, before and after a restart.
func TestDiskFullBatches(t *testing.T) {
	mnt, remount := testkit.Tmpfs(t, "1m")
	o := testOptions(t, mnt)
	s := openTest(t, o)
	var acked []record.Message
	var err error
	for b := 0; b < 10000 && err == nil; b++ {
		batch := make([]record.Message, 16)
		for i := range batch {
			n := len(acked) + i
			batch[i] = record.Message{Topic: []string{"a", "b"}[i/5%2], Key: fmt.Sprint(n), Value: value(n, 300)}
		}
		if _, err = s.PublishBatch(batch); err == nil {
			acked = append(acked, batch...)
		}
	}
	if !errors.Is(err, ErrDiskFull) || len(acked) == 0 {
		t.Fatalf("after %d messages: %v, want ErrDiskFull after some", len(acked), err)
	}
	t.Logf("%d messages in batches of 16 acknowledged, then: %v", len(acked), err)
	check := func(s *Store) {
		t.Helper()
		perTopic := map[string]uint64{}
		for _, m := range acked {
			perTopic[m.Topic]++
			if e, ok := s.Get(m.Topic, m.Key); !ok || !bytes.Equal(e.Value, m.Value) {
				t.Fatalf("%s/%s lost on a full disk", m.Topic, m.Key)
			}
		}
		if recs := readAll(t, s); len(recs) != len(acked) {
			t.Fatalf("log holds %d records, %d acknowledged", len(recs), len(acked))
		}
		for topic, n := range perTopic {
			if ti := s.topics.Get(topic); ti == nil || ti.Len() != n {
				t.Fatalf("topic %s's index holds %v entries, %d acknowledged", topic, ti, n)
			}
		}
		if last := s.origins.Last(s.origin); last != uint64(len(acked)) {
			t.Fatalf("origin index up to seq %d, %d acknowledged", last, len(acked))
		}
	}
	check(s)
	s.Close()
	remount("8m")
	s = openTest(t, o)
	defer s.Close()
	check(s)
	if _, err := s.PublishBatch(acked[:16]); err != nil {
		t.Fatalf("a batch once space came back: %v", err)
	}
}
