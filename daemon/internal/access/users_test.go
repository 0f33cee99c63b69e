package access

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestParseUsers(t *testing.T) {
	hash := sha256.Sum256([]byte("hashed"))
	file := strings.Join([]string{
		"# cachecast's Redis users",
		"",
		"user alice on >secret ~* &* +@all",
		"user writer on >w1 >w2 <w1 allkeys +@write",
		"user reader on #" + hex.EncodeToString(hash[:]) + " ~* +@read",
		"user consumer on >c ~* +@consume",
		"user admin on >a ~* +@admin",
		"user off >x ~* +@all",
		"user default on nopass ~* +@read",
		"user none on >n",
		"user reset on >r ~* +@all reset on >r2",
	}, "\n")
	u, err := ParseUsers([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user, pass string
		ok         bool
		roles      RoleSet
	}{
		{"alice", "secret", true, Of(RoleAdmin)},
		{"alice", "Secret", false, Of(RoleAdmin)},
		{"writer", "w1", false, Of(RolePublish)}, // removed by <w1
		{"writer", "w2", true, Of(RolePublish)},
		{"reader", "hashed", true, Of(RoleRead)},
		{"consumer", "c", true, Of(RoleConsume)},
		{"admin", "a", true, Of(RoleAdmin)},
		{"off", "x", false, 0}, // a user that is off has no roles
		{"default", "anything", true, Of(RoleRead)},
		{"none", "n", true, 0},
		{"reset", "r", false, 0}, // reset cleared the password and the roles
		{"reset", "r2", true, 0},
		{"nosuch", "", false, 0},
	} {
		if got := u.Check(c.user, c.pass); got != c.ok {
			t.Errorf("Check(%s, %s) = %v, want %v", c.user, c.pass, got, c.ok)
		}
		if got := u.RolesOf(c.user); got != c.roles {
			t.Errorf("RolesOf(%s) = %s, want %s", c.user, got, c.roles)
		}
	}
	if set, open := u.Anonymous(); !open || set != Of(RoleRead) {
		t.Errorf("Anonymous with default on nopass +@read: %s, %v", set, open)
	}
}

func TestParseUsersRefuses(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"alice on >p +@all", `want "user <name> [rule]..."`},
		{"user", `want "user <name> [rule]..."`},
		{"user alice on >p ~prices:* +@all", `"~prices:*" is not supported`},
		{"user alice on >p ~* +get", `"+get" is not supported`},
		{"user alice on >p ~* +@hash", `"+@hash" is not supported`},
		{"user alice on >p ~* -@write", `"-@write" is not supported`},
		{"user alice on >p +@read", "has roles (read) but no ~*"},
		{"user alice on nopass ~* +@write", "nopass with roles publish"},
		{"user alice on #abc ~* +@read", "want 64 hex digits"},
		{"user a on >p ~* +@read\nuser a on >q ~* +@read", `line 2: user "a" is defined twice`},
	} {
		_, err := ParseUsers([]byte(c.line))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.line, err, c.want)
		}
	}
}

func TestRoleSetAndGuard(t *testing.T) {
	u, err := ParseUsers([]byte("user w on >p ~* +@write\nuser r on >p ~* +@read"))
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(NewRoles(IDs{}, IDs{}, IDs{UIDs: []uint32{7}}, IDs{}, 1000), zap.NewNop())
	g.SetUsers(u)
	for _, c := range []struct {
		name   string
		caller Caller
		need   Role
		want   bool
	}{
		{"anonymous TCP reads", Caller{TCP: true}, RoleRead, false}, // users configured, no default: none
		{"TCP as w publishes", Caller{TCP: true, User: "w"}, RolePublish, true},
		{"TCP as r reads", Caller{TCP: true, User: "r"}, RoleRead, true},
		{"TCP as r does not publish", Caller{TCP: true, User: "r"}, RolePublish, false},
		{"TCP as an unknown user", Caller{TCP: true, User: "x"}, RoleRead, false},
		{"uid 7 publishes", Caller{Known: true, UID: 7}, RolePublish, true},
		{"uid 7 as r is narrowed", Caller{Known: true, UID: 7, User: "r"}, RolePublish, false},
		{"uid 8 as w is not widened", Caller{Known: true, UID: 8, User: "w"}, RolePublish, false},
		{"uid 8 as w reads", Caller{Known: true, UID: 8, User: "w"}, RoleRead, true},
		{"the console's reader reads", Caller{Granted: RoleRead}, RoleRead, true},
		{"the console's reader does not publish", Caller{Granted: RoleRead}, RolePublish, false},
		{"the console's reader does not consume", Caller{Granted: RoleRead}, RoleConsume, false},
		{"an unknown caller reads where reading is open", Caller{}, RoleRead, true},
		{"an unknown caller does not publish, the lists open or not", Caller{}, RolePublish, false},
	} {
		if got := g.Has(c.caller, c.need); got != c.want {
			t.Errorf("%s: Has = %v, want %v", c.name, got, c.want)
		}
	}
	g.SetUsers(nil)
	if !g.Has(Caller{TCP: true}, RoleRead) || g.Has(Caller{TCP: true}, RolePublish) {
		t.Error("without users a TCP client should read and not publish")
	}
}

func FuzzParseUsers(f *testing.F) {
	f.Add([]byte("user alice on >secret ~* +@all\n"))
	f.Add([]byte("user r on #" + strings.Repeat("ab", 32) + " allkeys +@read resetkeys ~*\n# c\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := ParseUsers(b)
		if err != nil {
			return
		}
		for name, usr := range u.byName {
			if usr.NoPass && usr.Roles&^Of(RoleRead) != 0 {
				t.Fatalf("user %q: nopass with %s accepted", name, usr.Roles)
			}
			_ = u.Check(name, "")
		}
	})
}

// A TCP connection's bytes count in the unauthenticated share until it
// authenticates, then in its user's: what it held moves with it.
func TestBudgetTCPShares(t *testing.T) {
	b := NewBudget(100, 60)
	anon, other := &TCPConn{}, &TCPConn{}
	if e := b.Hold(anon, 50); e != nil {
		t.Fatal(e)
	}
	if e := b.Hold(other, 20); e == nil || !strings.Contains(e.Message, "an unauthenticated TCP client") || !strings.Contains(e.Message, "--max-body-memory-per-uid") {
		t.Fatalf("a second unauthenticated client past the shared share: %v", e)
	}
	anon.Login("alice")
	if e := b.Hold(anon, 5); e != nil {
		t.Fatal(e)
	}
	if e := b.Hold(other, 20); e != nil {
		t.Fatalf("the unauthenticated share after alice's bytes moved to hers: %v", e)
	}
	if e := b.Hold(other, 30); e == nil || !strings.Contains(e.Message, "--max-body-memory (") {
		t.Fatalf("past the node's budget: %v", e)
	}
	b.ReleaseHeld(anon)
	b.ReleaseHeld(other)
	if n := b.InUse(); n != 0 || len(b.byPeer) != 0 {
		t.Fatalf("after every release: %d in use, shares %v", n, b.byPeer)
	}
	var none *Conn
	if e := b.Hold(none, 1<<40); e != nil {
		t.Fatalf("a connection not of the daemon's listeners is not counted: %v", e)
	}
}
