// Package fleet runs a fleet of cachecast nodes on one machine and
// measures what each node costs as the fleet grows (issue 16): CPU, bytes
// on the data port and to NATS, open data-port connections and version
// vector entries handled, per node and per second, idle and under load;
// how long the views take to become identical after a partition heals
// and after a tenth of the nodes restart; and how long a record takes to
// reach every node.
//
// Two kinds of fleet:
//
//   - in-process (Start): each node is a real store (its own directory,
//     on a tmpfs when the caller gives one, with small segments), a real
//     memberlist (package gossip, on 127.0.0.1) and a real broadcast node
//     (TCP on 127.0.0.1, direct or along the relay tree, or an
//     embedded NATS server), wired as the daemon
//     wires them (package daemon's cluster: the peers follow the alive
//     members, the replica is the successor on the ring of IDs). The
//     data port's connections are wrapped to count bytes and open
//     connections per node, and to cut the fleet in two (Partition): a
//     cut refuses new data-port connections across the sides and closes
//     the open ones; membership stays whole, so each side still sees the
//     other alive and keeps redialing it.
//   - processes (StartProcs): real cachecastd binaries, one process per
//     node, measured from /proc (CPU, resident memory, bytes through
//     read/write system calls, open TCP connections).
//
// Every figure is a per-node mean over the fleet. In-process, CPU is the
// whole process's (every node, memberlist, the embedded NATS server and
// the harness itself) divided by N, and memberlist's own traffic is not
// in the byte counts. The package is for benchmarks and tests only; cmd
// bench-fleet (make bench-fleet) runs the sweep and writes the plot.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/gossip"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// Options configure an in-process fleet.
type Options struct {
	// Nodes is the fleet's size.
	Nodes int
	// Dir holds one directory per node (put it on a tmpfs: /dev/shm).
	Dir string
	// NATS, when set, is the URL of the NATS server the fan-out goes
	// through; empty: the TCP fan-out.
	NATS string
	// Tree makes the TCP fan-out relay along the tree (broadcast's
	// Config.Tree, cachecastd --tcp-fanout=tree) instead of pushing to
	// every peer.
	Tree bool
	// SyncInterval is broadcast's anti-entropy interval (0: its default).
	SyncInterval time.Duration
	// Profile is the gossip profile (default ProfileFor(Nodes)).
	Profile string
	// SegmentSize is each store's segment size (default 1 MiB).
	SegmentSize int64
	// Logger receives the nodes' logs; nil discards them.
	Logger *zap.Logger
}

// Fleet is an in-process fleet of nodes.
type Fleet struct {
	opts  Options
	nodes []*Node

	mu     sync.Mutex
	byAddr map[string]*Node // data address -> node
	sides  map[*Node]int    // the side of each node while the fleet is cut

	rejoins atomic.Uint64 // WaitMembers' joins again
}

// Node is one node of an in-process fleet.
type Node struct {
	Name string
	Dir  string
	f    *Fleet

	mu     sync.Mutex
	st     *store.Store
	b      *broadcast.Node
	g      *gossip.Gossip
	gossip string // gossip address, kept across restarts
	data   string // data address, kept across restarts
	stop   chan struct{}
	done   chan struct{}

	tx, rx atomic.Uint64 // data-port bytes written and read
	open   atomic.Int64  // data-port connections open
	dialed sync.Map      // net.Conn -> *Node it was dialed to
	// vectorBase carries the vector entries of earlier lives over a
	// restart.
	vectorBase atomic.Uint64
	// exchangeBase likewise for the exchanges started, exchangeEntriesBase
	// for the entries of their frames.
	exchangeBase, exchangeEntriesBase atomic.Uint64
}

// RaiseFileLimit lifts the open-file limit to its hard maximum (as root,
// to nr_open): N nodes in full mesh hold about 2N² descriptors.
func RaiseFileLimit() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return
	}
	want := r.Max
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		var n uint64
		if _, err := fmt.Sscan(string(b), &n); err == nil && n > want {
			want = n
		}
	}
	r2 := syscall.Rlimit{Cur: want, Max: want}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r2) != nil {
		r.Cur = r.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}

