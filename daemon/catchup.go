package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

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
// nobody alive holds cannot be waited for), and the origins whose records
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
// every statusInterval): a large view may take longer than the unit's
// TimeoutStartSec to pull, and a catch-up that still moves is no hung
// start. One that stops moving gets no extension.
const catchUpExtend = time.Minute

// catchUp is the daemon's progress towards its first ready.
type catchUp struct {
	phase atomic.Int32
	lag   atomic.Uint64 // records missing, in catchPulling
	done  chan struct{} // closed when phase becomes catchDone
	once  sync.Once
}

func newCatchUp() *catchUp { return &catchUp{done: make(chan struct{})} }

// finish marks the catch-up done.
func (c *catchUp) finish() {
	c.once.Do(func() {
		c.lag.Store(0)
		c.phase.Store(catchDone)
		close(c.done)
	})
}

// caughtUp reports whether reads of the view may be served.
func (c *catchUp) caughtUp() bool { return c.phase.Load() == catchDone }

func (c *catchUp) status() wire.CatchUpStatus {
	names := [...]string{"joining", "asking", "pulling", "snapshot", "done"}
	return wire.CatchUpStatus{Phase: names[c.phase.Load()], LagRecords: c.lag.Load()}
}

// catchUpLoop runs the catch-up once the first join has ended, and
// finishes it. It returns early when the daemon stops.
func (d *Daemon) catchUpLoop() {
	select {
	case <-d.cluster.joined:
	case <-d.stopLoops:
		return
	}
	if len(d.cluster.g.Alive()) < 2 {
		d.finishCatchUp() // nobody to catch up with
		return
	}
	d.catch.phase.Store(catchAsking)
	d.notify("STATUS=asking the peers what they hold")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-d.stopLoops:
			cancel()
		case <-ctx.Done():
		}
	}()
	targets := d.askVectors(ctx)
	cancel()
	if len(targets) == 0 {
		d.log.Warn("no peer said what it holds; serving reads from what this node holds")
		d.finishCatchUp()
		return
	}
	d.catch.lag.Store(d.catchUpLag(targets))
	d.catch.phase.Store(catchPulling)
	t0 := time.Now()
	d.log.Info("catching up with the cluster", zap.Int("peers", len(targets)), zap.Uint64("lag-records", d.catch.lag.Load()))

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	report := time.NewTicker(statusInterval)
	defer report.Stop()
	lastLag := d.catch.lag.Load()
	for {
		lag := d.catchUpLag(targets)
		d.catch.lag.Store(lag)
		if lag == 0 {
			d.log.Info("caught up with the cluster", zap.Duration("took", time.Since(t0)))
			d.finishCatchUp()
			return
		}
		select {
		case <-d.stopLoops:
			return
		case <-report.C:
			state := "STATUS=" + d.statusLine()
			if lag < lastLag {
				state += "\nEXTEND_TIMEOUT_USEC=" + strconv.FormatInt(catchUpExtend.Microseconds(), 10)
			}
			d.notify(state)
			d.log.Info("catching up with the cluster", zap.Uint64("lag-records", lag), zap.Duration("for", time.Since(t0)))
			lastLag = lag
		case <-tick.C:
		}
	}
}

// finishCatchUp finishes the catch-up, once the store's view is whole: a
// view lost at start (store.ViewFromPeer) waits for a peer's snapshot,
// which the fan-out asks the first peer it reaches for, however long no
// peer is there. It returns early when the daemon stops.
func (d *Daemon) finishCatchUp() {
	if _, pending := d.store.ViewFromPeer(); pending {
		d.catch.phase.Store(catchSnapshot)
		d.notify("STATUS=waiting for a peer's snapshot: the view was lost with its snapshot")
		d.log.Warn("not ready until a peer's snapshot makes the view whole")
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for pending {
			select {
			case <-d.stopLoops:
				return
			case <-tick.C:
			}
			_, pending = d.store.ViewFromPeer()
		}
		d.log.Info("the view is whole again from a peer's snapshot")
	}
	d.catch.finish()
}

// askVectors asks every alive peer for its vector; the answers by name.
func (d *Daemon) askVectors(ctx context.Context) map[string]map[uint64]uint64 {
	question, _ := json.Marshal(verifyQuestion{VectorOnly: true})
	self := d.store.Origin()
	var mu sync.Mutex
	out := map[string]map[uint64]uint64{}
	var wg sync.WaitGroup
	for _, m := range d.cluster.g.Alive() {
		if m.ID == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := d.askVector(ctx, m.Name, question)
			if err != nil {
				d.log.Warn("a peer did not say what it holds; not waiting for it", zap.String("peer", m.Name), zap.Error(err))
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
func (d *Daemon) askVector(ctx context.Context, peer string, question []byte) (map[uint64]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, verifyAskWait)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, askVectorEvery)
		b, err := d.cluster.g.Ask(actx, peer, question)
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

// catchUpLag is how many records this node lacks of the targets of the
// peers still alive, leaving out the origins held back by their clocks.
func (d *Daemon) catchUpLag(targets map[string]map[uint64]uint64) uint64 {
	want := map[uint64]uint64{}
	for _, m := range d.cluster.g.Alive() {
		for o, seq := range targets[m.Name] {
			want[o] = max(want[o], seq)
		}
	}
	clocks := d.store.OriginClocks()
	var lag uint64
	for o, seq := range want {
		if have := d.store.LastSeq(o); have < seq && !clocks[o].Flagged {
			lag += seq - have
		}
	}
	return lag
}

// notifyReady tells systemd the daemon is ready (READY=1), with its
// status line.
func (d *Daemon) notifyReady() {
	d.notify(sd.SdNotifyReady + "\nSTATUS=" + d.statusLine())
}
