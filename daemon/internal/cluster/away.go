package cluster

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
var ErrAwayTooLong = errors.New("cluster: out of contact with the fleet for longer than --tombstone-grace allows")

// contactFile holds the Unix milliseconds of the last contact with a peer.
const contactFile = "contact"

// CollectEvery is the period of collection rounds for a grace.
func CollectEvery(grace time.Duration) time.Duration {
	return min(max(grace/10, 10*time.Millisecond), time.Minute)
}

// ReadContact returns the last contact recorded in dir, if any.
func ReadContact(dir string) (time.Time, bool) {
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

// WriteContact records t as the last contact. It is not synced: a crash
// that loses it makes the last contact older, which errs on the safe side.
func WriteContact(dir string, t time.Time) error {
	path := filepath.Join(dir, contactFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(t.UnixMilli(), 10)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// CheckAway runs before the store opens, for a node told to join with a
// --tombstone-grace (grace): one whose last contact is more than half the
// grace ago refuses to start, or with startOver (--start-over) moves its
// data in dataDir aside.
func CheckAway(dataDir string, grace time.Duration, startOver bool, now time.Time, log *zap.Logger) error {
	last, ok := ReadContact(dataDir)
	if !ok {
		path := filepath.Join(dataDir, contactFile)
		if _, err := os.Stat(path); err == nil {
			log.Warn("the last contact with the fleet recorded in the data directory is unreadable (damaged): the check of the time out of contact (--tombstone-grace) is skipped at this start",
				zap.String("path", path))
		}
		return nil
	}
	away := now.Sub(last)
	if away <= grace/2 {
		return nil
	}
	if !startOver {
		return fmt.Errorf("--data-dir: %s was last in contact with its fleet %v ago (%s), more than half of --tombstone-grace (%v): its log may hold values whose deletes the fleet has collected since; start it with --start-over to move its data aside and start afresh from its peers (after an outage of the whole fleet, a --tombstone-grace of more than twice the outage keeps the data instead): %w",
			dataDir, away.Round(time.Second), last.UTC().Format(time.RFC3339), grace, ErrAwayTooLong)
	}
	aside := filepath.Join(dataDir, "stale-"+strconv.FormatInt(now.UnixMilli(), 10))
	if err := os.Mkdir(aside, 0o700); err != nil {
		return fmt.Errorf("--start-over: %w", err)
	}
	des, err := os.ReadDir(dataDir)
	if err != nil {
		return fmt.Errorf("--start-over: %w", err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), "stale-") {
			continue
		}
		if err := os.Rename(filepath.Join(dataDir, de.Name()), filepath.Join(aside, de.Name())); err != nil {
			return fmt.Errorf("--start-over: %w", err)
		}
	}
	log.Warn("out of contact with the fleet too long for --tombstone-grace: data moved aside, starting as a fresh node",
		zap.String("moved-to", aside), zap.Duration("away", away), zap.Duration("tombstone-grace", grace))
	return nil
}

// InContact says whether some peer's link is connected.
func (c *Cluster) InContact() bool {
	for _, p := range c.b.Peers() {
		if p.Connected {
			return true
		}
	}
	return false
}

// HeldByAll lowers own (this node's vector) to what every alive peer
// holds too, and reports false when some alive peer has no connected
// link, or none is alive. For an origin retired from the vectors
// (--retire-origins-after) a peer's holding is what it said at the last
// exchange (PeerStatus.RetiredHolds): without it, a retired origin's
// tombstones would never be collected.
func (c *Cluster) HeldByAll(own map[uint64]uint64) (map[uint64]uint64, bool) {
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