// Start runs opts.Nodes nodes, each joining the first, and returns once
// every node sees every other alive and a record from each has reached
// every node (or ctx ends).
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	if opts.Nodes < 1 {
		return nil, errors.New("fleet: Nodes must be at least 1")
	}
	if err := checkFileLimit(opts); err != nil {
		return nil, err
	}
	if opts.Profile == "" {
		opts.Profile = ProfileFor(opts.Nodes)
	}
	if opts.SegmentSize == 0 {
		opts.SegmentSize = 1 << 20
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	f := &Fleet{opts: opts, byAddr: map[string]*Node{}}
	for i := 0; i < opts.Nodes; i++ {
		name := fmt.Sprintf("n%03d", i)
		f.nodes = append(f.nodes, &Node{Name: name, Dir: filepath.Join(opts.Dir, name), f: f})
	}
	// The first node is the seed; the rest start a few at a time (each
	// join is a push/pull of the whole member list with the seed). Not
	// a seed picked among the nodes up already: a joiner then learns only
	// that node's view, the rest by gossip and push/pull, whose interval
	// memberlist scales up with N (2 minutes at 50 nodes on the WAN
	// timers). On the loaded machine, one run each: 50 nodes that joined
	// so did not all see each other in 90 s (load average 17-27), 100
	// joining the first did in 23 s (load average 20).
	begin := time.Now()
	if err := f.nodes[0].start(ctx, nil); err != nil {
		f.Close()
		return nil, err
	}
	seed := []string{f.nodes[0].g.Addr()}
	var wg sync.WaitGroup
	errs := make([]error, opts.Nodes)
	sem := make(chan struct{}, 8)
	for i := 1; i < opts.Nodes; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f.nodes[i].start(ctx, seed)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.Close()
		return nil, err
	}
	joined := time.Since(begin)
	if err := f.WaitMembers(ctx, f.nodes); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w (every node had joined after %v)", err, joined.Round(time.Millisecond))
	}
	members := time.Since(begin)
	// One record from each node, everywhere: the data paths work.
	if err := f.PublishEach(); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.WaitConverged(ctx); err != nil {
		f.Close()
		return nil, fmt.Errorf("fleet: first records: %w (every node had joined after %v, saw every other alive after %v)",
			err, joined.Round(time.Millisecond), members.Round(time.Millisecond))
	}
	return f, nil
}

// checkFileLimit refuses a fleet of direct pushes whose sockets alone
// pass the process's open-file limit: every node then holds a connection
// to and from every other, 2N(N-1) descriptors in the process (19,800
// at 100 nodes; at 200, 79,600 against this machine's hard limit of
// 20,000, which a start hit as "too many open files" in a store). The
// tree and NATS hold about 20 a node whatever N.
func checkFileLimit(opts Options) error {
	if opts.NATS != "" || opts.Tree {
		return nil
	}
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return nil
	}
	need := 2 * uint64(opts.Nodes) * uint64(opts.Nodes-1)
	if need > r.Cur {
		return fmt.Errorf("fleet: the direct pushes of %d nodes hold about 2N(N-1) = %d sockets in one process, more than its open-file limit of %d (raise the hard limit, ulimit -Hn, as a user allowed to; the tree and NATS need about 20 a node)",
			opts.Nodes, need, r.Cur)
	}
	return nil
}

// ProfileFor is the gossip profile an in-process fleet of n nodes uses
// by default: memberlist's LAN timers below 50 nodes, its WAN timers
// (probes every 5 s, a 3 s probe timeout, slower gossip) from 50. The
// fleet's nodes share this machine's cores: from about 50 of them the
// scheduling delay of a starved process passes the LAN probe timeout
// (500 ms), healthy members are suspected and declared dead, and the
// gossip that refutes it starves the rest further (at load average 22,
// 100 nodes on LAN timers still had 8 members missing on n000 after a
// minute; on WAN timers they were all alive in 23 s). On machines of
// their own the members answer probes in microseconds, and the daemon's
// --gossip-profile stays lan.
func ProfileFor(n int) string {
	if n >= 50 {
		return gossip.ProfileWAN
	}
	return gossip.ProfileLAN
}

// Nodes returns the fleet's nodes.
func (f *Fleet) Nodes() []*Node { return f.nodes }

