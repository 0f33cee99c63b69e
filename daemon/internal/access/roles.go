package access

import (
	"slices"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/wire"
)

// Role is what a caller of the local API may do. Each route needs one
// (daemon/httpapi's package doc has the table); consume, publish and admin each
// include read, and admin includes every role.
type Role int

// The roles, from the least to the most.
const (
	// RoleNone: health checks, open to anyone who can open the socket.
	RoleNone Role = iota
	// RoleRead: keys, topics, status, cluster, groups and cursor listings,
	// subscriptions that move no durable cursor.
	RoleRead
	// RoleConsume: durable cursors (set, delete, ack=auto), consumer-group
	// membership, acks and nacks, dead-letter listings.
	RoleConsume
	// RolePublish: PUT, DELETE and POST messages.
	RolePublish
	// RoleAdmin: group resets, dead-letter replays, other users' cursors.
	RoleAdmin
)

// String is the role's name as the flags and errors spell it.
func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RoleRead:
		return "read"
	case RoleConsume:
		return "consume"
	case RolePublish:
		return "publish"
	case RoleAdmin:
		return "admin"
	}
	return "unknown"
}

// flags names the flags that grant the role.
func (r Role) flags() string {
	switch r {
	case RoleRead:
		return "--read-uids or --read-gids"
	case RoleConsume:
		return "--consume-uids or --consume-gids"
	case RolePublish:
		return "--allow-uids or --allow-gids"
	}
	return "--admin-uids or --admin-gids"
}

// IDs is one role's user and group IDs (--read-uids and --read-gids,
// say).
type IDs struct {
	UIDs, GIDs []uint32
}

func (l IDs) empty() bool { return len(l.UIDs) == 0 && len(l.GIDs) == 0 }

// lists reports whether c's user, primary group or one of its
// supplementary groups is on the list.
func (l IDs) lists(c Caller) bool {
	if !c.Known {
		return false
	}
	if slices.Contains(l.UIDs, c.UID) || slices.Contains(l.GIDs, c.GID) {
		return true
	}
	for _, g := range c.Groups {
		if slices.Contains(l.GIDs, g) {
			return true
		}
	}
	return false
}

// Roles are the role lists of a configuration (swapped whole by a
// reload).
type Roles struct {
	read, consume, publish, admin IDs
	// self is the daemon's own user ID: always admin, as is root.
	self uint32
}

// NewRoles makes the role lists; self is the daemon's own uid.
func NewRoles(read, consume, publish, admin IDs, self uint32) *Roles {
	l := func(ids IDs) IDs { return IDs{slices.Clone(ids.UIDs), slices.Clone(ids.GIDs)} }
	r := &Roles{
		read:    l(read),
		consume: l(consume),
		publish: l(publish),
		admin:   l(admin),
		self:    self,
	}
	// An empty list is the list of the role below it: consuming changes
	// shared state, so by default the publishers do it, and a restriction
	// of the readers restricts the writers too.
	if r.publish.empty() {
		r.publish = r.read
	}
	if r.consume.empty() {
		r.consume = r.publish
	}
	return r
}

// Has reports whether c holds role need. A list still empty after the
// fallbacks of NewRoles admits anyone who can open the socket.
func (r *Roles) Has(c Caller, need Role) bool {
	if need <= c.Granted {
		return true
	}
	if c.Known && (c.UID == 0 || c.UID == r.self) || r.admin.lists(c) {
		return true
	}
	open := func(l IDs) bool { return l.empty() || l.lists(c) }
	switch need {
	case RoleRead:
		return open(r.read) || open(r.consume) || open(r.publish)
	case RoleConsume:
		return open(r.consume)
	case RolePublish:
		return open(r.publish)
	}
	return false
}

// Guard is the one permission check of the daemon: the local API checks
// each route with Authorize, and other front doors call it the same way.
// Its roles and the Redis door's users are swapped whole by a reload (Set,
// SetUsers).
type Guard struct {
	roles atomic.Pointer[Roles]
	users atomic.Pointer[Users]
	log   *zap.Logger
}

// NewGuard makes a Guard of r; refusals are logged to log.
func NewGuard(r *Roles, log *zap.Logger) *Guard {
	g := &Guard{log: log}
	g.roles.Store(r)
	g.users.Store(&Users{})
	return g
}

// Set puts r in force.
func (g *Guard) Set(r *Roles) { g.roles.Store(r) }

// SetUsers puts the Redis door's users in force (nil: none).
func (g *Guard) SetUsers(u *Users) {
	if u == nil {
		u = &Users{}
	}
	g.users.Store(u)
}

// Users are the Redis door's users in force.
func (g *Guard) Users() *Users { return g.users.Load() }

// Has reports whether c holds role need now. A caller that authenticated
// as a user (AUTH) holds at most the user's roles, and on the Unix socket
// only those its uid holds too; a TCP client that did not holds the
// anonymous roles (Users.Anonymous); a caller another credential vouches
// for (Granted: the console's token) holds that role and those below, no
// more; and one whose credentials are unknown reads at most.
func (g *Guard) Has(c Caller, need Role) bool {
	if !c.Known && !c.TCP && c.User == "" {
		if c.Granted != RoleNone {
			// Vouched for by another credential (the console's token):
			// that role and those below it, never more.
			return need <= c.Granted
		}
		if need > RoleRead {
			// Credentials unknown (the console on loopback without a
			// token): it may read where the read role is open, and never
			// write, consume or administer (issue 31).
			return false
		}
	}
	if c.User != "" || c.TCP {
		u := g.users.Load()
		set := u.RolesOf(c.User)
		if c.User == "" {
			set, _ = u.Anonymous()
		}
		if !set.Has(need) {
			return false
		}
		if !c.Known {
			return true
		}
	}
	return g.roles.Load().Has(c, need)
}

// Authorize is nil when c holds role need, else a 403 forbidden naming
// the role, the caller and the flags that grant it (and logged).
func (g *Guard) Authorize(c Caller, need Role) *wire.Error {
	if g.Has(c, need) {
		return nil
	}
	g.log.Warn("request refused", append(c.Fields(), zap.Stringer("role", need))...)
	switch {
	case c.User != "" && c.Known && g.users.Load().RolesOf(c.User).Has(need):
		return wire.Errorf(wire.CodeForbidden, "%s does not have the %s role this needs: AUTH narrows a uid's roles, never widens them; it is granted by %s",
			c.Who(), need, need.flags())
	case c.User != "":
		return wire.Errorf(wire.CodeForbidden, "%s does not have the %s role this needs; it is granted by the user's rules in --redis-users (%s)",
			c.Who(), need, need.category())
	case c.TCP:
		return wire.Errorf(wire.CodeForbidden, "the %s role is needed and an unauthenticated TCP client may only read (without --redis-users) or hold the user default's roles; AUTH as a user of --redis-users with %s",
			need, need.category())
	case !c.Known:
		return wire.Errorf(wire.CodeForbidden, "the %s role is needed and the caller's credentials are unknown (%s)", need, need.flags())
	}
	return wire.Errorf(wire.CodeForbidden, "uid %d (gid %d) does not have the %s role this needs; it is granted by %s", c.UID, c.GID, need, need.flags())
}

// category is the users file's rule that grants the role.
func (r Role) category() string {
	switch r {
	case RoleRead:
		return "+@read"
	case RoleConsume:
		return "+@consume"
	case RolePublish:
		return "+@write"
	}
	return "+@admin"
}
