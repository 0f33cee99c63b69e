package index

import (
	"errors"
	"testing"

	"github.com/cachecast/cachecast/store/internal/errs"
)

// TestHolds: Holds says yes exactly where an append would be refused as a
// duplicate, and no for an index that does not exist.
func TestHolds(t *testing.T) {
	dir := t.TempDir()
	ti := openTestTopics(t, dir+"/topics", 4)
	defer ti.Close()
	o := openTestOrigins(t, dir+"/origins", 4)
	defer o.Close()
	for pos := int64(0); pos < 80; pos += 8 {
		if _, err := ti.Append([]byte("a"), idxEntry(pos)); err != nil {
			t.Fatal(err)
		}
		if err := o.Put(7, uint64(pos/8)+1, pos); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		topic  string
		pos    int64
		origin uint64
		seq    uint64
		holds  bool
	}{
		{"the first", "a", 0, 7, 1, true},
		{"the last", "a", 72, 7, 10, true},
		{"after the last", "a", 80, 7, 11, false},
		{"another topic, another origin", "b", 0, 8, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ti.Holds([]byte(tc.topic), tc.pos); got != tc.holds {
				t.Errorf("topic %q holds %d: %t, want %t", tc.topic, tc.pos, got, tc.holds)
			}
			if got := o.Holds(tc.origin, tc.seq); got != tc.holds {
				t.Errorf("origin %d holds seq %d: %t, want %t", tc.origin, tc.seq, got, tc.holds)
			}
			if !tc.holds {
				return
			}
			if _, err := ti.Append([]byte(tc.topic), idxEntry(tc.pos)); !errors.Is(err, errs.ErrDuplicate) {
				t.Errorf("append to a topic that holds the position: %v, want ErrDuplicate", err)
			}
			if err := o.Put(tc.origin, tc.seq, tc.pos); !errors.Is(err, errs.ErrDuplicate) {
				t.Errorf("put of a seq the origin holds: %v, want ErrDuplicate", err)
			}
		})
	}
}
