package cluster

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// The consistency observer (the idea of Meta's Polaris): each node
// measures, by itself, how fresh and how consistent its view is.
//
//   - Freshness: for every record applied from another origin, the time
//     from its stamp (the HLC's wall-clock part, at the origin) to its
//     apply here, into a histogram, and into one per origin (labelled
//     with the origin's node name, coarser buckets) for the first
//     maxFreshnessOrigins names, the rest under "other": the series stay
//     bounded whatever the fleet's size or its origins' turnover. A slow,
//     paused or cut-off node shows as a long tail: its records arrive
//     late, or the records it missed arrive late once it heals.
//   - Agreement: every --observe-interval the node picks one alive peer at
//     random and compares view digests with it at a common vector (the
//     machinery of GET /v1/verify: the peer answers once its vector covers
//     the question's; the node then waits to cover the peer's vector and
//     takes its digest again, up to observeRounds rounds). Agreed and
//     differed comparisons are counted, the topics that differed kept,
//     and the time since the node last agreed with each peer exported.
//     A comparison whose vectors never met (writes in flight all along)
//     or that the peer did not answer is counted apart, neither agreed
//     nor differed.
//
// Its cost is one digest of the view on each side per comparison (a
// SHA-256 over the view's entries: ~O(keys)) when the view changed since
// the side's last digest (the store keeps it while the view holds it:
// store.Store.ViewDigests), once per interval per node on average in
// each role; BENCHMARKS.md has the figures.

const (
	// observeRounds bounds the asks of one comparison while writes keep
	// the vectors apart.
	observeRounds = 3
	// observeCatchUp bounds the wait for this node to cover the vector a
	// peer answered at.
	observeCatchUp = time.Second
	// observeDiffsKept is how many of the last differences status keeps.
	observeDiffsKept = 8
)

// freshnessBuckets span 1ms to 2 minutes, on round bounds (an alert's
// threshold is one of them).
var freshnessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// originFreshnessBuckets are the per-origin histogram's: fewer, as there
// is one histogram per origin (9 series each).
var originFreshnessBuckets = []float64{.01, .1, .5, 1, 5, 30}

// maxFreshnessOrigins bounds the origin label of the per-origin
// freshness: the first this many node names have one each, later ones
// share "other" (at 9 series per name, under 300 series a node).
const maxFreshnessOrigins = 32

// otherOrigins is the origin label past maxFreshnessOrigins names.
const otherOrigins = "other"

// Observer is the node's consistency observer; its Cluster owns it
// (Cluster.Observer). It is a prometheus.Collector.
type Observer struct {
	c         *Cluster
	freshness prometheus.Histogram
	byOrigin  *originFreshness
	results   *prometheus.CounterVec

	started atomic.Int64 // Unix ns of Run's start: "since the start"

	mu          sync.Mutex
	agreed      uint64
	differed    uint64
	lastAgreed  map[string]time.Time // peer -> when this node last agreed with it
	lastResult  map[string]string    // peer -> the last comparison's result
	comparing   map[string]bool      // peers with a comparison under way
	differences []wire.ObserverDiff  // the last observeDiffsKept, oldest first
}

// Comparison results, the result label of cachecast_observer_comparisons_total.
const (
	observeAgreed     = "agreed"
	observeDiffered   = "differed"
	observeNoCommon   = "no_common_vector"
	observeNoAnswered = "no_answer"
)

