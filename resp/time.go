package resp

import (
	"bytes"
	"math"
	"strings"
	"time"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// The commands of time: expiry (SET EX/PX/EXAT/PXAT/KEEPTTL, SETEX,
// PSETEX, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST, TTL, PTTL,
// EXPIRETIME, PEXPIRETIME) and cachecast's own scheduled values (SET ...
// EFFECTIVEAT, CACHECAST.PENDING, CACHECAST.CANCEL). An expiry is carried
// by the record and decided on every node by its own clock (DESIGN.md,
// "Time"). EXPIRE and PERSIST write an expiry change bound to the
// version of the key this node holds (record.KindExpiry): it gives that
// version the new expiry and does nothing to any other, so it never
// brings an older value back over a newer one another node wrote.

func timeCommands() []*command {
	ro := []string{"readonly", "fast"}
	wr := []string{"write", "denyoom"}
	return []*command{
		{name: "setex", arity: 4, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "SET key value EX seconds.", fn: cmdSetEx, write: true},
		{name: "psetex", arity: 4, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "SET key value PX milliseconds.", fn: cmdSetEx, write: true},
		{name: "expire", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "generic", summary: "Sets the expiry, in seconds, of the key's version this node holds (NX, XX, GT, LT).", fn: cmdExpire, write: true},
		{name: "pexpire", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "generic", summary: "Like EXPIRE, in milliseconds.", fn: cmdExpire, write: true},
		{name: "expireat", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "generic", summary: "Like EXPIRE, at a Unix time in seconds.", fn: cmdExpire, write: true},
		{name: "pexpireat", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "generic", summary: "Like EXPIRE, at a Unix time in milliseconds.", fn: cmdExpire, write: true},
		{name: "persist", arity: 2, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "generic", summary: "Removes the expiry of the key's version this node holds.", fn: cmdPersist, write: true},
		{name: "expiretime", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "generic", summary: "The expiry as a Unix time in seconds, -1 (none) or -2 (no key).", fn: cmdExpireTime, inMulti: true},
		{name: "pexpiretime", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "generic", summary: "The expiry as a Unix time in milliseconds, -1 or -2.", fn: cmdExpireTime, inMulti: true},
		{name: "cachecast.pending", arity: 2, flags: []string{"readonly"}, first: 1, last: 1, step: 1, group: "cachecast", summary: "The scheduled values of a key not in force yet: [effective-at-ms, value or nil (a delete)] pairs.", fn: cmdPending, inMulti: true},
		{name: "cachecast.cancel", arity: 3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "cachecast", summary: "Cancels the key's values scheduled for a Unix time in milliseconds (1, or 0: none pending).", fn: cmdCancel, write: true},
	}
}

// now is the node's clock.
func (s *Server) now() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock()
	}
	return time.Now()
}

// setOptions are SET's options besides the expiry: KEEPTTL, and the
// conditions NX and XX and GET, decided on this node's view of the key.
type setOptions struct {
	keep, nx, xx, get bool
}

// parseSetOptions reads SET's options after key and value into m and o,
// or returns the error to answer ("" when none; it answers nothing
// itself, so that a pipeline's run of SETs answers it in its turn). As
// Redis does, it reads every option before it checks the expiry's
// number, and takes a repeated expiry of one kind (the last wins).
func (c *conn) parseSetOptions(m *record.Message, opts [][]byte) (o setOptions, bad string) {
	now := c.s.now()
	var unit string // the expiry's option: EX, PX, EXAT or PXAT ("": none)
	var num []byte  // its number
	for i := 0; i < len(opts); i++ {
		opt := strings.ToUpper(clip(opts[i]))
		switch opt {
		case "EX", "PX", "EXAT", "PXAT":
			if o.keep || unit != "" && unit != opt || i+1 >= len(opts) {
				return o, "ERR syntax error"
			}
			unit, num = opt, opts[i+1]
			i++
		case "KEEPTTL":
			if unit != "" {
				return o, "ERR syntax error"
			}
			o.keep = true
		case "NX", "XX":
			if opt == "NX" && o.xx || opt == "XX" && o.nx {
				return o, "ERR syntax error"
			}
			o.nx, o.xx = o.nx || opt == "NX", o.xx || opt == "XX"
		case "GET":
			o.get = true
		case "EFFECTIVEAT":
			if i+1 >= len(opts) {
				return o, "ERR syntax error"
			}
			n, ok := redisInt(opts[i+1])
			i++
			if !ok {
				return o, "ERR value is not an integer or out of range"
			}
			if m.EffectiveAt != 0 || n <= 0 {
				return o, "ERR syntax error: EFFECTIVEAT takes one Unix time in milliseconds, after 1970"
			}
			m.EffectiveAt = n
			if e := core.Effective(m, now.UnixMilli()); e != nil {
				return o, errorText(e)
			}
		default:
			return o, "ERR syntax error"
		}
	}
	if unit != "" {
		n, ok := redisInt(num)
		if !ok {
			return o, "ERR value is not an integer or out of range"
		}
		at, ok := expiryAt(unit, n, now)
		if n <= 0 || !ok {
			return o, "ERR invalid expire time in 'set' command"
		}
		m.ExpiresAt = at
	}
	// An expiry not after EFFECTIVEAT is refused by the message's checks
	// (command.TimeFields).
	return o, ""
}

