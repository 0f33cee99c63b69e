package group

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// TestOwnersOutliveRestart: a group's owner is recorded in OwnersTopic
// when it claims the group, so after a restart another owner is still
// refused and the owner and an admin are not; a group with state from
// before owners were recorded is adopted by its first joiner after the
// restart, as a cursor without an owner is; a claim whose record cannot
// be written fails the join and claims nothing.
func TestOwnersOutliveRestart(t *testing.T) {
	var failing atomic.Bool
	r := newRig(t, func(c *Config) {
		write := c.Write
		c.Write = func(ctx context.Context, msgs []record.Message) error {
			if failing.Load() && msgs[0].Topic == OwnersTopic {
				return store.ErrDiskFull
			}
			return write(ctx, msgs)
		}
	})
	ctx := context.Background()
	alice, bob, admin := Owner{Name: "uid 1000"}, Owner{Name: "uid 1001"}, Owner{Name: "uid 0", Admin: true}
	join := func(o Owner, group string) error {
		t.Helper()
		mb, err := r.m.JoinAs(ctx, o, "t", group, nil, 0)
		if err == nil {
			mb.Close()
		}
		return err
	}
	if err := join(alice, "owned"); err != nil {
		t.Fatal(err)
	}
	// A group from before owners were recorded: state, no owner.
	mb, err := r.m.Join("t", "legacy", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	id := r.publish("t", "k", "v", "")
	var buf []Delivery
	next(t, mb, &buf)
	r.ack("t", "legacy", []ID{id}, nil)
	mb.Close()
	failing.Store(true)
	if err := join(bob, "unrecorded"); !errors.Is(err, store.ErrDiskFull) || !strings.Contains(err.Error(), "recording the owner of group unrecorded") {
		t.Fatalf("a join whose claim cannot be written: %v", err)
	}
	failing.Store(false)

	r.close()
	r.open(nil)
	for _, c := range []struct {
		name  string
		who   Owner
		group string
		ok    bool
	}{
		{"another uid joins the owned group", bob, "owned", false},
		{"the owner joins it", alice, "owned", true},
		{"an admin joins it", admin, "owned", true},
		{"the first to join the legacy group adopts it", bob, "legacy", true},
		{"then another is refused", alice, "legacy", false},
		{"the failed claim left the group to the next joiner", alice, "unrecorded", true},
		{"who is refused", bob, "unrecorded", false},
	} {
		err := join(c.who, c.group)
		if c.ok != (err == nil) || !c.ok && !errors.Is(err, ErrNotOwner) {
			t.Errorf("%s: %v", c.name, err)
		}
		if err := r.m.CheckOwner(c.who, "t", c.group); c.ok != (err == nil) {
			t.Errorf("%s: CheckOwner: %v", c.name, err)
		}
	}
}
