package keys

import (
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// scanPos is where a SCAN or HSCAN stopped: the topic and the last key.
type scanPos struct {
	topic, after string
}

// scanArgs are the options of SCAN and HSCAN.
type scanArgs struct {
	match    string // "*" when there is no MATCH: "" matches only the empty name, as in Redis
	count    int
	typ      string
	novalues bool
}

func scanOptions(c *session.Session, a [][]byte, hash bool) (o scanArgs, ok bool) {
	o.count, o.match = 10, "*"
	for i := 0; i < len(a); i++ {
		opt := strings.ToUpper(session.Str(a[i]))
		switch {
		case opt == "NOVALUES" && hash:
			o.novalues = true
			continue
		case i+1 >= len(a):
			c.Err("ERR syntax error")
			return o, false
		}
		i++
		switch opt {
		case "MATCH":
			o.match = string(a[i])
		case "COUNT":
			n, ok := session.Int(a[i])
			switch {
			case !ok:
				c.Err("ERR value is not an integer or out of range")
				return o, false
			case n < 1:
				c.Err("ERR syntax error") // Redis 7.0's answer to COUNT 0 and below
				return o, false
			}
			o.count = int(min(n, 100000))
		case "TYPE":
			if hash {
				c.Err("ERR syntax error")
				return o, false
			}
			o.typ = strings.ToLower(string(a[i]))
		default:
			c.Err("ERR syntax error")
			return o, false
		}
	}
	return o, true
}

// scanCursor reads a cursor argument (cursorNumber); false when it
// answered Redis's error.
func scanCursor(c *session.Session, arg []byte) (uint64, bool) {
	id, ok := cursorNumber(arg)
	if !ok {
		c.Err("ERR invalid cursor")
	}
	return id, ok
}

// lastCursor is the cursor SCAN -1 names (C's strtoul wraps -1 to it).
// Redis's scan from it visits its table's last bucket and ends (cursor
// 0); the server never hands it out, so here it is the end of the scan.
const lastCursor = 1<<64 - 1

// cursorPos is where the scan of cursor id resumes (done: it is at its
// end, lastCursor); false when it answered the error of a cursor the
// server no longer keeps.
func cursorPos(c *session.Session, id uint64) (p scanPos, done, ok bool) {
	switch id {
	case 0:
		return scanPos{}, false, true
	case lastCursor:
		return scanPos{}, true, true
	}
	p.topic, p.after, ok = c.Env.Cursors.Get(id)
	if !ok {
		c.Err("ERR cursor " + strconv.FormatUint(id, 10) + " is unknown or expired (the server keeps its last " +
			strconv.Itoa(session.CursorSlots) + " cursors); start the SCAN again at 0")
	}
	return p, false, ok
}

// cursorNumber reads a cursor as Redis does (C's strtoul, whole): decimal
// digits after an optional sign, a minus wrapping around (-0 is 0, -1
// the largest cursor), within 64 bits; "" is 0 too.
func cursorNumber(b []byte) (uint64, bool) {
	s := session.Str(b)
	neg := false
	if s == "" {
		return 0, true
	}
	if s[0] == '+' || s[0] == '-' {
		neg, s = s[0] == '-', s[1:] // "+" alone, or a second sign, ParseUint refuses
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// scanKeys walks the string keys from pos, looking at about count of
// them, and returns the names that match the pattern match ("*": all)
// and where it stopped (done: at the end).
func scanKeys(s *session.Env, pos scanPos, match string, count int) (names []string, next scanPos, done bool) {
	topics := s.Node.Topics()
	lp := session.LiteralPrefix(match)
	fixed := ""
	if i := strings.IndexByte(lp, ':'); i >= 0 {
		fixed = lp[:i]
	}
	seen := 0
	for _, t := range topics {
		if t.Name < pos.topic || strings.HasPrefix(t.Name, "$") || fixed != "" && t.Name != fixed {
			continue
		}
		after := ""
		if t.Name == pos.topic {
			after = pos.after
		}
		prefix := ""
		if fixed != "" {
			prefix = lp[len(fixed)+1:]
		}
		for {
			want := count - seen
			if want <= 0 {
				return names, scanPos{topic: t.Name, after: after}, false
			}
			keys := s.Node.Keys(t.Name, prefix, after, want)
			for _, k := range keys {
				name := s.RedisName(t.Name, k)
				if session.Match(match, name) {
					names = append(names, name)
				}
			}
			seen += len(keys)
			if len(keys) < want {
				break
			}
			after = keys[len(keys)-1]
		}
	}
	return names, scanPos{}, true
}

// cmdScan reads its cursor and options in Redis's order (the cursor's
// syntax, the options, then the position the cursor names), so that each
// gets the error Redis gives it.
func cmdScan(c *session.Session, a [][]byte) {
	id, ok := scanCursor(c, a[1])
	if !ok {
		return
	}
	o, ok := scanOptions(c, a[2:], false)
	if !ok {
		return
	}
	pos, done, ok := cursorPos(c, id)
	if !ok {
		return
	}
	var names []string
	next := uint64(0)
	switch {
	case done:
	case o.typ == "" || o.typ == "string":
		var np scanPos
		names, np, done = scanKeys(c.Env, pos, o.match, o.count)
		if !done {
			next = c.Env.Cursors.Put(np.topic, np.after)
		}
	case o.typ == "hash":
		// The topics, in one answer: there are few of them.
		for _, t := range c.Node().Topics() {
			if t.Keys > 0 && !strings.HasPrefix(t.Name, "$") && session.Match(o.match, t.Name) {
				names = append(names, t.Name)
			}
		}
	}
	c.Array(2)
	c.BulkString(strconv.FormatUint(next, 10))
	c.Array(len(names))
	for _, n := range names {
		c.BulkString(n)
	}
}

// maxKeysReply bounds KEYS; a larger key space is read with SCAN.
const maxKeysReply = 100000

func cmdKeys(c *session.Session, a [][]byte) {
	names, _, done := scanKeys(c.Env, scanPos{}, string(a[1]), maxKeysReply+1)
	if !done || len(names) > maxKeysReply {
		c.Err("ERR KEYS would look at more than " + strconv.Itoa(maxKeysReply) + " keys; use SCAN")
		return
	}
	c.Array(len(names))
	for _, n := range names {
		c.BulkString(n)
	}
}

// cmdHScan answers a missing hash at once, before its options, as
// Redis does (an empty scan, or WRONGTYPE for a string key), then reads
// them and the cursor's position as cmdScan does.
func cmdHScan(c *session.Session, a [][]byte) {
	id, ok := scanCursor(c, a[2])
	if !ok {
		return
	}
	c.TrackRead(a[1])
	t := session.TopicOf(a[1])
	if t == "" || !isHash(c, a[1]) {
		if _, ok := c.Node().Get(c.Split(a[1])); ok {
			c.Err(wrongType)
			return
		}
		c.Array(2)
		c.BulkString("0")
		c.Array(0)
		return
	}
	o, ok := scanOptions(c, a[3:], true)
	if !ok {
		return
	}
	pos, done, ok := cursorPos(c, id)
	if !ok {
		return
	}
	var keys []string
	var vals [][]byte
	next := uint64(0)
	if !done && (pos.topic == "" || pos.topic == t) {
		page := c.Node().Keys(t, session.LiteralPrefix(o.match), pos.after, o.count)
		for _, k := range page {
			if !session.Match(o.match, k) {
				continue
			}
			v, ok := c.Node().Get(t, k)
			if !ok {
				continue
			}
			keys = append(keys, k)
			vals = append(vals, v)
		}
		if len(page) == o.count {
			next = c.Env.Cursors.Put(t, page[len(page)-1])
		}
	}
	c.Array(2)
	c.BulkString(strconv.FormatUint(next, 10))
	if o.novalues {
		c.Array(len(keys))
		for _, k := range keys {
			c.BulkString(k)
		}
		return
	}
	c.Array(2 * len(keys))
	for i := range keys {
		c.BulkString(keys[i])
		c.Bulk(vals[i])
	}
}
