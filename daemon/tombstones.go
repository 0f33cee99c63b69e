package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Tombstone collection (--tombstone-grace; "Tombstones" in DESIGN.md has
// the argument, store/view's gc.go the mechanism).
//
// Every tenth of the grace (at most a minute) the daemon collects the
// tombstones stamped more than the grace ago that this node and every
// alive peer hold: a peer's vector comes from its connected link, and a
// round with an alive peer not connected collects nothing. A node of a
// cluster collects only while some peer is connected (alone, it cannot
// tell a partition from a fleet of one); a node without --gossip-addr
// collects on its own vector.
//
// The same round writes the time of the last contact (a connected peer)
// into <data-dir>/contact. A node that finds it more than half the grace
// old at start may lack deletes the fleet has collected meanwhile and
// hold the values they deleted, which its log would offer the others: it
// refuses to start (ErrAwayTooLong) unless --start-over, which moves its
// data into <data-dir>/stale-<unix ms> and starts a fresh node that takes
// a peer's snapshot. Its own writes no peer received are in that
// directory, not in the fleet.
//
// A running node applies the same rule in each round: one told to join
// (--join) that has had no connected peer for more than half the grace
// (counted from the contact file, or from its first ready when it has
// none, so that a slow start is no absence)
// leaves the cluster and does not come back (its data port closes, so
// its log is offered to nobody after the partition heals), refuses the
// reads of the view and every write with unavailable (503; its writes
// could reach no one), reports itself unhealthy (/healthz, /readyz, the
// watchdog pings stop, so systemd restarts it into the refusal at start)
// and says why in /v1/status ("away"), the STATUS line and the log.

// ErrAwayTooLong means the node was out of contact with its fleet for
// longer than --tombstone-grace allows.
var ErrAwayTooLong = errors.New("daemon: out of contact with the fleet for longer than --tombstone-grace allows")

// contactFile holds the Unix milliseconds of the last contact with a peer.
const contactFile = "contact"

// collectEvery is the period of collection rounds for a grace.
func collectEvery(grace time.Duration) time.Duration {
	return min(max(grace/10, 10*time.Millisecond), time.Minute)
}

// readContact returns the last contact recorded in dir, if any.
func readContact(dir string) (time.Time, bool) {
	b, err := os.ReadFile(filepath.Join(dir, contactFile))
	if err != nil {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// writeContact records t as the last contact. It is not synced: a crash
// that loses it makes the last contact older, which errs on the safe side.
func writeContact(dir string, t time.Time) error {
	path := filepath.Join(dir, contactFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(t.UnixMilli(), 10)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// checkAway runs before the store opens: a node of a cluster whose last
// contact is more than half the grace ago refuses to start, or with
// --start-over moves its data aside.
func checkAway(cfg Config, now time.Time, log *zap.Logger) error {
	if cfg.TombstoneGrace == 0 || cfg.GossipAddr == "" || len(cfg.Join) == 0 {
		return nil
	}
	last, ok := readContact(cfg.DataDir)
	if !ok {
		return nil
	}
	away := now.Sub(last)
	if away <= cfg.TombstoneGrace/2 {
		return nil
	}
	if !cfg.StartOver {
		return fmt.Errorf("--data-dir: %s was last in contact with its fleet %v ago (%s), more than half of --tombstone-grace (%v): its log may hold values whose deletes the fleet has collected since; start it with --start-over to move its data aside and start afresh from its peers (after an outage of the whole fleet, a --tombstone-grace of more than twice the outage keeps the data instead): %w",
			cfg.DataDir, away.Round(time.Second), last.UTC().Format(time.RFC3339), cfg.TombstoneGrace, ErrAwayTooLong)
	}
	aside := filepath.Join(cfg.DataDir, "stale-"+strconv.FormatInt(now.UnixMilli(), 10))
	if err := os.Mkdir(aside, 0o700); err != nil {
		return fmt.Errorf("--start-over: %w", err)
	}
	des, err := os.ReadDir(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("--start-over: %w", err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), "stale-") {
			continue
		}
		if err := os.Rename(filepath.Join(cfg.DataDir, de.Name()), filepath.Join(aside, de.Name())); err != nil {
			return fmt.Errorf("--start-over: %w", err)
		}
	}
	log.Warn("out of contact with the fleet too long for --tombstone-grace: data moved aside, starting as a fresh node",
		zap.String("moved-to", aside), zap.Duration("away", away), zap.Duration("tombstone-grace", cfg.TombstoneGrace))
	return nil
}

// tombstoneLoop runs the collection rounds until the daemon's loops stop.
func (d *Daemon) tombstoneLoop() {
	if d.cfg.TombstoneGrace == 0 {
		return
	}
	tick := time.NewTicker(collectEvery(d.cfg.TombstoneGrace))
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
		if d.cluster.inContact() {
			d.contact = now
			if err := writeContact(d.cfg.DataDir, now); err != nil {
				d.log.Warn("recording the last contact failed", zap.Error(err))
			}
		} else if d.contact.IsZero() {
			if d.catch.caughtUp() {
				d.contact = now // never in contact: counted from the first ready
			}
		} else if d.checkAwayRunning(now) {
			return
		}
		var ok bool
		if held, ok = d.cluster.heldByAll(held); !ok {
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
	if err := d.cluster.close(); err != nil {
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
	alive, known = d.cluster.memberCounts()
	if d.awayReason() != "" {
		alive = 0
	}
	return alive, known
}

// now is the daemon's wall clock (the Clock hook in tests, daemonhooks).
func (d *Daemon) now() time.Time {
	if d.cfg.hooks.Clock != nil {
		return d.cfg.hooks.Clock()
	}
	return time.Now()
}

// inContact says whether some peer's link is connected.
func (c *cluster) inContact() bool {
	for _, p := range c.b.Peers() {
		if p.Connected {
			return true
		}
	}
	return false
}

// heldByAll lowers own (this node's vector) to what every alive peer
// holds too, and reports false when some alive peer has no connected
// link, or none is alive. For an origin retired from the vectors
// (--retire-origins-after) a peer's holding is what it said at the last
// exchange (PeerStatus.RetiredHolds): without it, a retired origin's
// tombstones would never be collected.
func (c *cluster) heldByAll(own map[uint64]uint64) (map[uint64]uint64, bool) {
	alive := 0
	self := c.st.Origin()
	for _, m := range c.g.Alive() {
		if m.ID != self {
			alive++
		}
	}
	peers := c.b.Peers()
	if alive == 0 || len(peers) != alive {
		return nil, false
	}
	for _, p := range peers {
		if !p.Connected {
			return nil, false
		}
		for o, seq := range own {
			held, ok := p.Holds[o]
			if !ok {
				held = p.RetiredHolds[o]
			}
			own[o] = min(seq, held)
		}
	}
	return own, true
}
