package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// State is a member's state as this node sees it. (The constants carry a
// prefix because State and EventType would both want the name Left.)
type State int

// Member states.
const (
	// StateAlive: the member answers probes.
	StateAlive State = iota
	// StateSuspect: the member missed probes and may be declared dead.
	// memberlist v0.7 does not tell its delegates about suspicion, so this
	// package reports a suspected member as alive until it is declared
	// dead; the value exists so that every memberlist state has a name.
	StateSuspect
	// StateDead: the failure detector declared the member dead.
	StateDead
	// StateLeft: the member left gracefully (Leave).
	StateLeft
)

// String returns "alive", "suspect", "dead" or "left".
func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

func stateOf(s memberlist.NodeStateType) State {
	switch s {
	case memberlist.StateSuspect:
		return StateSuspect
	case memberlist.StateDead:
		return StateDead
	case memberlist.StateLeft:
		return StateLeft
	}
	return StateAlive
}

// Member is a node of the cluster.
type Member struct {
	// Name is the node's unique name.
	Name string
	// ID is the node's origin ID.
	ID uint64
	// Addr is the node's gossip address, ip:port.
	Addr string
	// DataAddr is the node's data-port address, host:port.
	DataAddr string
	// Proto and ProtoMin are the highest and lowest data-port protocol
	// versions the node speaks.
	Proto, ProtoMin uint8
	// State is the node's state as this node sees it.
	State State
}

// EventType says what happened to a member.
type EventType int

// Event types.
const (
	// EventJoined: a member appeared, or came back after leaving or failing.
	EventJoined EventType = iota
	// EventUpdated: a member's metadata changed.
	EventUpdated
	// EventLeft: a member left gracefully; its State is StateLeft.
	EventLeft
	// EventFailed: the failure detector declared a member dead; its State is
	// StateDead.
	EventFailed
)

// String returns "joined", "updated", "left" or "failed".
func (t EventType) String() string {
	switch t {
	case EventJoined:
		return "joined"
	case EventUpdated:
		return "updated"
	case EventLeft:
		return "left"
	case EventFailed:
		return "failed"
	}
	return "event(" + strconv.Itoa(int(t)) + ")"
}

// Event is a change of another member, as delivered by Events.
type Event struct {
	Type   EventType
	Member Member
}

// Gossip is this node's membership in the cluster. Its methods are safe
// for concurrent use.
type Gossip struct {
	cfg     Config
	log     *zap.Logger
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring // nil without encryption
	mlLog   *logWriter          // memberlist's log, stopped at Shutdown
	prof    profile
	// meta is EncodeMeta of this node's Meta, read by memberlist through
	// NodeMeta; Leave swaps in the same with Leaving set.
	meta     atomic.Pointer[[]byte]
	metaBase Meta   // this node's Meta without Leaving; immutable after New
	addr     string // local.Addr; immutable after New
	// leaveRound bounds Leave's wait for memberlist's leave; set in New.
	leaveRound time.Duration
	// reconnectBound bounds a reconnect: the longer of ReconnectInterval
	// and memberlist's TCP timeout; set in New.
	reconnectBound time.Duration

	// mu guards the member table, the local state and the events channel.
	// Never call memberlist while holding it: memberlist calls the event
	// delegate with its own node lock held, and the delegate takes mu.
	mu      sync.Mutex
	local   Member
	members map[string]*entry // other nodes, as reported by memberlist's events
	events  chan Event
	closed  bool // events is closed
	dropped atomic.Uint64
	// failed are the members that failed or left (and those of
	// Config.Remembered), which the reconnect loop tries to join again
	// (reconnect.go).
	failed map[string]failure

	// seeds is Config.Join as of the last Join call (nil before it): the
	// reconnect loop's seeds when no other member is alive.
	seeds                         atomic.Pointer[[]string]
	reconnectTries, reconnectsWon atomic.Uint64

	keyMu sync.Mutex // serialises SetKeys

	asks asker // Ask and its answers (ask.go)

	// life guards shut and joins.Add; Leave holds it while it runs, so
	// that Shutdown never interleaves with memberlist's Leave (which
	// panics after Shutdown).
	life       sync.Mutex
	shut       bool
	left       bool
	shutdownCh chan struct{}
	leftCh     chan struct{}  // closed by Leave: stops the reconnect loop
	joins      sync.WaitGroup // Join attempts in flight
	loop       sync.WaitGroup // the reconnect loop
}

