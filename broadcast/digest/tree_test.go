package digest

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cachecast/cachecast/broadcast/wire"
)

// digestSide is one side of a simulated digest exchange: its vector, its
// retired list, and what it learned of the other's vector. With stamp
// set, the exchange compares at a cut (protocol 6): stamp is every
// record's stamp (the same on both sides, as a record's is).
type digestSide struct {
	live, retired, learned map[uint64]uint64
	retiredLearned         map[uint64]uint64 // the other's retired list, if it came
	sameRetired            bool
	stamp                  func(o, seq uint64) uint64
	x                      *Index
}

// index is the side's digest index, over its maps (read again whole at
// every frame: live and retired may be changed in between).
func (d *digestSide) index() *Index {
	if d.x == nil {
		src := &mapVector{live: func() map[uint64]uint64 { return d.live }, retired: func() map[uint64]uint64 { return d.retired }}
		d.x = NewIndex(src, src, d.stamp)
	}
	for o := range d.retired {
		d.x.Retire(o, true)
	}
	return d.x
}

// open is the side's opening frame at the cut at (NoCut without stamps).
func (d *digestSide) open(at uint64) Frame {
	if d.stamp == nil {
		return d.index().Opening(false, NoCut)
	}
	return d.index().Opening(true, at)
}

// simulateExchange runs a digest exchange between a dialer and a listener
// to its end, frames delivered in order, and returns the tree nodes and
// entries carried and the frames sent, both ways. With stamps, the
// dialer opens at the cut at.
func simulateExchange(t *testing.T, dialer, listener *digestSide, at uint64) (carried, frames int) {
	t.Helper()
	dialer.learned, listener.learned = map[uint64]uint64{}, map[uint64]uint64{}
	type inFlight struct {
		to *digestSide
		f  Frame
	}
	queue := []inFlight{{listener, dialer.open(at)}}
	for len(queue) > 0 {
		if frames++; frames > 1000 {
			t.Fatal("the exchange does not end")
		}
		q := queue[0]
		queue = queue[1:]
		other := dialer
		if q.to == dialer {
			other = listener
		}
		if q.f.Type == wire.FrameRetired {
			v, err := wire.DecodeAck(q.f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			carried += len(v)
			q.to.retiredLearned = v
			continue
		}
		st, got, err := q.to.index().Answer(q.f.Type, q.f.Payload, q.to.stamp != nil, map[uint64]uint64{})
		if err != nil {
			t.Fatalf("frame of type %d refused: %v", q.f.Type, err)
		}
		carried += got
		for o, s := range st.Learned {
			q.to.learned[o] = max(q.to.learned[o], s)
		}
		if st.Opening {
			q.to.sameRetired = st.SameRetired
		}
		for _, f := range st.Out {
			queue = append(queue, inFlight{other, f})
		}
	}
	return carried, frames
}

// originsUnder returns n origins whose keys share their first depth
// digits (all under one node at that depth), found by trying.
func originsUnder(n, depth int, rng *rand.Rand) []uint64 {
	base := rng.Uint64()
	want := nodeID{depth: uint8(depth), prefix: originKey(base) >> (64 - digestBits*depth) << (64 - digestBits*depth)}
	out := []uint64{base}
	for len(out) < n {
		if o := rng.Uint64(); o != 0 && want.holds(originKey(o)) {
			out = append(out, o)
		}
	}
	return out
}

// TestDigestExchangeConverges: whatever the pattern of differences
// between two vectors (none, one entry, one in every bucket of the root,
// all of them, disjoint sets, many origins under one deep node, empty
// sides), one exchange leaves each side knowing the other's vector
// exactly, and the nodes and entries it carries grow with the
// differences, not with the vector: two when equal.
func TestDigestExchangeConverges(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) map[uint64]uint64 {
		v := map[uint64]uint64{}
		for len(v) < n {
			v[rng.Uint64()|1] = rng.Uint64N(1000) + 1
		}
		return v
	}
	bump := func(v map[uint64]uint64, k int) map[uint64]uint64 {
		w := maps.Clone(v)
		for o := range w {
			if k == 0 {
				break
			}
			w[o] += uint64(k)
			k--
		}
		return w
	}
	// oneInEachBucket changes one origin under each child of the root.
	oneInEachBucket := func(v map[uint64]uint64) map[uint64]uint64 {
		w := maps.Clone(v)
		done := map[int]bool{}
		for o := range w {
			b := int(originKey(o) >> (64 - digestBits))
			if !done[b] {
				done[b] = true
				w[o]++
			}
		}
		return w
	}
	drop := func(v map[uint64]uint64, k int) map[uint64]uint64 {
		w := maps.Clone(v)
		for o := range w {
			if k == 0 {
				break
			}
			delete(w, o)
			k--
		}
		return w
	}
	deep := map[uint64]uint64{}
	for i, o := range originsUnder(40, 2, rng) {
		deep[o] = uint64(i + 1)
	}
	deepFleet := random(200)
	maps.Copy(deepFleet, deep)
	big := random(1000)
	mid := random(100)
	small := random(5)
	tests := []struct {
		name     string
		a, b     map[uint64]uint64
		maxCarry int // tree nodes and entries carried, both ways
	}{
		{"both empty", nil, nil, 2},
		{"equal, 1,000 origins", big, maps.Clone(big), 2},
		{"equal, 5 origins", small, maps.Clone(small), 2},
		{"one side empty", nil, mid, 4 + 100},
		{"the other side empty", mid, nil, 4 + 100},
		{"5 origins, one differs", small, bump(small, 1), 1 + 2*(1+5)},
		{"1,000 origins, one seq differs", big, bump(big, 1), 100},
		{"1,000 origins, one missing on one side", big, drop(big, 1), 100},
		{"1,000 origins, one missing on each side", drop(big, 1), drop(big, 2), 200},
		{"100 origins, one in every bucket differs", mid, oneInEachBucket(mid), 4 * 100},
		{"1,000 origins, one in every bucket differs", big, oneInEachBucket(big), 800},
		{"100 origins, all differ", mid, bump(mid, 100), 4 * 100},
		{"disjoint, 100 each", mid, random(100), 4 * 200},
		{"40 origins under one node of depth 2, one differs", deep, bump(deep, 1), 100},
		{"deep node in a fleet of 240, all 40 differ", deepFleet, func() map[uint64]uint64 {
			w := maps.Clone(deepFleet)
			for o := range deep {
				w[o]++
			}
			return w
		}(), 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, dir := range []string{"a dials", "b dials"} {
				a := &digestSide{live: maps.Clone(tt.a), retired: map[uint64]uint64{}}
				b := &digestSide{live: maps.Clone(tt.b), retired: map[uint64]uint64{}}
				if a.live == nil {
					a.live = map[uint64]uint64{}
				}
				if b.live == nil {
					b.live = map[uint64]uint64{}
				}
				d, l := a, b
				if dir == "b dials" {
					d, l = b, a
				}
				carried, frames := simulateExchange(t, d, l, 0)
				if !maps.Equal(a.learned, b.live) || !maps.Equal(b.learned, a.live) {
					t.Fatalf("%s: a learned %d of b's %d entries exactly, b %d of a's %d",
						dir, agreeing(a.learned, b.live), len(b.live), agreeing(b.learned, a.live), len(a.live))
				}
				t.Logf("%s: %d tree nodes and entries carried in %d frames", dir, carried, frames)
				if carried > tt.maxCarry {
					t.Fatalf("%s: %d tree nodes and entries carried (%d frames); want at most %d (the two vectors hold %d and %d)",
						dir, carried, frames, tt.maxCarry, len(a.live), len(b.live))
				}
				if !a.sameRetired || !b.sameRetired || a.retiredLearned != nil || b.retiredLearned != nil {
					t.Fatalf("%s: equal retired sets compared as different", dir)
				}
			}
		})
	}
}

