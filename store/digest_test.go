package store

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// publishKeys publishes one message of each key of topic (key "" a
// message without a key, which the view does not hold).
func publishKeys(t *testing.T, s *Store, topic string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := s.Publish(&record.Message{Topic: topic, Key: k, Value: []byte("v-" + k)}); err != nil {
			t.Fatal(err)
		}
	}
}

// lastEnded is when the store's last hash of its view ended: a new
// hash ends at another instant.
func lastEnded(s *Store) time.Time { return s.digests.last.Load().ended }

// TestViewDigestsHeldWhileTheViewIs: ViewDigests hashes the view once and
// gives that digest again, with the vector of the moment it is asked,
// while the view holds it (a message without a key moves the vector, not
// the view); a write to a key makes it hash again. Every answer is what
// a full hash of the view then gives.
func TestViewDigestsHeldWhileTheViewIs(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("sku-%03d", i)
	}
	publishKeys(t, s, "prices", keys...)
	exact := func(what string) ViewDigest {
		t.Helper()
		d := s.ViewDigests()
		if want := s.view.Freeze().Digests(); !maps.Equal(d.Topics, want) {
			t.Fatalf("%s: the digests are not a full hash's", what)
		}
		if want := s.Vector(); !maps.Equal(d.Vector, want) {
			t.Fatalf("%s: vector %v, the store's %v", what, d.Vector, want)
		}
		return d
	}
	first := exact("first")
	ended := lastEnded(s)
	publishKeys(t, s, "prices", "") // no key: the vector moves, the view does not
	if d := exact("after a message without a key"); !maps.Equal(d.Topics, first.Topics) || lastEnded(s) != ended {
		t.Fatalf("a message without a key made the store hash again")
	}
	publishKeys(t, s, "prices", "sku-007")
	if d := exact("after a write"); maps.Equal(d.Topics, first.Topics) || lastEnded(s) == ended {
		t.Fatalf("a write left the digest as it was")
	}
}

// TestRecentViewDigestsBoundsHashing: RecentViewDigests hashes only when
// the last hash ended statusHashShare times its length ago and no other
// is under way; otherwise it answers the last digest with the vector and
// time it was taken at, and the view's current one while the view holds
// it.
func TestRecentViewDigestsBoundsHashing(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	publishKeys(t, s, "prices", "a", "b")
	took := func(d time.Duration) { // the last hash as if it took d
		t := *s.digests.last.Load()
		t.took = d
		s.digests.last.Store(&t)
	}
	first := s.RecentViewDigests() // the first call hashes
	if first.Topics["prices"] == ([32]byte{}) || first.At.IsZero() {
		t.Fatalf("first status digest %+v", first)
	}
	took(time.Hour)
	publishKeys(t, s, "prices", "") // the view holds its digest: answered at today's vector
	if d := s.RecentViewDigests(); !maps.Equal(d.Vector, s.Vector()) || !maps.Equal(d.Topics, first.Topics) {
		t.Fatalf("a held digest was not answered with the current vector: %+v", d)
	}
	held := s.digests.last.Load().ViewDigest
	publishKeys(t, s, "prices", "c")
	for _, tc := range []struct {
		what  string
		setup func() func()
		fresh bool
	}{
		{"the last hash too recent", func() func() { return func() {} }, false},
		{"another hash under way", func() func() {
			took(0)
			s.digests.hashing.Lock()
			return s.digests.hashing.Unlock
		}, false},
		{"the last hash long enough ago", func() func() { took(0); return func() {} }, true},
	} {
		done := tc.setup()
		d := s.RecentViewDigests()
		done()
		switch {
		case tc.fresh && (!maps.Equal(d.Vector, s.Vector()) || !maps.Equal(d.Topics, s.view.Freeze().Digests())):
			t.Fatalf("%s: %+v is not the current digest", tc.what, d)
		case !tc.fresh && (!maps.Equal(d.Vector, held.Vector) || !maps.Equal(d.Topics, held.Topics) || !d.At.Equal(held.At)):
			t.Fatalf("%s: %+v is not the last digest taken, %+v", tc.what, d, held)
		}
	}
}
