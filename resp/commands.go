package resp

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// command is one entry of the command table.
type command struct {
	name    string // lower case, as COMMAND lists it
	arity   int    // Redis's convention: n exactly, -n at least n
	flags   []string
	first   int // first key argument (0: none)
	last    int
	step    int
	group   string
	summary string
	fn      func(c *conn, a [][]byte)
	write   bool // goes through the node's publish path
	pubsub  bool // allowed while a RESP2 connection is subscribed
	inMulti bool // may be queued after MULTI
	read    bool // reads the view: -LOADING while the node catches up, -CLUSTERDOWN when away
	// subcommands: a container's subcommands and their arities, as
	// Redis's command table has them (nil: none), checked before the
	// command runs, as Redis checks them.
	subcommands map[string]int
	index       int // into the per-command counters
}

// commands is the table, by upper-case name; filled by init.
var commands map[string]*command

// commandList is the table in name order (COMMAND, metrics).
var commandList []*command

func init() {
	ro := []string{"readonly", "fast"}
	wr := []string{"write", "denyoom"}
	cn := []string{"fast", "loading", "stale"}
	ps := []string{"pubsub", "noscript", "loading", "stale"}
	table := []*command{
		// Connection.
		{name: "hello", arity: -1, flags: cn, group: "connection", summary: "Handshakes with the server (RESP2 or RESP3, AUTH, SETNAME).", fn: cmdHello},
		{name: "auth", arity: -2, flags: cn, group: "connection", summary: "Authenticates as a user of the node's users file (AUTH [user] password).", fn: cmdAuth},
		{name: "client", arity: -2, flags: cn, group: "connection", summary: "SETNAME, GETNAME, SETINFO, ID, INFO, LIST, TRACKING, CACHING, GETREDIR, TRACKINGINFO, HELP.", fn: cmdClient, subcommands: clientArity},
		{name: "select", arity: 2, flags: cn, group: "connection", summary: "Selects database 0, the only one.", fn: cmdSelect},
		{name: "ping", arity: -1, flags: cn, group: "connection", summary: "Answers PONG or the message.", fn: cmdPing, pubsub: true, inMulti: true},
		{name: "echo", arity: 2, flags: cn, group: "connection", summary: "Answers the message.", fn: cmdEcho, inMulti: true},
		{name: "quit", arity: -1, flags: cn, group: "connection", summary: "Closes the connection.", fn: cmdQuit, pubsub: true},
		{name: "reset", arity: 1, flags: cn, group: "connection", summary: "Resets the connection's state.", fn: cmdReset, pubsub: true},
		{name: "readonly", arity: 1, flags: cn, group: "cluster", summary: "Accepted: every read is local.", fn: cmdOK},
		{name: "readwrite", arity: 1, flags: cn, group: "cluster", summary: "Accepted.", fn: cmdOK},
		{name: "cluster", arity: -2, flags: cn, group: "cluster", summary: "Refused: a standalone endpoint.", fn: cmdCluster},
		{name: "info", arity: -1, flags: cn, group: "server", summary: "Sections server, clients, persistence, stats, replication, keyspace, cachecast.", fn: cmdInfo, inMulti: true},
		{name: "command", arity: -1, flags: cn, group: "server", summary: "The command table: COMMAND, COUNT, DOCS, INFO, LIST.", fn: cmdCommand, subcommands: commandArity},
		{name: "config", arity: -2, flags: cn, group: "server", summary: "GET of a few parameters; SET notify-keyspace-events.", fn: cmdConfig, subcommands: configArity},
		{name: "dbsize", arity: 1, flags: ro, group: "server", summary: "The number of live keys.", fn: cmdDBSize, inMulti: true},
		{name: "time", arity: 1, flags: ro, group: "server", summary: "The server's time.", fn: cmdTime, inMulti: true},
		{name: "wait", arity: 3, flags: []string{"noscript"}, group: "generic", summary: "Waits until the replica holds this connection's last write.", fn: cmdWait},
		{name: "multi", arity: 1, flags: cn, group: "transactions", summary: "Queues commands until EXEC.", fn: cmdMulti},
		{name: "exec", arity: 1, flags: cn, group: "transactions", summary: "Runs the queued commands; their writes are one batch, all or nothing.", fn: cmdExec},
		{name: "discard", arity: 1, flags: cn, group: "transactions", summary: "Drops the queued commands.", fn: cmdDiscard},
		{name: "watch", arity: -2, flags: cn, first: 1, last: -1, step: 1, group: "transactions", summary: "EXEC aborts if one of the keys changes in this node's view first.", fn: cmdWatch},
		{name: "unwatch", arity: 1, flags: cn, group: "transactions", summary: "Forgets the watched keys.", fn: cmdUnwatch, inMulti: true},

		// Reads.
		{name: "get", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "string", summary: "The value of topic:key.", fn: cmdGet, inMulti: true},
		{name: "mget", arity: -2, flags: ro, first: 1, last: -1, step: 1, group: "string", summary: "The values of several keys.", fn: cmdMGet, inMulti: true},
		{name: "exists", arity: -2, flags: ro, first: 1, last: -1, step: 1, group: "generic", summary: "How many of the keys exist.", fn: cmdExists, inMulti: true},
		{name: "type", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "generic", summary: "string, hash (a topic) or none.", fn: cmdType, inMulti: true},
		{name: "strlen", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "string", summary: "The length of a value.", fn: cmdStrlen, inMulti: true},
		{name: "getrange", arity: 4, flags: ro, first: 1, last: 1, step: 1, group: "string", summary: "A substring of a value.", fn: cmdGetRange, inMulti: true},
		{name: "ttl", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "generic", summary: "Seconds until the key expires, -1 (no expiry) or -2 (no key).", fn: cmdTTL, inMulti: true},
		{name: "pttl", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "generic", summary: "Milliseconds until the key expires, -1 or -2.", fn: cmdTTL, inMulti: true},
		{name: "object", arity: -2, flags: ro, first: 2, last: 2, step: 1, group: "generic", summary: "OBJECT ENCODING, OBJECT HELP.", fn: cmdObject, inMulti: true, subcommands: objectArity},
		{name: "scan", arity: -2, flags: []string{"readonly"}, group: "generic", summary: "Iterates the keys (MATCH, COUNT, TYPE).", fn: cmdScan, inMulti: true},
		{name: "keys", arity: 2, flags: []string{"readonly"}, group: "generic", summary: "The keys matching a pattern (bounded; use SCAN).", fn: cmdKeys, inMulti: true},
		{name: "hget", arity: 3, flags: ro, first: 1, last: 1, step: 1, group: "hash", summary: "HGET topic key is GET topic:key.", fn: cmdHGet, inMulti: true},
		{name: "hmget", arity: -3, flags: ro, first: 1, last: 1, step: 1, group: "hash", summary: "Several keys of a topic.", fn: cmdHMGet, inMulti: true},
		{name: "hexists", arity: 3, flags: ro, first: 1, last: 1, step: 1, group: "hash", summary: "Whether a topic has a key.", fn: cmdHExists, inMulti: true},
		{name: "hstrlen", arity: 3, flags: ro, first: 1, last: 1, step: 1, group: "hash", summary: "The length of a topic's value.", fn: cmdHStrlen, inMulti: true},
		{name: "hlen", arity: 2, flags: ro, first: 1, last: 1, step: 1, group: "hash", summary: "The live keys of a topic.", fn: cmdHLen, inMulti: true},
		{name: "hkeys", arity: 2, flags: []string{"readonly"}, first: 1, last: 1, step: 1, group: "hash", summary: "The keys of a topic (bounded; use HSCAN).", fn: cmdHKeys, inMulti: true},
		{name: "hvals", arity: 2, flags: []string{"readonly"}, first: 1, last: 1, step: 1, group: "hash", summary: "The values of a topic (bounded; use HSCAN).", fn: cmdHVals, inMulti: true},
		{name: "hgetall", arity: 2, flags: []string{"readonly"}, first: 1, last: 1, step: 1, group: "hash", summary: "A topic's keys and values (bounded; use HSCAN).", fn: cmdHGetAll, inMulti: true},
		{name: "hscan", arity: -3, flags: []string{"readonly"}, first: 1, last: 1, step: 1, group: "hash", summary: "Iterates a topic (MATCH, COUNT, NOVALUES).", fn: cmdHScan, inMulti: true},

		// Writes.
		{name: "set", arity: -3, flags: wr, first: 1, last: 1, step: 1, group: "string", summary: "SET key value [EX|PX|EXAT|PXAT n | KEEPTTL] [EFFECTIVEAT unix-ms].", fn: cmdSet, write: true},
		{name: "mset", arity: -3, flags: wr, first: 1, last: -1, step: 2, group: "string", summary: "One batch: all or nothing.", fn: cmdMSet, write: true},
		{name: "del", arity: -2, flags: []string{"write"}, first: 1, last: -1, step: 1, group: "generic", summary: "Tombstones for the keys that exist.", fn: cmdDel, write: true},
		{name: "unlink", arity: -2, flags: []string{"write", "fast"}, first: 1, last: -1, step: 1, group: "generic", summary: "Like DEL.", fn: cmdDel, write: true},
		{name: "hset", arity: -4, flags: wr, first: 1, last: 1, step: 1, group: "hash", summary: "HSET topic key value ... is one batch.", fn: cmdHSet, write: true},
		{name: "hmset", arity: -4, flags: wr, first: 1, last: 1, step: 1, group: "hash", summary: "Like HSET; answers OK.", fn: cmdHSet, write: true},
		{name: "hdel", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, group: "hash", summary: "Tombstones for a topic's keys.", fn: cmdHDel, write: true},
		{name: "publish", arity: 3, flags: []string{"pubsub", "loading", "stale", "fast"}, group: "pubsub", summary: "A keyless message on the channel's topic, to every node.", fn: cmdPublish, write: true},

		// Pub/sub.
		{name: "subscribe", arity: -2, flags: ps, group: "pubsub", summary: "Messages of topics and keys, from every node.", fn: cmdSubscribe, pubsub: true},
		{name: "psubscribe", arity: -2, flags: ps, group: "pubsub", summary: "Like SUBSCRIBE, by pattern.", fn: cmdPSubscribe, pubsub: true},
		{name: "unsubscribe", arity: -1, flags: ps, group: "pubsub", summary: "Ends subscriptions.", fn: cmdUnsubscribe, pubsub: true},
		{name: "punsubscribe", arity: -1, flags: ps, group: "pubsub", summary: "Ends pattern subscriptions.", fn: cmdPUnsubscribe, pubsub: true},
	}
	table = append(table, timeCommands()...)
	table = append(table, stringCommands()...)
	table = append(table, counterCommands()...)
	table = append(table, debugCommands()...)
	table = append(table, pubsubCommands()...)
	commands = make(map[string]*command, len(table))
	sort.Slice(table, func(i, j int) bool { return table[i].name < table[j].name })
	for i, cmd := range table {
		cmd.index = i
		cmd.read = slices.Contains(cmd.flags, "readonly")
		commands[strings.ToUpper(cmd.name)] = cmd
	}
	commandList = table
	setCommand = commands["SET"]
}

