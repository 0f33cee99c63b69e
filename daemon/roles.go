package daemon

import (
	"slices"

	"go.uber.org/zap"
)

// Role is what a caller of the local API may do. Each route needs one
// (see the package doc for the table); consume, publish and admin each
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

// idList is one role's user and group IDs.
type idList struct {
	uids, gids []uint32
}

func (l idList) empty() bool { return len(l.uids) == 0 && len(l.gids) == 0 }

// lists reports whether c's user, primary group or one of its
// supplementary groups is on the list.
func (l idList) lists(c Caller) bool {
	if !c.Known {
		return false
	}
	if slices.Contains(l.uids, c.UID) || slices.Contains(l.gids, c.GID) {
		return true
	}
	for _, g := range c.Groups {
		if slices.Contains(l.gids, g) {
			return true
		}
	}
	return false
}

// roles are the role lists of a configuration (swapped whole by Reload).
type roles struct {
	read, consume, publish, admin idList
	// self is the daemon's own user ID: always admin, as is root.
	self uint32
}

func newRoles(cfg Config, self uint32) *roles {
	l := func(u, g []uint32) idList { return idList{slices.Clone(u), slices.Clone(g)} }
	r := &roles{
		read:    l(cfg.ReadUIDs, cfg.ReadGIDs),
		consume: l(cfg.ConsumeUIDs, cfg.ConsumeGIDs),
		publish: l(cfg.AllowUIDs, cfg.AllowGIDs),
		admin:   l(cfg.AdminUIDs, cfg.AdminGIDs),
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

// has reports whether c holds role need. A list still empty after the
// fallbacks of newRoles admits anyone who can open the socket.
func (r *roles) has(c Caller, need Role) bool {
	if need == RoleNone {
		return true
	}
	if c.Known && (c.UID == 0 || c.UID == r.self) || r.admin.lists(c) {
		return true
	}
	open := func(l idList) bool { return l.empty() || l.lists(c) }
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

// authorize is the one permission check of the daemon: nil when c holds
// role need, else a 403 forbidden naming the role, the caller and the
// flags that grant it. The local API checks each route with it; other
// front doors call it the same way.
func (d *Daemon) authorize(c Caller, need Role) *apiError {
	if d.roles.Load().has(c, need) {
		return nil
	}
	d.log.Warn("request refused", append(c.fields(), zap.Stringer("role", need))...)
	if !c.Known {
		return errorf(CodeForbidden, "the %s role is needed and the caller's credentials are unknown (%s)", need, need.flags())
	}
	return errorf(CodeForbidden, "uid %d (gid %d) does not have the %s role this needs; it is granted by %s", c.UID, c.GID, need, need.flags())
}
