package view

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

var indexSims = flag.Int("view.indexsims", 4, "runs of TestIndexAgreesWithTree (seeds -view.seed on)")

// indexAgrees reports how v's point-get index and its B-tree disagree,
// nil when they do not: for every key the B-tree holds, byKey holds the
// same item, or for a key with a timeline a timedEntry whose cur is that
// item and whose copy of it carries the same fields (what Get serves,
// against what Digest hashes); byKey holds no other key. A mismatch is a
// converged node (one digest) serving another entry than its peers. And
// every entry without times of its own (no expiry, neither scheduled
// nor a cancel) is a 48-byte item: a wide one would keep 16 bytes for
// nothing.
func indexAgrees(v *View) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, tv := range v.topics {
		var err error
		tv.order.Ascend(func(it *viewItem) bool {
			err = entryAgrees(v, tv, it)
			return err == nil
		})
		if err != nil {
			return fmt.Errorf("topic %s: %w", tv.name, err)
		}
		if n, m := tv.byKey.len(), tv.order.Len(); n != m {
			return fmt.Errorf("topic %s: byKey holds %d keys, the B-tree %d", tv.name, n, m)
		}
	}
	return nil
}

// entryAgrees is indexAgrees for it, an item of tv's B-tree.
func entryAgrees(v *View, tv *topicView, it *viewItem) error {
	k := it.key()
	e := tv.byKey.get(k)
	switch {
	case it.timed:
		return fmt.Errorf("key %q: the B-tree holds a timedEntry", k)
	case it.flags&itemWide != 0 && !it.timedFields():
		return fmt.Errorf("key %q: the entry %s is wide without times of its own", k, itemText(v, tv, it))
	case e == nil:
		return fmt.Errorf("key %q: in the B-tree, not in byKey", k)
	case !e.timed && e != it:
		return fmt.Errorf("key %q: byKey holds %s, the B-tree %s", k, itemText(v, tv, e), itemText(v, tv, it))
	case !e.timed:
		return nil
	}
	te := timedOf(e)
	if te.cur != it {
		return fmt.Errorf("key %q: byKey's timedEntry shows %s, the B-tree holds %s", k, itemText(v, tv, te.cur), itemText(v, tv, it))
	}
	if te.tl == nil {
		return fmt.Errorf("key %q: a timedEntry without a timeline", k)
	}
	c := &te.wideItem.viewItem
	if c.stamp != it.stamp || c.flags&^itemWide != it.flags&^itemWide || c.effAt() != it.effAt() || c.expiry() != it.expiry() ||
		c.key() != k || c.tag() != it.tag() || !bytes.Equal(c.valueIn(&v.shared, tv.name), it.valueIn(&v.shared, tv.name)) {
		return fmt.Errorf("key %q: byKey's copy is %s, the B-tree's entry %s", k, itemText(v, tv, c), itemText(v, tv, it))
	}
	return nil
}

// itemText is it for a failure message.
func itemText(v *View, tv *topicView, it *viewItem) string {
	return fmt.Sprintf("{%q %v flags %#x eff %d exp %d epoch %d}", it.valueIn(&v.shared, tv.name), it.stamp, it.flags, it.effAt(), it.expiry(), it.epoch)
}

// indexSim is TestIndexAgreesWithTree's state: a view and a peer that
// takes the same records later and in another order, over one topic of
// indexKeys keys (the index splits its tables), on a fake clock.
type indexSim struct {
	t       *testing.T
	rng     *rand.Rand
	clock   *fakeClock
	v, peer *View
	pending []record.Record // for the peer
	seqs    map[uint64]uint64
	frozen  []Frozen
	log     []string
}

// indexKeys is how many keys the simulation writes: over keyTableMax,
// so that the topic's index splits.
const indexKeys = 2500

// key is a key of the topic: one of a few hot ones (the counters' "k"
// among them) half the time, else any.
func (s *indexSim) key() string {
	if s.rng.IntN(2) == 0 {
		return []string{"k", "k0000", "k0001", "k0002"}[s.rng.IntN(4)]
	}
	return fmt.Sprintf("k%04d", s.rng.IntN(indexKeys))
}

func (s *indexSim) stamp() record.Stamp {
	o := uint64(1 + s.rng.IntN(3))
	s.seqs[o]++
	return record.Stamp{Origin: o, Seq: s.seqs[o], HLC: record.MakeHLC(s.clock.ms.Load()+int64(s.rng.IntN(5)), uint16(s.seqs[o]))}
}

