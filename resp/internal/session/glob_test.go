package session

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

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

// TestGlobMatchPathological: patterns of many stars that cannot match
// (Redis's CVE-2022-36021: KEYS, SCAN MATCH and PSUBSCRIBE take any
// client's pattern) are answered at once; matching them by backtracking
// every star took longer than the universe has.
func TestGlobMatchPathological(t *testing.T) {
	long := strings.Repeat("a", 1000)
	for _, tc := range []struct {
		name, pat, s string
		want         bool
	}{
		{"stars before a missing byte", strings.Repeat("*a", 40) + "*b", long, false},
		{"stars and classes", strings.Repeat("[a-z]*", 40) + "b", long, false},
		{"stars and questions", strings.Repeat("*?", 40) + "b", long, false},
		{"stars that match", strings.Repeat("*a", 40) + "*", long, true},
		{"stars nested as deep as Redis allows", strings.Repeat("*a", 1000), long, true},
		{"stars nested deeper than Redis allows", strings.Repeat("*a", 1001), long + long, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan bool, 1)
			go func() { done <- Match(tc.pat, tc.s) }()
			select {
			case got := <-done:
				if got != tc.want {
					t.Fatalf("Match = %v, want %v", got, tc.want)
				}
			case <-time.After(time.Minute):
				t.Fatalf("Match(%.40q..., %d bytes) still running after a minute", tc.pat, len(tc.s))
			}
		})
	}
}

// TestGlobMatchAgreesWithBacktracking: on short random patterns and
// strings, where backtracking every star is cheap, Match answers what
// plain backtracking answers.
func TestGlobMatchAgreesWithBacktracking(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const patBytes, strBytes = "ab*?[]^-\\", "ab-]*"
	gen := func(alphabet string, n int) string {
		b := make([]byte, r.IntN(n+1))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 200000 {
		pat, s := gen(patBytes, 8), gen(strBytes, 8)
		if got, want := Match(pat, s), backtrack(pat, s); got != want {
			t.Fatalf("Match(%q, %q) = %v, backtracking says %v", pat, s, got, want)
		}
	}
}

// backtrack is Match without its shortcut and its bound: every star tries
// every split of the string.
func backtrack(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	if pattern[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if backtrack(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	if s == "" {
		return false
	}
	ok, rest := element(pattern, s[0])
	return ok && backtrack(rest, s[1:])
}
