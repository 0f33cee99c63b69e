package group

import (
	"errors"
	"fmt"
)

// Owner is who joins a group or settles its messages, as the daemon names
// a local user ("uid 1000"), and whether it is an admin, who may act on
// any group. A group belongs to the owner whose member created it on this
// node, for the life of the process: owners are node-local, as uids are,
// and not written to the group's replicated state. The zero Name is no
// one's (Join and Ack act as an admin without a name: their groups are
// anyone's).
type Owner struct {
	Name  string
	Admin bool
}

// ErrNotOwner: the group, or the member a message was delivered to, is
// another owner's.
var ErrNotOwner = errors.New("group: not the owner")

// mayUseLocked says whether owner may join group k or read its dead
// letters (under m.mu): a group is the owner's whose member created it on
// this node, for the life of the process (its members may come and go).
func (m *Manager) mayUseLocked(owner Owner, k groupKey) error {
	o, owned := m.owners[k]
	if owner.Admin || !owned || o == owner.Name {
		return nil
	}
	return fmt.Errorf("%w: group %s on %s belongs to %s; only it or an admin may join it or read its dead letters", ErrNotOwner, k.name, k.topic, o)
}

// settlesLocked says whether by may ack or nack every one of ids: each
// in flight here must have been delivered to a member of by's (an admin
// may settle any). Nothing is settled when one is not.
func (g *group) settlesLocked(by Owner, ack, nack []ID) error {
	if by.Admin {
		return nil
	}
	for _, ids := range [][]ID{ack, nack} {
		for _, id := range ids {
			if f := g.flights[id]; f != nil && f.owner != by.Name {
				return fmt.Errorf("%w: message %s of group %s was delivered to a member of %s; only it or an admin may ack or nack it (nothing was settled)",
					ErrNotOwner, id, g.name, f.owner)
			}
		}
	}
	return nil
}

// CheckOwner says whether owner may act on group name of topic (read its
// dead letters): it must be the group's owner on this node, if it has
// one, or an admin.
func (m *Manager) CheckOwner(owner Owner, topic, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mayUseLocked(owner, groupKey{topic, name})
}
