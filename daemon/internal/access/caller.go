// Package access is who calls the daemon's local sockets and how much
// each may hold: the caller's credentials as the kernel gives them
// (SO_PEERCRED, SO_PEERGROUPS), the roles of the local API (Guard, the one
// permission check of every front door), and the limits that keep one
// local user from starving the node (Limits: connections and streams;
// Budget: request bodies and Redis commands in memory), and the Redis
// door's users (--redis-users; Users, TCPConn), and the sockets
// themselves (ListenUnix: the mode set, a stale socket file removed, one
// another process answers on refused with ErrSocketInUse). The HTTP API (daemon/httpapi) and
// the Redis front door's adapter (daemon) use it; daemon wires it.
package access

import (
	"context"
	"encoding/binary"
	"net"
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
	// Granted is a role a credential other than the kernel's vouches for
	// (the operator console's token): the caller holds it, and the roles
	// below it, whatever the lists say. RoleNone, the zero value, grants
	// nothing.
	Granted Role
	// TCP: a client of the Redis door's TCP listener (--redis-addr). It
	// has no uid: what it may do is its user's roles (User), or the
	// anonymous ones (Users.Anonymous) before it authenticates.
	TCP bool
	// User is the user of the users file (--redis-users) the client
	// authenticated as with AUTH, "" before. On the Unix socket it
	// narrows the uid's roles to the user's, never widens them.
	User string
}

// Fields are the zap fields a write is logged with.
func (c Caller) Fields() []zap.Field {
	var f []zap.Field
	switch {
	case c.Known:
		f = []zap.Field{zap.Uint32("uid", c.UID), zap.Uint32("gid", c.GID), zap.Int32("pid", c.PID)}
	case c.TCP:
		f = []zap.Field{zap.Bool("tcp", true)}
	default:
		f = []zap.Field{zap.Bool("peer-unknown", true)}
	}
	if c.User != "" {
		f = append(f, zap.String("user", c.User))
	}
	return f
}

type callerKey struct{}

// CallerFrom is the caller of the request's connection (ConnContext put
// it there); the zero Caller, unknown, when there is none.
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// WithCaller is ctx with c as its caller (for CallerFrom), for a front
// door whose callers are not a Unix socket's (the operator console).
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
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