type entry struct {
	m       Member
	since   time.Time // of the last state change
	leaving bool      // its metadata says it is leaving (Leave has begun)
}

// New checks cfg, binds the gossip port and starts memberlist. It does not
// contact anyone: call Join. The caller must call Shutdown (after Leave).
func New(cfg Config) (*Gossip, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := newGossip(cfg)
	mc, err := g.memberlistConfig()
	if err != nil {
		return nil, err
	}
	// Bind the transport here rather than in memberlist.Create, so that the
	// advertised address (and so the data address) is known before the
	// metadata is first sent.
	nt, err := g.bind(mc)
	if err != nil {
		return nil, err
	}
	if err := g.setLocal(mc.AdvertiseAddr, mc.AdvertisePort); err != nil {
		_ = nt.Shutdown()
		return nil, err
	}
	if g.ml, err = memberlist.Create(mc); err != nil {
		_ = nt.Shutdown() // Create shuts it down only on some paths; twice is fine
		return nil, fmt.Errorf("gossip: start memberlist: %w", err)
	}
	g.log.Info("gossip started",
		zap.String("node-name", cfg.NodeName),
		zap.String("node-id", fmt.Sprintf("%016x", cfg.NodeID)),
		zap.String("bind-addr", net.JoinHostPort(mc.BindAddr, strconv.Itoa(mc.BindPort))),
		zap.String("advertise-addr", g.local.Addr),
		zap.String("data-addr", g.local.DataAddr),
		zap.String("profile", cfg.Profile),
		zap.Bool("encrypted", g.keyring != nil),
		zap.Strings("primary-key", keyIDs(cfg.Keys[:min(1, len(cfg.Keys))])))
	g.loop.Add(1)
	go g.reconnectLoop()
	return g, nil
}

// newGossip is a Gossip of cfg (with its defaults) before anything is
// bound: its maps and channels, and the remembered members as failed.
func newGossip(cfg Config) *Gossip {
	g := &Gossip{
		cfg:        cfg,
		log:        cfg.Logger,
		prof:       profiles[cfg.Profile],
		members:    make(map[string]*entry),
		failed:     make(map[string]failure),
		events:     make(chan Event, cfg.EventBuffer),
		shutdownCh: make(chan struct{}),
		leftCh:     make(chan struct{}),
	}
	for _, r := range cfg.Remembered {
		if r.Name != cfg.NodeName && r.Name != "" && r.Addr != "" {
			g.failed[r.Name] = failure{addr: r.Addr, id: r.ID, since: r.Since}
		}
	}
	return g
}

// memberlistConfig is memberlist's configuration for g: the profile's
// timers, the logger, the delegates and, with keys, the keyring. It
// also sets the bounds g derives from the timers.
func (g *Gossip) memberlistConfig() (*memberlist.Config, error) {
	cfg := g.cfg
	mc := g.prof.ml()
	// A leave's gossip is done in a few gossip intervals (memberlist sends
	// it RetransmitMult*log10(n+1) times, to GossipNodes nodes a round).
	g.leaveRound = max(50*mc.GossipInterval, 2*time.Second)
	g.reconnectBound = max(cfg.ReconnectInterval, mc.TCPTimeout)
	mc.Name = cfg.NodeName
	g.mlLog = &logWriter{log: cfg.Logger.Named("memberlist")}
	mc.Logger = newStdLogger(g.mlLog)
	mc.DelegateProtocolVersion = ProtocolVersion
	mc.DelegateProtocolMin = ProtocolVersion
	mc.DelegateProtocolMax = ProtocolVersion
	d := &delegate{g: g}
	mc.Delegate, mc.Events, mc.Alive, mc.Conflict, mc.Merge = d, d, d, d, d
	if len(cfg.Keys) > 0 {
		keys := make([][]byte, len(cfg.Keys))
		for i, k := range cfg.Keys {
			keys[i] = bytes.Clone(k)
		}
		var err error
		if g.keyring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			return nil, fmt.Errorf("%w: Keys: %v", ErrInvalidConfig, err)
		}
		mc.Keyring = g.keyring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	return mc, nil
}

