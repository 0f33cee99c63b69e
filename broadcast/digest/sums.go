package digest

import (
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cachecast/cachecast/broadcast/internal/originset"
	"github.com/cachecast/cachecast/broadcast/wire"
)

// The digest sums kept as the vector changes (see "Anti-entropy" in the
// package doc). Answering a frame used to copy the store's vector,
// compute the vector at the frame's cut and sum it: three passes over
// every origin, for every frame. Index keeps instead this node's
// live vector, and for it and for each kept cut the digest tree's sums
// (sumTree), and updates them only for the origins that changed: those
// the store's change feed (store.VectorFeed) names, those whose
// retirement changed, and, when a cut moves on, those whose head was
// past it. A frame then costs its own nodes and entries, and the
// origins that changed since the last frame, whatever N.

// sumLeafMax is the most origins a leaf of a sumTree holds before it
// splits into its digestFanout children.
const sumLeafMax = 32

// sumTree is the digest tree's sums over a vector (origin -> value, the
// values above 0), kept node by node: a node holds its sum, the last
// change under it (gen: the Index's counter), and either its
// children or, as a leaf, its entries. Only the nodes down to leaves of
// at most sumLeafMax origins exist, so it holds about 2N/sumLeafMax
// nodes; a deeper node's sum is summed from its leaf's entries.
type sumTree struct{ root *sumTreeNode }

type sumTreeNode struct {
	sum
	gen  uint64
	kids *[digestFanout]*sumTreeNode
	vals map[uint64]treeEntry // a leaf's entries
}

// treeEntry is a leaf's entry: the origin's value and when it was set.
type treeEntry struct{ val, gen uint64 }

// digitAt is the child of a node at depth d that key k falls under.
func digitAt(k uint64, d int) int {
	return int(k >> (64 - digestBits*uint(d+1)) & (digestFanout - 1))
}

// set makes origin o's value v (0: none), as the change numbered gen.
func (t *sumTree) set(o, v, gen uint64) {
	if t.root == nil {
		t.root = &sumTreeNode{}
	}
	k := originKey(o)
	var path [digestMaxDepth + 1]*sumTreeNode
	n, d := t.root, 0
	for n.kids != nil {
		path[d] = n
		c := n.kids[digitAt(k, d)]
		if c == nil {
			if v == 0 {
				return
			}
			c = &sumTreeNode{}
			n.kids[digitAt(k, d)] = c
		}
		n, d = c, d+1
	}
	path[d] = n
	old, had := n.vals[o]
	if (had && old.val == v) || (!had && v == 0) {
		return
	}
	var dc uint32 // added to the counts, modulo 2^32
	var dh uint64
	if had {
		dc--
		dh ^= entryHash(o, old.val)
	}
	if v != 0 {
		dc++
		dh ^= entryHash(o, v)
	}
	for _, p := range path[:d+1] {
		p.count += dc
		p.digest ^= dh
		p.gen = gen
	}
	if v == 0 {
		delete(n.vals, o)
		for i := d; i > 0 && path[i].count == 0; i-- {
			path[i-1].kids[digitAt(k, i-1)] = nil
		}
		if t.root.count == 0 {
			t.root = &sumTreeNode{gen: gen}
		}
		return
	}
	if n.vals == nil {
		n.vals = map[uint64]treeEntry{}
	}
	n.vals[o] = treeEntry{val: v, gen: gen}
	if len(n.vals) > sumLeafMax {
		split(n, d)
	}
}

// split turns the leaf n, at depth d, into a node with children.
func split(n *sumTreeNode, d int) {
	if d >= digestMaxDepth {
		return
	}
	n.kids = &[digestFanout]*sumTreeNode{}
	for o, e := range n.vals {
		i := digitAt(originKey(o), d)
		c := n.kids[i]
		if c == nil {
			c = &sumTreeNode{vals: map[uint64]treeEntry{}}
			n.kids[i] = c
		}
		c.vals[o] = e
		c.count++
		c.digest ^= entryHash(o, e.val)
		c.gen = max(c.gen, e.gen)
	}
	n.vals = nil
	for _, c := range n.kids {
		if c != nil && len(c.vals) > sumLeafMax {
			split(c, d+1)
		}
	}
}

// find is the tree node id is, or the leaf above it that holds its
// entries (above is then true), or nil when nothing is under id.
func (t *sumTree) find(id nodeID) (n *sumTreeNode, above bool) {
	n = t.root
	for d := 0; n != nil && d < int(id.depth); d++ {
		if n.kids == nil {
			return n, true
		}
		n = n.kids[digitAt(id.prefix, d)]
	}
	return n, false
}

