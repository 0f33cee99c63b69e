package daemon

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cachecast/cachecast/backup"
	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// node is the node as its front doors see it: the HTTP API's
// httpapi.Node and the Redis front door's resp.Node (redis.go) on one
// adapter, so that what both need (the view's Keys and Topics, the write
// path, the cluster's status) is written once.
type node struct{ d *Daemon }

func (n *node) Entry(topic, key string) (view.Entry, bool) { return n.d.store.Get(topic, key) }
func (n *node) EntryInto(buf []byte, topic, key string) (view.Entry, []byte, bool) {
	return n.d.store.GetInto(buf, topic, key)
}
func (n *node) Counting(topic, key string) (view.Entry, bool) {
	return n.d.store.Counting(topic, key)
}

func (n *node) Pending(topic, after string, limit int) []view.PendingRecord {
	return n.d.store.Pending(topic, after, limit)
}

func (n *node) PendingKey(topic, key string) []view.PendingRecord {
	return n.d.store.PendingKey(topic, key)
}

// FollowStore is the store's one reader of its changes (store.Follow),
// for the HTTP API's time events; resp's Follow (redis.go) is the same
// reader, its changes told in the Redis door's terms.
func (n *node) FollowStore(ctx context.Context, o store.FollowOptions, fn func(store.Followed), end func()) <-chan struct{} {
	return n.d.store.Follow(ctx, o, fn, end)
}

func (n *node) Expiring(topic, after string, scan int) ([]view.KeyedEntry, int, string) {
	return n.d.store.Expiring(topic, after, scan)
}

func (n *node) Keys(topic, prefix, after string, limit int) []string {
	return n.d.store.Keys(topic, prefix, after, limit)
}

func (n *node) Topics() []view.TopicInfo     { return n.d.store.Topics() }
func (n *node) TopicEnd(topic string) uint64 { return n.d.store.TopicEnd(topic) }
func (n *node) Cursors() []store.CursorInfo  { return n.d.store.Cursors() }
func (n *node) Healthy() error               { return n.d.healthy() }
func (n *node) DiskFull() error              { return n.d.store.DiskFull() }
func (n *node) Ready() bool                  { return n.d.ready.Load() }
func (n *node) Degraded() string             { return n.d.degraded() }

// AcceptLost gives up the records lost to a damaged log.
func (n *node) AcceptLost() (wire.AcceptLostResult, error) { return n.d.acceptLost() }

func (n *node) ForgetMember(ctx context.Context, name string, fleet bool) (wire.ForgetResult, error) {
	if n.d.cluster == nil {
		return wire.ForgetResult{Member: name}, wire.Errorf(wire.CodeConflict, "this node is in no cluster (--gossip-addr is empty)")
	}
	return n.d.cluster.Forget(ctx, name, fleet)
}

// Backup writes the node's backup file: the cursors first, then the
// view's snapshot from a clone taken as it starts, as a peer that
// bootstraps gets it; writes go on meanwhile.
func (n *node) Backup(w io.Writer) error {
	d := n.d
	meta := backup.Meta{Version: Version, Node: d.cfg.NodeName, Origin: wire.FormatOrigin(d.store.Origin()), Created: time.Now().UTC()}
	for _, c := range d.store.Cursors() {
		meta.Cursors = append(meta.Cursors, backup.Cursor{Name: c.Name, Topic: c.Topic, Offset: c.Offset, Owner: c.Owner, Owned: c.Owned})
	}
	return backup.Write(w, meta, d.store.SnapshotTo)
}

// CatchUp is nil once the node has caught up with its peers (cluster.CatchUp).
func (n *node) CatchUp() *wire.CatchUpStatus {
	if n.d.catch.CaughtUp() {
		return nil
	}
	cs := n.d.catch.Status()
	return &cs
}

// State is whether the node serves its view, for both doors: away (it
// left its cluster), catching up (before its first ready).
func (n *node) State() command.State {
	return command.State{Away: n.d.awayReason(), CatchUp: n.CatchUp()}
}