// bind binds the transport at cfg.BindAddr and puts it in mc, with the
// bound address and the address advertised to the other nodes.
func (g *Gossip) bind(mc *memberlist.Config) (*memberlist.NetTransport, error) {
	cfg := g.cfg
	bindHost, bindPort, _ := splitIPPort("BindAddr", cfg.BindAddr, false)
	if bindHost == "" {
		bindHost = "0.0.0.0"
	}
	nt, err := bindTransport(bindHost, bindPort, mc.Logger)
	if err != nil {
		return nil, fmt.Errorf("gossip: bind %s: %w", cfg.BindAddr, err)
	}
	port := nt.GetAutoBindPort()
	advHost, advPort := "", port
	if cfg.AdvertiseAddr != "" {
		advHost, advPort, _ = splitIPPort("AdvertiseAddr", cfg.AdvertiseAddr, true)
		if advPort == 0 {
			advPort = port
		}
	}
	advIP, advPort, err := nt.FinalAdvertiseAddr(advHost, advPort)
	if err != nil {
		_ = nt.Shutdown()
		return nil, fmt.Errorf("gossip: advertise address: %w", err)
	}
	mc.Transport = nt
	if cfg.Unreachable != nil {
		mc.Transport = &cutTransport{NetTransport: nt, unreachable: cfg.Unreachable}
	}
	mc.BindAddr, mc.BindPort = bindHost, port
	mc.AdvertiseAddr, mc.AdvertisePort = advIP.String(), advPort
	return nt, nil
}

// setLocal sets the local member, advertised at advIP:advPort, and the
// metadata it gossips.
func (g *Gossip) setLocal(advIP string, advPort int) error {
	cfg := g.cfg
	dataAddr, err := resolveDataAddr(cfg.DataAddr, net.ParseIP(advIP))
	if err != nil {
		return err
	}
	g.local = Member{
		Name:     cfg.NodeName,
		ID:       cfg.NodeID,
		Addr:     net.JoinHostPort(advIP, strconv.Itoa(advPort)),
		DataAddr: dataAddr,
		Proto:    cfg.ProtoMax,
		ProtoMin: cfg.ProtoMin,
		State:    StateAlive,
	}
	g.addr = g.local.Addr
	g.metaBase = Meta{ID: cfg.NodeID, DataAddr: dataAddr, Proto: cfg.ProtoMax, ProtoMin: cfg.ProtoMin}
	// The leaving form is one byte longer: check that one against the limit.
	if _, err := EncodeMeta(Meta{ID: cfg.NodeID, DataAddr: dataAddr, Proto: cfg.ProtoMax, ProtoMin: cfg.ProtoMin, Leaving: true}); err != nil {
		return fmt.Errorf("%w: DataAddr: %w", ErrInvalidConfig, err)
	}
	meta, _ := EncodeMeta(g.metaBase)
	g.meta.Store(&meta)
	return nil
}

// bindTransport binds memberlist's UDP and TCP listeners. With port 0 the
// TCP port the kernel picks may be taken for UDP; retry as memberlist does.
func bindTransport(host string, port int, logger *log.Logger) (*memberlist.NetTransport, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{host},
			BindPort:  port,
			Logger:    logger,
		})
		if err == nil {
			return nt, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

// resolveDataAddr replaces an empty or unspecified host in the data address
// with the advertised gossip IP.
func resolveDataAddr(addr string, adv net.IP) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%w: DataAddr %q: %v", ErrInvalidConfig, addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = adv.String()
	}
	return net.JoinHostPort(host, port), nil
}

