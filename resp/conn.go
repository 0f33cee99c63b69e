package resp

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/resp/internal/pubsub"
	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
)

const (
	readBufSize = 16 << 10
	// outFlushSize makes a long pipeline's answers go out before the
	// pipeline ends.
	outFlushSize = 64 << 10
)

// conn is one client connection. Its goroutine reads commands, runs them
// and writes the answers; pushes (invalidations, pub/sub messages) come
// from the server's change follower through pending and are written by a
// second goroutine, started when the connection first needs it.
//
// mu is held while a command runs and while anything is written, so that
// the answer to a read is always in front of the invalidation of what it
// read.
type conn struct {
	// Session is the connection as the command handlers see it (its
	// answers, protocol, view, transaction and tracking state).
	session.Session
	// ps is its part in the pushes: subscriptions, tracking, MONITOR.
	ps pubsub.Peer
	s  *Server
	// nc is the connection as the listener gave it: what the node's
	// methods are asked about (its peer, roles, memory). io is what the
	// connection's goroutine reads and writes: nc, or, for a connection
	// the event loop served first, a new net.Conn of the same socket.
	nc net.Conn
	io net.Conn
	// lp is the event loop while it serves the connection (then fd is
	// the loop's own descriptor of the socket, and io is nil), nil once
	// the connection has a goroutine. Changed by the loop only, under
	// pmu; the loop reads its own fields without it.
	lp      *loop
	fd      int
	slot    int32 // the connection's key in the loop's epoll set
	id      int64
	created time.Time
	addr    string // CLIENT LIST's addr and laddr, fd
	laddr   string
	sockFD  int
	unix    bool   // a Unix socket's
	peer    string // its share of the connection limits
	// stranger: its place in the pool of connections that must
	// authenticate (admit.go), under the server's mu.
	stranger stranger
	// lim bounds its commands: the server's, or strangerLimits while it
	// must authenticate (its own goroutine, or the loop, only).
	lim *codec.Limits
	// shown is the state CLIENT LIST shows of the connection, which
	// another connection reads.
	shown shownState

	// The read role, asked again when the server's roles generation
	// moves (RolesChanged); the connection's own goroutine only.
	rolesSeen uint64
	readErr   error
	// mustAuth: answer NOAUTH until AUTH succeeds (gate, auth.go).
	mustAuth bool

	readDeadlineSet time.Time // when the idle deadline was last moved
	// readAt is when the last read returned (or the connection was made,
	// or a WAIT ended): the start of its idleness, and the clock its
	// answers' write deadline is set by.
	readAt time.Time

	rbuf       []byte
	start, end int // the bytes of rbuf not run yet
	args       [][]byte
	peek       [][]byte // the next command's arguments, while execSets looks ahead
	// warmed is how many GETs after the one running warmGets loaded
	// ahead: it does not look again before they have run.
	warmed int
	// The keys of a run of GETs, while warmGets looks ahead.
	warmTopics, warmKeys []string

	deadlineSet time.Time // when the write deadline was last set (under mu)

	mu sync.Mutex
	// protoShared is proto for the follower, under metaMu.
	protoShared int
	name        string
	libName     string
	libVer      string
	lastCmd     *session.Command
	quit        bool
	reply       replyMode // CLIENT REPLY (reply.go)
	// MULTI: the queued commands, their bytes, and whether one was
	// refused; Tx is the transaction's view while EXEC runs them
	// (multi.go).
	inMulti     bool
	multiErr    bool
	queued      [][][]byte
	queuedBytes int
	// held is what the connection holds in the node's budget for request
	// bodies: its read buffer past readBufSize and its queued commands.
	held      int
	watched   []watchedKey // WATCH
	lastWrite uint64       // seq of this connection's last write, for WAIT
	// A pipeline's SETs waiting to be published as one batch (execSets).
	sets     []record.Message
	setBytes int

	// Pushes waiting for the pusher goroutine.
	pmu      sync.Mutex
	pending  []byte
	pusherOn bool
	kick     chan struct{}

	dead      atomic.Bool
	closeOnce sync.Once
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:       s,
		nc:      nc,
		io:      nc,
		fd:      -1,
		id:      s.nextID.Add(1),
		created: time.Now(),
		rbuf:    make([]byte, readBufSize),
		args:    make([][]byte, 0, 8),
		kick:    make(chan struct{}, 1),
	}
	c.Session.Init(c, &s.env)
	c.ps.Init(&s.hub, c, &c.Session)
	c.protoShared = 2
	c.lim = &s.lim
	c.readAt = c.created
	c.addr, c.laddr, c.sockFD = connAddrs(nc)
	_, c.unix = nc.LocalAddr().(*net.UnixAddr)
	c.shown.idleSince.Store(c.created.UnixNano())
	c.shown.multi.Store(-1)
	c.shown.redir.Store(-1)
	return c
}