// expiryAt turns the number n of an expiry option or command into Unix
// milliseconds with Redis's arithmetic: seconds unless the name starts
// with P (PX, PXAT, PEXPIRE, PSETEX...), relative to now unless it ends
// with AT. false where Redis answers "invalid expire time": the
// conversion or the addition overflows.
func expiryAt(name string, n int64, now time.Time) (int64, bool) {
	if !strings.HasPrefix(name, "P") {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			return 0, false
		}
		n *= 1000
	}
	var base int64
	if !strings.HasSuffix(name, "AT") {
		base = now.UnixMilli()
	}
	if n > math.MaxInt64-base {
		return 0, false
	}
	return n + base, true
}

func cmdSetWithOptions(c *conn, a [][]byte) {
	m, ok := c.message(a[1], a[2], false)
	if !ok {
		return
	}
	o, bad := c.parseSetOptions(&m, a[3:])
	if bad != "" {
		c.err(bad)
		return
	}
	if !o.keep && !o.nx && !o.xx && !o.get {
		if c.publish([]record.Message{m}) {
			c.ok()
		}
		return
	}
	// The conditions and the old value are this node's view of the key
	// (docs/redis.md): another node may hold a newer one.
	e, found := c.lookup(a[1])
	if !found && o.get && c.isHash(a[1]) {
		c.err(wrongType)
		return
	}
	old := bytes.Clone(e.Value) // the view's bytes are not ours to keep past the publish
	if o.nx && found || o.xx && !found {
		if o.get && found {
			c.bulk(old)
		} else {
			c.null()
		}
		return
	}
	if o.keep && found {
		// A full write of the client's value; the expiry kept is this
		// node's view of the key's (docs/redis.md).
		m.ExpiresAt = e.ExpiresAt
	}
	if !c.publish([]record.Message{m}) {
		return
	}
	switch {
	case o.get && found:
		c.bulk(old)
	case o.get:
		c.null()
	default:
		c.ok()
	}
}

func cmdSetEx(c *conn, a [][]byte) {
	n, ok := redisInt(a[2])
	if !ok {
		c.err("ERR value is not an integer or out of range")
		return
	}
	name := strings.ToUpper(clip(a[0]))
	at, ok := expiryAt(name, n, c.s.now())
	if n <= 0 || !ok {
		c.err("ERR invalid expire time in '" + strings.ToLower(name) + "' command")
		return
	}
	m, ok := c.message(a[1], a[3], false)
	if !ok {
		return
	}
	m.ExpiresAt = at
	if c.publish([]record.Message{m}) {
		c.ok()
	}
}

// lookup reads a Redis key's entry, tracking it for the client.
func (c *conn) lookup(name []byte) (storeview.Entry, bool) {
	c.trackRead(name)
	t, k := c.s.split(name)
	return c.node().Entry(t, k)
}

