package pubsub

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/resp/internal/session"
)

// trackState is a connection's CLIENT TRACKING mode; the connection's own
// copy, under its mu.
type trackState struct {
	on, bcast, optin, optout, noloop bool
	redirect                         int64
	prefixes                         []string
}

// trackEntry is a tracking connection as the follower sees it.
type trackEntry struct {
	bcast    bool
	noloop   bool
	prefixes []string
	redirect *Peer           // where the invalidations go; nil: to itself
	names    map[string]bool // default mode: the keys it may have cached
	own      [16][3]uint64   // NOLOOP: recent writes (origin, first, last seq)
	ownNext  int
	// NOLOOP: while one of its writes is in flight (its seqs not known
	// yet), the invalidations of this node's changes wait in deferred,
	// to be sent unless they turn out to be its own.
	inflight int
	deferred []deferredInvalidation
}

// deferredInvalidation is an invalidation held for a NOLOOP client.
type deferredInvalidation struct {
	origin, seq uint64
	names       []string
}

// tracker holds the client-side caching tables: which connection may
// have cached which key. A key's entry goes at its first invalidation, as
// in Redis: the client reads it again to track it again.
type tracker struct {
	mu      sync.Mutex
	keys    map[string]map[*Peer]struct{}
	clients map[*Peer]*trackEntry
	active  atomic.Int64 // len(clients), read without the lock
	// batch is the invalidations of the follower's round for each
	// tracking connection (and each of a BCAST one's prefixes), sent at
	// the round's end (flush) or past batchFlush names; queued names
	// counts them. Under mu.
	batch  map[batchKey]*invalidation
	queued int
}

// batchKey is whom an invalidation of the round is for: a connection, and
// for a BCAST one the prefix the names are under, since Redis sends a
// BCAST client one invalidation a prefix.
type batchKey struct {
	c      *Peer
	prefix string
}

// invalidation is the names to tell one tracking connection, and where.
type invalidation struct {
	dest  *Peer
	names []string
}

// batchFlush is how many invalidated names a round gathers before it
// sends them (a catch-up of many records).
const batchFlush = 4096

func (t *tracker) init() {
	t.keys = map[string]map[*Peer]struct{}{}
	t.clients = map[*Peer]*trackEntry{}
}

// wantsTracking says whether the command now running registers its keys.
func (c *Peer) wantsTracking() bool {
	tk := &c.trk
	if !tk.on || tk.bcast {
		return false
	}
	switch {
	case tk.optin:
		return c.caching == 1
	case tk.optout:
		return c.caching != -1
	}
	return true
}

// Track registers a key the client reads (its connection's session.Host.Track); before the
// read, so that a change after the read is always invalidated.
func (c *Peer) Track(name []byte) {
	if !c.wantsTracking() {
		return
	}
	t := &c.hub.track
	t.mu.Lock()
	e := t.clients[c]
	var evicted []string
	dest := c
	if e != nil && !e.names[session.Str(name)] {
		if len(e.names) >= c.hub.cfg.TrackingMaxKeys {
			evicted = t.evictLocked(c, e, max(c.hub.cfg.TrackingMaxKeys/10, 1))
			if e.redirect != nil {
				dest = e.redirect
			}
		}
		n := string(name)
		e.names[n] = true
		set := t.keys[n]
		if set == nil {
			set = map[*Peer]struct{}{}
			t.keys[n] = set
		}
		set[c] = struct{}{}
	}
	t.mu.Unlock()
	if len(evicted) > 0 {
		c.hub.Counters.TrackingEvicted.Add(int64(len(evicted)))
		c.hub.Counters.Invalidations.Add(int64(len(evicted)))
		dest.c.Push(invalidateFrame(dest.c.ProtoNow(), evicted))
	}
}

// evictLocked forgets n of the keys c is tracked for (those the map's
// order gives first) and returns them, to be sent as an invalidation: a
// client at --redis-tracking-max-keys drops them from its cache, as
// Redis's clients do at tracking-table-max-keys, so the memory the
// server holds for one client stays bounded and no cached key goes
// untracked.
func (t *tracker) evictLocked(c *Peer, e *trackEntry, n int) []string {
	out := make([]string, 0, n)
	for name := range e.names {
		if len(out) == n {
			break
		}
		delete(e.names, name)
		if set := t.keys[name]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(t.keys, name)
			}
		}
		out = append(out, name)
	}
	return out
}

