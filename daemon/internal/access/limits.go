package access

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cachecast/cachecast/wire"
)

// The limits that keep one local user from starving the node: connections
// (--max-connections, --max-connections-per-uid), subscription streams
// (--max-streams, --max-streams-per-uid) and the bytes of request bodies
// held in memory (--max-body-memory, --max-body-memory-per-uid). The node's
// limit reached answers 503 busy; a uid's share reached while the node has
// room answers 429 too_many.
const (
	// spareConnections are admitted beyond the limits when every counted
	// connection is running a request: they are answered for /healthz and
	// /readyz, anything else gets busy or too_many, and they close
	// after one answer.
	spareConnections = 16

	// burstBytes: once request bodies in memory reached this much, the
	// memory is handed back to the system (debug.FreeOSMemory) after the
	// burst, freeDelay after the bodies fell to a quarter of their peak.
	// Go would otherwise keep it for minutes.
	burstBytes = 64 << 20
	freeDelay  = 500 * time.Millisecond

	// readGrace: a connection that has sent nothing yet is taken as idle
	// once the daemon has waited this long in its first read. (One that
	// has sent part of a request, or had one answered, is idle as soon as
	// the daemon waits for it.)
	readGrace = 100 * time.Millisecond
	// evictWait is the longest a new connection waits for room while no
	// waiting connection is idle yet by that rule (just accepted, not read
	// yet); then the one waiting longest goes. admitPoll is how often it
	// looks again.
	evictWait = time.Second
	admitPoll = 20 * time.Millisecond
)

// peerKey is whose share a connection counts against: its uid; a TCP
// client's user, or the unauthenticated TCP clients together; or the
// callers whose credentials are unknown, together.
type peerKey struct {
	known bool
	uid   uint32
	tcp   bool
	user  string
}

// keyOf is c's share: its uid when the kernel told it (AUTH on a Unix
// socket does not change it), else its user's over TCP.
func keyOf(c Caller) peerKey {
	if c.Known {
		return peerKey{known: true, uid: c.UID}
	}
	return peerKey{tcp: c.TCP, user: c.User}
}

// connState is where a connection is, for the limits.
type connState int

const (
	connUncounted connState = iota // not admitted yet, closed or evicted: counts nothing
	connWaiting                    // between requests: idle keep-alive, or sending its headers
	connBusy                       // a request is being served
	connStream                     // a subscription: counted in streams, not connections
)

// peerCount is one uid's connections and streams.
type peerCount struct {
	open, streams int
	waiting       list.List // of *Conn, the longest waiting first
}

// Limits counts the local API's connections and streams. A connection
// that waits for a request (idle keep-alive, or still sending its headers)
// costs the node little and serves no one, so at a limit a new connection
// closes the one that has waited longest (its uid's own first, at its
// uid's limit) instead of waiting in the backlog behind it. Connections
// that run a request are never closed for another.
type Limits struct {
	maxConns, maxConnsPerUID     int
	maxStreams, maxStreamsPerUID int
	conns                        Gauge   // cachecast_api_connections
	evicted                      Counter // cachecast_api_connections_evicted_total

	mu           sync.Mutex
	open         int           // connections counted against --max-connections
	streams      int           // open subscription streams
	spares       int           // connections admitted over the limits
	starved      atomic.Bool   // an Accept waits for room (admitLater)
	room         chan struct{} // signals it
	waiting      list.List     // counted connections waiting, the longest first
	spareWaiting list.List     // spare connections waiting
	peers        map[peerKey]*peerCount
}

// Counter is the part of a Prometheus counter the limits use.
type Counter interface{ Inc() }

// LimitsConfig are the bounds of Limits, from their flags.
type LimitsConfig struct {
	MaxConnections       int // --max-connections
	MaxConnectionsPerUID int // --max-connections-per-uid
	MaxStreams           int // --max-streams
	MaxStreamsPerUID     int // --max-streams-per-uid
}

// NewLimits makes the limits of c; conns counts the open connections
// (cachecast_api_connections), evicted those closed to make room.
func NewLimits(c LimitsConfig, conns Gauge, evicted Counter) *Limits {
	return &Limits{
		maxConns: c.MaxConnections, maxConnsPerUID: c.MaxConnectionsPerUID,
		maxStreams: c.MaxStreams, maxStreamsPerUID: c.MaxStreamsPerUID,
		conns: conns, evicted: evicted, peers: map[peerKey]*peerCount{}, room: make(chan struct{}, 1),
	}
}

