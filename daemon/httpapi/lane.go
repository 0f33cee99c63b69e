package httpapi

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// The fast lane: the plain GET of a key, the request a cache is read with
// one at a time, answered on the connection's goroutine without net/http.
// net/http spends about 25 µs of CPU on each request of a keep-alive
// connection beyond the handler's work (a goroutine started and stopped
// for the background read, deadlines, a context, the header map), which
// is most of such a GET on a Unix socket.
//
// Each connection the socket accepts starts in the lane. The lane answers
// a request itself only when its head arrived whole, is exactly the
// common shape (GET /v1/topics/{topic}/keys/{key} HTTP/1.1, a path that
// needs no unescaping or cleaning, no header but Host, User-Agent, Accept
// and Accept-Encoding) and its answer is the value or a plain error (no
// such key, a bad name): any other request, and any other answer (a
// refusal by role, a spare connection, catching up) hands the
// connection, with the bytes read so far, to the http.Server for good,
// which reads that request again and answers it. So the lane
// only ever writes what net/http would write for the same request (the
// tests compare the two byte for byte), and everything else the API does
// stays net/http's.
//
// A connection in the lane keeps net/http's bookkeeping: the limits see it
// go busy and idle (Limits.ConnState), the handlers gate counts its
// request, its read and write deadlines are the server's timeouts, and the
// route's latency is observed.

// laneBuf is how much of a request's head the lane reads: a longer one
// goes to net/http. laneKeep is the most answer memory a connection keeps
// between requests (thousands of connections may each have read a
// value of --max-value-size once).
const (
	laneBuf  = 4 << 10
	laneKeep = 64 << 10
)

// LaneConfig are the timeouts of the http.Server the lane stands in front
// of, which it keeps as net/http does.
type LaneConfig struct {
	ReadHeaderTimeout time.Duration // a new connection's first request (ReadTimeout when zero)
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration // from the request to its answer written
	IdleTimeout       time.Duration // between requests (ReadTimeout when zero)
}

// Lane is the local API's listener for its http.Server, with the fast
// lane in front (see above): Accept returns the connections the lane
// hands over.
type Lane struct {
	net.Listener
	api    *Server
	cfg    LaneConfig
	served atomic.Uint64

	handoff   chan net.Conn
	start     sync.Once      // the accept loop, at the first Accept
	accepting sync.WaitGroup // the accept loop
	conns     sync.WaitGroup // the connections' goroutines

	mu      sync.Mutex
	closing bool
	idle    map[*access.Conn]bool // the lane's connections: true while waiting for a request
	err     error                 // the listener's error, once it stops
	stopped chan struct{}         // closed once err is set
	quit    chan struct{}         // closed by Close
}

// NewLane makes the fast lane of a on the connections of ln (an
// access.Listener's; any other kind goes to net/http as it is). It
// accepts from the first Accept on.
func NewLane(a *Server, ln net.Listener, cfg LaneConfig) *Lane {
	return &Lane{Listener: ln, api: a, cfg: cfg, handoff: make(chan net.Conn),
		idle: map[*access.Conn]bool{}, stopped: make(chan struct{}), quit: make(chan struct{})}
}

// acceptLoop accepts the socket's connections and starts each in the lane.
func (l *Lane) acceptLoop() {
	var backoff time.Duration
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Temporary() && l.pause(&backoff) {
				continue // as http.Server.Serve does (out of file descriptors)
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			close(l.stopped)
			return
		}
		backoff = 0
		c, ok := nc.(*access.Conn)
		if !ok || c.Spare() != nil || !l.add(c) {
			l.give(nc)
			continue
		}
		l.conns.Go(func() { l.serve(c) })
	}
}

// pause waits before the next Accept after a temporary error, as
// http.Server.Serve does: 5 ms, doubling up to a second. False when the
// lane closed meanwhile.
func (l *Lane) pause(backoff *time.Duration) bool {
	*backoff = min(max(2**backoff, 5*time.Millisecond), time.Second)
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.quit:
		return false
	}
}

