package resp

import (
	"bytes"
	"net"
	"strings"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/store/record"
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

func stringCommands() []*command {
	wr := []string{"write", "denyoom"}
	return []*command{
		{name: "setnx", arity: 3, flags: []string{"write", "denyoom", "fast"}, first: 1, last: 1, step: 1, group: "string", summary: "SET key value NX, on this node's view: 1 when it wrote, 0 when the key exists here.", fn: cmdSetNX, write: true},
		{name: "getset", arity: 3, flags: []string{"write", "denyoom", "fast"}, first: 1, last: 1, step: 1, group: "string", summary: "SET key value GET: this node's old value.", fn: cmdGetSet, write: true},
		{name: "getdel", arity: 2, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "string", summary: "This node's value, and a delete of the key.", fn: cmdGetDel, write: true},
		{name: "getex", arity: -2, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "string", summary: "The value; EX, PX, EXAT, PXAT or PERSIST change its expiry as EXPIRE and PERSIST do.", fn: cmdGetEx, write: true},
		{name: "append", arity: 3, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "Refused: it would write a value computed from this node's copy.", fn: cmdRefuseComputed},
		{name: "setrange", arity: 4, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "Refused: it would write a value computed from this node's copy.", fn: cmdRefuseComputed},
		{name: "flushdb", arity: -1, flags: []string{"write"}, group: "server", summary: "Deletes every key, fleet-wide, in one batch: only with --redis-allow-flush, for the admin role.", fn: cmdFlush, write: true},
		{name: "flushall", arity: -1, flags: []string{"write"}, group: "server", summary: "Like FLUSHDB (database 0 is the only one).", fn: cmdFlush, write: true},
		{name: "monitor", arity: 1, flags: []string{"admin", "noscript", "loading", "stale"}, group: "server", summary: "Streams every command the server runs, as Redis writes them: for the admin role.", fn: cmdMonitor},
	}
}

// adminNode is a Node that can tell whether a connection's peer has the
// admin role (FLUSHDB, FLUSHALL, MONITOR); a Node without it has no
// admin.
type adminNode interface {
	AuthorizeAdmin(conn net.Conn) error
}

// authorizeAdmin answers the error when the peer of c has no admin role
// (false).
func (c *conn) authorizeAdmin(cmd string) bool {
	an, ok := c.s.node.(adminNode)
	if !ok {
		c.err("NOPERM this node grants no admin role, which " + cmd + " needs")
		return false
	}
	if err := an.AuthorizeAdmin(c.nc); err != nil {
		c.writeError(err)
		return false
	}
	return true
}

func cmdSetNX(c *conn, a [][]byte) {
	m, ok := c.message(a[1], a[2], false)
	if !ok {
		return
	}
	if _, found := c.lookup(a[1]); found {
		c.integer(0)
		return
	}
	if c.publish([]record.Message{m}) {
		c.integer(1)
	}
}

func cmdGetSet(c *conn, a [][]byte) {
	m, ok := c.message(a[1], a[2], false)
	if !ok {
		return
	}
	e, found := c.lookup(a[1])
	if !found && c.isHash(a[1]) {
		c.err(wrongType)
		return
	}
	old := bytes.Clone(e.Value)
	if !c.publish([]record.Message{m}) {
		return
	}
	if found {
		c.bulk(old)
	} else {
		c.null()
	}
}

func cmdGetDel(c *conn, a [][]byte) {
	e, found := c.lookup(a[1])
	if !found {
		if c.isHash(a[1]) {
			c.err(wrongType)
		} else {
			c.null()
		}
		return
	}
	m, ok := c.message(a[1], nil, true)
	if !ok {
		return
	}
	old := bytes.Clone(e.Value)
	if c.publish([]record.Message{m}) {
		c.bulk(old)
	}
}

// cmdGetEx answers the value; with an option it changes the expiry of
// the version this node holds by the path EXPIRE and PERSIST take
// (changeExpiry): a metadata change that never brings a value back.
func cmdGetEx(c *conn, a [][]byte) {
	// Redis's order: the options' syntax, the key, then the number.
	var unit string
	var num []byte
	persist := false
	for i := 2; i < len(a); i++ {
		switch opt := strings.ToUpper(clip(a[i])); opt {
		case "EX", "PX", "EXAT", "PXAT":
			if persist || unit != "" && unit != opt || i+1 >= len(a) {
				c.err("ERR syntax error")
				return
			}
			unit, num = opt, a[i+1]
			i++
		case "PERSIST":
			if unit != "" {
				c.err("ERR syntax error")
				return
			}
			persist = true
		default:
			c.err("ERR syntax error")
			return
		}
	}
	e, found := c.lookup(a[1])
	if !found {
		if c.isHash(a[1]) {
			c.err(wrongType)
		} else {
			c.null()
		}
		return
	}
	var at int64
	if unit != "" {
		n, ok := redisInt(num)
		if !ok {
			c.err("ERR value is not an integer or out of range")
			return
		}
		at, ok = expiryAt(unit, n, c.s.now())
		if n <= 0 || !ok {
			c.err("ERR invalid expire time in 'getex' command")
			return
		}
	}
	old := bytes.Clone(e.Value)
	if unit != "" || persist && e.ExpiresAt != 0 {
		if _, ok := c.changeExpiry(a[1], e, at, core.Expire{}, unit == ""); !ok {
			return
		}
	}
	c.bulk(old)
}

// cmdRefuseComputed refuses APPEND and SETRANGE: each would write a value
// that no client sent, computed from this node's copy of the key, which
// may be older than another node's; that write would then win over the
// newer one on every node.
func cmdRefuseComputed(c *conn, a [][]byte) {
	name := strings.ToUpper(clip(a[0]))
	c.err("ERR " + name + " is not served: it would write a value computed from this node's copy of the key, " +
		"which may be older than another node's newer one and would then replace it on every node; " +
		"build the whole value in the client and SET it")
}

// cmdFlush deletes every key of every topic the door maps (not the
// $-topics) in one batch, which every node applies whole.
func cmdFlush(c *conn, a [][]byte) {
	name := strings.ToUpper(clip(a[0]))
	if len(a) > 2 || len(a) == 2 && !strings.EqualFold(view(a[1]), "async") && !strings.EqualFold(view(a[1]), "sync") {
		c.err("ERR syntax error")
		return
	}
	if !c.s.cfg.AllowFlush {
		c.err("ERR " + name + " is disabled: it deletes every key on every node of the fleet; start the daemon with --redis-allow-flush to allow it (for the admin role)")
		return
	}
	if !c.authorizeAdmin(name) {
		return
	}
	var msgs []record.Message
	for _, t := range c.node().Topics() {
		if strings.HasPrefix(t.Name, "$") || t.Keys == 0 {
			continue
		}
		for after := ""; ; {
			keys := c.node().Keys(t.Name, "", after, 10_000)
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
		if !c.publish(msgs) {
			return
		}
	}
	c.ok()
}
