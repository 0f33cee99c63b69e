package broadcast

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/digest"
	"github.com/cachecast/cachecast/broadcast/internal/batch"
	"github.com/cachecast/cachecast/broadcast/internal/natsfan"
	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// Config configures a Node.
type Config struct {
	// Store is the node's store: records are read from it and appended to it.
	Store Store
	// ListenAddr is the data port's address; port 0 picks a free one.
	ListenAddr string
	// Keys are the cluster keys; Keys[0] is the one this node proves
	// with, any of them is accepted from a peer. Empty: no key.
	Keys [][]byte
	// TLS, when set, wraps the data port in TLS both ways. Set ClientCAs
	// and ClientAuth for mutual TLS; the same config dials (RootCAs).
	TLS *tls.Config
	// Dial opens a connection to a peer's data port; nil uses net.Dialer.
	// Tests put a fault-injecting dialer here.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Listener, when set, is used instead of listening on ListenAddr.
	Listener net.Listener
	// SyncInterval is how often a node exchanges version vectors with
	// Fanout peers picked at random; each side pulls what it misses
	// (anti-entropy). It is also how often a listener tells an open
	// connection it is alive.
	SyncInterval time.Duration
	// Fanout is how many peers a node exchanges vectors with every
	// SyncInterval (default 3; see the package doc for the rounds to
	// convergence).
	Fanout int
	// IdleTimeout closes an outbound connection that had nothing to do
	// for this long; the link dials again when it has. The replica's
	// connection stays open. Default 2s, and at least a SyncInterval.
	IdleTimeout time.Duration
	// RetireAfter is how long an origin must have been absent from the
	// peers (SetPeers) before this node retires it from the vectors it
	// sends (see "Retired origins" in the package doc). Default 24h.
	RetireAfter time.Duration
	// HandshakeTimeout bounds the handshake of a new connection.
	HandshakeTimeout time.Duration
	// PeerTimeout bounds how long a frame's write may block (a peer that
	// stopped reading) and how long an outbound connection may stay
	// silent (its peer sends its vector every SyncInterval) before the
	// connection is closed and redialed. Default 10s, and at least three
	// SyncIntervals.
	PeerTimeout time.Duration
	// MaxPull is the most records one pull request asks for.
	MaxPull uint64
	// BootstrapRecords: a node that lacks more than this many of a peer's
	// records, and holds fewer than it lacks (a fresh or wiped node),
	// takes the peer's snapshot instead of pulling the records, and the
	// peer does not push its own to it meanwhile (default 100,000).
	BootstrapRecords uint64
	// NATS, when set, carries the fan-out through NATS (see NATSConfig);
	// nil pushes over the data port.
	NATS *NATSConfig
	// Tree, over the data port, pushes records along the relay tree (see
	// "Fan-out" in the package doc): each node pushes every record it
	// stores, of any origin, to its tree neighbours that lack it, at
	// most TreeDegree+1 of them, and its own records to its replica too.
	// Off: each node pushes its own records to every peer. Not with NATS.
	Tree bool
	// TreeFrom, with Tree, is the fleet size (this node and its peers,
	// as SetPeers last gave them) from which the relay tree is used;
	// below it each node pushes its own records to every peer, as
	// without Tree (cachecastd --tcp-fanout=auto). Every node told the
	// same members makes the same choice. 0: the tree whatever the size.
	TreeFrom int
	// TreeDegree is the relay tree's degree (default DefaultTreeDegree).
	TreeDegree int
	// ProtoMax, when set, lowers the highest protocol version the node
	// speaks, so that it acts as an older build would (tests of a fleet
	// being upgraded). It must lie in [ProtocolMin, ProtocolMax].
	ProtoMax uint8
	// Applied, when set, is called with the origin and the stamp (the
	// HLC's wall-clock part) of every record of another origin appended
	// from a peer, right after the append: the daemon's freshness
	// histograms. It must be quick and never block.
	Applied func(origin uint64, stamp time.Time)
	// Logger receives the node's logs; nil discards them.
	Logger *zap.Logger
}

// Peer is another node of the cluster as membership reports it.
type Peer struct {
	ID   uint64
	Name string
	Addr string // data port
	// Proto is the highest protocol version membership says the peer
	// speaks (gossip.Member.Proto); 0: not said, taken as this node's.
	// NATS, which has no connection per peer, carries only the records
	// the oldest peer reads.
	Proto uint8
}

