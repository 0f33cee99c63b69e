package keys

import (
	"bytes"
	"math"
	"strings"
	"time"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"

	"github.com/cachecast/cachecast/resp/internal/session"
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

func timeCommands() []*session.Command {
	ro := []string{"readonly", "fast"}
	wr := []string{"write", "denyoom"}
	return []*session.Command{
		{Name: "setex", Arity: 4, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "SET key value EX seconds.", Fn: cmdSetEx, Write: true},
		{Name: "psetex", Arity: 4, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "SET key value PX milliseconds.", Fn: cmdSetEx, Write: true},
		{Name: "expire", Arity: -3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "Sets the expiry, in seconds, of the key's version this node holds (NX, XX, GT, LT).", Fn: cmdExpire, Write: true},
		{Name: "pexpire", Arity: -3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "Like EXPIRE, in milliseconds.", Fn: cmdExpire, Write: true},
		{Name: "expireat", Arity: -3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "Like EXPIRE, at a Unix time in seconds.", Fn: cmdExpire, Write: true},
		{Name: "pexpireat", Arity: -3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "Like EXPIRE, at a Unix time in milliseconds.", Fn: cmdExpire, Write: true},
		{Name: "persist", Arity: 2, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "Removes the expiry of the key's version this node holds.", Fn: cmdPersist, Write: true},
		{Name: "expiretime", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "The expiry as a Unix time in seconds, -1 (none) or -2 (no key).", Fn: cmdExpireTime, InMulti: true},
		{Name: "pexpiretime", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "The expiry as a Unix time in milliseconds, -1 or -2.", Fn: cmdExpireTime, InMulti: true},
		{Name: "cachecast.pending", Arity: 2, Flags: []string{"readonly"}, First: 1, Last: 1, Step: 1, Group: "cachecast", Summary: "The scheduled values of a key not in force yet: [effective-at-ms, value or nil (a delete)] pairs.", Fn: cmdPending, InMulti: true},
		{Name: "cachecast.cancel", Arity: 3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "cachecast", Summary: "Cancels the key's values scheduled for a Unix time in milliseconds (1, or 0: none pending).", Fn: cmdCancel, Write: true},
	}
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
func parseSetOptions(c *session.Session, m *record.Message, opts [][]byte) (o setOptions, bad string) {
	now := c.Env.Now()
	var unit string // the expiry's option: EX, PX, EXAT or PXAT ("": none)
	var num []byte  // its number
	for i := 0; i < len(opts); i++ {
		opt := strings.ToUpper(session.Clip(opts[i]))
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
			n, ok := session.Int(opts[i+1])
			i++
			if !ok {
				return o, "ERR value is not an integer or out of range"
			}
			if m.EffectiveAt != 0 || n <= 0 {
				return o, "ERR syntax error: EFFECTIVEAT takes one Unix time in milliseconds, after 1970"
			}
			m.EffectiveAt = n
			if e := core.Effective(m, now.UnixMilli()); e != nil {
				return o, session.ErrorText(e)
			}
		default:
			return o, "ERR syntax error"
		}
	}
	if unit != "" {
		n, ok := session.Int(num)
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

// SetOptions reads the options of SET key value (opts, after the value)
// into m, for a pipeline's run of SETs that the server publishes as one
// batch (it sends only SETs without KEEPTTL, NX, XX and GET): the error
// to answer, "" when none.
func SetOptions(c *session.Session, m *record.Message, opts [][]byte) string {
	_, bad := parseSetOptions(c, m, opts)
	return bad
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

func cmdSetWithOptions(c *session.Session, a [][]byte) {
	m, ok := message(c, a[1], a[2], false)
	if !ok {
		return
	}
	o, bad := parseSetOptions(c, &m, a[3:])
	if bad != "" {
		c.Err(bad)
		return
	}
	if !o.keep && !o.nx && !o.xx && !o.get {
		if c.Publish([]record.Message{m}) {
			c.OK()
		}
		return
	}
	// The conditions and the old value are this node's view of the key
	// (docs/redis.md): another node may hold a newer one.
	e, found := lookup(c, a[1])
	if !found && o.get && isHash(c, a[1]) {
		c.Err(wrongType)
		return
	}
	old := bytes.Clone(e.Value) // the view's bytes are not ours to keep past the publish
	if o.nx && found || o.xx && !found {
		if o.get && found {
			c.Bulk(old)
		} else {
			c.Null()
		}
		return
	}
	if o.keep && found {
		// A full write of the client's value; the expiry kept is this
		// node's view of the key's (docs/redis.md).
		m.ExpiresAt = e.ExpiresAt
	}
	if !c.Publish([]record.Message{m}) {
		return
	}
	switch {
	case o.get && found:
		c.Bulk(old)
	case o.get:
		c.Null()
	default:
		c.OK()
	}
}

func cmdSetEx(c *session.Session, a [][]byte) {
	n, ok := session.Int(a[2])
	if !ok {
		c.Err("ERR value is not an integer or out of range")
		return
	}
	name := strings.ToUpper(session.Clip(a[0]))
	at, ok := expiryAt(name, n, c.Env.Now())
	if n <= 0 || !ok {
		c.Err("ERR invalid expire time in '" + strings.ToLower(name) + "' command")
		return
	}
	m, ok := message(c, a[1], a[3], false)
	if !ok {
		return
	}
	m.ExpiresAt = at
	if c.Publish([]record.Message{m}) {
		c.OK()
	}
}

// lookup reads a Redis key's entry, tracking it for the client.
func lookup(c *session.Session, name []byte) (storeview.Entry, bool) {
	c.TrackRead(name)
	t, k := c.Split(name)
	return c.Node().Entry(t, k)
}

func cmdExpire(c *session.Session, a [][]byte) {
	name := strings.ToUpper(session.Clip(a[0]))
	var nx, xx, gt, lt bool
	for _, o := range a[3:] { // the options before the number, as Redis reads them
		switch strings.ToUpper(session.Clip(o)) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		default:
			c.Err("ERR Unsupported option " + session.CString(o, len(o)))
			return
		}
	}
	x := core.Expire{NX: nx, XX: xx, GT: gt, LT: lt}
	if err := x.Check(); err != nil {
		c.Err("ERR " + err.Message) // Redis's words, without the code
		return
	}
	n, ok := session.Int(a[2])
	if !ok {
		c.Err("ERR value is not an integer or out of range")
		return
	}
	now := c.Env.Now()
	at, ok := expiryAt(name, n, now)
	if !ok {
		c.Err("ERR invalid expire time in '" + strings.ToLower(name) + "' command")
		return
	}
	e, found := lookup(c, a[1])
	if !found {
		c.Int(0)
		return
	}
	changed, ok := changeExpiry(c, a[1], e, at, x, false)
	switch {
	case ok && changed:
		c.Int(1)
	case ok:
		c.Int(0) // the condition refused it
	}
}

// changeExpiry publishes the expiry change the expiry operation
// (command.ChangeExpiry) decides for e, the version of the key name this
// node holds: the expiry at under x's condition, or none (persist).
// changed is false when x refused it (nothing written); ok is false with
// the error answered. EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST and
// GETEX all take this path.
func changeExpiry(c *session.Session, name []byte, e storeview.Entry, at int64, x core.Expire, persist bool) (changed, ok bool) {
	t, k, ok := keyOf(c, name)
	if !ok {
		return false, false
	}
	m, change := storeview.ExpiryChange(t, k, e, 0), true
	if !persist {
		m, change = core.ChangeExpiry(t, k, e, at, c.Env.Now().UnixMilli(), x)
	}
	if !change {
		return false, true
	}
	return true, c.Publish([]record.Message{m})
}

func cmdPersist(c *session.Session, a [][]byte) {
	e, found := lookup(c, a[1])
	if !found || e.ExpiresAt == 0 {
		c.Int(0)
		return
	}
	if _, ok := changeExpiry(c, a[1], e, 0, core.Expire{}, true); ok {
		c.Int(1)
	}
}

// withExpiry reads a key's entry for TTL and EXPIRETIME: when the key
// has no expiry (or is a hash) it answers -1, when it has no value -2,
// and false.
func withExpiry(c *session.Session, name []byte) (storeview.Entry, bool) {
	e, found := lookup(c, name)
	switch {
	case !found && isHash(c, name), found && e.ExpiresAt == 0:
		c.Int(-1)
	case !found:
		c.Int(-2)
	default:
		return e, true
	}
	return e, false
}

func cmdTTL(c *session.Session, a [][]byte) {
	e, ok := withExpiry(c, a[1])
	if !ok {
		return
	}
	left := max(e.ExpiresAt-c.Env.Now().UnixMilli(), 0)
	if bytes.EqualFold(a[0], []byte("ttl")) {
		left = (left + 500) / 1000
	}
	c.Int(left)
}

func cmdExpireTime(c *session.Session, a [][]byte) {
	e, ok := withExpiry(c, a[1])
	switch {
	case !ok:
	case bytes.EqualFold(a[0], []byte("expiretime")):
		c.Int(e.ExpiresAt/1000 + (e.ExpiresAt%1000+500)/1000) // to the nearest second, as Redis rounds
	default:
		c.Int(e.ExpiresAt)
	}
}

func cmdPending(c *session.Session, a [][]byte) {
	c.TrackRead(a[1])
	t, k := c.Split(a[1])
	var values []storeview.PendingRecord
	for _, p := range c.Env.Node.PendingKey(t, k) {
		if !p.Cancel {
			values = append(values, p)
		}
	}
	c.Array(len(values))
	for _, p := range values {
		c.Array(2)
		c.Int(p.EffectiveAt)
		if p.Delete {
			c.Null()
		} else {
			c.Bulk(p.Value)
		}
	}
}

func cmdCancel(c *session.Session, a [][]byte) {
	at, ok := session.Int(a[2])
	if !ok || at <= 0 {
		c.Err("ERR value is not an integer or out of range")
		return
	}
	t, k, ok := keyOf(c, a[1])
	if !ok {
		return
	}
	m, e := core.CancelKey(c.Env.Node, t, k, at, c.Env.Now().UnixMilli())
	if e != nil && e.Code == wire.CodeNotPending {
		c.Int(0) // nothing pending there (its instant has come, or none)
		return
	}
	if e != nil {
		c.Err(session.ErrorText(e))
		return
	}
	if c.Publish([]record.Message{m}) {
		c.Int(1)
	}
}
