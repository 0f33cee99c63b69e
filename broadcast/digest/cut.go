package digest

import (
	"math"
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
	// CutKeep is how many cuts a node keeps computed (its own and its
	// dialers', a clock's rounding apart).
	CutKeep = 4
	// NoCut is the cut of protocol 5's sums: every origin's highest seq.
	NoCut = math.MaxUint64
)

// CutAt is the cut an exchange opened at now compares at: now less
// cutIntervals SyncIntervals, rounded down to a SyncInterval, as an HLC
// stamp that covers every stamp of that millisecond.
func CutAt(now time.Time, interval time.Duration) uint64 {
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