// Node fans this node's records out to every peer, receives theirs,
// repairs gaps by pulling from peers, and tells the daemon when a peer
// holds a record (for sync replication).
//
// Each node dials every peer (one outbound link each) and accepts every
// peer's link. On its outbound link a node pushes its own records, in seq
// order, starting after the seq the peer says it holds, and sends pull
// requests; the peer answers with acks (its version vector: the whole
// vector when the link opens and every SyncInterval, the origins it just
// appended after each frame) and with the records it is asked for. A
// node that sees a peer ahead on any origin pulls the range from that
// peer; so a node that was down, cut off or joined late catches up from
// anyone, also when the origin is gone.
type Node struct {
	cfg      Config
	st       Store
	self     uint64
	log      *zap.Logger
	listener net.Listener

	mu    sync.Mutex
	links map[uint64]*link
	// gone is the last vector of each peer whose link was dropped (it left
	// or failed): what it lacks is still known while it is away.
	gone  map[uint64]map[uint64]uint64
	conns map[net.Conn]uint64 // accepted -> the peer's ID once its handshake is done

	// The redial backoff of a link: from minBackoff, doubled up to
	// maxBackoff, and back to minBackoff after a connection that worked.
	minBackoff, maxBackoff time.Duration

	keys atomic.Pointer[[][]byte] // the cluster keys in force (SetKeys)

	nats *natsfan.FanOut // nil: fan-out over the data port
	// treeLinks are the links to the relay tree's neighbours (Config.Tree).
	treeLinks atomic.Pointer[[]*link]
	// treeOn: the relay tree is in use now (Config.Tree, and the fleet
	// has at least Config.TreeFrom members).
	treeOn     atomic.Bool
	replica    atomic.Uint64 // the peer pushed to directly under NATS
	bytesSent  atomic.Uint64 // bytes of own records sent (pushes, NATS publishes)
	pushFrames atomic.Uint64 // records frames pushed (own and relayed records)

	rejected atomic.Uint64 // peers refused at the handshake
	protos   wire.Range    // the protocol versions it speaks (protocols at New, Config.ProtoMax)
	// fleetRecords is the newest record version every peer reads (the
	// lowest Peer.Proto of SetPeers): what NATS may carry.
	fleetRecords atomic.Uint32
	stalls       atomic.Uint64 // connections closed past PeerTimeout
	badFrames    atomic.Uint64
	pulls        atomic.Uint64 // pull requests sent
	boots        atomic.Uint64 // bootstraps from a peer's snapshot
	booting      atomic.Bool   // a link is taking a peer's snapshot

	openOut         atomic.Int64  // outbound connections open now
	wireSent        atomic.Uint64 // bytes of handshakes and frames written
	wireReceived    atomic.Uint64 // bytes of handshakes and frames read
	entriesSent     atomic.Uint64 // vector entries sent (acks, vectors, retired lists)
	entriesReceived atomic.Uint64 // vector entries received
	exchangeEntries atomic.Uint64 // of those sent and received, the exchanges' (Stats.ExchangeEntries)
	rounds          atomic.Uint64 // anti-entropy rounds run
	exchanges       atomic.Uint64 // anti-entropy exchanges started
	dials           atomic.Uint64 // outbound connections opened
	idleCloses      atomic.Uint64 // outbound connections closed as idle
	digests         *digest.Index // this node's side of the digest exchanges

	// The origins this node leaves out of the vectors it sends (see
	// "Retired origins" in the package doc). Locked after mu, never before.
	rmu         sync.Mutex
	absentSince map[uint64]time.Time // origin -> since when it is not a peer
	retired     map[uint64]bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Pulls are the repair path, pushes the fast one: an origin is pulled
	// by one link at a time, and only when none of its records has come in
	// for a SyncInterval (else the pull would fetch what is being pushed).
	pmu        sync.Mutex
	lastAppend map[uint64]time.Time // origin -> when a record of it last came in
	pullingAll map[uint64]bool      // origins being pulled on some link
}

// mayPull reserves origin o for a pull, if no link pulls it and its
// records are not flowing in anyway.
func (n *Node) mayPull(o uint64) bool {
	n.pmu.Lock()
	defer n.pmu.Unlock()
	if n.pullingAll[o] || time.Since(n.lastAppend[o]) < n.cfg.SyncInterval {
		return false
	}
	n.pullingAll[o] = true
	return true
}