// newObserver is c's observer; c is not started yet.
func newObserver(c *Cluster) *Observer {
	o := &Observer{c: c,
		freshness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cachecast_observer_freshness_seconds",
			Help:    "For each record applied from another origin: the time from its stamp at the origin to its apply on this node (publish-to-visible; clock offsets between the nodes included).",
			Buckets: freshnessBuckets,
		}),
		byOrigin: &originFreshness{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cachecast_observer_origin_freshness_seconds",
			Help:    "cachecast_observer_freshness_seconds by the origin's node name (its hex origin when no member has it), coarser buckets; the first 32 names, later ones under origin=\"other\".",
			Buckets: originFreshnessBuckets,
		}, []string{"origin"}), name: wire.FormatOrigin},
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cachecast_observer_comparisons_total",
			Help: "View digest comparisons with a peer at a common vector, by result: agreed, differed, no_common_vector (writes kept the vectors apart), no_answer.",
		}, []string{"result"}),
		lastAgreed: map[string]time.Time{}, lastResult: map[string]string{}, comparing: map[string]bool{},
	}
	for _, r := range []string{observeAgreed, observeDiffered, observeNoCommon, observeNoAnswered} {
		o.results.WithLabelValues(r)
	}
	return o
}

// applied observes the freshness of a record of origin applied now
// (broadcast.Config.Applied). Safe for concurrent use; never blocks.
func (o *Observer) applied(origin uint64, stamp time.Time) {
	secs := max(0, time.Since(stamp).Seconds())
	o.freshness.Observe(secs)
	o.byOrigin.observer(origin).Observe(secs)
}

// originFreshness is the freshness by origin, with a bounded label.
type originFreshness struct {
	vec *prometheus.HistogramVec

	mu sync.Mutex
	// name is the label of an origin first seen: its hex until the
	// cluster's gossip exists (named).
	name   func(origin uint64) string
	by     map[uint64]prometheus.Observer
	labels map[string]bool // the names labelled so far, at most maxFreshnessOrigins
}

// named makes f label the origins it sees from now on by name: the
// cluster's New calls it once its gossip exists. The broadcast node
// applies records from NATS from its own New on, before: their origins
// are labelled in hex, as those of no member are.
func (f *originFreshness) named(name func(origin uint64) string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.name = name
}

// observer is origin's histogram, labelled at the origin's first record
// (a node that came back as a new origin keeps its name's series).
func (f *originFreshness) observer(origin uint64) prometheus.Observer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ob, ok := f.by[origin]; ok {
		return ob
	}
	if f.by == nil {
		f.by, f.labels = map[uint64]prometheus.Observer{}, map[string]bool{}
	}
	label := f.name(origin)
	if !f.labels[label] {
		if len(f.labels) >= maxFreshnessOrigins {
			label = otherOrigins
		} else {
			f.labels[label] = true
		}
	}
	ob := f.vec.WithLabelValues(label)
	f.by[origin] = ob
	return ob
}

// originName is the node name of origin among the members gossip knows,
// else the origin in hex.
func (c *Cluster) originName(origin uint64) string {
	for _, m := range c.g.Members() {
		if m.ID == origin {
			return m.Name
		}
	}
	return wire.FormatOrigin(origin)
}

// Run starts a comparison with one peer every interval (--observe-interval;
// 0: none) while ready says the node serves, until stop is closed, and
// waits for those under way to end. Each runs on its own goroutine, one
// at a time per peer: a peer that does not answer (paused, cut off)
// holds up only its own comparison, for up to verifyAskWait, not those
// with the other peers.
func (o *Observer) Run(interval time.Duration, ready func() bool, stop <-chan struct{}) {
	o.started.Store(time.Now().UnixNano())
	if interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if !ready() {
			continue
		}
		peer, ok := o.pickPeer()
		if !ok {
			continue
		}
		wg.Go(func() {
			cctx, ccancel := context.WithTimeout(ctx, verifyAskWait)
			result, topics := o.compare(cctx, peer)
			ccancel()
			if ctx.Err() != nil {
				result = "" // stopped: no result
			}
			o.record(peer, result, topics, time.Now())
		})
	}
}

