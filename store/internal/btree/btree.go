// Copyright 2014-2022 Google Inc.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.
//
// Modified by the cachecast authors: a fork of github.com/google/btree
// v1.1.3's generic tree (btree_generic.go), cut to what the view uses, with
// one change of behaviour: an insert past the last item of a full node
// splits it at its end (appendSplit), not in its middle; and a split's new
// node made with room for 8 items at least (withRoom).

// Package btree is an in-memory B-tree of arbitrary degree with lazy
// copy-on-write clones: a fork of github.com/google/btree v1.1.3's BTreeG,
// cut to the methods store/view uses (ReplaceOrInsert, Delete, Get, Len,
// Ascend, AscendGreaterOrEqual, Clone), whose names and semantics are the
// library's.
//
// # Why a fork
//
// The library splits a full node in its middle and the left half keeps the
// node's whole slice. Keys inserted in ascending order (the view's usual
// load: sku-0000001, sku-0000002, ...) never come back to a left half, so
// every node of such a tree stays half full in a slice sized for a full
// one: 19.1 bytes a key for an 8-byte pointer at degree 32. Here an insert
// that goes past the last item of the full node it descends into splits
// that node at its end instead, as SQLite (balance_quick) and PostgreSQL
// (the rightmost leaf's fillfactor split) do for appends: the left node
// keeps all but its last two items and the new right node starts with
// one. An ascending load then leaves every node nearly full; an insert
// anywhere else splits in the middle, as the library does.
package btree

import (
	"slices"
	"sort"
)

// LessFunc reports whether a sorts before b: a strict weak ordering, two
// items neither of which is less than the other being the same item.
type LessFunc[T any] func(a, b T) bool

// ItemIteratorG is called for each item of an iteration, in order; it
// returns false to stop the iteration.
type ItemIteratorG[T any] func(item T) bool

// BTreeG is a B-tree of items of type T ordered by a LessFunc. Writes are
// not safe for concurrent use; reads are, and so are a tree and its Clone.
type BTreeG[T any] struct {
	degree int
	length int
	root   *node[T]
	cow    *copyOnWriteContext[T]
}

// NewG returns an empty B-tree of the given degree: each node but the root
// holds degree-1 to 2*degree-1 items (degree 2 is a 2-3-4 tree), fewer in
// a node an appendSplit just made.
func NewG[T any](degree int, less LessFunc[T]) *BTreeG[T] {
	if degree <= 1 {
		panic("bad degree")
	}
	return &BTreeG[T]{degree: degree, cow: &copyOnWriteContext[T]{less: less}}
}

// copyOnWriteContext marks node ownership: a tree may modify the nodes of
// its own context only, and copies any other node before it writes to it
// (a node shared with a Clone).
type copyOnWriteContext[T any] struct {
	less LessFunc[T]
}

// items stores items in a node.
type items[T any] []T

// insertAt inserts a value into the given index, pushing all subsequent
// values forward.
func (s *items[T]) insertAt(index int, item T) {
	var zero T
	*s = append(*s, zero)
	if index < len(*s) {
		copy((*s)[index+1:], (*s)[index:])
	}
	(*s)[index] = item
}

// removeAt removes a value at a given index, pulling all subsequent values
// back.
func (s *items[T]) removeAt(index int) T {
	item := (*s)[index]
	copy((*s)[index:], (*s)[index+1:])
	var zero T
	(*s)[len(*s)-1] = zero
	*s = (*s)[:len(*s)-1]
	return item
}

// pop removes and returns the last element in the list.
func (s *items[T]) pop() T {
	index := len(*s) - 1
	out := (*s)[index]
	var zero T
	(*s)[index] = zero
	*s = (*s)[:index]
	return out
}

// truncate keeps the first index items, clearing the rest for the GC.
func (s *items[T]) truncate(index int) {
	var toClear items[T]
	*s, toClear = (*s)[:index], (*s)[index:]
	clear(toClear)
}

