package broadcast

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// The cut of a digest exchange (protocol 6, ProtocolCut; see
// "Anti-entropy" in the package doc). Its sums are computed not over
// each origin's highest seq but over the highest seq stamped at or
// before a moment both sides take from the dialer (the cut, an HLC
// stamp): a record still on its way (younger than the cut) makes no
// difference, and two nodes that hold the same records up to the cut
// have equal sums however many younger ones either holds. Both compute
// the same cut of an origin from the same records, since a record's
// stamp is its origin's and each origin's stamps grow with its seqs.
const (
	// cutIntervals is how many SyncIntervals old a record must be (by
	// the dialer's clock against its stamp) to count in the sums: 2 (2 s
	// by default), plus up to one more for the rounding that lets the
	// exchanges of one interval share a cut.
	cutIntervals = 2
	// cutKeep is how many cuts a node keeps computed (its own and its
	// dialers', a clock's rounding apart).
	cutKeep = 4
	// noCut is the cut of protocol 5's sums: every origin's highest seq.
	noCut = math.MaxUint64
)

// cutAt is the cut an exchange opened at now compares at: now less
// cutIntervals SyncIntervals, rounded down to a SyncInterval, as an HLC
// stamp that covers every stamp of that millisecond.
func cutAt(now time.Time, interval time.Duration) uint64 {
	q := max(interval.Milliseconds(), 1)
	ms := now.Add(-cutIntervals * interval).UnixMilli()
	ms -= ms % q
	return record.MakeHLC(ms, record.MaxLogical)
}

// cutSeq is the highest seq in (lo, head] whose stamp is at or before
// at, or lo when none is; lo's record (if lo > 0) is taken to be stamped
// at or before at. stamp gives a seq's stamp (0 for a record it cannot
// read: one recycled or lost counts as old). It reads about 2 log2(k)
// stamps for the k seqs past the cut, nearly all near the head.
func cutSeq(lo, head, at uint64, stamp func(seq uint64) uint64) uint64 {
	if head <= lo || stamp(head) <= at {
		return head
	}
	// stamp(hi) > at; gallop down from the head for a seq at or before.
	hi, step := head, uint64(1)
	for {
		p := lo
		if hi-lo > step {
			p = hi - step
		}
		if p == lo || stamp(p) <= at {
			lo = p
			break
		}
		hi, step = p, step*2
	}
	for hi-lo > 1 { // stamp(lo) <= at < stamp(hi)
		mid := lo + (hi-lo)/2
		if stamp(mid) <= at {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// cutMark is what a cut knows of one origin: its cut as of the head it
// was computed at.
type cutMark struct{ head, cut uint64 }

// cutState is one cut's marks.
type cutState struct {
	at    uint64
	marks map[uint64]cutMark
}

// cutCache keeps the last cutKeep cuts computed, so that an exchange's
// frames, and the exchanges of one SyncInterval, read each stamp once:
// an origin's cut moves only when its head does, and not at all while
// its head is past the cut (the records that follow are younger).
type cutCache struct {
	mu     sync.Mutex
	states []*cutState // the most recent cut first
	// behind are the origins this node was offered a record of past a
	// gap (gap): it lacks the records before it, young or not, and its
	// sums count the origin as different until it holds it.
	behind map[uint64]gapMark
	// firstOpen is when this node opened its first exchange (headsFirst).
	firstOpen time.Time
}

// headsFirst says whether an exchange this node opens now compares the
// whole vectors (noCut) rather than at a cut: for its first gapFor after
// its first exchange. A node that just started (or restarted) lacks
// whatever was written while it was down, the youngest of it younger
// than any cut, and nothing may announce it (the writes may have
// stopped): its own exchanges find it at once, as protocol 5's do, for
// the cost of whole-vector differences over a few seconds of its life.
func (c *cutCache) headsFirst(now time.Time, interval time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstOpen.IsZero() {
		c.firstOpen = now
	}
	return now.Sub(c.firstOpen) < gapFor(interval)
}

// gapMark is a record offered past a gap: its seq, and until when the
// gap counts (by then the cut has passed it, and shows it if it is
// still there).
type gapMark struct {
	seq   uint64
	until time.Time
}

// gapFor is how long an offered record past a gap makes its origin
// differ: long enough for any cut to pass it.
func gapFor(interval time.Duration) time.Duration { return 2 * (cutIntervals + 1) * interval }

// gap notes that a record of origin o, seq, came past a gap (the store
// refused it as out of order) or was refused for its stamp (too far
// ahead: gap is called again at each refusal, and the mark lasts while
// the refusals go on): this node lacks records of o up to it,
// which a cut would hide while they are young. Until it holds seq (or
// for gapFor), its sums at every cut give o a value no peer's has, so
// the next exchange reaches o's entries, learns a peer's highest seq of
// it and pulls, as protocol 5 does: a record lost on its way (NATS is at
// most once) is found as soon as the next one arrives.
func (c *cutCache) gap(o, seq uint64, interval time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.behind == nil {
		c.behind = map[uint64]gapMark{}
	}
	if m := c.behind[o]; seq >= m.seq {
		c.behind[o] = gapMark{seq: seq, until: time.Now().Add(gapFor(interval))}
	}
}

// vectorAt is the vector live (each origin's highest seq) at the cut at:
// each origin's highest seq stamped at or before at, the origins with
// none left out. stamp reads the stamp of an origin's record.
func (c *cutCache) vectorAt(live map[uint64]uint64, at uint64, stamp func(o, seq uint64) uint64) map[uint64]uint64 {
	if at == noCut {
		return live
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(at)
	out := make(map[uint64]uint64, len(live))
	for o, head := range live {
		m, ok := st.marks[o]
		switch {
		case ok && head == m.head:
		case ok && head > m.head && m.cut < m.head:
			m.head = head // past the cut already: what follows is younger
		default:
			lo := uint64(0)
			if ok && head > m.head {
				lo = m.cut // m.cut == m.head: old, and so is what it holds
			}
			m = cutMark{head: head, cut: cutSeq(lo, head, at, func(seq uint64) uint64 { return stamp(o, seq) })}
		}
		st.marks[o] = m
		if m.cut > 0 {
			out[o] = m.cut
		}
	}
	if len(st.marks) > len(live) {
		for o := range st.marks {
			if _, ok := live[o]; !ok {
				delete(st.marks, o) // retired, or its records given up
			}
		}
	}
	if len(c.behind) > 0 {
		now := time.Now()
		for o, g := range c.behind {
			if live[o] >= g.seq || now.After(g.until) {
				delete(c.behind, o)
				continue
			}
			// A value of o that no peer's cut holds (nor this node's
			// next frame: drawn each time), so that the sums differ.
			out[o] = 1<<63 | rand.Uint64()
		}
	}
	return out
}

// state is the cut at's state, made (and the oldest dropped) if it is
// not kept. A cut later than the latest starts from its marks: an
// origin old there is old here too (while its head stays), and one
// young there is searched from its cut there. Called with mu held.
func (c *cutCache) state(at uint64) *cutState {
	for i, st := range c.states {
		if st.at == at {
			copy(c.states[1:i+1], c.states[:i])
			c.states[0] = st
			return st
		}
	}
	st := &cutState{at: at, marks: map[uint64]cutMark{}}
	if len(c.states) > 0 && c.states[0].at < at {
		for o, m := range c.states[0].marks {
			st.marks[o] = cutMark{head: m.cut, cut: m.cut} // its cut here is at least that
		}
	}
	if len(c.states) == cutKeep {
		c.states = c.states[:cutKeep-1]
	}
	c.states = append([]*cutState{st}, c.states...)
	return st
}