// sumAt is the sum of the node id.
func (t *sumTree) sumAt(id nodeID) sum {
	n, above := t.find(id)
	switch {
	case n == nil:
		return sum{}
	case !above:
		return n.sum
	}
	var s sum
	for o, e := range n.vals {
		if id.holds(originKey(o)) {
			s.count++
			s.digest ^= entryHash(o, e.val)
		}
	}
	return s
}

// each calls fn with the entries under the node id set after the change
// numbered since (0: all of them).
func (t *sumTree) each(id nodeID, since uint64, fn func(o, v uint64)) {
	n, above := t.find(id)
	if n == nil || n.gen <= since {
		return
	}
	if above {
		for o, e := range n.vals {
			if e.gen > since && id.holds(originKey(o)) {
				fn(o, e.val)
			}
		}
		return
	}
	n.each(since, fn)
}

func (n *sumTreeNode) each(since uint64, fn func(o, v uint64)) {
	if n.gen <= since {
		return
	}
	if n.kids == nil {
		for o, e := range n.vals {
			if e.gen > since {
				fn(o, e.val)
			}
		}
		return
	}
	for _, c := range n.kids {
		if c != nil {
			c.each(since, fn)
		}
	}
}

// cutSums is one kept cut: each origin's cut as of the head it was
// computed at (marks), the origins whose head is past the cut (young:
// only their cut moves when the cut does), those whose head moved since
// their mark (dirty), and the sums of the vector at the cut.
type cutSums struct {
	id        uint64 // names these sums to the links (seen); a rebuild gets a new one
	at        uint64
	marks     map[uint64]cutMark
	young     map[uint64]bool
	dirty     map[uint64]bool
	tree      sumTree
	youngPeak int // (compacted)
}

// Feed is the store's change feed as the index reads it
// (store.VectorFeed).
type Feed interface {
	Changes(fn func(origin uint64)) bool
}

// VectorSource is the store as the index reads it.
type VectorSource interface {
	Vector() map[uint64]uint64
	LastSeq(origin uint64) uint64
}

// Index is this node's side of the digest exchanges, kept up to
// date incrementally (see the top of this file). Its methods with a
// Locked suffix are called with mu held, after sync.
type Index struct {
	mu    sync.Mutex
	src   VectorSource
	feed  Feed
	stamp func(o, seq uint64) uint64 // an origin's record's stamp (StampIn)

	gen      uint64            // counts the changes to any sums (sumTree's gens), from 1
	ids      uint64            // the last id given to a set of sums
	heads    map[uint64]uint64 // the live vector: the store's, the retired origins left out
	headSums sumTree           // its sums (NoCut), id headsID
	retired  map[uint64]bool   // the retired origins (Retire)
	// retiredHeads is the store's seq of each retired origin, and
	// retiredSum its count and digest (wire.RetiredDigest), made again when
	// stale.
	retiredHeads map[uint64]uint64
	retiredSum   struct {
		count  uint32
		digest [16]byte
		heads  map[uint64]uint64 // a copy of retiredHeads, never changed
	}
	retiredStale bool
	cuts         []*cutSums // the last CutKeep cuts used, the latest used first

	// behind are the origins this node was offered a record of past a
	// gap (gap): it lacks the records before it, young or not, and its
	// sums count the origin as different until it holds it.
	behind map[uint64]gapMark
	// firstOpen is when this node opened its first exchange (headsFirst).
	firstOpen time.Time

	pmu     sync.Mutex
	pending map[uint64]bool // retirements not taken yet: origin -> retired
}

// headsID names the live vector's sums (NoCut).
const headsID = 1

// NewIndex makes the index of the vector src holds, kept up to date by
// feed; stamp gives an origin's record's stamp (StampIn).
func NewIndex(src VectorSource, feed Feed, stamp func(o, seq uint64) uint64) *Index {
	return &Index{src: src, feed: feed, stamp: stamp, gen: 1, ids: headsID, heads: map[uint64]uint64{},
		retired: map[uint64]bool{}, retiredHeads: map[uint64]uint64{}, retiredStale: true}
}

// Retire notes that origin o was retired (or is live again). It takes no
// lock but its own, so that callers may hold theirs.
func (x *Index) Retire(o uint64, retired bool) {
	x.pmu.Lock()
	defer x.pmu.Unlock()
	if x.pending == nil {
		x.pending = map[uint64]bool{}
	}
	x.pending[o] = retired
}

