package store

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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

// TestFollow checks the one reader of the store's changes: a follower of
// records is told this node's records and another origin's (AppendRecord)
// in order per origin, each once, from the moment it started; a follower
// of events the view's time events (an expiry) and no record; end runs
// after each round; the goroutine ends with its context.
func TestFollow(t *testing.T) {
	a := openTest(t, testOptions(t, t.TempDir()))
	b := openTest(t, testOptions(t, t.TempDir()))
	if _, err := b.Publish(&record.Message{Topic: "t", Key: "before", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}

	type told struct {
		origin, seq uint64
		key, event  string
	}
	follow := func(o FollowOptions) (<-chan told, context.CancelFunc, <-chan struct{}, *atomic.Int64) {
		ch := make(chan told, 100)
		var ends atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		done := b.Follow(ctx, o, func(f Followed) {
			if f.Event != nil {
				ch <- told{key: f.Event.Key, event: f.Event.Cause}
				return
			}
			ch <- told{origin: f.Record.Origin(), seq: f.Record.Seq(), key: string(f.Record.Key())}
		}, func() { ends.Add(1) })
		return ch, cancel, done, &ends
	}
	records, stopRecords, recordsDone, ends := follow(FollowOptions{Records: true})
	events, stopEvents, eventsDone, _ := follow(FollowOptions{Events: true})

	for i := range 3 {
		if _, err := a.Publish(&record.Message{Topic: "t", Key: fmt.Sprintf("a%d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.ReadOrigin(a.Origin(), 1, 3, func(r record.Record) error {
		_, err := b.AppendRecord(r.Clone())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(100 * time.Millisecond).UnixMilli()
	for i, m := range []record.Message{{Topic: "t", Key: "b1", Value: []byte("v")}, {Topic: "t", Key: "b2", Value: []byte("v"), ExpiresAt: expires}} {
		if _, err := b.Publish(&m); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	want := map[told]bool{
		{origin: a.Origin(), seq: 1, key: "a0"}: true, {origin: a.Origin(), seq: 2, key: "a1"}: true, {origin: a.Origin(), seq: 3, key: "a2"}: true,
		{origin: b.Origin(), seq: 2, key: "b1"}: true, {origin: b.Origin(), seq: 3, key: "b2"}: true,
	}
	last := map[uint64]uint64{}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case r := <-records:
			if !want[r] {
				t.Fatalf("told %+v: not one of the records after the start, or told twice", r)
			}
			if r.seq <= last[r.origin] {
				t.Fatalf("told %+v after seq %d of its origin", r, last[r.origin])
			}
			delete(want, r)
			last[r.origin] = r.seq
		case <-deadline:
			t.Fatalf("records not told: %+v", want)
		}
	}
	select {
	case e := <-events:
		if e.event != view.CauseExpired || e.key != "b2" {
			t.Fatalf("the events' follower was told %+v; want b2 expired", e)
		}
	case <-deadline:
		t.Fatal("the expiry of b2 was not told")
	}
	if ends.Load() == 0 {
		t.Fatal("end never ran")
	}
	stopRecords()
	stopEvents()
	<-recordsDone
	<-eventsDone
	select {
	case r := <-records:
		t.Fatalf("the records' follower was told %+v more (an event?)", r)
	case e := <-events:
		t.Fatalf("the events' follower was told %+v more (a record?)", e)
	default:
	}
}
