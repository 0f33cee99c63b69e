package access

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
)

// login is the user a connection authenticated as (the Redis door's
// AUTH): set by the connection's own goroutine, read by any (a reload
// checks every subscribed connection's roles).
type login struct {
	user atomic.Pointer[string]
}

// Login makes the connection user name's (AUTH succeeded).
func (l *login) Login(name string) { l.user.Store(&name) }

// User is the user the connection authenticated as, "" before AUTH.
func (l *login) User() string {
	if p := l.user.Load(); p != nil {
		return *p
	}
	return ""
}

// TCPListener accepts the Redis door's TCP connections (--redis-addr,
// under TLS or not) as *TCPConn, whose Caller is a TCP client.
type TCPListener struct{ net.Listener }

// Accept returns the next connection as a *TCPConn.
func (l TCPListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &TCPConn{Conn: c}, nil
}

// TCPConn is a connection of the Redis door's TCP listener: it has no
// uid; what it may do is the roles of the user it authenticated as.
type TCPConn struct {
	net.Conn
	login
	hold holding // its requests' bytes in the budget
}

func (c *TCPConn) holding() *holding {
	if c == nil {
		return nil
	}
	return &c.hold
}

// Caller is a TCP client, with its user once it authenticated.
func (c *TCPConn) Caller() Caller { return Caller{TCP: true, User: c.User()} }

// errNoDescriptor: a TLS connection has no descriptor its server may read
// and write itself.
var errNoDescriptor = errors.New("access: the connection has no descriptor of its own (TLS)")

// SyscallConn is the socket's, for a plain TCP connection (the Redis
// server's event loop serves it); an error under TLS, whose bytes only
// the tls.Conn may read.
func (c *TCPConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(*net.TCPConn); ok {
		return sc.SyscallConn()
	}
	return nil, errNoDescriptor
}
