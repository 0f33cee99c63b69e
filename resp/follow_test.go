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