// Accept returns the next connection handed to net/http.
func (l *Lane) Accept() (net.Conn, error) {
	l.start.Do(func() { l.accepting.Go(l.acceptLoop) })
	select {
	case c := <-l.handoff:
		return c, nil
	case <-l.stopped:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// give hands c to net/http, or closes it once net/http accepts no more.
func (l *Lane) give(c net.Conn) {
	select {
	case l.handoff <- c:
	case <-l.stopped:
		_ = c.Close()
	}
}

// add counts c in the lane; false once it is closing.
func (l *Lane) add(c *access.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.idle[c] = false
	return true
}

// setIdle marks c waiting for a request (or not); false when the lane
// is closing, and c is to close.
func (l *Lane) setIdle(c *access.Conn, idle bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.idle[c] = idle
	return !l.closing
}

// remove takes c out of the lane.
func (l *Lane) remove(c *access.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.idle, c)
}

// Close stops accepting (the http.Server's Shutdown and Close call it)
// and closes the lane's connections that wait for a request; the others
// close after their answer, as net/http's do at Shutdown.
func (l *Lane) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	if !l.closing {
		close(l.quit)
	}
	l.closing = true
	for c, idle := range l.idle {
		if idle {
			_ = c.Close()
		}
	}
	l.mu.Unlock()
	return err
}

// Shutdown closes the lane (Close) and waits for its connections'
// goroutines until ctx is done, then closes every connection left and
// waits for their goroutines to return.
func (l *Lane) Shutdown(ctx context.Context) {
	_ = l.Close()
	done := make(chan struct{})
	go func() {
		l.accepting.Wait()
		l.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	l.mu.Lock()
	for c := range l.idle {
		_ = c.Close()
	}
	l.mu.Unlock()
	<-done
}

// Served is how many requests the lane answered itself (counted before
// the answer is written).
func (l *Lane) Served() uint64 { return l.served.Load() }

// laneConn is a connection in the lane: its buffer of read bytes and its
// answer's.
type laneConn struct {
	c        *access.Conn
	in, out  []byte
	value    []byte // where a value the view keeps in its file is read
	deadline bool   // a read deadline is set
}

// serve runs c in the lane until it closes or goes to net/http. A panic
// closes c and is logged, as net/http recovers one of a handler.
func (l *Lane) serve(c *access.Conn) {
	defer func() {
		if p := recover(); p != nil {
			l.api.log.Error("panic serving a request in the fast lane; its connection closed", zap.Any("panic", p), zap.Stack("stack"))
			l.remove(c)
			_ = c.Close()
		}
	}()
	lc := &laneConn{c: c, in: make([]byte, 0, laneBuf)}
	wait := l.cfg.ReadHeaderTimeout
	if wait == 0 {
		wait = l.cfg.ReadTimeout
	}
	for {
		if len(lc.in) == 0 && !l.read(lc, wait) {
			l.remove(c)
			_ = c.Close()
			return
		}
		wait = l.cfg.IdleTimeout
		if wait == 0 {
			wait = l.cfg.ReadTimeout
		}
		if !l.answer(lc) {
			l.remove(c)
			l.toServer(lc)
			return
		}
	}
}

// read waits up to wait (zero: no bound) for the next request's first
// bytes; false when the connection is to close: it ended, the wait ran
// out (net/http closes it then too), or the lane closes.
func (l *Lane) read(lc *laneConn, wait time.Duration) bool {
	if !l.setIdle(lc.c, true) {
		return false
	}
	if wait > 0 || lc.deadline {
		var deadline time.Time
		if wait > 0 {
			deadline = time.Now().Add(wait)
		}
		if lc.c.SetReadDeadline(deadline) != nil {
			return false
		}
		lc.deadline = wait > 0
	}
	n, _ := lc.c.Read(lc.in[:cap(lc.in)]) // an error comes back at the next Read
	lc.in = lc.in[:n]
	if !l.setIdle(lc.c, false) {
		// Closing: the request read is answered by no one, as net/http
		// closes a connection idle at Shutdown whose request arrives.
		return false
	}
	return n > 0
}

// answer answers the request at the head of lc.in if the lane takes it,
// and drops its bytes; false leaves them for net/http.
func (l *Lane) answer(lc *laneConn) bool {
	head := bytes.Index(lc.in, []byte("\r\n\r\n"))
	if head < 0 {
		return false // a head in pieces, or too long
	}
	topic, key, ok := parseGet(lc.in[:head+2])
	if !ok {
		return false
	}
	l.api.limits.ConnState(lc.c, http.StateActive)
	defer l.api.limits.ConnState(lc.c, http.StateIdle)
	start := time.Now()
	out, value, ok := l.api.appendValue(lc.out[:0], lc.value, lc.c, topic, key, start)
	lc.value = value
	if cap(value) > laneKeep {
		lc.value = nil
	}
	if !ok {
		return false
	}
	if l.cfg.WriteTimeout > 0 && lc.c.SetWriteDeadline(start.Add(l.cfg.WriteTimeout)) != nil {
		return false
	}
	lc.out = out
	if cap(out) > laneKeep {
		lc.out = nil // a large value's copy is not kept for the connection's life
	}
	l.served.Add(1)
	if _, err := lc.c.Write(out); err != nil {
		lc.in = lc.in[:0] // the connection is spent: toServer closes it
		return false
	}
	lc.in = lc.in[:copy(lc.in, lc.in[head+4:])]
	return true
}

// toServer hands lc's connection, its unanswered bytes first, to
// net/http, with the deadlines net/http sets itself cleared.
func (l *Lane) toServer(lc *laneConn) {
	if len(lc.in) == 0 {
		_ = lc.c.Close() // nothing left to answer: the write failed
		return
	}
	_ = lc.c.SetDeadline(time.Time{})
	lc.c.Unread(lc.in)
	l.give(lc.c)
}

// parseGet reads a request head (its lines, the blank one after them
// left off) the lane answers: GET /v1/topics/{topic}/keys/{key}
// HTTP/1.1 with a topic and key of pathChars (the key may hold single
// slashes; no "." or ".." segment), and at most one each of Host (of
// hostChars), User-Agent, Accept and Accept-Encoding, with values of
// visible ASCII, spaces and tabs. Any other head reports !ok.
func parseGet(head []byte) (topic, key string, ok bool) {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	target, found := bytes.CutPrefix(line, []byte("GET /v1/topics/"))
	if !found {
		return "", "", false
	}
	if target, found = bytes.CutSuffix(target, []byte(" HTTP/1.1")); !found {
		return "", "", false
	}
	t, k, found := bytes.Cut(target, []byte("/keys/"))
	if !found || len(t) == 0 || len(k) == 0 || !allIn(t, nameChars) || !allIn(k, pathChars) {
		return "", "", false
	}
	keyPath := string(target[len(t)+len("/keys"):]) // "/" and the key
	if !cleanPath(keyPath) {
		return "", "", false
	}
	var seen [len(laneHeaders)]bool
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			return "", "", false
		}
		h := slices.IndexFunc(laneHeaders[:], func(lh string) bool { return bytes.EqualFold(name, []byte(lh)) })
		if h < 0 || seen[h] {
			return "", "", false
		}
		seen[h] = true
		value = bytes.Trim(value, " \t")
		if h == 0 && !allIn(value, hostChars) || !allIn(value, valueChars) {
			return "", "", false
		}
	}
	if !seen[0] {
		return "", "", false // no Host: net/http's 400
	}
	return string(t), keyPath[1:], true
}

