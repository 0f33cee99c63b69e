package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// The consumer group tests and benchmarks run their members in the test
// process, one clustering subscription per member, and record every
// delivery and every acknowledgement in one log, so that a test can tell
// afterwards who handled what, in which order, and what the daemon had
// confirmed.

// groupAckEvery is how often a member sends the acks it has gathered.
const groupAckEvery = 20 * time.Millisecond

// delivery is one message as a member received it.
type delivery struct {
	n       int // its place in the log: the order of receipt over all members
	member  string
	node    string
	at      time.Time
	id      string
	key     string
	counter int // the value's counter (clusterCounter), -1 if none
	attempt int
	queue   int
}

// ackBatch is one ack request of a member and its answer.
type ackBatch struct {
	member   string
	ids      []string
	sent     time.Time
	answered time.Time // zero: no answer (an error, or the node was killed)
	res      client.AckResult
	err      error
}

// allAcked says whether the daemon confirmed every id of the batch.
func (a *ackBatch) allAcked() bool {
	return a.err == nil && !a.answered.IsZero() && a.res.Acked == len(a.ids)
}

// groupLog is the deliveries and acks of every member of a test.
type groupLog struct {
	mu     sync.Mutex
	dels   []delivery
	acks   []*ackBatch
	byID   map[string][]int // id -> indexes in dels
	notify chan struct{}    // signalled at each delivery
}

func newGroupLog() *groupLog {
	return &groupLog{byID: map[string][]int{}, notify: make(chan struct{}, 1)}
}

func (l *groupLog) add(d delivery) {
	l.mu.Lock()
	d.n = len(l.dels)
	l.dels = append(l.dels, d)
	l.byID[d.id] = append(l.byID[d.id], d.n)
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

func (l *groupLog) addAck(a *ackBatch) {
	l.mu.Lock()
	l.acks = append(l.acks, a)
	l.mu.Unlock()
}

// distinct is how many different ids were delivered.
func (l *groupLog) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byID)
}

// snapshot copies the log.
func (l *groupLog) snapshot() ([]delivery, []*ackBatch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acks := make([]*ackBatch, len(l.acks))
	for i, a := range l.acks {
		c := *a
		acks[i] = &c
	}
	return append([]delivery(nil), l.dels...), acks
}

// groupMember is one clustering subscription of a test: it records each
// message, simulates work on it if asked, and acknowledges in batches
// every groupAckEvery.
type groupMember struct {
	Name, Node string

	c     *client.Client
	topic string
	group string
	work  time.Duration // per message, sequential
	log   *groupLog
	// worked is the time the work took (a short sleep takes longer than
	// asked on a busy machine).
	worked atomic.Int64

	sub     *client.Subscription
	mu      sync.Mutex
	pending []string // handled, not yet sent in an ack
	ended   chan struct{}
	endErr  error // why the stream ended; read after ended
	endedAt time.Time
	stop    chan struct{}
	closed  sync.Once
	acking  sync.WaitGroup // the acker
}

// startGroupMember subscribes to topic as a member of group through c
// and starts handling. work is slept per message before it is
// acknowledged (0: none).
func startGroupMember(tb testing.TB, log *groupLog, name, node string, c *client.Client, topic, group string, work time.Duration) *groupMember {
	tb.Helper()
	m := &groupMember{Name: name, Node: node, c: c, topic: topic, group: group, work: work, log: log,
		ended: make(chan struct{}), stop: make(chan struct{})}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The stream outlives the call; Close ends it.
	sub, err := c.Subscribe(context.WithoutCancel(sctx), topic, client.SubscribeOptions{Mode: client.ModeClustering, Group: group})
	if err != nil {
		tb.Fatalf("%s: subscribe to %s as a member of %s: %v", name, topic, group, err)
	}
	m.sub = sub
	m.acking.Add(1)
	go m.read()
	go m.acker()
	tb.Cleanup(m.Close)
	return m
}

func (m *groupMember) read() {
	defer close(m.ended)
	for {
		ev, err := m.sub.Next()
		if err != nil {
			if errors.Is(err, client.ErrBadResponse) {
				continue
			}
			m.endErr, m.endedAt = err, time.Now()
			return
		}
		at := time.Now()
		if m.work > 0 {
			time.Sleep(m.work)
			m.worked.Add(int64(time.Since(at)))
		}
		m.log.add(delivery{member: m.Name, node: m.Node, at: at, id: ev.ID, key: ev.Key,
			counter: clusterCounter(ev.Key, string(ev.Value)), attempt: ev.Attempt, queue: ev.Queue})
		m.mu.Lock()
		m.pending = append(m.pending, ev.ID)
		m.mu.Unlock()
	}
}

// acker sends the pending acks every groupAckEvery, one request at a
// time, and once more when the member is closed; a failed request is
// recorded, its ids are not sent again (their messages come back by the
// ack timeout or a rebalance).
func (m *groupMember) acker() {
	defer m.acking.Done()
	tick := time.NewTicker(groupAckEvery)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			m.flush()
			return
		case <-tick.C:
		}
		m.flush()
	}
}

