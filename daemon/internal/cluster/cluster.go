package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/gossip"
	"github.com/cachecast/cachecast/internal/daemonhooks"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// Config is what the cluster takes of the daemon's settings; each field
// is the flag of its name (docs/configuration.md has their meaning).
type Config struct {
	NodeName      string // --node-name
	DataDir       string // --data-dir: peers.json and the contact file
	GossipAddr    string // --gossip-addr
	AdvertiseAddr string // --advertise-addr
	DataAddr      string // --data-addr
	Join          []string
	JoinTimeout   time.Duration
	GossipProfile string
	// KeyFile is --cluster-key-file, read at New and by ReloadKeys.
	KeyFile string
	// LoopbackOnly says both ports bind loopback only (the warning of a
	// cluster without a key says so).
	LoopbackOnly bool
	// TLS is the data port's mutual TLS (--tls-*); nil: none.
	TLS *tls.Config
	// NATS is the NATS fan-out (--transport=nats); nil: TCP.
	NATS               *broadcast.NATSConfig
	TCPFanout          string // --tcp-fanout: direct, tree or auto
	AntiEntropyFanout  int
	RetireOriginsAfter time.Duration
	TombstoneGrace     time.Duration
	MaxClockOffset     time.Duration
	Replica            string
	ReplicaTimeout     time.Duration
	ShutdownTimeout    time.Duration
	// Hooks are the tests' (daemonhooks): DataDial, DataProtocolMax,
	// GossipUnreachable.
	Hooks  daemonhooks.Hooks
	Logger *zap.Logger
}

