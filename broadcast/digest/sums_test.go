package digest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cachecast/cachecast/broadcast/internal/originset"
	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// mapVector is a vector held in maps, as a digest index's source: the
// live origins and the retired ones (a store's vector holds both). Its
// change feed names the origins in changed when exact is set, and
// cannot tell otherwise (the index then reads the whole vector).
type mapVector struct {
	live, retired func() map[uint64]uint64
	changed       map[uint64]bool
	exact         bool
}

func (m *mapVector) Vector() map[uint64]uint64 {
	v := maps.Clone(m.live())
	maps.Copy(v, m.retired())
	return v
}

func (m *mapVector) LastSeq(o uint64) uint64 {
	if s, ok := m.live()[o]; ok {
		return s
	}
	return m.retired()[o]
}

func (m *mapVector) Changes(fn func(uint64)) bool {
	if !m.exact {
		return false
	}
	for o := range m.changed {
		fn(o)
	}
	m.changed = originset.Drained(m.changed)
	return true
}

// sumsOf computes the sums of the nodes ids over the vector live, in one
// pass over it: the sums by their definition.
func sumsOf(live map[uint64]uint64, ids []nodeID) []sum {
	out := make([]sum, len(ids))
	for o, s := range live {
		k, h := originKey(o), entryHash(o, s)
		for i, id := range ids {
			if id.holds(k) {
				out[i].count++
				out[i].digest ^= h
			}
		}
	}
	return out
}

// nodesToCheck is the root, its children, and the nodes at every depth
// above a few of the origins: the nodes whose sums a test compares.
func nodesToCheck(origins []uint64, rng *rand.Rand) []nodeID {
	ids := []nodeID{treeRoot}
	for c := range digestFanout {
		ids = append(ids, treeRoot.child(c))
	}
	for range 8 {
		if len(origins) == 0 {
			break
		}
		k := originKey(origins[rng.IntN(len(origins))])
		for d := 2; d <= digestMaxDepth; d++ {
			ids = append(ids, nodeID{depth: uint8(d), prefix: k >> (64 - digestBits*uint(d)) << (64 - digestBits*uint(d))})
		}
	}
	return ids
}

// TestSumTreeMatchesRecount: after random sets and removals over
// thousands of origins, many under one deep node (leaves split down
// there), every node's sum in the tree is the sum of its origins by the
// definition, and each gives exactly the entries under a node, or those
// changed since a change.
func TestSumTreeMatchesRecount(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	var tree sumTree
	v := map[uint64]uint64{}
	setAt := map[uint64]uint64{} // origin -> the gen it was last set at
	origins := originsUnder(200, 3, rng)
	for len(origins) < 3000 {
		origins = append(origins, rng.Uint64()|1)
	}
	gen := uint64(0)
	for round := range 20 {
		mark := gen
		for range 1500 {
			o := origins[rng.IntN(len(origins))]
			gen++
			if rng.IntN(4) == 0 {
				delete(v, o)
				tree.set(o, 0, gen)
			} else {
				s := rng.Uint64N(1000) + 1
				if v[o] != s {
					setAt[o] = gen // a change
				}
				v[o] = s
				tree.set(o, s, gen)
			}
		}
		if round == 19 { // all but a few gone: the tree shrinks back
			for o := range v {
				if rng.IntN(100) > 0 {
					gen++
					delete(v, o)
					tree.set(o, 0, gen)
				}
			}
		}
		ids := nodesToCheck(slices.Collect(maps.Keys(v)), rng)
		want := sumsOf(v, ids)
		for i, id := range ids {
			if got := tree.sumAt(id); got != want[i] {
				t.Fatalf("round %d: node %d/%016x sums %+v, want %+v", round, id.depth, id.prefix, got, want[i])
			}
			got, since := map[uint64]uint64{}, map[uint64]uint64{}
			tree.each(id, 0, func(o, s uint64) { got[o] = s })
			tree.each(id, mark, func(o, s uint64) { since[o] = s })
			for o, s := range v {
				if !id.holds(originKey(o)) {
					continue
				}
				if got[o] != s {
					t.Fatalf("round %d: node %d/%016x gives %d of %x, want %d", round, id.depth, id.prefix, got[o], o, s)
				}
				if setAt[o] > mark && since[o] != s {
					t.Fatalf("round %d: node %d/%016x does not give %x, set since the mark", round, id.depth, id.prefix, o)
				}
			}
			if len(got) != int(want[i].count) {
				t.Fatalf("round %d: node %d/%016x gives %d entries, holds %d", round, id.depth, id.prefix, len(got), want[i].count)
			}
		}
	}
}