// pullDone releases origin o after its pull ended (or its link went down).
func (n *Node) pullDone(o uint64) {
	n.pmu.Lock()
	delete(n.pullingAll, o)
	n.pmu.Unlock()
}

// New binds the data port; Start begins serving it.
func New(cfg Config) (*Node, error) {
	if cfg.Store == nil {
		return nil, errors.New("broadcast: Config.Store is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = 10 * time.Second
	}
	cfg.PeerTimeout = max(cfg.PeerTimeout, 3*cfg.SyncInterval)
	if cfg.Fanout <= 0 {
		cfg.Fanout = 3
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Second
	}
	cfg.IdleTimeout = max(cfg.IdleTimeout, cfg.SyncInterval)
	if cfg.RetireAfter <= 0 {
		cfg.RetireAfter = 24 * time.Hour
	}
	if cfg.MaxPull == 0 {
		cfg.MaxPull = 16384
	}
	if cfg.BootstrapRecords == 0 {
		cfg.BootstrapRecords = 100_000
	}
	if cfg.TreeDegree <= 0 {
		cfg.TreeDegree = DefaultTreeDegree
	}
	if cfg.TreeFrom < 0 {
		return nil, fmt.Errorf("broadcast: Config.TreeFrom %d is negative", cfg.TreeFrom)
	}
	if cfg.Tree && cfg.NATS != nil {
		return nil, errors.New("broadcast: Config.Tree is for the fan-out over the data port, not with NATS")
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	protos := protocols
	if cfg.ProtoMax != 0 {
		if cfg.ProtoMax < protos.Min || cfg.ProtoMax > protos.Max {
			return nil, fmt.Errorf("broadcast: ProtoMax %d outside the versions this build speaks, %s", cfg.ProtoMax, protos)
		}
		protos.Max = cfg.ProtoMax
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			return nil, fmt.Errorf("broadcast: listen on %s: %w", cfg.ListenAddr, err)
		}
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg:      cfg,
		st:       cfg.Store,
		self:     cfg.Store.Origin(),
		protos:   protos,
		log:      cfg.Logger,
		listener: ln,
		links:    make(map[uint64]*link),
		gone:     make(map[uint64]map[uint64]uint64),
		conns:    make(map[net.Conn]uint64),
		ctx:      ctx,
		cancel:   cancel,

		minBackoff: 50 * time.Millisecond,
		maxBackoff: 2 * time.Second,

		lastAppend: make(map[uint64]time.Time),
		pullingAll: make(map[uint64]bool),

		absentSince: make(map[uint64]time.Time),
		retired:     make(map[uint64]bool),
	}
	n.digests = digest.NewIndex(cfg.Store, feedOf(cfg.Store), n.stampOf)
	n.keys.Store(&cfg.Keys)
	n.fleetRecords.Store(uint32(wire.MaxRecordVersion(protos.Max)))
	if cfg.NATS != nil {
		if err := n.startNATS(cfg.NATS); err != nil {
			cancel()
			ln.Close()
			return nil, err
		}
	}
	return n, nil
}

// SetReplica names the replica peer. Its connection stays open. Under
// NATS it is the one peer this node still pushes to directly, so that a
// sync-replication wait is one round trip; over the data port every peer
// is pushed to anyway.
func (n *Node) SetReplica(peer uint64) {
	if n.replica.Swap(peer) == peer {
		return
	}
	n.mu.Lock()
	for _, l := range n.links {
		l.wake() // the new replica's writer starts pushing
	}
	n.mu.Unlock()
}

// SetKeys replaces the cluster keys for new connections (key rotation:
// add the new key everywhere, make it first everywhere, then drop the old
// one). Connections already open stay.
func (n *Node) SetKeys(keys [][]byte) { n.keys.Store(&keys) }

func (n *Node) currentKeys() [][]byte { return *n.keys.Load() }

// Protocols returns the lowest and highest protocol versions the node
// speaks (Protocols, lowered by Config.ProtoMax); membership carries them.
func (n *Node) Protocols() (lowest, highest uint8) { return n.protos.Min, n.protos.Max }

// Addr is the data port's bound address.
func (n *Node) Addr() string { return n.listener.Addr().String() }

// Start serves the data port until Close.
func (n *Node) Start() {
	n.wg.Add(2)
	go n.acceptLoop()
	go n.antiEntropyLoop()
}

// Close stops every link and connection and waits for their goroutines.
func (n *Node) Close() error {
	n.cancel()
	if n.nats != nil {
		n.nats.Close()
	}
	err := n.listener.Close()
	n.mu.Lock()
	for c := range n.conns {
		c.Close()
	}
	for _, l := range n.links {
		l.stop()
	}
	n.mu.Unlock()
	n.wg.Wait()
	return err
}

// SetPeers makes the node link to exactly these peers (itself excluded):
// new ones are dialed, gone ones are dropped.
func (n *Node) SetPeers(peers []Peer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ctx.Err() != nil {
		return
	}
	want := map[uint64]Peer{}
	fleet := n.protos.Max
	for _, p := range peers {
		if p.ID != n.self && p.ID != 0 && p.Addr != "" {
			want[p.ID] = p
			if p.Proto != 0 {
				fleet = min(fleet, p.Proto)
			}
		}
	}
	n.fleetRecords.Store(uint32(wire.MaxRecordVersion(fleet)))
	for id, l := range n.links {
		p, ok := want[id]
		if ok && p.Addr == l.peer.Addr {
			continue
		}
		l.stop()
		delete(n.links, id)
		if ok {
			continue // back on a new address: redialed below
		}
		n.gone[id] = l.holdsCopy()
		// The peer left or failed: its connections to this node go too,
		// else a stopped peer's would hold their goroutines until
		// Node.Close. (One that came back on a new address keeps its new
		// connection.)
		for c, peer := range n.conns {
			if peer == id {
				c.Close()
			}
		}
	}
	n.rmu.Lock()
	for id := range want {
		// A peer is live: it is in the vectors again, whatever it was.
		if n.retired[id] {
			n.digests.Retire(id, false)
		}
		delete(n.retired, id)
		delete(n.absentSince, id)
	}
	n.rmu.Unlock()
	for id, p := range want {
		delete(n.gone, id) // back: its link reports for it
		if _, ok := n.links[id]; !ok {
			l := newLink(n, p)
			n.links[id] = l
			n.wg.Add(1)
			go l.run()
		}
	}
	n.setTree(want)
}

// LastVector is the version vector a peer without a link (one that left
// or failed) last reported, and whether there is one.
func (n *Node) LastVector(peer uint64) (map[uint64]uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok := n.gone[peer]
	return maps.Clone(v), ok
}

// ForgetPeers drops the last vectors of the peers keep says no to (those
// membership no longer knows), so that they do not pile up.
func (n *Node) ForgetPeers(keep func(peer uint64) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id := range n.gone {
		if !keep(id) {
			delete(n.gone, id)
		}
	}
}

// WaitReplica returns nil once peer holds this node's record seq, the
// context's error when it ends first, or ErrNoPeer when there is no link
// to that peer.
func (n *Node) WaitReplica(ctx context.Context, peer uint64, seq uint64) error {
	n.mu.Lock()
	l := n.links[peer]
	n.mu.Unlock()
	if l == nil {
		return ErrNoPeer
	}
	return l.waitAcked(ctx, n.self, seq)
}

// ErrNoPeer means the node has no link to the peer asked for.
var ErrNoPeer = errors.New("broadcast: no such peer")

// PeerStatus describes one link.
type PeerStatus struct {
	Peer Peer
	// Connected says the peer is reachable: the link's last connection
	// got past the handshake and the peer's first ack, and no dial has
	// failed since. The connection may have been closed since for being
	// idle (Open says whether one is open now).
	Connected bool
	Open      bool
	// Holds is the peer's version vector as it last reported it: its
	// acks, and its vector at the last exchange with it (at most a few
	// SyncIntervals old in a small cluster, about peers/Fanout
	// SyncIntervals in a large one). Retired origins are left out.
	Holds map[uint64]uint64
	// RetiredHolds is what the peer holds of the origins retired from
	// the vectors, as of the last exchange with it (nil before one):
	// its retired list, or this node's when both had retired the same
	// origins at the same seqs.
	RetiredHolds map[uint64]uint64
	// Queue is how many of this node's own records the peer lacks.
	Queue uint64
	// Proto is the protocol version of the link's last connection (0:
	// none yet).
	Proto uint8
	// HeldBack is the first of this node's own records that the peer's
	// protocol cannot carry (a record with time fields to a peer below
	// ProtocolTimed): nothing from there on is pushed to it until it
	// speaks ProtocolTimed. 0: nothing is held back.
	HeldBack uint64
}

// Peers reports every link, sorted by peer name.
func (n *Node) Peers() []PeerStatus {
	n.mu.Lock()
	ls := make([]*link, 0, len(n.links))
	for _, l := range n.links {
		ls = append(ls, l)
	}
	n.mu.Unlock()
	own := n.st.LogLast(n.self)
	out := make([]PeerStatus, 0, len(ls))
	for _, l := range ls {
		holds := l.holdsCopy()
		l.mu.Lock()
		retired := maps.Clone(l.retiredHolds)
		l.mu.Unlock()
		var q uint64
		if h := holds[n.self]; h < own {
			q = own - h
		}
		out = append(out, PeerStatus{Peer: l.peer, Connected: l.reachable.Load(), Open: l.open.Load(),
			Holds: holds, RetiredHolds: retired, Queue: q, Proto: uint8(l.proto.Load()), HeldBack: l.heldBack.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer.Name < out[j].Peer.Name })
	return out
}

// stalled counts err if it is a deadline that expired, and says so.
func (n *Node) stalled(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	n.stalls.Add(1)
	return true
}

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	for {
		c, err := n.listener.Accept()
		if err != nil {
			if n.ctx.Err() != nil {
				return
			}
			n.log.Warn("accepting a data connection failed", zap.Error(err))
			select {
			case <-time.After(100 * time.Millisecond):
			case <-n.ctx.Done():
				return
			}
			continue
		}
		n.mu.Lock()
		if n.ctx.Err() != nil {
			n.mu.Unlock()
			c.Close()
			return
		}
		n.conns[c] = 0
		n.wg.Add(1)
		n.mu.Unlock()
		go n.serve(c)
	}
}

// serve runs the listener's side of a link: it appends the records a
// peer pushes, answers its pulls, and keeps it told of this node's vector.
func (n *Node) serve(c net.Conn) {
	defer n.wg.Done()
	defer func() {
		c.Close()
		n.mu.Lock()
		delete(n.conns, c)
		n.mu.Unlock()
	}()
	peer, keys, err := wire.AcceptHandshake(c, n.self, n.currentKeys(), n.protos, n.cfg.HandshakeTimeout)
	if err != nil {
		n.rejected.Add(1)
		n.log.Warn("refused a data connection", zap.String("remote", c.RemoteAddr().String()), zap.Error(err))
		return
	}
	n.mu.Lock()
	if _, ok := n.conns[c]; ok {
		n.conns[c] = peer
	}
	n.mu.Unlock()
	n.wireSent.Add(wire.HandshakeBytes)
	n.wireReceived.Add(wire.HandshakeBytes)
	in := newInbound(n, c, peer, keys)
	defer close(in.done)
	in.run()
}

// learned notes what a peer that dialed this node says it holds on this
// node's own link to it, which then pulls what this node lacks (the pull
// half of an exchange the peer started). Nothing when the peer is not a
// member here.
func (n *Node) learned(peer uint64, v map[uint64]uint64) {
	n.mu.Lock()
	l := n.links[peer]
	n.mu.Unlock()
	if l != nil {
		l.merge(v)
		l.afterAck()
	}
}

// treeLink is this node's link to peer, to note the records the peer
// sends on (link.heard), with the relay tree; nil without it.
func (n *Node) treeLink(peer uint64) *link {
	if !n.treeOn.Load() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[peer]
}

// appendAll appends the records of a frame and notes, per origin, the
// highest seq held afterwards. from, when set, is the link to the peer
// that sent them, which holds them (heard); with the relay tree, what
// moved on is relayed to the tree neighbours. Duplicates are fine; a gap is left for
// anti-entropy to fill. A record that fails its checks is an error.
// Records that answer a pull do not hold the next pull back (mayPull):
// they are not flowing in by themselves. A record of a version above
// maxVersion (what the connection's protocol carries) is refused, as
// the older build that speaks that protocol refuses it.
func (n *Node) appendAll(p []byte, touched map[uint64]uint64, pulled bool, maxVersion byte, from *link) error {
	// advanced is the origin whose records the frame carries now, once
	// one of them was appended: a frame from a relay tree neighbour
	// carries several origins' records, one run after another.
	var advanced uint64
	now := time.Now()
	moved := func(o uint64) {
		if !pulled {
			n.pmu.Lock()
			n.lastAppend[o] = now
			n.pmu.Unlock()
		}
		n.relay(o)
	}
	err := wire.SplitRecords(p, func(r record.Record) error {
		if r.Version() > maxVersion {
			return fmt.Errorf("%w: a record of version %d where the protocol carries at most %d", wire.ErrBadFrame, r.Version(), maxVersion)
		}
		o := r.Origin()
		if from != nil {
			from.heard(o, r.Seq())
		}
		if r.Seq() <= n.st.LastSeq(o) {
			touched[o] = n.st.LastSeq(o) // held already: no need to ask the store
			return nil
		}
		_, err := n.st.AppendRecord(r)
		switch {
		case err == nil:
			if n.cfg.Applied != nil && o != n.st.Origin() {
				n.cfg.Applied(o, record.HLCTime(r.HLC()))
			}
			if advanced != 0 && advanced != o {
				moved(advanced)
			}
			advanced = o
		case errors.Is(err, store.ErrOutOfOrder):
			n.digests.Gap(o, r.Seq(), n.cfg.SyncInterval) // records before it are missing: look for them now
		case errors.Is(err, store.ErrDuplicate):
		case errors.Is(err, store.ErrHeld):
			// Stamped ahead of this node's clock: the store holds it,
			// counts it and logs it (rate-limited), and appends it once
			// the clock catches up.
		case errors.Is(err, store.ErrClockAhead):
			// Refused for its stamp (counted and logged by the store). No
			// cut reaches a record stamped an hour ahead, so, as a record
			// past a gap, it makes its origin differ until it is held:
			// the next exchanges pull it again, and each refusal counts
			// towards flagging the origin's clock.
			n.digests.Gap(o, r.Seq(), n.cfg.SyncInterval)
		case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrInvalid):
			return err
		default:
			// The store refused it (full, disk full, closed): keep the
			// connection, the sender will offer it again.
			n.log.Warn("appending a peer's record failed", zap.Error(err))
		}
		touched[o] = n.st.LastSeq(o)
		return nil
	})
	if advanced != 0 {
		moved(advanced)
	}
	return err
}

