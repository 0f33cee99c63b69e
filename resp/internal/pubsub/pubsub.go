package pubsub

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/resp/internal/session"
)

// subscriptions route messages to the connections subscribed to a
// channel or a pattern.
type subscriptions struct {
	mu       sync.RWMutex
	channels map[string]map[*Peer]struct{}
	patterns map[string]map[*Peer]struct{}
	count    atomic.Int64 // channel and pattern entries, read without the lock
	// out is the messages of the follower's round for each connection,
	// sent at the round's end (flush) or past outboxFlush bytes. The
	// follower's goroutine alone touches it.
	out map[*Peer][]byte
	hup hangups // the subscribers' sockets, for their hang-ups (hangup.go)
}

// outboxFlush is how much a round gathers for one connection before it
// sends it: a catch-up of many records starts arriving at once, and a
// round's messages stay far below --redis-push-buffer.
const outboxFlush = 64 << 10

func (p *subscriptions) init() {
	p.channels = map[string]map[*Peer]struct{}{}
	p.patterns = map[string]map[*Peer]struct{}{}
	p.hup.epfd = -1
}

func (p *subscriptions) table(pattern bool) map[string]map[*Peer]struct{} {
	if pattern {
		return p.patterns
	}
	return p.channels
}

func (p *subscriptions) add(c *Peer, name string, pattern bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.table(pattern)
	set := m[name]
	if set == nil {
		set = map[*Peer]struct{}{}
		m[name] = set
	}
	if _, ok := set[c]; !ok {
		set[c] = struct{}{}
		p.count.Add(1)
	}
	p.hup.watch(c)
}

func (p *subscriptions) remove(c *Peer, name string, pattern bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.table(pattern)
	if set := m[name]; set != nil {
		if _, ok := set[c]; ok {
			delete(set, c)
			p.count.Add(-1)
		}
		if len(set) == 0 {
			delete(m, name)
		}
	}
}

// dropConn removes every subscription of c.
func (p *subscriptions) dropConn(c *Peer) {
	if p.count.Load() == 0 && !c.hupWatched.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.hup.conns, c.c.ID())
	for _, m := range []map[string]map[*Peer]struct{}{p.channels, p.patterns} {
		for name, set := range m {
			if _, ok := set[c]; ok {
				delete(set, c)
				p.count.Add(-1)
				if len(set) == 0 {
					delete(m, name)
				}
			}
		}
	}
}

// counts is c's channels and patterns (CLIENT LIST).
// channelCount and patternCount are how many channels and patterns have
// a subscriber, as INFO's pubsub_channels and pubsub_patterns.
func (p *subscriptions) channelCount() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.channels)
}

func (p *subscriptions) patternCount() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.patterns)
}

func (p *subscriptions) counts(c *Peer) (channels, patterns int) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, set := range p.channels {
		if _, ok := set[c]; ok {
			channels++
		}
	}
	for _, set := range p.patterns {
		if _, ok := set[c]; ok {
			patterns++
		}
	}
	return channels, patterns
}

// receivers counts the local connections a message on channel reaches,
// leaving out those whose client has closed (reapHungUp) and those
// closing, whose subscriptions are dropped next (forget).
func (p *subscriptions) receivers(channel string) int {
	p.reapHungUp()
	p.mu.RLock()
	defer p.mu.RUnlock()
	n := live(p.channels[channel])
	for pat, set := range p.patterns {
		if session.Match(pat, channel) {
			n += live(set)
		}
	}
	return n
}

// live counts the connections of set that are not closed, and whose
// client has not closed them (hungUp).
func live(set map[*Peer]struct{}) int {
	n := 0
	for c := range set {
		if !c.c.Closed() && !c.hungUp.Load() {
			n++
		}
	}
	return n
}

// deliver queues a message on channel for its subscribers, to be sent at
// the end of the follower's round (flush). The follower calls it.
func (p *subscriptions) deliver(channel string, payload []byte) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for c := range p.channels[channel] {
		b := codec.AppendPush(p.out[c], 3, c.c.ProtoNow())
		b = codec.AppendBulkString(b, "message")
		b = codec.AppendBulkString(b, channel)
		p.queue(c, codec.AppendBulk(b, payload))
	}
	for pat, set := range p.patterns {
		if !session.Match(pat, channel) {
			continue
		}
		for c := range set {
			b := codec.AppendPush(p.out[c], 4, c.c.ProtoNow())
			b = codec.AppendBulkString(b, "pmessage")
			b = codec.AppendBulkString(b, pat)
			b = codec.AppendBulkString(b, channel)
			p.queue(c, codec.AppendBulk(b, payload))
		}
	}
}