func (n *node) Verify(ctx context.Context) wire.VerifyResult {
	return n.d.verifies.Verify(ctx, n.d.store, n.d.cfg.NodeName, n.d.cluster)
}

func (n *node) NewTopicReader(topic string, start store.Start, tags []string) (*store.TopicReader, error) {
	return n.d.store.NewTopicReader(topic, start, tags)
}

func (n *node) Cursor(name string) (store.CursorInfo, bool) { return n.d.store.LookupCursor(name) }

// SetCursor creates or moves a durable cursor for the request's caller:
// the caller owns a cursor it creates, and only the owner or an admin may
// move it afterwards. A caller the kernel did not name may not own one.
func (n *node) SetCursor(ctx context.Context, name, topic string, offset uint64) error {
	c := access.CallerFrom(ctx)
	if !c.Known {
		return wire.Errorf(wire.CodeForbidden, "a durable cursor needs a caller the kernel names (SO_PEERCRED); connect over the Unix socket")
	}
	return n.d.store.SetCursorAs(c.UID, n.d.guard.Has(c, access.RoleAdmin), name, topic, offset)
}

// DeleteCursor deletes a durable cursor: its owner or an admin may.
func (n *node) DeleteCursor(ctx context.Context, name string) error {
	c := access.CallerFrom(ctx)
	return n.d.store.DeleteCursorAs(c.UID, n.d.guard.Has(c, access.RoleAdmin), name)
}

func (n *node) PublishAs(ctx context.Context, msgs []record.Message, c access.Caller) ([]store.Result, string, error) {
	return n.d.publish(ctx, msgs, c, nil)
}

// NodeStatus is GET /v1/status.
func (n *node) NodeStatus() wire.Status {
	d := n.d
	s := d.store.Stats()
	var b wire.Status
	b.Node.Name = d.cfg.NodeName
	b.Node.Origin = wire.FormatOrigin(s.Origin)
	b.Node.Version = Version
	b.UptimeSeconds = time.Since(d.started).Round(time.Millisecond).Seconds()
	b.Flush = s.Flush.String()
	b.Store.Segments = s.Segments
	b.Store.MappedSegments = s.MappedSegments
	b.Store.LogBytes = s.LogBytes
	b.Store.WritePos = s.WritePos
	b.Store.FlushedPos = s.FlushedPos
	b.Store.OldestPos = s.OldestPos
	b.Store.Records = s.Records
	b.Store.Keys = s.Keys
	if d.redis != nil {
		rs := d.redis.Stats()
		b.Redis = &wire.RedisStatus{Socket: d.RedisSocketPath(), Addr: d.RedisAddr(), Connections: rs.Connections,
			Commands: rs.Commands, TrackingClients: rs.TrackingClients, Invalidations: rs.Invalidations,
			SlowDisconnects: rs.SlowDisconnects, ProtocolErrors: rs.ProtocolErrors, Subscriptions: rs.Subscriptions,
			ConnectionsRefused: rs.Refused, IdleClosed: rs.IdleClosed, TrackingEvictedKeys: rs.TrackingEvicted}
	}
	_, b.Missing, b.Degraded = d.degradation()
	b.Away = d.awayReason()
	b.CatchUp = n.CatchUp()
	b.Repair = d.repairStatus()
	if d.cluster != nil {
		obs := d.cluster.Observer().Status(time.Now())
		b.Observer = &obs
	}
	view := cluster.WireDigest(d.store.RecentViewDigests())
	b.View = &view
	return b
}

// Cluster is GET /v1/cluster: the members as this node sees them and how
// far each is behind each origin. A lone node (no --gossip-addr) lists
// only itself.
func (n *node) Cluster() wire.ClusterStatus {
	d := n.d
	if d.cluster == nil {
		origin := wire.FormatOrigin(d.store.Origin())
		return wire.ClusterStatus{Node: d.cfg.NodeName, Origin: origin,
			Members: []wire.ClusterMember{{Name: d.cfg.NodeName, Origin: origin, State: "alive", Self: true}}}
	}
	return d.cluster.Status()
}

