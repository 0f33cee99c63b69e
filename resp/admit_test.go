package resp

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// authNode is a storeNode with one user, alice (password pw), that every
// connection must authenticate as; its share is "user alice".
type authNode struct {
	*storeNode
	mu     sync.Mutex
	logins map[net.Conn]string
}

func (n *authNode) Authenticate(c net.Conn, user, pass string) error {
	if user != "alice" || pass != "pw" {
		return ErrWrongPass
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.logins[c] = user
	return nil
}

func (n *authNode) user(c net.Conn) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logins[c]
}

func (n *authNode) MustAuthenticate(c net.Conn) bool { return n.user(c) == "" }

func (n *authNode) Logout(c net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.logins, c)
}

func (n *authNode) Peer(c net.Conn) string {
	if u := n.user(c); u != "" {
		return "user " + u
	}
	return "strangers"
}

// authServer serves an authNode with cfg's limits.
func authServer(t *testing.T, cfg Config) string {
	t.Helper()
	_, sn := limitServer(t, Config{}) // the store, closed with its server
	cfg.Node = &authNode{storeNode: sn, logins: map[net.Conn]string{}}
	cfg.MaxValueSize, cfg.MaxFrameSize = 64<<10, 1<<20
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return serveTCP(t, s)
}

// TestAuthRequired: NOAUTH before AUTH (the connection goes on), Redis's
// WRONGPASS, and HELLO's AUTH.
func TestAuthRequired(t *testing.T) {
	addr := authServer(t, Config{})
	c := dial(t, addr)
	for _, step := range []struct{ args, want string }{
		{"GET k", "-NOAUTH Authentication required."},
		{"PING", "-NOAUTH Authentication required."},
		{"HELLO 3", "-NOAUTH HELLO must be called with the client already authenticated"},
		{"AUTH pw", "-WRONGPASS invalid username-password pair or user is disabled."},
		{"AUTH alice nope", "-WRONGPASS"},
		{"AUTH a b c", "-ERR syntax error"},
		{"NOSUCH", "-ERR unknown command"},
		{"HELLO 3 AUTH alice pw", "%7 server redis"},
		{"PING", "+PONG"},
	} {
		if got := c.do(strings.Fields(step.args)...); !strings.HasPrefix(got, step.want) {
			t.Errorf("%s: %q, want %q", step.args, got, step.want)
		}
	}
}

// TestStrangers: the connections that must authenticate share a pool
// (the oldest closes for a new one), each has AuthTimeout to
// authenticate, and an authenticated one counts against its user's
// share, not the pool.
func TestStrangers(t *testing.T) {
	addr := authServer(t, Config{MaxUnauthenticated: 2, MaxConnectionsPerPeer: 2, AuthTimeout: 300 * time.Millisecond})
	a := dial(t, addr)
	if got := a.do("AUTH", "alice", "pw"); got != "+OK" {
		t.Fatalf("AUTH: %q", got)
	}
	b, c := dial(t, addr), dial(t, addr)
	b.send("AUTH", "alice", "pw")
	if got, err := b.reply(); err != nil || got != "+OK" {
		t.Fatalf("a second of alice's: %q, %v", got, err)
	}
	// The pool holds c and d; e closes c, the oldest stranger.
	d := dial(t, addr)
	if got := d.do("PING"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("PING unauthenticated: %q", got)
	}
	e := dial(t, addr)
	if !c.closed() {
		t.Fatal("the oldest stranger was not closed for a new one")
	}
	// alice's share (2) is full: a third of hers is refused at AUTH.
	if got := e.do("AUTH", "alice", "pw"); !strings.HasPrefix(got, "-ERR max number of clients reached for user alice") {
		t.Fatalf("a third connection of alice's: %q", got)
	}
	if !e.closed() {
		t.Fatal("refused at AUTH, the connection stays open")
	}
	// d never authenticates: closed at its AuthTimeout; alice's stay.
	if !d.closed() {
		t.Fatal("a stranger outlived its AuthTimeout")
	}
	if got := a.do("PING"); got != "+PONG" {
		t.Fatalf("alice's connection after the strangers went: %q", got)
	}
}

// TestResetRejoinsStrangers: RESET makes an authenticated connection a
// stranger again, as Redis returns it to the user default: NOAUTH until
// it authenticates, its place in its user's share given back, and a
// place in the strangers' pool taken (the oldest closes for a new one).
func TestResetRejoinsStrangers(t *testing.T) {
	addr := authServer(t, Config{MaxUnauthenticated: 1, MaxConnectionsPerPeer: 1, AuthTimeout: time.Minute})
	a := dial(t, addr)
	for _, step := range []struct{ args, want string }{
		{"AUTH alice pw", "+OK"},
		{"PING", "+PONG"},
		{"RESET", "+RESET"},
		{"PING", "-NOAUTH Authentication required."},
	} {
		if got := a.do(strings.Fields(step.args)...); !strings.HasPrefix(got, step.want) {
			t.Fatalf("%s: %q, want %q", step.args, got, step.want)
		}
	}
	b := dial(t, addr) // the pool (1) is full: a, the oldest stranger, closes
	if !a.closed() {
		t.Fatal("a connection RESET left the strangers' pool")
	}
	if got := b.do("AUTH", "alice", "pw"); got != "+OK" {
		t.Fatalf("alice's share after her connection's RESET: %q", got)
	}
}