// digestRecount is a store's side of the digest exchanges by the
// definitions, computed from nothing: its live vector (the retired left
// out), its vector at a cut (each origin's highest seq stamped at or
// before it, searched from the head one by one), and the retired ones.
func digestRecount(st *store.Store, retired map[uint64]bool, cut uint64) (at, ret map[uint64]uint64) {
	at, ret = map[uint64]uint64{}, map[uint64]uint64{}
	for o, h := range st.Vector() {
		if retired[o] {
			ret[o] = h
			continue
		}
		if cut == NoCut {
			at[o] = h
		} else if s := scanCut(h, cut, func(s uint64) uint64 { return StampIn(st, o, s) }); s > 0 {
			at[o] = s
		}
	}
	return at, ret
}

// TestDigestIndexMatchesRecount: on a real store, through random rounds
// of appends (origins writing at their own paces, stamps growing with
// their seqs), origins retired and back, cuts that move on, go back,
// repeat or skip, and the store closed and opened again under a new
// index, the index's sums at every cut asked equal those recomputed
// from nothing, on the root, its children and nodes at every depth; its
// entries are the vector's; its retired summary is the recount's; and a
// peer that merges only what changed since its last whole merge (seen)
// holds the whole vector at the cut.
func TestDigestIndexMatchesRecount(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 14))
	dir := t.TempDir()
	open := func() (*store.Store, *Index) {
		o := store.DefaultOptions(dir)
		o.SegmentSize = 1 << 20
		o.IndexChunkEntries = 4096
		st, err := store.Open(o)
		if err != nil {
			t.Fatal(err)
		}
		return st, NewIndex(st, st.VectorFeed(), func(o, s uint64) uint64 { return StampIn(st, o, s) })
	}
	st, x := open()
	defer func() { st.Close() }()
	const origins = 120
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	// Origin o's records are stamped pace(o) ms apart from t0.
	pace := func(o uint64) int64 { return int64(o%5) + 1 }
	stamp := func(o, seq uint64) uint64 { return record.MakeHLC(t0+int64(seq)*pace(o), 0) }
	buf := make([]byte, 512)
	appendRec := func(o uint64) {
		seq := st.LastSeq(o) + 1
		m := record.Message{Topic: "t", Key: fmt.Sprintf("k%d", o), Value: []byte("v")}
		n := record.Encode(buf, &m, record.Stamp{Origin: o, Seq: seq, HLC: stamp(o, seq)})
		if _, err := st.AppendRecord(buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
	retired := map[uint64]bool{}
	holds, seen := map[uint64]uint64{}, map[uint64]uint64{} // the peer's view
	cut := record.MakeHLC(t0+20, record.MaxLogical)
	var cuts []uint64
	for round := range 150 {
		for o := uint64(1); o <= origins; o++ {
			if rng.IntN(100) < 25 {
				for range rng.IntN(6) + 1 {
					appendRec(o)
				}
			}
		}
		if o := rng.Uint64N(origins) + 1; rng.IntN(5) == 0 {
			retired[o] = !retired[o]
			x.Retire(o, retired[o])
		}
		if rng.IntN(40) == 0 { // a restart: the store opened again, a new index
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			st, x = open()
			for o := range retired {
				x.Retire(o, retired[o])
			}
			holds, seen = map[uint64]uint64{}, map[uint64]uint64{}
		}
		switch r := rng.IntN(10); {
		case r < 5:
			cut += record.MakeHLC(int64(rng.IntN(15)), 0)
		case r == 5 && len(cuts) > 0:
			cut = cuts[rng.IntN(len(cuts))] // a dialer's cut, or one long gone
		case r == 6:
			cut -= record.MakeHLC(int64(rng.IntN(10)), 0)
		}
		cuts = append(cuts, cut)
		for _, at := range []uint64{cut, NoCut} {
			want, wantRetired := digestRecount(st, retired, at)
			x.mu.Lock()
			x.syncLocked()
			sums := x.sumsAtLocked(at)
			ids := nodesToCheck(slices.Collect(maps.Keys(want)), rng)
			for i, s := range sumsOf(want, ids) {
				if got := sums.sum(ids[i]); got != s {
					x.mu.Unlock()
					t.Fatalf("round %d, cut %d: node %d/%016x sums %+v, want %+v", round, at, ids[i].depth, ids[i].prefix, got, s)
				}
			}
			if got := sums.changedUnder([]nodeID{treeRoot}, 0); !maps.Equal(got, want) {
				x.mu.Unlock()
				t.Fatalf("round %d, cut %d: the index gives %d entries, the recount %d", round, at, len(got), len(want))
			}
			if got := x.headsUnderLocked([]nodeID{treeRoot}); at == NoCut && !maps.Equal(got, want) {
				x.mu.Unlock()
				t.Fatalf("round %d: the live vector has %d origins, the recount %d", round, len(got), len(want))
			}
			n, d := x.retiredLocked()
			learned := sums.changedUnder([]nodeID{treeRoot}, seen[sums.id])
			seen[sums.id] = x.gen
			x.mu.Unlock()
			if n != uint32(len(wantRetired)) || d != wire.RetiredDigest(wantRetired) {
				t.Fatalf("round %d: retired summary %d %x, want %d", round, n, d, len(wantRetired))
			}
			for o, s := range learned {
				holds[o] = max(holds[o], s)
			}
			for o, s := range want {
				if holds[o] < s {
					t.Fatalf("round %d, cut %d: the peer holds %d of %x after merging what changed, the cut %d", round, at, holds[o], o, s)
				}
			}
		}
	}
}

// recountAnswer is what answering an idle exchange's opening cost before
// the digest index (the code up to 8e5b751): the store's vector copied,
// the vector at the cut computed from the marks of the cut (cached: no
// stamp read when no head moved), the root's sum over it, and what the
// other side was learned to hold under the equal root (all of it).
func recountAnswer(live map[uint64]uint64, marks map[uint64]cutMark, at uint64) (sum, map[uint64]uint64) {
	v := maps.Clone(live)
	out := make(map[uint64]uint64, len(v))
	for o, head := range v {
		m, ok := marks[o]
		switch {
		case ok && head == m.head:
		case ok && head > m.head && m.cut < m.head:
			m.head = head
		default:
			m = cutMark{head: head, cut: cutSeq(0, head, at, func(s uint64) uint64 { return s })}
		}
		marks[o] = m
		if m.cut > 0 {
			out[o] = m.cut
		}
	}
	return sumsOf(out, []nodeID{treeRoot})[0], entriesUnder(out, []nodeID{treeRoot})
}

// BenchmarkDigestAnswer is what answering an idle exchange's opening at
// a cut costs a node of N origins (a record's stamp is its seq; about
// half the origins have records past the cut), before the digest index
// (code=recount, recountAnswer) and with it (code=index: the frame
// answered from the sums kept, what the link learns merged as a link
// does, so that a later frame learns only what changed). changed=k has k
// origins append a record between two frames (records in flight past
// the cut: the sums at the cut stay equal). ns/origin is ns/op over N.
func BenchmarkDigestAnswer(b *testing.B) {
	for _, n := range []int{100, 1000, 4000} {
		rng := rand.New(rand.NewPCG(7, 8))
		live := map[uint64]uint64{}
		for len(live) < n {
			live[rng.Uint64()|1] = rng.Uint64N(1_000_000) + 1
		}
		var young []uint64
		for o, s := range live {
			if s > 500_000 {
				young = append(young, o)
			}
		}
		at := uint64(500_000)
		report := func(b *testing.B) {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/origin")
		}
		b.Run(fmt.Sprintf("code=recount/origins=%d", n), func(b *testing.B) {
			marks := map[uint64]cutMark{}
			recountAnswer(live, marks, at)
			b.ReportAllocs()
			for b.Loop() {
				if s, learned := recountAnswer(live, marks, at); s.count == 0 || len(learned) == 0 {
					b.Fatal("nothing at the cut")
				}
			}
			report(b)
		})
		for _, changed := range []int{0, 16} {
			b.Run(fmt.Sprintf("code=index/origins=%d/changed=%d", n, changed), func(b *testing.B) {
				v := maps.Clone(live)
				src := &mapVector{live: func() map[uint64]uint64 { return v }, retired: func() map[uint64]uint64 { return nil },
					changed: map[uint64]bool{}, exact: true}
				for o := range v {
					src.changed[o] = true
				}
				x := NewIndex(src, src, func(o, s uint64) uint64 { return s })
				open := x.Opening(true, at)
				seen := map[uint64]uint64{}
				answer := func() Step {
					st, _, err := x.Answer(wire.FrameSums, open.Payload, true, seen)
					if err != nil {
						b.Fatal(err)
					}
					if st.Whole {
						seen[st.Sums] = st.Gen
					}
					return st
				}
				answer()
				b.ReportAllocs()
				turn := 0
				for b.Loop() {
					turn++
					for i := range changed {
						o := young[(i*7919+turn)%len(young)]
						v[o]++
						src.changed[o] = true
					}
					if st := answer(); !st.Whole {
						b.Fatal("the sums at the cut differ")
					}
				}
				report(b)
			})
		}
	}
}