// on starts or changes tracking for c.
func (t *tracker) on(c *Peer, st trackState, redirect *Peer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.clients[c]
	if e == nil {
		e = &trackEntry{names: map[string]bool{}}
		t.clients[c] = e
		t.active.Store(int64(len(t.clients)))
	}
	e.bcast, e.noloop, e.prefixes, e.redirect = st.bcast, st.noloop, st.prefixes, redirect
}

// off ends tracking for c and forgets its keys.
func (t *tracker) off(c *Peer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.offLocked(c)
}

func (t *tracker) offLocked(c *Peer) {
	e := t.clients[c]
	if e == nil {
		return
	}
	for n := range e.names {
		if set := t.keys[n]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(t.keys, n)
			}
		}
	}
	delete(t.clients, c)
	t.active.Store(int64(len(t.clients)))
}

// dropConn forgets a closed connection, and disconnects the connections
// whose invalidations went to it: they could no longer be told.
func (t *tracker) dropConn(h *Hub, c *Peer) {
	t.mu.Lock()
	t.offLocked(c)
	var orphans []*Peer
	for o, e := range t.clients {
		if e.redirect == c {
			orphans = append(orphans, o)
		}
	}
	t.mu.Unlock()
	for _, o := range orphans {
		h.Counters.SlowDisconnects.Add(1)
		h.cfg.Logger.Warn("the redirect target of a tracking client closed; disconnecting the client")
		o.c.Close()
	}
}

// beginWrite marks a write of c in flight, for NOLOOP: true when
// endWrite must follow.
func (t *tracker) beginWrite(c *Peer) bool {
	if t.active.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.clients[c]
	if e == nil || !e.noloop {
		return false
	}
	e.inflight++
	return true
}

// endWrite remembers the write of c that began with beginWrite (ok: it
// was stored, with seqs first to last of origin) and sends the held
// invalidations that were not its own.
func (t *tracker) endWrite(h *Hub, c *Peer, ok bool, origin, first, last uint64) {
	t.mu.Lock()
	e := t.clients[c]
	if e == nil {
		t.mu.Unlock()
		return
	}
	if ok {
		e.own[e.ownNext] = [3]uint64{origin, first, last}
		e.ownNext = (e.ownNext + 1) % len(e.own)
	}
	e.inflight--
	var send []string
	if e.inflight == 0 {
		for _, d := range e.deferred {
			if !e.wrote(d.origin, d.seq) {
				send = append(send, d.names...)
			}
		}
		e.deferred = nil
	}
	dest := c
	if e.redirect != nil {
		dest = e.redirect
	}
	t.mu.Unlock()
	if len(send) > 0 {
		dest.c.Push(invalidateFrame(dest.c.ProtoNow(), send))
		h.Counters.Invalidations.Add(int64(len(send)))
	}
}

func (e *trackEntry) wrote(origin, seq uint64) bool {
	if !e.noloop {
		return false
	}
	for _, w := range e.own {
		if w[0] == origin && w[1] <= seq && seq <= w[2] {
			return true
		}
	}
	return false
}