func agreeing(learned, truth map[uint64]uint64) int {
	n := 0
	for o, s := range truth {
		if learned[o] == s {
			n++
		}
	}
	return n
}

// TestDigestExchangeRetired: when the retired sets differ, the opening's
// answer and the dialer's reply to it carry each side's retired list;
// when they match, neither does.
func TestDigestExchangeRetired(t *testing.T) {
	t.Parallel()
	live := map[uint64]uint64{1: 5, 2: 7}
	tests := []struct {
		name   string
		ra, rb map[uint64]uint64
	}{
		{"same", map[uint64]uint64{9: 3}, map[uint64]uint64{9: 3}},
		{"one retired, one not", map[uint64]uint64{9: 3}, map[uint64]uint64{}},
		{"different seqs", map[uint64]uint64{9: 3}, map[uint64]uint64{9: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &digestSide{live: maps.Clone(live), retired: tt.ra}
			b := &digestSide{live: maps.Clone(live), retired: tt.rb}
			simulateExchange(t, a, b, 0)
			same := maps.Equal(tt.ra, tt.rb)
			if a.sameRetired != same || b.sameRetired != same {
				t.Fatalf("sameRetired %v and %v; want %v", a.sameRetired, b.sameRetired, same)
			}
			if same {
				if a.retiredLearned != nil || b.retiredLearned != nil {
					t.Fatal("a retired list sent though the sets match")
				}
				return
			}
			if !maps.Equal(a.retiredLearned, tt.rb) || !maps.Equal(b.retiredLearned, tt.ra) {
				t.Fatalf("a got %v (b's %v), b got %v (a's %v)", a.retiredLearned, tt.rb, b.retiredLearned, tt.ra)
			}
		})
	}
}