// pickPeer picks at random an alive member other than this node with no
// comparison under way, and marks it under way (record ends it).
func (o *Observer) pickPeer() (string, bool) {
	alive := o.c.g.Alive()
	o.mu.Lock()
	defer o.mu.Unlock()
	var names []string
	for _, m := range alive {
		if m.Name != o.c.cfg.NodeName && !o.comparing[m.Name] {
			names = append(names, m.Name)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	name := names[rand.N(len(names))]
	o.comparing[name] = true
	return name, true
}

// compare asks peer for its digest at this node's vector and compares the
// two at a common vector: the result, and the topics that differ.
func (o *Observer) compare(ctx context.Context, peer string) (string, []string) {
	st := o.c.st
	own := st.ViewDigests()
	for range observeRounds {
		question, _ := json.Marshal(verifyQuestion{Vector: own.Vector})
		b, err := o.c.g.Ask(ctx, peer, question)
		if err != nil {
			return observeNoAnswered, nil
		}
		var n wire.VerifyNode
		if err := json.Unmarshal(b, &n); err != nil || n.View == nil {
			return observeNoAnswered, nil
		}
		theirs, err := parseVector(n.View)
		if err != nil {
			return observeNoAnswered, nil
		}
		if !Covers(theirs, own.Vector) {
			// The peer did not catch up with this node within
			// verifyCatchUp: it is behind (cut off, paused, slow), and
			// asking again would only wait as long again.
			return observeNoCommon, nil
		}
		if !maps.Equal(theirs, own.Vector) {
			// Writes in flight: catch up with what the peer holds, and
			// take this node's digest again.
			deadline := time.Now().Add(observeCatchUp)
			for !Covers(st.Vector(), theirs) && time.Now().Before(deadline) && ctx.Err() == nil {
				select {
				case <-st.Changed():
				case <-time.After(10 * time.Millisecond):
				}
			}
			own = st.ViewDigests()
			if !maps.Equal(theirs, own.Vector) {
				continue
			}
		}
		return o.diff(own, n.View)
	}
	return observeNoCommon, nil
}

// diff compares this node's digest with a peer's taken at the same vector.
func (o *Observer) diff(own store.ViewDigest, theirs *wire.ViewDigest) (string, []string) {
	mine := WireDigest(own)
	var differ []string
	for t, sum := range mine.Topics {
		if theirs.Topics[t] != sum {
			differ = append(differ, t)
		}
	}
	for t := range theirs.Topics {
		if _, ok := mine.Topics[t]; !ok {
			differ = append(differ, t)
		}
	}
	if len(differ) == 0 {
		return observeAgreed, nil
	}
	sort.Strings(differ)
	return observeDiffered, differ
}

// record ends a comparison with peer and counts its result ("" for
// none: the daemon stopped).
func (o *Observer) record(peer, result string, topics []string, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.comparing, peer)
	if result == "" {
		return
	}
	o.results.WithLabelValues(result).Inc()
	o.lastResult[peer] = result
	switch result {
	case observeAgreed:
		o.agreed++
		o.lastAgreed[peer] = now
	case observeDiffered:
		o.differed++
		o.differences = append(o.differences, wire.ObserverDiff{Peer: peer, Topics: topics, At: now.UTC().Format(wire.TimeLayout)})
		if len(o.differences) > observeDiffsKept {
			o.differences = o.differences[1:]
		}
	}
}

// agreedDesc and sinceAgreedDesc are read at scrape time.
var (
	agreementRatioDesc = prometheus.NewDesc("cachecast_observer_agreement_ratio",
		"Fraction of the conclusive view comparisons with peers (agreed or differed) that agreed, since the start; 1 before any.", nil, nil)
	sinceAgreedDesc = prometheus.NewDesc("cachecast_observer_seconds_since_agreed",
		"Seconds since this node last agreed with the peer on the view at a common vector (since the start when it never did), for each alive or missing member.",
		[]string{"peer"}, nil)
)

// Describe and Collect make the observer a collector: the histogram, the
// counters and the gauges read at scrape time.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.freshness.Describe(ch)
	o.byOrigin.vec.Describe(ch)
	o.results.Describe(ch)
	ch <- agreementRatioDesc
	ch <- sinceAgreedDesc
}