func (l *Limits) peer(k peerKey) *peerCount {
	p := l.peers[k]
	if p == nil {
		p = &peerCount{}
		l.peers[k] = p
	}
	return p
}

// dropPeer forgets a uid with nothing open.
func (l *Limits) dropPeer(k peerKey, p *peerCount) {
	if p.open == 0 && p.streams == 0 {
		delete(l.peers, k)
	}
}

// admission is admit's verdict on a new connection.
type admission int

const (
	admitted   admission = iota
	admitLater           // room can be made soon: call again
	admitNone            // no room, not even as a spare: close it
)

// admit counts a new connection, making room by evicting waiting ones. A
// waiting connection is evicted only when it is idle (see idle): one just
// accepted and not read yet may hold a whole request. When only such ones
// are there, admit says admitLater, unless force (after evictWait), when
// the longest waiting goes anyway. With nothing waiting at all, c becomes
// a spare.
func (l *Limits) admit(c *Conn, force bool) admission {
	var victims []*Conn
	defer func() {
		for _, v := range victims {
			l.evicted.Inc()
			_ = v.UnixConn.Close() // its server goroutine then sees the end
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	busy := func() *wire.Error {
		return wire.Errorf(wire.CodeBusy, "every connection is running a request (--max-connections %d); retry", l.maxConns)
	}
	p := l.peer(c.key)
	if p.open >= l.maxConnsPerUID {
		v := l.evictLocked(&p.waiting, force)
		if v == nil {
			if p.waiting.Len() > 0 {
				return l.later(c, p)
			}
			why := c.limitReached()
			if l.open >= l.maxConns {
				why = busy()
			}
			return l.admitSpare(c, p, &victims, why, force)
		}
		victims = append(victims, v)
	}
	for l.open >= l.maxConns {
		v := l.evictLocked(&l.waiting, force)
		if v == nil {
			if l.waiting.Len() > 0 {
				return l.later(c, p)
			}
			return l.admitSpare(c, p, &victims, busy(), force)
		}
		victims = append(victims, v)
	}
	l.starved.Store(false)
	// An eviction above may have uncounted the uid's last connection,
	// and with it dropped p: count c in the uid's entry of now.
	p = l.peer(c.key)
	l.open++
	p.open++
	c.state = connWaiting
	c.elem = l.waiting.PushBack(c)
	c.uidElem = p.waiting.PushBack(c)
	return admitted
}

// later asks for a signal on room (a connection read, or uncounted).
func (l *Limits) later(c *Conn, p *peerCount) admission {
	l.dropPeer(c.key, p)
	l.starved.Store(true)
	return admitLater
}

// signalRoom wakes an Accept waiting in admitLater.
func (l *Limits) signalRoom() {
	if l.starved.Load() {
		select {
		case l.room <- struct{}{}:
		default:
		}
	}
}

// evictLocked uncounts the idle connection of ws that has waited longest
// (with force, the longest waiting of all) and returns it for closing; nil
// when there is none.
func (l *Limits) evictLocked(ws *list.List, force bool) *Conn {
	now := time.Now().UnixNano()
	for e := ws.Front(); e != nil; e = e.Next() {
		v := e.Value.(*Conn)
		if force || v.idle(now) {
			l.uncountLocked(v)
			return v
		}
	}
	return nil
}

// admitSpare lets c in over the limits, for health checks; the oldest
// waiting spare makes room when every spare is taken.
func (l *Limits) admitSpare(c *Conn, p *peerCount, victims *[]*Conn, why *wire.Error, force bool) admission {
	l.dropPeer(c.key, p)
	if l.spares >= spareConnections {
		v := l.evictLocked(&l.spareWaiting, force)
		if v == nil {
			if l.spareWaiting.Len() > 0 {
				l.starved.Store(true)
				return admitLater
			}
			l.starved.Store(false)
			return admitNone
		}
		*victims = append(*victims, v)
	}
	l.starved.Store(false)
	l.spares++
	c.spare = why
	c.state = connWaiting
	c.elem = l.spareWaiting.PushBack(c)
	return admitted
}

// uncountLocked takes c out of every count; it then counts nothing.
func (l *Limits) uncountLocked(c *Conn) {
	switch c.state {
	case connUncounted:
		return
	case connWaiting:
		l.unwaitLocked(c)
	}
	c.elem, c.uidElem = nil, nil
	if c.spare != nil {
		l.spares--
		c.state = connUncounted
		l.signalRoom()
		return
	}
	p := l.peers[c.key]
	if c.state == connStream {
		l.streams--
		p.streams--
	} else {
		l.open--
		p.open--
	}
	c.state = connUncounted
	l.dropPeer(c.key, p)
	l.signalRoom()
}

// unwaitLocked takes a waiting c off the lists of the connections that
// wait for a request (its uid's too).
func (l *Limits) unwaitLocked(c *Conn) {
	if c.spare != nil {
		l.spareWaiting.Remove(c.elem)
	} else {
		l.waiting.Remove(c.elem)
		l.peers[c.key].waiting.Remove(c.uidElem)
	}
	c.elem, c.uidElem = nil, nil
}

// ConnState is the http.Server's ConnState hook: it moves a connection
// between waiting and busy, and uncounts it once closed.
func (l *Limits) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*Conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateActive:
		if c.state == connWaiting {
			l.unwaitLocked(c)
			c.state = connBusy
		}
	case http.StateIdle:
		if c.state == connBusy {
			c.state = connWaiting
			if c.spare != nil {
				c.elem = l.spareWaiting.PushBack(c)
			} else {
				c.elem = l.waiting.PushBack(c)
				c.uidElem = l.peers[c.key].waiting.PushBack(c)
			}
		}
	case http.StateClosed, http.StateHijacked:
		l.uncountLocked(c)
	}
}

