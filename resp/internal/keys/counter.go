package keys

import (
	"errors"
	"math"
	"strings"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// Counters: INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, HINCRBY and
// HINCRBYFLOAT write an increment bound to the version of the key this
// node holds (record.KindCounter), never the sum: every node adds every
// increment of that version once, so increments made on several nodes at
// once all count. The answer is the value on this node after its own
// increment (others made elsewhere meanwhile show once they arrive). A
// key without a value (never set, deleted, expired) gets an increment of
// its absence (record version 5), from 0, which every node counts the
// same way: increments made on several nodes of a key none of them had
// a value of all count. See "Counters" in DESIGN.md.

// counterCommands is the counters' part of the command table.
func counterCommands() []*session.Command {
	wr := []string{"write", "denyoom", "fast"}
	return []*session.Command{
		{Name: "incr", Arity: 2, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "Adds 1: an increment every node counts once.", Fn: cmdIncr, Write: true},
		{Name: "decr", Arity: 2, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "Subtracts 1, as INCR.", Fn: cmdIncr, Write: true},
		{Name: "incrby", Arity: 3, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "Adds an integer, as INCR.", Fn: cmdIncr, Write: true},
		{Name: "decrby", Arity: 3, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "Subtracts an integer, as INCR.", Fn: cmdIncr, Write: true},
		{Name: "incrbyfloat", Arity: 3, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "Adds a float, as INCR.", Fn: cmdIncr, Write: true},
		{Name: "hincrby", Arity: 4, Flags: wr, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "HINCRBY topic key n is INCRBY topic:key n.", Fn: cmdHIncr, Write: true},
		{Name: "hincrbyfloat", Arity: 4, Flags: wr, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "HINCRBYFLOAT topic key f is INCRBYFLOAT topic:key f.", Fn: cmdHIncr, Write: true},
	}
}

// parseIncrement reads the increment of the command named cmd (lower
// case) from its argument (nil for INCR and DECR), answering Redis's
// error when it is no number (false).
func parseIncrement(c *session.Session, cmd string, arg []byte) (storeview.Increment, bool) {
	switch cmd {
	case "incr":
		return storeview.Increment{N: 1}, true
	case "decr":
		return storeview.Increment{N: -1}, true
	case "incrbyfloat", "hincrbyfloat":
		f, ok := storeview.ParseFloat(arg)
		if !ok {
			c.Err(errNotFloat)
		}
		return storeview.Increment{F: f, Float: true}, ok
	}
	n, ok := session.Int(arg)
	if !ok {
		c.Err(errNotInteger)
		return storeview.Increment{}, false
	}
	if cmd == "decrby" {
		if n == math.MinInt64 {
			c.Err("ERR decrement would overflow")
			return storeview.Increment{}, false
		}
		n = -n
	}
	return storeview.Increment{N: n}, true
}

func cmdIncr(c *session.Session, a [][]byte) {
	cmd := strings.ToLower(session.Str(a[0]))
	var arg []byte
	if len(a) > 2 {
		arg = a[2]
	}
	inc, ok := parseIncrement(c, cmd, arg)
	if !ok {
		return
	}
	t, k, ok := keyOf(c, a[1])
	if !ok {
		return
	}
	countBy(c, t, k, inc, false)
}

func cmdHIncr(c *session.Session, a [][]byte) {
	inc, ok := parseIncrement(c, strings.ToLower(session.Str(a[0])), a[3])
	if !ok {
		return
	}
	t := session.TopicOf(a[1])
	if t == "" || len(a[2]) == 0 {
		c.Err("ERR invalid_name: HINCRBY names a topic (the hash) and a key (the field), both not empty")
		return
	}
	countBy(c, t, session.Str(a[2]), inc, true)
}

// Redis's errors of a value that is no number of the increment's kind.
const (
	errNotInteger = "ERR value is not an integer or out of range"
	errNotFloat   = "ERR value is not a valid float"
)

// countBy adds inc to (topic, key) by the counter operation (command.Incr)
// and answers the value after it on this node; field says it is a hash's
// field (Redis words its errors so).
func countBy(c *session.Session, topic, key string, inc storeview.Increment, field bool) {
	res, err := core.Incr(c.Node(), topic, key, inc)
	switch {
	case errors.Is(err, storeview.ErrNotInteger) && field:
		c.Err("ERR hash value is not an integer")
	case errors.Is(err, storeview.ErrNotInteger):
		c.Err(errNotInteger)
	case errors.Is(err, storeview.ErrNotFloat) && field:
		c.Err("ERR hash value is not a float")
	case errors.Is(err, storeview.ErrNotFloat):
		c.Err(errNotFloat)
	case errors.Is(err, storeview.ErrOverflow) && inc.Float:
		c.Err("ERR increment would produce NaN or Infinity")
	case errors.Is(err, storeview.ErrOverflow):
		c.Err("ERR increment or decrement would overflow")
	}
	if err != nil || !c.Publish([]record.Message{res.Message}) {
		return
	}
	if c.Tx != nil {
		c.Tx.Counted(topic, key, res.Entry)
	}
	if inc.Float {
		c.Bulk(res.Value)
		return
	}
	n, _ := storeview.ParseInt(res.Value)
	c.Int(n)
}