// Join contacts the seeds in Config.Join, in rounds: a round tries every
// seed once; rounds repeat with a growing, jittered pause until a round
// reaches at least one seed, ctx ends, JoinTimeout passes, or Shutdown is
// called. It returns the number of seeds reached in the successful round.
// With no seeds it returns 0, nil at once. On failure the error wraps
// ErrJoin (and ctx's error if ctx ended first, or ErrShutdown) and gives
// the last error of each seed.
//
// A seed that is this node itself counts as reached, so that every node
// can be given the same seed list: the first one up forms a cluster of
// one, and the others find it. A node that has left (Leave) cannot join
// again (a memberlist rule): Shutdown it and make a new one.
//
// Join may be called again (to retry in the background after a failed
// first join, say) and concurrently with any method. One seed contact runs on after Join has
// returned early for ctx, for at most memberlist's TCP timeout; Shutdown
// waits for it. A seed that answers after that early return still joins
// the node.
func (g *Gossip) Join(ctx context.Context) (int, error) {
	if len(g.cfg.Join) == 0 {
		return 0, nil
	}
	seeds := slices.Clone(g.cfg.Join)
	g.seeds.Store(&seeds)
	start := time.Now()
	jctx, cancel := context.WithTimeout(ctx, g.cfg.JoinTimeout)
	defer cancel()
	backoff := g.prof.backoffMin
	lastErr := map[string]string{}
	rounds := 0
	for {
		rounds++
		n, errs, err := g.joinRound(jctx, seeds)
		for seed, e := range errs {
			lastErr[seed] = e
		}
		if n > 0 {
			g.log.Info("joined the cluster", zap.Int("seeds-reached", n),
				zap.Int("rounds", rounds), zap.Duration("took", time.Since(start)))
			return n, nil
		}
		if err == nil {
			g.log.Debug("join round reached no seed", zap.Int("round", rounds), zap.Duration("next-in", backoff))
			pause := backoff/2 + rand.N(backoff/2+1) // jitter, so restarted nodes spread out
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-jctx.Done():
				err = jctx.Err()
			case <-g.shutdownCh:
				err = ErrShutdown
			}
			t.Stop()
			backoff = min(2*backoff, g.prof.backoffMax)
		}
		if err == nil {
			continue
		}
		msg := seedErrors(g.cfg.Join, lastErr)
		switch {
		case errors.Is(err, errLeft):
			return 0, fmt.Errorf("%w: %w", ErrJoin, err)
		case errors.Is(err, ErrShutdown):
			return 0, fmt.Errorf("%w: %w after %d rounds: %s", ErrJoin, ErrShutdown, rounds, msg)
		case ctx.Err() != nil:
			return 0, fmt.Errorf("%w: %w after %s, %d rounds: %s", ErrJoin, ctx.Err(),
				time.Since(start).Round(time.Millisecond), rounds, msg)
		default:
			return 0, fmt.Errorf("%w: no seed answered within the join timeout %s (%d rounds): %s",
				ErrJoin, g.cfg.JoinTimeout, rounds, msg)
		}
	}
}

var errLeft = errors.New("this node has left the cluster; make a new one to join again")

// joinRound tries each of seeds once, on a goroutine so that ctx and
// Shutdown are honoured while memberlist dials. It returns the number of seeds
// reached and each failed seed's error, or err if ctx ended or Shutdown
// came first.
func (g *Gossip) joinRound(ctx context.Context, seeds []string) (int, map[string]string, error) {
	g.life.Lock()
	if g.shut {
		g.life.Unlock()
		return 0, nil, ErrShutdown
	}
	if g.left {
		g.life.Unlock()
		return 0, nil, errLeft
	}
	g.joins.Add(1)
	g.life.Unlock()

	type result struct {
		n    int
		errs map[string]string
	}
	done := make(chan result, 1)
	go func() {
		defer g.joins.Done()
		r := result{errs: map[string]string{}}
		for _, seed := range seeds {
			if ctx.Err() != nil {
				break
			}
			select {
			case <-g.shutdownCh:
				done <- r
				return
			default:
			}
			n, err := g.ml.Join([]string{seed})
			r.n += n
			if n == 0 && err != nil {
				r.errs[seed] = flatten(err)
			}
		}
		done <- r
	}()
	select {
	case r := <-done:
		return r.n, r.errs, nil
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case <-g.shutdownCh:
		return 0, nil, ErrShutdown
	}
}