// fleetCanWrite refuses msgs with fleet_too_old when one of them has a
// time field and an alive member runs a build that refuses such records
// (see "Upgrades" in DESIGN.md), or is an expiry change and an alive
// member runs a build before record version 3, or a counter increment
// and one runs a build before record version 4. A batch's marking needs
// record version 2: while a member below it is alive it is dropped, and
// the batch is written as older builds write one, its records applied
// one by one. So is the absence an expiry change of a counter's revival
// names (record version 6): while a member below data protocol 10 is
// alive the change names the version only, as that build writes it.
func (d *Daemon) fleetCanWrite(msgs []record.Message) error {
	if d.cluster == nil {
		return nil
	}
	timed, batch, change, counter, absent, revival := false, false, false, false, false, false
	for i := range msgs {
		revival = revival || msgs[i].ExpiryAbsent
		timed = timed || msgs[i].TimeFields()
		batch = batch || msgs[i].BatchFollow != 0
		change = change || msgs[i].ExpiryChange()
		counter = counter || msgs[i].Counter()
		absent = absent || msgs[i].CountAbsent
	}
	if absent {
		if old := d.cluster.TooOld(broadcast.ProtocolAbsent); len(old) > 0 {
			return wire.Errorf(wire.CodeFleetTooOld, "an increment of a key without a value (INCR and its kin) needs every alive member at data protocol %d or later; upgrade these first: %s (nothing was written)",
				broadcast.ProtocolAbsent, strings.Join(old, ", "))
		}
	}
	if counter {
		if old := d.cluster.TooOld(broadcast.ProtocolCounter); len(old) > 0 {
			return wire.Errorf(wire.CodeFleetTooOld, "a counter increment (INCR and its kin) needs every alive member at data protocol %d or later; upgrade these first: %s (nothing was written)",
				broadcast.ProtocolCounter, strings.Join(old, ", "))
		}
	}
	if revival && len(d.cluster.TooOld(broadcast.ProtocolRevival)) > 0 {
		// A member below 10 refuses a version 6 record: the change is
		// written as that build writes it, naming the version only.
		for i := range msgs {
			msgs[i].ExpiryAbsent, msgs[i].Gone = false, 0
		}
	}
	if change {
		if old := d.cluster.TooOld(broadcast.ProtocolExpiry); len(old) > 0 {
			return wire.Errorf(wire.CodeFleetTooOld, "an expiry change (EXPIRE, PERSIST) needs every alive member at data protocol %d or later; upgrade these first: %s (nothing was written)",
				broadcast.ProtocolExpiry, strings.Join(old, ", "))
		}
	}
	if !timed && !batch {
		return nil
	}
	old := d.cluster.TooOld(broadcast.ProtocolTimed)
	if len(old) == 0 {
		return nil
	}
	if timed {
		return wire.Errorf(wire.CodeFleetTooOld, "an expiry, an effective time or a cancel needs every alive member at data protocol %d or later; upgrade these first: %s (nothing was written)",
			broadcast.ProtocolTimed, strings.Join(old, ", "))
	}
	for i := range msgs {
		msgs[i].BatchFollow = 0
	}
	return nil
}

