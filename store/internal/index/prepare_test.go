package index

import (
	"fmt"
	"sync"
	"testing"
)

// TestTopicsPrepare: a prepared index is the one the first Append uses,
// readers see the topic only once it has an entry, prepares racing with
// the writer make each index once, and Close closes what was prepared and
// never appended to.
func TestTopicsPrepare(t *testing.T) {
	dir := t.TempDir()
	ti := openTestTopics(t, dir, 1024)
	if err := ti.Prepare("a"); err != nil {
		t.Fatal(err)
	}
	if ti.Get("a") != nil {
		t.Fatal("a prepared topic is visible before its first entry")
	}
	prepared := ti.prepared["a"]
	if _, err := ti.Append([]byte("a"), Entry{Pos: 0, Size: 64}); err != nil {
		t.Fatal(err)
	}
	if got := ti.Get("a"); got == nil || got != prepared || got.Len() != 1 {
		t.Fatalf("Get(a) = %v, want the prepared index with one entry", got)
	}
	if err := ti.Prepare("a"); err != nil || len(ti.prepared) != 0 {
		t.Fatalf("Prepare of a known topic: %v, %d prepared", err, len(ti.prepared))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if err := ti.Prepare(fmt.Sprintf("t%d", (i+g)%50)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range 50 {
		if _, err := ti.Append(fmt.Appendf(nil, "t%d", i), Entry{Pos: int64(64 * (i + 1)), Size: 64}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := range 50 {
		if got := ti.Get(fmt.Sprintf("t%d", i)); got == nil || got.Len() != 1 {
			t.Fatalf("t%d: %v", i, got)
		}
	}
	if err := ti.Prepare("never"); err != nil {
		t.Fatal(err)
	}
	if err := ti.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ti.Prepare("late"); err == nil {
		t.Fatal("Prepare after Close succeeded")
	}
	ti = openTestTopics(t, dir, 1024)
	defer ti.Close()
	if got := ti.Get("a"); got == nil || got.Len() != 1 {
		t.Fatalf("after reopening, Get(a) = %v", got)
	}
}
