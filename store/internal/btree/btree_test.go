package btree

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// ref is a tree's reference: its keys, sorted.
type ref []int

func (r *ref) insert(k int) {
	if i, found := slices.BinarySearch(*r, k); !found {
		*r = slices.Insert(*r, i, k)
	}
}

func (r *ref) delete(k int) {
	if i, found := slices.BinarySearch(*r, k); found {
		*r = slices.Delete(*r, i, i+1)
	}
}

func intLess(a, b int) bool { return a < b }

// check fails tb unless t holds exactly want, in order (Ascend, Len, Get,
// AscendGreaterOrEqual from a few pivots), and keeps the shape of a
// B-tree: every leaf at one depth, len(children) == len(items)+1 in inner
// nodes, at most maxItems items a node, at least one but in the root,
// every item between the items around its subtree.
func check(tb testing.TB, t *BTreeG[int], want ref) {
	tb.Helper()
	var got []int
	t.Ascend(func(k int) bool { got = append(got, k); return true })
	if !slices.Equal(got, want) || t.Len() != len(want) {
		tb.Fatalf("Ascend %v, Len %d; want %v", got, t.Len(), want)
	}
	for _, k := range want {
		if g, ok := t.Get(k); !ok || g != k {
			tb.Fatalf("Get(%d) = %d, %v", k, g, ok)
		}
	}
	for _, pivot := range []int{-1, 0, 7, 100, 1000} {
		i, _ := slices.BinarySearch(want, pivot)
		var from []int
		t.AscendGreaterOrEqual(pivot, func(k int) bool { from = append(from, k); return len(from) < 5 })
		if w := want[i:min(i+5, len(want))]; !slices.Equal(from, w) {
			tb.Fatalf("AscendGreaterOrEqual(%d) %v, want %v", pivot, from, w)
		}
	}
	if t.root != nil {
		leaf := -1
		checkNode(tb, t, t.root, 0, &leaf, nil, nil)
	}
}

func checkNode(tb testing.TB, t *BTreeG[int], n *node[int], depth int, leaf *int, lo, hi *int) {
	tb.Helper()
	if len(n.items) > t.maxItems() || (n != t.root && len(n.items) == 0) {
		tb.Fatalf("a node at depth %d holds %d items (max %d)", depth, len(n.items), t.maxItems())
	}
	for i, k := range n.items {
		if (i > 0 && n.items[i-1] >= k) || (lo != nil && k <= *lo) || (hi != nil && k >= *hi) {
			tb.Fatalf("node %v out of order (bounds %v, %v)", n.items, lo, hi)
		}
	}
	if len(n.children) == 0 {
		if *leaf >= 0 && *leaf != depth {
			tb.Fatalf("leaves at depths %d and %d", *leaf, depth)
		}
		*leaf = depth
		return
	}
	if len(n.children) != len(n.items)+1 {
		tb.Fatalf("%d items, %d children", len(n.items), len(n.children))
	}
	for i, c := range n.children {
		clo, chi := lo, hi
		if i > 0 {
			clo = &n.items[i-1]
		}
		if i < len(n.items) {
			chi = &n.items[i]
		}
		checkNode(tb, t, c, depth+1, leaf, clo, chi)
	}
}