// queue keeps b as what c's round holds, sending it once it is large.
func (p *subscriptions) queue(c *Peer, b []byte) {
	if len(b) >= outboxFlush {
		c.c.Push(b)
		b = b[:0] // push copied it
	}
	if p.out == nil {
		p.out = map[*Peer][]byte{}
	}
	p.out[c] = b
}

// flush sends each connection the messages of the follower's round.
func (p *subscriptions) flush() {
	for c, b := range p.out {
		if len(b) > 0 {
			c.c.Push(b)
		}
	}
	clear(p.out)
}

func cmdSubscribe(s *session.Session, a [][]byte)  { peerOf(s).subscribe(a[1:], false) }
func cmdPSubscribe(s *session.Session, a [][]byte) { peerOf(s).subscribe(a[1:], true) }

func (c *Peer) subscribe(names [][]byte, pattern bool) {
	kind := "subscribe"
	if pattern {
		kind = "psubscribe"
	}
	c.pushed.Store(true)
	c.hub.cfg.Follow()
	for _, n := range names {
		name := string(n)
		set := &c.channels
		if pattern {
			set = &c.patterns
		}
		if *set == nil {
			*set = map[string]struct{}{}
		}
		(*set)[name] = struct{}{}
		c.hub.subs.add(c, name, pattern)
		c.subReply(kind, name, true)
	}
}

func (c *Peer) subReply(kind, name string, named bool) {
	c.sess.Out = codec.AppendPush(c.sess.Out, 3, c.sess.Proto)
	c.sess.BulkString(kind)
	if named {
		c.sess.BulkString(name)
	} else {
		c.sess.Null()
	}
	c.sess.Int(int64(len(c.channels) + len(c.patterns)))
}

func cmdUnsubscribe(s *session.Session, a [][]byte)  { peerOf(s).unsubscribe(a[1:], false) }
func cmdPUnsubscribe(s *session.Session, a [][]byte) { peerOf(s).unsubscribe(a[1:], true) }

func (c *Peer) unsubscribe(names [][]byte, pattern bool) {
	kind := "unsubscribe"
	set := c.channels
	if pattern {
		kind = "punsubscribe"
		set = c.patterns
	}
	var list []string
	for _, n := range names {
		list = append(list, string(n))
	}
	if len(names) == 0 {
		for n := range set {
			list = append(list, n)
		}
		if len(list) == 0 {
			c.subReply(kind, "", false)
			return
		}
	}
	for _, n := range list {
		delete(set, n)
		c.hub.subs.remove(c, n, pattern)
		c.subReply(kind, n, true)
	}
}

// Keyspace notifications: the letters of notify-keyspace-events that
// apply here.
const (
	notifyKeyspace = 1 << iota // K
	notifyKeyevent             // E
	notifyGeneric              // g: del
	notifyString               // $: set
	notifyHash                 // h: accepted; hash writes are sets and dels here
	notifyExpired              // x: expired
)

var errNotifyFlags = errors.New("resp: invalid notify-keyspace-events")

// parseNotifyFlags reads Redis's notify-keyspace-events letters. Classes
// that cachecast has no events of (lists, sets, ...) are accepted and
// produce nothing.
func parseNotifyFlags(s string) (uint32, error) {
	var f uint32
	for _, ch := range s {
		switch ch {
		case 'K':
			f |= notifyKeyspace
		case 'E':
			f |= notifyKeyevent
		case 'g':
			f |= notifyGeneric
		case '$':
			f |= notifyString
		case 'h':
			f |= notifyHash
		case 'x':
			f |= notifyExpired
		case 'A':
			f |= notifyGeneric | notifyString | notifyHash | notifyExpired
		case 'l', 's', 'z', 'e', 't', 'm', 'd', 'n':
		default:
			return 0, errNotifyFlags
		}
	}
	return f, nil
}

