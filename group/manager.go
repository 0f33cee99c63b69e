package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// Defaults of Config.
const (
	DefaultQueues      = 16
	DefaultAckTimeout  = 30 * time.Second
	DefaultMaxRetries  = 5
	DefaultMaxInflight = 1000
	// MaxInflightLimit bounds a member's max_inflight.
	MaxInflightLimit = 100000
)

// DefaultBackoff is the wait before each retry, the last repeating: the
// first five of RocketMQ's delay levels that its retries use (level 3 on).
var DefaultBackoff = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 3 * time.Minute}

// Errors of Join and Reset.
var (
	// ErrConflict: the group already has members on this node that
	// subscribed with other tags.
	ErrConflict = errors.New("group: conflict")
	// ErrClosed: the manager is closed.
	ErrClosed = errors.New("group: manager closed")
	// ErrInvalid: a bad argument (reset target, message id).
	ErrInvalid = errors.New("group: invalid argument")
)

// Config configures a Manager.
type Config struct {
	// Store is the node's store (StoreOf).
	Store Store
	// Nodes returns the IDs (origins) of the live nodes, this one
	// included. Nil for a lone node.
	Nodes func() []uint64
	// Write appends internal records (positions, hosts, dead letters) as
	// this node's writes and returns once they are as safe as the
	// daemon's flush and replication modes make a publish.
	Write func(ctx context.Context, msgs []record.Message) error
	// Queues is the number of queues per topic.
	Queues int
	// AckTimeout is how long a delivered message may go unacknowledged
	// before it is redelivered.
	AckTimeout time.Duration
	// MaxRetries is how many times a message is redelivered before it
	// goes to the dead-letter topic; 0 dead-letters it at its first
	// failure.
	MaxRetries int
	// Backoff is the wait before retry n (Backoff[n-1]; the last entry
	// repeats).
	Backoff []time.Duration
	// Interval is how often the allocation and the positions are checked
	// against the cluster (membership changes also wake the check).
	Interval time.Duration
	// CommitInterval is how often a group writes positions that moved
	// without acks (messages its tags or queues skip).
	CommitInterval time.Duration
	// HostsInterval paces this node's HostsTopic entry of a group: a change
	// (the group's first member here, its last one gone, other tags) is
	// written once it has waited this long, and only if the entry still
	// differs from what was written then. So members that come and go
	// within it write nothing, and churn writes one record per interval
	// at most. Other nodes learn of a new host that much later.
	HostsInterval time.Duration
	// Handover bounds a rebalance between live nodes: the node giving a
	// queue up waits this long at most for its members to settle what
	// they hold, and the node taking it over waits this long plus a
	// second at most for the release before it starts anyway.
	Handover time.Duration
	// Logger logs rebalances and failures.
	Logger *zap.Logger
}

