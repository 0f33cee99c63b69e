package daemon

import (
	"fmt"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"go.uber.org/zap"
)

// Tombstone collection and the rule for a node away too long: see
// "Tombstones" in package daemon/internal/cluster, which has the contact
// file and the rule; this file is the daemon's round and what the node
// does once away.

// ErrAwayTooLong means the node was out of contact with its fleet for
// longer than --tombstone-grace allows.
var ErrAwayTooLong = cluster.ErrAwayTooLong

// tombstoneLoop runs the collection rounds until the daemon's loops stop.
func (d *Daemon) tombstoneLoop() {
	if d.cfg.TombstoneGrace == 0 {
		return
	}
	// A node running has been in contact within the grace (the away
	// rule), so a tombstone older than the grace that it lacks was
	// collected (before a restart, or by the peer whose snapshot it took).
	d.store.RaiseHorizon(d.now().Add(-d.cfg.TombstoneGrace))
	tick := time.NewTicker(cluster.CollectEvery(d.cfg.TombstoneGrace))
	defer tick.Stop()
	for {
		select {
		case <-d.stopLoops:
			return
		case <-tick.C:
			d.collectTombstones()
		}
	}
}

// collectTombstones is one round: the contact (the file, or leaving a
// fleet it lost for too long), then the collection.
func (d *Daemon) collectTombstones() {
	now := d.now()
	if d.awayReason() != "" {
		return
	}
	held := d.store.Vector()
	if d.cluster != nil {
		if d.cluster.InContact() {
			d.contact = now
			if err := cluster.WriteContact(d.cfg.DataDir, now); err != nil {
				d.log.Warn("recording the last contact failed", zap.Error(err))
			}
		} else if d.contact.IsZero() {
			if d.catch.CaughtUp() {
				d.contact = now // never in contact: counted from the first ready
			}
		} else if d.checkAwayRunning(now) {
			return
		}
		var ok bool
		if held, ok = d.cluster.HeldByAll(held); !ok {
			return
		}
	}
	if n := d.store.CollectTombstones(now.Add(-d.cfg.TombstoneGrace), held); n > 0 {
		d.log.Debug("tombstones collected", zap.Int("tombstones", n))
	}
}

// checkAwayRunning applies checkAway's rule to a running node with no
// connected peer: past half the grace since the last contact it leaves
// the cluster and stops serving (see the top of this file). It reports
// whether it did.
func (d *Daemon) checkAwayRunning(now time.Time) bool {
	if len(d.cfg.Join) == 0 {
		return false // as at start: the first node of a cluster has nobody to lose
	}
	away := now.Sub(d.contact)
	if away <= d.cfg.TombstoneGrace/2 {
		return false
	}
	why := fmt.Sprintf("out of contact with the fleet for %v (since %s), more than half of --tombstone-grace (%v): its log may hold values whose deletes the fleet has collected since, so it left the cluster and serves no reads of the view and no writes; restart it with --start-over to start afresh from its peers",
		away.Round(time.Second), d.contact.UTC().Format(time.RFC3339), d.cfg.TombstoneGrace)
	d.away.Store(&why)
	d.log.Error("out of contact with the fleet too long for --tombstone-grace: leaving the cluster, refusing reads of the view and writes; restart with --start-over",
		zap.Duration("away", away), zap.Time("last-contact", d.contact), zap.Duration("tombstone-grace", d.cfg.TombstoneGrace))
	d.notify("STATUS=AWAY TOO LONG: " + why)
	if err := d.cluster.Close(); err != nil {
		d.log.Warn("leaving the cluster", zap.Error(err))
	}
	return true
}

// awayReason is why the node stopped serving for being out of contact
// too long (checkAwayRunning), "" while it serves.
func (d *Daemon) awayReason() string {
	if p := d.away.Load(); p != nil {
		return *p
	}
	return ""
}

// healthy is nil while the node serves: its store is healthy and it is
// not away (checkAwayRunning).
func (d *Daemon) healthy() error {
	if why := d.awayReason(); why != "" {
		return fmt.Errorf("%w: %s", ErrAwayTooLong, why)
	}
	return d.store.Healthy()
}

// viewMembers is the cluster state the view file's header carries: no
// alive member (of those known) once the node left for being away, which
// with "not ready" tells the file's readers why (localview.ErrAway).
func (d *Daemon) viewMembers() (alive, known int) {
	alive, known = d.cluster.MemberCounts()
	if d.awayReason() != "" {
		alive = 0
	}
	return alive, known
}

// now is the daemon's wall clock (the Clock hook in tests, daemonhooks).
func (d *Daemon) now() time.Time {
	if d.cfg.Hooks().Clock != nil {
		return d.cfg.Hooks().Clock()
	}
	return time.Now()
}