// lookup finds a command by name, in any case, without allocating.
func lookup(name []byte) *command {
	var up [24]byte
	if len(name) > len(up) {
		return nil
	}
	for i, ch := range name {
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		up[i] = ch
	}
	return commands[string(up[:len(name)])]
}

// refused marks the transaction under way, if any, as refused after a
// command's error: its EXEC then aborts, as Redis's does.
func (c *conn) refused() {
	if c.inMulti {
		c.multiErr = true
	}
}

// exec runs one command, a, whose table entry is cmd (nil: unknown),
// under mu. full says whether the answers waiting to be written reached
// outFlushSize (read under mu: the pusher appends to them too).
func (c *conn) exec(cmd *command, a [][]byte) (full bool) {
	c.mu.Lock()
	mark := len(c.out)
	defer func() {
		c.replied(cmd, mark)
		// CLIENT CACHING holds until a command other than CLIENT (a
		// refused one too) ends outside MULTI, as Redis's resetClient
		// keeps it after any CLIENT subcommand.
		if !c.inMulti && (cmd == nil || cmd.name != "client") {
			c.caching = 0
		}
		c.show()
		full = len(c.out) >= outFlushSize
		c.mu.Unlock()
	}()
	c.s.stats.commands.Add(1)
	if cmd == nil {
		c.s.stats.unknown.Add(1)
		c.unknownCommand(a)
		c.refused()
		return
	}
	c.s.stats.byCommand[cmd.index].Add(1)
	c.lastCmd = cmd
	c.showCmd(cmd, a)
	if cmd.arity > 0 && len(a) != cmd.arity || cmd.arity < 0 && len(a) < -cmd.arity {
		if cmd.name == "exec" {
			// Redis's rejectCommand aborts the transaction (there may be
			// none) with the reason.
			c.inMulti, c.multiErr, c.queued = false, false, nil
			c.err("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command")
			return
		}
		c.err("ERR wrong number of arguments for '" + cmd.name + "' command")
		c.refused()
		return
	}
	if cmd.subcommands != nil && len(a) > 1 && !c.subcommand(cmd.name, strings.ToLower(view(a[1])), a, cmd.subcommands) {
		c.refused()
		return
	}
	if cmd.write {
		// The publish role, checked once for every write as Redis checks
		// its ACL: before the node's state, before MULTI queues it, before
		// the command reads anything (so a refused EXPIRE of a missing
		// key is NOPERM, not 0). The node's write path checks it again.
		if err := c.s.node.Authorize(c.nc); err != nil {
			c.writeError(err)
			c.refused()
			return
		}
	}
	if cmd.read || cmd.write {
		if msg := c.refusal(cmd); msg != "" {
			c.err(msg) // before MULTI would queue it, as Redis does
			c.refused()
			return
		}
	}
	if c.proto == 2 && c.subscribed() && !cmd.pubsub {
		name := cmd.name // Redis's fullname: client|id for a subcommand
		if cmd.subcommands != nil && len(a) > 1 {
			name += "|" + strings.ToLower(view(a[1]))
		}
		c.err("ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
		return
	}
	if c.s.monitors.n.Load() > 0 {
		c.s.monitors.feed(c, cmd, a)
	}
	if c.inMulti && !runsInMulti[cmd.name] {
		c.queue(cmd, a)
		return
	}
	cmd.fn(c, a)
	return full
}

// refusal is the error the node's state (Node.State, command.State)
// answers cmd, a read or a write of the view: CLUSTERDOWN to both while
// the node is away, LOADING to a read while it catches up; "" when it
// serves cmd.
func (c *conn) refusal(cmd *command) string {
	st := c.s.node.State()
	e := st.Write()
	if e == nil && cmd.read {
		e = st.Read()
	}
	if e == nil {
		return ""
	}
	return errorText(e)
}

// The answer writers; called with mu held.

func (c *conn) ok()                 { c.out = append(c.out, "+OK\r\n"...) }
func (c *conn) simple(s string)     { c.out = codec.AppendSimple(c.out, s) }
func (c *conn) err(msg string)      { c.out = codec.AppendError(c.out, msg) }
func (c *conn) integer(n int64)     { c.out = codec.AppendInt(c.out, n) }
func (c *conn) bulk(b []byte)       { c.out = codec.AppendBulk(c.out, b) }
func (c *conn) bulkString(s string) { c.out = codec.AppendBulkString(c.out, s) }
func (c *conn) verbatim(s string)   { c.out = codec.AppendVerbatim(c.out, s, c.proto) }
func (c *conn) null()               { c.out = codec.AppendNull(c.out, c.proto) }
func (c *conn) array(n int)         { c.out = codec.AppendArray(c.out, n) }
func (c *conn) mapOf(n int)         { c.out = codec.AppendMap(c.out, n, c.proto) }
func (c *conn) set(n int)           { c.out = codec.AppendSet(c.out, n, c.proto) }

// unknownCommand answers as Redis's commandCheckExistence does: the
// name's first 128 bytes, then the arguments, each quoted, until 128
// bytes of them are written, the last cut to what is left.
func (c *conn) unknownCommand(a [][]byte) {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.WriteString(cString(a[0], 128))
	b.WriteString("', with args beginning with: ")
	start := b.Len()
	for _, arg := range a[1:] {
		n := b.Len() - start
		if n >= 128 {
			break
		}
		b.WriteString("'")
		b.WriteString(cString(arg, 128-n))
		b.WriteString("' ")
	}
	c.err(b.String())
}

// cString is an argument as C's printf %.*s prints it into one of Redis's
// errors: up to its first NUL byte, at most n bytes.
func cString(b []byte, n int) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b[:min(len(b), n)])
}

