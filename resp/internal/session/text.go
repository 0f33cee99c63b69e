package session

import (
	"bytes"
	"errors"
	"strconv"
	"unsafe"

	"github.com/cachecast/cachecast/wire"
)

// Str is a string over b for a lookup that does not keep it.
func Str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Int reads an integer argument as Redis does: only the canonical
// decimal form (no sign +, no leading zeros, no -0), within int64.
func Int(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(Str(b), 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == Str(b)
}

// CString is an argument as C's printf %.*s prints it into one of Redis's
// errors: up to its first NUL byte, at most n bytes.
func CString(b []byte, n int) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b[:min(len(b), n)])
}

// Clip shortens an argument quoted in an error of cachecast's own.
func Clip(b []byte) string {
	if len(b) > 128 {
		return string(b[:128]) + "..."
	}
	return string(b)
}

// redisErrorer is an error that knows its Redis text.
type redisErrorer interface{ RedisError() string }

// RedisText is the Redis error text of err: its own (a RedisError
// method), a typed refusal's (*wire.Error, ErrorText), or ERR and its
// message.
func RedisText(err error) string {
	var re redisErrorer
	if errors.As(err, &re) {
		return re.RedisError()
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return ErrorText(we)
	}
	return "ERR " + err.Error()
}

// ErrorText is a typed refusal of the node or of package command in
// Redis's words, the door's one mapping of the error codes: NOPERM for
// forbidden, OOM for a full store or disk, LOADING for catching_up,
// CLUSTERDOWN for unavailable (the node is away, or stopping); ERR
// otherwise. The code stays in the text (ERR invalid_name: ...), except
// after LOADING and CLUSTERDOWN, whose words say it.
func ErrorText(e *wire.Error) string {
	switch e.Code {
	case wire.CodeForbidden:
		return "NOPERM " + e.Code + ": " + e.Message
	case wire.CodeStoreFull, wire.CodeDiskFull:
		return "OOM " + e.Code + ": " + e.Message
	case wire.CodeCatchingUp:
		return "LOADING " + e.Message
	case wire.CodeUnavailable:
		return "CLUSTERDOWN " + e.Message
	}
	return "ERR " + e.Code + ": " + e.Message
}

// TopicOf checks a hash name: a valid topic of the API (wire.IsName: at
// most wire.MaxTopicLen bytes, not the record format's 65535), or "" (an
// empty hash).
func TopicOf(name []byte) string {
	if !wire.IsName(name) {
		return ""
	}
	return Str(name)
}