// wantsSnapshot says whether a node holding mine should take the
// snapshot of a peer holding theirs rather than pull (BootstrapRecords).
func (n *Node) wantsSnapshot(mine, theirs map[uint64]uint64) bool {
	var lacks, holds uint64
	for o, s := range theirs {
		if m := mine[o]; s > m {
			lacks += s - m
		}
	}
	for _, s := range mine {
		holds += s
	}
	return lacks > n.cfg.BootstrapRecords && holds < lacks
}

// servePull answers a pull with the records asked for, in frames of
// about a megabyte, and returns the pullEnd for the caller to send. held
// says it stopped at a record above maxVersion, which the peer's
// protocol cannot carry.
func (n *Node) servePull(w *wire.Writer, req wire.PullReq, maxVersion byte) (end []byte, held bool, err error) {
	// The records are copied into the frame's buffer: a record is valid
	// only inside ReadOrigin's call. (A pinned, zero-copy batch is a later
	// step.)
	var buf []byte
	var recs [][]byte
	status := byte(wire.PullDone)
	next := req.From
	for next <= req.To {
		var stop uint64
		var err error
		buf, recs, stop, err = batch.Read(n.st, req.Origin, next, int(min(req.To-next+1, 1<<20)), batch.FrameBytes, maxVersion, buf[:0], recs[:0])
		if len(recs) > 0 {
			if werr := w.WriteRecords(recs); werr != nil {
				return nil, false, werr
			}
		}
		if errors.Is(err, store.ErrRecycled) {
			next, status = stop, wire.PullRecycled
			break
		} else if errors.Is(err, batch.ErrTooNew) {
			next, held = stop, true
			break
		} else if errors.Is(err, store.ErrLost) {
			next = stop // all this node holds of the range: a peer that has the lost one gives the rest
			break
		} else if err != nil {
			return nil, false, err
		}
		full := len(buf) >= batch.FrameBytes
		next = stop
		if !full {
			break // all of the range, or all this node holds of it
		}
	}
	return wire.EncodePullEnd(wire.PullEnd{Origin: req.Origin, Next: next, Status: status}), held, nil
}
