package segment

import (
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestSwitchKicksThePreparerByRate: a writer that filled its last
// segment slowly (the ready bytes last it far longer than switchLater)
// switches without kicking the preparer, which makes the next segment
// within switchLater all the same, and the writer's next kick is where
// its segment's ready bytes run out; a fast writer kicks it at once.
func TestSwitchKicksThePreparerByRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		took  time.Duration // how long the writer "took" to fill its last segment
		later bool
	}{
		{"slow writer", 10 * time.Second, true},
		{"fast writer", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openTestLog(t, t.TempDir())
			testkit.Eventually(t, 10*time.Second, "the next segment made ahead", func() bool {
				l.mu.Lock()
				defer l.mu.Unlock()
				return len(l.ready) == l.maxReady
			})
			n := 0
			for {
				if m := testMessage(n, 64<<10); l.WritePos()+entrySize(m.EncodedSize()) > testSegSize {
					break
				}
				if _, err := write(l, n, 64<<10); err != nil {
					t.Fatal(err)
				}
				l.Commit()
				n++
			}
			l.switcher.at = time.Now().Add(-tc.took)
			if _, err := write(l, n, 64<<10); err != nil { // into the second segment
				t.Fatal(err)
			}
			if l.WritePos() <= testSegSize {
				t.Fatalf("the writer is at %d, not in the second segment", l.WritePos())
			}
			if armed := l.switcher.armed.Load(); armed != tc.later {
				t.Fatalf("kick left for later: %v, want %v", armed, tc.later)
			}
			if want := testSegSize + l.window/2; tc.later && l.prepAt.Load() != want {
				t.Fatalf("the writer's next kick at %d, want %d (half a window before its ready bytes end)", l.prepAt.Load(), want)
			}
			l.Commit()
			testkit.Eventually(t, 10*time.Second, "the segment after the writer's made", func() bool {
				l.mu.Lock()
				defer l.mu.Unlock()
				return len(l.ready) == l.maxReady && l.ready[0].base == 2*testSegSize && !l.switcher.armed.Load()
			})
		})
	}
}