// flatten turns memberlist's multi-line multierror into one line.
func flatten(err error) string {
	if w, ok := err.(interface{ WrappedErrors() []error }); ok {
		var parts []string
		for _, e := range w.WrappedErrors() {
			parts = append(parts, e.Error())
		}
		if len(parts) > 0 {
			return strings.Join(parts, "; ")
		}
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

func seedErrors(seeds []string, errs map[string]string) string {
	parts := make([]string, 0, len(seeds))
	for _, s := range seeds {
		e, ok := errs[s]
		if !ok {
			e = "not tried"
		}
		parts = append(parts, "seed "+s+": "+e)
	}
	return strings.Join(parts, "; ")
}

// Members returns every member this node knows, itself included, sorted by
// name: alive ones, and those that left or failed less than ForgetAfter
// ago. Safe for concurrent use.
func (g *Gossip) Members() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgetLocked(time.Now())
	out := make([]Member, 0, len(g.members)+1)
	out = append(out, g.local)
	for _, e := range g.members {
		out = append(out, e.m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Alive returns the alive members, itself included unless it has left,
// sorted by ID (the ring of live node IDs). Safe for concurrent use.
func (g *Gossip) Alive() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Member, 0, len(g.members)+1)
	if g.local.State == StateAlive {
		out = append(out, g.local)
	}
	for _, e := range g.members {
		if e.m.State == StateAlive {
			out = append(out, e.m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int {
		if a.ID != b.ID {
			if a.ID < b.ID {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// forgetLocked drops members that left or failed more than ForgetAfter
// before now.
func (g *Gossip) forgetLocked(now time.Time) {
	for name, e := range g.members {
		if (e.m.State == StateDead || e.m.State == StateLeft) && now.Sub(e.since) > g.cfg.ForgetAfter {
			delete(g.members, name)
		}
	}
}

// Local returns this node as a Member: StateAlive, StateLeft after Leave,
// StateDead after Shutdown without Leave. Safe for concurrent use.
func (g *Gossip) Local() Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.local
}

// Addr returns the address other nodes reach this node's gossip at: the
// advertised IP with the port actually bound (useful after BindAddr port
// 0). This is what another node puts in its Join list. Safe for
// concurrent use.
func (g *Gossip) Addr() string {
	return g.addr
}

// Events returns the channel of changes to other members (this node's own
// changes are not reported). The channel is buffered (EventBuffer) and is
// closed by Shutdown. memberlist must never wait on a slow reader, so when
// the buffer is full an event is dropped, counted (DroppedEvents) and
// logged at warn; a reader that sees the count grow should resynchronise
// from Members. Every call returns the same channel; there is one stream,
// not one per caller.
func (g *Gossip) Events() <-chan Event {
	return g.events
}

// DroppedEvents returns how many events were dropped because the Events
// buffer was full. Safe for concurrent use.
func (g *Gossip) DroppedEvents() uint64 {
	return g.dropped.Load()
}

// Leave tells the cluster this node is leaving, in two steps: first its
// metadata with Leaving set, gossiped until memberlist has sent it its
// full number of times, then memberlist's leave, waited for until it has
// gone out to at least one member. timeout (≤ 0 means 5s) bounds the two
// together, half each at most for the first. The others then report this
// node as StateLeft (EventLeft) rather than failed. The node keeps
// answering gossip until Shutdown; call Shutdown next. Calling Leave again
// is a no-op; after Shutdown it returns ErrShutdown. Safe for concurrent
// use; Shutdown waits for a Leave in progress.
//
// Only a live peer (alive, not leaving itself) can confirm a leave: when
// none is left, as when a whole cluster is stopped at once, Leave sends
// its messages without waiting for them, and it stops waiting as soon as
// the last live peer is gone (checked between rounds of the first step,
// and after the second, whose wait is bounded by many times what the
// gossip of a leave takes).
func (g *Gossip) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	g.life.Lock()
	defer g.life.Unlock()
	if g.shut {
		return ErrShutdown
	}
	if g.left {
		return nil // memberlist must not be asked again: it may have forgotten this node
	}
	g.mu.Lock()
	g.local.State = StateLeft
	g.mu.Unlock()
	g.left = true
	close(g.leftCh)
	start := time.Now()
	leaving := g.metaBase
	leaving.Leaving = true
	meta, _ := EncodeMeta(leaving) // checked in New
	g.meta.Store(&meta)
	if err := g.announceLeaving(start.Add(timeout / 2)); err != nil {
		// The leave itself still goes out; a member that missed the flag
		// reports a failure instead.
		g.log.Warn("leaving flag not confirmed", zap.Duration("timeout", timeout/2), zap.Error(err))
	}
	if !g.anyLivePeer() {
		_ = g.ml.Leave(time.Millisecond) // sent all the same, for anyone still listening
		g.log.Info("left the cluster; no live peer to confirm it", zap.Duration("took", time.Since(start)))
		return nil
	}
	// memberlist's wait cannot be cut short when the last live peers stop
	// meanwhile (a cluster stopped at once: they had not yet told us they
	// were leaving), and then never ends: its leave has nobody left to go
	// to. So it waits at most leaveRound, many times what the gossip of a
	// leave takes, and a leave nobody alive is left to confirm is done.
	if err := g.ml.Leave(min(max(timeout-time.Since(start), time.Millisecond), g.leaveRound)); err != nil {
		if !g.anyLivePeer() {
			g.log.Info("left the cluster; its last live peers stopped meanwhile", zap.Duration("took", time.Since(start)))
			return nil
		}
		g.log.Warn("leave not confirmed", zap.Duration("timeout", timeout), zap.Error(err))
		return fmt.Errorf("gossip: leave: %w", err)
	}
	g.log.Info("left the cluster", zap.Duration("took", time.Since(start)))
	return nil
}

// announceLeaving gossips the Leaving flag until memberlist has sent it
// its full number of times, or no live peer remains, or deadline. A wait
// in memberlist cannot be cut short, so it waits in rounds, from 250ms
// doubling (a round too short for the gossip to finish is tried again
// longer), and looks for a live peer between them.
func (g *Gossip) announceLeaving(deadline time.Time) error {
	round := 250 * time.Millisecond
	for {
		if !g.anyLivePeer() {
			return g.ml.UpdateNode(time.Millisecond) // queued all the same; nobody to wait for
		}
		wait := min(round, time.Until(deadline))
		err := g.ml.UpdateNode(max(wait, time.Millisecond))
		if err == nil || wait < round {
			return err
		}
		round *= 2
	}
}

// anyLivePeer says whether another member is alive and not leaving: one
// that can take and pass on this node's leave.
func (g *Gossip) anyLivePeer() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.members {
		if e.m.State == StateAlive && !e.leaving {
			return true
		}
	}
	return false
}

// Shutdown stops gossip: listeners closed, timers stopped, Join attempts
// ended, the Events channel closed. Without a Leave first the others see
// this node fail (after their suspicion timeout) rather than leave; call
// Leave first on a graceful stop. Shutdown is idempotent (later calls
// return nil) and safe for concurrent use; it waits for a Leave in
// progress and for a seed contact in progress (at most memberlist's TCP
// timeout).
func (g *Gossip) Shutdown() error {
	g.life.Lock()
	if g.shut {
		g.life.Unlock()
		return nil
	}
	g.shut = true
	close(g.shutdownCh)
	left := g.left
	g.life.Unlock()

	g.loop.Wait() // before the joins: a reconnect may be starting one
	err := g.ml.Shutdown()
	g.joins.Wait()
	g.mlLog.stopped.Store(true)

	g.mu.Lock()
	if !left {
		g.local.State = StateDead
	}
	g.closed = true
	close(g.events)
	g.mu.Unlock()
	g.log.Info("gossip stopped")
	if err != nil {
		return fmt.Errorf("gossip: shutdown: %w", err)
	}
	return nil
}

// SetKeys replaces the cluster keys of the running node, keys[0] becoming
// the primary: it is the hook for a reload (SIGHUP) of the key file. Keys
// not in the list are removed. Encryption cannot be turned on or off on a
// running node: with no keys at New, or an empty keys, it returns an error
// wrapping ErrBadKey. The keys are checked before anything changes. See
// the package doc for the order in which to change keys across a cluster.
// Safe for concurrent use.
func (g *Gossip) SetKeys(keys [][]byte) error {
	if g.keyring == nil {
		if len(keys) == 0 {
			return nil
		}
		return fmt.Errorf("%w: gossip was started without encryption; restart with keys to enable it", ErrBadKey)
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no key: encryption cannot be turned off on a running node", ErrBadKey)
	}
	if err := checkKeys(keys); err != nil {
		return err
	}
	g.keyMu.Lock()
	defer g.keyMu.Unlock()
	if err := applyKeys(g.keyring, keys); err != nil {
		return err
	}
	g.log.Info("cluster keys changed", zap.String("primary-key", KeyID(keys[0])),
		zap.Strings("keys", keyIDs(keys)))
	return nil
}

// Keys returns the fingerprints (KeyID) of the installed keys, the primary
// first; nil without encryption. Safe for concurrent use.
func (g *Gossip) Keys() []string {
	if g.keyring == nil {
		return nil
	}
	g.keyMu.Lock()
	defer g.keyMu.Unlock()
	return keyIDs(g.keyring.GetKeys())
}

func keyIDs(keys [][]byte) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = KeyID(k)
	}
	return ids
}

// emitLocked queues ev without ever blocking. g.mu must be held.
func (g *Gossip) emitLocked(ev Event) {
	if g.closed {
		return
	}
	select {
	case g.events <- ev:
	default:
		n := g.dropped.Add(1)
		g.log.Warn("event buffer full, event dropped; readers should resync from Members",
			zap.Stringer("event", ev.Type), zap.String("member", ev.Member.Name),
			zap.Uint64("dropped-total", n), zap.Int("buffer", cap(g.events)))
	}
}

// delegate implements memberlist's Delegate, EventDelegate, AliveDelegate
// and ConflictDelegate. memberlist calls the event, alive and conflict
// methods with its node lock held: they must not block nor call
// memberlist.
type delegate struct {
	g *Gossip
}

// NodeMeta returns the encoded metadata (checked against the limit in New).
func (d *delegate) NodeMeta(limit int) []byte {
	meta := *d.g.meta.Load()
	if len(meta) > limit {
		return nil // cannot happen: New checks against MetaMaxSize
	}
	return meta
}

// NotifyMsg takes the questions and answers of Ask (ask.go).
func (d *delegate) NotifyMsg(b []byte) { d.g.receiveAsk(b) }

// GetBroadcasts is unused: gossip carries no messages.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState is unused: anti-entropy runs over the data port (package
// broadcast), not memberlist's push/pull, whose LAN interval is 30s.
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState is unused, as LocalState is.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyAlive refuses a node whose metadata does not decode: not a
// cachecast node, or one of an incompatible metadata format.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if n.Name == d.g.cfg.NodeName {
		return nil
	}
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		return err
	}
	return d.checkProto(n.Name, meta)
}

// checkProto refuses a member whose protocol range has no version in
// common with this node's: neither side could read the other's data port.
func (d *delegate) checkProto(name string, m Meta) error {
	c := &d.g.cfg // not a copy: the rest of it is not this goroutine's to read
	if overlaps(m.ProtoMin, m.Proto, c.ProtoMin, c.ProtoMax) {
		return nil
	}
	return fmt.Errorf("%w: member %s speaks protocol versions [%d,%d], this node [%d,%d]; refused (upgrade the fleet one version range at a time)",
		ErrNoCommonProtocol, name, m.ProtoMin, m.Proto, c.ProtoMin, c.ProtoMax)
}

// NotifyMerge refuses a join (either way) with a cluster that holds a
// live member this node cannot talk to, so that Join fails saying why
// instead of succeeding into a cluster of one.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if n.Name == d.g.cfg.NodeName || n.State != memberlist.StateAlive {
			continue
		}
		meta, err := DecodeMeta(n.Meta)
		if err != nil {
			return err
		}
		if err := d.checkProto(n.Name, meta); err != nil {
			d.g.log.Warn("refusing to merge with a member of no common protocol version",
				zap.String("member", n.Name), zap.Error(err))
			return err
		}
	}
	return nil
}