// clip shortens an argument quoted in an error of cachecast's own.
func clip(b []byte) string {
	if len(b) > 128 {
		return string(b[:128]) + "..."
	}
	return string(b)
}

// view is a string over b for a lookup that does not keep it.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// redisInt reads an integer argument as Redis does: only the canonical
// decimal form (no sign +, no leading zeros, no -0), within int64.
func redisInt(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(view(b), 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == view(b)
}

// split maps a Redis key onto (topic, key): at the first ':', or the
// default topic when there is none. The strings share b.
func (s *Server) split(name []byte) (topic, key string) {
	if i := bytes.IndexByte(name, ':'); i >= 0 {
		return view(name[:i]), view(name[i+1:])
	}
	return s.cfg.DefaultTopic, view(name)
}

// RedisName is the Redis key of (topic, key): the bare key in the default
// topic when it holds no ':', topic:key otherwise.
func (s *Server) RedisName(topic, key string) string {
	if topic == s.cfg.DefaultTopic && strings.IndexByte(key, ':') < 0 {
		return key
	}
	return topic + ":" + key
}

// isHash reports whether name is a topic with live keys (a hash).
func (c *conn) isHash(name []byte) bool {
	if bytes.IndexByte(name, ':') >= 0 || len(name) == 0 {
		return false
	}
	return len(c.node().Keys(view(name), "", "", 1)) > 0
}

const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// getString reads a Redis key as a string, tracking it for the client.
func (c *conn) getString(name []byte) ([]byte, bool) {
	c.trackRead(name)
	t, k := c.s.split(name)
	return c.node().Get(t, k)
}

func cmdGet(c *conn, a [][]byte) {
	v, ok := c.getString(a[1])
	switch {
	case ok:
		c.bulk(v)
	case c.isHash(a[1]):
		c.err(wrongType)
	default:
		c.null()
	}
}

// cmdMGet reads the keys at one instant (Node.GetMany): a batch
// published together is seen whole or not at all.
func cmdMGet(c *conn, a [][]byte) {
	n := len(a) - 1
	lk := &c.mget
	lk.topics, lk.keys = lk.topics[:0], lk.keys[:0]
	for _, name := range a[1:] {
		c.trackRead(name)
		t, k := c.s.split(name)
		lk.topics, lk.keys = append(lk.topics, t), append(lk.keys, k)
	}
	if cap(lk.entries) < n {
		lk.entries, lk.found = make([]storeview.Entry, n), make([]bool, n)
	}
	c.node().GetMany(lk.topics, lk.keys, lk.entries[:n], lk.found[:n])
	c.array(n)
	for i := range n {
		if lk.found[i] {
			c.bulk(lk.entries[i].Value)
		} else {
			c.null()
		}
	}
	lk.drop()
}

// lookups are MGET's buffers, reused by the connection's next MGET.
type lookups struct {
	topics, keys []string
	entries      []storeview.Entry
	found        []bool
}

// drop lets go of what the buffers point at (the read buffer, the view's
// values), and of buffers grown for a very large MGET.
func (l *lookups) drop() {
	if cap(l.keys) > 1024 {
		*l = lookups{}
		return
	}
	clear(l.topics[:cap(l.topics)])
	clear(l.keys[:cap(l.keys)])
	clear(l.entries[:cap(l.entries)])
}

func cmdExists(c *conn, a [][]byte) {
	n := 0
	for _, name := range a[1:] {
		if _, ok := c.getString(name); ok || c.isHash(name) {
			n++
		}
	}
	c.integer(int64(n))
}

func cmdType(c *conn, a [][]byte) {
	if _, ok := c.getString(a[1]); ok {
		c.simple("string")
	} else if c.isHash(a[1]) {
		c.simple("hash")
	} else {
		c.simple("none")
	}
}

func cmdStrlen(c *conn, a [][]byte) {
	v, ok := c.getString(a[1])
	if !ok && c.isHash(a[1]) {
		c.err(wrongType)
		return
	}
	c.integer(int64(len(v)))
}

func cmdGetRange(c *conn, a [][]byte) {
	start, ok1 := redisInt(a[2])
	end, ok2 := redisInt(a[3])
	if !ok1 || !ok2 {
		c.err("ERR value is not an integer or out of range")
		return
	}
	v, ok := c.getString(a[1])
	if !ok && c.isHash(a[1]) {
		c.err(wrongType)
		return
	}
	// Redis 7's arithmetic (7.0 to 7.4; Redis 8 answers "" where a
	// negative end falls before the value, which 7 clamps to its first
	// byte: GETRANGE k 0 -100 is the first byte).
	n := int64(len(v))
	if start < 0 && end < 0 && start > end {
		c.bulk(nil)
		return
	}
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	start, end = max(start, 0), min(max(end, 0), n-1)
	if n == 0 || start > end {
		c.bulk(nil)
		return
	}
	c.bulk(v[start : end+1])
}

// objectHelp is OBJECT HELP's list of subcommands.
var objectHelp = []string{
	"ENCODING <key>",
	"    Return the kind of internal representation used in order to store the value",
	"    associated with a <key> (as Redis 7.0 would store it).",
}

// objectArity is each OBJECT subcommand's arity, as Redis's command
// table has it; FREQ, IDLETIME and REFCOUNT are not served.
var objectArity = map[string]int{"encoding": 3, "help": 2}

func cmdObject(c *conn, a [][]byte) {
	sub := strings.ToLower(view(a[1]))
	if sub == "help" {
		c.help("OBJECT", objectHelp)
		return
	}
	if v, ok := c.getString(a[2]); ok {
		c.bulkString(stringEncoding(v))
	} else if c.isHash(a[2]) {
		c.bulkString(c.s.hashEncoding(view(a[2])))
	} else {
		c.null()
	}
}

// stringEncoding is the encoding Redis 7.0 gives a value SET stores
// (tryObjectEncoding): int for an integer it reads whole within 64 bits,
// embstr up to 44 bytes, raw past them.
func stringEncoding(v []byte) string {
	if _, ok := redisInt(v); ok && len(v) <= 20 {
		return "int"
	}
	if len(v) <= 44 {
		return "embstr"
	}
	return "raw"
}

// hashEncoding is the encoding Redis 7.0 gives a hash of the topic's keys
// and values, with its default hash-max-listpack-entries (128) and
// -value (64): listpack while every key and value fits, hashtable past
// them. (Redis never turns a hashtable back into a listpack when fields
// go; here the encoding is the topic's as it is now.)
func (s *Server) hashEncoding(topic string) string {
	keys := s.node.Keys(topic, "", "", 129)
	if len(keys) > 128 {
		return "hashtable"
	}
	for _, k := range keys {
		if v, _ := s.node.Get(topic, k); len(k) > 64 || len(v) > 64 {
			return "hashtable"
		}
	}
	return "listpack"
}

// The hash commands: a hash is a topic, its fields are the topic's keys.

// topicOf checks a hash name: a valid topic of the API (wire.IsName: at
// most wire.MaxTopicLen bytes, not the record format's 65535), or "" (an
// empty hash).
func topicOf(name []byte) string {
	if !wire.IsName(name) {
		return ""
	}
	return view(name)
}

// getField reads a topic's key, tracking the hash for the client.
func (c *conn) getField(hash, field []byte) ([]byte, bool) {
	c.trackRead(hash)
	t := topicOf(hash)
	if t == "" {
		return nil, false
	}
	return c.node().Get(t, view(field))
}

// stringOnly reports whether name is a string key and not a hash (a
// topic with live keys): a hash command answers it WRONGTYPE, as Redis
// answers one on a string key. The reads ask it only when the hash gave
// them nothing.
func (c *conn) stringOnly(name []byte) bool {
	if _, ok := c.node().Get(c.s.split(name)); !ok {
		return false
	}
	return !c.isHash(name)
}

func cmdHGet(c *conn, a [][]byte) {
	switch v, ok := c.getField(a[1], a[2]); {
	case ok:
		c.bulk(v)
	case c.stringOnly(a[1]):
		c.err(wrongType)
	default:
		c.null()
	}
}

// cmdHMGet answers the fields; when none is there it asks whether the
// name is a string key, and then takes the answer back for WRONGTYPE
// (nothing else writes to out while the command runs under mu), so that
// a hit costs no lookup more.
func cmdHMGet(c *conn, a [][]byte) {
	mark := len(c.out)
	c.array(len(a) - 2)
	found := false
	for _, f := range a[2:] {
		if v, ok := c.getField(a[1], f); ok {
			c.bulk(v)
			found = true
		} else {
			c.null()
		}
	}
	if !found && c.stringOnly(a[1]) {
		c.out = c.out[:mark]
		c.err(wrongType)
	}
}

func cmdHExists(c *conn, a [][]byte) {
	switch _, ok := c.getField(a[1], a[2]); {
	case ok:
		c.integer(1)
	case c.stringOnly(a[1]):
		c.err(wrongType)
	default:
		c.integer(0)
	}
}

func cmdHStrlen(c *conn, a [][]byte) {
	v, ok := c.getField(a[1], a[2])
	if !ok && c.stringOnly(a[1]) {
		c.err(wrongType)
		return
	}
	c.integer(int64(len(v)))
}

func cmdHLen(c *conn, a [][]byte) {
	c.trackRead(a[1])
	t := topicOf(a[1])
	for _, ti := range c.node().Topics() {
		if ti.Name == t {
			c.integer(int64(ti.Keys))
			return
		}
	}
	if c.stringOnly(a[1]) {
		c.err(wrongType)
		return
	}
	c.integer(0)
}

// maxHashReply bounds HGETALL, HKEYS and HVALS: a larger topic is read
// with HSCAN.
const maxHashReply = 10000

// hashKeys lists a whole topic for HKEYS, HVALS and HGETALL, or answers
// the error that points at HSCAN, or WRONGTYPE for a string key.
func (c *conn) hashKeys(hash []byte) ([]string, bool) {
	c.trackRead(hash)
	var keys []string
	if t := topicOf(hash); t != "" {
		keys = c.node().Keys(t, "", "", maxHashReply+1)
	}
	switch {
	case len(keys) == 0 && c.stringOnly(hash):
		c.err(wrongType)
		return nil, false
	case len(keys) > maxHashReply:
		c.err("ERR topic " + string(hash) + " has more than " + strconv.Itoa(maxHashReply) + " keys, too many for one reply; use HSCAN")
		return nil, false
	}
	return keys, true
}

func cmdHKeys(c *conn, a [][]byte) {
	keys, ok := c.hashKeys(a[1])
	if !ok {
		return
	}
	c.array(len(keys))
	for _, k := range keys {
		c.bulkString(k)
	}
}

// hashPairs reads the values of keys; a key deleted meanwhile is left out.
func (c *conn) hashPairs(t string, keys []string) (ks []string, vs [][]byte) {
	for _, k := range keys {
		if v, ok := c.node().Get(t, k); ok {
			ks = append(ks, k)
			vs = append(vs, v)
		}
	}
	return ks, vs
}

func cmdHVals(c *conn, a [][]byte) {
	keys, ok := c.hashKeys(a[1])
	if !ok {
		return
	}
	_, vs := c.hashPairs(topicOf(a[1]), keys)
	c.array(len(vs))
	for _, v := range vs {
		c.bulk(v)
	}
}

func cmdHGetAll(c *conn, a [][]byte) {
	keys, ok := c.hashKeys(a[1])
	if !ok {
		return
	}
	ks, vs := c.hashPairs(topicOf(a[1]), keys)
	c.mapOf(len(ks))
	for i := range ks {
		c.bulkString(ks[i])
		c.bulk(vs[i])
	}
}

// Writes.

// redisErrorer is an error that knows its Redis text.
type redisErrorer interface{ RedisError() string }

// publish writes msgs through the node, with mu released meanwhile (a
// write may wait for the disk or the replica; pushes go on). false when
// it answered an error.
func (c *conn) publish(msgs []record.Message) bool {
	if msg := c.publishMsgs(msgs); msg != "" {
		c.err(msg)
		return false
	}
	return true
}

// publishMsgs is publish without the answer: the error text it would
// answer, or "" when msgs were written and confirmed as asked.
func (c *conn) publishMsgs(msgs []record.Message) string {
	return c.publishChecked(msgs, false)
}

// publishChecked is publishMsgs; checked says that each of msgs passed
// the checks of one message (command.Limits.Message) already, so that
// only the batch's are made here.
func (c *conn) publishChecked(msgs []record.Message, checked bool) string {
	for i := range msgs {
		if checked {
			break
		}
		if e := c.s.checks.Message(&msgs[i]); e != nil {
			return errorText(e)
		}
	}
	if c.tx != nil {
		return c.tx.add(msgs) // published at the end of EXEC
	}
	if e := c.s.checks.Batch(msgs); e != nil {
		return errorText(e)
	}
	noloop := c.s.track.beginWrite(c)
	c.mu.Unlock()
	w, err := c.s.node.Publish(c.s.ctx, c.nc, msgs)
	c.mu.Lock()
	if noloop {
		c.s.track.endWrite(c.s, c, err == nil, w.Origin, w.Seq+1-uint64(len(msgs)), w.Seq)
	}
	if err != nil {
		return redisText(err)
	}
	c.lastWrite = w.Seq
	if w.Unconfirmed != "" {
		return "NOREPLICAS stored on this node but not confirmed by the replica (" + w.Unconfirmed +
			", --replication=sync); it reaches the other nodes by fan-out and anti-entropy; WAIT 1 <ms> waits for the replica"
	}
	return ""
}

// message builds a message for a Redis key; the strings are copies. A
// name with nothing after its ':' has no key (a message without one would
// be a stream message): false, with the error answered.
func (c *conn) message(name []byte, value []byte, del bool) (record.Message, bool) {
	t, k, ok := c.keyOf(name)
	if !ok {
		return record.Message{}, false
	}
	if del {
		value = nil
	}
	m := ownMessage(t, k, value)
	m.Delete = del
	return m, true
}

// keyOf splits a Redis key into topic and key (views of name), answering
// the error of a name with nothing after its ':' (false).
func (c *conn) keyOf(name []byte) (topic, key string, ok bool) {
	t, k := c.s.split(name)
	if k == "" {
		c.err("ERR invalid_name: the key " + strconv.Quote(clip(name)) + " is empty after its ':' (topic:key)")
		return "", "", false
	}
	return t, k, true
}

// ownMessage is a message of copies of topic, key and value, in one
// allocation (the arguments point into the read buffer, which the next
// command overwrites).
func ownMessage(topic, key string, value []byte) record.Message {
	b := make([]byte, 0, len(topic)+len(key)+len(value))
	b = append(append(append(b, topic...), key...), value...)
	m := record.Message{Topic: unsafe.String(unsafe.SliceData(b), len(topic)),
		Key: unsafe.String(unsafe.SliceData(b[len(topic):]), len(key))}
	if value != nil {
		m.Value = b[len(topic)+len(key):]
	}
	return m
}

func cmdSet(c *conn, a [][]byte) {
	if len(a) > 3 {
		cmdSetWithOptions(c, a)
		return
	}
	t, k, ok := c.keyOf(a[1])
	if !ok {
		return
	}
	// The connection's own one-message batch: a slice made here would be
	// one more allocation per SET.
	c.one[0] = c.setMessage(t, k, a[2])
	ok = c.publish(c.one[:])
	c.one[0] = record.Message{}
	if ok {
		c.ok()
	}
}

func cmdMSet(c *conn, a [][]byte) {
	if len(a)%2 != 1 {
		c.err("ERR wrong number of arguments for 'mset' command")
		return
	}
	msgs := make([]record.Message, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		m, ok := c.message(a[i], a[i+1], false)
		if !ok {
			return
		}
		msgs = append(msgs, m)
	}
	record.Together(msgs) // visible together on every node
	if c.publish(msgs) {
		c.ok()
	}
}

func cmdDel(c *conn, a [][]byte) {
	var msgs []record.Message
	seen := distinct(len(a) - 1)
	for _, name := range a[1:] {
		t, k := c.s.split(name)
		if _, ok := c.node().Get(t, k); ok && seen(t, k) {
			m, _ := c.message(name, nil, true)
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 || c.publish(msgs) {
		if len(msgs) == 0 {
			c.integer(0)
			return
		}
		c.integer(int64(len(msgs)))
	}
}

// distinct returns a check that is true the first time it sees a topic
// and key among n: DEL and HDEL count a key named twice once, as Redis
// does (its second delete finds nothing), and HSET a field it adds.
func distinct(n int) func(topic, key string) bool {
	if n < 2 {
		return func(string, string) bool { return true }
	}
	seen := make(map[[2]string]bool, n)
	return func(topic, key string) bool {
		tk := [2]string{topic, key}
		if seen[tk] {
			return false
		}
		seen[tk] = true
		return true
	}
}

func (c *conn) writeError(err error) { c.err(redisText(err)) }

// redisText is the Redis error text of err: its own (redisErrorer),
// a typed refusal's (*wire.Error, errorText), or ERR and its message.
func redisText(err error) string {
	var re redisErrorer
	if errors.As(err, &re) {
		return re.RedisError()
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return errorText(we)
	}
	return "ERR " + err.Error()
}

// errorText is a typed refusal of the node or of package command in
// Redis's words, the door's one mapping of the error codes: NOPERM for
// forbidden, OOM for a full store or disk, LOADING for catching_up,
// CLUSTERDOWN for unavailable (the node is away, or stopping); ERR
// otherwise. The code stays in the text (ERR invalid_name: ...), except
// after LOADING and CLUSTERDOWN, whose words say it.
func errorText(e *wire.Error) string {
	switch e.Code {
	case wire.CodeForbidden:
		return "NOPERM " + e.Code + ": " + e.Message
	case wire.CodeStoreFull, wire.CodeDiskFull:
		return "OOM " + e.Code + ": " + e.Message
	case wire.CodeCatchingUp:
		return "LOADING " + e.Message
	case wire.CodeUnavailable:
		return "CLUSTERDOWN " + e.Message
	}
	return "ERR " + e.Code + ": " + e.Message
}

func cmdHSet(c *conn, a [][]byte) {
	if len(a)%2 != 0 {
		c.err("ERR wrong number of arguments for '" + strings.ToLower(view(a[0])) + "' command")
		return
	}
	t := string(a[1])
	msgs := make([]record.Message, 0, len(a)/2-1)
	added := 0
	seen := distinct(len(a)/2 - 1) // a field named twice is added once, as in Redis
	for i := 2; i < len(a); i += 2 {
		k := string(a[i])
		if k == "" {
			c.err("ERR invalid_name: key: must be 1 to 1024 bytes, got 0")
			return
		}
		if _, ok := c.node().Get(t, k); !ok && seen(t, k) {
			added++
		}
		msgs = append(msgs, record.Message{Topic: t, Key: k, Value: bytes.Clone(a[i+1])})
	}
	if !c.publish(msgs) {
		return
	}
	if strings.EqualFold(view(a[0]), "hmset") {
		c.ok()
		return
	}
	c.integer(int64(added))
}

func cmdHDel(c *conn, a [][]byte) {
	t := topicOf(a[1])
	var msgs []record.Message
	seen := distinct(len(a) - 2)
	for _, f := range a[2:] {
		if t == "" {
			break
		}
		if _, ok := c.node().Get(t, view(f)); ok && seen(t, view(f)) {
			msgs = append(msgs, record.Message{Topic: strings.Clone(t), Key: string(f), Delete: true})
		}
	}
	if len(msgs) == 0 {
		if c.stringOnly(a[1]) {
			c.err(wrongType)
			return
		}
		c.integer(0)
		return
	}
	if c.publish(msgs) {
		c.integer(int64(len(msgs)))
	}
}

func cmdPublish(c *conn, a [][]byte) {
	ch := string(a[1])
	if topicOf(a[1]) == "" {
		c.err("ERR PUBLISH channel " + strconv.Quote(clip(a[1])) + ": a channel names a topic (1 to 128 bytes of A-Z a-z 0-9 . _ -); keyed updates are published with SET topic:key")
		return
	}
	if !c.publish([]record.Message{{Topic: ch, Value: bytes.Clone(a[2])}}) {
		return
	}
	c.integer(int64(c.s.subs.receivers(ch)))
}

// cmdWait answers how many replicas hold this connection's last write.
func cmdWait(c *conn, a [][]byte) {
	// Read and refused as Redis 7.0 does: numreplicas first, then the
	// timeout; a numreplicas of 0 or below does not wait.
	want, ok := redisInt(a[1])
	if !ok {
		c.err("ERR value is not an integer or out of range")
		return
	}
	ms, ok := redisInt(a[2])
	if !ok {
		c.err("ERR timeout is not an integer or out of range")
		return
	}
	if ms < 0 {
		c.err("ERR timeout is negative")
		return
	}
	// timeout: 0 waits until the replica confirms (Redis's "forever"), as
	// does one past what a Duration holds (292 years). A node has one
	// replica, so a larger numreplicas is answered when that one confirms.
	wait := time.Duration(ms) * time.Millisecond
	switch {
	case want <= 0:
		wait = 0
	case ms == 0 || ms > math.MaxInt64/int64(time.Millisecond):
		wait = -1
	}
	seq := c.lastWrite
	c.mu.Unlock()
	n := c.s.node.WaitReplicas(c.s.ctx, seq, wait)
	c.mu.Lock()
	c.readAt = time.Now() // its idleness, and its answer's deadline, start now
	c.integer(int64(n))
}

// Connection commands.

func cmdOK(c *conn, _ [][]byte) { c.ok() }

func cmdPing(c *conn, a [][]byte) {
	if len(a) > 2 {
		c.err("ERR wrong number of arguments for 'ping' command")
		return
	}
	if c.proto == 2 && c.subscribed() {
		c.array(2)
		c.bulkString("pong")
		if len(a) == 2 {
			c.bulk(a[1])
		} else {
			c.bulkString("")
		}
		return
	}
	if len(a) == 2 {
		c.bulk(a[1])
		return
	}
	c.simple("PONG")
}

func cmdEcho(c *conn, a [][]byte) { c.bulk(a[1]) }

func cmdQuit(c *conn, _ [][]byte) {
	c.ok()
	c.quit = true
}

func cmdSelect(c *conn, a [][]byte) {
	n, ok := redisInt(a[1])
	switch {
	case !ok:
		c.err("ERR value is not an integer or out of range")
		return
	case n < math.MinInt32 || n > math.MaxInt32: // Redis reads a C int
		c.err("ERR value is out of range, value must between -2147483648 and 2147483647")
		return
	case n != 0:
		c.err("ERR DB index is out of range (cachecast has database 0 only)")
		return
	}
	c.ok()
}

func cmdCluster(c *conn, _ [][]byte) {
	c.err("ERR This instance has cluster support disabled (cachecast answers on each node as a standalone endpoint; the fleet replicates by itself)")
}

func cmdReset(c *conn, _ [][]byte) {
	c.s.monitors.drop(c)
	c.s.subs.dropConn(c)
	c.channels, c.patterns = nil, nil
	c.s.track.off(c)
	c.trk = trackState{}
	c.caching, c.inMulti, c.multiErr, c.queued, c.watched = 0, false, false, nil, nil
	c.reply = replyMode{}
	c.setProto(2)
	c.setName("")
	if why := c.deauthenticate(); why != "" {
		c.err(why)
		c.quit = true // its peer's share is full: closed, as at accept
		return
	}
	c.simple("RESET")
}

func cmdHello(c *conn, a [][]byte) {
	proto := c.proto
	if len(a) >= 2 {
		v, ok := redisInt(a[1])
		if !ok {
			c.err("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.err("NOPROTO unsupported protocol version")
			return
		}
		proto = int(v)
	}
	name, setName := "", false
	auth, user, pass := false, "", ""
	for i := 2; i < len(a); i++ {
		switch opt := strings.ToUpper(view(a[i])); {
		case opt == "AUTH" && i+2 < len(a):
			auth, user, pass = true, string(a[i+1]), string(a[i+2])
			i += 2
		case opt == "SETNAME" && i+1 < len(a):
			if !validClientName(a[i+1]) {
				c.err("ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
			name, setName = string(a[i+1]), true
			i++
		default:
			c.err("ERR Syntax error in HELLO option '" + cString(a[i], len(a[i])) + "'")
			return
		}
	}
	if !c.helloAuth(auth, user, pass) {
		return
	}
	c.setProto(proto)
	if setName {
		c.setName(name)
	}
	c.mapOf(7)
	c.bulkString("server")
	c.bulkString("redis")
	c.bulkString("version")
	c.bulkString(redisVersion)
	c.bulkString("proto")
	c.integer(int64(proto))
	c.bulkString("id")
	c.integer(c.id)
	c.bulkString("mode")
	c.bulkString("standalone")
	c.bulkString("role")
	c.bulkString("master")
	c.bulkString("modules")
	c.array(0)
}

// redisVersion is the Redis version the server answers like.
const redisVersion = "7.2.0"

func validClientName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

// clientArity is each CLIENT subcommand's arity, counted as Redis's
// command table does (CLIENT and the subcommand included; negative: at
// least that many).
var clientArity = map[string]int{
	"id": 2, "setname": 3, "getname": 2, "setinfo": 4, "info": 2, "list": -2, "tracking": -3,
	"caching": 3, "getredir": 2, "trackinginfo": 2, "no-evict": 3, "no-touch": 3, "capa": -3, "help": 2,
	"reply": 3,
}

// clientHelp is CLIENT HELP's list of subcommands.
var clientHelp = []string{
	"CACHING (YES|NO)", "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
	"CAPA <option> [options...]", "    Accepted and ignored.",
	"GETREDIR", "    Return the client ID we are redirecting to when tracking is enabled.",
	"GETNAME", "    Return the name of the current connection.",
	"ID", "    Return the ID of the current connection.",
	"INFO", "    Return information about the current client connection.",
	"LIST [options ...]", "    Return information about client connections. Options:",
	"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", "      Return clients of specified type.",
	"    * ID <id> [<id> ...]", "      Return the clients of the given ids.",
	"NO-EVICT (ON|OFF)", "    Accepted and ignored (cachecast evicts no client).",
	"NO-TOUCH (ON|OFF)", "    Accepted and ignored.",
	"REPLY (ON|OFF|SKIP)", "    Control the replies sent to the current connection.",
	"SETINFO <option> <value>", "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
	"SETNAME <name>", "    Assign the name <name> to the current connection.",
	"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]",
	"    Control server assisted client side caching.",
	"TRACKINGINFO", "    Report tracking status for the current connection.",
}

// subcommand checks a subcommand of cmd and its arity (from arity, as
// Redis's command table counts it) and answers Redis's error when either
// is wrong: false then.
func (c *conn) subcommand(cmd, sub string, a [][]byte, arity map[string]int) bool {
	n, ok := arity[sub]
	switch {
	case !ok:
		c.err("ERR unknown subcommand '" + cString(a[1], 128) + "'. Try " + strings.ToUpper(cmd) + " HELP.")
		return false
	case n >= 0 && len(a) != n, n < 0 && len(a) < -n:
		c.err("ERR wrong number of arguments for '" + cmd + "|" + sub + "' command")
		return false
	}
	return true
}

// help answers a HELP subcommand as Redis does: a line of usage, the
// lines, then HELP's own.
func (c *conn) help(cmd string, lines []string) {
	c.array(len(lines) + 3)
	c.simple(cmd + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
	for _, l := range lines {
		c.simple(l)
	}
	c.simple("HELP")
	c.simple("    Prints this help.")
}

// cmdClient serves CLIENT's subcommands, whose names and arities exec
// checked first (clientArity).
func cmdClient(c *conn, a [][]byte) {
	sub := strings.ToUpper(view(a[1]))
	switch sub {
	case "ID":
		c.integer(c.id)
	case "SETNAME":
		if !validClientName(a[2]) {
			c.err("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.setName(string(a[2]))
		c.ok()
	case "GETNAME":
		if n := c.meta().name; n != "" {
			c.bulkString(n)
		} else {
			c.null()
		}
	case "SETINFO":
		if !validClientName(a[3]) {
			c.err("ERR " + strings.ToLower(view(a[2])) + " cannot contain spaces, newlines or special characters.")
			return
		}
		switch strings.ToUpper(view(a[2])) {
		case "LIB-NAME":
			c.setLib(string(a[3]), "")
		case "LIB-VER":
			c.setLib("", string(a[3]))
		default:
			c.err("ERR Unrecognized option '" + cString(a[2], len(a[2])) + "'")
			return
		}
		c.ok()
	case "INFO":
		c.verbatim(c.infoLine())
	case "LIST":
		conns, ok := c.clientList(a[2:])
		if !ok {
			return
		}
		var b strings.Builder
		for _, o := range conns {
			b.WriteString(o.infoLine())
		}
		c.verbatim(b.String())
	case "TRACKING":
		c.clientTracking(a)
	case "CACHING":
		c.clientCaching(a)
	case "GETREDIR":
		switch {
		case !c.trk.on:
			c.integer(-1)
		default:
			c.integer(c.trk.redirect)
		}
	case "TRACKINGINFO":
		c.trackingInfo()
	case "NO-EVICT", "NO-TOUCH":
		if on := strings.ToUpper(view(a[2])); on != "ON" && on != "OFF" {
			c.err("ERR syntax error")
			return
		}
		c.ok()
	case "CAPA":
		c.ok()
	case "REPLY":
		c.clientReply(a)
	case "HELP":
		c.help("CLIENT", clientHelp)
	}
}

// clientList is the connections CLIENT LIST [TYPE type | ID id...] names,
// its filters read and refused as Redis 7.0 reads them, in Redis's order
// (the order they connected in, which is their ids'; ID's own order for
// ID). A node has no Redis replication links: TYPE master and replica
// (or slave) name none. False when it answered an error.
func (c *conn) clientList(filter [][]byte) ([]*conn, bool) {
	all := c.s.allConns()
	slices.SortFunc(all, func(x, y *conn) int { return cmp.Compare(x.id, y.id) })
	switch {
	case len(filter) == 0:
		return all, true
	case len(filter) == 2 && strings.EqualFold(view(filter[0]), "TYPE"):
		var pubsub bool
		switch strings.ToLower(view(filter[1])) {
		case "normal":
		case "pubsub":
			pubsub = true
		case "master", "replica", "slave":
			return nil, true
		default:
			c.err("ERR Unknown client type '" + cString(filter[1], len(filter[1])) + "'")
			return nil, false
		}
		var out []*conn
		for _, o := range all {
			// Subscribed over either protocol: Redis's CLIENT_PUBSUB.
			if subs, psubs := c.s.subs.counts(o); (subs+psubs > 0) == pubsub {
				out = append(out, o)
			}
		}
		return out, true
	case len(filter) >= 2 && strings.EqualFold(view(filter[0]), "ID"):
		byID := make(map[int64]*conn, len(all))
		for _, o := range all {
			byID[o.id] = o
		}
		var out []*conn
		for _, arg := range filter[1:] {
			id, ok := redisInt(arg)
			if !ok {
				c.err("ERR Invalid client ID")
				return nil, false
			}
			if o := byID[id]; o != nil {
				out = append(out, o)
			}
		}
		return out, true
	}
	c.err("ERR syntax error")
	return nil, false
}

// Server commands.

func cmdDBSize(c *conn, _ [][]byte) { c.integer(int64(c.s.liveKeys())) }

func (s *Server) liveKeys() int {
	n := 0
	for _, t := range s.node.Topics() {
		if !strings.HasPrefix(t.Name, "$") {
			n += t.Keys
		}
	}
	return n
}

func cmdTime(c *conn, _ [][]byte) {
	now := time.Now()
	c.array(2)
	c.bulkString(strconv.FormatInt(now.Unix(), 10))
	c.bulkString(strconv.FormatInt(int64(now.Nanosecond()/1000), 10))
}

// configArity is each CONFIG subcommand's arity, as Redis's command
// table has it; REWRITE and HELP are not served.
var configArity = map[string]int{"get": -3, "set": -4, "resetstat": 2}

func cmdConfig(c *conn, a [][]byte) {
	switch strings.ToUpper(view(a[1])) {
	case "GET":
		params := map[string]string{
			"notify-keyspace-events": formatNotifyFlags(c.s.notify.Load()),
			"databases":              "1",
			"save":                   "",
			"appendonly":             "no",
			"maxmemory":              "0",
			"maxmemory-policy":       "noeviction",
			"proto-max-bulk-len":     strconv.Itoa(c.s.lim.MaxBulk),
			"timeout":                "0",
		}
		var names []string
		for name := range params {
			for _, p := range a[2:] {
				if globMatch(strings.ToLower(view(p)), name) {
					names = append(names, name)
					break
				}
			}
		}
		sort.Strings(names)
		c.mapOf(len(names))
		for _, n := range names {
			c.bulkString(n)
			c.bulkString(params[n])
		}
	case "SET":
		if len(a)%2 == 1 {
			c.err("ERR syntax error") // not parameter and value pairs: Redis's first check
			return
		}
		if len(a) != 4 || !strings.EqualFold(view(a[2]), "notify-keyspace-events") {
			c.err("ERR CONFIG SET supports notify-keyspace-events only")
			return
		}
		if err := c.s.node.Authorize(c.nc); err != nil {
			c.writeError(err)
			return
		}
		flags, err := parseNotifyFlags(view(a[3]))
		if err != nil {
			c.err("ERR Invalid argument '" + clip(a[3]) + "' for CONFIG SET 'notify-keyspace-events'")
			return
		}
		c.s.notify.Store(flags)
		c.ok()
	case "RESETSTAT":
		c.ok()
	}
}

// commandArity is each COMMAND subcommand's arity, as Redis's command
// table has it; GETKEYS, GETKEYSANDFLAGS and HELP are not served.
var commandArity = map[string]int{"count": 2, "list": -2, "info": -2, "docs": -2}

func cmdCommand(c *conn, a [][]byte) {
	if len(a) == 1 {
		c.array(len(commandList))
		for _, cmd := range commandList {
			c.commandInfo(cmd)
		}
		return
	}
	switch strings.ToUpper(view(a[1])) {
	case "COUNT":
		c.integer(int64(len(commandList)))
	case "LIST":
		c.commandList(a[2:])
	case "INFO":
		if len(a) == 2 {
			c.array(len(commandList))
			for _, cmd := range commandList {
				c.commandInfo(cmd)
			}
			return
		}
		c.array(len(a) - 2)
		for _, name := range a[2:] {
			if cmd := lookup(name); cmd != nil {
				c.commandInfo(cmd)
			} else {
				c.null()
			}
		}
	case "DOCS":
		var list []*command
		if len(a) == 2 {
			list = commandList
		} else {
			for _, name := range a[2:] {
				if cmd := lookup(name); cmd != nil {
					list = append(list, cmd)
				}
			}
		}
		c.mapOf(len(list))
		for _, cmd := range list {
			c.bulkString(cmd.name)
			c.mapOf(3)
			c.bulkString("summary")
			c.bulkString(cmd.summary)
			c.bulkString("since")
			c.bulkString("1.0.0")
			c.bulkString("group")
			c.bulkString(cmd.group)
		}
	}
}

// commandList is COMMAND LIST [FILTERBY MODULE name | ACLCAT category |
// PATTERN pattern], read as Redis 7.0 reads it. There are no modules, and
// the commands are in no ACL category (COMMAND INFO lists none); a
// pattern matches the names in any case, as in Redis.
func (c *conn) commandList(opts [][]byte) {
	match := func(string) bool { return true }
	switch {
	case len(opts) == 0:
	case len(opts) == 3 && strings.EqualFold(view(opts[0]), "FILTERBY"):
		switch strings.ToUpper(view(opts[1])) {
		case "MODULE", "ACLCAT":
			match = func(string) bool { return false }
		case "PATTERN":
			pattern := strings.ToLower(string(opts[2])) // the names are lower case
			match = func(name string) bool { return globMatch(pattern, name) }
		default:
			c.err("ERR syntax error")
			return
		}
	default:
		c.err("ERR syntax error")
		return
	}
	var names []string
	for _, cmd := range commandList {
		if match(cmd.name) {
			names = append(names, cmd.name)
		}
	}
	c.array(len(names))
	for _, n := range names {
		c.bulkString(n)
	}
}

// commandInfo writes one command as COMMAND INFO does (Redis 7's ten
// fields; in RESP3 the flags, categories, tips, key specs and an empty
// list of subcommands are sets, as Redis writes them).
func (c *conn) commandInfo(cmd *command) {
	c.array(10)
	c.bulkString(cmd.name)
	c.integer(int64(cmd.arity))
	c.set(len(cmd.flags))
	for _, f := range cmd.flags {
		c.simple(f)
	}
	c.integer(int64(cmd.first))
	c.integer(int64(cmd.last))
	c.integer(int64(cmd.step))
	c.set(0) // ACL categories
	c.set(0) // tips
	c.set(0) // key specs
	c.set(0) // subcommands
}

var pid = os.Getpid()