// syncLocked brings the live vector and its sums up to date: the origins
// the store's feed names, the retirements noted, or, when the feed
// cannot tell, every origin.
func (x *Index) syncLocked() {
	var changed []uint64
	all := !x.feed.Changes(func(o uint64) { changed = append(changed, o) })
	x.pmu.Lock()
	for o, r := range x.pending {
		if r {
			x.retired[o] = true
		} else {
			delete(x.retired, o)
		}
		changed = append(changed, o)
	}
	x.pending = nil
	x.pmu.Unlock()
	if all {
		v := x.src.Vector()
		for o := range x.heads {
			if _, ok := v[o]; !ok {
				x.setHeadLocked(o, 0)
			}
		}
		for o := range x.retiredHeads {
			if _, ok := v[o]; !ok {
				x.setHeadLocked(o, 0)
			}
		}
		for o, h := range v {
			x.setHeadLocked(o, h)
		}
	}
	for _, o := range changed {
		x.setHeadLocked(o, x.src.LastSeq(o))
	}
}

// setHeadLocked makes h the store's seq of origin o (0: none).
func (x *Index) setHeadLocked(o, h uint64) {
	if x.retired[o] {
		if x.retiredHeads[o] != h {
			x.retiredHeads[o] = h
			if h == 0 {
				delete(x.retiredHeads, o)
			}
			x.retiredStale = true
		}
		h = 0
	} else if _, ok := x.retiredHeads[o]; ok {
		delete(x.retiredHeads, o)
		x.retiredStale = true
	}
	if x.heads[o] == h {
		return
	}
	if h == 0 {
		delete(x.heads, o)
	} else {
		x.heads[o] = h
	}
	x.gen++
	x.headSums.set(o, h, x.gen)
	for _, c := range x.cuts {
		c.dirty[o] = true
	}
}

// retiredLocked is the retired summary: how many, and their digest.
func (x *Index) retiredLocked() (uint32, [16]byte) {
	if x.retiredStale {
		x.retiredSum.count, x.retiredSum.digest = uint32(len(x.retiredHeads)), wire.RetiredDigest(x.retiredHeads)
		x.retiredSum.heads = maps.Clone(x.retiredHeads)
		x.retiredStale = false
	}
	return x.retiredSum.count, x.retiredSum.digest
}

// cutLocked is the kept cut at, made if it is not kept: the least
// recently used one moved on to it when that one is older (only the
// origins young there are searched again), else a copy of the latest
// older one moved on, else one computed afresh.
func (x *Index) cutLocked(at uint64) *cutSums {
	for i, c := range x.cuts {
		if c.at == at {
			copy(x.cuts[1:i+1], x.cuts[:i])
			x.cuts[0] = c
			x.catchUpLocked(c)
			return c
		}
	}
	var c *cutSums
	if len(x.cuts) == CutKeep {
		if last := x.cuts[CutKeep-1]; last.at < at {
			c = last
		}
		x.cuts = x.cuts[:CutKeep-1]
	}
	if c == nil {
		var base *cutSums
		for _, b := range x.cuts {
			if b.at < at && (base == nil || b.at > base.at) {
				base = b
			}
		}
		x.ids++
		c = &cutSums{id: x.ids, at: at, marks: map[uint64]cutMark{}, young: map[uint64]bool{}, dirty: map[uint64]bool{}}
		if base != nil {
			x.catchUpLocked(base)
			c.at = base.at
			for o, m := range base.marks {
				c.marks[o] = m
				if m.cut < m.head {
					c.young[o] = true
				}
				if m.cut > 0 {
					c.tree.set(o, m.cut, x.gen)
				}
			}
		} else {
			for o := range x.heads {
				c.dirty[o] = true
			}
		}
	}
	x.advanceLocked(c, at)
	x.cuts = append([]*cutSums{c}, x.cuts...)
	return c
}

// advanceLocked moves c on to the cut at, not before its own: an origin
// whose head was at or before c's cut is there at at too, so only the
// young ones are searched again (from their cut at c's, which is old).
func (x *Index) advanceLocked(c *cutSums, at uint64) {
	if at != c.at {
		c.at = at
		c.young = originset.Compacted(c.young, &c.youngPeak)
		for o := range c.young {
			m := c.marks[o]
			lo := m.cut
			h := x.heads[o]
			if h < m.head {
				lo = 0
			}
			x.markLocked(c, o, cutMark{head: h, cut: cutSeq(lo, h, at, func(s uint64) uint64 { return x.stamp(o, s) })})
		}
	}
	x.catchUpLocked(c)
}