// StartStream moves a busy connection from the connections to the streams,
// or says which limit is reached.
func (l *Limits) StartStream(c *Conn) *wire.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.state != connBusy || c.spare != nil {
		return wire.Errorf(wire.CodeBusy, "no subscription on this connection")
	}
	p := l.peers[c.key]
	switch {
	case l.streams >= l.maxStreams:
		return wire.Errorf(wire.CodeBusy, "%d subscriptions are open, the node's limit (--max-streams %d); retry", l.streams, l.maxStreams)
	case p.streams >= l.maxStreamsPerUID:
		return wire.Errorf(wire.CodeTooMany, "%s has %d subscriptions open, its share (--max-streams-per-uid %d)",
			c.caller.Who(), p.streams, l.maxStreamsPerUID)
	}
	l.open--
	p.open--
	l.streams++
	p.streams++
	c.state = connStream
	l.signalRoom()
	return nil
}

// EndStream counts c as a connection again.
func (l *Limits) EndStream(c *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.state != connStream {
		return
	}
	p := l.peers[c.key]
	l.streams--
	p.streams--
	l.open++
	p.open++
	c.state = connBusy
}

// Budget bounds the bytes of request bodies held in memory over all
// connections, and each uid's share of them. A body of known length is
// counted whole before it is read (so it is refused before a byte of it is
// read); a chunked one as its buffer grows.
type Budget struct {
	limit, perUID int64

	mu       sync.Mutex
	inFlight int64
	byPeer   map[peerKey]int64
	peak     int64       // the most in flight since the last hand-back
	free     *time.Timer // hands the memory of a burst back to the system
}

// NewBudget makes a budget of limit bytes (--max-body-memory), perUID of
// them one uid's (--max-body-memory-per-uid).
func NewBudget(limit, perUID int64) *Budget {
	b := &Budget{limit: limit, perUID: perUID, byPeer: map[peerKey]int64{}}
	b.free = time.AfterFunc(time.Hour, debug.FreeOSMemory)
	b.free.Stop()
	return b
}

// Holder is a connection whose request bytes the budget counts: a
// connection of the daemon's Unix listeners (*Conn) or of the Redis
// door's TCP listener (*TCPConn).
type Holder interface {
	// holding is the connection's count; nil: not counted.
	holding() *holding
	// Caller is whose share the bytes count against (keyOf).
	Caller() Caller
}

// holding is what one connection holds in the budget, and whose share
// it is counted in (a TCP connection's share changes when it
// authenticates). Only the connection's own goroutine touches it.
type holding struct {
	n   int64
	key peerKey
}

// Hold counts n more bytes of h's request, or says which limit they
// would pass. Without a Holder (not the daemon's listener) nothing is
// counted.
func (b *Budget) Hold(h Holder, n int64) *wire.Error {
	if h == nil || n <= 0 {
		return nil
	}
	hd := h.holding()
	if hd == nil {
		return nil
	}
	c := h.Caller()
	key := keyOf(c)
	b.mu.Lock()
	defer b.mu.Unlock()
	if hd.n > 0 && hd.key != key {
		// Authenticated since: what it holds moves to its user's share.
		b.uncountLocked(hd.key, hd.n)
		b.byPeer[key] += hd.n
	}
	hd.key = key
	mine := b.byPeer[key]
	switch {
	case b.inFlight+n > b.limit:
		return wire.Errorf(wire.CodeBusy, "requests take %s of memory; %s more would pass --max-body-memory (%s); retry",
			wire.FormatSize(b.inFlight), wire.FormatSize(n), wire.FormatSize(b.limit))
	case mine+n > b.perUID:
		return wire.Errorf(wire.CodeTooMany, "%s has %s of requests in memory; %s more would pass its share (--max-body-memory-per-uid %s)",
			c.Who(), wire.FormatSize(mine), wire.FormatSize(n), wire.FormatSize(b.perUID))
	}
	b.byPeer[key] = mine + n
	b.inFlight += n
	b.peak = max(b.peak, b.inFlight)
	hd.n += n
	return nil
}

