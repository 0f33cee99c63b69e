package group

import (
	"github.com/cachecast/cachecast/internal/testkit"
	"strings"
	"testing"
	"time"
)

// TestStatusListsGroupWithoutMembers: a group whose last member left is
// still listed, from its positions and dead letters, with no hosting
// node and the number of dead letters it holds, so that its dead letters
// can be found and replayed.
func TestStatusListsGroupWithoutMembers(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxRetries = 0 })
	mb, err := r.m.Join("orders", "billing", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []ID
	for _, k := range []string{"o-1", "o-2"} {
		ids = append(ids, r.publish("orders", k, "pay", ""))
	}
	var buf []Delivery
	for range ids {
		d := next(t, mb, &buf)
		r.ack("orders", "billing", nil, []ID{d.ID}) // refused: with no retries, dead at once
	}
	testkit.Eventually(t, 10*time.Second, "two dead letters", func() bool {
		dls, _, err := r.m.DeadLetters("orders", "billing", "", 10)
		return err == nil && len(dls) == 2
	})
	mb.Close()

	var st []Status
	testkit.Eventually(t, 10*time.Second, "the group to be listed without a live host", func() bool {
		st = r.m.Status()
		return len(st) == 1 && len(st[0].Nodes) == 0
	})
	s := st[0]
	if s.Topic != "orders" || s.Group != "billing" || s.DLQ != 2 || len(s.Members) != 0 || s.Queues != DefaultQueues {
		t.Fatalf("status of the group without members: %+v; want orders/billing, no nodes or members, 2 dead letters", s)
	}

	// After a restart of the node the group is known only from the
	// replicated topics: still listed.
	r.close()
	r.open(func(c *Config) { c.MaxRetries = 0 })
	st = r.m.Status()
	if len(st) != 1 || st[0].Group != "billing" || len(st[0].Nodes) != 0 || st[0].DLQ != 2 {
		t.Fatalf("status after a restart: %+v", st)
	}
	// Replayed, the dead letters are gone from the count; the group stays
	// listed for its positions.
	if n, err := r.m.Replay(t.Context(), "orders", "billing", nil, true); err != nil || n != 2 {
		t.Fatalf("Replay: %d, %v", n, err)
	}
	if st = r.m.Status(); len(st) != 1 || st[0].DLQ != 0 {
		t.Fatalf("status after the replay: %+v", st)
	}
}

func TestParseDeadLetterTopic(t *testing.T) {
	for _, tc := range []struct {
		name, topic, group string
		ok                 bool
	}{
		{DeadLetterTopic("orders", "billing"), "orders", "billing", true},
		{"$dlq/orders", "", "", false},
		{"$dlq//billing", "", "", false},
		{"$dlq/orders/", "", "", false},
		{"$dlq/a/b/c", "", "", false},
		{RetryTopic("orders", "billing"), "", "", false},
		{"orders", "", "", false},
	} {
		topic, group, ok := parseDeadLetterTopic(tc.name)
		if topic != tc.topic || group != tc.group || ok != tc.ok {
			t.Errorf("parseDeadLetterTopic(%q) = %q, %q, %v", tc.name, topic, group, ok)
		}
	}
}

// FuzzParseDeadLetterTopic: what parses names a topic and a group without
// '/', and DeadLetterTopic writes it back as it was.
func FuzzParseDeadLetterTopic(f *testing.F) {
	f.Add(DeadLetterTopic("orders", "billing"))
	f.Add("$dlq/a/b/c")
	f.Add("$retry/orders/billing")
	f.Fuzz(func(t *testing.T, name string) {
		topic, group, ok := parseDeadLetterTopic(name)
		if !ok {
			return
		}
		if topic == "" || group == "" || strings.Contains(topic, "/") || strings.Contains(group, "/") || DeadLetterTopic(topic, group) != name {
			t.Fatalf("%q parsed as %q, %q", name, topic, group)
		}
	})
}