// invalidate queues, for the connections that may have cached one of
// names, that it changed: the follower's round sends them at its end
// (flush), one invalidation a connection (a BCAST one: a prefix), as
// Redis sends a BCAST client the invalidations of one event-loop turn
// together, one message for each of its prefixes.
func (t *tracker) invalidate(h *Hub, ch *Change, names [3]string) {
	// A change no record brought (an expiry, a scheduled record taking
	// effect) is nobody's write: NOLOOP does not hold it back, as Redis
	// sends a NOLOOP client the invalidation of a key of its own that
	// expired. So is a value that has expired already when it arrives
	// (expiredOnArrival): the view holds no value for its key.
	nobodys := ch.Event != "" || expiredOnArrival(h, ch)
	own := func(e *trackEntry) bool { return !nobodys && e.wrote(ch.Origin, ch.Seq) }
	add := func(c *Peer, e *trackEntry, n, prefix string) {
		if e.inflight > 0 && !nobodys {
			// Maybe its own write: decided when the write returns.
			if l := len(e.deferred); l > 0 && e.deferred[l-1].seq == ch.Seq && e.deferred[l-1].origin == ch.Origin {
				e.deferred[l-1].names = append(e.deferred[l-1].names, n)
			} else {
				e.deferred = append(e.deferred, deferredInvalidation{origin: ch.Origin, seq: ch.Seq, names: []string{n}})
			}
			return
		}
		if t.batch == nil {
			t.batch = map[batchKey]*invalidation{}
		}
		k := batchKey{c, prefix}
		inv := t.batch[k]
		if inv == nil {
			inv = &invalidation{dest: c}
			if e.redirect != nil {
				inv.dest = e.redirect
			}
			t.batch[k] = inv
		}
		inv.names = append(inv.names, n)
		t.queued++
	}
	t.mu.Lock()
	for _, n := range names {
		if n == "" {
			continue
		}
		for c := range t.keys[n] {
			e := t.clients[c]
			delete(e.names, n)
			if !own(e) {
				add(c, e, n, "")
			}
		}
		delete(t.keys, n)
	}
	for c, e := range t.clients {
		if !e.bcast || own(e) {
			continue
		}
		for _, n := range names {
			if p, ok := prefixOf(e.prefixes, n); n != "" && ok {
				add(c, e, n, p)
			}
		}
	}
	full := t.queued >= batchFlush
	t.mu.Unlock()
	if full {
		t.flush(h)
	}
}

// expiredOnArrival says whether ch is a value record whose expiry has
// passed by the time the follower reads it (a SET PX 1 in a transaction
// that then sleeps): Redis expires such a key lazily, as nobody's write.
func expiredOnArrival(h *Hub, ch *Change) bool {
	if ch.ExpiresAt == 0 || ch.Delete || ch.ExpiryChange || ch.Counter || ch.Event != "" {
		return false
	}
	return uint64(h.now().UnixMilli()) >= ch.ExpiresAt
}

// flush sends the invalidations queued in the follower's round.
func (t *tracker) flush(h *Hub) {
	t.mu.Lock()
	batch := t.batch
	t.batch, t.queued = nil, 0
	t.mu.Unlock()
	for _, inv := range batch {
		inv.dest.c.Push(invalidateFrame(inv.dest.c.ProtoNow(), inv.names))
		h.Counters.Invalidations.Add(int64(len(inv.names)))
	}
}

// prefixOf is the one of a BCAST client's prefixes name is under (BCAST
// without PREFIX has the prefix ""). The prefixes are sorted and never
// overlap, so the only one that can be is the greatest not above name
// (any between it and name would start with it): a binary search, as
// the follower asks it of every changed key for every BCAST client, and
// a client may hold any number of prefixes.
func prefixOf(prefixes []string, name string) (string, bool) {
	i, found := slices.BinarySearch(prefixes, name)
	if found {
		return name, true
	}
	if i > 0 && strings.HasPrefix(name, prefixes[i-1]) {
		return prefixes[i-1], true
	}
	return "", false
}

// invalidateFrame is the invalidation of names: a RESP3 push, or on a
// RESP2 redirect target the message of __redis__:invalidate.
func invalidateFrame(proto int, names []string) []byte {
	var b []byte
	if proto == 3 {
		b = append(b, ">2\r\n$10\r\ninvalidate\r\n"...)
	} else {
		b = append(b, "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"...)
	}
	b = codec.AppendArray(b, len(names))
	for _, n := range names {
		b = codec.AppendBulkString(b, n)
	}
	return b
}