// uncountLocked takes n bytes off key's share (not off inFlight).
func (b *Budget) uncountLocked(key peerKey, n int64) {
	if left := b.byPeer[key] - n; left > 0 {
		b.byPeer[key] = left
	} else {
		delete(b.byPeer, key)
	}
}

// ReleaseHeld gives back what h's request held, once it is answered.
func (b *Budget) ReleaseHeld(h Holder) {
	b.Release(h, math.MaxInt64)
}

// Release gives back n of the bytes h holds (all of them, if it holds
// fewer).
func (b *Budget) Release(h Holder, n int64) {
	if h == nil || n <= 0 {
		return
	}
	hd := h.holding()
	if hd == nil || hd.n == 0 {
		return
	}
	n = min(n, hd.n)
	hd.n -= n
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight -= n
	b.uncountLocked(hd.key, n)
	if b.peak >= burstBytes && b.inFlight <= b.peak/4 {
		b.peak = b.inFlight
		b.free.Reset(freeDelay)
	}
}

// InUse is the bytes of request bodies held now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}

// ReadAll reads a body of unknown length, at most limit bytes (more is
// the reader's error), counting its buffer against the budget as it grows.
// An *wire.Error is a limit of the budget.
func (b *Budget) ReadAll(c Holder, r io.Reader, limit int64) ([]byte, error) {
	size := min(4<<10, limit+1)
	if e := b.Hold(c, size); e != nil {
		return nil, e
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			// Double, but never past limit+1: a full buffer of that is
			// over the limit, which the reader says.
			size := min(2*int64(cap(buf)), limit+1)
			if size == int64(cap(buf)) {
				return nil, fmt.Errorf("the body passes %d bytes", limit) // the reader said nothing
			}
			if e := b.Hold(c, size-int64(cap(buf))); e != nil {
				return nil, e
			}
			nb := make([]byte, len(buf), size)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// Gauge is the part of a Prometheus gauge the listener uses.
type Gauge interface {
	Inc()
	Dec()
}

// Listener reads each connection's peer credentials once, at accept,
// and admits it under the connection limits (Limits) if it has them.
// Accept does not wait for a free slot: a full node makes room by closing
// a connection that waits for nothing, so a new one is never stuck in the
// backlog behind idle ones. Without limits (the Redis socket: its server
// has no ConnState to tell idle connections, so limitListener bounds it)
// it only reads the credentials.
type Listener struct {
	*net.UnixListener
	limits *Limits // nil: none
	path   string  // the socket's path, removed by the first Close
	unlink sync.Once
}

// Close removes the socket's path and stops the listener. The path goes
// first, so that nobody finds it refusing; and once only, so that a later
// Close does not remove the socket of a daemon started since.
func (l *Listener) Close() error {
	var err error
	l.unlink.Do(func() {
		if rerr := os.Remove(l.path); !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
	})
	if cerr := l.UnixListener.Close(); cerr != nil {
		err = cerr
	}
	return err
}

// Addr is the socket's path, not the name it was bound under.
func (l *Listener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Accept returns the next connection the limits admit.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		c := &Conn{UnixConn: uc, caller: peerCaller(uc), l: l}
		c.key = keyOf(c.caller)
		if l.limits == nil {
			return c, nil
		}
		l.limits.conns.Inc()
		if l.admit(c) {
			return c, nil
		}
		_ = c.Close()
	}
}

// admit asks the limits about c, waiting up to evictWait for room.
func (l *Listener) admit(c *Conn) bool {
	deadline := time.Now().Add(evictWait)
	for {
		force := !time.Now().Before(deadline)
		switch l.limits.admit(c, force) {
		case admitted:
			return true
		case admitNone:
			return false
		}
		t := time.NewTimer(min(admitPoll, time.Until(deadline)))
		select {
		case <-l.limits.room:
		case <-t.C:
		}
		t.Stop()
	}
}

// Conn is an accepted connection, its caller and its place in the
// limits (guarded by Limits.mu, but hold, which only the
// connection's own goroutine touches).
type Conn struct {
	*net.UnixConn
	login     // the Redis socket's AUTH, which narrows the caller's roles
	caller    Caller
	key       peerKey
	l         *Listener
	closeOnce sync.Once

	readSince     atomic.Int64 // when the Read the daemon is in began (UnixNano); 0 outside one
	hasRead       atomic.Bool  // a Read returned data, or a request was answered
	state         connState
	spare         *wire.Error   // set on a spare connection: the answer to anything but health
	elem, uidElem *list.Element // in the waiting lists, while waiting
	hold          holding       // the current request's bytes counted in the budget
	unread        []byte        // given back by Unread, read first
}

// Caller is who connected, as the kernel said when it did, and the user
// it authenticated as since (the Redis socket's AUTH), if any.
func (c *Conn) Caller() Caller {
	cl := c.caller
	cl.User = c.User()
	return cl
}

func (c *Conn) holding() *holding {
	if c == nil {
		return nil
	}
	return &c.hold
}

// Spare is nil on a connection admitted under the limits; on a spare one
// (admitted over them, for health checks) it is the answer to anything
// but health.
func (c *Conn) Spare() *wire.Error { return c.spare }

// LocalAddr is the socket's path (CLIENT LIST's laddr, MONITOR's lines),
// not the name it was bound under.
func (c *Conn) LocalAddr() net.Addr { return c.l.Addr() }

// Counts is how many connections are counted against --max-connections,
// how many of them wait for a request, and how many subscription streams
// are open (counted against --max-streams instead), for tests.
func (l *Limits) Counts() (open, waiting, streams int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.waiting.Len(), l.streams
}

// limitReached is the answer of a spare admitted over its uid's share.
func (c *Conn) limitReached() *wire.Error {
	return wire.Errorf(wire.CodeTooMany, "%s has every connection of its share running a request (--max-connections-per-uid %d)",
		c.caller.Who(), c.l.limits.maxConnsPerUID)
}

// Unread gives b back to be read again: the next Reads return it before
// anything more from the socket. The local API's fast lane hands a
// connection to net/http so, with the request it did not answer. Not
// safe beside a Read.
func (c *Conn) Unread(b []byte) { c.unread = append(c.unread[:0], b...) }

// Read notes when the daemon waits for the client (see idle).
func (c *Conn) Read(b []byte) (int, error) {
	if len(c.unread) > 0 {
		n := copy(b, c.unread)
		c.unread = c.unread[n:]
		return n, nil
	}
	if c.l.limits == nil {
		return c.UnixConn.Read(b)
	}
	c.readSince.Store(time.Now().UnixNano())
	c.l.limits.signalRoom()
	n, err := c.UnixConn.Read(b)
	c.readSince.Store(0)
	if n > 0 {
		c.hasRead.Store(true)
	}
	return n, err
}

// idle reports whether the daemon is waiting for the client: in a Read of
// a connection that has sent something before (part of its headers, or a
// whole request that was answered), or in its first Read for readGrace.
// A new connection whose request is on its way, not read yet, is not idle.
func (c *Conn) idle(now int64) bool {
	since := c.readSince.Load()
	return since != 0 && (c.hasRead.Load() || now-since >= int64(readGrace))
}

// Close closes the connection and gives its slot back to the limits.
func (c *Conn) Close() error {
	err := c.UnixConn.Close()
	if c.l.limits == nil {
		return err
	}
	c.closeOnce.Do(func() {
		c.l.limits.mu.Lock()
		c.l.limits.uncountLocked(c)
		c.l.limits.mu.Unlock()
		c.l.limits.conns.Dec()
	})
	return err
}

// Who names the caller in an error message.
func (c Caller) Who() string {
	switch {
	case c.User != "" && c.Known:
		return fmt.Sprintf("uid %d as user %s", c.UID, c.User)
	case c.User != "":
		return "user " + c.User
	case c.TCP:
		return "an unauthenticated TCP client"
	case !c.Known:
		return "a caller of unknown credentials"
	}
	return fmt.Sprintf("uid %d", c.UID)
}

type connKey struct{}

// ConnContext puts the connection and its caller into every request's
// context.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*Conn); ok {
		ctx = context.WithValue(ctx, connKey{}, cc)
		return context.WithValue(ctx, callerKey{}, cc.caller)
	}
	return ctx
}

// ConnFrom is the request's connection; nil when it is not the daemon's.
func ConnFrom(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}
