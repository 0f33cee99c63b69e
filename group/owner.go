package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/record"
)

// Owner is who joins a group or settles its messages, as the daemon names
// a local user ("uid 1000"), and whether it is an admin, who may act on
// any group. A group belongs to the owner whose member first joined it on
// this node; the claim is written to OwnersTopic before that member is
// served, so a restart keeps it. Owners are node-local, as uids are: each
// node keeps and reads its own key of a group. A group that has no owner
// recorded on this node (one from before owners were recorded, or one
// never joined here) is adopted by the first named owner to join it, as a
// durable cursor without a recorded owner is by the first user to set it.
// The zero Name is no one's (Join and Ack act as an admin without a name:
// they claim nothing).
type Owner struct {
	Name  string
	Admin bool
}

// ErrNotOwner: the group, or the member a message was delivered to, is
// another owner's.
var ErrNotOwner = errors.New("group: not the owner")

// ownership is the value of an OwnersTopic key.
type ownership struct {
	Owner string `json:"owner"`
}

// loadOwners reads this node's recorded owners (at New).
func (m *Manager) loadOwners() {
	for _, k := range m.st.Keys(OwnersTopic, "", "", 0) {
		t, g, node, ok := parseNodeKey(k)
		if !ok || node != m.self {
			continue
		}
		e, ok := m.st.Get(OwnersTopic, k)
		if !ok {
			continue
		}
		var o ownership
		if err := json.Unmarshal(e.Value, &o); err != nil || o.Owner == "" {
			// Only the daemon writes this topic: damage. Nobody's claim is
			// invented; the next joiner adopts the group.
			m.log.Error("a group's recorded owner is unreadable: the next member to join adopts the group",
				zap.String("topic", t), zap.String("group", g), zap.ByteString("value", e.Value), zap.Error(err))
			continue
		}
		m.owners[groupKey{t, g}] = o.Owner
	}
}

// claim makes group k owner's if it has no owner here yet and owner has a
// name, and records that in OwnersTopic before it returns; otherwise it
// says whether owner may join k (mayUseLocked). A join that would be
// refused for its tags claims nothing.
func (m *Manager) claim(ctx context.Context, owner Owner, k groupKey, tags []string) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if err := m.mayUseLocked(owner, k); err != nil {
		m.mu.Unlock()
		return err
	}
	_, owned := m.owners[k]
	if owned || owner.Name == "" {
		m.mu.Unlock()
		return nil
	}
	if m.groups[k] == nil {
		if err := m.agrees(k.topic, k.name, tags); err != nil {
			m.mu.Unlock()
			return err
		}
	}
	m.owners[k] = owner.Name
	m.mu.Unlock()
	had := len(m.st.Keys(OffsetsTopic, k.topic+"/"+k.name+"/", "", 1)) > 0
	b, err := json.Marshal(ownership{Owner: owner.Name})
	if err == nil {
		err = m.cfg.Write(ctx, []record.Message{{Topic: OwnersTopic, Key: nodeKey(k.topic, k.name, m.self), Value: b}})
	}
	if err != nil {
		m.mu.Lock()
		if m.owners[k] == owner.Name && m.groups[k] == nil {
			delete(m.owners, k) // the next join tries again
		}
		m.mu.Unlock()
		return fmt.Errorf("recording the owner of group %s on %s: %w", k.name, k.topic, err)
	}
	m.log.Info("consumer group claimed", zap.String("topic", k.topic), zap.String("group", k.name),
		zap.String("owner", owner.Name), zap.Bool("had_positions", had))
	return nil
}

// mayUseLocked says whether owner may join group k or read its dead
// letters (under m.mu): a group is the owner's who claimed it on this
// node, for good (its members may come and go, the daemon restart).
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