// Close stops every node.
func (f *Fleet) Close() error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// start opens the node's store, data port and gossip, joining seeds
// within ctx (gossip's JoinTimeout, joinTimeout, bounds the retries).
func (n *Node) start(ctx context.Context, seeds []string) error {
	f := n.f
	o := store.DefaultOptions(n.Dir)
	o.SegmentSize = f.opts.SegmentSize
	o.IndexChunkEntries = 4096
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	st, err := store.Open(o)
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	n.mu.Lock()
	dataAddr, gossipAddr := n.data, n.gossip
	n.mu.Unlock()
	if dataAddr == "" {
		dataAddr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", dataAddr)
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0") // the old port is taken: a new one
	}
	if err != nil {
		st.Close()
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	cfg := broadcast.Config{
		Store:        st,
		Listener:     countListener{ln, n},
		Dial:         n.dial,
		SyncInterval: f.opts.SyncInterval,
		Tree:         f.opts.Tree,
		Logger:       f.opts.Logger.Named(n.Name),
	}
	if f.opts.NATS != "" {
		cfg.NATS = &broadcast.NATSConfig{URL: f.opts.NATS}
	}
	b, err := broadcast.New(cfg)
	if err != nil {
		ln.Close()
		st.Close()
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	restarted := gossipAddr != ""
	if gossipAddr == "" {
		gossipAddr = "127.0.0.1:0"
	}
	protoMin, protoMax := broadcast.Protocols()
	gcfg := gossip.Config{
		NodeName: n.Name, NodeID: st.Origin(), BindAddr: gossipAddr, DataAddr: b.Addr(),
		Join: seeds, JoinTimeout: joinTimeout(ctx), ProtoMin: protoMin, ProtoMax: protoMax,
		Profile: f.opts.Profile, Logger: f.opts.Logger.Named(n.Name),
	}
	g, err := gossip.New(gcfg)
	if err != nil && restarted {
		gcfg.BindAddr = "127.0.0.1:0"
		g, err = gossip.New(gcfg)
	}
	if err != nil {
		b.Close()
		st.Close()
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	b.Start()
	n.mu.Lock()
	n.st, n.b, n.g = st, b, g
	n.gossip, n.data = g.Addr(), b.Addr()
	stop, done := make(chan struct{}), make(chan struct{})
	n.stop, n.done = stop, done
	data := n.data
	n.mu.Unlock()
	f.mu.Lock()
	f.byAddr[data] = n
	f.mu.Unlock()
	go n.follow(st, b, g, stop, done)
	if len(seeds) > 0 {
		if _, err := g.Join(ctx); err != nil {
			return fmt.Errorf("%s: join: %w", n.Name, err)
		}
	}
	refresh(st, b, g)
	return nil
}

// joinTimeout is gossip's JoinTimeout for a join within ctx: what is
// left of ctx (a minute without a deadline), so that the run's -timeout
// bounds a join, not a fixed minute.
func joinTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Second)
	}
	return time.Minute
}

// follow keeps the broadcast node's peers equal to the alive members, at
// every membership event and every second, as the daemon does, except
// that the events queued together make one refresh.
func (n *Node) follow(st *store.Store, b *broadcast.Node, g *gossip.Gossip, stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	events := g.Events()
	for {
		select {
		case <-stop:
			return
		case _, ok := <-events:
			if !ok {
				return
			}
			// The events of a burst (a fleet starting, a tenth of it
			// restarting) in one refresh: each costs O(N), and every
			// node sees N of them.
			if !drain(events) {
				return
			}
		case <-tick.C:
		}
		refresh(st, b, g)
	}
}

// drain takes the events already queued; false when the channel closed.
func drain(events <-chan gossip.Event) bool {
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return false
			}
		default:
			return true
		}
	}
}

// refresh is the daemon's cluster.refresh: peers, forgotten peers and the
// replica (the successor on the ring of alive IDs).
func refresh(st *store.Store, b *broadcast.Node, g *gossip.Gossip) {
	alive := g.Alive() // sorted by ID, this node included
	peers := make([]broadcast.Peer, 0, len(alive))
	for _, m := range alive {
		peers = append(peers, broadcast.Peer{ID: m.ID, Name: m.Name, Addr: m.DataAddr})
	}
	b.SetPeers(peers)
	known := map[uint64]bool{}
	for _, m := range g.Members() {
		known[m.ID] = true
	}
	b.ForgetPeers(func(id uint64) bool { return known[id] })
	self := st.Origin()
	for i, m := range alive {
		if m.ID == self && len(alive) > 1 {
			b.SetReplica(alive[(i+1)%len(alive)].ID)
		}
	}
}

// Stop closes the node (gossip leaves first); Restart opens it again.
func (n *Node) Stop() error {
	n.mu.Lock()
	st, b, g := n.st, n.b, n.g
	stop, done := n.stop, n.done
	n.st, n.b, n.g = nil, nil, nil
	n.mu.Unlock()
	if st == nil {
		return nil
	}
	n.vectorBase.Add(b.VectorEntries())
	bs := b.Stats()
	n.exchangeBase.Add(bs.Exchanges)
	n.exchangeEntriesBase.Add(bs.ExchangeEntries)
	close(stop)
	<-done
	g.Leave(time.Second)
	errs := []error{g.Shutdown(), b.Close(), st.Close()}
	return errors.Join(errs...)
}