func (m *groupMember) flush() {
	m.mu.Lock()
	ids := m.pending
	m.pending = nil
	m.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	a := &ackBatch{member: m.Name, ids: ids, sent: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	res, err := m.c.Ack(ctx, m.topic, m.group, ids, nil)
	cancel()
	a.res, a.err = res, err
	if err == nil {
		a.answered = time.Now()
	}
	m.log.addAck(a)
}

// Ended is closed when the member's stream ended.
func (m *groupMember) Ended() <-chan struct{} { return m.ended }

// Close sends the last acks, then ends the subscription (in that order:
// a member that leaves gives what it holds back to the group).
func (m *groupMember) Close() {
	m.closed.Do(func() {
		close(m.stop)
		m.acking.Wait()
		m.sub.Close()
		<-m.ended
	})
}

// groupOf is the group on the node answering c, nil if it has none.
func groupOf(ctx context.Context, c *client.Client, topic, group string) (*client.Group, error) {
	gs, err := c.Groups(ctx)
	if err != nil {
		return nil, err
	}
	for i := range gs {
		if gs[i].Topic == topic && gs[i].Group == group {
			return &gs[i], nil
		}
	}
	return nil, nil
}

// waitAllocated waits until every node of nodes sees the group hosted by
// exactly those nodes, with all queues allocated, each node's own queues
// given to its members; it returns the queues of each node by name.
func waitAllocated(tb testing.TB, nodes []*clusterNode, topic, group string, timeout time.Duration) map[string][]int {
	tb.Helper()
	var out map[string][]int
	why := testkit.Poll(tb, timeout, func() string {
		out = map[string][]int{}
		for _, n := range nodes {
			g, err := groupOf(context.Background(), n.Client, topic, group)
			if err != nil {
				return err.Error()
			}
			if g == nil {
				return n.Name + " has no group " + group
			}
			if len(g.Nodes) != len(nodes) {
				return fmt.Sprintf("%s sees %d nodes hosting %s, want %d", n.Name, len(g.Nodes), group, len(nodes))
			}
			seen := map[int]bool{}
			for _, gn := range g.Nodes {
				for _, q := range gn.Queues {
					seen[q] = true
				}
			}
			if len(seen) != g.Queues {
				return fmt.Sprintf("%s: %d of %d queues allocated", n.Name, len(seen), g.Queues)
			}
			var mine []int
			for _, mb := range g.Members {
				mine = append(mine, mb.Queues...)
			}
			sort.Ints(mine)
			if len(mine) == 0 {
				return n.Name + "'s members have no queue"
			}
			out[n.Name] = mine
		}
		// The nodes agree: each queue is one node's.
		owner := map[int]string{}
		for name, qs := range out {
			for _, q := range qs {
				if o, ok := owner[q]; ok {
					return fmt.Sprintf("queue %d is both %s's and %s's", q, o, name)
				}
				owner[q] = name
			}
		}
		if len(owner) == 0 {
			return "no queue"
		}
		return ""
	})
	if why != "" {
		tb.Fatalf("waited %v for %s/%s to be allocated over %d nodes: %s", timeout, topic, group, len(nodes), why)
	}
	return out
}

// startGroupCluster starts a three-node process cluster (a, b, c) for a
// test or a benchmark and waits until every node sees every other alive
// and connected.
func startGroupCluster(tb testing.TB, args ...string) []*clusterNode {
	tb.Helper()
	nodes := startClusterNodes(tb, threeNodes(args...))
	waitClusterUp(tb, nodes, namesOf(nodes), false, 20*time.Second)
	return nodes
}

// nodeGone reports whether st shows name dead, left or absent.
func nodeGone(st wire.ClusterStatus, name string) bool {
	for _, m := range st.Members {
		if m.Name == name {
			return m.State != "alive"
		}
	}
	return true
}

// groupPublisher publishes keyed messages on one node at a steady pace:
// batches of batch messages every period, the keys in turn, each key's
// counter counting its writes (clusterValue). It records the ids of what
// the daemon acknowledged.
type groupPublisher struct {
	n      *clusterNode
	topic  string
	keys   []string
	total  int
	batch  int
	period time.Duration

	mu     sync.Mutex
	ids    []string
	err    error
	counts map[string]int
}

func (p *groupPublisher) run(ctx context.Context) {
	p.counts = map[string]int{}
	start := time.Now()
	sent := 0
	for i := 0; sent < p.total; i++ {
		if d := time.Until(start.Add(time.Duration(i) * p.period)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				p.fail(ctx.Err())
				return
			}
		}
		var msgs []client.Message
		for j := 0; j < p.batch && sent+j < p.total; j++ {
			k := p.keys[(sent+j)%len(p.keys)]
			msgs = append(msgs, client.Message{Key: k, Value: clusterValue(k, p.counts[k])})
			p.counts[k]++
		}
		bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		res, err := p.n.Client.PublishBatch(bctx, p.topic, msgs)
		cancel()
		if err == nil && len(res) != len(msgs) {
			err = fmt.Errorf("%d results for %d messages", len(res), len(msgs))
		}
		if err != nil {
			p.fail(fmt.Errorf("%s: publish: %w", p.n.Name, err))
			return
		}
		p.mu.Lock()
		for _, r := range res {
			p.ids = append(p.ids, messageID(r.Origin, r.Seq))
		}
		p.mu.Unlock()
		sent += len(msgs)
	}
}

func (p *groupPublisher) fail(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

// published is the ids acknowledged so far.
func (p *groupPublisher) published() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ids...)
}

// messageID is a message's id in a group, "<origin>-<seq>".
func messageID(origin, seq uint64) string {
	return client.FormatOrigin(origin) + "-" + strconv.FormatUint(seq, 10)
}

// jsonOf renders v for a failure message.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
