// Package jsonstr finds what encoding/json would silently change in the
// strings of a JSON text: a byte that is not UTF-8 (RFC 8259 wants JSON
// text in UTF-8) and a \u escape of half a UTF-16 surrogate pair. Both
// decode as U+FFFD, so two keys that differ only there would read as one.
// The daemon refuses such a request and the client such an answer.
package jsonstr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// Problem is the first string of a text that encoding/json would rewrite.
type Problem struct {
	Offset int    // of the offending byte or escape in the text
	Field  string // the object key before the string, as written; "" if none
	InName bool   // the string is itself an object key
	What   string // "invalid UTF-8 (byte 0xc3)", "the escape \ud800 is half a UTF-16 surrogate pair"
}

// Error reads as `field "key": invalid UTF-8 (byte 0xc3) at byte 9`.
func (p *Problem) Error() string {
	where := fmt.Sprintf("field %q", p.Field)
	switch {
	case p.InName:
		where = "a field name"
	case p.Field == "":
		where = "a string"
	}
	return fmt.Sprintf("%s: %s at byte %d", where, p.What, p.Offset)
}

// Check returns the first string of b that encoding/json would rewrite,
// or nil. Bytes outside strings are left to encoding/json, which refuses
// any that is not JSON; on malformed text the answer only has to be
// consistent, as the text is refused anyway.
func Check(b []byte) *Problem {
	if bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b) {
		return nil // the common case: nothing to look at
	}
	field := ""
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		start := i + 1
		bad, what := -1, ""
		j := start
		for j < len(b) && b[j] != '"' {
			c := b[j]
			switch {
			case c == '\\' && j+1 < len(b) && b[j+1] == 'u':
				r := hex4(b[j+2:])
				n := 6
				if r < 0 {
					n = 2 // not an escape: encoding/json refuses it
				}
				if utf16.IsSurrogate(r) {
					if r < 0xdc00 && j+12 <= len(b) && b[j+6] == '\\' && b[j+7] == 'u' &&
						utf16.DecodeRune(r, hex4(b[j+8:])) != utf8.RuneError {
						n = 12 // a whole pair
					} else if bad < 0 {
						bad, what = j, fmt.Sprintf("the escape %s is half a UTF-16 surrogate pair", b[j:j+6])
					}
				}
				j += n
			case c == '\\':
				j += 2
			case c < utf8.RuneSelf:
				j++
			default:
				r, n := utf8.DecodeRune(b[j:])
				if r == utf8.RuneError && n == 1 && bad < 0 {
					bad, what = j, fmt.Sprintf("invalid UTF-8 (byte 0x%02x)", c)
				}
				j += n
			}
		}
		end := min(j, len(b))
		next := SkipSpace(b, end+1)
		isName := next < len(b) && b[next] == ':'
		if bad >= 0 {
			return &Problem{Offset: bad, Field: field, InName: isName, What: what}
		}
		if isName {
			field = string(b[start:end])
		}
		i = end
	}
	return nil
}

// hex4 reads four hex digits, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Unmarshal is json.Unmarshal that refuses, with Check's *Problem, a text
// whose strings encoding/json would rewrite (invalid UTF-8, half a
// surrogate pair: both read as U+FFFD), so that a key is never silently
// changed on the way in.
func Unmarshal(b []byte, v any) error {
	if p := Check(b); p != nil {
		return p
	}
	return json.Unmarshal(b, v)
}

// SkipSpace returns the index of the first byte of b at or after i that is
// not JSON white space (space, tab, newline, carriage return).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