// NotifyConflict logs two nodes claiming one name.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.g.mu.Lock()
	defer d.g.mu.Unlock()
	if d.g.closed {
		return
	}
	d.g.log.Error("two nodes claim the same name; the second is ignored",
		zap.String("node-name", existing.Name),
		zap.String("existing-addr", existing.Address()), zap.String("other-addr", other.Address()))
}

// member returns n as a Member, and whether its metadata says it is
// leaving; ok is false if the metadata does not decode.
func (d *delegate) member(n *memberlist.Node) (m Member, leaving, ok bool) {
	m = Member{Name: n.Name, Addr: n.Address(), State: stateOf(n.State)}
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		// NotifyAlive keeps such nodes out; a leave notice may still name one.
		d.g.log.Warn("member with malformed metadata", zap.String("member", n.Name), zap.Error(err))
		return m, false, false
	}
	m.ID, m.DataAddr, m.Proto, m.ProtoMin = meta.ID, meta.DataAddr, meta.Proto, meta.ProtoMin
	return m, meta.Leaving, true
}

// alivePeer is n as an alive member, and whether it is leaving; ok is
// false for this node itself and for a node whose metadata does not
// decode.
func (d *delegate) alivePeer(n *memberlist.Node) (m Member, leaving, ok bool) {
	if n.Name == d.g.cfg.NodeName {
		return m, false, false
	}
	m, leaving, ok = d.member(n)
	m.State = StateAlive
	return m, leaving, ok
}

