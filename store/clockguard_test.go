package store

import (
	"errors"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// peerRecord is a record of a peer's origin, stamped at wall time at
// (logical counter 0), with key k.
func peerRecord(origin, seq uint64, at time.Time, key string) []byte {
	return encodePeer(&record.Message{Topic: "t", Key: key, Value: []byte("v" + key)}, origin, seq, at)
}

// encodePeer is m as a record of a peer's origin, stamped at wall time at.
func encodePeer(m *record.Message, origin, seq uint64, at time.Time) []byte {
	buf := make([]byte, m.EncodedSize())
	record.Encode(buf, m, record.Stamp{Origin: origin, Seq: seq, HLC: record.MakeHLC(at.UnixMilli(), 0)})
	return buf
}

// openSkewTest opens a store guarded with a 500ms offset, on a wall clock
// the test moves.
func openSkewTest(t *testing.T) (*Store, *testkit.Wall, time.Time) {
	t.Helper()
	var w testkit.Wall
	base := time.UnixMilli(1_750_000_000_000)
	w.Set(base.UnixMilli())
	o := testOptions(t, t.TempDir())
	o.MaxClockOffset = 500 * time.Millisecond
	o.Now = w.Now
	return openTest(t, o), &w, base
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClockGuardAdmits(t *testing.T) {
	const peer = 0xbeef
	tests := []struct {
		name   string
		ahead  time.Duration
		want   error // nil: appended at once
		clock  bool  // the local HLC follows the stamp
		inView bool
	}{
		{"behind", -time.Hour, nil, true, true},
		{"ahead within the offset", 400 * time.Millisecond, nil, true, true},
		{"ahead by the offset exactly", 500 * time.Millisecond, nil, true, true},
		{"ahead beyond the offset: held", 2 * time.Second, ErrHeld, false, false},
		{"ahead just under the hard bound: held", 4999 * time.Millisecond, ErrHeld, false, false},
		{"ahead beyond the hard bound: refused", 5001 * time.Millisecond, ErrClockAhead, false, false},
		{"a year ahead: refused", 365 * 24 * time.Hour, ErrClockAhead, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, base := openSkewTest(t)
			rec := peerRecord(peer, 1, base.Add(tt.ahead), "k")
			_, err := s.AppendRecord(rec)
			if !errors.Is(err, tt.want) {
				t.Fatalf("AppendRecord: %v, want %v", err, tt.want)
			}
			stamp := record.Record(rec).HLC()
			if got := s.clock.Last() >= stamp; got != tt.clock {
				t.Fatalf("local HLC %s vs the stamp %s: follows = %v, want %v", record.HLCTime(s.clock.Last()), record.HLCTime(stamp), got, tt.clock)
			}
			if _, ok := s.Get("t", "k"); ok != tt.inView {
				t.Fatalf("in the view: %v, want %v", ok, tt.inView)
			}
			if wantSeq := map[bool]uint64{true: 1, false: 0}[tt.want == nil]; s.LastSeq(peer) != wantSeq {
				t.Fatalf("LastSeq = %d, want %d (a held or refused record is not in the vector)", s.LastSeq(peer), wantSeq)
			}
			st := s.ClockStats()
			if held := map[bool]int64{true: 1, false: 0}[tt.want == ErrHeld]; st.HeldNow != held {
				t.Fatalf("held now %d, want %d", st.HeldNow, held)
			}
			if refused := map[bool]uint64{true: 1, false: 0}[tt.want == ErrClockAhead]; st.Refused != refused {
				t.Fatalf("refused %d, want %d", st.Refused, refused)
			}
			// The local clock's own stamps are not dragged by a held or
			// refused record either.
			m := record.Message{Topic: "t", Key: "own"}
			res, err := s.Publish(&m)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.clock && res.HLC >= stamp && tt.ahead > 0 {
				t.Fatalf("own stamp %s follows the peer's %s", record.HLCTime(res.HLC), record.HLCTime(stamp))
			}
		})
	}
}

func TestClockGuardTakesOwnRecords(t *testing.T) {
	s, _, base := openSkewTest(t)
	// This node's own record, back from a peer after a loss, stamped
	// (by this node's clock, then) an hour ahead of the wall clock now.
	if _, err := s.AppendRecord(peerRecord(s.Origin(), 1, base.Add(time.Hour), "k")); err != nil {
		t.Fatalf("own record: %v", err)
	}
	m := record.Message{Topic: "t", Key: "next"}
	if res, err := s.Publish(&m); err != nil || res.Seq != 2 {
		t.Fatalf("next own publish: %+v %v, want seq 2", res, err)
	}
}

func TestClockGuardHoldsThenApplies(t *testing.T) {
	const peer = 0xbeef
	s, w, base := openSkewTest(t)
	ahead := peerRecord(peer, 1, base.Add(2*time.Second), "a")
	behind := peerRecord(peer, 2, base, "b") // not ahead, but after a held one
	steps := []struct {
		rec  []byte
		want error
	}{
		{ahead, ErrHeld},
		{behind, ErrHeld}, // held behind it: no gap in the log
		{ahead, ErrHeld},  // offered again: held already
		{peerRecord(peer, 4, base, "d"), ErrOutOfOrder}, // a gap after the held ones
	}
	for i, st := range steps {
		if _, err := s.AppendRecord(st.rec); !errors.Is(err, st.want) {
			t.Fatalf("step %d: %v, want %v", i, err, st.want)
		}
	}
	if s.LastSeq(peer) != 0 || s.ClockStats().HeldNow != 2 {
		t.Fatalf("held: last seq %d, held %d; want 0 and 2", s.LastSeq(peer), s.ClockStats().HeldNow)
	}
	// While the local clock is behind their stamp by more than the offset
	// they stay held, however often the flusher looks.
	w.Set(base.Add(1400 * time.Millisecond).UnixMilli())
	s.releaseDue() // what the flusher's timer runs
	if s.LastSeq(peer) != 0 {
		t.Fatalf("applied %d records while 600ms ahead of the clock", s.LastSeq(peer))
	}
	// Within the offset: the flusher appends both, in order.
	w.Set(base.Add(1500 * time.Millisecond).UnixMilli())
	waitFor(t, "the held records to be applied", func() bool { return s.LastSeq(peer) == 2 })
	for _, k := range []string{"a", "b"} {
		if _, ok := s.Get("t", k); !ok {
			t.Fatalf("key %q not in the view after the release", k)
		}
	}
	if st := s.ClockStats(); st.HeldNow != 0 || st.HeldTotal != 2 {
		t.Fatalf("after the release: %+v", st)
	}
	// The HLC follows the released stamp now: it is within the offset.
	if s.clock.Last() < record.Record(ahead).HLC() {
		t.Fatalf("local HLC %s behind the released stamp", record.HLCTime(s.clock.Last()))
	}
	// The next records go straight in.
	if _, err := s.AppendRecord(peerRecord(peer, 3, base, "c")); err != nil {
		t.Fatal(err)
	}
}

func TestClockGuardRefusedIsTakenLater(t *testing.T) {
	const peer = 0xbeef
	s, w, base := openSkewTest(t)
	rec := peerRecord(peer, 1, base.Add(time.Hour), "k")
	for i := 0; i < 3; i++ { // anti-entropy offers it every sync interval
		if _, err := s.AppendRecord(rec); !errors.Is(err, ErrClockAhead) {
			t.Fatalf("offer %d: %v, want ErrClockAhead", i, err)
		}
	}
	oc := s.OriginClocks()[peer]
	if !oc.Flagged || oc.Refused != 3 || oc.Ahead != time.Hour {
		t.Fatalf("origin clock after 3 refusals: %+v", oc)
	}
	if s.clock.Last() >= record.MakeHLC(base.Add(time.Second).UnixMilli(), 0) {
		t.Fatalf("local HLC dragged to %s", record.HLCTime(s.clock.Last()))
	}
	// An hour later the same offer is taken.
	w.Set(base.Add(time.Hour).UnixMilli())
	if _, err := s.AppendRecord(rec); err != nil {
		t.Fatalf("offer after the clock caught up: %v", err)
	}
	if oc := s.OriginClocks()[peer]; oc.Flagged {
		t.Fatalf("still flagged after a record within the offset: %+v", oc)
	}
}

func TestClockGuardHeldBound(t *testing.T) {
	const peer = 0xbeef
	s, w, base := openSkewTest(t)
	if _, err := s.AppendRecord(peerRecord(peer, 1, base.Add(time.Second), "k")); !errors.Is(err, ErrHeld) {
		t.Fatal(err)
	}
	for seq := uint64(2); seq <= MaxHeldRecords; seq++ {
		if _, err := s.AppendRecord(peerRecord(peer, seq, base, "k")); !errors.Is(err, ErrHeld) {
			t.Fatalf("seq %d: %v", seq, err)
		}
	}
	// Past the bound: refused, and offered again later by anti-entropy.
	next := peerRecord(peer, MaxHeldRecords+1, base, "k")
	if _, err := s.AppendRecord(next); !errors.Is(err, ErrClockAhead) {
		t.Fatalf("past the bound: %v, want ErrClockAhead", err)
	}
	w.Set(base.Add(600 * time.Millisecond).UnixMilli())
	waitFor(t, "the held records to be applied", func() bool { return s.LastSeq(peer) == MaxHeldRecords })
	if _, err := s.AppendRecord(next); err != nil {
		t.Fatalf("offered again after the release: %v", err)
	}
}

// BenchmarkAppendRecordClockGuard is a peer's records appended with the
// clock guard off and on (records stamped now), in the same run: what
// the guard's check costs an append.
func BenchmarkAppendRecordClockGuard(b *testing.B) {
	for _, offset := range []time.Duration{0, 500 * time.Millisecond} {
		b.Run("max-clock-offset="+offset.String(), func(b *testing.B) {
			o := DefaultOptions(b.TempDir())
			o.MaxClockOffset = offset
			s, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			recs := make([][]byte, b.N)
			now := time.Now()
			for i := range recs {
				recs[i] = peerRecord(0xbeef, uint64(i+1), now, "k")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for _, r := range recs {
				if _, err := s.AppendRecord(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
