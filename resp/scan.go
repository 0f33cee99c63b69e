package resp

import (
	"strconv"
	"strings"
	"sync"
)

// globMatch is Redis's pattern matching (stringmatchlen): * ? [abc] [^a]
// [a-z] and \ escapes, with its quirks: a range's bounds and the byte
// compare as C's signed chars (so [a-\xff] takes no byte from 0x80 to
// 0xfe), and a ']' right after a range's '-' is its bound, not the end of
// the brackets.
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
			pattern = pattern[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			p := pattern[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for len(p) > 0 && p[0] != ']' {
				switch {
				case p[0] == '\\' && len(p) >= 2:
					if p[1] == s[0] {
						match = true
					}
					p = p[2:]
				case len(p) >= 3 && p[1] == '-':
					lo, hi, ch := int8(p[0]), int8(p[2]), int8(s[0])
					if lo > hi {
						lo, hi = hi, lo
					}
					if ch >= lo && ch <= hi {
						match = true
					}
					p = p[3:]
				default:
					if p[0] == s[0] {
						match = true
					}
					p = p[1:]
				}
			}
			if len(p) > 0 {
				p = p[1:] // the ]
			}
			if match == not {
				return false
			}
			s = s[1:]
			pattern = p
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != pattern[0] {
				return false
			}
			s = s[1:]
			pattern = pattern[1:]
		}
	}
	return len(s) == 0
}

// literalPrefix is the part of a pattern before its first special byte.
func literalPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, "*?[\\"); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// scanPos is where a SCAN or HSCAN stopped: the topic and the last key.
type scanPos struct {
	id    uint64
	topic string
	after string
}

// cursorTable maps SCAN cursors (numbers, as clients expect) onto
// positions. It keeps the last cursorSlots cursors of the whole server: a
// cursor older than that answers an error and the scan starts again.
type cursorTable struct {
	mu    sync.Mutex
	next  uint64
	slots [cursorSlots]scanPos
}

const cursorSlots = 4096

func (t *cursorTable) put(topic, after string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	id := t.next
	t.slots[id%cursorSlots] = scanPos{id: id, topic: topic, after: after}
	return id
}

func (t *cursorTable) get(id uint64) (scanPos, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.slots[id%cursorSlots]
	return p, p.id == id && id != 0
}

// scanArgs are the options of SCAN and HSCAN.
type scanArgs struct {
	match    string // "*" when there is no MATCH: "" matches only the empty name, as in Redis
	count    int
	typ      string
	novalues bool
}

func (c *conn) scanOptions(a [][]byte, hash bool) (o scanArgs, ok bool) {
	o.count, o.match = 10, "*"
	for i := 0; i < len(a); i++ {
		opt := strings.ToUpper(view(a[i]))
		switch {
		case opt == "NOVALUES" && hash:
			o.novalues = true
			continue
		case i+1 >= len(a):
			c.err("ERR syntax error")
			return o, false
		}
		i++
		switch opt {
		case "MATCH":
			o.match = string(a[i])
		case "COUNT":
			n, ok := redisInt(a[i])
			switch {
			case !ok:
				c.err("ERR value is not an integer or out of range")
				return o, false
			case n < 1:
				c.err("ERR syntax error") // Redis 7.0's answer to COUNT 0 and below
				return o, false
			}
			o.count = int(min(n, 100000))
		case "TYPE":
			if hash {
				c.err("ERR syntax error")
				return o, false
			}
			o.typ = strings.ToLower(string(a[i]))
		default:
			c.err("ERR syntax error")
			return o, false
		}
	}
	return o, true
}

