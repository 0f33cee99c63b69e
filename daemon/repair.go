package daemon

import (
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
)

// A damaged log (the store's repair.go has the mechanism).
//
// The store sets a damaged record of its log aside and stops its vector
// before it, so that anti-entropy pulls it back from a peer that holds it
// (a record of this node's own origin too: its replica and the others
// have it). The daemon says where that stands: /v1/status has "repair"
// (the records still lost, each with whether a live peer holds it), the
// STATUS line starts with REPAIRING, the metrics count them, and when
// some lost record is held by no live peer the log says so (again when
// the count changes), naming `cachecast repair accept` (POST
// /v1/repair/accept), which gives them up: the vector goes on past them
// and a peer that lacks them too bootstraps from a snapshot.

// maxLostListed bounds the lost records /v1/status lists.
const maxLostListed = 100

// repairStatus is the "repair" object of /v1/status; nil while nothing
// was found damaged.
func (d *Daemon) repairStatus() *wire.RepairStatus {
	lost := d.store.Lost()
	damaged, repaired := d.store.RepairStats()
	aside := d.store.SnapshotSetAside()
	viewLost, viewPending := d.store.ViewFromPeer()
	if len(lost) == 0 && damaged == 0 && aside == "" && !viewLost {
		return nil
	}
	holds := map[uint64]uint64{}
	if d.cluster != nil {
		holds = d.cluster.PeerHolds()
	}
	rs := &wire.RepairStatus{LostRecords: len(lost), DamagedTotal: damaged, RepairedTotal: repaired, SnapshotSetAside: aside}
	switch {
	case viewPending:
		rs.ViewFromPeer = "waiting"
	case viewLost:
		rs.ViewFromPeer = "done"
	}
	for _, lr := range lost {
		w := wireLost(lr)
		w.Available = holds[lr.Origin] >= lr.Seq
		if !w.Available {
			rs.Unavailable++
		}
		if len(rs.Lost) < maxLostListed {
			rs.Lost = append(rs.Lost, w)
		}
	}
	return rs
}

func wireLost(lr store.LostRecord) wire.LostRecord {
	return wire.LostRecord{Origin: wire.FormatOrigin(lr.Origin), Seq: lr.Seq, Topic: lr.Topic,
		Segment: lr.Segment, Offset: lr.Offset, CopiedTo: lr.CopiedTo, Found: lr.Found.Format(time.RFC3339)}
}

// acceptLost gives up the lost records (POST /v1/repair/accept).
func (d *Daemon) acceptLost() (wire.AcceptLostResult, error) {
	gone, err := d.store.AcceptLost()
	res := wire.AcceptLostResult{Accepted: []wire.LostRecord{}}
	for _, lr := range gone {
		res.Accepted = append(res.Accepted, wireLost(lr))
	}
	if err == nil && len(gone) > 0 {
		d.log.Warn("the lost records were given up (cachecast repair accept)", zap.Int("records", len(gone)))
	}
	return res, err
}

// checkRepair logs, when it changes, how many lost records no live peer
// holds (notifyLoop calls it every statusInterval); the last count is
// its goroutine's.
func (d *Daemon) checkRepair(last int) int {
	rs := d.repairStatus()
	n := 0
	if rs != nil {
		n = rs.Unavailable
	}
	switch {
	case n > 0 && n != last:
		var first []string
		for _, lr := range rs.Lost {
			if !lr.Available && len(first) < 5 {
				first = append(first, lr.Origin+"/"+strconv.FormatUint(lr.Seq, 10)+" ("+lr.Topic+")")
			}
		}
		d.log.Error("records lost to a damaged log are held by no live peer: they cannot be pulled back; once no peer that might hold them is coming back, give them up with `cachecast repair accept`",
			zap.Int("records", n), zap.Strings("first", first))
	case n == 0 && last > 0:
		d.log.Info("every lost record is held by a live peer again, or back")
	}
	return n
}