// fill is the mean number of items a node of t holds, and its nodes.
func fill(t *BTreeG[int]) (float64, int) {
	var nodes, items int
	var walk func(n *node[int])
	walk = func(n *node[int]) {
		nodes++
		items += len(n.items)
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(t.root)
	return float64(items) / float64(nodes), nodes
}

// TestLoadShapes loads trees in ascending, descending and random order
// and checks them against their reference. An ascending load leaves its
// nodes full but for the appendSplit's margin and the rightmost path (the
// reason for the fork; google/btree's leaves hold about degree-1); the
// others split in the middle, as the library does.
func TestLoadShapes(t *testing.T) {
	for _, tc := range []struct {
		order    string
		degree   int
		keys     int
		minFill  float64 // the mean items a node at least
		fullFrom int     // the least items of every node off the rightmost path, if > 0
	}{
		{"ascending", 32, 20_000, 60, 61},
		{"ascending", 3, 10_000, 2.9, 3},
		{"descending", 32, 20_000, 30, 0},
		{"random", 32, 20_000, 38, 0},
		{"random", 3, 10_000, 2.5, 0},
	} {
		t.Run(fmt.Sprintf("%s/degree=%d", tc.order, tc.degree), func(t *testing.T) {
			keys := make([]int, tc.keys)
			for i := range keys {
				keys[i] = i
			}
			switch tc.order {
			case "descending":
				slices.Reverse(keys)
			case "random":
				rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			}
			tr := NewG(tc.degree, intLess)
			for _, k := range keys {
				if _, replaced := tr.ReplaceOrInsert(k); replaced {
					t.Fatalf("%d replaced", k)
				}
			}
			want := slices.Sorted(slices.Values(keys))
			check(t, tr, want)
			mean, nodes := fill(tr)
			if mean < tc.minFill {
				t.Errorf("%d nodes of %.1f items on average, want at least %.1f", nodes, mean, tc.minFill)
			}
			if tc.fullFrom > 0 {
				checkFull(t, tr.root, tc.fullFrom, true)
			}
			// Every key replaced, then every other deleted, in the load's order.
			for _, k := range keys {
				if old, replaced := tr.ReplaceOrInsert(k); !replaced || old != k {
					t.Fatalf("ReplaceOrInsert(%d) again = %d, %v", k, old, replaced)
				}
			}
			var left ref = slices.Clone(want)
			for i, k := range keys {
				if i%2 == 0 {
					if old, ok := tr.Delete(k); !ok || old != k {
						t.Fatalf("Delete(%d) = %d, %v", k, old, ok)
					}
					left.delete(k)
				}
			}
			check(t, tr, left)
		})
	}
}

// checkFull fails t if a node off the tree's rightmost path holds fewer
// than least items.
func checkFull(t *testing.T, n *node[int], least int, rightmost bool) {
	t.Helper()
	if !rightmost && len(n.items) < least {
		t.Fatalf("a node off the rightmost path holds %d items, want at least %d", len(n.items), least)
	}
	for i, c := range n.children {
		checkFull(t, c, least, rightmost && i == len(n.children)-1)
	}
}

// TestClone writes to a tree and to its clones after each Clone: no write
// shows through to the other trees.
func TestClone(t *testing.T) {
	tr := NewG(3, intLess)
	var want ref
	type frozen struct {
		t    *BTreeG[int]
		want ref
	}
	var clones []frozen
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 20 {
		for range 200 {
			k := rng.IntN(1000)
			if rng.IntN(3) == 0 {
				tr.Delete(k)
				want.delete(k)
			} else {
				tr.ReplaceOrInsert(k)
				want.insert(k)
			}
		}
		c := tr.Clone()
		if round%2 == 1 { // the clone goes on, the original stays
			tr, c = c, tr
		}
		clones = append(clones, frozen{c, slices.Clone(want)})
		for _, f := range clones {
			check(t, f.t, f.want)
		}
	}
	// A clone written to in turn leaves its source as it was.
	f := clones[len(clones)/2]
	c := f.t.Clone()
	var cw ref = slices.Clone(f.want)
	for k := range 500 {
		c.ReplaceOrInsert(k + 2000)
		cw.insert(k + 2000)
		c.Delete(k)
		cw.delete(k)
	}
	check(t, c, cw)
	for _, f := range clones {
		check(t, f.t, f.want)
	}
}

// FuzzTree runs a program of inserts, ascending runs of inserts, deletes,
// runs of deletes and clones against sorted references, checking every
// tree (the live one and every clone, frozen) after each step. The first
// byte picks the degree (2 to 5: small nodes, so that few keys split and
// merge them); each step is two bytes, the operation and a key.
func FuzzTree(f *testing.F) {
	f.Add([]byte{1, 5, 0, 5, 40, 2, 10, 7, 0, 7, 40, 6, 0, 2, 60, 5, 100, 7, 90})
	f.Add([]byte{0, 0, 1, 0, 2, 0, 3, 0, 4, 2, 1, 2, 3, 5, 5, 6, 0, 7, 4, 2, 0})
	f.Add([]byte{3, 5, 0, 5, 30, 5, 60, 6, 0, 7, 10, 7, 50, 4, 0, 3, 61})
	f.Fuzz(runProgram)
}

// runProgram is FuzzTree's program run.
func runProgram(t *testing.T, prog []byte) {
	{
		if len(prog) == 0 {
			return
		}
		degree := 2 + int(prog[0])%4
		tr := NewG(degree, intLess)
		var want ref
		type frozen struct {
			t    *BTreeG[int]
			want ref
		}
		var clones []frozen
		for i := 1; i+1 < len(prog); i += 2 {
			op, k := prog[i]%8, int(prog[i+1])
			switch op {
			case 0, 1:
				tr.ReplaceOrInsert(k)
				want.insert(k)
			case 2:
				_, ok := tr.Delete(k)
				if _, in := slices.BinarySearch(want, k); ok != in {
					t.Fatalf("Delete(%d) = %v, want %v", k, ok, in)
				}
				want.delete(k)
			case 3:
				if _, ok := tr.Get(k); ok != slices.Contains(want, k) {
					t.Fatalf("Get(%d) = %v", k, ok)
				}
			case 4, 5: // an ascending run: appendSplits
				for j := k; j < k+4*degree*degree; j++ {
					tr.ReplaceOrInsert(j)
					want.insert(j)
				}
			case 6:
				if len(clones) < 4 {
					clones = append(clones, frozen{tr.Clone(), slices.Clone(want)})
				}
			case 7: // a descending run of deletes
				for j := k + 3*degree*degree; j >= k; j-- {
					tr.Delete(j)
					want.delete(j)
				}
			}
			check(t, tr, want)
			for _, c := range clones {
				check(t, c.t, c.want)
			}
		}
	}
}

// leaf and inner build trees by hand for TestDeleteSmallNodes.
func leaf(keys ...int) *node[int] { return &node[int]{items: keys} }

func inner(keys []int, children ...*node[int]) *node[int] {
	return &node[int]{items: keys, children: children}
}

// TestDeleteSmallNodes deletes every key, in turn, of trees whose nodes
// hold fewer than minItems items, as the right node of an appendSplit
// does: merging two of them can leave the root with no item and one
// child below minItems, which must then not be grown (it has no sibling)
// but taken as the root to be.
func TestDeleteSmallNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() *node[int]
	}{
		{"two small leaves", func() *node[int] { return inner([]int{10}, leaf(5), leaf(15)) }},
		{"two small inner nodes", func() *node[int] {
			return inner([]int{20}, inner([]int{10}, leaf(5), leaf(15)), inner([]int{30}, leaf(25), leaf(35)))
		}},
		{"a full leaf beside small ones", func() *node[int] {
			return inner([]int{7, 9}, leaf(0, 1, 2, 3, 4, 5, 6), leaf(8), leaf(10))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var all ref
			var walk func(n *node[int])
			walk = func(n *node[int]) {
				for _, k := range n.items {
					all.insert(k)
				}
				for _, c := range n.children {
					walk(c)
				}
			}
			walk(tc.build())
			for _, k := range all {
				tr := NewG(4, intLess)
				tr.root, tr.length = tc.build(), len(all)
				var setCow func(n *node[int])
				setCow = func(n *node[int]) {
					n.cow = tr.cow
					for _, c := range n.children {
						setCow(c)
					}
				}
				setCow(tr.root)
				check(t, tr, all)
				if old, ok := tr.Delete(k); !ok || old != k {
					t.Fatalf("Delete(%d) = %d, %v", k, old, ok)
				}
				want := slices.Clone(all)
				want.delete(k)
				check(t, tr, want)
			}
		})
	}
}
