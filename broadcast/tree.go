package broadcast

import (
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/internal/batch"
	"github.com/cachecast/cachecast/store"
)

// DefaultTreeDegree is the relay tree's degree k when Config.TreeDegree
// is not set: at most k+1 tree neighbours a node, and a record crosses
// at most 2 log_k N of them.
const DefaultTreeDegree = 4

// DefaultTreeFrom is the fleet size from which cachecastd's
// --tcp-fanout=auto (the default) relays on the tree (Config.TreeFrom):
// below it a node's own pushes to every peer are one hop and cost few
// connections; from it the tree keeps a node's push connections and the
// CPU its records cost flat in N (BENCHMARKS.md, "Per-hop batching").
const DefaultTreeFrom = 16

// treeNeighbours returns the tree neighbours of self in the relay tree
// of degree k over ids (every member, self included, in any order): the
// members sorted by ID laid out as a k-ary heap, each node's parent and
// children. Every node that has the same members computes the same tree.
func treeNeighbours(self uint64, ids []uint64, k int) map[uint64]bool {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	i, ok := slices.BinarySearch(sorted, self)
	if !ok {
		return nil
	}
	out := map[uint64]bool{}
	if i > 0 {
		out[sorted[(i-1)/k]] = true
	}
	for c := k*i + 1; c <= k*i+k && c < len(sorted); c++ {
		out[sorted[c]] = true
	}
	return out
}

// setTree rebuilds the relay tree over self and peers (SetPeers, with
// n.mu held) and marks each link a tree neighbour or not; below
// Config.TreeFrom members there is no tree, and every link pushes this
// node's records.
func (n *Node) setTree(peers map[uint64]Peer) {
	if !n.cfg.Tree {
		return
	}
	on := len(peers)+1 >= n.cfg.TreeFrom
	var nb map[uint64]bool
	if on {
		ids := []uint64{n.self}
		for id := range peers {
			ids = append(ids, id)
		}
		nb = treeNeighbours(n.self, ids, n.cfg.TreeDegree)
	}
	switched := n.treeOn.Swap(on) != on
	var tree []*link
	for id, l := range n.links {
		l.setTree(nb[id])
		if nb[id] {
			tree = append(tree, l)
		}
		if switched {
			l.wake() // whom it pushes to changed: it looks again
		}
	}
	if on {
		n.treeLinks.Store(&tree)
	} else {
		n.treeLinks.Store(nil)
	}
	if switched && n.cfg.TreeFrom > 0 {
		fanout := "direct"
		if on {
			fanout = "tree"
		}
		n.log.Info("the fan-out follows the fleet's size", zap.String("fanout", fanout),
			zap.Int("members", len(peers)+1), zap.Int("tree-from", n.cfg.TreeFrom))
	}
}

// relay tells the tree links that origin o has new records here (pushed,
// pulled: whatever came in), so that they push them on to the neighbours
// that lack them. Nothing without the tree, and nothing for this node's
// own records, which every link pushes by itself.
func (n *Node) relay(o uint64) {
	ls := n.treeLinks.Load()
	if ls == nil || o == n.self {
		return
	}
	last := n.st.LogLast(o)
	for _, l := range *ls {
		l.markDirty(o, last)
	}
}

// setTree makes the link a tree neighbour or not. Called with n.mu held.
//
// A new neighbour is pushed, of the other origins, only what this node
// stores from now on, not its earlier records. That is deliberate. What
// the neighbour lacks of them is only what was on its way along the old
// tree when the membership changed: the rest its former neighbours gave
// it. That little is found without a push: the next record of its origin
// arrives past the gap and the gap is pulled at once from the neighbour
// that sent it (pullIfAhead), and an origin that writes nothing more
// differs in the digests once its last record is older than the cut (2-3
// sync intervals). A push could not be aimed: this node does not know
// what the neighbour holds (holds is what it acknowledged on this link,
// maybe long ago), so it would send every origin from that old position,
// nearly all duplicates, to each of its up to k+1 new neighbours at
// every change of membership, and a join or a leave moves the heap
// positions of every member sorted after it, so it rewires about half
// the fleet's tree. Measured, the tree's 10% restart (two rebuilds of
// the tree under way) converged in 0.4-1.1 s at 10 to 25 nodes on the
// quiet machine and 6 s at 100 loaded (BENCHMARKS.md, "A fleet of N
// nodes").
func (l *link) setTree(on bool) {
	l.mu.Lock()
	was := l.tree.Swap(on)
	if on && !was {
		for o, s := range l.n.st.LogVector() {
			if o != l.n.self {
				l.relayed[o] = max(l.relayed[o], s)
			}
		}
	}
	if !on {
		clear(l.dirty)
	}
	l.mu.Unlock()
	if on != was {
		l.wake()
	}
}

// markDirty notes that origin o has records up to last here that the
// peer, a tree neighbour, may lack, and wakes the writer.
func (l *link) markDirty(o, last uint64) {
	l.mu.Lock()
	lacks := l.tree.Load() && max(l.holds[o], l.relayed[o]) < last
	if lacks {
		l.dirty[o] = true
	}
	l.mu.Unlock()
	if lacks {
		l.wake()
	}
}

