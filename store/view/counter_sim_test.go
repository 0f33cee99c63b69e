package view

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

var counterSims = flag.Int("view.countersims", 400, "runs of TestCounterSim (seeds -view.seed on)")

// simNode is one node of the counter simulation: its view, its origin,
// the publishes it has yet to deliver to each other node, in order, and
// for a restart every publish it applied, with its last checkpoint (a
// snapshot of its view, taken when it had applied snapAt of them).
type simNode struct {
	v       *View
	origin  uint64
	seq     uint64
	out     [][][]record.Record // per destination, a publish's records
	applied [][]record.Record
	snap    []byte
	snapAt  int
}

// counterSim is three views of one key that take counter commands (alone
// or several in one MULTI, one batch) and expiry changes as the daemon
// makes them (Count, ExpiryChange), deliver each other's publishes in
// each origin's order but in any order across origins, merge each
// other's snapshots, and restart (their last checkpoint, then the
// publishes applied since, some of those before it again); sum is the
// increments acknowledged since the phase's reset.
type counterSim struct {
	t     *testing.T
	rng   *rand.Rand
	clock *fakeClock
	nodes []*simNode
	hlc   uint16
	sum   int64
	log   []string
}

func (s *counterSim) stamp(n *simNode) record.Stamp {
	n.seq++
	s.hlc++
	return record.Stamp{Origin: n.origin, Seq: n.seq, HLC: record.MakeHLC(s.clock.ms.Load(), s.hlc)}
}