// find returns the index where the given item should be inserted into
// this list; found reports that the item is already at that index.
func (s items[T]) find(item T, less LessFunc[T]) (index int, found bool) {
	i := sort.Search(len(s), func(i int) bool {
		return less(item, s[i])
	})
	if i > 0 && !less(s[i-1], item) {
		return i - 1, true
	}
	return i, false
}

// node is a node of a tree: either a leaf (no children) or an inner node
// with len(children) == len(items)+1.
type node[T any] struct {
	items    items[T]
	children items[*node[T]]
	cow      *copyOnWriteContext[T]
}

// mutableFor returns n if cow owns it, or a copy of n that cow owns.
func (n *node[T]) mutableFor(cow *copyOnWriteContext[T]) *node[T] {
	if n.cow == cow {
		return n
	}
	out := &node[T]{cow: cow}
	out.items = make(items[T], len(n.items), cap(n.items))
	copy(out.items, n.items)
	if len(n.children) > 0 {
		out.children = make(items[*node[T]], len(n.children), cap(n.children))
		copy(out.children, n.children)
	}
	return out
}

func (n *node[T]) mutableChild(i int) *node[T] {
	c := n.children[i].mutableFor(n.cow)
	n.children[i] = c
	return c
}

// split splits the node at index i: the node keeps the items before it,
// the item at i is returned and a new node holds the items after it.
func (n *node[T]) split(i int) (T, *node[T]) {
	item := n.items[i]
	next := &node[T]{cow: n.cow}
	next.items = withRoom(n.items[i+1:])
	n.items.truncate(i)
	if len(n.children) > 0 {
		next.children = withRoom(n.children[i+1:])
		n.children.truncate(i + 1)
	}
	return item, next
}

// withRoom copies s into a new slice with room for 8 items at least (the
// right node of an appendSplit, which an ascending load goes on filling:
// append would grow it from one item through 2, 4 and 8), its capacity
// rounded up to the allocation's size class as append's.
func withRoom[T any](s items[T]) items[T] {
	return append(slices.Grow(items[T](nil), max(len(s), 8)), s...)
}

// splitAt is where a full node is split before item goes into it (or into
// its subtree): in the middle, as the library does, unless item sorts
// after every item of the node (an append). Then the split is at the end
// (appendSplit), the left node staying full: the next keys of an ascending
// load go right, never back into it. The new right node starts with one
// item (and two children), not none, so that every inner node keeps an
// item for a Delete's merge.
func splitAt[T any](n *node[T], item T, maxItems int) int {
	if n.cow.less(n.items[len(n.items)-1], item) {
		return maxItems - 2 // appendSplit
	}
	return maxItems / 2
}

// maybeSplitChild splits child i if it is full, item being the item about
// to go into it; it reports whether it did.
func (n *node[T]) maybeSplitChild(i int, item T, maxItems int) bool {
	if len(n.children[i].items) < maxItems {
		return false
	}
	first := n.mutableChild(i)
	mid, second := first.split(splitAt(first, item, maxItems))
	n.items.insertAt(i, mid)
	n.children.insertAt(i+1, second)
	return true
}

// insert inserts an item into the subtree rooted at this node, making sure
// no node in the subtree exceeds maxItems items; it returns the equal item
// it replaced, if any.
func (n *node[T]) insert(item T, maxItems int) (_ T, _ bool) {
	i, found := n.items.find(item, n.cow.less)
	if found {
		out := n.items[i]
		n.items[i] = item
		return out, true
	}
	if len(n.children) == 0 {
		n.items.insertAt(i, item)
		return
	}
	if n.maybeSplitChild(i, item, maxItems) {
		inTree := n.items[i]
		switch {
		case n.cow.less(item, inTree):
			// no change, we want first split node
		case n.cow.less(inTree, item):
			i++ // we want second split node
		default:
			out := n.items[i]
			n.items[i] = item
			return out, true
		}
	}
	return n.mutableChild(i).insert(item, maxItems)
}