func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.freshness.Collect(ch)
	o.byOrigin.vec.Collect(ch)
	o.results.Collect(ch)
	s := o.Status(time.Now())
	ch <- prometheus.MustNewConstMetric(agreementRatioDesc, prometheus.GaugeValue, s.AgreementRatio)
	for _, p := range s.Peers {
		ch <- prometheus.MustNewConstMetric(sinceAgreedDesc, prometheus.GaugeValue, p.SecondsSinceAgreed, p.Name)
	}
}

// peerNames are the members the observer reports on: alive, or missing
// (seen and not alive now), this node aside.
func (o *Observer) peerNames() []string {
	names := o.c.peers.missing()
	for _, m := range o.c.g.Alive() {
		if m.Name != o.c.cfg.NodeName {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Status is the observer's summary for GET /v1/status.
func (o *Observer) Status(now time.Time) wire.ObserverStatus {
	names := o.peerNames()
	o.mu.Lock()
	s := wire.ObserverStatus{Agreed: o.agreed, Differed: o.differed, AgreementRatio: 1,
		Differences: slices.Clone(o.differences)}
	for _, name := range names {
		since := time.Unix(0, o.started.Load())
		if o.started.Load() == 0 {
			since = now // not started
		}
		if t, ok := o.lastAgreed[name]; ok {
			since = t
		}
		s.Peers = append(s.Peers, wire.ObserverPeer{Name: name, SecondsSinceAgreed: now.Sub(since).Seconds(), LastResult: o.lastResult[name]})
	}
	o.mu.Unlock()
	if n := s.Agreed + s.Differed; n > 0 {
		s.AgreementRatio = float64(s.Agreed) / float64(n)
	}
	s.FreshnessP99Seconds, s.FreshnessP99Over = o.freshnessQuantile(0.99)
	s.Summary = observerSummary(s)
	return s
}

// freshnessQuantile is the upper bound of the histogram's bucket that
// holds quantile q of the observations since the start; 0 without any.
// Past the last bucket it is that bucket's bound with over set (JSON has
// no infinity, and /v1/status must encode).
func (o *Observer) freshnessQuantile(q float64) (bound float64, over bool) {
	var m dto.Metric
	if err := o.freshness.Write(&m); err != nil || m.Histogram.GetSampleCount() == 0 {
		return 0, false
	}
	want := q * float64(m.Histogram.GetSampleCount())
	for _, b := range m.Histogram.GetBucket() {
		if float64(b.GetCumulativeCount()) >= want {
			return b.GetUpperBound(), false
		}
		bound = b.GetUpperBound()
	}
	return bound, true
}

// observerSummary is the one line "cachecast status" prints: the nines of
// agreement (how many leading nines the agreed fraction has) and the
// freshness p99.
func observerSummary(s wire.ObserverStatus) string {
	n := s.Agreed + s.Differed
	if n == 0 {
		return "no conclusive view comparison with a peer yet"
	}
	// With no difference the nines are bounded by the comparisons made:
	// n agreeing comparisons show at least log10(n) nines.
	nines := math.Log10(float64(n))
	if s.Differed > 0 {
		nines = -math.Log10(1 - s.AgreementRatio)
	}
	fresh := "no record from a peer yet"
	if s.FreshnessP99Seconds > 0 {
		within := "within "
		if s.FreshnessP99Over {
			within = "after more than "
		}
		fresh = "records from peers visible " + within + strconv.FormatFloat(s.FreshnessP99Seconds, 'g', 3, 64) + " s (p99)"
	}
	return strconv.FormatFloat(nines, 'f', 1, 64) + " nines of agreement (" + strconv.FormatUint(s.Agreed, 10) + " of " +
		strconv.FormatUint(n, 10) + " comparisons agreed); " + fresh
}