// laneHeaders are the header fields a request in the lane may have,
// lower case; Host first.
var laneHeaders = [...]string{"host", "user-agent", "accept", "accept-encoding"}

// The bytes of the request heads the lane takes: a topic's (a path
// segment's that needs no escaping), a key's (the same and slashes,
// checked by cleanPath), a Host's, a field value's.
var (
	nameChars  = charSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@")
	pathChars  = charSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/")
	hostChars  = charSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._:")
	valueChars = charSet(" \t!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~")
)

// charSet128 is a set of ASCII bytes.
type charSet128 [128]bool

// charSet is the set of the bytes of s.
func charSet(s string) *charSet128 {
	var set charSet128
	for i := 0; i < len(s); i++ {
		set[s[i]] = true
	}
	return &set
}

// allIn reports whether every byte of b is in set.
func allIn(b []byte, set *charSet128) bool {
	for _, c := range b {
		if c >= 128 || !set[c] {
			return false
		}
	}
	return true
}

// appendValue appends the whole answer (status line, header, value or
// error) that net/http writes for getKey's answer to a GET of topic/key
// on c, and observes the route's latency from start; ok is false for a
// refusal by role, an error appendError does not write, and a tag net/http
// would alter: net/http is to give those. The value may be read into buf
// first (Server.entry), which it returns for the next request.
func (a *Server) appendValue(b, buf []byte, c *access.Conn, topic, key string, start time.Time) (_, _ []byte, ok bool) {
	if !a.guard.Has(c.Caller(), access.RoleRead) || !a.handlers.enter() {
		return b, buf, false
	}
	defer a.handlers.leave()
	e, buf, we := a.entry(buf, topic, key)
	if we != nil {
		b, ok = a.appendError(b, c, topic, key, we, start)
		return b, buf, ok
	}
	if !fieldAsIs(e.Tag) {
		return b, buf, false
	}
	// The fields in net/http's order: the handler's sorted by name, then
	// the Date it adds.
	st := e.Stamp.Shown()
	b = append(b, "HTTP/1.1 200 OK\r\n"...)
	if e.EffectiveAt != 0 {
		b = wire.AppendUnixMilli(append(b, headerEffective+": "...), e.EffectiveAt)
		b = append(b, "\r\n"...)
	}
	if e.ExpiresAt != 0 {
		b = wire.AppendUnixMilli(append(b, headerExpires+": "...), e.ExpiresAt)
		b = append(b, "\r\n"...)
	}
	b = strconv.AppendUint(append(b, "Cachecast-Hlc: "...), st.HLC, 10)
	b = wire.AppendOrigin(append(b, "\r\nCachecast-Origin: "...), st.Origin)
	b = strconv.AppendUint(append(b, "\r\nCachecast-Seq: "...), st.Seq, 10)
	b = append(append(b, "\r\nCachecast-Tag: "...), e.Tag...)
	b = wire.AppendUnixMilli(append(b, "\r\nCachecast-Time: "...), record.HLCMillis(st.HLC))
	b = strconv.AppendInt(append(b, "\r\nContent-Length: "...), int64(len(e.Value)), 10)
	b = append(b, "\r\nContent-Type: application/octet-stream\r\nDate: "...)
	b = appendDate(b, start)
	b = append(append(b, "\r\n\r\n"...), e.Value...)
	a.getLatency.Observe(time.Since(start).Seconds())
	return b, buf, true
}