// Outcomes of process.
const (
	stepRead    = iota // the buffer holds no complete command: read more
	stepClose          // the connection is done
	stepHandOff        // (the loop only) give the connection a goroutine of its own
)

// serve is the connection's goroutine: run every complete command in the
// buffer (answers written once the buffer holds no complete command, so a
// pipeline's answers go out together), then read.
func (c *conn) serve() {
	defer c.s.forget(c)
	defer c.Close()
	defer func() { c.release(c.held) }()
	for {
		if c.process(false) != stepRead {
			return
		}
		n, err := c.read(c.rbuf[c.end:])
		c.end += n
		if err != nil {
			if n > 0 {
				continue // answer what arrived, then see the error again
			}
			if errors.Is(err, errIdle) {
				c.s.stats.idleClosed.Add(1)
				c.s.log.Debug("redis connection idle; closing it", zap.Int64("client-id", c.id), zap.Duration("redis-idle-timeout", c.s.cfg.IdleTimeout))
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !c.dead.Load() {
				c.s.log.Debug("redis connection read failed", zap.Int64("client-id", c.id), zap.Error(err))
			}
			return
		}
	}
}

// process runs the complete commands in rbuf[start:end] and writes their
// answers; then it makes room in rbuf for the next read (growing it,
// within the node's memory budget, for a large command). The event loop
// (inLoop) stops before a command that may wait (mayWait) and when the
// client does not take its answers at once: stepHandOff, with the
// command still in the buffer and the answers not written in out, for
// the connection's own goroutine to go on from. In the loop, the answers
// of the last commands are left in out (unless they reached
// outFlushSize) for the loop to write once every connection that epoll
// named has run (loop.flushAll).
func (c *conn) process(inLoop bool) int {
	need := 0
	for c.start < c.end {
		args, n, nd, err := codec.Parse(c.rbuf[c.start:c.end], c.args, c.lim)
		if err != nil {
			c.fatal(err)
			return stepClose
		}
		if n == 0 {
			need = nd
			break
		}
		c.args = args
		if len(args) == 0 {
			c.start += n
			continue
		}
		cmd := lookup(args[0])
		if inLoop && (c.s.mayWait(cmd, args) || c.sleeps(cmd)) {
			return stepHandOff
		}
		c.start += n
		switch c.gate(cmd) {
		case gateClose:
			return stepClose
		case gateSkip:
			continue
		}
		// Only a GET the gate let through loads its run ahead: a caller
		// refused, or a transaction queueing, has nothing read for it.
		if c.warmed > 0 {
			c.warmed--
		} else if isGet(args) {
			c.warmed = c.warmGets(args, c.rbuf[c.start:c.end])
		}
		k, full := c.execSets(args, c.rbuf[c.start:c.end])
		if k >= 0 {
			c.start += k
		} else {
			full = c.exec(cmd, args)
		}
		if c.quit {
			_ = c.flush()
			return stepClose
		}
		if full {
			if st := c.flushStep(); st != stepRead {
				return st
			}
		}
	}
	if !inLoop {
		if st := c.flushStep(); st != stepRead {
			return st
		}
	}
	if c.start == c.end {
		c.start, c.end = 0, 0
		if len(c.rbuf) > readBufSize {
			c.release(len(c.rbuf) - readBufSize)
			c.rbuf = make([]byte, readBufSize)
		}
	} else if c.start > 0 {
		c.end = copy(c.rbuf, c.rbuf[c.start:c.end])
		c.start = 0
	}
	if need > len(c.rbuf) || c.end == len(c.rbuf) {
		size := max(need, 2*len(c.rbuf))
		if err := c.s.node.HoldMemory(c.nc, size-len(c.rbuf)); err != nil {
			c.fatal(err)
			return stepClose
		}
		c.held += size - len(c.rbuf)
		nb := make([]byte, size)
		copy(nb, c.rbuf[:c.end])
		c.rbuf = nb
	}
	return stepRead
}

// flushStep writes the answers waiting: stepRead when they went out,
// stepHandOff when the loop's client could not take them all at once,
// stepClose when the write failed.
func (c *conn) flushStep() int {
	switch err := c.flush(); {
	case err == nil:
		return stepRead
	case errors.Is(err, errWouldBlock):
		return stepHandOff
	}
	return stepClose
}

// errIdle ends a connection idle for --redis-idle-timeout.
var errIdle = errors.New("resp: idle")

// read reads from the client into b. With an idle timeout, a connection
// that sends nothing for that long, and neither subscribed nor turned
// tracking on, gets errIdle. The read deadline moves once per tenth of
// the timeout, not at every read (a timer reset costs about what a GET
// does); when it passes early, the wait goes on to its full length.
func (c *conn) read(b []byte) (int, error) {
	idle := c.s.cfg.IdleTimeout
	if idle > 0 && c.readAt.Sub(c.readDeadlineSet) > idle/10 {
		_ = c.io.SetReadDeadline(c.readAt.Add(idle))
		c.readDeadlineSet = c.readAt
	}
	for {
		n, err := c.io.Read(b)
		var ne net.Error
		if n > 0 || err == nil || idle <= 0 || !errors.As(err, &ne) || !ne.Timeout() {
			c.readAt = time.Now()
			return n, err
		}
		now := time.Now()
		next := c.readAt.Add(idle)
		switch {
		case c.ps.Pushed():
			next = now.Add(idle) // it waits for pushes, not for its client
		case !now.Before(next):
			return 0, errIdle
		}
		_ = c.io.SetReadDeadline(next)
		c.readDeadlineSet = next.Add(-idle)
	}
}

// mayRead checks the read role before a command: asked at the first
// command and again after RolesChanged. A connection without it gets
// NOPERM and is closed (false).
func (c *conn) mayRead() bool {
	if gen := c.s.roles.Load(); gen != c.rolesSeen {
		c.rolesSeen = gen
		c.readErr = c.s.node.AuthorizeRead(c.nc)
	}
	if c.readErr == nil {
		return true
	}
	c.mu.Lock()
	c.WriteError(c.readErr)
	c.mu.Unlock()
	_ = c.flush()
	return false
}

// fatal answers a stream that cannot be resynchronised, then the
// connection closes.
func (c *conn) fatal(err error) {
	c.s.stats.protocolErrors.Add(1)
	msg := session.RedisText(err)
	var pe *codec.Error
	if errors.As(err, &pe) {
		msg = "ERR " + pe.Msg
	}
	c.mu.Lock()
	c.Out = codec.AppendError(c.Out, msg)
	c.mu.Unlock()
	_ = c.flush()
	c.s.log.Debug("redis protocol error; closing the connection", zap.Int64("client-id", c.id), zap.String("error", msg))
}

// flush writes the answers waiting in out.
func (c *conn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushLocked(c.readAt)
}

// flushLocked writes out; now is about the time (the connection's
// goroutine passes when its last read returned, to spare reading the
// clock for every answer).
func (c *conn) flushLocked(now time.Time) error {
	if len(c.Out) == 0 {
		return nil
	}
	if c.lp != nil {
		return c.writeOwn()
	}
	// The deadline moves once per tenth of --write-timeout, not at every
	// write: resetting the runtime's timer costs about as much as the
	// answer to a GET.
	if now.After(c.deadlineSet.Add(c.s.cfg.WriteTimeout / 10)) {
		_ = c.io.SetWriteDeadline(now.Add(c.s.cfg.WriteTimeout))
		c.deadlineSet = now
	}
	_, err := c.io.Write(c.Out)
	c.resetOut()
	if err != nil {
		c.Close()
	}
	return err
}

// resetOut empties out after a write, dropping a buffer a long pipeline
// grew.
func (c *conn) resetOut() {
	if cap(c.Out) > outFlushSize*4 {
		c.Out = make([]byte, 0, 4096)
	} else {
		c.Out = c.Out[:0]
	}
}

// Close closes the connection once; the goroutines see it and end. The
// socket of a connection the event loop serves is closed by the loop
// (only its owner may close a descriptor, or the number could be reused
// under it).
func (c *conn) Close() {
	c.closeOnce.Do(func() {
		c.dead.Store(true)
		c.pmu.Lock()
		lp, nc := c.lp, c.io
		c.pmu.Unlock()
		if lp != nil {
			lp.kick(c)
			return
		}
		_ = nc.Close()
		select {
		case c.kick <- struct{}{}:
		default:
		}
	})
}

// Push queues an out-of-band frame (built for the connection's
// protocol) for the pusher goroutine (pubsub.Client). A connection whose
// queue is past --redis-push-buffer is disconnected: its client-side
// cache goes with it, so it never serves a value it was not told is
// stale.
func (c *conn) Push(frame []byte) {
	if c.dead.Load() {
		return
	}
	c.pmu.Lock()
	if len(c.pending)+len(frame) > c.s.cfg.PushBuffer {
		c.pmu.Unlock()
		c.s.stats.slowDisconnects.Add(1)
		c.s.log.Warn("redis client does not read its pushes; disconnecting it",
			zap.Int64("client-id", c.id), zap.String("name", c.name), zap.Int("push-buffer", c.s.cfg.PushBuffer))
		c.Close()
		return
	}
	c.pending = append(c.pending, frame...)
	if lp := c.lp; lp != nil {
		// The loop never waits for a client: it gives the connection a
		// goroutine, and the pusher with it.
		c.pmu.Unlock()
		lp.kick(c)
		return
	}
	if !c.pusherOn {
		c.pusherOn = true
		c.s.wg.Go(c.pusher)
	}
	c.pmu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// pusher writes the queued pushes. It takes mu, so a push never cuts an
// answer in two, and runs until the connection closes.
func (c *conn) pusher() {
	var buf []byte
	for range c.kick {
		if c.dead.Load() {
			return
		}
		c.pmu.Lock()
		buf, c.pending = c.pending, buf[:0]
		c.pmu.Unlock()
		if len(buf) == 0 {
			continue
		}
		c.mu.Lock()
		c.Out = append(c.Out, buf...)
		err := c.flushLocked(time.Now())
		c.mu.Unlock()
		if err != nil {
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

// The connection as the pushes see it (pubsub.Client) and as its session
// asks it (session.Host; PublishBatch and AuthorizeAdmin are in
// commands.go).

// ID is its CLIENT ID.
func (c *conn) ID() int64 { return c.id }

// Closed says it is closed or closing.
func (c *conn) Closed() bool { return c.dead.Load() }

// Socket is the net.Conn its goroutine reads (nil while the event loop
// serves it: the loop has its own descriptor).
func (c *conn) Socket() net.Conn {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.io
}

// MonitorAddr is its address as MONITOR shows it: unix:<path> for a Unix
// socket, addr for TCP.
func (c *conn) MonitorAddr() string {
	if c.unix {
		return "unix:" + c.laddr[:len(c.laddr)-len(":0")]
	}
	return c.addr
}

// Pushes is its part in the pushes.
func (c *conn) Pushes() *pubsub.Peer { return &c.ps }

// Track registers a key the client reads (session.Host).
func (c *conn) Track(name []byte) { c.ps.Track(name) }

// release gives n of the bytes the connection holds back to the node's
// budget (held).
func (c *conn) release(n int) {
	if n > 0 {
		c.held -= n
		c.s.node.ReleaseMemory(c.nc, n)
	}
}