// record is a random record of any kind: a write (with an expiry, a
// scheduled one, a late one), a delete, a cancel, an expiry change of
// what v holds (a version or a revival), a counter increment.
func (s *indexSim) record() record.Record {
	k, now := s.key(), s.clock.ms.Load()
	m := &record.Message{Topic: "prices", Key: k, Value: fmt.Appendf(nil, "%d", s.rng.IntN(1000))}
	if s.rng.IntN(4) == 0 {
		m.Value = fmt.Appendf(nil, "%s=%d", k, s.rng.IntN(1000)) // no number: a counter command fails
	}
	switch p := s.rng.IntN(20); {
	case p < 2:
		m.ExpiresAt = now + int64(1+s.rng.IntN(150))
	case p < 4:
		m.EffectiveAt = now + int64(s.rng.IntN(100)-20)
	case p < 5:
		m.Cancel, m.Value, m.EffectiveAt = true, nil, now+int64(1+s.rng.IntN(100))
	case p < 7:
		m.Delete, m.Value = true, nil
	case p < 10:
		e, found := s.v.Counting("prices", k)
		if found || e.Absence != nil && e.Absence.Of.Origin != 0 {
			// A value that is no number stays a write.
			if c, _, err := Count("prices", k, e, found, Increment{N: s.rng.Int64N(16) - 5}); err == nil {
				*m = c
			}
		}
	case p < 12:
		if e, found := s.v.Counting("prices", k); found {
			*m = ExpiryChange("prices", k, e, now+int64(s.rng.IntN(200)))
		}
	}
	return stamped(s.t, m, s.stamp())
}

// step is one draw; v and the peer must agree with their B-trees after
// it.
func (s *indexSim) step() {
	switch p := s.rng.IntN(40); {
	case p < 24:
		rs := make([]record.Record, 1+s.rng.IntN(4))
		for i := range rs {
			rs[i] = s.record()
		}
		if s.rng.IntN(2) == 0 {
			s.v.ApplyBatch(rs)
		} else {
			for _, r := range rs {
				s.v.Apply(r)
			}
		}
		s.pending = append(s.pending, rs...)
		s.logf("apply %d", len(rs))
	case p < 28:
		n := s.rng.IntN(len(s.pending) + 1)
		s.rng.Shuffle(len(s.pending), func(i, j int) { s.pending[i], s.pending[j] = s.pending[j], s.pending[i] })
		s.peer.ApplyBatch(s.pending[:n])
		s.pending = s.pending[n:]
		s.logf("peer takes %d", n)
	case p < 30:
		s.v.Merge(s.peer)
		s.logf("merge the peer")
	case p < 32:
		if _, _, err := s.v.ApplySnapshot(bytes.NewReader(s.snapshot(s.peer))); err != nil {
			s.t.Fatal(err)
		}
		s.logf("apply the peer's snapshot")
	case p < 33:
		// A restart: a new view loads v's snapshot, fresh.
		w := newTimedView(s.clock)
		if _, _, err := w.ApplySnapshot(bytes.NewReader(s.snapshot(s.v))); err != nil {
			s.t.Fatal(err)
		}
		s.v = w
		s.logf("restart")
	case p < 35:
		n := s.v.CollectTombstones(s.clock.ms.Load()-30, func(uint64, uint64) bool { return true })
		s.logf("collect: %d", n)
	case p < 38:
		s.clock.ms.Add(int64(1 + s.rng.IntN(40)))
		s.v.settleDue()
		s.peer.settleDue()
		s.logf("clock +, settle")
	default:
		s.frozen = append(s.frozen, s.v.Freeze(), s.peer.Freeze())
		s.frozen = s.frozen[max(0, len(s.frozen)-4):]
		s.logf("freeze")
	}
	for i, v := range []*View{s.v, s.peer} {
		if err := indexAgrees(v); err != nil {
			s.t.Fatalf("view %d (0: v, 1: the peer): %v\nlast steps:\n%s", i, err, strings.Join(s.log[max(0, len(s.log)-20):], "\n"))
		}
	}
}

func (s *indexSim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *indexSim) snapshot(v *View) []byte {
	var b bytes.Buffer
	if err := EncodeSnapshot(&b, v, 1, nil); err != nil {
		s.t.Fatal(err)
	}
	return b.Bytes()
}

// TestIndexAgreesWithTree applies random records of every kind (alone
// and in batches) to a view over enough keys to split its index, with
// merges and snapshots of a peer that takes them later and in another
// order, restarts (a fresh view loads the snapshot), tombstone
// collection, the timer and frozen clones between: after each step,
// for every key, the entry a Get reads (byKey) is the one Digest hashes
// (the B-tree's), as indexAgrees checks. -view.indexsims runs more seeds
// (from -view.seed on); under -race a quarter of them.
func TestIndexAgreesWithTree(t *testing.T) {
	base := propertySeed(t)
	runs := *indexSims
	if testkit.Race {
		runs = max(1, runs/4) // 2 s a run under the race detector
	}
	for run := range uint64(runs) {
		seed := base + run
		c := &fakeClock{}
		c.ms.Store(timeBase)
		s := &indexSim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x1d3)), clock: c,
			v: newTimedView(c), peer: newTimedView(c), seqs: map[uint64]uint64{}}
		// Every key first, so that the index splits, some of them
		// expiring.
		rs := make([]record.Record, indexKeys)
		for i := range rs {
			m := &record.Message{Topic: "prices", Key: fmt.Sprintf("k%04d", i), Value: []byte("1")}
			if i%3 == 0 {
				m.ExpiresAt = timeBase + int64(s.rng.IntN(300))
			}
			rs[i] = stamped(t, m, s.stamp())
		}
		s.v.ApplyBatch(rs)
		s.peer.ApplyBatch(rs)
		if s.v.topics["prices"].byKey.depth == 0 {
			t.Fatal("the index never split a table")
		}
		for range 400 {
			s.step()
		}
	}
}
