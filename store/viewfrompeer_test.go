package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// TestViewFromPeers opens a store whose snapshot is damaged, missing or
// older than the log's start (an old copy put back) while its log was
// recycled since: without Options.ViewFromPeers Open
// fails; with it the store opens with what the log holds, waits for a
// peer's snapshot (ViewFromPeer), writes none and sends none meanwhile
// (a restart finds the same state), and a Bootstrap makes it whole.
func TestViewFromPeers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, early []byte)
		aside  bool
	}{
		{"damaged", func(t *testing.T, path string, _ []byte) { testkit.FlipMiddleByte(t, path) }, true},
		{"missing", func(t *testing.T, path string, _ []byte) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"older than the log", func(t *testing.T, path string, early []byte) {
			if err := os.WriteFile(path, early, 0o640); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := testOptions(t, dir)
			o.RetentionBytes = 4 * o.SegmentSize
			peerSnap, early := recycledStore(t, o)
			path := filepath.Join(dir, snapshotName)
			tc.damage(t, path, early)

			if _, err := Open(o); err == nil || !errors.Is(err, ErrCorrupt) && !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("Open without ViewFromPeers: %v, want a corrupt snapshot refused", err)
			}
			o.ViewFromPeers = true
			for run := range 2 { // a restart before the peer's snapshot finds the same
				s := openTest(t, o)
				if lost, pending := s.ViewFromPeer(); !lost || !pending {
					t.Fatalf("ViewFromPeer = %v, %v; want lost and pending", lost, pending)
				}
				if _, ok := s.Get("prices", "old-0"); ok {
					t.Fatal("old-0, only in the recycled log, is in the view before the peer's snapshot")
				}
				if (s.SnapshotSetAside() != "") != (tc.aside && run == 0) { // set aside once
					t.Fatalf("SnapshotSetAside %q", s.SnapshotSetAside())
				}
				if err := s.SnapshotTo(io.Discard); !errors.Is(err, errViewPending) {
					t.Fatalf("SnapshotTo of a partial view: %v", err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a snapshot of the partial view was written: %v", err)
				}
			}
			s := openTest(t, o)
			if _, err := s.Bootstrap(bytes.NewReader(peerSnap)); err != nil {
				t.Fatal(err)
			}
			if lost, pending := s.ViewFromPeer(); !lost || pending {
				t.Fatalf("ViewFromPeer after the bootstrap = %v, %v; want lost, not pending", lost, pending)
			}
			for i := range 50 {
				if _, ok := s.Get("prices", fmt.Sprint("old-", i)); !ok {
					t.Fatalf("old-%d missing after the peer's snapshot", i)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, o) // whole: the snapshot written since loads
			if lost, pending := s.ViewFromPeer(); lost || pending {
				t.Fatalf("ViewFromPeer after a restart = %v, %v; want neither", lost, pending)
			}
		})
	}
}

// recycledStore writes 50 keys, then enough to recycle their records,
// closes the store and returns its good snapshot (a peer's, for the test)
// and the snapshot taken after the 50 keys, which the log has outgrown.
func recycledStore(t *testing.T, o Options) (good, early []byte) {
	s := openTest(t, o)
	for i := range 50 {
		if _, err := s.Publish(&record.Message{Topic: "prices", Key: fmt.Sprint("old-", i), Value: value(i, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	early, err := os.ReadFile(filepath.Join(o.Dir, snapshotName))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; s.seglog.Oldest() == 0; i++ {
		if i == 10_000 {
			t.Fatal("the log was not recycled after 10,000 writes")
		}
		_, err := s.Publish(&record.Message{Topic: "filler", Key: fmt.Sprint(i % 10), Value: value(i, 1000)})
		if errors.Is(err, ErrFull) {
			err = s.Snapshot() // the retention waits for the snapshot to cover the oldest segment
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good, err = os.ReadFile(filepath.Join(o.Dir, snapshotName))
	if err != nil {
		t.Fatal(err)
	}
	return good, early
}
