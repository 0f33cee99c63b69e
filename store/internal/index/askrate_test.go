package index

import (
	"slices"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestArrayAsksThePreparerByRate: at each ask, a writer whose ready
// entries would last it far longer than twice the preparer's delay
// leaves its next chunks to the preparer's timer (later), a fast one has
// them made at once, and so does a slow one whose preparer is behind
// (none made ahead past the first chunk). Each chunk the writer crosses
// into is counted by who made it: the preparer, but for the one a slow
// writer reaches before the timer (never fired here) made it.
func TestArrayAsksThePreparerByRate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		took       time.Duration // how long the writer took since its last ask, at each ask
		fire       bool          // the test fires the preparer's timer after a later ask
		now        []bool        // at once, at each of the writer's asks
		writerMade int           // of the chunks it crosses into
	}{
		{"fast writer", 0, false, []bool{true, true, true, true}, 0},
		{"slow writer", 1000 * time.Hour, true, []bool{false, false, false, false}, 0},
		{"slow writer, preparer behind", 1000 * time.Hour, false, []bool{false, true, false, true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// With an hour's delay, only an ask at once or the test's
			// firing of the timer makes a chunk ahead.
			p := newPreparer(time.Hour)
			defer p.stop()
			a := openPreparedArray(t, t.TempDir(), 4, 64, p)
			defer a.close()
			var asks []bool
			byPreparer, byWriter := 0, 0
			// Chunks 0, 4, 12, 28, 60: asks at 2, 6, 14, 30; crossings
			// at 4, 12, 28, 60.
			for n := uint64(0); n <= 60; n++ {
				asking := n > 0 && a.prepAt.Load() <= n+1
				crossing := n > 0 && n == a.chunks[len(a.chunks)-1].end()
				var ahead *arrayChunk
				if asking {
					a.askedAt = time.Now().Add(-tc.took)
				}
				if crossing {
					if next := nextChunks(a); len(next) > 0 {
						ahead = next[0]
					}
				}
				appendEntries(t, a, n, n+1)
				if crossing {
					if last := a.chunks[len(a.chunks)-1]; ahead != nil && last == ahead {
						byPreparer++
					} else {
						byWriter++
					}
				}
				if asking {
					asks = append(asks, askedLater(t, p, a, tc.fire))
				}
			}
			checkArray(t, a, 0, 61)
			want := make([]bool, len(tc.now))
			for i, now := range tc.now {
				want[i] = !now
			}
			if !slices.Equal(asks, want) {
				t.Errorf("asks left for later %v, want %v", asks, want)
			}
			if byWriter != tc.writerMade || byPreparer != 4-tc.writerMade {
				t.Errorf("chunks crossed into: %d made by the preparer, %d by the writer; want %d by the writer",
					byPreparer, byWriter, tc.writerMade)
			}
		})
	}
}

// nextChunks is a's chunks made ahead.
func nextChunks(a *array) []*arrayChunk {
	a.prepMu.Lock()
	defer a.prepMu.Unlock()
	return slices.Clone(a.next)
}

// askedLater says whether the writer's ask just made was left for
// p's timer, and sees it through: an ask at once is waited for until
// its chunks are made; one left for later, if fire, by firing the
// timer and waiting for the chunks, else by dropping it, as if the timer
// never fired.
func askedLater(t *testing.T, p *preparer, a *array, fire bool) bool {
	t.Helper()
	p.mu.Lock()
	later := p.later[a]
	switch {
	case later && fire:
		p.timer.Reset(0)
	case later:
		p.timer.Stop()
		p.timer = nil
		delete(p.later, a)
		p.mu.Unlock()
		return true
	}
	p.mu.Unlock()
	testkit.Eventually(t, 10*time.Second, "the chunks asked for made ahead", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(nextChunks(a)) == aheadChunks && !p.later[a]
	})
	return later
}
