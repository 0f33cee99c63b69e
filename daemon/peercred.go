package daemon

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Caller is who is on the other end of a connection, as the kernel tells it
// (SO_PEERCRED, SO_PEERGROUPS): the credentials of the process that
// connected, taken when it connected.
type Caller struct {
	// Known is false when the kernel did not say (a TCP caller of the
	// Redis door): only the roles whose lists are empty admit it.
	Known bool
	UID   uint32
	GID   uint32
	PID   int32
	// Groups are the supplementary groups, when the kernel reports them
	// (Linux 4.13 and later).
	Groups []uint32
}

// fields are the zap fields a write is logged with.
func (c Caller) fields() []zap.Field {
	if !c.Known {
		return []zap.Field{zap.Bool("peer-unknown", true)}
	}
	return []zap.Field{zap.Uint32("uid", c.UID), zap.Uint32("gid", c.GID), zap.Int32("pid", c.PID)}
}

type callerKey struct{}

// callerFrom is the caller of the request's connection.
func callerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// peerCaller reads the peer's credentials off a Unix connection.
func peerCaller(c *net.UnixConn) Caller {
	rc, err := c.SyscallConn()
	if err != nil {
		return Caller{}
	}
	var caller Caller
	_ = rc.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			return
		}
		caller = Caller{Known: true, UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}
		caller.Groups = peerGroups(int(fd))
	})
	return caller
}

// peerGroups reads SO_PEERGROUPS: an array of gid_t. x/sys has no typed
// getter for it (GetsockoptString stops at the first zero byte), so this is
// the raw call. nil when the kernel does not support it.
func peerGroups(fd int) []uint32 {
	buf := make([]byte, 64*4)
	for range 2 {
		n := uint32(len(buf))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch errno {
		case 0:
			groups := make([]uint32, n/4)
			for i := range groups {
				groups[i] = binary.NativeEndian.Uint32(buf[4*i:])
			}
			return groups
		case unix.ERANGE:
			// n is now the size needed.
			buf = make([]byte, n)
		default:
			return nil
		}
	}
	return nil
}

// gaugeLike is the part of a Prometheus gauge the listener uses.
type gaugeLike interface {
	Inc()
	Dec()
}

// credListener bounds the number of open connections (a semaphore taken in
// Accept, released when the connection closes; like netutil.LimitListener,
// callers beyond the bound wait in the kernel's backlog) and reads each
// connection's peer credentials once, at accept.
type credListener struct {
	*net.UnixListener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	conns     gaugeLike
}

func newCredListener(l *net.UnixListener, max int, conns gaugeLike) *credListener {
	return &credListener{UnixListener: l, sem: make(chan struct{}, max), done: make(chan struct{}), conns: conns}
}

// Accept waits for a free slot, then for a connection.
func (l *credListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.AcceptUnix()
	if err != nil {
		<-l.sem
		return nil, err
	}
	l.conns.Inc()
	return &credConn{UnixConn: c, caller: peerCaller(c), l: l}, nil
}

// Close stops accepting and, for a listener made by net.ListenUnix, removes
// the socket file.
func (l *credListener) Close() error {
	err := net.ErrClosed
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.UnixListener.Close()
	})
	return err
}

// credConn is an accepted connection and its caller.
type credConn struct {
	*net.UnixConn
	caller    Caller
	l         *credListener
	closeOnce sync.Once
}

func (c *credConn) Close() error {
	err := c.UnixConn.Close()
	c.closeOnce.Do(func() {
		c.l.conns.Dec()
		<-c.l.sem
	})
	return err
}

// connContext puts the connection's caller into every request's context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*credConn); ok {
		return context.WithValue(ctx, callerKey{}, cc.caller)
	}
	return ctx
}
