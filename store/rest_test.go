package store

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// TestRestReleasesLogAndIndexPages: once the writer is quiet for a
// housekeeping round, none of the log's or the indexes' pages stay in
// the process's resident set (smaps), whatever the writer kept there;
// every record reads back through the topic index, a write after the rest
// goes through, and every record reads back after a reopen.
func TestRestReleasesLogAndIndexPages(t *testing.T) {
	const n, size = 20000, 1000 // 20 MB: a part of one 64 MiB segment
	dir := t.TempDir()
	o := DefaultOptions(dir)
	o.FlushInterval = 10 * time.Millisecond
	s := openTest(t, o)
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			m := record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%d", i), Value: value(i, size)}
			if _, err := s.Publish(&m); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	resident := func() int64 {
		return testkit.ResidentUnder(t, filepath.Join(dir, logDirName)) + testkit.ResidentUnder(t, filepath.Join(dir, indexDirName))
	}
	publish(0, n)
	if r := resident(); r < 1<<20 {
		t.Fatalf("%d bytes of the log and indexes resident after the writes, want the writer's pages", r)
	}
	testkit.Eventually(t, 20*time.Second, "the log's and the indexes' pages released at rest", func() bool { return resident() == 0 })
	readAll := func(s *Store, n int) {
		t.Helper()
		ti := s.topics.Get("prices")
		if ti == nil || ti.Len() != uint64(n) {
			t.Fatalf("topic index: %v, want %d entries", ti, n)
		}
		for i := range n {
			e, err := ti.Entry(uint64(i))
			if err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
			if _, err := s.seglog.Read(e.Pos, func(r record.Record) error {
				if !bytes.Equal(r.Value(), value(i, size)) {
					t.Fatalf("record %d at %d differs", i, e.Pos)
				}
				return nil
			}); err != nil {
				t.Fatalf("record %d at %d: %v", i, e.Pos, err)
			}
		}
	}
	readAll(s, n)
	publish(n, n+1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	readAll(openTest(t, o), n+1)
}
