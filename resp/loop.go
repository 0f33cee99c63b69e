package resp

import (
	"bytes"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cachecast/cachecast/resp/internal/admin"
	"github.com/cachecast/cachecast/resp/internal/session"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The event loop serves the plain request/reply connections as Redis
// does: one goroutine, locked to its thread, waits in epoll (level
// triggered) over their sockets, reads what one has sent, runs it with
// the same process and exec as a connection's goroutine and writes the
// answers with one write. A request costs a read, a write and a share of
// one epoll_wait: no goroutine is woken and none parks.
//
// The loop never waits for anything but epoll. A connection leaves it
// for a goroutine of its own (handOff), for good, before a command that
// may wait (mayWait: WAIT, SUBSCRIBE, PSUBSCRIBE, CLIENT TRACKING, DEBUG
// SLEEP and an EXEC that holds one (sleeps), and the writes when the
// node's publish path waits for a disk or a replica),
// when its client does not take its answers at once (the goroutine's
// blocking write, under --write-timeout, then disconnects a slow
// reader), and when a push is queued for it (the pusher goroutine writes
// those). The goroutine goes on with the bytes already read and the
// answers not yet written, so nothing is lost or reordered.
//
// The loop reads and writes its own descriptor of each socket, a
// duplicate taken at accept, and closes the listener's net.Conn, so that
// the runtime's poller (edge-triggered, on every socket it opened) is not
// woken by the loop's traffic. A handed-off connection gets a new
// net.Conn of that descriptor. Only the loop closes a descriptor it
// owns: a close from elsewhere (Server.Close, a push buffer overflow)
// asks it to (kick).
type loop struct {
	s    *Server
	epfd int
	wake int // an eventfd in the epoll set: kick and stop write it

	conns    map[int32]*conn // by slot; the loop's goroutine only
	nextSlot int32
	// unsent: the connections that ran commands since the last
	// epoll_wait, whose answers are still in out (flushAll writes them).
	unsent []*conn

	mu      sync.Mutex
	adds    []*conn // accepted, for the loop to take
	kicked  []*conn // to hand off or, when dead, close
	stopped bool
	done    bool // the loop has returned and closed wake
}

// wakeSlot is the eventfd's key in the epoll set.
const wakeSlot = -1

// newLoop makes the loop; NewServer starts its goroutine.
func newLoop(s *Server) (*loop, error) {
	secondP()
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeSlot}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(wake)
		return nil, err
	}
	return &loop{s: s, epfd: epfd, wake: wake, conns: map[int32]*conn{}}, nil
}

// secondP gives the runtime a second P when it has one (GOMAXPROCS 1,
// as under taskset to one CPU) and the user did not set GOMAXPROCS. The
// loop holds a P in epoll_wait; with no other P, idle or spinning,
// sysmon takes that P back each time the wait lasts over 20 µs and wakes
// a spinning thread for it, which finds nothing to run: 0.28 thread
// switches and 2 µs of CPU more per GET at -c 1 on one core. With an
// idle second P beside it the wait is left alone. The second P costs
// nothing while nothing else runs; when something does, it shares the
// one CPU with the loop as a thread of redis-server's would.
func secondP() {
	if runtime.GOMAXPROCS(0) == 1 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2)
	}
}

// mayWait says whether running a (cmd its entry) could wait for more
// than the CPU: those commands run on a connection's own goroutine.
func (s *Server) mayWait(cmd *session.Command, a [][]byte) bool {
	if cmd == nil {
		return false
	}
	switch cmd.Name {
	case "wait", "subscribe", "psubscribe":
		return true
	case "exec": // its queued writes are one publish
		return s.node.PublishWaits()
	case "client":
		return len(a) > 1 && bytes.EqualFold(a[1], []byte("tracking"))
	case "debug":
		return admin.IsDebugSleep(a)
	}
	return cmd.Write && s.node.PublishWaits()
}

// attach gives c to the loop, or says why not (then c keeps its
// net.Conn and gets a goroutine): a connection without a descriptor
// (syscall.Conn), or a loop that stopped.
func (l *loop) attach(c *conn) bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	fd := -1
	if cerr := rc.Control(func(s uintptr) {
		fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil || err != nil {
		return false
	}
	// The loop's reads and writes (rawRead, rawWrite) must never wait.
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return false
	}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		_ = unix.Close(fd)
		return false
	}
	c.pmu.Lock()
	c.fd, c.lp, c.io = fd, l, nil
	c.pmu.Unlock()
	l.adds = append(l.adds, c)
	l.signalLocked()
	l.mu.Unlock()
	// Out of the runtime's poller; the credentials the node asks about
	// stay with nc.
	_ = c.nc.Close()
	return true
}

