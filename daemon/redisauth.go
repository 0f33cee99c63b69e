package daemon

import (
	"crypto/tls"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/daemon/internal/access"
	respsrv "github.com/cachecast/cachecast/resp"
)

// Who may do what at the Redis door's TCP listener (--redis-addr): a TCP
// client has no uid, so its roles are those of the user it authenticates
// as (AUTH, HELLO AUTH) in --redis-users; before it does, read only
// without a users file, and with one the roles of its user default when
// that is on and nopass, else none (NOAUTH). A client of the Redis socket
// keeps its uid's roles; AUTH there narrows them to the user's.

// listenRedisTCP listens on --redis-addr, under TLS with
// --redis-tls-cert, and tells what its clients may do.
func (d *Daemon) listenRedisTCP() (net.Listener, error) {
	ln, err := net.Listen("tcp", d.cfg.RedisAddr)
	if err != nil {
		return nil, fmt.Errorf("--redis-addr: %w", err)
	}
	if d.cfg.RedisTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(d.cfg.RedisTLSCert, d.cfg.RedisTLSKey)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("--redis-tls-cert/--redis-tls-key: %w", err)
		}
		d.redisCert.Store(&cert)
		ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return d.redisCert.Load(), nil }})
	}
	users := d.guard.Users()
	anon, open := users.Anonymous()
	fields := []zap.Field{zap.String("redis-addr", ln.Addr().String()), zap.Bool("tls", d.cfg.RedisTLSCert != ""),
		zap.Int("users", users.Len()), zap.Stringer("unauthenticated-roles", anon)}
	switch {
	case users.Len() == 0:
		d.log.Warn("redis TCP door without --redis-users: any local user may connect and read every key over it; none may write", fields...)
	case open:
		d.log.Info("redis TCP door: clients hold the roles of the user default until they AUTH as a user of --redis-users", fields...)
	default:
		d.log.Info("redis TCP door: clients must AUTH as a user of --redis-users (NOAUTH before)", fields...)
	}
	return access.TCPListener{Listener: ln}, nil
}

// loadRedisCert reads the TLS certificate of --redis-addr again for a
// reload (a renewed certificate at the same paths): nil when the door has
// no TLS or nc names other files (that needs a restart; Changed names
// them), an error when the files do not load.
func (d *Daemon) loadRedisCert(nc Config) (*tls.Certificate, error) {
	if d.redisCert.Load() == nil || nc.RedisTLSCert != d.cfg.RedisTLSCert || nc.RedisTLSKey != d.cfg.RedisTLSKey {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(nc.RedisTLSCert, nc.RedisTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--redis-tls-cert/--redis-tls-key: %w (the certificate in force is kept)", err)
	}
	return &cert, nil
}

// swapRedisCert serves cert (loadRedisCert's) to the TLS connections
// accepted from now on; open ones keep theirs.
func (d *Daemon) swapRedisCert(cert *tls.Certificate) {
	if cert == nil {
		return
	}
	d.redisCert.Store(cert)
	d.log.Info("redis TLS certificate reloaded", zap.String("serial", cert.Leaf.SerialNumber.String()),
		zap.Time("not-after", cert.Leaf.NotAfter))
}

// loginConn is a connection that may authenticate (AUTH): a TCP one, or
// one of the Redis socket.
type loginConn interface {
	Login(name string)
	User() string
}

// Authenticate checks a user and password of --redis-users and makes c
// that user's. Without a users file, the user default takes any
// password and changes nothing, as in a Redis without passwords.
func (n *respNode) Authenticate(c net.Conn, user, pass string) error {
	users := n.d.guard.Users()
	oneArg := user == ""
	if oneArg {
		user = access.DefaultUser
	}
	if u, ok := users.Lookup(user); oneArg && (users.Len() == 0 || ok && u.NoPass) {
		return respsrv.ErrNoPassword
	}
	if users.Len() == 0 && user == access.DefaultUser {
		return nil
	}
	lc, ok := c.(loginConn)
	if !ok || !users.Check(user, pass) {
		n.d.log.Warn("redis authentication refused", append(callerOfConn(c).Fields(), zap.String("as-user", user))...)
		return respsrv.ErrWrongPass
	}
	lc.Login(user)
	n.d.log.Debug("redis client authenticated", callerOfConn(c).Fields()...)
	return nil
}

// Logout makes c no user's again (RESET, as Redis returns the
// connection to the user default): a TCP client holds the
// unauthenticated roles, a Redis-socket caller its uid's.
func (n *respNode) Logout(c net.Conn) {
	if lc, ok := c.(loginConn); ok && lc.User() != "" {
		lc.Login("")
		n.d.log.Debug("redis client reset to no user", callerOfConn(c).Fields()...)
	}
}

// MustAuthenticate: a TCP client that has not authenticated, when the
// users file gives such clients no roles (no user default on and nopass).
func (n *respNode) MustAuthenticate(c net.Conn) bool {
	tc, ok := c.(*access.TCPConn)
	if !ok || tc.User() != "" {
		return false
	}
	_, open := n.d.guard.Users().Anonymous()
	return !open
}
