package resp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// TestRoundsInvalidateTogether: the changes of one publish reach a BCAST
// tracking client as invalidations of many keys each (one a round of the
// follower, not one a change), and a keyspace subscriber hears every key.
func TestRoundsInvalidateTogether(t *testing.T) {
	const keys = 200
	s, n := limitServer(t, Config{NotifyKeyspaceEvents: "E$"})
	addr := serveTCP(t, s)
	tracker := dial(t, addr)
	tracker.do("HELLO", "3")
	if r := tracker.do("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "t:"); r != "+OK" {
		t.Fatalf("CLIENT TRACKING ON BCAST = %q", r)
	}
	sub := dial(t, addr)
	sub.do("HELLO", "3")
	if r := sub.do("SUBSCRIBE", "__keyevent@0__:set"); !strings.Contains(r, "subscribe") {
		t.Fatalf("SUBSCRIBE = %q", r)
	}
	msgs := make([]record.Message, keys)
	for i := range msgs {
		msgs[i] = record.Message{Topic: "t", Key: fmt.Sprintf("k%d", i), Value: []byte("v")}
	}
	if _, err := n.st.PublishBatch(msgs); err != nil {
		t.Fatal(err)
	}
	told, pushes := map[string]bool{}, 0
	for len(told) < keys {
		r, err := tracker.reply()
		if err != nil {
			t.Fatalf("%d of %d keys invalidated in %d pushes: %v", len(told), keys, pushes, err)
		}
		if !strings.HasPrefix(r, ">2 invalidate ") {
			t.Fatalf("the tracking client got %q", r)
		}
		pushes++
		for _, k := range strings.Fields(r)[3:] {
			told[k] = true
		}
	}
	// The follower may wake while the batch is being written, so a
	// round may hold part of it; a push a key is what it sent before.
	if pushes > keys/10 {
		t.Fatalf("%d keys invalidated in %d pushes", keys, pushes)
	}
	heard := map[string]bool{}
	for len(heard) < keys {
		r, err := sub.reply()
		if err != nil {
			t.Fatalf("%d of %d keyspace events: %v", len(heard), keys, err)
		}
		if f := strings.Fields(r); len(f) == 4 && f[1] == "message" && f[2] == "__keyevent@0__:set" {
			heard[f[3]] = true
		}
	}
}

// TestBcastInvalidatesEachPrefix: a BCAST client of two prefixes gets the
// changes of one batch as one invalidation a prefix, as Redis sends them
// (its own test "Clients can enable the BCAST mode with prefixes" reads
// two messages), never one of names under both.
func TestBcastInvalidatesEachPrefix(t *testing.T) {
	s, n := limitServer(t, Config{})
	tracker := dial(t, serveTCP(t, s))
	tracker.do("HELLO", "3")
	if r := tracker.do("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a:", "PREFIX", "b:"); r != "+OK" {
		t.Fatalf("CLIENT TRACKING ON BCAST = %q", r)
	}
	var msgs []record.Message
	for _, topic := range []string{"a", "b"} {
		for _, key := range []string{"1", "2"} {
			msgs = append(msgs, record.Message{Topic: topic, Key: key, Value: []byte("v")})
		}
	}
	if _, err := n.st.PublishBatch(msgs); err != nil {
		t.Fatal(err)
	}
	told := map[string]bool{}
	for len(told) < len(msgs) {
		r, err := tracker.reply()
		if err != nil {
			t.Fatalf("%d of %d keys invalidated: %v", len(told), len(msgs), err)
		}
		names := strings.Fields(r)[3:]
		if !strings.HasPrefix(r, ">2 invalidate ") || len(names) == 0 {
			t.Fatalf("the tracking client got %q", r)
		}
		for _, k := range names {
			if k[:2] != names[0][:2] {
				t.Fatalf("one invalidation holds names of both prefixes: %q", r)
			}
			told[k] = true
		}
	}
}
