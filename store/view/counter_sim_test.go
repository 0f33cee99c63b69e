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

// simNode is one node of the counter simulation: its view, its origin
// and the records it has yet to deliver to each other node, in order.
type simNode struct {
	v      *View
	origin uint64
	seq    uint64
	out    [][]record.Record // per destination
}

// counterSim is three views of one key that take counter commands and
// expiry changes as the daemon makes them (Count, ExpiryChange), deliver
// each other's records in each origin's order but in any order across
// origins, and merge each other's snapshots or reload their own; sum is the increments
// acknowledged since the phase's reset.
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

// publish applies m on node i and queues it for the others.
func (s *counterSim) publish(i int, m *record.Message) {
	n := s.nodes[i]
	r := stamped(s.t, m, s.stamp(n))
	n.v.Apply(r)
	for j := range s.nodes {
		if j != i {
			n.out[j] = append(n.out[j], r)
		}
	}
}

// incr is INCRBY d on node i.
func (s *counterSim) incr(i int, d int64) {
	e, found := s.nodes[i].v.Counting("prices", "k")
	m, _, err := Count("prices", "k", e, found, Increment{N: d})
	if err != nil {
		s.t.Fatal(err)
	}
	s.logf("node%d incr %d on %+v absent %v gone %d", i, d, m.CountOn, m.CountAbsent, m.ExpiresAt)
	s.sum += d
	s.publish(i, &m)
}

// expire is PEXPIREAT at on node i, when it holds the key.
func (s *counterSim) expire(i int, at int64) {
	e, found := s.nodes[i].v.Get("prices", "k")
	if !found {
		return
	}
	m := ExpiryChange("prices", "k", e, at)
	s.logf("node%d pexpireat %d of %+v absent %v gone %d", i, at, m.ExpiryOf, m.ExpiryAbsent, m.Gone)
	s.publish(i, &m)
}

// deliverOne delivers the next record of one queue, drawn at random.
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
	r := n.out[q[1]][0]
	n.out[q[1]] = n.out[q[1]][1:]
	s.nodes[q[1]].v.Apply(r)
	s.logf("  node%d gets %d/%d", q[1], r.Stamp().Origin, r.Stamp().Seq)
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

// reload makes node i's view the one its own snapshot loads (a
// restart's, records after it being on their way still).
func (s *counterSim) reload(i int) {
	var buf bytes.Buffer
	if err := EncodeSnapshot(&buf, s.nodes[i].v, 0, nil); err != nil {
		s.t.Fatal(err)
	}
	v, _, _, err := decodeSnapshot(&buf, int64(buf.Len()), s.clock.now)
	if err != nil {
		s.t.Fatal(err)
	}
	s.nodes[i].v = v
	s.logf("  node%d reloads its snapshot", i)
}

// check is "" when every node serves the acknowledged sum with one
// digest, else what is wrong.
func (s *counterSim) check() string {
	want := strconv.FormatInt(s.sum, 10)
	for i, n := range s.nodes {
		if e, found := n.v.Get("prices", "k"); !found || string(e.Value) != want {
			return fmt.Sprintf("node%d serves %q (found %v), the acknowledged increments sum to %s", i, e.Value, found, want)
		}
		if n.v.Digest() != s.nodes[0].v.Digest() {
			return fmt.Sprintf("node%d's digest differs from node0's", i)
		}
	}
	return ""
}

// TestCounterSim: three nodes take INCRBY and PEXPIRE (1 h) on one key,
// deliver each other's records in any order across origins and merge
// each other's snapshots (or reload their own), in three phases (a fresh key; after a DEL;
// after a PEXPIRE of 100 ms has expired the counter), as the daemon's
// TestConvergeRandomOps does. After each phase every node must serve
// the sum of the increments acknowledged in it, with one digest.
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
		s.nodes = append(s.nodes, &simNode{v: newTimedView(clock), origin: uint64(i + 1), out: make([][]record.Record, 3)})
	}
	for phase := range 3 {
		if phase > 0 {
			if r := s.rng.IntN(3); phase == 1 {
				s.publish(r, &record.Message{Topic: "prices", Key: "k", Delete: true})
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
		for range 12 {
			clock.ms.Add(1)
			switch x := s.rng.IntN(10); {
			case x < 4:
				s.incr(s.rng.IntN(3), 1+s.rng.Int64N(5))
			case x < 5:
				s.expire(s.rng.IntN(3), clock.ms.Load()+3_600_000+s.rng.Int64N(1000))
			case x < 6 && s.rng.IntN(4) == 0:
				s.reload(s.rng.IntN(3))
			case x < 6:
				s.merge(s.rng.IntN(3), s.rng.IntN(3))
			default:
				s.deliverOne()
			}
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
