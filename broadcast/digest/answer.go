package digest

import (
	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/store/record"
)

// Frame is a frame of a digest exchange waiting to be written (its type
// and payload), with the tree nodes and vector entries it carries (for
// the counters).
type Frame struct {
	Type    byte
	Payload []byte
	Entries int
}

// Step is one side's answer to a frame of a digest exchange.
type Step struct {
	// Out are the frames that answer it.
	Out []Frame
	// Learned is what the other side holds, as far as the frame tells:
	// the entries it sent, and this side's own under the nodes whose sums
	// were equal (those set since the link's seen mark of these sums).
	Learned map[uint64]uint64
	// Whole says the root's sums were equal: the other side holds at
	// least all of the sums named Sums (as of change Gen), which the
	// caller notes, to pass back as seen[Sums] = Gen.
	Whole     bool
	Sums, Gen uint64
	// Opening says the frame opened an exchange or answered an opening
	// (it carried the retired summary), SameRetired that the summaries
	// matched; Retired is then this side's retired origins (not to be
	// changed), which the other side holds too.
	Opening, SameRetired bool
	Retired              map[uint64]uint64
}

// answerLocked answers a sums or entries frame (payload p; hasCut: the
// connection speaks ProtocolCut, whose sums frames carry their cut);
// received is how many tree nodes and entries the frame carried. seen is
// the caller's marks (from Step.Whole: what it learned already of which sums);
// nil when there is no link to note what the other side holds on: then
// nothing of this side's own is learned.
// Sums are compared at the frame's cut; entries frames carry each side's
// highest seqs (what the other may pull), whatever the cut.
func (x *Index) answerLocked(typ byte, p []byte, hasCut bool, seen map[uint64]uint64) (st Step, received int, err error) {
	if typ == wire.FrameEntries {
		m, err := decodeEntries(p)
		if err != nil {
			return st, 0, err
		}
		st.Learned = m.entries
		if m.answer {
			st.Out = entriesFrames(entriesMsg{nodes: m.nodes, entries: x.headsUnderLocked(m.nodes)})
		}
		return st, len(m.nodes) + len(m.entries), nil
	}
	m, err := decodeSums(p, hasCut)
	if err != nil {
		return st, 0, err
	}
	sums := x.sumsAtLocked(m.cut)
	var reply []sumNode
	var equal, leaves, expand []nodeID
	for _, x := range m.nodes {
		switch mine := sums.sum(x.nodeID); {
		case mine == x.sum:
			equal = append(equal, x.nodeID)
			st.Whole = st.Whole || x.depth == 0
			if !x.final && x.count > 0 {
				reply = append(reply, sumNode{nodeID: x.nodeID, sum: mine, final: true})
			}
		case x.final:
			// Changed since the other side looked: a later exchange finds it.
		case x.depth == digestMaxDepth || max(mine.count, x.count) <= digestLeaf || min(mine.count, x.count) == 0:
			// Small, or one side holds nothing here: every entry is needed.
			leaves = append(leaves, x.nodeID)
		default:
			for c := range digestFanout {
				expand = append(expand, x.child(c))
			}
		}
	}
	for _, id := range expand {
		reply = append(reply, sumNode{nodeID: id, sum: sums.sum(id)})
	}
	// The other side holds at least these sums where they were equal.
	if seen != nil {
		st.Learned = sums.changedUnder(equal, seen[sums.id])
	}
	st.Sums, st.Gen = sums.id, x.gen
	st.Opening = m.kind != sumsStep
	retired, digest := x.retiredLocked()
	st.SameRetired = st.Opening && m.retired == retired && m.digest == digest
	if st.SameRetired {
		st.Retired = x.retiredSum.heads
	}
	for i := 0; i < len(reply) || (i == 0 && m.kind == sumsOpen); i += maxFrameNodes {
		f := sumsMsg{kind: sumsStep, hasCut: m.hasCut, cut: m.cut, nodes: reply[i:min(i+maxFrameNodes, len(reply))]}
		if i == 0 && m.kind == sumsOpen {
			// The answer to an opening always goes, with the retired
			// summary: the dialer learns from it whether to send its
			// retired list.
			f.kind, f.retired, f.digest = sumsOpenAnswer, retired, digest
		}
		st.Out = append(st.Out, Frame{Type: wire.FrameSums, Payload: encodeSums(f), Entries: len(f.nodes)})
	}
	if len(leaves) > 0 {
		st.Out = append(st.Out, entriesFrames(entriesMsg{answer: true, nodes: leaves, entries: x.headsUnderLocked(leaves)})...)
	}
	if st.Opening && !st.SameRetired {
		st.Out = append(st.Out, Frame{Type: wire.FrameRetired, Payload: wire.EncodeAck(x.retiredHeads), Entries: len(x.retiredHeads)})
	}
	return st, len(m.nodes), nil
}

// Answer is answerLocked on the index brought up to date.
func (x *Index) Answer(typ byte, p []byte, hasCut bool, seen map[uint64]uint64) (Step, int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.syncLocked()
	return x.answerLocked(typ, p, hasCut, seen)
}

// Opening is the first frame of a digest exchange: the root's sum at
// the cut (NoCut: over the highest seqs) and the retired summary.
func (x *Index) Opening(hasCut bool, cut uint64) Frame {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.syncLocked()
	m := sumsMsg{kind: sumsOpen, hasCut: hasCut, cut: cut}
	m.retired, m.digest = x.retiredLocked()
	m.nodes = []sumNode{{nodeID: treeRoot, sum: x.sumsAtLocked(cut).sum(treeRoot)}}
	return Frame{Type: wire.FrameSums, Payload: encodeSums(m), Entries: 1}
}

// entriesFrames cuts m into frames of at most maxFrameNodes nodes, each
// with the entries under its own nodes.
func entriesFrames(m entriesMsg) []Frame {
	var out []Frame
	for i := 0; i < len(m.nodes) || i == 0; i += maxFrameNodes {
		f := entriesMsg{answer: m.answer, nodes: m.nodes[i:min(i+maxFrameNodes, len(m.nodes))], entries: m.entries}
		if len(m.nodes) > maxFrameNodes {
			f.entries = entriesUnder(m.entries, f.nodes)
		}
		out = append(out, Frame{Type: wire.FrameEntries, Payload: encodeEntries(f), Entries: len(f.nodes) + len(f.entries)})
	}
	return out
}

// RecordReader reads an origin's records (store.Store.ReadOrigin).
type RecordReader interface {
	ReadOrigin(origin, from, to uint64, fn func(record.Record) error) (next uint64, err error)
}

// StampIn is the stamp of origin o's record seq in st, as an Index's
// stamp function gives it: 0 (old) when it cannot be read (recycled, or
// lost: the records a cut can reach are young, and those are kept),
// NoCut (young) when it is not committed yet.
func StampIn(st RecordReader, o, seq uint64) uint64 {
	h, read := uint64(0), false
	_, err := st.ReadOrigin(o, seq, seq, func(r record.Record) error {
		h, read = r.HLC(), true
		return nil
	})
	if err == nil && !read {
		return NoCut
	}
	return h
}
