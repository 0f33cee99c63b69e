package store

import (
	"errors"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// TestCountOnEarlier: a batch's increment of an earlier message of the
// batch (record.Message.CountOnEarlier, an INCR after a SET or DEL in one
// MULTI) is written naming that message's stamp, and counts on it; one
// that names itself or a later message is refused, and nothing written.
func TestCountOnEarlier(t *testing.T) {
	s := openTest(t, testOptions(t, t.TempDir()))
	for _, tc := range []struct {
		name string
		ms   []record.Message
		want string // the key's value after; "" none
		err  error
	}{
		{"after a SET", []record.Message{{Topic: "t", Key: "a", Value: []byte("5")}, {Topic: "t", Key: "b", Value: []byte("x")},
			{Topic: "t", Key: "a", Value: []byte("2"), CountOnEarlier: 1}}, "7", nil},
		{"after a DEL", []record.Message{{Topic: "t", Key: "c", Delete: true}, {Topic: "t", Key: "c", Value: []byte("3"), CountOnEarlier: 1, CountAbsent: true},
			{Topic: "t", Key: "c", Value: []byte("-1"), CountOnEarlier: 1, CountAbsent: true}}, "2", nil},
		{"itself", []record.Message{{Topic: "t", Key: "d", Value: []byte("5")}, {Topic: "t", Key: "d", Value: []byte("1"), CountOnEarlier: 2}}, "", ErrInvalid},
		{"a later one", []record.Message{{Topic: "t", Key: "e", Value: []byte("1"), CountOnEarlier: 2}, {Topic: "t", Key: "e", Value: []byte("5")}}, "", ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := append([]record.Message(nil), tc.ms...)
			record.Together(ms)
			res, err := s.PublishBatch(ms)
			if !errors.Is(err, tc.err) {
				t.Fatalf("publish: %v, want %v", err, tc.err)
			}
			e, ok := s.Get("t", ms[0].Key)
			if tc.err != nil {
				if ok {
					t.Fatalf("a refused batch wrote %q", e.Value)
				}
				return
			}
			if !ok || string(e.Value) != tc.want {
				t.Fatalf("value %q (%t), want %s", e.Value, ok, tc.want)
			}
			last := len(ms) - 1
			if _, err := s.ReadOrigin(s.Origin(), res[last].Stamp.Seq, 1, func(r record.Record) error {
				if j := tc.ms[last].CountOnEarlier - 1; r.Target() != res[j].Stamp || r.Kind() != record.KindCounter {
					t.Errorf("the increment is a %s naming %+v, want a counter naming message %d's stamp %+v", r.Kind(), r.Target(), j, res[j].Stamp)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