func (c *Config) setDefaults() {
	if c.Queues == 0 {
		c.Queues = DefaultQueues
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if len(c.Backoff) == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = time.Second
	}
	if c.HostsInterval == 0 {
		c.HostsInterval = time.Second
	}
	if c.Handover == 0 {
		c.Handover = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Manager runs the consumer groups that have members on this node.
type Manager struct {
	cfg  Config
	st   Store
	self uint64
	log  *zap.Logger

	mu        sync.Mutex
	groups    map[groupKey]*group
	owners    map[groupKey]string    // who owns each group here, as recorded in OwnersTopic (owner.go)
	published map[groupKey]hostEntry // this node's entries written to HostsTopic
	// pending holds when each entry that may differ from published was
	// first seen to (HostsInterval).
	pending map[groupKey]time.Time
	stale   []string // OffsetsTopic keys this node claims from before a restart
	closed  bool

	nextMember atomic.Uint64
	kick       chan struct{}
	stop       chan struct{}
	wg         sync.WaitGroup
}

type groupKey struct{ topic, name string }

// New starts a Manager.
func New(cfg Config) (*Manager, error) {
	cfg.setDefaults()
	switch {
	case cfg.Store == nil || cfg.Write == nil:
		return nil, errors.New("group: Store and Write are required")
	case cfg.Queues < 1 || cfg.Queues > 1024:
		return nil, fmt.Errorf("queues per topic: must be 1 to 1024, got %d", cfg.Queues)
	case cfg.MaxRetries < 0:
		return nil, fmt.Errorf("max retries: must not be negative, got %d", cfg.MaxRetries)
	case cfg.AckTimeout < 0:
		return nil, fmt.Errorf("ack timeout: must be positive, got %s", cfg.AckTimeout)
	}
	for _, b := range cfg.Backoff {
		if b < 0 {
			return nil, fmt.Errorf("retry back-off: must not be negative, got %s", b)
		}
	}
	m := &Manager{
		cfg: cfg, st: cfg.Store, self: cfg.Store.Origin(), log: cfg.Logger,
		groups: make(map[groupKey]*group), owners: make(map[groupKey]string), published: make(map[groupKey]hostEntry), pending: make(map[groupKey]time.Time),
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	// What this node hosted and served before a restart is stale: it has
	// no members now. The loop writes the tombstones and the releases.
	for _, k := range m.st.Keys(HostsTopic, "", "", 0) {
		if t, g, node, ok := parseNodeKey(k); ok && node == m.self {
			m.published[groupKey{t, g}] = hostEntry{stale: true}
		}
	}
	m.loadOwners()
	for _, k := range m.st.Keys(OffsetsTopic, "", "", 0) {
		if e, ok := m.st.Get(OffsetsTopic, k); ok {
			if p, err := decodePosition(e.Value); err == nil && p.Owner == m.self {
				m.stale = append(m.stale, k)
			}
		}
	}
	m.wg.Add(1)
	go m.loop()
	return m, nil
}

// Kick makes the manager check the allocation now (at a membership
// change, say).
func (m *Manager) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Join adds a member to a group on this node. tags (in any order) must
// be the same for every member of the group, on every node. maxInflight bounds the messages
// it holds unacknowledged (0: DefaultMaxInflight).
func (m *Manager) Join(topic, name string, tags []string, maxInflight int) (*Member, error) {
	return m.JoinAs(context.Background(), Owner{Admin: true}, topic, name, tags, maxInflight)
}

// JoinAs is Join by owner: a group that has no owner on this node yet
// becomes owner's (recorded before JoinAs returns; owner.go), and one that
// has may be joined by its owner or an admin only (ErrNotOwner).
func (m *Manager) JoinAs(ctx context.Context, owner Owner, topic, name string, tags []string, maxInflight int) (*Member, error) {
	if maxInflight <= 0 {
		maxInflight = DefaultMaxInflight
	}
	tags = slices.Compact(slices.Sorted(slices.Values(tags))) // a||b is b||a
	k := groupKey{topic, name}
	if err := m.claim(ctx, owner, k, tags); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if err := m.mayUseLocked(owner, k); err != nil {
		return nil, err
	}
	g := m.groups[k]
	if g == nil {
		if err := m.agrees(topic, name, tags); err != nil {
			return nil, err
		}
		g = newGroup(m, topic, name, tags)
		m.groups[k] = g
		m.wg.Add(1)
		go g.run()
	} else if !slices.Equal(g.tags, tags) {
		return nil, fmt.Errorf("%w: group %s on %s has members here with tags %q; every member must name the same tags",
			ErrConflict, name, topic, g.tags)
	}
	mb := &Member{ID: m.nextMember.Add(1), owner: owner.Name, g: g, max: maxInflight, wake: make(chan struct{}, 1)}
	g.addMember(mb)
	m.Kick()
	return mb, nil
}

// leave removes g from the manager once its last member left.
func (m *Manager) leave(g *group) {
	m.mu.Lock()
	if m.groups[groupKey{g.topic, g.name}] == g {
		delete(m.groups, groupKey{g.topic, g.name})
	}
	m.mu.Unlock()
	m.Kick()
}

// Ack settles messages of a group delivered on this node: ack ones are
// handled, nack ones refused (redelivered after the back-off, or dead-
// lettered). The group's position is written before Ack returns. unknown
// counts IDs not in flight here.
func (m *Manager) Ack(ctx context.Context, topic, name string, ack, nack []ID) (acked, nacked, unknown int, err error) {
	return m.AckAs(ctx, Owner{Admin: true}, topic, name, ack, nack)
}

// AckAs is Ack by owner: a message is settled only by the owner of the
// member it was delivered to, or an admin; otherwise nothing is settled
// (ErrNotOwner).
func (m *Manager) AckAs(ctx context.Context, owner Owner, topic, name string, ack, nack []ID) (acked, nacked, unknown int, err error) {
	m.mu.Lock()
	g := m.groups[groupKey{topic, name}]
	m.mu.Unlock()
	if g == nil {
		return 0, 0, 0, fmt.Errorf("group %s on %s has no member on this node: %w", name, topic, ErrNotFound)
	}
	return g.settle(ctx, owner, ack, nack)
}

// loop keeps the hosts entries and the allocation current.
func (m *Manager) loop() {
	defer m.wg.Done()
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-tick.C:
		}
		m.syncHosts(context.Background(), false)
		m.releaseStale(context.Background())
		m.rebalance()
	}
}

// releaseStale hands over the queues this node served before a restart
// and does not serve now, so that their next owners need not wait.
func (m *Manager) releaseStale(ctx context.Context) {
	m.mu.Lock()
	keys := m.stale
	m.stale = nil
	m.mu.Unlock()
	var msgs []record.Message
	for _, k := range keys {
		e, ok := m.st.Get(OffsetsTopic, k)
		if !ok {
			continue
		}
		p, err := decodePosition(e.Value)
		if err != nil || p.Owner != m.self {
			continue
		}
		if t, g, q, ok := parseOffsetsKey(k); ok {
			m.mu.Lock()
			lg := m.groups[groupKey{t, g}]
			m.mu.Unlock()
			if lg != nil && lg.serves(q) {
				continue // taken up again since
			}
		}
		p.Owner = 0
		b, err := encodePosition(p)
		if err != nil {
			continue
		}
		msgs = append(msgs, record.Message{Topic: OffsetsTopic, Key: k, Value: b})
	}
	if len(msgs) == 0 {
		return
	}
	if err := m.cfg.Write(ctx, msgs); err != nil {
		m.log.Warn("releasing the queues served before the restart", zap.Error(err))
		m.mu.Lock()
		m.stale = append(m.stale, keys...)
		m.mu.Unlock()
	}
}

// hostEntry is what this node's HostsTopic entry of a group says (or
// should say): whether it hosts members, with which tags. The member
// count is written with it but is no reason to write.
type hostEntry struct {
	hosts bool
	tags  []string
	// stale marks an entry left by this node before a restart: it says
	// the node hosts the group, which it does not any more.
	stale bool
}

func (h hostEntry) equal(o hostEntry) bool {
	return h.hosts == o.hosts && h.stale == o.stale && slices.Equal(h.tags, o.tags)
}

// syncHosts writes this node's HostsTopic entries that changed, each at
// most once per HostsInterval (see Config.HostsInterval); now writes
// every change at once (at Close).
func (m *Manager) syncHosts(ctx context.Context, now bool) {
	m.mu.Lock()
	type change struct {
		k     groupKey
		entry hostEntry
	}
	var (
		msgs    []record.Message
		changes []change
	)
	want := make(map[groupKey]hostEntry)
	members := make(map[groupKey]int)
	for k, g := range m.groups {
		if n := g.memberCount(); n > 0 {
			want[k] = hostEntry{hosts: true, tags: g.tags}
			members[k] = n
		}
	}
	keys := slices.Collect(maps.Keys(want))
	for k := range m.published {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	t := time.Now()
	for _, k := range keys {
		differs := !want[k].equal(m.published[k])
		since, waiting := m.pending[k]
		if !now {
			if !waiting {
				if differs {
					m.pending[k] = t
				}
				continue
			}
			if t.Sub(since) < m.cfg.HostsInterval {
				continue
			}
		}
		delete(m.pending, k)
		if !differs {
			continue // it came back to what was written: nothing to say
		}
		msg := record.Message{Topic: HostsTopic, Key: nodeKey(k.topic, k.name, m.self)}
		if w := want[k]; w.hosts {
			msg.Value, _ = json.Marshal(hosting{Members: members[k], Queues: m.cfg.Queues, Tags: w.tags})
		} else {
			msg.Delete = true
		}
		msgs = append(msgs, msg)
		changes = append(changes, change{k, want[k]})
	}
	m.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	if err := m.cfg.Write(ctx, msgs); err != nil {
		m.log.Warn("writing the groups this node hosts", zap.Error(err))
		return // the next pass tries again
	}
	m.mu.Lock()
	for _, c := range changes {
		if c.entry.hosts {
			m.published[c.k] = c.entry
		} else {
			delete(m.published, c.k)
		}
	}
	m.mu.Unlock()
}

// alive returns the live nodes as a set.
func (m *Manager) alive() map[uint64]bool {
	set := map[uint64]bool{m.self: true}
	if m.cfg.Nodes != nil {
		for _, n := range m.cfg.Nodes() {
			set[n] = true
		}
	}
	return set
}

// hosts returns the live nodes hosting members of a group, sorted;
// self is counted when it has members, whether or not its own entry is
// written yet.
func (m *Manager) hosts(topic, name string, alive map[uint64]bool, self bool) []uint64 {
	var nodes []uint64
	if self {
		nodes = append(nodes, m.self)
	}
	for _, k := range m.st.Keys(HostsTopic, topic+"/"+name+"/", "", 0) {
		_, _, n, ok := parseNodeKey(k)
		if ok && n != m.self && alive[n] {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// agrees checks a group new on this node against its live hosts: the
// allocation needs one queue count, and the positions one tag filter (a
// message one node's filter skips counts as handled).
func (m *Manager) agrees(topic, name string, tags []string) error {
	alive := m.alive()
	for _, k := range m.st.Keys(HostsTopic, topic+"/"+name+"/", "", 0) {
		_, _, n, ok := parseNodeKey(k)
		if !ok || n == m.self || !alive[n] {
			continue
		}
		e, ok := m.st.Get(HostsTopic, k)
		if !ok {
			continue
		}
		h, err := decodeHosting(e.Value)
		switch {
		case err != nil:
		case h.Queues != m.cfg.Queues:
			return fmt.Errorf("%w: group %s on %s is hosted by nodes with %d queues per topic; this node has %d (--queues-per-topic must be the same on every node)",
				ErrConflict, name, topic, h.Queues, m.cfg.Queues)
		case !slices.Equal(h.Tags, tags):
			return fmt.Errorf("%w: group %s on %s has members with tags %q on node %016x; every member must name the same tags",
				ErrConflict, name, topic, h.Tags, n)
		}
	}
	return nil
}

// rebalance gives each local group the queues the allocation says.
func (m *Manager) rebalance() {
	alive := m.alive()
	m.mu.Lock()
	gs := make([]*group, 0, len(m.groups))
	for _, g := range m.groups {
		gs = append(gs, g)
	}
	m.mu.Unlock()
	for _, g := range gs {
		if time.Since(g.born) < 2*m.cfg.Interval {
			// A group new here waits for the cluster to tell it who else
			// hosts it and who serves what, rather than grab every queue
			// for a moment and hand most of them over at once.
			continue
		}
		nodes := m.hosts(g.topic, g.name, alive, true)
		i := sort.Search(len(nodes), func(i int) bool { return nodes[i] >= m.self })
		g.rebalance(allocate(m.cfg.Queues, len(nodes), i), len(nodes), alive)
	}
}

// position reads a queue's committed position from the view.
func (m *Manager) position(topic, name string, q int) position {
	e, ok := m.st.Get(OffsetsTopic, offsetsKey(topic, name, q))
	if !ok {
		return position{Done: [nSources]vector{{}, {}}}
	}
	p, err := decodePosition(e.Value)
	if err != nil {
		m.log.Error("a queue's position is unreadable: starting it over", zap.String("topic", topic),
			zap.String("group", name), zap.Int("queue", q), zap.Error(err))
		return position{Done: [nSources]vector{{}, {}}}
	}
	return p
}

func (m *Manager) write(ctx context.Context, msgs []record.Message) error {
	return m.cfg.Write(ctx, msgs)
}

// Reset moves every queue of a group to a new position, under a new
// epoch: "earliest", "latest", an RFC 3339 time (the messages stamped from
// then on), or an offset of the group's topic on this node (the messages
// from that offset on, as this node holds them). The members, here and on
// the other nodes, drop what they hold in flight and start over from it at
// their next check.
func (m *Manager) Reset(ctx context.Context, topic, name, to string) (epoch uint64, err error) {
	var p position
	p.Done = [nSources]vector{{}, {}}
	switch {
	case to == "earliest":
	case to == "latest":
		p.Done[srcMain] = vector(m.st.Vector())
		p.Done[srcRetry] = vector(m.st.Vector())
	default:
		if off, err := strconv.ParseUint(to, 10, 64); err == nil {
			if p.Done[srcMain], err = m.vectorBefore(topic, off); err != nil {
				return 0, err
			}
			p.Done[srcRetry] = vector(m.st.Vector())
			break
		}
		t, err := time.Parse(time.RFC3339Nano, to)
		if err != nil {
			return 0, fmt.Errorf("%w: reset to %q: want earliest, latest, an offset or an RFC 3339 time", ErrInvalid, to)
		}
		p.From = record.MakeHLC(t.UnixMilli(), 0)
	}
	owners := make([]uint64, m.cfg.Queues)
	for q := range owners {
		cur := m.position(topic, name, q)
		epoch = max(epoch, cur.Epoch)
		owners[q] = cur.Owner // the owner adopts the reset; no handover
	}
	p.Epoch = epoch + 1
	msgs := make([]record.Message, m.cfg.Queues)
	for q := range msgs {
		p.Owner = owners[q]
		b, err := encodePosition(p)
		if err != nil {
			return 0, err
		}
		msgs[q] = record.Message{Topic: OffsetsTopic, Key: offsetsKey(topic, name, q), Value: b}
	}
	if err := m.write(ctx, msgs); err != nil {
		return 0, err
	}
	m.Kick()
	return p.Epoch, nil
}

// vectorBefore is, per origin, the highest seq among topic's messages
// before offset off on this node: each origin's messages lie in seq order,
// so it covers exactly the messages before off.
func (m *Manager) vectorBefore(topic string, off uint64) (vector, error) {
	r, err := m.st.NewTopicReader(topic, store.Start{From: store.FromEarliest}, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	v := vector{}
	for r.Offset() < off {
		d, err := r.Next(done)
		if err != nil {
			break // the end of what this node holds
		}
		if d.Offset >= off {
			break
		}
		v[d.Record.Origin()] = max(v[d.Record.Origin()], d.Record.Seq())
	}
	return v, nil
}

// Close ends every member, writes the groups' positions and this node's
// departure from them, and stops.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	gs := make([]*group, 0, len(m.groups))
	for _, g := range m.groups {
		gs = append(gs, g)
	}
	m.groups = map[groupKey]*group{}
	m.mu.Unlock()
	close(m.stop)
	for _, g := range gs {
		g.shutdown()
	}
	m.wg.Wait()
	m.syncHosts(context.Background(), true)
	return nil
}
