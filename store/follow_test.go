package store

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// TestFollowView checks the follower's contract: the returned entries and
// then the changes equal the view, for this node's writes, another node's
// records (AppendRecord), deletes, and a superseded record (no change);
// and that the end of each publish's changes is told once: after one
// record's, after all of a PublishBatch's, after all of an atomic batch's.
func TestFollowView(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	for i := range 10 {
		if _, err := s.Publish(&record.Message{Topic: "prices", Key: fmt.Sprintf("k%d", i), Value: []byte("before")}); err != nil {
			t.Fatal(err)
		}
	}
	var changes []view.Change
	var ends []int // len(changes) at each end
	current := s.FollowView(func(c view.Change) { changes = append(changes, c) }, func() { ends = append(ends, len(changes)) })

	if _, err := s.Publish(&record.Message{Topic: "prices", Key: "k1", Tag: "eu", Value: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(&record.Message{Topic: "prices", Key: "k2", Delete: true}); err != nil {
		t.Fatal(err)
	}
	// A record of another origin, and a stale one that loses to k1's.
	other := record.Stamp{Origin: s.Origin() + 1, Seq: 1, HLC: s.clock.Now() + 1<<20}
	raw := make([]byte, record.Padded((&record.Message{Topic: "fx", Key: "eur", Value: []byte("1.1")}).EncodedSize()))
	record.Encode(raw, &record.Message{Topic: "fx", Key: "eur", Value: []byte("1.1")}, other)
	if _, err := s.AppendRecord(raw); err != nil {
		t.Fatal(err)
	}
	stale := record.Stamp{Origin: other.Origin, Seq: 2, HLC: 1}
	raw = make([]byte, record.Padded((&record.Message{Topic: "prices", Key: "k1", Value: []byte("stale")}).EncodedSize()))
	record.Encode(raw, &record.Message{Topic: "prices", Key: "k1", Value: []byte("stale")}, stale)
	if _, err := s.AppendRecord(raw); err != nil {
		t.Fatal(err)
	}

	batch := []record.Message{
		{Topic: "b", Key: "1", Value: []byte("x")}, {Topic: "b", Key: "2", Value: []byte("x")}, {Topic: "b", Key: "3", Value: []byte("x")},
	}
	if _, err := s.PublishBatch(batch); err != nil {
		t.Fatal(err)
	}
	record.Together(batch[:2])
	if _, err := s.PublishBatch(batch[:2]); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2, 3, 6, 8}; !slices.Equal(ends, want) {
		t.Errorf("ends after changes %v, want %v", ends, want)
	}
	changes = changes[:3]

	// The entries as of FollowView's call, then the changes, in order.
	got := map[string]string{}
	n := 0
	for c := range current {
		n++
		got[c.Topic+"/"+c.Key] = string(c.Value)
	}
	if n != 10 || got["prices/k1"] != "before" {
		t.Fatalf("current: %d entries, k1=%q", n, got["prices/k1"])
	}
	want := []struct {
		key, value, tag string
		deleted         bool
	}{{"prices/k1", "after", "eu", false}, {"prices/k2", "", "", true}, {"fx/eur", "1.1", "", false}}
	if len(changes) != len(want) {
		t.Fatalf("%d changes, want %d: %+v", len(changes), len(want), changes)
	}
	for i, w := range want {
		c := changes[i]
		if c.Topic+"/"+c.Key != w.key || string(c.Value) != w.value || c.Tag != w.tag || c.Deleted != w.deleted {
			t.Errorf("change %d: %+v, want %+v", i, c, w)
		}
	}
	if changes[2].Stamp != other {
		t.Errorf("fx/eur stamp %+v, want %+v", changes[2].Stamp, other)
	}
	s.FollowView(nil, nil)
	if _, err := s.Publish(&record.Message{Topic: "prices", Key: "k3", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if len(changes) != len(want) {
		t.Errorf("a change after FollowView(nil) was seen")
	}
}