// catchUpLocked brings c's marks up to the heads that moved.
func (x *Index) catchUpLocked(c *cutSums) {
	for o := range c.dirty {
		h := x.heads[o]
		m, ok := c.marks[o]
		switch {
		case ok && h == m.head:
		case ok && h > m.head && m.cut < m.head:
			m.head = h // past the cut already: what follows is younger
		default:
			lo := uint64(0)
			if ok && h > m.head {
				lo = m.cut // m.cut == m.head: old, and so is what it holds
			}
			m = cutMark{head: h, cut: cutSeq(lo, h, c.at, func(s uint64) uint64 { return x.stamp(o, s) })}
		}
		x.markLocked(c, o, m)
	}
	c.dirty = originset.Drained(c.dirty)
}

// markLocked sets origin o's mark in c (a head of 0: none).
func (x *Index) markLocked(c *cutSums, o uint64, m cutMark) {
	old := c.marks[o].cut
	if m.head == 0 {
		delete(c.marks, o)
	} else {
		c.marks[o] = m
	}
	if m.cut < m.head {
		c.young[o] = true
	} else {
		delete(c.young, o)
	}
	if m.cut != old {
		x.gen++
		c.tree.set(o, m.cut, x.gen)
	}
}

// digestSums is the sums a frame is answered from: the live vector's
// (NoCut) or a cut's, with the origins behind a gap given values of
// their own (overrides).
type digestSums struct {
	id        uint64
	tree      *sumTree
	value     func(o uint64) uint64
	overrides map[uint64]uint64
}

// sumsAtLocked is the sums at cut (NoCut: each origin's highest seq).
func (x *Index) sumsAtLocked(cut uint64) digestSums {
	if cut == NoCut {
		return digestSums{id: headsID, tree: &x.headSums, value: func(o uint64) uint64 { return x.heads[o] }}
	}
	c := x.cutLocked(cut)
	s := digestSums{id: c.id, tree: &c.tree, value: func(o uint64) uint64 { return c.marks[o].cut }}
	if len(x.behind) > 0 {
		now := time.Now()
		for o, g := range x.behind {
			if x.heads[o] >= g.seq || now.After(g.until) {
				delete(x.behind, o)
				continue
			}
			if s.overrides == nil {
				s.overrides = map[uint64]uint64{}
			}
			// A value of o that no peer's cut holds (nor this node's
			// next frame: drawn each time), so that the sums differ.
			s.overrides[o] = 1<<63 | rand.Uint64()
		}
	}
	return s
}

// sum is the sum of node id.
func (s digestSums) sum(id nodeID) sum {
	out := s.tree.sumAt(id)
	for o, r := range s.overrides {
		if !id.holds(originKey(o)) {
			continue
		}
		if v := s.value(o); v > 0 {
			out.count--
			out.digest ^= entryHash(o, v)
		}
		out.count++
		out.digest ^= entryHash(o, r)
	}
	return out
}

// changedUnder is the entries under the nodes ids set after the change
// numbered since (0: all).
func (s digestSums) changedUnder(ids []nodeID, since uint64) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, id := range ids {
		s.tree.each(id, since, func(o, v uint64) {
			if _, ok := s.overrides[o]; !ok {
				out[o] = v
			}
		})
	}
	return out
}

// headsUnderLocked is the live entries under the nodes ids.
func (x *Index) headsUnderLocked(ids []nodeID) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, id := range ids {
		x.headSums.each(id, 0, func(o, v uint64) { out[o] = v })
	}
	return out
}

// HeadsFirst says whether an exchange this node opens now compares the
// whole vectors (NoCut) rather than at a cut: for its first gapFor after
// its first exchange. A node that just started (or restarted) lacks
// whatever was written while it was down, the youngest of it younger
// than any cut, and nothing may announce it (the writes may have
// stopped): its own exchanges find it at once, as protocol 5's do, for
// the cost of whole-vector differences over a few seconds of its life.
func (x *Index) HeadsFirst(now time.Time, interval time.Duration) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.firstOpen.IsZero() {
		x.firstOpen = now
	}
	return now.Sub(x.firstOpen) < gapFor(interval)
}

// Gap notes that a record of origin o, seq, came past a gap (the store
// refused it as out of order) or was refused for its stamp (too far
// ahead: gap is called again at each refusal, and the mark lasts while
// the refusals go on): this node lacks records of o up to it,
// which a cut would hide while they are young. Until it holds seq (or
// for gapFor), its sums at every cut give o a value no peer's has, so
// the next exchange reaches o's entries, learns a peer's highest seq of
// it and pulls, as protocol 5 does: a record lost on its way (NATS is at
// most once) is found as soon as the next one arrives.
func (x *Index) Gap(o, seq uint64, interval time.Duration) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.behind == nil {
		x.behind = map[uint64]gapMark{}
	}
	if m := x.behind[o]; seq >= m.seq {
		x.behind[o] = gapMark{seq: seq, until: time.Now().Add(gapFor(interval))}
	}
}