func cmdExpire(c *conn, a [][]byte) {
	name := strings.ToUpper(clip(a[0]))
	var nx, xx, gt, lt bool
	for _, o := range a[3:] { // the options before the number, as Redis reads them
		switch strings.ToUpper(clip(o)) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		default:
			c.err("ERR Unsupported option " + cString(o, len(o)))
			return
		}
	}
	if nx && (xx || gt || lt) {
		c.err("ERR NX and XX, GT or LT options at the same time are not compatible")
		return
	}
	if gt && lt {
		c.err("ERR GT and LT options at the same time are not compatible")
		return
	}
	n, ok := redisInt(a[2])
	if !ok {
		c.err("ERR value is not an integer or out of range")
		return
	}
	now := c.s.now()
	at, ok := expiryAt(name, n, now)
	if !ok {
		c.err("ERR invalid expire time in '" + strings.ToLower(name) + "' command")
		return
	}
	e, found := c.lookup(a[1])
	if !found {
		c.integer(0)
		return
	}
	changed, ok := c.changeExpiry(a[1], e, at, core.Expire{NX: nx, XX: xx, GT: gt, LT: lt}, false)
	switch {
	case ok && changed:
		c.integer(1)
	case ok:
		c.integer(0) // the condition refused it
	}
}

// changeExpiry publishes the expiry change the expiry operation
// (command.ChangeExpiry) decides for e, the version of the key name this
// node holds: the expiry at under x's condition, or none (persist).
// changed is false when x refused it (nothing written); ok is false with
// the error answered. EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST and
// GETEX all take this path.
func (c *conn) changeExpiry(name []byte, e storeview.Entry, at int64, x core.Expire, persist bool) (changed, ok bool) {
	t, k, ok := c.keyOf(name)
	if !ok {
		return false, false
	}
	m, change := core.ExpiryChange(t, k, e, 0), true
	if !persist {
		m, change = core.ChangeExpiry(t, k, e, at, c.s.now().UnixMilli(), x)
	}
	if !change {
		return false, true
	}
	return true, c.publish([]record.Message{m})
}

func cmdPersist(c *conn, a [][]byte) {
	e, found := c.lookup(a[1])
	if !found || e.ExpiresAt == 0 {
		c.integer(0)
		return
	}
	if _, ok := c.changeExpiry(a[1], e, 0, core.Expire{}, true); ok {
		c.integer(1)
	}
}

func cmdTTL(c *conn, a [][]byte) {
	e, found := c.lookup(a[1])
	switch {
	case !found && c.isHash(a[1]), found && e.ExpiresAt == 0:
		c.integer(-1)
	case !found:
		c.integer(-2)
	default:
		left := max(e.ExpiresAt-c.s.now().UnixMilli(), 0)
		if bytes.EqualFold(a[0], []byte("ttl")) {
			left = (left + 500) / 1000
		}
		c.integer(left)
	}
}

func cmdExpireTime(c *conn, a [][]byte) {
	e, found := c.lookup(a[1])
	switch {
	case !found && c.isHash(a[1]), found && e.ExpiresAt == 0:
		c.integer(-1)
	case !found:
		c.integer(-2)
	case bytes.EqualFold(a[0], []byte("expiretime")):
		c.integer(e.ExpiresAt/1000 + (e.ExpiresAt%1000+500)/1000) // to the nearest second, as Redis rounds

	default:
		c.integer(e.ExpiresAt)
	}
}

func cmdPending(c *conn, a [][]byte) {
	c.trackRead(a[1])
	t, k := c.s.split(a[1])
	var values []storeview.PendingRecord
	for _, p := range c.s.node.PendingKey(t, k) {
		if !p.Cancel {
			values = append(values, p)
		}
	}
	c.array(len(values))
	for _, p := range values {
		c.array(2)
		c.integer(p.EffectiveAt)
		if p.Delete {
			c.null()
		} else {
			c.bulk(p.Value)
		}
	}
}

func cmdCancel(c *conn, a [][]byte) {
	at, ok := redisInt(a[2])
	if !ok || at <= 0 {
		c.err("ERR value is not an integer or out of range")
		return
	}
	t, k, ok := c.keyOf(a[1])
	if !ok {
		return
	}
	m, e := core.CancelKey(c.s.node, t, k, at, c.s.now().UnixMilli())
	if e != nil && e.Code == wire.CodeNotPending {
		c.integer(0) // nothing pending there (its instant has come, or none)
		return
	}
	if e != nil {
		c.err(errorText(e))
		return
	}
	if c.publish([]record.Message{m}) {
		c.integer(1)
	}
}