// publish is the one path every write takes: the local API's PUT, DELETE
// and POST messages and the Redis front door's writes call it, and the
// cluster layer extends it (replication to the peer, fan-out, the replica
// status). It checks that the caller has the publish role, appends msgs
// as one all-or-nothing batch (stamped with this node's origin, seq and
// HLC), counts and logs the write, and returns the store's results with
// the replica status (wire.StatusOK, or another status word). msgs are
// checked by the door that took them, by package command's rules (names,
// sizes, time fields); the store checks the record's rules again. The
// node's state refuses a write while it is away (command.State.Write). The
// results go into buf when it has room for them (a caller that publishes
// batch after batch allocates none), or into a new slice.
func (d *Daemon) publish(ctx context.Context, msgs []record.Message, c access.Caller, buf []store.Result) ([]store.Result, string, error) {
	if e := d.guard.Authorize(c, access.RolePublish); e != nil {
		return nil, "", e
	}
	if e := (command.State{Away: d.awayReason()}).Write(); e != nil {
		return nil, "", e // its writes would reach no peer
	}
	if err := ctx.Err(); err != nil {
		// The client left before anything was written: write nothing.
		return nil, "", wire.Errorf(wire.CodeTimeout, "request cancelled before the write: %v", err)
	}
	if err := d.fleetCanWrite(msgs); err != nil {
		return nil, "", err
	}
	results := buf[:0]
	if cap(buf) < len(msgs) {
		results = make([]store.Result, 0, len(msgs))
	}
	results = results[:len(msgs)]
	var err error
	if len(msgs) == 1 {
		results[0], err = d.store.Publish(&msgs[0])
	} else {
		err = d.store.PublishBatchInto(msgs, results)
	}
	if err != nil {
		d.log.Warn("publish failed", append(c.Fields(),
			zap.String("topic", msgs[0].Topic), zap.Int("messages", len(msgs)), zap.Error(err))...)
		return nil, "", err
	}
	var size int
	for i := range msgs {
		size += len(msgs[i].Value)
	}
	d.m.publishes.Add(float64(len(msgs)))
	d.m.publishBytes.Add(float64(size))
	if ce := d.log.Check(zapcore.DebugLevel, "published"); ce != nil {
		ce.Write(append(c.Fields(),
			zap.String("topic", msgs[0].Topic), zap.Int("messages", len(msgs)), zap.Int("bytes", size),
			zap.Uint64("first-seq", results[0].Seq))...)
	}
	status := wire.StatusOK
	if d.cluster != nil && d.cfg.Replication == "sync" {
		// The write stands whatever the replica does; the status says
		// whether the replica confirmed it in time.
		status = d.cluster.WaitReplica(ctx, results[len(results)-1].Seq)
		if status != wire.StatusOK {
			d.m.replicaMisses.WithLabelValues(status).Inc()
		}
	} else if d.cluster == nil && d.cfg.Replication == "sync" {
		status = wire.StatusReplicaUnavailable
	}
	return results, status, nil
}

// Fleet is GET /v1/fleet, KeyAcross GET /v1/topics/{topic}/nodes/{key},
// GroupsAcross GET /v1/fleet/groups (console.go): each asks every live
// member, within timeout apiece; an answer serves the callers of the same
// question for half a second.
func (n *node) Fleet(_ context.Context, timeout time.Duration) wire.Fleet {
	return n.d.shared(fmt.Sprintf("fleet %d", timeout), func(ctx context.Context) any {
		return n.d.fleet(ctx, timeout)
	}).(wire.Fleet)
}

// KeyHistory is GET /v1/topics/{topic}/history/{key} (console.go).
func (n *node) KeyHistory(topic, key string, limit int, scan uint64) (wire.KeyHistory, error) {
	return n.d.keyHistory(topic, key, limit, scan)
}

func (n *node) GroupsAcross(_ context.Context, timeout time.Duration) wire.GroupsAcross {
	return n.d.shared(fmt.Sprintf("groups %d", timeout), func(ctx context.Context) any {
		return n.d.groupsAcross(ctx, timeout)
	}).(wire.GroupsAcross)
}

func (n *node) KeyAcross(_ context.Context, topic, key string, timeout time.Duration) wire.KeyAcross {
	return n.d.shared(fmt.Sprintf("key %d %q %q", timeout, topic, key), func(ctx context.Context) any {
		return n.d.keyAcross(ctx, topic, key, timeout)
	}).(wire.KeyAcross)
}
