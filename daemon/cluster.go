package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/gossip"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// cluster joins the daemon to the others: gossip for membership, the
// broadcast node for records. It exists unless --gossip-addr is empty.
type cluster struct {
	cfg  Config
	log  *zap.Logger
	st   *store.Store
	g    *gossip.Gossip
	b    *broadcast.Node
	keys [][]byte
	// onMembers is called at each membership event (the consumer groups
	// rebalance); set before start.
	onMembers func()
	// join is the first join's seeds: --join and a few remembered
	// members; peers remembers the members seen (peers.go).
	join  []string
	peers *peerBook

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

// newCluster makes the cluster's gossip and broadcast node; applied
// observes each record of another origin appended from a peer (the
// observer's freshness).
func newCluster(cfg Config, st *store.Store, applied func(uint64, time.Time), log *zap.Logger) (*cluster, error) {
	var keys [][]byte
	if cfg.ClusterKeyFile != "" {
		var err error
		if keys, err = gossip.LoadKeyFile(cfg.ClusterKeyFile); err != nil {
			return nil, fmt.Errorf("--cluster-key-file: %w", err)
		}
	}
	tlsConf, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		// Validate kept the ports on loopback, unless told otherwise.
		log.Warn("the cluster runs without a key: gossip is not encrypted and the data port takes records from any process that reaches it",
			zap.String("gossip-addr", cfg.GossipAddr), zap.String("data-addr", cfg.DataAddr),
			zap.Bool("loopback-only", loopbackAddr(cfg.GossipAddr) && loopbackAddr(cfg.DataAddr)))
	}
	var natsConf *broadcast.NATSConfig
	if cfg.Transport == "nats" {
		natsConf = &broadcast.NATSConfig{URL: cfg.NATSURL, SubjectPrefix: cfg.NATSSubjectPrefix, Options: cfg.natsOptions()}
	}
	b, err := broadcast.New(broadcast.Config{
		Store:       st,
		ListenAddr:  cfg.DataAddr,
		Keys:        keys,
		TLS:         tlsConf,
		NATS:        natsConf,
		Tree:        cfg.TCPFanout == "tree" || cfg.TCPFanout == "auto" && cfg.Transport != "nats",
		TreeFrom:    treeFrom(cfg.TCPFanout),
		Fanout:      cfg.AntiEntropyFanout,
		RetireAfter: cfg.RetireOriginsAfter,
		Dial:        cfg.hooks.DataDial,
		ProtoMax:    cfg.hooks.DataProtocolMax,
		Applied:     applied,
		Logger:      log.Named("broadcast"),
	})
	if err != nil {
		return nil, fmt.Errorf("--data-addr: %w", err)
	}
	protoMin, protoMax := b.Protocols()
	peers := loadPeerBook(cfg.DataDir, cfg.NodeName, peerGrace(cfg), time.Now(), log)
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
		ReconnectTimeout: peerGrace(cfg),
		Keys:             keys,
		ProtoMin:         protoMin,
		ProtoMax:         protoMax,
		Profile:          cfg.GossipProfile,
		Unreachable:      cfg.hooks.GossipUnreachable,
		Logger:           log.Named("gossip"),
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("--gossip-addr: %w", err)
	}
	return &cluster{cfg: cfg, log: log, st: st, g: g, b: b, keys: keys, join: join, peers: peers,
		joined: make(chan struct{}), stop: make(chan struct{})}, nil
}

// tlsConfig builds mutual TLS for the data port from --tls-cert,
// --tls-key and --tls-ca; nil when they are not set.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCert == "" && c.TLSKey == "" && c.TLSCA == "" {
		return nil, nil
	}
	if c.TLSCert == "" || c.TLSKey == "" || c.TLSCA == "" {
		return nil, errors.New("--tls-cert, --tls-key and --tls-ca: set all three for mutual TLS on the data port, or none")
	}
	conf, err := broadcast.LoadTLS(c.TLSCert, c.TLSKey, c.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
	}
	return conf, nil
}

// natsOptions turns the --nats-* flags into connection options.
func (c Config) natsOptions() []nats.Option {
	var opts []nats.Option
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	if c.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(c.NATSTLSCA))
	}
	if c.NATSTLSCert != "" {
		opts = append(opts, nats.ClientCert(c.NATSTLSCert, c.NATSTLSKey))
	}
	return opts
}

// reloadKeys reads --cluster-key-file again and puts its keys in force
// for gossip and for new data connections.
func (c *cluster) reloadKeys() error {
	keys, err := gossip.LoadKeyFile(c.cfg.ClusterKeyFile)
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

// start serves the data port, follows membership and joins the seeds. The
// first join attempt ends before joined is closed (READY=1 waits for it);
// a failed join is retried in the background.
func (c *cluster) start() {
	c.b.Start()
	c.wg.Add(2)
	go c.followMembers()
	go c.joinLoop()
}

func (c *cluster) joinLoop() {
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
func (c *cluster) followMembers() {
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
func (c *cluster) checkClocks() {
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
func (c *cluster) clockAheadPeers() (flagged []string, peers int) {
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

func (c *cluster) refresh() {
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
	if r, ok := c.replica(); ok {
		c.b.SetReplica(r.ID)
	}
}

// tooOld names the alive members, this node included, whose data
// protocol is below need (broadcast.ProtocolTimed: they refuse records
// with time fields; ProtocolExpiry: expiry changes), so that none such
// is written while one is alive (fleet_too_old).
func (c *cluster) tooOld(need uint8) []string {
	var old []string
	for _, m := range c.g.Alive() {
		if m.Proto < need {
			old = append(old, fmt.Sprintf("%s (protocol %d)", m.Name, m.Proto))
		}
	}
	return old
}

// nodes returns the IDs of the alive members, this node included.
func (c *cluster) nodes() []uint64 {
	alive := c.g.Alive()
	ids := make([]uint64, len(alive))
	for i, m := range alive {
		ids[i] = m.ID
	}
	return ids
}

// replica is the peer this node's writes are copied to: the one --replica
// names, else this node's successor on the ring of alive node IDs.
func (c *cluster) replica() (gossip.Member, bool) {
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

// waitReplica waits until the replica holds this node's record seq and
// says how it went as a publish status.
func (c *cluster) waitReplica(ctx context.Context, seq uint64) string {
	peer, ok := c.replica()
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

// close leaves the cluster gracefully and stops everything. Only the
// first call does the work.
func (c *cluster) close() error {
	c.closeOnce.Do(func() { c.closeErr = c.doClose() })
	return c.closeErr
}

func (c *cluster) doClose() error {
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

// memberCounts is how many members are alive, and known, this node
// included.
func (c *cluster) memberCounts() (alive, known int) {
	return len(c.g.Alive()), len(c.g.Members())
}

func (c *cluster) status() wire.ClusterStatus {
	self := c.st.Origin()
	out := wire.ClusterStatus{Node: c.cfg.NodeName, Origin: wire.FormatOrigin(self)}
	if r, ok := c.replica(); ok {
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
func (c *cluster) lag(mine, theirs map[uint64]uint64, peer uint64) []wire.OriginLag {
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
