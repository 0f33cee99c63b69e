package digest

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cachecast/cachecast/broadcast/wire"
)

// The digest tree of a version vector (protocol 5's exchanges; see
// "Anti-entropy" in the package doc). Each origin has a key, a hash of
// its ID (originKey); a node of the tree at depth d is the set of origins
// whose key begins with the same 4×d bits (its prefix), so the root
// (depth 0) holds every origin and each node has digestFanout children.
// A node's sum is how many origins it holds and the XOR of their entries'
// hashes (entryHash of origin and seq): two vectors that agree on a node
// have equal sums, and two that differ there have different ones but
// with a probability of 2^-64 per comparison.
const (
	digestBits   = 4
	digestFanout = 1 << digestBits
	// digestMaxDepth is the deepest node: its prefix is the whole key.
	digestMaxDepth = 64 / digestBits
	// digestLeaf: a node that differs and holds at most this many
	// origins on both sides is settled by sending its entries rather
	// than its children's sums.
	digestLeaf = 16
	// maxFrameNodes bounds the tree nodes of one frame (an answer puts
	// more in further frames; a frame with more is refused), so that a
	// frame and its answer stay small.
	maxFrameNodes = 4096
)

// nodeID names a node of the digest tree.
type nodeID struct {
	depth  uint8
	prefix uint64 // the top 4×depth bits; the others zero
}

var treeRoot = nodeID{}

// holds says whether the origin key k falls under the node.
func (id nodeID) holds(k uint64) bool {
	return id.depth == 0 || k>>(64-digestBits*uint(id.depth)) == id.prefix>>(64-digestBits*uint(id.depth))
}

// child is the node's i-th child.
func (id nodeID) child(i int) nodeID {
	return nodeID{depth: id.depth + 1, prefix: id.prefix | uint64(i)<<(64-digestBits*uint(id.depth+1))}
}

// valid says whether the prefix has no bits below its depth.
func (id nodeID) valid() bool {
	if id.depth > digestMaxDepth {
		return false
	}
	if id.depth == digestMaxDepth {
		return true
	}
	return id.prefix<<(digestBits*uint(id.depth)) == 0
}

// mix64 is splitmix64's finalizer: a bijection of uint64 that spreads
// every input bit over the output.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// originKey places an origin in the tree (node IDs need not be random).
func originKey(o uint64) uint64 { return mix64(o ^ 0x9e3779b97f4a7c15) }

// entryHash is what an entry adds to its nodes' digests.
func entryHash(o, seq uint64) uint64 {
	return mix64(originKey(o) ^ mix64(seq+0x632be59bd9b4e019))
}

// sum is a node's summary: origins under it and the XOR of their hashes.
type sum struct {
	count  uint32
	digest uint64
}

// sumNode is a node's sum as a sums frame carries it; a final one is
// for information (the other side compares it, and answers nothing).
type sumNode struct {
	nodeID
	sum
	final bool
}

// entriesUnder is the entries of live under any of the nodes ids.
func entriesUnder(live map[uint64]uint64, ids []nodeID) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for o, s := range live {
		k := originKey(o)
		for _, id := range ids {
			if id.holds(k) {
				out[o] = s
				break
			}
		}
	}
	return out
}

// Kinds of sums frames.
const (
	sumsStep       = 0 // the next level of an exchange under way
	sumsOpen       = 1 // a dialer's first frame of an exchange
	sumsOpenAnswer = 2 // the listener's answer to it
)

// sumsMsg is the payload of a sums frame. An opening and its answer
// carry the sender's retired summary too, as a vector frame does.
type sumsMsg struct {
	kind byte
	// hasCut: the frame carries the cut its sums are computed at
	// (protocol 6, wire.ProtocolCut; cut.go); without, they are over the whole
	// vector (NoCut).
	hasCut  bool
	cut     uint64
	retired uint32   // kinds sumsOpen and sumsOpenAnswer
	digest  [16]byte // wire.RetiredDigest of the retired origins, likewise
	nodes   []sumNode
}

const sumNodeSize = 1 + 1 + 8 + 4 + 8

func encodeSums(m sumsMsg) []byte {
	b := make([]byte, 0, 1+8+20+4+sumNodeSize*len(m.nodes))
	b = append(b, m.kind)
	if m.hasCut {
		b = binary.LittleEndian.AppendUint64(b, m.cut)
	}
	if m.kind != sumsStep {
		b = binary.LittleEndian.AppendUint32(b, m.retired)
		b = append(b, m.digest[:]...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.nodes)))
	for _, n := range m.nodes {
		var f byte
		if n.final {
			f = 1
		}
		b = append(b, f, n.depth)
		b = binary.LittleEndian.AppendUint64(b, n.prefix)
		b = binary.LittleEndian.AppendUint32(b, n.count)
		b = binary.LittleEndian.AppendUint64(b, n.digest)
	}
	return b
}

