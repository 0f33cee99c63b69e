// Package codec is the RESP codec of the Redis door (package resp): the
// reader of commands (Parse: RESP arrays of bulk strings, and inline
// commands as telnet sends them, split as Redis splits them, within
// Limits) and the writers of RESP2 and RESP3 replies (the Append
// functions). It holds no state and imports nothing of the module; the
// server (package resp) owns the connections, the commands and their
// meaning. Every function may be called from any goroutine.
package codec

import (
	"errors"
	"strconv"
)

// Errors of the protocol reader. Each one leaves the stream in a state
// that cannot be resynchronised: the connection answers it and closes.
var (
	ErrProtocol = errors.New("resp: protocol error")
	// ErrTooLarge is a bulk string over the value limit, a command over
	// the frame limit, or too many arguments.
	ErrTooLarge = errors.New("resp: too large")
)

// Error is a reader error with the text the client is told (Msg): it
// wraps ErrProtocol or ErrTooLarge (Err).
type Error struct {
	Err error
	Msg string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func errProto(msg string) error { return &Error{ErrProtocol, "Protocol error: " + msg} }

// Limits bound what one command may hold.
type Limits struct {
	MaxBulk  int // one argument
	MaxFrame int // the whole command
	MaxArgs  int
	MaxLine  int // an inline command
	// Unauth: the limits of a client that must still authenticate,
	// refused in Redis's words for such clients ("Protocol error:
	// unauthenticated bulk length").
	Unauth bool
}

// tooManyArgs refuses a command of count arguments.
func (l *Limits) tooManyArgs(count int) error {
	if l.Unauth {
		return &Error{ErrTooLarge, "Protocol error: unauthenticated multibulk length"}
	}
	return &Error{ErrTooLarge, "Protocol error: invalid multibulk length: " + strconv.Itoa(count) +
		" arguments is more than the " + strconv.Itoa(l.MaxArgs) + " a command may have"}
}

// tooLargeBulk refuses an argument of size bytes.
func (l *Limits) tooLargeBulk(size int) error {
	if l.Unauth {
		return &Error{ErrTooLarge, "Protocol error: unauthenticated bulk length"}
	}
	return &Error{ErrTooLarge, "Protocol error: invalid bulk length: a bulk string of " + strconv.Itoa(size) +
		" bytes is over --max-value-size (" + strconv.Itoa(l.MaxBulk) + " bytes)"}
}

// tooLargeFrame refuses a command of more than MaxFrame bytes.
func (l *Limits) tooLargeFrame() error {
	if l.Unauth {
		return &Error{ErrTooLarge, "Protocol error: unauthenticated command of more than " + strconv.Itoa(l.MaxFrame) +
			" bytes (AUTH first)"}
	}
	return &Error{ErrTooLarge, "Protocol error: a command of more than " +
		strconv.Itoa(l.MaxFrame) + " bytes is over --max-body-size"}
}

// Parse parses one command at the start of b into args (reused).
// It returns the arguments, the bytes the command took, and need: when the
// command is incomplete (n == 0, err == nil), the buffer length known to be
// needed before parsing again is worth it (at least len(b)+1). The
// arguments point into b. A command known to need more than
// lim.MaxFrame bytes is refused before they are read.
//
// A command is a RESP array of bulk strings (what every client sends) or
// an inline command: a line of words separated by spaces (what telnet
// sends).
func Parse(b []byte, args [][]byte, lim *Limits) (out [][]byte, n, need int, err error) {
	out, n, need, err = parseFrame(b, args, lim)
	if err == nil && n == 0 && need > lim.MaxFrame {
		return out, 0, 0, lim.tooLargeFrame()
	}
	return out, n, need, err
}

// parseFrame is Parse but for the frame limit of an incomplete command.
func parseFrame(b []byte, args [][]byte, lim *Limits) (out [][]byte, n, need int, err error) {
	args = args[:0]
	if len(b) == 0 {
		return args, 0, 1, nil
	}
	if b[0] != '*' {
		return parseInline(b, args, lim)
	}
	count, i, ok, err := parseLength(b, 1, lim.MaxLine, "invalid multibulk length")
	if err != nil || !ok {
		return args, 0, len(b) + 1, err
	}
	switch {
	case count < 0:
		// A null or negative array is no command; Redis skips it.
		return args, i, 0, nil
	case count > lim.MaxArgs:
		return args, 0, 0, lim.tooManyArgs(count)
	}
	for range count {
		if i >= len(b) {
			return args, 0, len(b) + 1, nil
		}
		if b[i] != '$' {
			return args, 0, 0, errProto("expected '$', got '" + printable(b[i]) + "'")
		}
		size, j, ok, err := parseLength(b, i+1, lim.MaxLine, "invalid bulk length")
		if err != nil {
			return args, 0, 0, err
		}
		if !ok {
			return args, 0, len(b) + 1, nil
		}
		if size < 0 {
			return args, 0, 0, errProto("invalid bulk length")
		}
		if size > lim.MaxBulk {
			return args, 0, 0, lim.tooLargeBulk(size)
		}
		end := j + size + 2
		if end > lim.MaxFrame {
			return args, 0, 0, lim.tooLargeFrame()
		}
		if end > len(b) {
			return args, 0, end, nil
		}
		if b[end-2] != '\r' || b[end-1] != '\n' {
			return args, 0, 0, errProto("bulk string not followed by CRLF")
		}
		args = append(args, b[j:j+size:j+size])
		i = end
	}
	return args, i, 0, nil
}

// parseLength reads the decimal after a type byte at b[i:] up to CRLF.
// ok is false when the line is not complete yet. A malformed one is the
// protocol error bad (Redis's words: "invalid multibulk length" for a
// command's count, "invalid bulk length" for an argument's). Any
// negative number reads as -1.
func parseLength(b []byte, i, maxLine int, bad string) (v, next int, ok bool, err error) {
	neg := false
	start := i
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	digits := 0
	for ; i < len(b); i++ {
		c := b[i]
		if c >= '0' && c <= '9' {
			if digits >= 10 {
				return 0, 0, false, errProto(bad)
			}
			v = v*10 + int(c-'0')
			digits++
			continue
		}
		if c != '\r' {
			return 0, 0, false, errProto(bad)
		}
		if i+1 >= len(b) {
			return 0, 0, false, nil
		}
		if b[i+1] != '\n' || digits == 0 {
			return 0, 0, false, errProto(bad)
		}
		if neg {
			v = -1
		}
		return v, i + 2, true, nil
	}
	if i-start > maxLine {
		return 0, 0, false, errProto(bad)
	}
	return 0, 0, false, nil
}

// parseInline reads an inline command (telnet's): one line, split as
// Redis splits it (splitInline).
func parseInline(b []byte, args [][]byte, lim *Limits) ([][]byte, int, int, error) {
	end := -1
	for i, c := range b {
		if c == '\n' {
			end = i
			break
		}
		if i >= lim.MaxLine {
			return args, 0, 0, &Error{ErrTooLarge, "Protocol error: too big inline request"}
		}
	}
	if end < 0 {
		return args, 0, len(b) + 1, nil
	}
	line := b[:end]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	args, err := splitInline(line, args, lim.MaxArgs)
	if err != nil {
		return args, 0, 0, err
	}
	return args, end + 1, 0, nil
}

// splitInline splits a line into arguments as Redis's sdssplitargs does:
// blanks (C's isspace) between them, and an argument may be, or contain,
// a "quoted" part (with the escapes \n \r \t \b \a \xHH, and \ before
// any other byte for that byte) or a 'quoted' one (\' for '); a closing
// quote must be followed by a blank or the end. A NUL byte is an ordinary
// byte here (sdssplitargs would end the line there, but Redis never
// finds the end of such a line: its search for the LF stops at the NUL).
// A plain argument points into line; a quoted one is a copy.
func splitInline(line []byte, args [][]byte, maxArgs int) ([][]byte, error) {
	const end = -1
	at := func(i int) int { // the byte at i, or end
		if i < len(line) {
			return int(line[i])
		}
		return end
	}
	unbalanced := errProto("unbalanced quotes in request")
	for i := 0; ; {
		for i < len(line) && cSpace(line[i]) {
			i++
		}
		if i >= len(line) {
			return args, nil
		}
		if len(args) >= maxArgs {
			return args, &Error{ErrTooLarge, "Protocol error: too many arguments"}
		}
		start := i
		var cur []byte // the argument once a quote made it a copy; nil: line[start:i]
		inq, insq := false, false
		for done := false; !done; {
			ch := at(i)
			switch {
			case inq && ch == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
				cur = append(cur, unhex(line[i+2])<<4|unhex(line[i+3]))
				i += 3
			case inq && ch == '\\' && at(i+1) != end:
				i++
				e := line[i]
				switch e {
				case 'n':
					e = '\n'
				case 'r':
					e = '\r'
				case 't':
					e = '\t'
				case 'b':
					e = '\b'
				case 'a':
					e = '\a'
				}
				cur = append(cur, e)
			case insq && ch == '\\' && at(i+1) == '\'':
				i++
				cur = append(cur, '\'')
			case inq && ch == '"', insq && ch == '\'':
				if n := at(i + 1); n != end && !cSpace(byte(n)) {
					return args, unbalanced
				}
				done = true
			case (inq || insq) && ch == end:
				return args, unbalanced
			case inq || insq:
				cur = append(cur, byte(ch))
			case ch == ' ', ch == '\n', ch == '\r', ch == '\t', ch == end:
				if cur == nil {
					args = append(args, line[start:i:i])
				}
				done = true
				continue
			case ch == '"', ch == '\'':
				if cur == nil {
					cur = append(make([]byte, 0, len(line)-start), line[start:i]...)
				}
				inq, insq = ch == '"', ch == '\''
			default:
				if cur != nil {
					cur = append(cur, byte(ch))
				}
			}
			if i < len(line) {
				i++
			}
		}
		if cur != nil {
			args = append(args, cur)
		}
	}
}

// cSpace is C's isspace.
func cSpace(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }

func isHex(c int) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func printable(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return string(rune(c))
	}
	return "\\x" + strconv.FormatUint(uint64(c), 16)
}

