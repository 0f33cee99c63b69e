package view

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeyIndexAgainstMap runs random sets, replacements and deletes on a
// keyIndex and on a map side by side, through table doublings and
// splits, and checks get, len and all against the map after each round.
func TestKeyIndexAgainstMap(t *testing.T) {
	cases := []struct {
		name       string
		hint, keys int
		ops        int
		delPercent int
	}{
		{"small, no deletes", 0, 50, 2_000, 0},
		{"splits, few deletes", 0, 20_000, 60_000, 10},
		{"presized, many deletes", 5_000, 8_000, 40_000, 45},
		{"grows from empty to all deleted", 0, 3_000, 30_000, 70},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(c.keys)))
			x := newKeyIndex(c.hint)
			model := map[string]*viewItem{}
			for op := range c.ops {
				k := fmt.Sprintf("key-%d", rng.IntN(c.keys))
				if rng.IntN(100) < c.delPercent {
					x.delete(k)
					delete(model, k)
				} else {
					it := placeholderItem(k)
					x.set(it)
					model[k] = it
				}
				if op%(c.ops/10) == 0 || op == c.ops-1 {
					checkKeyIndex(t, &x, model, c.keys)
				}
			}
			if c.keys > keyTableMax && x.depth == 0 {
				t.Fatalf("%d keys and the index never split its table", c.keys)
			}
			g := x.grown(4 * c.keys)
			checkKeyIndex(t, &g, model, c.keys)
		})
	}
}

// checkKeyIndex checks x against model, for keys key-0 to key-(keys-1).
func checkKeyIndex(t *testing.T, x *keyIndex, model map[string]*viewItem, keys int) {
	t.Helper()
	if x.len() != len(model) {
		t.Fatalf("len = %d, the map holds %d", x.len(), len(model))
	}
	for i := range keys {
		k := fmt.Sprintf("key-%d", i)
		if got, want := x.get(k), model[k]; got != want {
			t.Fatalf("get(%s) = %p, the map holds %p", k, got, want)
		}
	}
	seen := map[string]bool{}
	for it := range x.all() {
		if seen[it.key()] || model[it.key()] != it {
			t.Fatalf("all yields %s (%p) again or not in the map (%p)", it.key(), it, model[it.key()])
		}
		seen[it.key()] = true
	}
	if len(seen) != len(model) {
		t.Fatalf("all yields %d entries, the map holds %d", len(seen), len(model))
	}
}
