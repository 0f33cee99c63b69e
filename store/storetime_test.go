package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// TestBatchVisibleTogether: a receiver that gets a batch's records one by
// one shows none of them until it has the last, then all; a snapshot
// taken meanwhile claims none of them; a restart in the middle holds them
// again and shows them with the last.
func TestBatchVisibleTogether(t *testing.T) {
	a := openTest(t, testOptions(t, t.TempDir()))
	defer a.Close()
	ms := make([]record.Message, 5)
	for i := range ms {
		ms[i] = record.Message{Topic: "t", Key: fmt.Sprint("k", i), Value: []byte("new")}
	}
	ms[2].Key = "" // a keyless message in the batch is held with it
	record.Together(ms)
	if _, err := a.PublishBatch(ms); err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		if _, ok := a.Get("t", fmt.Sprint("k", i)); ok != (i != 2) {
			t.Fatalf("origin: k%d visible %v after the batch", i, ok)
		}
	}
	var raw [][]byte
	if _, err := a.ReadOrigin(a.Origin(), 1, 5, func(r record.Record) error {
		raw = append(raw, r.Clone())
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	b := openTest(t, testOptions(t, dir))
	visible := func(s *Store) (n int) {
		keys := []string{"k0", "k1", "k3", "k4"}
		found := make([]bool, len(keys))
		s.view.GetMany([]string{"t", "t", "t", "t"}, keys, make([]view.Entry, len(keys)), found, nil)
		for _, f := range found {
			if f {
				n++
			}
		}
		return n
	}
	for i, r := range raw[:4] {
		if _, err := b.AppendRecord(r); err != nil {
			t.Fatal(err)
		}
		if n := visible(b); n != 0 {
			t.Fatalf("after %d records of 5, %d keys of the batch are visible", i+1, n)
		}
	}
	if err := b.Snapshot(); err != nil {
		t.Fatal(err)
	}
	_, covers, marks, err := view.ReadSnapshot(b.dir+"/"+snapshotName, nil)
	if err != nil {
		t.Fatal(err)
	}
	if marks[a.Origin()] != 0 || covers != 0 {
		t.Fatalf("a snapshot taken mid-batch covers %d with mark %d for the origin; want neither past the batch", covers, marks[a.Origin()])
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTest(t, testOptions(t, dir))
	defer b.Close()
	if n := visible(b); n != 0 {
		t.Fatalf("after a restart mid-batch, %d keys of the batch are visible", n)
	}
	if _, err := b.AppendRecord(raw[4]); err != nil {
		t.Fatal(err)
	}
	if n := visible(b); n != 4 {
		t.Fatalf("after the last record, %d keys of 4 are visible", n)
	}
}

// TestExpiryRealClock: with the real clock, values expire at their
// instant by the store's own timer (the follower hears it), survive a
// restart only while they have not expired, and are never served after.
func TestExpiryRealClock(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, testOptions(t, dir))
	expired := make(chan view.Change, 64)
	for range s.FollowView(func(c view.Change) {
		if c.Cause == view.CauseExpired {
			expired <- c
		}
	}, nil) {
	}
	// A value published after its instant is never in force (it goes in
	// as deleted, with no expiry to tell): when the machine stalled the
	// test that long before a publish, the three go again under new keys
	// with longer lives.
	ttls := []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond}
	var keys []string
	var try int
	for ; ; try++ {
		if try == 5 {
			t.Fatalf("every publish came after its value's instant, with lives up to %v", ttls[len(ttls)-1])
		}
		now := time.Now()
		keys = keys[:0]
		for i, ttl := range ttls {
			keys = append(keys, fmt.Sprintf("k%d-%d", i, try))
			m := record.Message{Topic: "t", Key: keys[i], Value: []byte("v"), ExpiresAt: now.Add(ttl).UnixMilli()}
			if _, err := s.Publish(&m); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().Before(now.Add(ttls[0])) {
			break
		}
		for i := range ttls { // this try's expiries are passed over below
			ttls[i] *= 4
		}
	}
	long := record.Message{Topic: "t", Key: "long", Value: []byte("v"), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
	if _, err := s.Publish(&long); err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("-%d", try)
	for i, ttl := range ttls {
		var c view.Change
		for !strings.HasSuffix(c.Key, suffix) { // an earlier try's expiries pass
			select {
			case c = <-expired:
			case <-time.After(10 * time.Second):
				t.Fatalf("expiry %d never came", i)
			}
		}
		at := time.UnixMilli(c.ExpiresAt)
		late := time.Since(at)
		if c.Key != keys[i] || late < 0 {
			t.Fatalf("expiry %d: %+v, %v after its instant", i, c, late)
		}
		t.Logf("%s (ttl %v) expired %v after its instant", c.Key, ttl, late)
		if _, ok := s.Get("t", c.Key); ok {
			t.Fatalf("%s is served after its expiry", c.Key)
		}
	}
	if _, ok := s.Get("t", "long"); !ok {
		t.Fatal("the hour-long value is gone")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, testOptions(t, dir))
	defer s.Close()
	for i := range ttls {
		if _, ok := s.Get("t", keys[i]); ok {
			t.Fatalf("%s came back after a restart", keys[i])
		}
	}
	if e, ok := s.Get("t", "long"); !ok || e.ExpiresAt != long.ExpiresAt {
		t.Fatalf("after a restart the hour-long value is %+v, %v", e, ok)
	}
}

// TestSnapshotToVersion: a peer that reads snapshots of version 1 gets
// one while the view holds no time field, and none (ErrSnapshotTooNew,
// nothing written) once it holds one; version 2 is sent as ever.
func TestSnapshotToVersion(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	plain := record.Message{Topic: "t", Key: "plain", Value: []byte("1")}
	if _, err := s.Publish(&plain); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.SnapshotToVersion(&buf, record.Version); err != nil || buf.Len() == 0 {
		t.Fatalf("version 1 of an untimed view: %v, %d bytes", err, buf.Len())
	}
	timed := record.Message{Topic: "t", Key: "sale", Value: []byte("2"), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
	if _, err := s.Publish(&timed); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := s.SnapshotToVersion(&buf, record.Version); !errors.Is(err, view.ErrSnapshotTooNew) || buf.Len() != 0 {
		t.Fatalf("version 1 of a timed view: %v, %d bytes; want ErrSnapshotTooNew and nothing", err, buf.Len())
	}
	if err := s.SnapshotTo(&buf); err != nil || buf.Len() == 0 {
		t.Fatalf("version 2: %v, %d bytes", err, buf.Len())
	}
}

// TestExpiryChangeRestart: an expiry change survives a restart from the
// log alone and from a snapshot, and so does the mark that makes an
// older change of the same version, replayed or arriving late, lose.
func TestExpiryChangeRestart(t *testing.T) {
	for _, snap := range []bool{false, true} {
		t.Run(fmt.Sprint("snapshot=", snap), func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, testOptions(t, dir))
			res, err := s.Publish(&record.Message{Topic: "t", Key: "k", Value: []byte("v")})
			if err != nil {
				t.Fatal(err)
			}
			e, _ := s.Get("t", "k")
			far := time.Now().Add(time.Hour).UnixMilli()
			older := record.Message{Topic: "t", Key: "k", Value: []byte("v"), ExpiresAt: far, ExpiryOf: e.Stamp}
			newer := older
			newer.ExpiresAt = 0 // a PERSIST after the EXPIRE
			if _, err := s.Publish(&older); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Publish(&newer); err != nil {
				t.Fatal(err)
			}
			var late []byte // the older change as a peer would send it again
			if _, err := s.ReadOrigin(s.Origin(), res.Seq+1, res.Seq+1, func(r record.Record) error {
				late = r.Clone()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if snap {
				if err := s.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, testOptions(t, dir))
			defer s.Close()
			s.view.Apply(record.Record(late))
			got, ok := s.Get("t", "k")
			if !ok || string(got.Value) != "v" || got.Stamp != e.Stamp || got.ExpiresAt != 0 {
				t.Fatalf("after the restart: %q %+v expiring at %d (found %v); want v %+v, no expiry", got.Value, got.Stamp, got.ExpiresAt, ok, e.Stamp)
			}
		})
	}
}
