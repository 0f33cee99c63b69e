package store

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/view"
)

// TestBootstrapMovesOriginsTogether reads Vector and LastSeq while a
// bootstrap moves 200 origins on (20 of them held already, at seq 1): no
// reader sees some moved and others not, nor a held origin gone for the
// moment its index starts over.
func TestBootstrapMovesOriginsTogether(t *testing.T) {
	const origins, held, mark = 200, 20, 1000
	b := openTest(t, testOptions(t, t.TempDir()))
	now := time.Now()
	for o := uint64(1); o <= held; o++ {
		if _, err := b.AppendRecord(peerRecord(o, 1, now, fmt.Sprint("held-", o))); err != nil {
			t.Fatal(err)
		}
	}
	src := view.New()
	marks := map[uint64]uint64{}
	for o := uint64(1); o <= origins; o++ {
		marks[o] = mark
		src.Apply(peerRecord(o, mark, now, fmt.Sprint("k", o)))
	}
	var snap bytes.Buffer
	if err := view.EncodeSnapshot(&snap, src, 0, marks); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	torn := make(chan string, 2)
	report := func(s string) {
		select {
		case torn <- s:
		default:
		}
	}
	wg.Add(2)
	go func() { // whole vectors
		defer wg.Done()
		for !stop.Load() {
			v := b.Vector()
			n := 0
			for o := uint64(1); o <= origins; o++ {
				if v[o] == mark {
					n++
				}
				if o <= held && v[o] == 0 {
					report(fmt.Sprintf("Vector lacks origin %d, held at seq 1", o))
				}
			}
			if n != 0 && n != origins {
				report(fmt.Sprintf("Vector has %d of %d origins moved on", n, origins))
			}
			reads.Add(1)
		}
	}()
	go func() { // one held origin at a time
		defer wg.Done()
		for o := uint64(1); !stop.Load(); o = o%held + 1 {
			if b.LastSeq(o) == 0 {
				report(fmt.Sprintf("LastSeq(%d) is 0, held at seq 1", o))
			}
			reads.Add(1)
		}
	}()
	for reads.Load() < 100 {
		time.Sleep(time.Millisecond) // both readers are going
	}
	moved, err := b.Bootstrap(bytes.NewReader(snap.Bytes()))
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-torn:
		t.Fatal(s)
	default:
	}
	if len(moved) != origins || b.LastSeq(origins) != mark {
		t.Fatalf("moved %d origins, origin %d at %d", len(moved), origins, b.LastSeq(origins))
	}
	if _, err := b.AppendRecord(peerRecord(1, mark+1, now, "after")); err != nil {
		t.Fatalf("record after the mark: %v", err)
	}
}