// decodeSums decodes a sums frame; hasCut says it carries its cut (the
// connection speaks ProtocolCut).
func decodeSums(p []byte, hasCut bool) (sumsMsg, error) {
	if len(p) < 1 || p[0] > sumsOpenAnswer {
		return sumsMsg{}, fmt.Errorf("%w: sums of %d bytes", wire.ErrBadFrame, len(p))
	}
	m := sumsMsg{kind: p[0], hasCut: hasCut, cut: NoCut}
	p = p[1:]
	if hasCut {
		if len(p) < 8 {
			return sumsMsg{}, fmt.Errorf("%w: sums without a cut", wire.ErrBadFrame)
		}
		m.cut = binary.LittleEndian.Uint64(p)
		p = p[8:]
	}
	if m.kind != sumsStep {
		if len(p) < 20 {
			return sumsMsg{}, fmt.Errorf("%w: sums opening of %d bytes", wire.ErrBadFrame, len(p))
		}
		m.retired = binary.LittleEndian.Uint32(p)
		copy(m.digest[:], p[4:20])
		p = p[20:]
	}
	if len(p) < 4 {
		return sumsMsg{}, fmt.Errorf("%w: sums without a count", wire.ErrBadFrame)
	}
	n := binary.LittleEndian.Uint32(p)
	p = p[4:]
	if n > maxFrameNodes {
		return sumsMsg{}, fmt.Errorf("%w: sums of %d nodes (at most %d)", wire.ErrBadFrame, n, maxFrameNodes)
	}
	if uint64(len(p)) != uint64(n)*sumNodeSize {
		return sumsMsg{}, fmt.Errorf("%w: sums say %d nodes in %d bytes", wire.ErrBadFrame, n, len(p))
	}
	m.nodes = make([]sumNode, n)
	for i := range m.nodes {
		q := p[i*sumNodeSize:]
		if q[0] > 1 {
			return sumsMsg{}, fmt.Errorf("%w: sums node flags %#x", wire.ErrBadFrame, q[0])
		}
		sn := sumNode{final: q[0] == 1, nodeID: nodeID{depth: q[1], prefix: binary.LittleEndian.Uint64(q[2:])}}
		sn.count, sn.digest = binary.LittleEndian.Uint32(q[10:]), binary.LittleEndian.Uint64(q[14:])
		if !sn.valid() {
			return sumsMsg{}, fmt.Errorf("%w: tree node depth %d prefix %016x", wire.ErrBadFrame, sn.depth, sn.prefix)
		}
		m.nodes[i] = sn
	}
	return m, nil
}

// entriesMsg is the payload of an entries frame: every live entry the
// sender holds under the nodes (and none elsewhere); answer asks the
// receiver to send back its own under the same nodes.
type entriesMsg struct {
	answer  bool
	nodes   []nodeID
	entries map[uint64]uint64
}

func encodeEntries(m entriesMsg) []byte {
	b := make([]byte, 0, 1+4+9*len(m.nodes))
	var f byte
	if m.answer {
		f = 1
	}
	b = append(b, f)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.nodes)))
	for _, id := range m.nodes {
		b = append(b, id.depth)
		b = binary.LittleEndian.AppendUint64(b, id.prefix)
	}
	return append(b, wire.EncodeAck(m.entries)...)
}

func decodeEntries(p []byte) (entriesMsg, error) {
	if len(p) < 5 || p[0] > 1 {
		return entriesMsg{}, fmt.Errorf("%w: entries of %d bytes", wire.ErrBadFrame, len(p))
	}
	m := entriesMsg{answer: p[0] == 1}
	n := binary.LittleEndian.Uint32(p[1:])
	p = p[5:]
	if n > maxFrameNodes {
		return entriesMsg{}, fmt.Errorf("%w: entries under %d nodes (at most %d)", wire.ErrBadFrame, n, maxFrameNodes)
	}
	if uint64(len(p)) < uint64(n)*9 {
		return entriesMsg{}, fmt.Errorf("%w: entries say %d nodes in %d bytes", wire.ErrBadFrame, n, len(p))
	}
	m.nodes = make([]nodeID, n)
	under := map[nodeID]bool{}
	var depths []uint8
	for i := range m.nodes {
		id := nodeID{depth: p[9*i], prefix: binary.LittleEndian.Uint64(p[9*i+1:])}
		if !id.valid() {
			return entriesMsg{}, fmt.Errorf("%w: tree node depth %d prefix %016x", wire.ErrBadFrame, id.depth, id.prefix)
		}
		m.nodes[i] = id
		under[id] = true
		if !slices.Contains(depths, id.depth) {
			depths = append(depths, id.depth)
		}
	}
	v, err := wire.DecodeAck(p[9*n:])
	if err != nil {
		return entriesMsg{}, err
	}
	for o := range v {
		k := originKey(o)
		in := false
		for _, d := range depths {
			id := nodeID{depth: d}
			if d > 0 {
				id.prefix = k >> (64 - digestBits*uint(d)) << (64 - digestBits*uint(d))
			}
			if under[id] {
				in = true
				break
			}
		}
		if !in {
			return entriesMsg{}, fmt.Errorf("%w: entry of origin %016x under none of the frame's nodes", wire.ErrBadFrame, o)
		}
	}
	m.entries = v
	return m, nil
}