// Restart starts a stopped node again on its directory, joining the
// fleet's live nodes within ctx.
func (n *Node) Restart(ctx context.Context) error {
	var seeds []string
	for _, m := range n.f.nodes {
		if m != n && m.Running() {
			m.mu.Lock()
			seeds = append(seeds, m.gossip)
			m.mu.Unlock()
			if len(seeds) == 3 {
				break
			}
		}
	}
	return n.start(ctx, seeds)
}

// Running says whether the node is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st != nil
}

// Store is the node's store (nil while stopped).
func (n *Node) Store() *store.Store {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st
}

// Broadcast is the node's broadcast node (nil while stopped).
func (n *Node) Broadcast() *broadcast.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b
}

// VectorEntries counts the vector entries the node sent and received
// over all its lives.
func (n *Node) VectorEntries() uint64 {
	v := n.vectorBase.Load()
	if b := n.Broadcast(); b != nil {
		v += b.VectorEntries()
	}
	return v
}

// Exchanges counts the anti-entropy exchanges the node started over all
// its lives.
func (n *Node) Exchanges() uint64 {
	v := n.exchangeBase.Load()
	if b := n.Broadcast(); b != nil {
		v += b.Stats().Exchanges
	}
	return v
}

// ExchangeEntries counts the vector entries the node's exchanges carried
// (broadcast.Stats.ExchangeEntries) over all its lives.
func (n *Node) ExchangeEntries() uint64 {
	v := n.exchangeEntriesBase.Load()
	if b := n.Broadcast(); b != nil {
		v += b.Stats().ExchangeEntries
	}
	return v
}

// Conns is the node's open data-port connections, both ways.
func (n *Node) Conns() int64 { return n.open.Load() }

// Bytes are the data-port bytes the node wrote and read so far.
func (n *Node) Bytes() (tx, rx uint64) { return n.tx.Load(), n.rx.Load() }

