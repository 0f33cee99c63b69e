package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// TestKeyHistory checks that a key's history is its records in its
// topic's log, newest first, of every kind, and that each bound (records
// of the key, messages looked at, their bytes) stops the scan and says
// the history is not complete.
func TestKeyHistory(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	pub := func(m record.Message) Result {
		t.Helper()
		r, err := s.Publish(&m)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	far := time.Now().Add(time.Hour).UnixMilli()
	first := pub(record.Message{Topic: "prices", Key: "k", Value: []byte("1.00")})
	pub(record.Message{Topic: "prices", Key: "other", Value: []byte("x")})
	pub(record.Message{Topic: "fx", Key: "k", Value: []byte("not this topic")})
	pub(record.Message{Topic: "prices", Key: "k", Tag: "eu", Value: []byte("2.00")})
	e, _ := s.Get("prices", "k")
	pub(record.Message{Topic: "prices", Key: "k", Value: []byte("2.00"), ExpiresAt: far, ExpiryOf: e.Stamp})
	pub(record.Message{Topic: "prices", Key: "k", Value: []byte("3.00"), EffectiveAt: far})
	pub(record.Message{Topic: "prices", Key: "k", Cancel: true, EffectiveAt: far})
	pub(record.Message{Topic: "prices", Key: "other", Value: []byte("y")})
	pub(record.Message{Topic: "prices", Key: "k", Delete: true})
	// Newest first: the kinds of k's records in prices.
	all := []record.Kind{record.KindTombstone, record.KindCancel, record.KindValue, record.KindExpiry, record.KindValue, record.KindValue}

	for _, tc := range []struct {
		name         string
		topic, key   string
		limit        int
		scan         uint64
		bytes        int64
		want         []record.Kind
		scanned      uint64
		wantComplete bool
	}{
		{"all", "prices", "k", 100, 100, 1 << 20, all, 8, true},
		{"limit", "prices", "k", 2, 100, 1 << 20, all[:2], 3, false},
		{"scan", "prices", "k", 100, 4, 1 << 20, all[:3], 4, false},
		{"bytes: one message at least", "prices", "k", 100, 100, 1, all[:1], 1, false},
		{"no such key", "prices", "nope", 100, 100, 1 << 20, nil, 8, true},
		{"no such topic", "nope", "k", 100, 100, 1 << 20, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := s.KeyHistory(tc.topic, tc.key, tc.limit, tc.scan, tc.bytes)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []record.Kind
			for _, d := range h.Records {
				kinds = append(kinds, d.Record.Kind())
				if string(d.Record.Topic()) != tc.topic || string(d.Record.Key()) != tc.key {
					t.Errorf("record of %s/%s", d.Record.Topic(), d.Record.Key())
				}
			}
			if !slices.Equal(kinds, tc.want) || h.Scanned != tc.scanned || h.Complete != tc.wantComplete {
				t.Errorf("kinds %v scanned %d complete %t, want %v %d %t", kinds, h.Scanned, h.Complete, tc.want, tc.scanned, tc.wantComplete)
			}
		})
	}

	h, err := s.KeyHistory("prices", "k", 100, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	oldest := h.Records[len(h.Records)-1]
	if oldest.Offset != 0 || oldest.Record.Seq() != first.Seq || string(oldest.Record.Value()) != "1.00" {
		t.Errorf("oldest: offset %d seq %d %q, want 0 %d 1.00", oldest.Offset, oldest.Record.Seq(), oldest.Record.Value(), first.Seq)
	}
	if got := string(h.Records[4].Record.Tag()); got != "eu" {
		t.Errorf("tag of the second write %q", got)
	}
	for _, bad := range []struct {
		topic, key string
		limit      int
		scan       uint64
	}{{"", "k", 1, 1}, {"prices", "", 1, 1}, {"prices", "k", 0, 1}, {"prices", "k", 1, 0}} {
		if _, err := s.KeyHistory(bad.topic, bad.key, bad.limit, bad.scan, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	s.Close()
	if _, err := s.KeyHistory("prices", "k", 1, 1, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}
