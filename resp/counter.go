package resp

import (
	"math"
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// Counters: INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, HINCRBY and
// HINCRBYFLOAT write an increment bound to the version of the key this
// node holds (record.KindCounter), never the sum: every node adds every
// increment of that version once, so increments made on several nodes at
// once all count. The answer is the value on this node after its own
// increment (others made elsewhere meanwhile show once they arrive). A
// key without a value (never set, deleted, expired) is created by the
// increment as a plain write of its value: two nodes creating the same
// key at once keep one creation, as two SETs would. See "Counters" in
// DESIGN.md.

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

// increment is one counter command's increment: an integer, or a float.
type increment struct {
	n     int64
	f     float64
	float bool
}

// parseIncrement reads the increment of the command named cmd (lower
// case) from its argument (nil for INCR and DECR), answering Redis's
// error when it is no number (false).
func (c *conn) parseIncrement(cmd string, arg []byte) (increment, bool) {
	switch cmd {
	case "incr":
		return increment{n: 1}, true
	case "decr":
		return increment{n: -1}, true
	case "incrbyfloat", "hincrbyfloat":
		f, ok := redisFloat(arg)
		if !ok {
			c.err("ERR value is not a valid float")
		}
		return increment{f: f, float: true}, ok
	}
	n, ok := redisInt(arg)
	if !ok {
		c.err("ERR value is not an integer or out of range")
		return increment{}, false
	}
	if cmd == "decrby" {
		if n == math.MinInt64 {
			c.err("ERR decrement would overflow")
			return increment{}, false
		}
		n = -n
	}
	return increment{n: n}, true
}

// redisFloat reads a float as Redis's INCRBYFLOAT does: no blanks, not
// NaN nor infinite.
func redisFloat(b []byte) (float64, bool) {
	s := view(b)
	if s == "" || strings.TrimSpace(s) != s {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
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

// count adds inc to (topic, key) and answers the value after it on this
// node; field says it is a hash's field (Redis words its errors so).
func (c *conn) count(topic, key string, inc increment, field bool) {
	if err := c.s.node.Authorize(c.nc); err != nil {
		c.writeError(err)
		return
	}
	e, found := c.node().Entry(topic, key)
	sum, text, msg := addIncrement(e.Value, found, inc)
	if field && msg == errNotInteger {
		msg = "ERR hash value is not an integer"
	} else if field && msg == errNotFloat {
		msg = "ERR hash value is not a float"
	}
	if msg != "" {
		c.err(msg)
		return
	}
	m := ownMessage(topic, key, text)
	if found && e.Stamp.Origin != 0 {
		// The version this node holds: an increment bound to it.
		delta := strconv.AppendInt(nil, inc.n, 10)
		if inc.float {
			delta = strconv.AppendFloat(nil, inc.f, 'f', -1, 64)
		}
		m = ownMessage(topic, key, delta)
		m.CountOn, m.EffectiveAt = e.Stamp, e.EffectiveAt
	} else if found {
		m.ExpiresAt, m.Tag = e.ExpiresAt, e.Tag // written by this transaction: its value again
	}
	if !c.publish([]record.Message{m}) {
		return
	}
	if c.tx != nil {
		seen := storeview.Entry{Value: text, Tag: e.Tag, Stamp: e.Stamp, ExpiresAt: e.ExpiresAt, EffectiveAt: e.EffectiveAt, Base: e.Base}
		if !found || e.Stamp.Origin == 0 {
			seen.Stamp, seen.EffectiveAt, seen.Base = record.Stamp{}, 0, nil
		}
		c.tx.counted(topic, key, seen)
	}
	if inc.float {
		c.bulk(text)
		return
	}
	c.integer(sum)
}

// Redis's errors of a value that is no number of the increment's kind.
const (
	errNotInteger = "ERR value is not an integer or out of range"
	errNotFloat   = "ERR value is not a valid float"
)

// addIncrement is cur (found: the key has a value) plus inc, as the
// answer's integer and text, or Redis's error when cur is no number of
// inc's kind or the sum leaves its range.
func addIncrement(cur []byte, found bool, inc increment) (sum int64, text []byte, msg string) {
	if inc.float {
		f := 0.0
		if found {
			var ok bool
			if f, ok = redisFloat(cur); !ok {
				return 0, nil, errNotFloat
			}
		}
		f += inc.f
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, nil, "ERR increment would produce NaN or Infinity"
		}
		return 0, strconv.AppendFloat(nil, f, 'f', -1, 64), ""
	}
	var n int64
	if found {
		var ok bool
		if n, ok = redisInt(cur); !ok {
			return 0, nil, errNotInteger
		}
	}
	if inc.n > 0 && n > math.MaxInt64-inc.n || inc.n < 0 && n < math.MinInt64-inc.n {
		return 0, nil, "ERR increment or decrement would overflow"
	}
	n += inc.n
	return n, strconv.AppendInt(nil, n, 10), ""
}