// CheckNotifyKeyspaceEvents says whether s is a notify-keyspace-events
// value the server accepts (nil) or not.
func CheckNotifyKeyspaceEvents(s string) error {
	_, err := parseNotifyFlags(s)
	return err
}

func formatNotifyFlags(f uint32) string {
	var b strings.Builder
	if all := uint32(notifyGeneric | notifyString | notifyHash | notifyExpired); f&all == all {
		b.WriteByte('A')
	} else {
		for _, x := range []struct {
			bit uint32
			ch  byte
		}{{notifyGeneric, 'g'}, {notifyString, '$'}, {notifyHash, 'h'}, {notifyExpired, 'x'}} {
			if f&x.bit != 0 {
				b.WriteByte(x.ch)
			}
		}
	}
	if f&notifyKeyspace != 0 {
		b.WriteByte('K')
	}
	if f&notifyKeyevent != 0 {
		b.WriteByte('E')
	}
	return b.String()
}

// Changed is the follower (the server passes it to Node.Follow): every record the node stores, from any node,
// after the view has it. It invalidates the client caches that may hold
// the key and delivers the messages of the subscriptions, which go out
// at the end of the round (ChangesEnd).
func (h *Hub) Changed(ch Change) {
	if len(ch.Topic) == 0 || ch.Topic[0] == '$' {
		return // the daemon's own topics
	}
	tracking := h.track.active.Load() > 0
	subs := h.subs.count.Load() > 0
	if !tracking && !subs {
		return
	}
	topic := string(ch.Topic)
	if len(ch.Key) == 0 {
		if subs {
			h.subs.deliver(topic, ch.Value)
		}
		return
	}
	key := string(ch.Key)
	full := topic + ":" + key
	bare := ""
	if topic == h.cfg.Env.DefaultTopic && strings.IndexByte(key, ':') < 0 {
		bare = key
	}
	if tracking {
		// The names a client may have read it by: topic:key, the bare
		// key of the default topic, and the hash (HGET topic key).
		h.track.invalidate(h, &ch, [3]string{full, bare, topic})
	}
	if !subs || ch.Scheduled {
		return // a scheduled record is told when it takes effect (Event)
	}
	event, class := eventSet, uint32(notifyString)
	switch {
	case ch.Event == "expired":
		event, class = eventExpired, notifyExpired
	case ch.ExpiryChange && ch.Persist:
		event, class = eventPersist, notifyGeneric
	case ch.ExpiryChange:
		event, class = eventExpire, notifyGeneric
	case ch.Delete:
		event, class = eventDel, notifyGeneric
	case ch.Counter:
		event = eventIncrBy
		if v, ok := h.cfg.Env.Node.Get(topic, key); ok {
			h.subs.deliver(full, v) // the value now, not the increment
		}
	default:
		h.subs.deliver(full, ch.Value)
	}
	f := h.notify.Load()
	if f&class == 0 {
		return
	}
	if f&notifyKeyspace != 0 {
		h.subs.deliver("__keyspace@0__:"+full, event.name)
	}
	if f&notifyKeyevent != 0 {
		h.subs.deliver(event.channel, []byte(full))
	}
}

// keyEvent is a keyspace event's name and its keyevent channel, made once
// (a message's bytes are copied into its frame).
type keyEvent struct {
	name    []byte
	channel string
}

var (
	eventSet     = keyEvent{[]byte("set"), "__keyevent@0__:set"}
	eventDel     = keyEvent{[]byte("del"), "__keyevent@0__:del"}
	eventExpired = keyEvent{[]byte("expired"), "__keyevent@0__:expired"}
	eventExpire  = keyEvent{[]byte("expire"), "__keyevent@0__:expire"}
	eventPersist = keyEvent{[]byte("persist"), "__keyevent@0__:persist"}
	eventIncrBy  = keyEvent{[]byte("incrby"), "__keyevent@0__:incrby"}
)

// ChangesEnd ends a round of the follower: the invalidations and messages
// it gathered go out, one push a connection, as Redis sends the
// invalidations of one event-loop turn together.
func (h *Hub) ChangesEnd() {
	h.track.flush(h)
	h.subs.flush()
}