// get finds the given key in the subtree and returns it.
func (n *node[T]) get(key T) (_ T, _ bool) {
	i, found := n.items.find(key, n.cow.less)
	if found {
		return n.items[i], true
	} else if len(n.children) > 0 {
		return n.children[i].get(key)
	}
	return
}

// toRemove details what item to remove in a node.remove call.
type toRemove int

const (
	removeItem toRemove = iota // removes the given item
	removeMax                  // removes largest item in the subtree
)

// remove removes an item from the subtree rooted at this node.
func (n *node[T]) remove(item T, minItems int, typ toRemove) (_ T, _ bool) {
	var i int
	var found bool
	switch typ {
	case removeMax:
		if len(n.children) == 0 {
			return n.items.pop(), true
		}
		i = len(n.items)
	case removeItem:
		i, found = n.items.find(item, n.cow.less)
		if len(n.children) == 0 {
			if found {
				return n.items.removeAt(i), true
			}
			return
		}
	}
	// If we get to here, we have children. A node an appendSplit made may
	// hold fewer than minItems, so that merging two of them can leave the
	// root with no item and one small child: that child is the root to
	// be, with no minimum, and is not grown (there is no sibling).
	if len(n.children[i].items) <= minItems && len(n.items) > 0 {
		return n.growChildAndRemove(i, item, minItems, typ)
	}
	child := n.mutableChild(i)
	// Either we had enough items to begin with, or we've done some
	// merging/stealing, because we've got enough now and we're ready to
	// return stuff.
	if found {
		// The item exists at index i, and the child we've selected can
		// give us a predecessor, since if we've gotten here it's got >
		// minItems items in it: the rightmost item of our left child
		// takes the removed item's place.
		out := n.items[i]
		var zero T
		n.items[i], _ = child.remove(zero, minItems, removeMax)
		return out, true
	}
	// Final recursive call. Once we're here, we know that the item isn't
	// in this node and that the child is big enough to remove from.
	return child.remove(item, minItems, typ)
}

// growChildAndRemove grows child i so that it can spare an item (it takes
// one from its left sibling, else from its right one, else merges with a
// sibling) and then redoes the remove, which now finds a child big
// enough, whether the item is in this node or in that child's subtree.
func (n *node[T]) growChildAndRemove(i int, item T, minItems int, typ toRemove) (T, bool) {
	if i > 0 && len(n.children[i-1].items) > minItems {
		// Steal from left child
		child := n.mutableChild(i)
		stealFrom := n.mutableChild(i - 1)
		stolenItem := stealFrom.items.pop()
		child.items.insertAt(0, n.items[i-1])
		n.items[i-1] = stolenItem
		if len(stealFrom.children) > 0 {
			child.children.insertAt(0, stealFrom.children.pop())
		}
	} else if i < len(n.items) && len(n.children[i+1].items) > minItems {
		// steal from right child
		child := n.mutableChild(i)
		stealFrom := n.mutableChild(i + 1)
		stolenItem := stealFrom.items.removeAt(0)
		child.items = append(child.items, n.items[i])
		n.items[i] = stolenItem
		if len(stealFrom.children) > 0 {
			child.children = append(child.children, stealFrom.children.removeAt(0))
		}
	} else {
		if i >= len(n.items) {
			i--
		}
		child := n.mutableChild(i)
		// merge with right child
		mergeItem := n.items.removeAt(i)
		mergeChild := n.children.removeAt(i + 1)
		child.items = append(child.items, mergeItem)
		child.items = append(child.items, mergeChild.items...)
		child.children = append(child.children, mergeChild.children...)
	}
	return n.remove(item, minItems, typ)
}

