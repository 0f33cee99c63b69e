package resp

import (
	"net"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// Authenticator is a Node that has users: AUTH and HELLO's AUTH ask it. A
// Node without it answers AUTH as a Redis without passwords does (the user
// default with any password is OK; another user is WRONGPASS).
type Authenticator interface {
	// Authenticate makes conn the user's when pass is one of its
	// passwords; an error (whose RedisError is WRONGPASS ...) leaves conn
	// as it was. user "" is AUTH's one-argument form: the user default.
	Authenticate(conn net.Conn, user, pass string) error
	// MustAuthenticate says whether conn must authenticate before any
	// command but AUTH, HELLO, QUIT and RESET, which the others are
	// answered NOAUTH until it does. Asked at a connection's first
	// command and again after RolesChanged (a reload of the users).
	MustAuthenticate(conn net.Conn) bool
	// Logout makes conn no user's again, as at accept (RESET): a TCP
	// client then holds the unauthenticated roles, a Unix-socket caller
	// its uid's.
	Logout(conn net.Conn)
}

// Redis's words for a refused authentication.
const (
	errWrongPass   = "WRONGPASS invalid username-password pair or user is disabled."
	errNoAuth      = "NOAUTH Authentication required."
	errNoAuthHello = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> " +
		"option can be used to authenticate the client and select the RESP protocol version at the same time"
	errNoPassword = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
)

// noAuth are the commands an unauthenticated connection may send when it
// must authenticate (Redis's no-auth flag); they read nothing of the view,
// so they skip the read role's check too.
var noAuth = map[string]bool{"auth": true, "hello": true, "quit": true, "reset": true}

// Outcomes of gate.
const (
	gateRun   = iota // run the command
	gateSkip         // answered (NOAUTH): go on with the next
	gateClose        // answered (NOPERM): close the connection
)

// gate decides, before a command runs, whether the connection may run
// it: NOAUTH while it must authenticate first, and the read role
// (mayRead). cmd is nil for an unknown command, which is answered as such
// whatever the connection's state, as Redis answers it.
func (c *conn) gate(cmd *session.Command) int {
	if cmd != nil && noAuth[cmd.Name] {
		return gateRun
	}
	if gen := c.s.roles.Load(); gen != c.rolesSeen {
		c.mustAuth, c.lim = false, &c.s.lim
		if a, ok := c.s.node.(Authenticator); ok && a.MustAuthenticate(c.nc) {
			// Checked again at the next command: the connection is still
			// a stranger, and mayRead must ask once it is not.
			c.mustAuth, c.lim = true, &strangerLimits
		}
	}
	if c.mustAuth {
		if cmd == nil {
			return gateRun
		}
		c.mu.Lock()
		c.Err(errNoAuth)
		c.mu.Unlock()
		return gateSkip
	}
	if !c.mayRead() {
		return gateClose
	}
	return gateRun
}

// authenticate runs AUTH's check (user "" is the one-argument form) and
// answers its error; true when conn is now the user's. The roles are
// asked again at the next command.
func (c *conn) authenticate(user, pass string) bool {
	var err error
	if a, ok := c.s.node.(Authenticator); ok {
		err = a.Authenticate(c.nc, user, pass)
	} else {
		switch user {
		case "":
			err = ErrNoPassword
		case "default":
		default:
			err = ErrWrongPass
		}
	}
	if err != nil {
		c.WriteError(err)
		return false
	}
	c.rolesSeen = 0  // ask MustAuthenticate and the read role again
	c.lim = &c.s.lim // the commands pipelined after AUTH are parsed before gate asks
	if why := c.s.repeer(c); why != "" {
		c.Err(why)
		c.quit = true // its user's share is full: closed, as at accept
		return false
	}
	return true
}

// deauthenticate is RESET's part in authentication: c is no user's
// again, counted as at accept (in the strangers' pool when it must now
// authenticate, else in its peer's share); an error text when that share
// is full (then c is to be closed).
func (c *conn) deauthenticate() string {
	a, ok := c.s.node.(Authenticator)
	if !ok {
		return ""
	}
	a.Logout(c.nc)
	c.rolesSeen = 0 // ask MustAuthenticate and the read role again
	if !a.MustAuthenticate(c.nc) {
		return c.s.repeer(c)
	}
	c.lim = &strangerLimits // the commands pipelined after RESET are parsed before gate asks
	c.s.restrange(c)
	return ""
}

// Error is an error whose text is the Redis error as it is answered
// ("WRONGPASS ...").
type Error string

func (e Error) Error() string { return string(e) }

// RedisError is the error's Redis text.
func (e Error) RedisError() string { return string(e) }

// The errors an Authenticator answers, in Redis's words.
const (
	// ErrWrongPass: not a password of the user, or the user is off.
	ErrWrongPass = Error(errWrongPass)
	// ErrNoPassword: AUTH password while the user default has none.
	ErrNoPassword = Error(errNoPassword)
)

func cmdAuth(c *conn, a [][]byte) {
	switch len(a) {
	case 2:
		if c.authenticate("", string(a[1])) {
			c.OK()
		}
	case 3:
		if c.authenticate(string(a[1]), string(a[2])) {
			c.OK()
		}
	default:
		c.Err("ERR syntax error")
	}
}

// helloAuth is HELLO's AUTH (user and pass), asked before HELLO answers:
// true when it may go on. Without AUTH, a connection that must
// authenticate is answered NOAUTH, as Redis answers it.
func (c *conn) helloAuth(auth bool, user, pass string) bool {
	if auth {
		return c.authenticate(user, pass)
	}
	if a, ok := c.s.node.(Authenticator); ok && a.MustAuthenticate(c.nc) {
		c.Err(errNoAuthHello)
		return false
	}
	return true
}