// heard notes that the peer sent this node origin o's record seq: it
// holds it, so it is not pushed back. Before the record is appended, so
// that no writer woken by the append sends it back meanwhile; in relayed,
// not holds, which the pulls go by: the record is not appended here yet.
func (l *link) heard(o, seq uint64) {
	l.mu.Lock()
	l.relayed[o] = max(l.relayed[o], seq)
	l.sentHere[o] = max(l.sentHere[o], seq)
	l.mu.Unlock()
}

// relayDirty adds to the turn's frames (f) the records of other origins
// the peer, a tree neighbour, lacks, for the origins that have new ones
// (markDirty). An origin's push starts past the highest of what the peer
// holds (its acks, the records it sent) and what was pushed to it
// already.
func (l *link) relayDirty(f *pushFrame, proto uint8) error {
	l.mu.Lock()
	if !l.tree.Load() || len(l.dirty) == 0 {
		l.mu.Unlock()
		return nil
	}
	todo := make(map[uint64]uint64, len(l.dirty))
	for o := range l.dirty {
		todo[o] = max(l.holds[o], l.relayed[o]) + 1
	}
	clear(l.dirty)
	l.mu.Unlock()
	for o, next := range todo {
		first := next
		last := l.n.st.LogLast(o)
		if last >= next && last-next+1 > l.n.cfg.BootstrapRecords {
			// The peer lacks most of this origin: it chooses between a
			// snapshot and pulls (as for this node's own records).
			next = last + 1
		}
		for next <= last {
			if err := f.flushIfFull(); err != nil {
				return err
			}
			mark := f.mark()
			end, err := f.read(o, next, proto)
			if errors.Is(err, store.ErrRecycled) || errors.Is(err, batch.ErrTooNew) {
				// Gone here, or too new for the peer's protocol: it pulls
				// (or bootstraps from) whichever peer can give them.
				next = last + 1
				break
			}
			lost := errors.Is(err, store.ErrLost)
			if err != nil && !lost {
				return err
			}
			if len(f.recs) == mark.recs && !lost {
				break
			}
			next = end
			if lost {
				next++ // as for own records: a lost one must not hold back the rest
			}
		}
		l.mu.Lock()
		if next > first {
			if _, ok := l.unacked[o]; !ok {
				l.unacked[o] = first
			}
		}
		l.relayed[o] = max(l.relayed[o], next-1)
		l.mu.Unlock()
	}
	return nil
}

// rewindRelay, as a connection to a tree neighbour ends, moves the push
// position of each origin relayed on it back to what the peer is known
// to hold (its acks, the records it sent here), and marks those origins
// dirty, so that the link dials again: the records a failed connection
// took down with it are pushed again, not left to the pulls. Duplicates
// of those that did arrive are dropped there. After an idle close
// everything was acknowledged: nothing moves.
func (l *link) rewindRelay() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for o, first := range l.unacked {
		held := max(l.holds[o], l.sentHere[o])
		if l.relayed[o] > held {
			l.relayed[o] = max(first-1, held)
			if l.tree.Load() {
				l.dirty[o] = true
			}
		}
	}
	clear(l.unacked)
}

// OpenPushLinks counts the outbound connections open now that pushed
// records (this node's or, on the relay tree, any origin's) within the
// last IdleTimeout: with the direct fan-out one to every peer while this
// node writes; with the tree at most TreeDegree+1 neighbours and the
// replica.
func (n *Node) OpenPushLinks() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, l := range n.links {
		if l.pushing() {
			k++
		}
	}
	return k
}

// pushedNow notes that the open connection pushed records.
func (l *link) pushedNow() { l.pushedAt.Store(time.Now().UnixNano()) }

// pushing says whether the link's connection is open and pushed records
// within the last IdleTimeout.
func (l *link) pushing() bool {
	at := l.pushedAt.Load()
	return l.open.Load() && at != 0 && time.Since(time.Unix(0, at)) < l.n.cfg.IdleTimeout
}

// TreeNeighbours returns the peers this node relays to on the relay tree
// (Config.Tree), nil without it.
func (n *Node) TreeNeighbours() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []uint64
	for id, l := range n.links {
		if l.tree.Load() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// pullIfAhead asks for what the peer, a tree neighbour that just pushed
// records, holds beyond what this node took of them (touched: origin ->
// seq held here now): records that skipped ahead of a gap (they came
// while the tree changed, or a connection dropped some) are dropped, and
// the pull fetches the gap and them from the peer.
func (l *link) pullIfAhead(touched map[uint64]uint64) {
	l.mu.Lock()
	ahead := false
	for o, s := range touched {
		if l.sentHere[o] > s {
			// It sent records of o past this node's gap: it holds them.
			l.holds[o] = max(l.holds[o], l.sentHere[o])
			l.check[o] = true
			ahead = true
		}
	}
	l.mu.Unlock()
	if ahead {
		l.afterAck()
	}
}