// scanCursor reads a cursor argument (cursorNumber); false when it
// answered Redis's error.
func (c *conn) scanCursor(arg []byte) (uint64, bool) {
	id, ok := cursorNumber(arg)
	if !ok {
		c.err("ERR invalid cursor")
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
func (c *conn) cursorPos(id uint64) (p scanPos, done, ok bool) {
	switch id {
	case 0:
		return scanPos{}, false, true
	case lastCursor:
		return scanPos{}, true, true
	}
	p, ok = c.s.cursors.get(id)
	if !ok {
		c.err("ERR cursor " + strconv.FormatUint(id, 10) + " is unknown or expired (the server keeps its last " +
			strconv.Itoa(cursorSlots) + " cursors); start the SCAN again at 0")
	}
	return p, false, ok
}

// cursorNumber reads a cursor as Redis does (C's strtoul, whole): decimal
// digits after an optional sign, a minus wrapping around (-0 is 0, -1
// the largest cursor), within 64 bits; "" is 0 too.
func cursorNumber(b []byte) (uint64, bool) {
	s := view(b)
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
func (s *Server) scanKeys(pos scanPos, match string, count int) (names []string, next scanPos, done bool) {
	topics := s.node.Topics()
	lp := literalPrefix(match)
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
			keys := s.node.Keys(t.Name, prefix, after, want)
			for _, k := range keys {
				name := s.RedisName(t.Name, k)
				if globMatch(match, name) {
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
func cmdScan(c *conn, a [][]byte) {
	id, ok := c.scanCursor(a[1])
	if !ok {
		return
	}
	o, ok := c.scanOptions(a[2:], false)
	if !ok {
		return
	}
	pos, done, ok := c.cursorPos(id)
	if !ok {
		return
	}
	var names []string
	next := uint64(0)
	switch {
	case done:
	case o.typ == "" || o.typ == "string":
		var np scanPos
		names, np, done = c.s.scanKeys(pos, o.match, o.count)
		if !done {
			next = c.s.cursors.put(np.topic, np.after)
		}
	case o.typ == "hash":
		// The topics, in one answer: there are few of them.
		for _, t := range c.node().Topics() {
			if t.Keys > 0 && !strings.HasPrefix(t.Name, "$") && globMatch(o.match, t.Name) {
				names = append(names, t.Name)
			}
		}
	}
	c.array(2)
	c.bulkString(strconv.FormatUint(next, 10))
	c.array(len(names))
	for _, n := range names {
		c.bulkString(n)
	}
}

// maxKeysReply bounds KEYS; a larger key space is read with SCAN.
const maxKeysReply = 100000

func cmdKeys(c *conn, a [][]byte) {
	names, _, done := c.s.scanKeys(scanPos{}, string(a[1]), maxKeysReply+1)
	if !done || len(names) > maxKeysReply {
		c.err("ERR KEYS would look at more than " + strconv.Itoa(maxKeysReply) + " keys; use SCAN")
		return
	}
	c.array(len(names))
	for _, n := range names {
		c.bulkString(n)
	}
}

// cmdHScan answers a missing hash at once, before its options, as
// Redis does (an empty scan, or WRONGTYPE for a string key), then reads
// them and the cursor's position as cmdScan does.
func cmdHScan(c *conn, a [][]byte) {
	id, ok := c.scanCursor(a[2])
	if !ok {
		return
	}
	c.trackRead(a[1])
	t := topicOf(a[1])
	if t == "" || !c.isHash(a[1]) {
		if _, ok := c.node().Get(c.s.split(a[1])); ok {
			c.err(wrongType)
			return
		}
		c.array(2)
		c.bulkString("0")
		c.array(0)
		return
	}
	o, ok := c.scanOptions(a[3:], true)
	if !ok {
		return
	}
	pos, done, ok := c.cursorPos(id)
	if !ok {
		return
	}
	var keys []string
	var vals [][]byte
	next := uint64(0)
	if !done && (pos.topic == "" || pos.topic == t) {
		page := c.node().Keys(t, literalPrefix(o.match), pos.after, o.count)
		for _, k := range page {
			if !globMatch(o.match, k) {
				continue
			}
			v, ok := c.node().Get(t, k)
			if !ok {
				continue
			}
			keys = append(keys, k)
			vals = append(vals, v)
		}
		if len(page) == o.count {
			next = c.s.cursors.put(t, page[len(page)-1])
		}
	}
	c.array(2)
	c.bulkString(strconv.FormatUint(next, 10))
	if o.novalues {
		c.array(len(keys))
		for _, k := range keys {
			c.bulkString(k)
		}
		return
	}
	c.array(2 * len(keys))
	for i := range keys {
		c.bulkString(keys[i])
		c.bulk(vals[i])
	}
}
