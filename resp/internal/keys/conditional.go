package keys

import (
	"bytes"
	"strings"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// The strings commands that read the key before they write: SETNX,
// GETSET, GETDEL, GETEX, and SET's NX, XX and GET (time.go). Each decides
// on this node's view of the key, which another node's newer write may
// not have reached yet: NX may write where another node already holds a
// value, and the value answered is this node's (docs/redis.md). Each
// writes only what the client sent (a value, a delete, an expiry of the
// version it saw), never a value computed from the local one: APPEND and
// SETRANGE, which would, are refused. FLUSHDB and FLUSHALL delete every
// key in one batch, when the server allows it (Config.AllowFlush) and the
// caller has the admin role.

func stringCommands() []*session.Command {
	wr := []string{"write", "denyoom"}
	return []*session.Command{
		{Name: "setnx", Arity: 3, Flags: []string{"write", "denyoom", "fast"}, First: 1, Last: 1, Step: 1, Group: "string", Summary: "SET key value NX, on this node's view: 1 when it wrote, 0 when the key exists here.", Fn: cmdSetNX, Write: true},
		{Name: "getset", Arity: 3, Flags: []string{"write", "denyoom", "fast"}, First: 1, Last: 1, Step: 1, Group: "string", Summary: "SET key value GET: this node's old value.", Fn: cmdGetSet, Write: true},
		{Name: "getdel", Arity: 2, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "string", Summary: "This node's value, and a delete of the key.", Fn: cmdGetDel, Write: true},
		{Name: "getex", Arity: -2, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "string", Summary: "The value; EX, PX, EXAT, PXAT or PERSIST change its expiry as EXPIRE and PERSIST do.", Fn: cmdGetEx, Write: true},
		{Name: "append", Arity: 3, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "Refused: it would write a value computed from this node's copy.", Fn: cmdRefuseComputed},
		{Name: "setrange", Arity: 4, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "Refused: it would write a value computed from this node's copy.", Fn: cmdRefuseComputed},
		{Name: "flushdb", Arity: -1, Flags: []string{"write"}, Group: "server", Summary: "Deletes every key, fleet-wide, in one batch: only with --redis-allow-flush, for the admin role.", Fn: cmdFlush, Write: true},
		{Name: "flushall", Arity: -1, Flags: []string{"write"}, Group: "server", Summary: "Like FLUSHDB (database 0 is the only one).", Fn: cmdFlush, Write: true},
	}
}

func cmdSetNX(c *session.Session, a [][]byte) {
	m, ok := message(c, a[1], a[2], false)
	if !ok {
		return
	}
	if _, found := lookup(c, a[1]); found {
		c.Int(0)
		return
	}
	if c.Publish([]record.Message{m}) {
		c.Int(1)
	}
}

func cmdGetSet(c *session.Session, a [][]byte) {
	m, ok := message(c, a[1], a[2], false)
	if !ok {
		return
	}
	e, found := lookup(c, a[1])
	if !found && isHash(c, a[1]) {
		c.Err(wrongType)
		return
	}
	old := bytes.Clone(e.Value)
	if !c.Publish([]record.Message{m}) {
		return
	}
	if found {
		c.Bulk(old)
	} else {
		c.Null()
	}
}

// lookupOrNull reads a key's entry as lookup does; when the key has no
// value it answers null (WRONGTYPE for a hash), and false.
func lookupOrNull(c *session.Session, name []byte) (storeview.Entry, bool) {
	e, found := lookup(c, name)
	switch {
	case found:
		return e, true
	case isHash(c, name):
		c.Err(wrongType)
	default:
		c.Null()
	}
	return e, false
}

func cmdGetDel(c *session.Session, a [][]byte) {
	e, found := lookupOrNull(c, a[1])
	if !found {
		return
	}
	m, ok := message(c, a[1], nil, true)
	if !ok {
		return
	}
	old := bytes.Clone(e.Value)
	if c.Publish([]record.Message{m}) {
		c.Bulk(old)
	}
}

// cmdGetEx answers the value; with an option it changes the expiry of
// the version this node holds by the path EXPIRE and PERSIST take
// (changeExpiry): a metadata change that never brings a value back.
func cmdGetEx(c *session.Session, a [][]byte) {
	// Redis's order: the options' syntax, the key, then the number.
	var unit string
	var num []byte
	persist := false
	for i := 2; i < len(a); i++ {
		switch opt := strings.ToUpper(session.Clip(a[i])); opt {
		case "EX", "PX", "EXAT", "PXAT":
			if persist || unit != "" && unit != opt || i+1 >= len(a) {
				c.Err("ERR syntax error")
				return
			}
			unit, num = opt, a[i+1]
			i++
		case "PERSIST":
			if unit != "" {
				c.Err("ERR syntax error")
				return
			}
			persist = true
		default:
			c.Err("ERR syntax error")
			return
		}
	}
	e, found := lookupOrNull(c, a[1])
	if !found {
		return
	}
	var at int64
	if unit != "" {
		n, ok := session.Int(num)
		if !ok {
			c.Err("ERR value is not an integer or out of range")
			return
		}
		at, ok = expiryAt(unit, n, c.Env.Now())
		if n <= 0 || !ok {
			c.Err("ERR invalid expire time in 'getex' command")
			return
		}
	}
	old := bytes.Clone(e.Value)
	if unit != "" || persist && e.ExpiresAt != 0 {
		if _, ok := changeExpiry(c, a[1], e, at, core.Expire{}, unit == ""); !ok {
			return
		}
	}
	c.Bulk(old)
}

// cmdRefuseComputed refuses APPEND and SETRANGE: each would write a value
// that no client sent, computed from this node's copy of the key, which
// may be older than another node's; that write would then win over the
// newer one on every node.
func cmdRefuseComputed(c *session.Session, a [][]byte) {
	name := strings.ToUpper(session.Clip(a[0]))
	c.Err("ERR " + name + " is not served: it would write a value computed from this node's copy of the key, " +
		"which may be older than another node's newer one and would then replace it on every node; " +
		"build the whole value in the client and SET it")
}

// cmdFlush deletes every key of every topic the door maps (not the
// $-topics) in one batch, which every node applies whole.
func cmdFlush(c *session.Session, a [][]byte) {
	name := strings.ToUpper(session.Clip(a[0]))
	if len(a) > 2 || len(a) == 2 && !strings.EqualFold(session.Str(a[1]), "async") && !strings.EqualFold(session.Str(a[1]), "sync") {
		c.Err("ERR syntax error")
		return
	}
	if !c.Env.AllowFlush {
		c.Err("ERR " + name + " is disabled: it deletes every key on every node of the fleet; start the daemon with --redis-allow-flush to allow it (for the admin role)")
		return
	}
	if !c.Host().AuthorizeAdmin(name) {
		return
	}
	var msgs []record.Message
	for _, t := range c.Node().Topics() {
		if strings.HasPrefix(t.Name, "$") || t.Keys == 0 {
			continue
		}
		for after := ""; ; {
			keys := c.Node().Keys(t.Name, "", after, 10_000)
			for _, k := range keys {
				msgs = append(msgs, record.Message{Topic: t.Name, Key: k, Delete: true})
			}
			if len(keys) < 10_000 {
				break
			}
			after = keys[len(keys)-1]
		}
	}
	if len(msgs) > 0 {
		record.Together(msgs)
		if !c.Publish(msgs) {
			return
		}
	}
	c.OK()
}