// appendError appends the whole error answer e that net/http writes for
// getKey's refusal of a GET of topic/key on c, counted and logged as
// fail does, and observes the route's latency from start; ok is false
// for an error answered with more header fields than the error's
// (Retry-After): net/http is to give it.
func (a *Server) appendError(b []byte, c *access.Conn, topic, key string, e *wire.Error, start time.Time) ([]byte, bool) {
	status := wire.HTTPStatus(e.Code)
	text := http.StatusText(status)
	if e.Code == wire.CodeBusy || e.Code == wire.CodeCatchingUp || text == "" {
		return b, false
	}
	a.noteFailure(c.Caller(), http.MethodGet, "/v1/topics/"+topic+"/keys/"+key, e)
	body := errorBody(e)
	b = strconv.AppendInt(append(b, "HTTP/1.1 "...), int64(status), 10)
	b = strconv.AppendInt(append(append(append(b, ' '), text...), "\r\nContent-Length: "...), int64(len(body)), 10)
	b = append(b, "\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nDate: "...)
	b = appendDate(b, start)
	b = append(append(b, "\r\n\r\n"...), body...)
	a.getLatency.Observe(time.Since(start).Seconds())
	return b, true
}

// fieldAsIs reports whether net/http writes v as a header field's value
// unchanged: it turns CR and LF into spaces and trims white space off
// both ends.
func fieldAsIs(v string) bool {
	if strings.ContainsAny(v, "\r\n") {
		return false
	}
	return v == textproto.TrimString(v)
}

// httpDate is the Date field's text of one second.
type httpDate struct {
	sec  int64
	text []byte
}

// lastDate is the Date text of the latest second an answer was made in.
var lastDate atomic.Pointer[httpDate]

// appendDate appends the Date field's value for the instant now, as
// net/http writes it.
func appendDate(b []byte, now time.Time) []byte {
	d := lastDate.Load()
	if sec := now.Unix(); d == nil || d.sec != sec {
		d = &httpDate{sec: sec, text: now.UTC().AppendFormat(nil, http.TimeFormat)}
		lastDate.Store(d)
	}
	return append(b, d.text...)
}