func (n *Node) dial(ctx context.Context, addr string) (net.Conn, error) {
	f := n.f
	f.mu.Lock()
	to := f.byAddr[addr]
	cut := f.sides != nil && to != nil && f.sides[n] != f.sides[to]
	f.mu.Unlock()
	if cut {
		return nil, fmt.Errorf("fleet: %s is on the other side of the partition", addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cc := newCountConn(c, n)
	cc.onClose = func() { n.dialed.Delete(cc) } // before Partition can find it and close it
	n.dialed.Store(cc, to)
	return cc, nil
}

// Partition cuts the fleet's data ports in two: the first part nodes
// (by index) on one side, the rest on the other.
func (f *Fleet) Partition(part int) {
	f.mu.Lock()
	f.sides = map[*Node]int{}
	for i, n := range f.nodes {
		if i >= part {
			f.sides[n] = 1
		}
	}
	sides := f.sides
	f.mu.Unlock()
	for _, n := range f.nodes {
		n.dialed.Range(func(k, v any) bool {
			if to, _ := v.(*Node); to != nil && sides[n] != sides[to] {
				k.(net.Conn).Close()
			}
			return true
		})
	}
}

// Heal ends the partition.
func (f *Fleet) Heal() {
	f.mu.Lock()
	f.sides = nil
	f.mu.Unlock()
}

// Running returns the nodes that are up.
func (f *Fleet) Running() []*Node {
	var out []*Node
	for _, n := range f.nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// RejoinAfter is how long WaitMembers lets gossip tell a node of the
// others before it joins the node's seeds again.
//
// memberlist spreads a join by gossip: every member that learns of it
// sends it on to RetransmitMult*ceil(log10(N+1)) random members (8 from
// 10 to 99 nodes, 12 from 100), so a member misses it with probability
// about e^-8 (3e-4) or e^-12 (6e-6). Each member learns of every later
// joiner that way, about N²/2 chances: at 50 nodes a start misses one
// in about 0.4 (measured: 4 in 11 starts, load 3-6; no UDP datagram was
// dropped). Only memberlist's push/pull mends a miss, and its interval
// grows with N: every 60 s at 33-64 nodes on the LAN timers, 120 s on
// the WAN ones (180 s from 65, 240 s from 129), longer than a run's
// wait. A join is a push/pull with the seed, which every node joined and
// so knows them all.
const RejoinAfter = 10 * time.Second

// WaitMembers waits until every node of nodes sees all of them alive. A
// node that still misses some RejoinAfter into the wait, and each
// RejoinAfter after, joins its seeds again (Rejoins counts it).
func (f *Fleet) WaitMembers(ctx context.Context, nodes []*Node) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	rejoinAt := time.Now().Add(RejoinAfter)
	for {
		missing, short := "", 0
		var behind []*gossip.Gossip
		for _, n := range nodes {
			n.mu.Lock()
			g := n.g
			n.mu.Unlock()
			if g == nil {
				continue
			}
			if a := len(g.Alive()); a < len(nodes) {
				if missing == "" {
					missing = fmt.Sprintf("%s sees %d of %d alive", n.Name, a, len(nodes))
				}
				short++
				behind = append(behind, g)
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(rejoinAt) {
			rejoinAt = time.Now().Add(RejoinAfter)
			for _, g := range behind {
				f.rejoins.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					jctx, cancel := context.WithTimeout(ctx, RejoinAfter)
					defer cancel()
					g.Join(jctx) // a failure shows as the member still missing
				}()
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet: membership: %d of %d nodes miss members (%s; %d joined their seeds again): %w",
				short, len(nodes), missing, f.rejoins.Load(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Rejoins counts the joins WaitMembers made to mend a missed member.
func (f *Fleet) Rejoins() uint64 { return f.rejoins.Load() }

// Topic is the topic the fleet's records go to.
const Topic = "fleet"

// PublishEach publishes one record on every running node.
func (f *Fleet) PublishEach() error {
	for _, n := range f.Running() {
		m := record.Message{Topic: Topic, Key: "hello-" + n.Name, Value: []byte("hello")}
		if _, err := n.Store().Publish(&m); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}

// Diverged names a running node whose vector differs from the first
// running node's, or whose view digest does, or says "" when all agree.
func (f *Fleet) Diverged() string {
	run := f.Running()
	if len(run) == 0 {
		return ""
	}
	ref := run[0].Store()
	if ref == nil {
		return run[0].Name + " stopped"
	}
	want := ref.Vector()
	for _, n := range run[1:] {
		st := n.Store()
		if st == nil {
			return n.Name + " stopped"
		}
		if got := st.Vector(); !maps.Equal(got, want) {
			return fmt.Sprintf("%s's vector differs from %s's (%d of %d origins)", n.Name, run[0].Name, sameEntries(got, want), len(want))
		}
	}
	// Equal vectors: the digests must agree too (the view is a function
	// of the records held).
	d0 := ref.Digest()
	for _, n := range run[1:] {
		if st := n.Store(); st != nil && st.Digest() != d0 {
			return n.Name + "'s view digest differs with an equal vector"
		}
	}
	return ""
}

func sameEntries(a, b map[uint64]uint64) int {
	k := 0
	for o, s := range b {
		if a[o] == s {
			k++
		}
	}
	return k
}

// WaitConverged waits until every running node holds the same vector
// and view, and returns how long that took.
func (f *Fleet) WaitConverged(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	for {
		why := f.Diverged()
		if why == "" {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("fleet: not converged: %s: %w", why, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// countConn counts a node's data-port bytes and open connections.
type countConn struct {
	net.Conn
	n       *Node
	once    sync.Once
	onClose func()
}

func newCountConn(c net.Conn, n *Node) *countConn {
	n.open.Add(1)
	return &countConn{Conn: c, n: n}
}

func (c *countConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.rx.Add(uint64(k))
	return k, err
}

func (c *countConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.tx.Add(uint64(k))
	return k, err
}

func (c *countConn) Close() error {
	c.once.Do(func() {
		c.n.open.Add(-1)
		if c.onClose != nil {
			c.onClose()
		}
	})
	return c.Conn.Close()
}

type countListener struct {
	net.Listener
	n *Node
}

func (l countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newCountConn(c, l.n), nil
}

// NATSServer runs an embedded NATS server on 127.0.0.1 and a free port.
func NATSServer() (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		MaxPending: 256 << 20})
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("fleet: NATS server not ready after 10s")
	}
	return ns, nil
}

// pick returns k distinct indexes of [0, n) spread evenly.
func pick(n, k int) []int {
	k = max(1, min(k, n))
	out := make([]int, 0, k)
	for i := 0; i < k; i++ {
		out = append(out, i*n/k)
	}
	return slices.Compact(out)
}
