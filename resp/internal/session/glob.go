package session

import "strings"

// maxNesting is how deep stars may nest in a pattern (Redis's bound of
// stringmatchlen since CVE-2022-36021): a star deeper than this matches
// nothing, so that the recursion of any client's pattern stays shallow.
const maxNesting = 1000

// Match is Redis's pattern matching (stringmatchlen): * ? [abc] [^a]
// [a-z] and \ escapes, with its quirks: a range's bounds and the byte
// compare as C's signed chars (so [a-\xff] takes no byte from 0x80 to
// 0xfe), a ']' right after a range's '-' is its bound, not the end of
// the brackets, and stars nested more than 1000 deep match nothing. As
// Redis's since CVE-2022-36021 it takes time proportional to the
// pattern's length times the string's, never exponential: KEYS, SCAN
// MATCH and PSUBSCRIBE take any client's pattern.
func Match(pattern, s string) bool {
	matched, _ := match(pattern, s, 0)
	return matched
}

// match is Match at a star's nesting depth. exhausted reports that the
// pattern after some star matched no suffix of the string that star was
// tried on: a star before it, which could only leave that part a shorter
// suffix, cannot match either, and gives up at once (Redis's
// skipLongerMatches).
func match(pattern, s string, nesting int) (matched, exhausted bool) {
	if nesting > maxNesting {
		return false, false
	}
	for len(pattern) > 0 {
		if pattern[0] == '*' {
			pattern = strings.TrimLeft(pattern, "*")
			if pattern == "" {
				return true, false
			}
			for i := 0; i <= len(s); i++ {
				if matched, exhausted := match(pattern, s[i:], nesting+1); matched || exhausted {
					return matched, exhausted
				}
			}
			return false, true
		}
		if len(s) == 0 {
			return false, false
		}
		ok, rest := element(pattern, s[0])
		if !ok {
			return false, false
		}
		pattern, s = rest, s[1:]
	}
	return len(s) == 0, false
}

// element matches the first element of pattern, which is not a star (a
// byte, \ and a byte, ?, or brackets), against the byte c, and returns
// the pattern after that element.
func element(pattern string, c byte) (ok bool, rest string) {
	switch pattern[0] {
	case '?':
		return true, pattern[1:]
	case '[':
		return brackets(pattern[1:], c)
	case '\\':
		if len(pattern) >= 2 {
			pattern = pattern[1:]
		}
	}
	return pattern[0] == c, pattern[1:]
}

// brackets matches the byte c against the class p holds after its '[',
// and returns the pattern after its ']' (or its end, unclosed).
func brackets(p string, c byte) (ok bool, rest string) {
	not := len(p) > 0 && p[0] == '^'
	if not {
		p = p[1:]
	}
	match := false
	for len(p) > 0 && p[0] != ']' {
		switch {
		case p[0] == '\\' && len(p) >= 2:
			match = match || p[1] == c
			p = p[2:]
		case len(p) >= 3 && p[1] == '-':
			lo, hi, ch := int8(p[0]), int8(p[2]), int8(c)
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || ch >= lo && ch <= hi
			p = p[3:]
		default:
			match = match || p[0] == c
			p = p[1:]
		}
	}
	if len(p) > 0 {
		p = p[1:] // the ]
	}
	return match != not, p
}

// LiteralPrefix is the part of a pattern before its first special byte.
func LiteralPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, "*?[\\"); i >= 0 {
		return pattern[:i]
	}
	return pattern
}