func (s *counterSim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

// publish stamps ms (one batch when several) on node i, applies them
// there and queues them for the others.
func (s *counterSim) publish(i int, ms ...record.Message) {
	n := s.nodes[i]
	var rs []record.Record
	for j := range ms {
		if len(ms) > 1 {
			ms[j].BatchFollow = uint32(len(ms) - 1 - j)
		}
		rs = append(rs, stamped(s.t, &ms[j], s.stamp(n)))
	}
	s.apply(n, rs)
	for j := range s.nodes {
		if j != i {
			n.out[j] = append(n.out[j], rs)
		}
	}
}

// apply applies the records of one publish to n's view, as the store
// does (a batch under one hold of the lock), and remembers them.
func (s *counterSim) apply(n *simNode, rs []record.Record) {
	applyUnit(n.v, rs)
	n.applied = append(n.applied, rs)
}

func applyUnit(v *View, rs []record.Record) {
	if len(rs) == 1 {
		v.Apply(rs[0])
		return
	}
	v.ApplyBatch(rs)
}

// incr is a MULTI of INCRBY ds[0], ds[1]... of the key on node i (one
// INCRBY alone when ds has one): the first counts on what Counting
// says, the next ones on what the transaction's view shows after it,
// the same version or absence (as resp's TxView).
func (s *counterSim) incr(i int, ds ...int64) {
	e, found := s.nodes[i].v.Counting("prices", "k")
	ms := make([]record.Message, 0, len(ds))
	for _, d := range ds {
		m, value, err := Count("prices", "k", e, found, Increment{N: d})
		if err != nil {
			s.t.Fatal(err)
		}
		if m.CountAbsent {
			e = Entry{Stamp: e.Absence.Of, Base: []byte("0"), Absence: e.Absence}
			if e.Stamp.Origin == 0 {
				e.Stamp = record.Genesis
			}
		}
		e.Value, found = value, true
		ms = append(ms, m)
		s.sum += d
	}
	s.logf("node%d incr %v on %+v absent %v gone %d", i, ds, ms[0].CountOn, ms[0].CountAbsent, ms[0].ExpiresAt)
	s.publish(i, ms...)
}

// delta is an increment as TestConvergeRandomOps draws them: -5 to 10,
// so that a lost increment can leave the sum above the acknowledged
// one as well as below.
func (s *counterSim) delta() int64 { return s.rng.Int64N(16) - 5 }

// expire is PEXPIREAT at on node i, when it holds the key.
func (s *counterSim) expire(i int, at int64) {
	e, found := s.nodes[i].v.Get("prices", "k")
	if !found {
		return
	}
	m := ExpiryChange("prices", "k", e, at)
	s.logf("node%d pexpireat %d of %+v absent %v gone %d", i, at, m.ExpiryOf, m.ExpiryAbsent, m.Gone)
	s.publish(i, m)
}

// deliverOne delivers the next publish of one queue, drawn at random.
func (s *counterSim) deliverOne() bool {
	var qs [][2]int
	for i, n := range s.nodes {
		for j := range n.out {
			if len(n.out[j]) > 0 {
				qs = append(qs, [2]int{i, j})
			}
		}
	}
	if len(qs) == 0 {
		return false
	}
	q := qs[s.rng.IntN(len(qs))]
	n := s.nodes[q[0]]
	rs := n.out[q[1]][0]
	n.out[q[1]] = n.out[q[1]][1:]
	s.apply(s.nodes[q[1]], rs)
	s.logf("  node%d gets %d/%d-%d", q[1], rs[0].Origin(), rs[0].Seq(), rs[len(rs)-1].Seq())
	return true
}

func (s *counterSim) converge() {
	for s.deliverOne() {
	}
	for _, n := range s.nodes {
		n.v.settleDue()
	}
}

// merge puts node i's snapshot into node j's view (a bootstrap's).
func (s *counterSim) merge(i, j int) {
	if i == j {
		return
	}
	var buf bytes.Buffer
	if err := EncodeSnapshot(&buf, s.nodes[i].v, 0, nil); err != nil {
		s.t.Fatal(err)
	}
	if _, _, err := s.nodes[j].v.ApplySnapshot(&buf); err != nil {
		s.t.Fatal(err)
	}
	s.logf("  node%d merges node%d's snapshot", j, i)
}

// checkpoint snapshots node i's view (a store's snapshot).
func (s *counterSim) checkpoint(i int) {
	n := s.nodes[i]
	var buf bytes.Buffer
	if err := EncodeSnapshot(&buf, n.v, 0, nil); err != nil {
		s.t.Fatal(err)
	}
	n.snap, n.snapAt = buf.Bytes(), len(n.applied)
	s.logf("  node%d checkpoint after %d publishes", i, n.snapAt)
}

// restart makes node i's view what a restart loads: its last checkpoint
// (none: an empty view), then the publishes it applied since, from up
// to 3 before the checkpoint on (a snapshot may hold records past the
// log position it covers, which the replay applies again).
func (s *counterSim) restart(i int) {
	n := s.nodes[i]
	v := newTimedView(s.clock)
	if n.snap != nil {
		var err error
		if v, _, _, err = decodeSnapshot(bytes.NewReader(n.snap), int64(len(n.snap)), s.clock.now); err != nil {
			s.t.Fatal(err)
		}
	}
	from := n.snapAt
	if from > 0 {
		from -= s.rng.IntN(min(from, 3) + 1)
	}
	v.settleDue()
	for _, rs := range n.applied[from:] {
		applyUnit(v, rs)
	}
	v.settleDue()
	n.v = v
	s.logf("  node%d restarts: checkpoint after %d publishes, replay from %d", i, n.snapAt, from)
}

// check is "" when every node serves the acknowledged sum with one
// digest, else what is wrong.
func (s *counterSim) check() string {
	want := strconv.FormatInt(s.sum, 10)
	for i, n := range s.nodes {
		if e, found := n.v.Get("prices", "k"); !found || string(e.Value) != want {
			over := ""
			if got, _ := strconv.ParseInt(string(e.Value), 10, 64); found && got > s.sum {
				over = " (over)"
			}
			return fmt.Sprintf("node%d serves %q (found %v), the acknowledged increments sum to %s%s", i, e.Value, found, want, over)
		}
		if n.v.Digest() != s.nodes[0].v.Digest() {
			return fmt.Sprintf("node%d's digest differs from node0's", i)
		}
	}
	return ""
}

// TestCounterSim: three nodes take INCRBY (-5 to 10), MULTIs of 2 or 3
// INCRBYs and PEXPIRE (1 h) on one key, deliver each other's publishes
// in any order across origins, merge each other's snapshots, take
// checkpoints and restart from them (replaying some publishes twice), in
// three phases (a fresh key; after a DEL; after a PEXPIRE of 100 ms has
// expired the counter), as the daemon's TestConvergeRandomOps does.
// After each phase every node must serve the sum of the increments
// acknowledged in it, with one digest.
// -view.countersims runs more seeds (from -view.seed on).
func TestCounterSim(t *testing.T) {
	base := propertySeed(t)
	for i := range uint64(*counterSims) {
		if msg, log := runCounterSim(t, base+i); msg != "" {
			t.Fatalf("seed %d (rerun with -view.seed=%d -view.countersims=1): %s\n%s", base+i, base+i, msg, log)
		}
	}
}

func runCounterSim(t *testing.T, seed uint64) (msg, log string) {
	clock := &fakeClock{}
	clock.ms.Store(timeBase)
	s := &counterSim{t: t, rng: rand.New(rand.NewPCG(seed, 7)), clock: clock}
	for i := range 3 {
		s.nodes = append(s.nodes, &simNode{v: newTimedView(clock), origin: uint64(i + 1), out: make([][][]record.Record, 3)})
	}
	for phase := range 3 {
		if phase > 0 {
			if r := s.rng.IntN(3); phase == 1 {
				s.publish(r, record.Message{Topic: "prices", Key: "k", Delete: true})
			} else {
				s.expire(r, clock.ms.Load()+100)
			}
			s.converge()
			clock.ms.Add(200)
			for _, n := range s.nodes {
				n.v.settleDue()
			}
			s.sum = 0
			s.logf("--- phase %d", phase)
		}
		for range 16 {
			clock.ms.Add(1)
			s.step()
		}
		s.converge()
		if s.sum != 0 {
			if msg := s.check(); msg != "" {
				return fmt.Sprintf("phase %d: %s", phase, msg), strings.Join(s.log, "\n")
			}
		}
	}
	return "", ""
}

// step is one draw of the simulation; every node's index must agree
// with its B-tree after it.
func (s *counterSim) step() {
	defer func() {
		for i, n := range s.nodes {
			if err := indexAgrees(n.v); err != nil {
				s.t.Fatalf("node%d: %v\n%s", i, err, strings.Join(s.log, "\n"))
			}
		}
	}()
	switch x := s.rng.IntN(20); {
	case x < 7:
		s.incr(s.rng.IntN(3), s.delta())
	case x < 9:
		i, ds := s.rng.IntN(3), []int64{s.delta(), s.delta(), s.delta()}
		s.incr(i, ds[:2+s.rng.IntN(2)]...)
	case x < 10:
		s.expire(s.rng.IntN(3), s.clock.ms.Load()+3_600_000+s.rng.Int64N(1000))
	case x < 11:
		s.merge(s.rng.IntN(3), s.rng.IntN(3))
	case x < 12:
		s.checkpoint(s.rng.IntN(3))
	case x < 13:
		s.restart(s.rng.IntN(3))
	default:
		s.deliverOne()
	}
}
