package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/gossip"
	"github.com/cachecast/cachecast/wire"
)

// Catching up with the cluster before serving reads.
//
// A node that joins a cluster holds less than its peers at first: nothing
// at all when its disk is new, what it missed while it was down
// otherwise. Its view would answer "no such key" for keys every other node
// has, and an application takes that for the truth. So a node is ready
// (/readyz 200, READY=1 to systemd, the Redis door's INFO loading:0, the
// shared view's ready bit) only once its store is recovered, its first
// join has ended and its version vector covers the vectors its peers
// reported when it joined. Until then the reads of the view (HTTP GET and
// list of keys, the Redis door's reads) answer catching_up (503; Redis:
// -LOADING) with the records still missing, never a plain not_found.
// Writes, subscriptions, status and the group routes are served meanwhile.
//
// The peers are asked for their vectors over gossip (gossip.Ask, the
// verify question with VectorOnly), as soon as the first join has found
// them, so that the target does not depend on which data links are up.
// The records then come by the usual anti-entropy pulls, or by a
// bootstrap from a peer's snapshot, which moves the vector on at once. A
// peer that does not answer within verifyAskWait is left out, and so is
// the part of the target only a peer that has since gone reported (what
// nobody alive holds cannot be waited for: a peer that left, or one
// failed for catchUpGone; catchTargets), and the origins whose records
// arrive stamped beyond --max-clock-offset ahead (the store holds them
// until the clock allows: the node is not kept out of service for another
// node's clock). A node with no peer at its first join (the first node of
// a cluster, a lone node) is ready at once, unless its view was lost at
// the start (a damaged or missing snapshot whose log was recycled: the
// store's ViewFromPeer): such a node is ready only once a peer's
// snapshot has made its view whole, whenever a peer comes (phase
// "snapshot"; status's repair.view_from_peer says "waiting").

// Phases of catching up, in order.
const (
	catchJoining  int32 = iota // the first join is on
	catchAsking                // asking the peers for their vectors
	catchPulling               // pulling until the vector covers theirs
	catchSnapshot              // waiting for a peer's snapshot of a view lost at start
	catchDone                  // caught up (or nothing to catch up with)
)

// catchUpExtend is how much longer systemd is asked to wait for READY=1
// each time a catch-up that moves reports progress (EXTEND_TIMEOUT_USEC,
// every Reporter.Every): a large view may take longer than the unit's
// TimeoutStartSec to pull, and a catch-up that still moves is no hung
// start. One that stops moving gets no extension.
const catchUpExtend = time.Minute

// catchUpGone is how long a peer that reported a target may stay failed
// before its part of the target is left out. A loaded node's failure
// detector declares its peers dead for a moment (probes missed; the peer
// refutes and is back within a second or two): left out at once, a
// tick in which every peer was failed made the lag 0 and the node ready
// with the view short (TestFreshNodeCatchesUpBeforeServingReads at load
// 20: "caught up" with 135,168 of 200,000 keys, then 404s). A peer that
// left (Leave) is left out at once.
const catchUpGone = 30 * time.Second

// CatchUp is the node's progress towards its first ready. A lone node
// finishes it at once; a node of a cluster runs Cluster.CatchUp.
type CatchUp struct {
	phase atomic.Int32
	lag   atomic.Uint64 // records missing, in catchPulling
	done  chan struct{} // closed when phase becomes catchDone
	once  sync.Once
}

// NewCatchUp is a catch-up in its first phase (joining).
func NewCatchUp() *CatchUp { return &CatchUp{done: make(chan struct{})} }

// Finish marks the catch-up done.
func (c *CatchUp) Finish() {
	c.once.Do(func() {
		c.lag.Store(0)
		c.phase.Store(catchDone)
		close(c.done)
	})
}

// Done is closed once the catch-up is done.
func (c *CatchUp) Done() <-chan struct{} { return c.done }

// CaughtUp reports whether reads of the view may be served.
func (c *CatchUp) CaughtUp() bool { return c.phase.Load() == catchDone }

// Status is the catch-up's phase and lag, as /v1/status shows them.
func (c *CatchUp) Status() wire.CatchUpStatus {
	names := [...]string{"joining", "asking", "pulling", "snapshot", "done"}
	return wire.CatchUpStatus{Phase: names[c.phase.Load()], LagRecords: c.lag.Load()}
}

// Reporter is how a catch-up tells systemd how it goes.
type Reporter struct {
	// Notify sends a state to systemd (sd_notify).
	Notify func(state string)
	// StatusLine is the node's STATUS= line.
	StatusLine func() string
	// Every is how often a catch-up that pulls reports.
	Every time.Duration
}

// CatchUp runs cu once the first join has ended, and finishes it. It
// returns early when stop is closed.
func (c *Cluster) CatchUp(cu *CatchUp, stop <-chan struct{}, r Reporter) {
	select {
	case <-c.joined:
	case <-stop:
		return
	}
	if len(c.g.Alive()) < 2 {
		c.finishCatchUp(cu, stop, r) // nobody to catch up with
		return
	}
	cu.phase.Store(catchAsking)
	r.Notify("STATUS=asking the peers what they hold")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	targets := c.askVectors(ctx)
	cancel()
	if len(targets) == 0 {
		c.log.Warn("no peer said what it holds; serving reads from what this node holds")
		c.finishCatchUp(cu, stop, r)
		return
	}
	c.pull(cu, targets, stop, r)
}

