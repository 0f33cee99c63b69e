package wire

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The API's name limits, in bytes. They are the API's, not the record
// format's: store.MaxKeyLen (65535) is what a record can hold, and a key
// of the API is far shorter.
const (
	// MaxTopicLen is the longest topic, cursor or group name.
	MaxTopicLen = 128
	// MaxAPIKeyLen is the longest key the API (and the Redis front door)
	// takes.
	MaxAPIKeyLen = 1024
	// MaxTagLen is the longest tag.
	MaxTagLen = 128
)

// CheckName checks a topic, cursor or group name (what names it in the
// error): 1 to MaxTopicLen bytes of [A-Za-z0-9._-].
func CheckName(what, s string) *Error {
	if s == "" || len(s) > MaxTopicLen {
		return Errorf(CodeInvalidName, "%s: must be 1 to %d bytes, got %d", what, MaxTopicLen, len(s))
	}
	if i := badNameByte(s); i >= 0 {
		return Errorf(CodeInvalidName, "%s %q: %s is not one of A-Z a-z 0-9 . _ -", what, s, badByteText(s, i))
	}
	return nil
}

// CheckTag checks a tag: 0 to MaxTagLen bytes of [A-Za-z0-9._-].
func CheckTag(s string) *Error {
	if len(s) > MaxTagLen {
		return Errorf(CodeInvalidName, "tag: must be at most %d bytes, got %d", MaxTagLen, len(s))
	}
	if i := badNameByte(s); i >= 0 {
		return Errorf(CodeInvalidName, "tag %q: %s is not one of A-Z a-z 0-9 . _ -", s, badByteText(s, i))
	}
	return nil
}

// CheckKey checks a key: 1 to MaxAPIKeyLen bytes of UTF-8 without control
// characters. (A message in a batch may have no key: it is then a stream
// message, and the caller does not call CheckKey.)
func CheckKey(s string) *Error {
	if s == "" || len(s) > MaxAPIKeyLen {
		return Errorf(CodeInvalidName, "key: must be 1 to %d bytes, got %d", MaxAPIKeyLen, len(s))
	}
	// Printable ASCII (nearly every key) needs no decoding: the runes
	// are checked from the first other byte on.
	i := 0
	for i < len(s) && ' ' <= s[i] && s[i] < 0x7f {
		i++
	}
	for j, r := range s[i:] {
		at := i + j
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[at:]); n == 1 {
				return Errorf(CodeInvalidName, "key: invalid UTF-8 at byte %d", at)
			}
		}
		if unicode.IsControl(r) {
			return Errorf(CodeInvalidName, "key: control character %U at byte %d", r, at)
		}
	}
	return nil
}

// badByteText shows the character at byte i of s as what it is: a
// character of UTF-8 with its bytes ('ü' (bytes c3 bc) at byte 0), or a
// byte that is not UTF-8 as hex (byte 0xff at byte 3), never a byte
// misread as a Latin-1 character.
func badByteText(s string, i int) string {
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && n <= 1:
		return fmt.Sprintf("byte 0x%02x at byte %d (not UTF-8)", s[i], i)
	case n > 1:
		return fmt.Sprintf("%q (bytes % x) at byte %d", r, s[i:i+n], i)
	}
	return fmt.Sprintf("%q at byte %d", r, i)
}

// IsName reports whether CheckName takes s (a topic, cursor or group
// name), without making an error: for the Redis front door, whose hashes
// are topics.
func IsName[T ~string | ~[]byte](s T) bool {
	return len(s) > 0 && len(s) <= MaxTopicLen && badNameByte(s) < 0
}

func badNameByte[T ~string | ~[]byte](s T) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return i
		}
	}
	return -1
}