// ClientTracking is CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]...
// [BCAST] [OPTIN] [OPTOUT] [NOLOOP], read and refused as Redis 7.0 reads
// it: the options first (a REDIRECT to a client that is not there is
// refused then), then ON or OFF, then the checks of ON's modes in
// Redis's order and words.
func (c *Peer) ClientTracking(a [][]byte) {
	var st trackState
	var target *Peer
	for i := 3; i < len(a); i++ {
		more := i+1 < len(a)
		switch opt := strings.ToUpper(session.Str(a[i])); {
		case opt == "REDIRECT" && more:
			i++
			if st.redirect != 0 {
				c.sess.Err("ERR A client can only redirect to a single other client")
				return
			}
			id, ok := session.Int(a[i])
			if !ok {
				c.sess.Err("ERR value is not an integer or out of range")
				return
			}
			o := c.hub.cfg.ByID(id)
			if o == nil {
				c.sess.Err("ERR The client ID you want redirect to does not exist")
				return
			}
			target = o.Pushes()
			st.redirect = id
		case opt == "PREFIX" && more:
			i++
			st.prefixes = append(st.prefixes, string(a[i]))
		case opt == "BCAST":
			st.bcast = true
		case opt == "OPTIN":
			st.optin = true
		case opt == "OPTOUT":
			st.optout = true
		case opt == "NOLOOP":
			st.noloop = true
		default:
			c.sess.Err("ERR syntax error")
			return
		}
	}
	switch strings.ToUpper(session.Str(a[2])) {
	case "ON":
		st.on = true
	case "OFF":
		c.hub.track.off(c)
		c.trk, c.sess.Tracking = trackState{}, false
		c.sess.OK()
		return
	default:
		c.sess.Err("ERR syntax error")
		return
	}
	const reenable = " before disabling tracking for this client, and then re-enabling it with a different mode."
	switch {
	case len(st.prefixes) > 0 && !st.bcast:
		c.sess.Err("ERR PREFIX option requires BCAST mode to be enabled")
		return
	case c.trk.on && c.trk.bcast != st.bcast:
		c.sess.Err("ERR You can't switch BCAST mode on/off" + reenable)
		return
	case st.bcast && (st.optin || st.optout):
		c.sess.Err("ERR OPTIN and OPTOUT are not compatible with BCAST")
		return
	case st.optin && st.optout:
		c.sess.Err("ERR You can't specify both OPTIN mode and OPTOUT mode")
		return
	case c.trk.on && (st.optin && c.trk.optout || st.optout && c.trk.optin):
		c.sess.Err("ERR You can't switch OPTIN/OPTOUT mode" + reenable)
		return
	case st.bcast && !c.prefixesApart(st.prefixes):
		return
	}
	if target == c {
		target = nil // its own invalidations, as without REDIRECT
	}
	if c.sess.Proto == 2 && target == nil {
		// Redis would accept this and drop the invalidations; a client
		// cache that is never told is stale, so it is refused.
		c.sess.Err("ERR tracking over RESP2 needs REDIRECT <client-id> of a connection subscribed to __redis__:invalidate (or HELLO 3 for pushes)")
		return
	}
	if st.bcast {
		// BCAST without PREFIX is the prefix "" (every key), as Redis
		// keeps it; the prefixes add to those the client has, in a new
		// slice (the follower reads the old one), in Redis's order.
		if len(st.prefixes) == 0 {
			st.prefixes = []string{""}
		}
		st.prefixes = append(slices.Clone(c.trk.prefixes), st.prefixes...)
		slices.Sort(st.prefixes)
		st.prefixes = slices.Compact(st.prefixes)
	}
	c.pushed.Store(true)
	c.hub.cfg.Follow()
	c.trk, c.sess.Tracking = st, st.on
	c.hub.track.on(c, st, target)
	c.sess.OK()
}

// prefixesApart checks BCAST's new prefixes as Redis's
// checkPrefixCollisionsOrReply does: none may be a prefix of, or have as
// a prefix, one the client has or another new one; false when it
// answered the error, which names the pair Redis names (the first new
// prefix in the command's order that overlaps any, and the first prefix
// it overlaps: the client's in sorted order, then the new ones after it).
func (c *Peer) prefixesApart(prefixes []string) bool {
	i, old, ok := firstOverlap(c.trk.prefixes, prefixes)
	switch {
	case i < 0:
		return true
	case ok:
		c.sess.Err("ERR Prefix '" + session.CString([]byte(prefixes[i]), len(prefixes[i])) + "' overlaps with an existing prefix '" + session.CString([]byte(old), len(old)) +
			"'. Prefixes for a single client must not overlap.")
		return false
	}
	p := prefixes[i]
	for _, q := range prefixes[i+1:] {
		if strings.HasPrefix(p, q) || strings.HasPrefix(q, p) {
			c.sess.Err("ERR Prefix '" + session.CString([]byte(p), len(p)) + "' overlaps with another provided prefix '" + session.CString([]byte(q), len(q)) +
				"'. Prefixes for a single client must not overlap.")
			break
		}
	}
	return false
}

