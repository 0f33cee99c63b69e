package admin

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// DEBUG, for the admin role: the subcommands Redis's own test units
// use that fit a cache door. SLEEP holds the connection for a while
// (bounded by MaxDebugSleep); PROTOCOL answers one value of each RESP
// type; HELP lists them. The others are refused with Redis's words for
// an unknown subcommand.

// MaxDebugSleep bounds DEBUG SLEEP: a longer one is refused.
const MaxDebugSleep = 10 * time.Second

// debugHelp is DEBUG HELP's list of subcommands.
var debugHelp = []string{
	"PROTOCOL <type>", "    Reply with a test value of the specified type. <type> can be: string,",
	"    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
	"    true, false.",
	"SLEEP <seconds>", "    Stop the server for <seconds>. Decimals allowed. Here it holds this",
	"    connection only (its next commands and its pushes wait); at most 10 seconds.",
}

func cmdDebug(c *session.Session, a [][]byte) {
	if !c.Host().AuthorizeAdmin("DEBUG") {
		return
	}
	sub := strings.ToUpper(session.Str(a[1]))
	switch {
	case sub == "HELP" && len(a) == 2:
		c.Help("DEBUG", debugHelp)
	case sub == "SLEEP" && len(a) == 3:
		debugSleep(c, a[2])
	case sub == "PROTOCOL" && len(a) == 3:
		debugProtocol(c, strings.ToLower(session.Str(a[2])))
	default:
		c.Err("ERR unknown subcommand or wrong number of arguments for '" + session.CString(a[1], 128) + "'. Try DEBUG HELP.")
	}
}

// debugSleep holds the connection for the seconds arg says, read as
// Redis's strtod reads it (its longest number prefix; none, or a
// negative one, is 0), while mu is held: the connection's next commands
// and its pushes wait, as they would in Redis. Unlike Redis, which stops
// the whole server, the other connections are served meanwhile: the
// event loop hands a connection to a goroutine of its own before a
// DEBUG SLEEP or an EXEC that holds one (sleeps). The server's Close
// ends the sleep.
func debugSleep(c *session.Session, arg []byte) {
	d := time.Duration(strtod(arg) * float64(time.Second))
	if d > MaxDebugSleep {
		c.Err("ERR DEBUG SLEEP is at most " + MaxDebugSleep.String() + " here: it holds a connection of a shared node")
		return
	}
	if d > 0 {
		serverOf(c).Sleep(d)
	}
	c.OK()
}

// strtod is the number at the start of b as C's strtod reads a decimal
// one (0 when b starts with none).
func strtod(b []byte) float64 {
	s := strings.TrimLeft(session.Str(b), " \t\n\v\f\r")
	for n := min(len(s), 64); n > 0; n-- {
		if v, err := strconv.ParseFloat(s[:n], 64); err == nil || errIsRange(err) {
			return v
		}
	}
	return 0
}

// errIsRange says whether err is ParseFloat's out-of-range error (its
// value is then ±Inf or 0, as strtod's).
func errIsRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// IsDebugSleep says whether a is DEBUG SLEEP.
func IsDebugSleep(a [][]byte) bool {
	return len(a) > 1 && bytes.EqualFold(a[0], []byte("debug")) && bytes.EqualFold(a[1], []byte("sleep"))
}

// debugProtocol answers DEBUG PROTOCOL name as Redis 7.0's debug.c does,
// in the connection's protocol.
func debugProtocol(c *session.Session, name string) {
	switch name {
	case "string":
		c.BulkString("Hello World")
	case "integer":
		c.Int(12345)
	case "double":
		double(c, "3.141") // Redis's %.17g of 3.141 (%g drops the trailing zeros)
	case "bignum":
		resp3Scalar(c, '(', "1234567999999999999999999999999999999")
	case "null":
		c.Null()
	case "array", "set":
		if name == "set" {
			c.Set(3)
		} else {
			c.Array(3)
		}
		for j := range int64(3) {
			c.Int(j)
		}
	case "map":
		c.Map(3)
		for j := range int64(3) {
			c.Int(j)
			boolean(c, j == 1)
		}
	default:
		debugProtocolMore(c, name)
	}
}

// debugProtocolMore is debugProtocol's other half: the types that only
// RESP3 has a frame of its own for.
func debugProtocolMore(c *session.Session, name string) {
	switch name {
	case "attrib":
		if c.Proto == 3 {
			c.Out = append(c.Out, "|1\r\n"...)
			c.BulkString("key-popularity")
			c.Array(2)
			c.BulkString("key:123")
			c.Int(90)
		}
		c.BulkString("Some real reply following the attribute")
	case "push":
		if c.Proto != 3 {
			c.Err("ERR RESP2 is not supported by this command")
			return
		}
		c.Out = append(c.Out, ">2\r\n"...)
		c.BulkString("server-cpu-usage")
		c.Int(42)
		c.BulkString("Some real reply following the push reply")
	case "true", "false":
		boolean(c, name == "true")
	case "verbatim":
		c.Verbatim("This is a verbatim\nstring")
	default:
		c.Err("ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false")
	}
}

// boolean answers a boolean: RESP3 #t or #f, RESP2 the integer 1 or 0.
func boolean(c *session.Session, v bool) {
	switch {
	case c.Proto != 3 && v:
		c.Int(1)
	case c.Proto != 3:
		c.Int(0)
	case v:
		c.Out = append(c.Out, "#t\r\n"...)
	default:
		c.Out = append(c.Out, "#f\r\n"...)
	}
}

// double answers a double already written as Redis writes it: RESP3
// ,text; RESP2 a bulk string.
func double(c *session.Session, text string) { resp3Scalar(c, ',', text) }

// resp3Scalar answers text as a RESP3 scalar of type typ (a double, a
// big number), a bulk string in RESP2.
func resp3Scalar(c *session.Session, typ byte, text string) {
	if c.Proto != 3 {
		c.BulkString(text)
		return
	}
	c.Out = append(c.Out, typ)
	c.Out = append(c.Out, text...)
	c.Out = append(c.Out, '\r', '\n')
}
