package session

import "testing"

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, s string
		want   bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "bac", false},
		{"*c", "abc", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"prices:*", "prices:sku-1", true}, {"prices:*", "price:sku-1", false},
		{"[abc]x", "bx", true}, {"[^abc]x", "bx", false}, {"[a-c]x", "cx", true}, {"[c-a]x", "bx", true},
		{"\\*", "*", true}, {"\\*", "a", false}, {"a\\?b", "a?b", true},
		{"h[\\]]", "h]", true}, {"**a", "ba", true}, {"a[", "a", false},
		// Redis's quirks: ']' after '-' is a range's bound; bounds are signed chars.
		{"[a-]", "]", true}, {"[a-]", "-", false}, {"[a-]x", "]x", false},
		{"[a-\xff]", "\xc3", false}, {"[a-\xff]", "\xff", true}, {"[a-\xff]", "0", true}, {"[\x80-\xfe]", "\xc3", true},
	} {
		if got := Match(tc.pat, tc.s); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pat, tc.s, got, tc.want)
		}
	}
}