// firstOverlap is the index of the first of the new prefixes that is a
// prefix of, or has as a prefix, another new one or one of the client's
// (old: sorted, none a prefix of another), -1 for none; with the first
// of the client's it overlaps, in sorted order, if any (ok). It takes
// O(n log n) of the prefixes, not the O(n²) of comparing every pair: a
// client may send 32,767 prefixes in one command, again and again.
func firstOverlap(old, prefixes []string) (first int, oldOne string, ok bool) {
	overlaps := make([]bool, len(prefixes))
	// Among the new ones, in sorted order: a stack of the prefixes of the
	// current one (each a prefix of the next above it). Any prefix of a
	// later one is still on the stack when it comes, as every one between
	// them in sorted order starts with it too.
	order := make([]int, len(prefixes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(prefixes[a], prefixes[b]) })
	var stack []int
	for _, i := range order {
		for len(stack) > 0 && !strings.HasPrefix(prefixes[i], prefixes[stack[len(stack)-1]]) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			overlaps[i], overlaps[stack[len(stack)-1]] = true, true
		}
		stack = append(stack, i)
	}
	for i, p := range prefixes {
		if o, found := oldOverlap(old, p); found {
			return i, o, true
		}
		if overlaps[i] {
			return i, "", false
		}
	}
	return -1, "", false
}

// oldOverlap is the first of the sorted, non-overlapping prefixes old
// that is a prefix of p or has p as a prefix: the greatest not above p
// (the only one that can be a prefix of p, as in prefixOf), else the
// least not below it.
func oldOverlap(old []string, p string) (string, bool) {
	if o, ok := prefixOf(old, p); ok {
		return o, true
	}
	if i, _ := slices.BinarySearch(old, p); i < len(old) && strings.HasPrefix(old[i], p) {
		return old[i], true
	}
	return "", false
}

// ClientCaching is CLIENT CACHING YES|NO, until a command other than
// CLIENT (see exec). Its arity is checked by the command table (clientArity).
func (c *Peer) ClientCaching(a [][]byte) {
	if !c.trk.on {
		c.sess.Err("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
		return
	}
	switch strings.ToUpper(session.Str(a[2])) {
	case "YES":
		if !c.trk.optin {
			c.sess.Err("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
			return
		}
		c.caching = 1
	case "NO":
		if !c.trk.optout {
			c.sess.Err("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
			return
		}
		c.caching = -1
	default:
		c.sess.Err("ERR syntax error")
		return
	}
	c.sess.OK()
}

// TrackingInfo is CLIENT TRACKINGINFO.
func (c *Peer) TrackingInfo() {
	var flags []string
	tk := c.trk
	if !tk.on {
		flags = append(flags, "off")
	} else {
		flags = append(flags, "on")
		// Redis's order: CLIENT CACHING's flag follows its mode's.
		for _, f := range []struct {
			on   bool
			name string
		}{{tk.bcast, "bcast"}, {tk.optin, "optin"}, {tk.optin && c.caching == 1, "caching-yes"},
			{tk.optout, "optout"}, {tk.optout && c.caching == -1, "caching-no"}, {tk.noloop, "noloop"}} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
	}
	c.sess.Map(3)
	c.sess.BulkString("flags")
	c.sess.Set(len(flags))
	for _, f := range flags {
		c.sess.BulkString(f)
	}
	c.sess.BulkString("redirect")
	switch {
	case !tk.on:
		c.sess.Int(-1)
	default:
		c.sess.Int(tk.redirect)
	}
	c.sess.BulkString("prefixes")
	c.sess.Array(len(tk.prefixes))
	for _, p := range tk.prefixes {
		c.sess.BulkString(p)
	}
}
