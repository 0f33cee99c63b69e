package access

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// RoleSet is a set of roles: those a user of the Redis door's users file
// (--redis-users) holds. Admin includes every role; read is in every
// non-empty set.
type RoleSet uint8

// Of is the set holding the roles rs.
func Of(rs ...Role) RoleSet {
	var s RoleSet
	for _, r := range rs {
		s |= 1 << r
	}
	return s
}

// Has reports whether the set grants need.
func (s RoleSet) Has(need Role) bool {
	switch {
	case need == RoleNone:
		return true
	case s&(1<<RoleAdmin) != 0:
		return true
	case need == RoleRead:
		return s != 0
	}
	return s&(1<<need) != 0
}

// String lists the roles ("read,publish"; "none").
func (s RoleSet) String() string {
	var names []string
	for r := RoleRead; r <= RoleAdmin; r++ {
		if s&(1<<r) != 0 {
			names = append(names, r.String())
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// DefaultUser is the user AUTH password (one argument) names, and the
// one an unauthenticated connection is when the users file makes it on
// and nopass, as in Redis.
const DefaultUser = "default"

// User is one user of the users file.
type User struct {
	Name  string
	On    bool
	Roles RoleSet
	// NoPass: any password is accepted (Redis's nopass).
	NoPass bool
	// hashes are the SHA-256 of the user's passwords.
	hashes [][sha256.Size]byte
}

// Users is the Redis door's users file, read whole and swapped whole by a
// reload. The zero value (and nil) has no users.
type Users struct {
	byName map[string]*User
}

// maxUsersFile bounds the users file.
const maxUsersFile = 1 << 20

// LoadUsers reads the users file at path (see ParseUsers).
func LoadUsers(path string) (*Users, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxUsersFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxUsersFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxUsersFile)
	}
	u, err := ParseUsers(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return u, nil
}

// ParseUsers reads a users file: one user a line, in a subset of Redis's
// ACL file syntax, blank lines and lines starting with '#' ignored:
//
//	user <name> [rule]...
//
// The rules, applied left to right as Redis applies them:
//
//	on, off              the user may authenticate, or not (the default: off)
//	>password            adds a password; <password removes it
//	#<sha256 hex>        adds a password by its SHA-256; !<hex> removes it
//	nopass, resetpass    any password works; no password works (clears them)
//	~*, allkeys          every key: the only key pattern there is (required
//	                     with any role: roles cover every key)
//	&*, allchannels      every channel (accepted; subscriptions need read)
//	resetkeys, resetchannels, reset
//	+@all, allcommands   admin (every role)
//	+@admin              admin
//	+@write              publish (and read)
//	+@consume            consume (and read; cachecast's own category)
//	+@read               read
//	-@all, nocommands    no role
//
// Anything else (a key pattern other than ~*, a single command such as
// +get, another category) is refused with its line: cachecast's roles are
// not per key or per command, and a rule that cannot be kept is not
// accepted. A user with nopass may hold read only: a password-free user
// that publishes would be any local user.
func ParseUsers(b []byte) (*Users, error) {
	u := &Users{byName: map[string]*User{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxUsersFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		usr, err := parseUser(strings.Fields(line))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if _, dup := u.byName[usr.Name]; dup {
			return nil, fmt.Errorf("line %d: user %q is defined twice", n, usr.Name)
		}
		u.byName[usr.Name] = usr
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return u, nil
}

// parseUser reads one "user name rule..." line.
func parseUser(f []string) (*User, error) {
	if len(f) < 2 || f[0] != "user" {
		return nil, fmt.Errorf("want \"user <name> [rule]...\", got %q", strings.Join(f, " "))
	}
	usr := &User{Name: f[1]}
	allKeys := false
	for _, rule := range f[2:] {
		if err := usr.apply(rule, &allKeys); err != nil {
			return nil, fmt.Errorf("user %q: %w", usr.Name, err)
		}
	}
	switch {
	case usr.Roles != 0 && !allKeys:
		return nil, fmt.Errorf("user %q: has roles (%s) but no ~*: cachecast's roles cover every key, so a user with any needs ~* (or allkeys)", usr.Name, usr.Roles)
	case usr.NoPass && usr.Roles&^Of(RoleRead) != 0:
		return nil, fmt.Errorf("user %q: nopass with roles %s: a user without a password may hold read only (anyone could authenticate as it)", usr.Name, usr.Roles)
	}
	return usr, nil
}

// categories are the +@ categories and the roles they grant.
var categories = map[string]RoleSet{
	"all": Of(RoleAdmin), "admin": Of(RoleAdmin), "write": Of(RolePublish),
	"consume": Of(RoleConsume), "read": Of(RoleRead),
}

// apply applies one rule to usr.
func (usr *User) apply(rule string, allKeys *bool) error {
	switch rule {
	case "on":
		usr.On = true
	case "off":
		usr.On = false
	case "nopass":
		usr.NoPass, usr.hashes = true, nil
	case "resetpass":
		usr.NoPass, usr.hashes = false, nil
	case "~*", "allkeys", "%RW~*":
		*allKeys = true
	case "resetkeys":
		*allKeys = false
	case "&*", "allchannels", "resetchannels":
	case "allcommands":
		usr.Roles = Of(RoleAdmin)
	case "nocommands", "-@all":
		usr.Roles = 0
	case "reset":
		*usr = User{Name: usr.Name}
		*allKeys = false
	default:
		return usr.applyValued(rule)
	}
	return nil
}

// applyValued applies a rule with a value: a password, a hash, a category.
func (usr *User) applyValued(rule string) error {
	switch v := rule[1:]; rule[0] {
	case '>':
		h := sha256.Sum256([]byte(v))
		usr.addHash(h)
		return nil
	case '<':
		usr.dropHash(sha256.Sum256([]byte(v)))
		return nil
	case '#', '!':
		var h [sha256.Size]byte
		// The length first: hex.Decode writes past h for a longer string.
		if len(v) != 2*sha256.Size {
			return fmt.Errorf("%q: want 64 hex digits of a SHA-256", rule)
		}
		if n, err := hex.Decode(h[:], []byte(v)); err != nil || n != sha256.Size {
			return fmt.Errorf("%q: want 64 hex digits of a SHA-256", rule)
		}
		if rule[0] == '#' {
			usr.addHash(h)
		} else {
			usr.dropHash(h)
		}
		return nil
	case '+':
		if set, ok := categories[strings.TrimPrefix(v, "@")]; ok && strings.HasPrefix(v, "@") {
			usr.Roles |= set
			return nil
		}
	}
	return fmt.Errorf("%q is not supported: cachecast's roles are granted by +@read, +@write, +@consume, +@admin or +@all over ~*", rule)
}

func (usr *User) addHash(h [sha256.Size]byte) {
	usr.NoPass = false
	usr.dropHash(h)
	usr.hashes = append(usr.hashes, h)
}

func (usr *User) dropHash(h [sha256.Size]byte) {
	for i, x := range usr.hashes {
		if x == h {
			usr.hashes = append(usr.hashes[:i], usr.hashes[i+1:]...)
			return
		}
	}
}

// Len is how many users there are.
func (u *Users) Len() int {
	if u == nil {
		return 0
	}
	return len(u.byName)
}

// Lookup finds a user by name.
func (u *Users) Lookup(name string) (*User, bool) {
	if u == nil {
		return nil, false
	}
	usr, ok := u.byName[name]
	return usr, ok
}

// Check says whether pass is a password of user name, and the user is on.
// Every password is compared in constant time.
func (u *Users) Check(name, pass string) bool {
	usr, ok := u.Lookup(name)
	if !ok || !usr.On {
		return false
	}
	if usr.NoPass {
		return true
	}
	h := sha256.Sum256([]byte(pass))
	match := 0
	for _, x := range usr.hashes {
		match |= subtle.ConstantTimeCompare(h[:], x[:])
	}
	return match == 1
}

// Anonymous is what a connection of the TCP door that has not
// authenticated may do. Without a users file: read. With one: the roles
// of its user default when it is on and nopass (then the connection needs
// no AUTH, as in Redis), and otherwise none (every command but AUTH,
// HELLO, QUIT and RESET answers NOAUTH).
func (u *Users) Anonymous() (RoleSet, bool) {
	if u.Len() == 0 {
		return Of(RoleRead), true
	}
	if d, ok := u.Lookup(DefaultUser); ok && d.On && d.NoPass {
		return d.Roles, true
	}
	return 0, false
}

// RolesOf is what user name may do now: none when the file no longer has
// it on.
func (u *Users) RolesOf(name string) RoleSet {
	if usr, ok := u.Lookup(name); ok && usr.On {
		return usr.Roles
	}
	return 0
}