// kick asks the loop to hand c off (a push is queued for it) or, once
// c is dead, to close it.
func (l *loop) kick(c *conn) {
	l.mu.Lock()
	l.kicked = append(l.kicked, c)
	l.signalLocked()
	l.mu.Unlock()
}

// stop ends the loop: it closes every connection it serves and returns.
func (l *loop) stop() {
	l.mu.Lock()
	l.stopped = true
	l.signalLocked()
	l.mu.Unlock()
}

// signalLocked wakes the loop's epoll_wait; under mu, so that the
// eventfd is not written once the loop has closed it (its number may
// name another file by then).
func (l *loop) signalLocked() {
	if l.done {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

// yieldEvery: the loop passes through the scheduler this often when
// busy. A goroutine that has not for 10 ms is preempted by sysmon, and
// taking the P back from the loop's epoll_wait then resets sysmon's
// back-off to 20 µs sleeps: thousands of its wake-ups a second on a
// busy loop, where a yield costs two thread switches.
const yieldEvery = 5 * time.Millisecond

// run is the loop's goroutine.
func (l *loop) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() {
		l.mu.Lock()
		l.done = true
		_ = unix.Close(l.wake)
		_ = unix.Close(l.epfd)
		l.mu.Unlock()
	}()
	events := make([]unix.EpollEvent, 256)
	wait := -1
	idle := l.s.cfg.IdleTimeout
	if idle > 0 {
		wait = int(min(max(idle/10, 10*time.Millisecond), time.Second) / time.Millisecond)
	}
	swept := time.Now()
	yielded := swept
	for {
		n, err := unix.EpollWait(l.epfd, events, wait)
		if err != nil && !errors.Is(err, unix.EINTR) {
			l.s.log.Error("redis event loop: epoll_wait failed; closing its connections (new ones get goroutines)", zap.Error(err))
			l.stop()
			l.woken()
			return
		}
		now := time.Now()
		for _, ev := range events[:max(n, 0)] {
			if ev.Fd == wakeSlot {
				if !l.woken() {
					return
				}
				continue
			}
			if c := l.conns[ev.Fd]; c != nil {
				l.serve(c, now)
			}
		}
		l.flushAll()
		// After the answers are out.
		if now.Sub(yielded) >= yieldEvery {
			yielded = now
			runtime.Gosched()
		}
		if idle > 0 && now.Sub(swept) >= idle/10 {
			swept = now
			for _, c := range l.conns {
				if now.Sub(c.readAt) >= idle {
					c.s.stats.idleClosed.Add(1)
					c.s.log.Debug("redis connection idle; closing it", zap.Int64("client-id", c.id), zap.Duration("redis-idle-timeout", idle))
					l.closeConn(c)
				}
			}
		}
	}
}

// woken takes the new connections and the kicks; false when the loop
// stopped (its connections are closed then).
func (l *loop) woken() bool {
	var b [8]byte
	_, _ = unix.Read(l.wake, b[:])
	l.mu.Lock()
	adds, kicked, stopped := l.adds, l.kicked, l.stopped
	l.adds, l.kicked = nil, nil
	l.mu.Unlock()
	for _, c := range adds {
		l.nextSlot++
		if l.nextSlot < 0 {
			l.nextSlot = 0
		}
		for l.conns[l.nextSlot] != nil {
			l.nextSlot++
		}
		c.slot = l.nextSlot
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: c.slot}
		l.conns[c.slot] = c
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
			l.s.log.Debug("redis event loop: epoll_ctl failed; closing the connection", zap.Int64("client-id", c.id), zap.Error(err))
			l.closeConn(c)
		}
	}
	for _, c := range kicked {
		switch {
		case c.lp != l:
			// Handed off or closed already.
		case stopped || c.dead.Load():
			l.closeConn(c)
		default:
			l.handOff(c)
		}
	}
	if !stopped {
		return true
	}
	for _, c := range l.conns {
		l.closeConn(c)
	}
	return false
}