// TestDigestDecodersRefuseJunk: malformed sums and entries frames are
// refused with wire.ErrBadFrame.
func TestDigestDecodersRefuseJunk(t *testing.T) {
	t.Parallel()
	good := encodeEntries(entriesMsg{nodes: []nodeID{treeRoot}, entries: map[uint64]uint64{7: 1}})
	outside := nodeID{depth: 1, prefix: (originKey(7)>>60 + 1) % 16 << 60}
	sums := encodeSums(sumsMsg{kind: sumsStep, nodes: []sumNode{{nodeID: treeRoot}}})
	tests := []struct {
		name string
		dec  func([]byte) error
		p    []byte
	}{
		{"sums empty", decSums, nil},
		{"sums bad kind", decSums, []byte{3, 0, 0, 0, 0}},
		{"sums opening short", decSums, []byte{sumsOpen, 0, 0, 0, 0}},
		{"sums count too high", decSums, append([]byte{0}, 2, 0, 0, 0)},
		{"sums trailing byte", decSums, append(bytes.Clone(sums), 0)},
		{"sums bad flags", decSums, func() []byte { b := bytes.Clone(sums); b[5] = 2; return b }()},
		{"sums depth 17", decSums, encodeSums(sumsMsg{nodes: []sumNode{{nodeID: nodeID{depth: 17}}}})},
		{"sums prefix bits below depth", decSums, encodeSums(sumsMsg{nodes: []sumNode{{nodeID: nodeID{depth: 1, prefix: 1}}}})},
		{"cut sums without their cut", decCutSums, []byte{sumsStep, 1, 2, 3, 4, 5, 6, 7}},
		{"cut sums read without a cut", decSums, encodeSums(sumsMsg{hasCut: true, cut: 1 << 40, nodes: []sumNode{{nodeID: treeRoot}}})},
		{"sums read with a cut", decCutSums, sums},
		{"entries empty", decEntries, nil},
		{"entries bad flags", decEntries, func() []byte { b := bytes.Clone(good); b[0] = 2; return b }()},
		{"entries node count too high", decEntries, []byte{0, 9, 0, 0, 0, 0, 0, 0, 0}},
		{"entries truncated", decEntries, good[:len(good)-1]},
		{"entries an origin outside its nodes", decEntries, encodeEntries(entriesMsg{nodes: []nodeID{outside}, entries: map[uint64]uint64{7: 1}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.dec(tt.p); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if err := decEntries(good); err != nil {
		t.Fatalf("a good entries frame refused: %v", err)
	}
}

func decSums(p []byte) error    { _, err := decodeSums(p, false); return err }
func decCutSums(p []byte) error { _, err := decodeSums(p, true); return err }
func decEntries(p []byte) error { _, err := decodeEntries(p); return err }

// FuzzDigestFrames: the sums and entries decoders refuse or take any
// bytes without panicking, what they take encodes back to the same bytes,
// and answering it from a small vector ends with frames that decode. The
// first byte is the frame's type, with bit 7 set for a connection of
// ProtocolCut (sums frames carry their cut).
func FuzzDigestFrames(f *testing.F) {
	live := map[uint64]uint64{1: 2, 3: 4, 5: 6}
	f.Add(append([]byte{wire.FrameSums}, encodeSums(sumsMsg{kind: sumsOpen, retired: 1, digest: wire.RetiredDigest(map[uint64]uint64{9: 1}),
		nodes: []sumNode{{nodeID: treeRoot, sum: sum{count: 3, digest: 42}}}})...))
	f.Add(append([]byte{wire.FrameSums}, encodeSums(sumsMsg{kind: sumsStep, nodes: []sumNode{{nodeID: treeRoot.child(3), sum: sum{count: 1}, final: true}}})...))
	f.Add(append([]byte{wire.FrameEntries}, encodeEntries(entriesMsg{answer: true, nodes: []nodeID{treeRoot}, entries: map[uint64]uint64{1: 3}})...))
	f.Add(append([]byte{wire.FrameSums | 0x80}, encodeSums(sumsMsg{kind: sumsOpen, hasCut: true, cut: 3,
		nodes: []sumNode{{nodeID: treeRoot, sum: sum{count: 2, digest: 42}}}})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		typ, hasCut, p := b[0]&0x7f, b[0]&0x80 != 0, b[1:]
		switch typ {
		case wire.FrameSums:
			m, err := decodeSums(p, hasCut)
			if err == nil && !bytes.Equal(encodeSums(m), p) {
				t.Fatal("sums round trip")
			}
		case wire.FrameEntries:
			m, err := decodeEntries(p)
			if err == nil && len(m.entries) <= 1 && !bytes.Equal(encodeEntries(m), p) {
				t.Fatal("entries round trip")
			}
		default:
			return
		}
		side := &digestSide{live: live, stamp: func(o, seq uint64) uint64 { return seq }}
		st, _, err := side.index().Answer(typ, p, hasCut, nil)
		if err != nil {
			return
		}
		for _, f := range st.Out {
			var err error
			switch f.Type {
			case wire.FrameSums:
				_, err = decodeSums(f.Payload, hasCut)
			case wire.FrameEntries:
				_, err = decodeEntries(f.Payload)
			case wire.FrameRetired:
				_, err = wire.DecodeAck(f.Payload)
			}
			if err != nil {
				t.Fatalf("an answer of type %d does not decode: %v", f.Type, err)
			}
		}
	})
}
