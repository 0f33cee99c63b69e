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

// TestKeyIndexFill checks how full the tables stay as keys come: at
// most 7/8 (a probe ends), and a table that split off another more than
// half full (keySplitFill; two tables of keyTableMax slots would be 44%
// full after a split), at sizes right after a wave of splits and
// between.
func TestKeyIndexFill(t *testing.T) {
	for _, keys := range []int{2_000, 3_700, 7_400, 30_000, 60_000} {
		t.Run(fmt.Sprint(keys), func(t *testing.T) {
			var x keyIndex
			for i := range keys {
				x.set(placeholderItem(fmt.Sprintf("sku-%07d", i)))
			}
			slots, tables := 0, 0
			for i := 0; i < len(x.dir); i += 1 << (x.depth - x.dir[i].depth) {
				tb := x.dir[i]
				slots += len(tb.tags)
				tables++
				if tb.n*8 > len(tb.tags)*7 || tb.depth > 0 && tb.n*2 <= len(tb.tags) {
					t.Fatalf("a table of depth %d holds %d keys in %d slots", tb.depth, tb.n, len(tb.tags))
				}
			}
			t.Logf("%d keys: %d tables, %.2f slots a key", keys, tables, float64(slots)/float64(keys))
		})
	}
}
