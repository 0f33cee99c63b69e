package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestResumeOffsetNeverPassesAWriteInProgress: while a peer's record of
// an origin new to this node is being appended (its topic entry is in the
// index before its origin's index exists, which takes a directory and a
// file: a wide window), ResumeOffset with a done vector that does not
// cover it answers its offset or before, never after: a reader started
// there meets it. Answering past it skipped it for good (group: a
// member's first message never delivered). TestResumeOffsetDuringPublish
// is the same for this node's own publishes.
func TestResumeOffsetNeverPassesAWriteInProgress(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	const rounds = 200
	// The record being written: its offset, and the vector that covers
	// every record before it.
	type writing struct {
		base uint64
		done map[uint64]uint64
	}
	var (
		cur     atomic.Pointer[writing]
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		passed  []string
		checked atomic.Int64
	)
	cur.Store(&writing{done: map[uint64]uint64{}})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			w := cur.Load()
			if got := s.ResumeOffset("t", w.done); got > w.base {
				mu.Lock()
				passed = append(passed, fmt.Sprintf("offset %d while the record at %d was not covered", got, w.base))
				mu.Unlock()
			}
			checked.Add(1)
		}
	}()
	for i := range rounds {
		// Each record is the first of a new origin; every record before it
		// is covered by done.
		cur.Store(&writing{base: s.TopicEnd("t"), done: s.Vector()})
		at := checked.Load()
		if _, err := s.AppendRecord(peerRecord(uint64(1000+i), 1, time.Now(), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		for checked.Load() < at+2 {
			time.Sleep(time.Millisecond) // the checker ran across the write
		}
	}
	close(stop)
	wg.Wait()
	if len(passed) > 0 {
		t.Fatalf("%d answers past a record not covered, first: %s", len(passed), passed[0])
	}
	// And the reader started at the answer meets the last record.
	v := s.Vector()
	delete(v, uint64(1000+rounds-1))
	r, err := s.NewTopicReader("t", Start{From: FromOffset, Offset: s.ResumeOffset("t", v)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := r.Next(ctx)
	if err != nil || d.Record.Origin() != uint64(1000+rounds-1) {
		t.Fatalf("a reader at the resume offset read %v, %v", d.Record, err)
	}
}