// The append functions write RESP values to b and return it. proto is 2 or 3: RESP3 has
// maps, nulls, booleans, doubles and pushes of its own; under RESP2 they
// fall back to arrays, null bulk strings and integers, as Redis does.

// AppendSimple writes a simple string (+s).
func AppendSimple(b []byte, s string) []byte {
	b = append(b, '+')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendError writes an error; msg starts with its code (ERR, WRONGTYPE,
// NOPERM, ...). CR and LF in msg would break the frame: they become spaces.
func AppendError(b []byte, msg string) []byte {
	b = append(b, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

// AppendInt writes an integer (:n).
func AppendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendBulk writes a bulk string ($len v).
func AppendBulk(b []byte, v []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, '\r', '\n')
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// AppendBulkString is AppendBulk of a string.
func AppendBulkString(b []byte, v string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, '\r', '\n')
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// AppendVerbatim writes text as Redis's addReplyVerbatim does (INFO,
// CLIENT INFO, CLIENT LIST): a RESP3 verbatim string of format txt
// (=n txt:...), a bulk string in RESP2.
func AppendVerbatim(b []byte, text string, proto int) []byte {
	if proto != 3 {
		return AppendBulkString(b, text)
	}
	b = append(b, '=')
	b = strconv.AppendInt(b, int64(len(text)+len("txt:")), 10)
	b = append(b, "\r\ntxt:"...)
	b = append(b, text...)
	return append(b, '\r', '\n')
}

// AppendNull writes a null: RESP3 _, RESP2 a null bulk string ($-1).
func AppendNull(b []byte, proto int) []byte {
	if proto == 3 {
		return append(b, '_', '\r', '\n')
	}
	return append(b, "$-1\r\n"...)
}

// AppendArray starts an array of n elements (*n).
func AppendArray(b []byte, n int) []byte { return appendHeader(b, '*', n) }

// appendHeader appends an aggregate's header: its type byte and its
// count.
func appendHeader(b []byte, typ byte, n int) []byte {
	b = append(b, typ)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// AppendSet starts a set of n elements: RESP3 ~n, RESP2 an array.
func AppendSet(b []byte, n, proto int) []byte {
	if proto == 3 {
		return appendHeader(b, '~', n)
	}
	return AppendArray(b, n)
}

// AppendMap starts a map of n pairs: RESP3 %n, RESP2 an array of 2n.
func AppendMap(b []byte, n, proto int) []byte {
	if proto == 3 {
		return appendHeader(b, '%', n)
	}
	return AppendArray(b, 2*n)
}

// AppendPush starts an out-of-band message: RESP3 >n, RESP2 an array (a
// pub/sub message of a subscribed connection).
func AppendPush(b []byte, n, proto int) []byte {
	if proto == 3 {
		return appendHeader(b, '>', n)
	}
	return AppendArray(b, n)
}