// ascend calls iter for each item of the subtree not less than start (all
// of them when from is false) in order, until iter returns false; it
// reports whether the iteration goes on.
func (n *node[T]) ascend(start T, from bool, iter ItemIteratorG[T]) bool {
	index := 0
	if from {
		index, _ = n.items.find(start, n.cow.less)
	}
	for i := index; i < len(n.items); i++ {
		if len(n.children) > 0 && !n.children[i].ascend(start, from, iter) {
			return false
		}
		if !iter(n.items[i]) {
			return false
		}
		// Past the first item visited every item is >= start: the
		// children right of it need no search.
		from = false
	}
	if len(n.children) > 0 {
		return n.children[len(n.children)-1].ascend(start, from, iter)
	}
	return true
}

// Clone clones the tree, lazily: t and the clone share every node, and a
// write to either copies the nodes on its path first. Clone must not run
// concurrently with a write to t; afterwards t and the clone may be used
// concurrently.
func (t *BTreeG[T]) Clone() *BTreeG[T] {
	// Two new contexts: the shared nodes keep the old one, which neither
	// tree owns any longer.
	cow1, cow2 := *t.cow, *t.cow
	out := *t
	t.cow = &cow1
	out.cow = &cow2
	return &out
}

// maxItems returns the max number of items to allow per node.
func (t *BTreeG[T]) maxItems() int {
	return t.degree*2 - 1
}

// minItems returns the min number of items to allow per node (ignored for
// the root node, and for a node an appendSplit made until a Delete passes
// through it).
func (t *BTreeG[T]) minItems() int {
	return t.degree - 1
}

// ReplaceOrInsert adds item to the tree. If an item equal to it is in the
// tree, it is replaced and returned with true. The zero T (a nil pointer)
// must not be added.
func (t *BTreeG[T]) ReplaceOrInsert(item T) (_ T, _ bool) {
	if t.root == nil {
		t.root = &node[T]{cow: t.cow}
		t.root.items = append(t.root.items, item)
		t.length++
		return
	}
	t.root = t.root.mutableFor(t.cow)
	if len(t.root.items) >= t.maxItems() {
		item2, second := t.root.split(splitAt(t.root, item, t.maxItems()))
		oldroot := t.root
		t.root = &node[T]{cow: t.cow}
		t.root.items = append(t.root.items, item2)
		t.root.children = append(t.root.children, oldroot, second)
	}
	out, outb := t.root.insert(item, t.maxItems())
	if !outb {
		t.length++
	}
	return out, outb
}

// Delete removes the item equal to item from the tree and returns it with
// true, or returns the zero T and false if there is none.
func (t *BTreeG[T]) Delete(item T) (_ T, _ bool) {
	if t.root == nil || len(t.root.items) == 0 {
		return
	}
	t.root = t.root.mutableFor(t.cow)
	out, outb := t.root.remove(item, t.minItems(), removeItem)
	for len(t.root.items) == 0 && len(t.root.children) > 0 {
		t.root = t.root.children[0]
	}
	if outb {
		t.length--
	}
	return out, outb
}

// AscendGreaterOrEqual calls iterator for every item not less than pivot,
// in order, until iterator returns false.
func (t *BTreeG[T]) AscendGreaterOrEqual(pivot T, iterator ItemIteratorG[T]) {
	if t.root != nil {
		t.root.ascend(pivot, true, iterator)
	}
}

// Ascend calls iterator for every item of the tree, in order, until
// iterator returns false.
func (t *BTreeG[T]) Ascend(iterator ItemIteratorG[T]) {
	if t.root != nil {
		var zero T
		t.root.ascend(zero, false, iterator)
	}
}

// Get returns the item of the tree equal to key and true, or the zero T
// and false if there is none.
func (t *BTreeG[T]) Get(key T) (_ T, _ bool) {
	if t.root == nil {
		return
	}
	return t.root.get(key)
}

// Len returns the number of items in the tree.
func (t *BTreeG[T]) Len() int {
	return t.length
}