// NotifyJoin records a member that appeared and emits EventJoined.
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	g := d.g
	m, _, ok := d.alivePeer(n)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return // a timer of memberlist's firing after Shutdown
	}
	if m.ID == g.local.ID {
		g.log.Error("a member has this node's ID: two nodes share an origin (a copied data directory?)",
			zap.String("member", m.Name), zap.String("node-id", fmt.Sprintf("%016x", m.ID)))
	}
	for _, e := range g.members {
		if e.m.ID == m.ID && e.m.Name != m.Name && e.m.State == StateAlive {
			g.log.Error("two members share an ID", zap.String("member", m.Name),
				zap.String("other", e.m.Name), zap.String("node-id", fmt.Sprintf("%016x", m.ID)))
		}
	}
	g.members[m.Name] = &entry{m: m, since: time.Now()}
	g.log.Info("member joined", zap.String("member", m.Name), zap.String("addr", m.Addr),
		zap.String("data-addr", m.DataAddr), zap.String("node-id", fmt.Sprintf("%016x", m.ID)))
	g.rejoinedLocked(m)
	g.emitLocked(Event{Type: EventJoined, Member: m})
}

// NotifyUpdate records a member's new metadata and emits EventUpdated.
// The leaving flag alone is no event: it is read again at NotifyLeave.
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	g := d.g
	m, leaving, ok := d.alivePeer(n)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	if e, known := g.members[m.Name]; known && e.m == m {
		if leaving && !e.leaving {
			g.log.Info("member leaving", zap.String("member", m.Name), zap.String("addr", m.Addr))
		}
		e.leaving = leaving
		return
	}
	g.members[m.Name] = &entry{m: m, since: time.Now(), leaving: leaving}
	g.log.Info("member updated", zap.String("member", m.Name), zap.String("addr", m.Addr),
		zap.String("data-addr", m.DataAddr))
	g.emitLocked(Event{Type: EventUpdated, Member: m})
}

// NotifyLeave records a member that left (StateLeft, EventLeft) or was
// declared dead (StateDead, EventFailed). memberlist v0.7 calls it alike
// for both, with the Node's State saying StateAlive
// (hashicorp/memberlist#293); the member's last metadata tells them apart:
// Leave sets its Leaving flag before the leave goes out.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	g := d.g
	if n.Name == g.cfg.NodeName {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return // memberlist's suspicion timers outlive its Shutdown
	}
	m, leaving, ok := d.member(n)
	if !ok {
		if e, known := g.members[n.Name]; known {
			m = e.m // keep the metadata we had
		}
	}
	typ, state := EventFailed, StateDead
	if leaving {
		typ, state = EventLeft, StateLeft
	}
	m.State = state
	g.members[m.Name] = &entry{m: m, since: time.Now()}
	g.failedLocked(m)
	if typ == EventLeft {
		g.log.Info("member left", zap.String("member", m.Name), zap.String("addr", m.Addr))
	} else {
		g.log.Warn("member failed", zap.String("member", m.Name), zap.String("addr", m.Addr))
	}
	g.emitLocked(Event{Type: typ, Member: m})
}