// serve reads what c sent (once: the epoll is level triggered, so what
// is left is told again) and runs it.
func (l *loop) serve(c *conn, now time.Time) {
	n, err := rawRead(c.fd, c.rbuf[c.end:])
	switch {
	case n > 0:
		c.end += n
		c.readAt = now
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	default: // end of stream, or an error
		if err != nil && !c.dead.Load() {
			c.s.log.Debug("redis connection read failed", zap.Int64("client-id", c.id), zap.Error(err))
		}
		l.closeConn(c)
		return
	}
	switch c.process(true) {
	case stepRead:
		l.unsent = append(l.unsent, c)
	case stepClose:
		l.closeConn(c)
	case stepHandOff:
		l.handOff(c)
	}
}

// flushAll writes the answers the connections served since the last
// epoll_wait left in out, as Redis writes its replies before it waits
// again (beforeSleep): the client that the first write wakes is running
// by the next ones, and one wake-up then serves the answers of every
// connection that epoll named, where a write after each one's commands
// woke the client (or was preempted by it) once a connection. A
// connection handed off or closed meanwhile (a kick) is its goroutine's
// to write, or gone.
func (l *loop) flushAll() {
	for i, c := range l.unsent {
		l.unsent[i] = nil
		if c.lp != l {
			continue
		}
		switch c.flushStep() {
		case stepClose:
			l.closeConn(c)
		case stepHandOff:
			l.handOff(c)
		}
	}
	l.unsent = l.unsent[:0]
}

// errWouldBlock: the loop's client did not take all its answers at once.
var errWouldBlock = errors.New("resp: the write would block")

// writeOwn writes out on the loop's descriptor, without waiting: what the
// socket does not take stays in out (errWouldBlock), for the goroutine
// the connection is handed off to.
func (c *conn) writeOwn() error {
	for len(c.Out) > 0 {
		n, err := rawWrite(c.fd, c.Out)
		if n > 0 {
			if n == len(c.Out) {
				c.resetOut()
				return nil
			}
			c.Out = c.Out[:copy(c.Out, c.Out[n:])]
			continue
		}
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return errWouldBlock
		case nil:
			return errWouldBlock // wrote nothing and no error: let the goroutine wait
		}
		return err
	}
	return nil
}

// detach takes c out of the epoll set.
func (l *loop) detach(c *conn) {
	delete(l.conns, c.slot)
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
}

// closeConn closes a connection the loop serves.
func (l *loop) closeConn(c *conn) {
	l.detach(c)
	c.pmu.Lock()
	c.lp = nil
	c.io = c.nc // closed already: close's Close is a no-op
	c.pmu.Unlock()
	_ = unix.Close(c.fd)
	c.fd = -1
	c.Close()
	c.release(c.held)
	c.s.forget(c)
}

// handOff gives c a goroutine of its own, which goes on from where the
// loop stopped: the commands left in rbuf, the answers left in out, the
// pushes queued.
func (l *loop) handOff(c *conn) {
	l.detach(c)
	f := os.NewFile(uintptr(c.fd), "redis")
	nc, err := net.FileConn(f) // a descriptor of its own, in the runtime's poller
	_ = f.Close()
	c.fd = -1
	if err != nil {
		c.s.log.Warn("redis event loop: cannot hand a connection to a goroutine; closing it", zap.Int64("client-id", c.id), zap.Error(err))
		c.pmu.Lock()
		c.lp, c.io = nil, c.nc
		c.pmu.Unlock()
		c.Close()
		c.release(c.held)
		c.s.forget(c)
		return
	}
	c.pmu.Lock()
	c.lp, c.io = nil, nc
	if len(c.pending) > 0 && !c.pusherOn {
		c.pusherOn = true
		c.s.wg.Go(c.pusher)
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	c.pmu.Unlock()
	if c.dead.Load() {
		// Closed while the loop held it: close has run (once) already.
		_ = nc.Close()
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	c.s.wg.Go(c.serve)
}

// rawRead is read(2) without the runtime's system call bookkeeping: the
// loop's descriptors are non-blocking, so it never waits.
func rawRead(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawWrite is write(2) as rawRead is read(2).
func rawWrite(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// sleeps says whether running cmd (an EXEC) would run a queued DEBUG
// SLEEP: the event loop then hands the connection to a goroutine first.
func (c *conn) sleeps(cmd *session.Command) bool {
	if cmd == nil || cmd.Name != "exec" || !c.inMulti {
		return false
	}
	for _, q := range c.queued {
		if admin.IsDebugSleep(q) {
			return true
		}
	}
	return false
}
