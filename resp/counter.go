package resp

import (
	"errors"
	"math"
	"strings"

	core "github.com/cachecast/cachecast/command"
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
func counterCommands() []*command {
	wr := []string{"write", "denyoom", "fast"}
	return []*command{
		{name: "incr", arity: 2, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "Adds 1: an increment every node counts once.", fn: cmdIncr, write: true},
		{name: "decr", arity: 2, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "Subtracts 1, as INCR.", fn: cmdIncr, write: true},
		{name: "incrby", arity: 3, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "Adds an integer, as INCR.", fn: cmdIncr, write: true},
		{name: "decrby", arity: 3, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "Subtracts an integer, as INCR.", fn: cmdIncr, write: true},
		{name: "incrbyfloat", arity: 3, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "Adds a float, as INCR.", fn: cmdIncr, write: true},
		{name: "hincrby", arity: 4, flags: wr, first: 1, last: 1, step: 1, group: "hash", summary: "HINCRBY topic key n is INCRBY topic:key n.", fn: cmdHIncr, write: true},
		{name: "hincrbyfloat", arity: 4, flags: wr, first: 1, last: 1, step: 1, group: "hash", summary: "HINCRBYFLOAT topic key f is INCRBYFLOAT topic:key f.", fn: cmdHIncr, write: true},
	}
}

// parseIncrement reads the increment of the command named cmd (lower
// case) from its argument (nil for INCR and DECR), answering Redis's
// error when it is no number (false).
func (c *conn) parseIncrement(cmd string, arg []byte) (storeview.Increment, bool) {
	switch cmd {
	case "incr":
		return storeview.Increment{N: 1}, true
	case "decr":
		return storeview.Increment{N: -1}, true
	case "incrbyfloat", "hincrbyfloat":
		f, ok := storeview.ParseFloat(arg)
		if !ok {
			c.err(errNotFloat)
		}
		return storeview.Increment{F: f, Float: true}, ok
	}
	n, ok := redisInt(arg)
	if !ok {
		c.err(errNotInteger)
		return storeview.Increment{}, false
	}
	if cmd == "decrby" {
		if n == math.MinInt64 {
			c.err("ERR decrement would overflow")
			return storeview.Increment{}, false
		}
		n = -n
	}
	return storeview.Increment{N: n}, true
}

func cmdIncr(c *conn, a [][]byte) {
	cmd := strings.ToLower(view(a[0]))
	var arg []byte
	if len(a) > 2 {
		arg = a[2]
	}
	inc, ok := c.parseIncrement(cmd, arg)
	if !ok {
		return
	}
	t, k, ok := c.keyOf(a[1])
	if !ok {
		return
	}
	c.trackRead(a[1])
	c.count(t, k, inc, false)
}

func cmdHIncr(c *conn, a [][]byte) {
	inc, ok := c.parseIncrement(strings.ToLower(view(a[0])), a[3])
	if !ok {
		return
	}
	t := topicOf(a[1])
	if t == "" || len(a[2]) == 0 {
		c.err("ERR invalid_name: HINCRBY names a topic (the hash) and a key (the field), both not empty")
		return
	}
	c.trackRead(a[1])
	c.count(t, view(a[2]), inc, true)
}

// Redis's errors of a value that is no number of the increment's kind.
const (
	errNotInteger = "ERR value is not an integer or out of range"
	errNotFloat   = "ERR value is not a valid float"
)

// count adds inc to (topic, key) by the counter operation (command.Incr)
// and answers the value after it on this node; field says it is a hash's
// field (Redis words its errors so).
func (c *conn) count(topic, key string, inc storeview.Increment, field bool) {
	res, err := core.Incr(c.node(), topic, key, inc)
	switch {
	case errors.Is(err, storeview.ErrNotInteger) && field:
		c.err("ERR hash value is not an integer")
	case errors.Is(err, storeview.ErrNotInteger):
		c.err(errNotInteger)
	case errors.Is(err, storeview.ErrNotFloat) && field:
		c.err("ERR hash value is not a float")
	case errors.Is(err, storeview.ErrNotFloat):
		c.err(errNotFloat)
	case errors.Is(err, storeview.ErrOverflow) && inc.Float:
		c.err("ERR increment would produce NaN or Infinity")
	case errors.Is(err, storeview.ErrOverflow):
		c.err("ERR increment or decrement would overflow")
	}
	if err != nil || !c.publish([]record.Message{res.Message}) {
		return
	}
	if c.tx != nil {
		c.tx.counted(topic, key, res.Entry)
	}
	if inc.Float {
		c.bulk(res.Value)
		return
	}
	n, _ := storeview.ParseInt(res.Value)
	c.integer(n)
}