// Cluster joins the node to the others: gossip for membership, the
// broadcast node for records. The daemon has one unless --gossip-addr is
// empty. Its methods are safe for concurrent use.
type Cluster struct {
	cfg  Config
	log  *zap.Logger
	st   *store.Store
	g    *gossip.Gossip
	b    *broadcast.Node
	keys [][]byte
	// onMembers is called at each membership event (the consumer groups
	// rebalance); set before Start.
	onMembers func()
	// join is the first join's seeds: --join and a few remembered
	// members; peers remembers the members seen (peers.go).
	join  []string
	peers *peerBook
	// obs is the consistency observer (observer.go).
	obs *Observer

	joined   chan struct{} // closed after the first join attempt
	sawPeers atomic.Bool   // another member was alive at some point
	// clockBehind is set while most peers' records arrive stamped ahead
	// of this node's clock beyond --max-clock-offset (checkClocks).
	clockBehind   atomic.Bool
	clockWarnedAt time.Time // checkClocks' last warning (its goroutine only)
	stop          chan struct{}
	wg            sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New makes the cluster's gossip and broadcast node over st; Start
// serves and joins.
func New(cfg Config, st *store.Store) (*Cluster, error) {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c := &Cluster{cfg: cfg, log: log, st: st, joined: make(chan struct{}), stop: make(chan struct{})}
	c.obs = newObserver(c)
	var keys [][]byte
	if cfg.KeyFile != "" {
		var err error
		if keys, err = gossip.LoadKeyFile(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("--cluster-key-file: %w", err)
		}
	}
	if len(keys) == 0 {
		// Validate kept the ports on loopback, unless told otherwise.
		log.Warn("the cluster runs without a key: gossip is not encrypted and the data port takes records from any process that reaches it",
			zap.String("gossip-addr", cfg.GossipAddr), zap.String("data-addr", cfg.DataAddr),
			zap.Bool("loopback-only", cfg.LoopbackOnly))
	}
	b, err := broadcast.New(broadcast.Config{
		Store:       st,
		ListenAddr:  cfg.DataAddr,
		Keys:        keys,
		TLS:         cfg.TLS,
		NATS:        cfg.NATS,
		Tree:        cfg.TCPFanout == "tree" || cfg.TCPFanout == "auto" && cfg.NATS == nil,
		TreeFrom:    treeFrom(cfg.TCPFanout),
		Fanout:      cfg.AntiEntropyFanout,
		RetireAfter: cfg.RetireOriginsAfter,
		Dial:        cfg.Hooks.DataDial,
		ProtoMax:    cfg.Hooks.DataProtocolMax,
		Applied:     func(origin uint64, stamp time.Time) { c.obs.applied(origin, stamp) },
		Logger:      log.Named("broadcast"),
	})
	if err != nil {
		return nil, fmt.Errorf("--data-addr: %w", err)
	}
	protoMin, protoMax := b.Protocols()
	grace := peerGrace(cfg.TombstoneGrace)
	peers := loadPeerBook(cfg.DataDir, cfg.NodeName, grace, time.Now(), log)
	peers.setRetired(b.Retired)
	join := peers.seeds(cfg.Join)
	g, err := gossip.New(gossip.Config{
		NodeName:         cfg.NodeName,
		NodeID:           st.Origin(),
		BindAddr:         cfg.GossipAddr,
		AdvertiseAddr:    cfg.AdvertiseAddr,
		DataAddr:         b.Addr(),
		Join:             join,
		JoinTimeout:      cfg.JoinTimeout,
		Remembered:       peers.remembered(),
		ReconnectTimeout: grace,
		Keys:             keys,
		ProtoMin:         protoMin,
		ProtoMax:         protoMax,
		Profile:          cfg.GossipProfile,
		Unreachable:      cfg.Hooks.GossipUnreachable,
		Logger:           log.Named("gossip"),
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("--gossip-addr: %w", err)
	}
	c.g, c.b, c.keys, c.join, c.peers = g, b, keys, join, peers
	c.obs.byOrigin.named(c.originName) // after c.g is set: b's records may be coming in
	return c, nil
}

// Observer is the cluster's consistency observer.
func (c *Cluster) Observer() *Observer { return c.obs }

// Gossip is the cluster's membership (tests and the console's questions
// reach the members through it).
func (c *Cluster) Gossip() *gossip.Gossip { return c.g }

// Broadcast is the cluster's data port.
func (c *Cluster) Broadcast() *broadcast.Node { return c.b }

// OnMembers sets what runs at each membership event (the consumer
// groups rebalance); call it before Start.
func (c *Cluster) OnMembers(fn func()) { c.onMembers = fn }

// Joined is closed once the first join attempt has ended.
func (c *Cluster) Joined() <-chan struct{} { return c.joined }

// ClockBehind reports whether this node's clock runs behind most of its
// peers' (checkClocks).
func (c *Cluster) ClockBehind() bool { return c.clockBehind.Load() }

// Missing names the members seen alive since the start, or remembered,
// that are not alive now.
func (c *Cluster) Missing() []string { return c.peers.missing() }

// ReloadKeys reads --cluster-key-file again and puts its keys in force
// for gossip and for new data connections.
func (c *Cluster) ReloadKeys() error {
	keys, err := gossip.LoadKeyFile(c.cfg.KeyFile)
	if err != nil {
		return err
	}
	if err := c.g.SetKeys(keys); err != nil {
		return err
	}
	c.b.SetKeys(keys)
	c.log.Info("cluster keys reloaded", zap.Strings("keys", c.g.Keys()))
	return nil
}

// Start serves the data port, follows membership and joins the seeds. The
// first join attempt ends before joined is closed (READY=1 waits for it);
// a failed join is retried in the background.
func (c *Cluster) Start() {
	c.b.Start()
	c.wg.Add(2)
	go c.followMembers()
	go c.joinLoop()
}

func (c *Cluster) joinLoop() {
	defer c.wg.Done()
	first := true
	alone := 0
	for {
		if len(c.join) == 0 {
			close(c.joined)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		n, err := c.g.Join(ctx)
		cancel()
		if first {
			close(c.joined)
			first = false
		}
		if err == nil && len(c.g.Alive()) > 1 {
			c.log.Info("joined the cluster", zap.Int("seeds-reached", n), zap.Int("members", len(c.g.Alive())))
			c.refresh()
			return
		}
		if err == nil {
			// Only this node answered (it is on its own seed list): fine for
			// the first node of a cluster, a problem (a wrong key, a
			// firewall) if the others are up. Keep trying; say it once.
			if alone == 0 {
				c.log.Warn("no other member answered the join; running alone and trying again",
					zap.Strings("join", c.join))
			}
			alone++
			if alone > 720 {
				return // an hour alone: gossip's reconnect tries the seeds from now on, and the others join this node
			}
		} else {
			c.log.Warn("joining the cluster failed; retrying", zap.Strings("join", c.join), zap.Error(err))
		}
		select {
		case <-c.stop:
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// followMembers keeps the broadcast node's peers equal to the alive
// members, and the remembered peers current: at every membership event,
// and every second in case an event was dropped.
func (c *Cluster) followMembers() {
	defer c.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	events := c.g.Events()
	for {
		select {
		case <-c.stop:
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			c.log.Info("member "+ev.Type.String(), zap.String("member", ev.Member.Name),
				zap.String("data-addr", ev.Member.DataAddr))
			if c.onMembers != nil {
				c.onMembers()
			}
		case <-tick.C:
			c.checkClocks()
		}
		c.refresh()
		c.peers.save(time.Now(), false)
	}
}

// clockWarnEvery is how often checkClocks repeats its warning while this
// node's clock stays behind.
const clockWarnEvery = 5 * time.Minute

// checkClocks tells a clock of this node's that runs behind from a peer's
// that runs ahead: the store flags every origin whose records arrive
// stamped beyond --max-clock-offset ahead, so when that is most of the
// alive peers (at least two: with one peer the two cases look alike),
// the fault is most likely here. It says so loudly and in status.
func (c *Cluster) checkClocks() {
	flagged, peers := c.clockAheadPeers()
	behind := peers >= 2 && 2*len(flagged) > peers
	was := c.clockBehind.Swap(behind)
	now := time.Now()
	switch {
	case behind && (!was || now.Sub(c.clockWarnedAt) >= clockWarnEvery):
		c.clockWarnedAt = now
		c.log.Error("this node's clock is behind most of its peers: their records arrive stamped ahead of it by more than --max-clock-offset and are held or refused; check its time sync (chronyc tracking, timedatectl)",
			zap.Strings("peers-ahead", flagged), zap.Int("peers", peers), zap.Duration("max-clock-offset", c.cfg.MaxClockOffset))
	case was && !behind:
		c.log.Info("this node's clock is no longer behind most of its peers")
	}
}

// clockAheadPeers names the alive peers whose records the store flags as
// persistently stamped ahead, and counts the alive peers.
func (c *Cluster) clockAheadPeers() (flagged []string, peers int) {
	clocks := c.st.OriginClocks()
	self := c.st.Origin()
	for _, m := range c.g.Alive() {
		if m.ID == self {
			continue
		}
		peers++
		if clocks[m.ID].Flagged {
			flagged = append(flagged, m.Name)
		}
	}
	return flagged, peers
}

func (c *Cluster) refresh() {
	var peers []broadcast.Peer
	for _, m := range c.g.Alive() {
		peers = append(peers, broadcast.Peer{ID: m.ID, Name: m.Name, Addr: m.DataAddr, Proto: m.Proto})
	}
	c.b.SetPeers(peers)
	if len(peers) > 1 {
		c.sawPeers.Store(true)
	}
	known := map[uint64]bool{}
	members := c.g.Members()
	for _, m := range members {
		known[m.ID] = true
	}
	c.b.ForgetPeers(func(id uint64) bool { return known[id] })
	c.peers.update(members, time.Now())
	if r, ok := c.Replica(); ok {
		c.b.SetReplica(r.ID)
	}
}

// TooOld names the alive members, this node included, whose data
// protocol is below need (broadcast.ProtocolTimed: they refuse records
// with time fields; ProtocolExpiry: expiry changes), so that none such
// is written while one is alive (fleet_too_old).
func (c *Cluster) TooOld(need uint8) []string {
	var old []string
	for _, m := range c.g.Alive() {
		if m.Proto < need {
			old = append(old, fmt.Sprintf("%s (protocol %d)", m.Name, m.Proto))
		}
	}
	return old
}

// Nodes returns the IDs of the alive members, this node included.
func (c *Cluster) Nodes() []uint64 {
	alive := c.g.Alive()
	ids := make([]uint64, len(alive))
	for i, m := range alive {
		ids[i] = m.ID
	}
	return ids
}

// Replica is the peer this node's writes are copied to: the one --replica
// names, else this node's successor on the ring of alive node IDs.
func (c *Cluster) Replica() (gossip.Member, bool) {
	alive := c.g.Alive() // sorted by ID, this node included
	if c.cfg.Replica != "" {
		for _, m := range alive {
			if m.Name == c.cfg.Replica && m.ID != c.st.Origin() {
				return m, true
			}
		}
		return gossip.Member{}, false
	}
	if len(alive) < 2 {
		return gossip.Member{}, false
	}
	self := c.st.Origin()
	i := sort.Search(len(alive), func(i int) bool { return alive[i].ID > self })
	return alive[i%len(alive)], true
}

// WaitReplica waits until the replica holds this node's record seq and
// says how it went as a publish status.
func (c *Cluster) WaitReplica(ctx context.Context, seq uint64) string {
	peer, ok := c.Replica()
	if !ok {
		return wire.StatusReplicaUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReplicaTimeout)
	defer cancel()
	err := c.b.WaitReplica(ctx, peer.ID, seq)
	switch {
	case err == nil:
		return wire.StatusOK
	case errors.Is(err, broadcast.ErrNoPeer):
		return wire.StatusReplicaUnavailable
	default:
		return wire.StatusReplicaTimeout
	}
}

// Close leaves the cluster gracefully and stops everything. Only the
// first call does the work.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.doClose() })
	return c.closeErr
}

func (c *Cluster) doClose() error {
	close(c.stop)
	var errs []error
	if err := c.g.Leave(c.cfg.ShutdownTimeout); err != nil {
		errs = append(errs, fmt.Errorf("leave: %w", err))
	}
	errs = append(errs, c.g.Shutdown())
	c.wg.Wait()
	c.peers.save(time.Now(), true) // the last-seen times as of this stop
	errs = append(errs, c.b.Close())
	return errors.Join(errs...)
}

// MemberCounts is how many members are alive, and known, this node
// included.
func (c *Cluster) MemberCounts() (alive, known int) {
	return len(c.g.Alive()), len(c.g.Members())
}

// Status is GET /v1/cluster: the members as this node sees them.
func (c *Cluster) Status() wire.ClusterStatus {
	self := c.st.Origin()
	out := wire.ClusterStatus{Node: c.cfg.NodeName, Origin: wire.FormatOrigin(self)}
	if r, ok := c.Replica(); ok {
		out.Replica = r.Name
	}
	links := map[uint64]broadcast.PeerStatus{}
	for _, p := range c.b.Peers() {
		links[p.Peer.ID] = p
	}
	mine := c.b.LiveVector() // a retired origin is not compared entry by entry
	clocks := c.st.OriginClocks()
	out.ClockBehind = c.clockBehind.Load()
	for _, m := range c.g.Members() {
		cm := wire.ClusterMember{Name: m.Name, Origin: wire.FormatOrigin(m.ID), State: m.State.String(),
			Addr: m.Addr, DataAddr: m.DataAddr, Self: m.ID == self,
			Protocol: m.Proto, TooOld: m.Proto < broadcast.ProtocolTimed}
		if oc, ok := clocks[m.ID]; ok {
			cm.ClockAhead, cm.HeldRecords, cm.RefusedRecords = oc.Flagged, oc.Held, oc.Refused
			if oc.Flagged {
				cm.ClockAheadSeconds = oc.Ahead.Seconds()
			}
		}
		if l, ok := links[m.ID]; ok {
			cm.Connected = l.Connected
			cm.HeldBack = l.HeldBack
			cm.Lag = c.lag(mine, l.Holds, m.ID)
		} else if !cm.Self {
			// Failed, stopped or left: it lacks what it lacked when last
			// heard from and everything since (all of it if it never
			// reported), not nothing.
			last, _ := c.b.LastVector(m.ID)
			cm.Lag = c.lag(mine, last, m.ID)
		}
		out.Members = append(out.Members, cm)
	}
	return out
}

// lag compares what a peer holds with what this node holds, per origin,
// as of the peer's last report (its acks, and the last anti-entropy
// exchange with it: seconds old in a small cluster, about
// members/--anti-entropy-fanout seconds in a large one); the seconds
// are the age of the oldest record the peer lacks. A peer is never behind
// on its own origin.
func (c *Cluster) lag(mine, theirs map[uint64]uint64, peer uint64) []wire.OriginLag {
	var out []wire.OriginLag
	for o, m := range mine {
		t := theirs[o]
		if t >= m || o == peer {
			continue
		}
		l := wire.OriginLag{Origin: wire.FormatOrigin(o), Records: m - t}
		c.st.ReadOrigin(o, t+1, t+1, func(r record.Record) error {
			l.Seconds = time.Since(record.HLCTime(r.HLC())).Seconds()
			return nil
		})
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Origin < out[j].Origin })
	return out
}

// treeFrom is broadcast.Config.TreeFrom for --tcp-fanout: with auto the
// tree is used from broadcast.DefaultTreeFrom members, with tree always.
func treeFrom(fanout string) int {
	if fanout == "auto" {
		return broadcast.DefaultTreeFrom
	}
	return 0
}

// WaitReplicas is the Redis door's WAIT: 1 once the replica holds this
// node's record seq (seq 0: once it is connected), 0 if it does not
// within timeout (0: only what it holds already; below 0: until ctx
// ends).
func (c *Cluster) WaitReplicas(ctx context.Context, seq uint64, timeout time.Duration) int {
	peer, ok := c.Replica()
	if !ok {
		return 0
	}
	var cancel context.CancelFunc
	switch {
	case timeout == 0:
		ctx, cancel = context.WithCancel(ctx)
		cancel() // only what the replica holds already
	case timeout > 0:
		ctx, cancel = context.WithTimeout(ctx, timeout)
	default:
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	if seq == 0 {
		for _, p := range c.b.Peers() {
			if p.Peer.ID == peer.ID && p.Connected {
				return 1
			}
		}
		return 0
	}
	if c.b.WaitReplica(ctx, peer.ID, seq) == nil {
		return 1
	}
	return 0
}
