package group

import (
	"slices"
	"sort"
)

// Status describes a group as this node sees it.
type Status struct {
	Topic string
	Group string
	// Queues is the number of queues of the topic.
	Queues int
	// Nodes is the allocation: each live node hosting members, with the
	// queues it owns. It is empty for a group with no live member on any
	// node, still listed for its positions and dead letters.
	Nodes []NodeQueues
	// Owned is the queues this node serves now: the allocation as it has
	// applied it (it follows Nodes within Config.Interval).
	Owned []int
	// Members are the group's members on this node.
	Members []MemberStatus
	// Backlog is the number of messages of the group's topics this node
	// has not looked at yet, plus those waiting for a retry; it counts
	// every queue's messages, so it is an upper bound of this node's share.
	Backlog uint64
	// Inflight is the number of messages delivered here and not settled.
	Inflight int
	// Counters since this node's part of the group started.
	Delivered, Acked, Retries, DeadLetters uint64
	// DLQ is the number of dead letters the group holds now (what
	// Manager.DeadLetters lists): replicated, so the same on every node,
	// members or not.
	DLQ int
}

// NodeQueues is one node's share of a group.
type NodeQueues struct {
	Node   uint64
	Queues []int
}

// MemberStatus is one member on this node.
type MemberStatus struct {
	ID       uint64
	Queues   []int
	Inflight int
}

// Status lists the groups the node knows, ordered by topic and group:
// those with hosts (HostsTopic), and those with no live member left
// that have positions (OffsetsTopic) or dead letters, so that their dead
// letters can still be found; with this node's detail for those it hosts.
func (m *Manager) Status() []Status {
	alive := m.alive()
	seen := map[groupKey]bool{}
	for _, k := range m.st.Keys(HostsTopic, "", "", 0) {
		if t, g, _, ok := parseNodeKey(k); ok {
			seen[groupKey{t, g}] = true
		}
	}
	for _, k := range m.st.Keys(OffsetsTopic, "", "", 0) {
		if t, g, _, ok := parseOffsetsKey(k); ok {
			seen[groupKey{t, g}] = true
		}
	}
	dlq := map[groupKey]int{}
	for _, ti := range m.st.Topics() {
		if t, g, ok := parseDeadLetterTopic(ti.Name); ok && ti.Keys > 0 {
			dlq[groupKey{t, g}] = ti.Keys
			seen[groupKey{t, g}] = true
		}
	}
	m.mu.Lock()
	local := make(map[groupKey]*group, len(m.groups))
	for k, g := range m.groups {
		local[k] = g
		seen[k] = true
	}
	m.mu.Unlock()
	keys := make([]groupKey, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].name < keys[j].name
	})
	var out []Status
	for _, k := range keys {
		g := local[k]
		nodes := m.hosts(k.topic, k.name, alive, g != nil)
		s := Status{Topic: k.topic, Group: k.name, Queues: m.cfg.Queues, DLQ: dlq[k]}
		for i, n := range nodes {
			s.Nodes = append(s.Nodes, NodeQueues{Node: n, Queues: allocate(m.cfg.Queues, len(nodes), i)})
		}
		if g != nil {
			g.status(&s)
		}
		out = append(out, s)
	}
	return out
}

func (g *group) status(s *Status) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for n := range g.queues {
		s.Owned = append(s.Owned, n)
	}
	slices.Sort(s.Owned)
	for _, mb := range g.members {
		s.Members = append(s.Members, MemberStatus{ID: mb.ID, Queues: slices.Clone(mb.queues), Inflight: mb.inflight})
		s.Inflight += mb.inflight
	}
	for src, r := range g.readers {
		if r == nil {
			continue
		}
		cur := r.Offset()
		if d := g.held[src]; d != nil {
			cur = d.Offset
		}
		if end := g.m.st.TopicEnd(g.topics[src]); end > cur {
			s.Backlog += end - cur
		}
	}
	for _, f := range g.waiting {
		if g.flights[f.id] == f && f.member == nil {
			s.Backlog++
		}
	}
	s.Delivered, s.Acked, s.Retries, s.DeadLetters = g.stats.delivered, g.stats.acked, g.stats.retries, g.stats.deadLetters
}