// pull waits, in phase pulling, until this node holds what targets
// said, and finishes cu.
func (c *Cluster) pull(cu *CatchUp, targets map[string]map[uint64]uint64, stop <-chan struct{}, r Reporter) {
	ct := &catchTargets{vectors: targets, failed: map[string]time.Time{}}
	cu.lag.Store(c.catchUpLag(ct.want(c.g.Members(), time.Now())))
	cu.phase.Store(catchPulling)
	t0 := time.Now()
	c.log.Info("catching up with the cluster", zap.Int("peers", len(targets)), zap.Uint64("lag-records", cu.lag.Load()))

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	report := time.NewTicker(r.Every)
	defer report.Stop()
	lastLag := cu.lag.Load()
	for {
		lag := c.catchUpLag(ct.want(c.g.Members(), time.Now()))
		cu.lag.Store(lag)
		if lag == 0 {
			c.log.Info("caught up with the cluster", zap.Duration("took", time.Since(t0)))
			c.finishCatchUp(cu, stop, r)
			return
		}
		select {
		case <-stop:
			return
		case <-report.C:
			state := "STATUS=" + r.StatusLine()
			if lag < lastLag {
				state += "\nEXTEND_TIMEOUT_USEC=" + strconv.FormatInt(catchUpExtend.Microseconds(), 10)
			}
			r.Notify(state)
			c.log.Info("catching up with the cluster", zap.Uint64("lag-records", lag), zap.Duration("for", time.Since(t0)))
			lastLag = lag
		case <-tick.C:
		}
	}
}

// finishCatchUp finishes cu, once the store's view is whole: a view
// lost at start (store.ViewFromPeer) waits for a peer's snapshot, which
// the fan-out asks the first peer it reaches for, however long no peer
// is there. It returns early when stop is closed.
func (c *Cluster) finishCatchUp(cu *CatchUp, stop <-chan struct{}, r Reporter) {
	if _, pending := c.st.ViewFromPeer(); pending {
		cu.phase.Store(catchSnapshot)
		r.Notify("STATUS=waiting for a peer's snapshot: the view was lost with its snapshot")
		c.log.Warn("not ready until a peer's snapshot makes the view whole")
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for pending {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			_, pending = c.st.ViewFromPeer()
		}
		c.log.Info("the view is whole again from a peer's snapshot")
	}
	cu.Finish()
}

// askVectors asks every alive peer for its vector; the answers by name.
func (c *Cluster) askVectors(ctx context.Context) map[string]map[uint64]uint64 {
	question, _ := json.Marshal(verifyQuestion{VectorOnly: true})
	self := c.st.Origin()
	var mu sync.Mutex
	out := map[string]map[uint64]uint64{}
	var wg sync.WaitGroup
	for _, m := range c.g.Alive() {
		if m.ID == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.askVector(ctx, m.Name, question)
			if err != nil {
				c.log.Warn("a peer did not say what it holds; not waiting for it", zap.String("peer", m.Name), zap.Error(err))
				return
			}
			mu.Lock()
			out[m.Name] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// askVectorEvery is how long one ask for a peer's vector waits before it
// is sent again: a peer that has not yet heard of this node (gossip
// spreads a join in a few rounds) cannot answer it, and drops the
// question.
const askVectorEvery = 500 * time.Millisecond

// askVector asks one peer for its vector, again every askVectorEvery,
// for at most verifyAskWait.
func (c *Cluster) askVector(ctx context.Context, peer string, question []byte) (map[uint64]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, verifyAskWait)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, askVectorEvery)
		b, err := c.g.Ask(actx, peer, question)
		acancel()
		if err == nil {
			var n wire.VerifyNode
			if err := json.Unmarshal(b, &n); err != nil {
				return nil, fmt.Errorf("malformed answer: %w", err)
			}
			return parseVector(n.View)
		}
		if ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(10 * time.Millisecond): // a send that failed at once
		}
	}
}

// catchTargets are the vectors the peers reported at join, by name, and
// since when each peer now failed has been failed.
type catchTargets struct {
	vectors map[string]map[uint64]uint64
	failed  map[string]time.Time
}

// want is what this node must hold at now, members being gossip's
// Members: for each origin the highest seq the peers that count
// reported, those alive (or suspect) and those failed for less than
// catchUpGone; not those that left or that gossip has forgotten.
func (t *catchTargets) want(members []gossip.Member, now time.Time) map[uint64]uint64 {
	state := make(map[string]gossip.State, len(members))
	for _, m := range members {
		state[m.Name] = m.State
	}
	want := map[uint64]uint64{}
	for name, v := range t.vectors {
		switch s, known := state[name]; {
		case !known || s == gossip.StateLeft:
			continue
		case s == gossip.StateDead:
			since, ok := t.failed[name]
			if !ok {
				since = now
				t.failed[name] = now
			}
			if now.Sub(since) >= catchUpGone {
				continue
			}
		default: // alive, suspect
			delete(t.failed, name)
		}
		for o, seq := range v {
			want[o] = max(want[o], seq)
		}
	}
	return want
}

// catchUpLag is how many records this node lacks of want, leaving out
// the origins held back by their clocks.
func (c *Cluster) catchUpLag(want map[uint64]uint64) uint64 {
	clocks := c.st.OriginClocks()
	var lag uint64
	for o, seq := range want {
		if have := c.st.LastSeq(o); have < seq && !clocks[o].Flagged {
			lag += seq - have
		}
	}
	return lag
}
