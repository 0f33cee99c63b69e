package btree

import (
	"slices"
	"testing"
)

func less(a, b int) bool { return a < b }

// all lists t's items in order.
func all(t *BTreeG[int]) []int {
	var out []int
	t.Ascend(func(i int) bool { out = append(out, i); return true })
	return out
}

// TestAppendMax loads sorted items with AppendMax into trees of several
// degrees, empty or not, and checks each against the same items put in
// by ReplaceOrInsert: the same items in order, found by Get, deleted as
// usual afterwards; a clone taken in the middle of the load keeps what
// it held.
func TestAppendMax(t *testing.T) {
	for _, tc := range []struct {
		degree, before, n int
	}{
		{2, 0, 1}, {2, 0, 1000}, {3, 10, 500}, {32, 0, 100_000}, {32, 1000, 5000}, {4, 0, 0},
	} {
		got, want := NewG(tc.degree, less), NewG(tc.degree, less)
		for i := range tc.before {
			got.ReplaceOrInsert(i * 2)
			want.ReplaceOrInsert(i * 2)
		}
		var clone *BTreeG[int]
		var cloned []int
		for i := range tc.n {
			if i == tc.n/2 {
				clone = got.Clone()
				cloned = all(clone)
			}
			got.AppendMax(2*tc.before + i)
			want.ReplaceOrInsert(2*tc.before + i)
		}
		if got.Len() != want.Len() || !slices.Equal(all(got), all(want)) {
			t.Fatalf("degree %d, %d before, %d appended: %d items, want %d", tc.degree, tc.before, tc.n, got.Len(), want.Len())
		}
		if clone != nil && !slices.Equal(all(clone), cloned) {
			t.Fatalf("degree %d: the clone changed under the appends", tc.degree)
		}
		for _, i := range all(want) {
			if v, ok := got.Get(i); !ok || v != i {
				t.Fatalf("degree %d: Get(%d) = %d, %v", tc.degree, i, v, ok)
			}
		}
		for _, i := range all(want) {
			if i%3 == 0 {
				got.Delete(i)
				want.Delete(i)
			}
		}
		if !slices.Equal(all(got), all(want)) {
			t.Fatalf("degree %d: after deletes the trees differ", tc.degree)
		}
		got.AppendMax(1 << 40)
		want.ReplaceOrInsert(1 << 40)
		if !slices.Equal(all(got), all(want)) {
			t.Fatalf("degree %d: an append after deletes differs", tc.degree)
		}
	}
}
