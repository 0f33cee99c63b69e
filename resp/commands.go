package resp

import (
	"cmp"
	"math"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cachecast/cachecast/resp/internal/admin"
	"github.com/cachecast/cachecast/resp/internal/keys"
	"github.com/cachecast/cachecast/resp/internal/pubsub"
	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
)

// commands is the table, by upper-case name; filled by init.
var commands map[string]*session.Command

// commandList is the table in name order (COMMAND, metrics).
var commandList []*session.Command

func init() {
	cn := []string{"fast", "loading", "stale"}
	table := []*session.Command{
		// Connection.
		{Name: "hello", Arity: -1, Flags: cn, Group: "connection", Summary: "Handshakes with the server (RESP2 or RESP3, AUTH, SETNAME).", Fn: own(cmdHello)},
		{Name: "auth", Arity: -2, Flags: cn, Group: "connection", Summary: "Authenticates as a user of the node's users file (AUTH [user] password).", Fn: own(cmdAuth)},
		{Name: "client", Arity: -2, Flags: cn, Group: "connection", Summary: "SETNAME, GETNAME, SETINFO, ID, INFO, LIST, TRACKING, CACHING, GETREDIR, TRACKINGINFO, HELP.", Fn: own(cmdClient), Subcommands: clientArity},
		{Name: "select", Arity: 2, Flags: cn, Group: "connection", Summary: "Selects database 0, the only one.", Fn: own(cmdSelect)},
		{Name: "ping", Arity: -1, Flags: cn, Group: "connection", Summary: "Answers PONG or the message.", Fn: own(cmdPing), Pubsub: true, InMulti: true},
		{Name: "echo", Arity: 2, Flags: cn, Group: "connection", Summary: "Answers the message.", Fn: own(cmdEcho), InMulti: true},
		{Name: "quit", Arity: -1, Flags: cn, Group: "connection", Summary: "Closes the connection.", Fn: own(cmdQuit), Pubsub: true},
		{Name: "reset", Arity: 1, Flags: cn, Group: "connection", Summary: "Resets the connection's state.", Fn: own(cmdReset), Pubsub: true},
		{Name: "readonly", Arity: 1, Flags: cn, Group: "cluster", Summary: "Accepted: every read is local.", Fn: own(cmdOK)},
		{Name: "readwrite", Arity: 1, Flags: cn, Group: "cluster", Summary: "Accepted.", Fn: own(cmdOK)},
		{Name: "cluster", Arity: -2, Flags: cn, Group: "cluster", Summary: "Refused: a standalone endpoint.", Fn: own(cmdCluster)},
		{Name: "wait", Arity: 3, Flags: []string{"noscript"}, Group: "generic", Summary: "Waits until the replica holds this connection's last write.", Fn: own(cmdWait)},
		{Name: "multi", Arity: 1, Flags: cn, Group: "transactions", Summary: "Queues commands until EXEC.", Fn: own(cmdMulti)},
		{Name: "exec", Arity: 1, Flags: cn, Group: "transactions", Summary: "Runs the queued commands; their writes are one batch, all or nothing.", Fn: own(cmdExec)},
		{Name: "discard", Arity: 1, Flags: cn, Group: "transactions", Summary: "Drops the queued commands.", Fn: own(cmdDiscard)},
		{Name: "watch", Arity: -2, Flags: cn, First: 1, Last: -1, Step: 1, Group: "transactions", Summary: "EXEC aborts if one of the keys changes in this node's view first.", Fn: own(cmdWatch)},
		{Name: "unwatch", Arity: 1, Flags: cn, Group: "transactions", Summary: "Forgets the watched keys.", Fn: own(cmdUnwatch), InMulti: true},
	}
	table = append(table, keys.Commands()...)
	table = append(table, admin.Commands()...)
	table = append(table, pubsub.Commands()...)
	commands = make(map[string]*session.Command, len(table))
	sort.Slice(table, func(i, j int) bool { return table[i].Name < table[j].Name })
	for i, cmd := range table {
		cmd.Index = i
		cmd.Read = slices.Contains(cmd.Flags, "readonly")
		commands[strings.ToUpper(cmd.Name)] = cmd
	}
	commandList = table
	setCommand = commands["SET"]
}

// own makes a handler of the server's own (one that needs the
// connection, not only its session) a handler of the table.
func own(fn func(c *conn, a [][]byte)) func(*session.Session, [][]byte) {
	return func(s *session.Session, a [][]byte) { fn(s.Host().(*conn), a) }
}

// lookup finds a command by name, in any case, without allocating.
func lookup(name []byte) *session.Command {
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
		c.multiErr = true // EXEC aborts: nothing queued runs
		c.dropQueue()
	}
}

// exec runs one command, a, whose table entry is cmd (nil: unknown),
// under mu. full says whether the answers waiting to be written reached
// outFlushSize (read under mu: the pusher appends to them too).
func (c *conn) exec(cmd *session.Command, a [][]byte) (full bool) {
	c.mu.Lock()
	mark := len(c.Out)
	defer func() {
		c.replied(cmd, mark)
		// CLIENT CACHING holds until a command other than CLIENT (a
		// refused one too) ends outside MULTI, as Redis's resetClient
		// keeps it after any CLIENT subcommand.
		if !c.inMulti && (cmd == nil || cmd.Name != "client") {
			c.ps.EndCommand()
		}
		c.show()
		full = len(c.Out) >= outFlushSize
		c.mu.Unlock()
	}()
	c.s.stats.commands.Add(1)
	if cmd == nil {
		c.s.stats.unknown.Add(1)
		c.unknownCommand(a)
		c.refused()
		return
	}
	c.s.stats.byCommand[cmd.Index].Add(1)
	c.lastCmd = cmd
	c.showCmd(cmd, a)
	if cmd.Arity > 0 && len(a) != cmd.Arity || cmd.Arity < 0 && len(a) < -cmd.Arity {
		if cmd.Name == "exec" {
			// Redis's rejectCommand aborts the transaction (there may be
			// none) with the reason.
			c.inMulti, c.multiErr = false, false
			c.dropQueue()
			c.Err("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command")
			return
		}
		c.Err("ERR wrong number of arguments for '" + cmd.Name + "' command")
		c.refused()
		return
	}
	if cmd.Subcommands != nil && len(a) > 1 && !c.subcommand(cmd.Name, strings.ToLower(session.Str(a[1])), a, cmd.Subcommands) {
		c.refused()
		return
	}
	if cmd.Write {
		// The publish role, checked once for every write as Redis checks
		// its ACL: before the node's state, before MULTI queues it, before
		// the command reads anything (so a refused EXPIRE of a missing
		// key is NOPERM, not 0). The node's write path checks it again.
		if err := c.s.node.Authorize(c.nc); err != nil {
			c.WriteError(err)
			c.refused()
			return
		}
	}
	if cmd.Read || cmd.Write {
		if msg := c.refusal(cmd); msg != "" {
			c.Err(msg) // before MULTI would queue it, as Redis does
			c.refused()
			return
		}
	}
	if c.Proto == 2 && c.ps.Subscribed() && !cmd.Pubsub {
		name := cmd.Name // Redis's fullname: client|id for a subcommand
		if cmd.Subcommands != nil && len(a) > 1 {
			name += "|" + strings.ToLower(session.Str(a[1]))
		}
		c.Err("ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
		return
	}
	if c.s.hub.Monitoring() {
		c.s.hub.Feed(c, cmd, a)
	}
	if c.inMulti && !runsInMulti[cmd.Name] {
		c.queue(cmd, a)
		return
	}
	c.Run(cmd, a)
	return full
}

// refusal is the error the node's state (Node.State, command.State)
// answers cmd, a read or a write of the view: CLUSTERDOWN to both while
// the node is away, LOADING to a read while it catches up; "" when it
// serves cmd.
func (c *conn) refusal(cmd *session.Command) string {
	st := c.s.node.State()
	e := st.Write()
	if e == nil && cmd.Read {
		e = st.Read()
	}
	if e == nil {
		return ""
	}
	return session.ErrorText(e)
}

// unknownCommand answers as Redis's commandCheckExistence does: the
// name's first 128 bytes, then the arguments, each quoted, until 128
// bytes of them are written, the last cut to what is left.
func (c *conn) unknownCommand(a [][]byte) {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.WriteString(session.CString(a[0], 128))
	b.WriteString("', with args beginning with: ")
	start := b.Len()
	for _, arg := range a[1:] {
		n := b.Len() - start
		if n >= 128 {
			break
		}
		b.WriteString("'")
		b.WriteString(session.CString(arg, 128-n))
		b.WriteString("' ")
	}
	c.Err(b.String())
}

// Writes.

// PublishBatch writes msgs through the node (session.Host), with mu
// released meanwhile (a write may wait for the disk or the replica;
// pushes go on), and returns the error text to answer, "" when msgs were
// written and confirmed as asked; in EXEC it keeps them for the
// transaction's one publish. checked says that each of msgs passed the
// checks of one message (command.Limits.Message) already, so that only
// the batch's are made here.
func (c *conn) PublishBatch(msgs []record.Message, checked bool) string {
	for i := range msgs {
		if checked {
			break
		}
		if e := c.s.env.Checks.Message(&msgs[i]); e != nil {
			return session.ErrorText(e)
		}
	}
	if c.Tx != nil {
		return c.Tx.Add(msgs) // published at the end of EXEC
	}
	if e := c.s.env.Checks.Batch(msgs); e != nil {
		return session.ErrorText(e)
	}
	noloop := c.s.hub.BeginWrite(&c.ps)
	c.mu.Unlock()
	w, err := c.s.node.Publish(c.s.ctx, c.nc, msgs)
	c.mu.Lock()
	if noloop {
		c.s.hub.EndWrite(&c.ps, err == nil, w.Origin, w.Seq+1-uint64(len(msgs)), w.Seq)
	}
	if err != nil {
		return session.RedisText(err)
	}
	c.lastWrite = w.Seq
	if w.Unconfirmed != "" {
		return "NOREPLICAS stored on this node but not confirmed by the replica (" + w.Unconfirmed +
			", --replication=sync); it reaches the other nodes by fan-out and anti-entropy; WAIT 1 <ms> waits for the replica"
	}
	return ""
}

// cmdWait answers how many replicas hold this connection's last write.
func cmdWait(c *conn, a [][]byte) {
	// Read and refused as Redis 7.0 does: numreplicas first, then the
	// timeout; a numreplicas of 0 or below does not wait.
	want, ok := session.Int(a[1])
	if !ok {
		c.Err("ERR value is not an integer or out of range")
		return
	}
	ms, ok := session.Int(a[2])
	if !ok {
		c.Err("ERR timeout is not an integer or out of range")
		return
	}
	if ms < 0 {
		c.Err("ERR timeout is negative")
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
	c.Int(int64(n))
}

// adminNode is a Node that can tell whether a connection's peer has the
// admin role (FLUSHDB, FLUSHALL, MONITOR); a Node without it has no
// admin.
type adminNode interface {
	AuthorizeAdmin(conn net.Conn) error
}

// AuthorizeAdmin answers the error when the peer of c has no admin role
// (false; session.Host).
func (c *conn) AuthorizeAdmin(cmd string) bool {
	an, ok := c.s.node.(adminNode)
	if !ok {
		c.Err("NOPERM this node grants no admin role, which " + cmd + " needs")
		return false
	}
	if err := an.AuthorizeAdmin(c.nc); err != nil {
		c.WriteError(err)
		return false
	}
	return true
}

// Connection commands.

func cmdOK(c *conn, _ [][]byte) { c.OK() }

func cmdPing(c *conn, a [][]byte) {
	if len(a) > 2 {
		c.Err("ERR wrong number of arguments for 'ping' command")
		return
	}
	if c.Proto == 2 && c.ps.Subscribed() {
		c.Array(2)
		c.BulkString("pong")
		if len(a) == 2 {
			c.Bulk(a[1])
		} else {
			c.BulkString("")
		}
		return
	}
	if len(a) == 2 {
		c.Bulk(a[1])
		return
	}
	c.Simple("PONG")
}

func cmdEcho(c *conn, a [][]byte) { c.Bulk(a[1]) }

func cmdQuit(c *conn, _ [][]byte) {
	c.OK()
	c.quit = true
}

func cmdSelect(c *conn, a [][]byte) {
	n, ok := session.Int(a[1])
	switch {
	case !ok:
		c.Err("ERR value is not an integer or out of range")
		return
	case n < math.MinInt32 || n > math.MaxInt32: // Redis reads a C int
		c.Err("ERR value is out of range, value must between -2147483648 and 2147483647")
		return
	case n != 0:
		c.Err("ERR DB index is out of range (cachecast has database 0 only)")
		return
	}
	c.OK()
}

func cmdCluster(c *conn, _ [][]byte) {
	c.Err("ERR This instance has cluster support disabled (cachecast answers on each node as a standalone endpoint; the fleet replicates by itself)")
}

func cmdReset(c *conn, _ [][]byte) {
	c.ps.Reset()
	c.inMulti, c.multiErr, c.watched = false, false, nil
	c.dropQueue()
	c.reply = replyMode{}
	c.setProto(2)
	c.setName("")
	if why := c.deauthenticate(); why != "" {
		c.Err(why)
		c.quit = true // its peer's share is full: closed, as at accept
		return
	}
	c.Simple("RESET")
}

func cmdHello(c *conn, a [][]byte) {
	proto := c.Proto
	if len(a) >= 2 {
		v, ok := session.Int(a[1])
		if !ok {
			c.Err("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.Err("NOPROTO unsupported protocol version")
			return
		}
		proto = int(v)
	}
	name, setName := "", false
	auth, user, pass := false, "", ""
	for i := 2; i < len(a); i++ {
		switch opt := strings.ToUpper(session.Str(a[i])); {
		case opt == "AUTH" && i+2 < len(a):
			auth, user, pass = true, string(a[i+1]), string(a[i+2])
			i += 2
		case opt == "SETNAME" && i+1 < len(a):
			if !validClientName(a[i+1]) {
				c.Err("ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
			name, setName = string(a[i+1]), true
			i++
		default:
			c.Err("ERR Syntax error in HELLO option '" + session.CString(a[i], len(a[i])) + "'")
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
	c.Map(7)
	c.BulkString("server")
	c.BulkString("redis")
	c.BulkString("version")
	c.BulkString(session.RedisVersion)
	c.BulkString("proto")
	c.Int(int64(proto))
	c.BulkString("id")
	c.Int(c.id)
	c.BulkString("mode")
	c.BulkString("standalone")
	c.BulkString("role")
	c.BulkString("master")
	c.BulkString("modules")
	c.Array(0)
}

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
		c.Err("ERR unknown subcommand '" + session.CString(a[1], 128) + "'. Try " + strings.ToUpper(cmd) + " HELP.")
		return false
	case n >= 0 && len(a) != n, n < 0 && len(a) < -n:
		c.Err("ERR wrong number of arguments for '" + cmd + "|" + sub + "' command")
		return false
	}
	return true
}

// cmdClient serves CLIENT's subcommands, whose names and arities exec
// checked first (clientArity).
func cmdClient(c *conn, a [][]byte) {
	sub := strings.ToUpper(session.Str(a[1]))
	switch sub {
	case "ID":
		c.Int(c.id)
	case "SETNAME":
		if !validClientName(a[2]) {
			c.Err("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.setName(string(a[2]))
		c.OK()
	case "GETNAME":
		if n := c.meta().name; n != "" {
			c.BulkString(n)
		} else {
			c.Null()
		}
	case "SETINFO":
		if !validClientName(a[3]) {
			c.Err("ERR " + strings.ToLower(session.Str(a[2])) + " cannot contain spaces, newlines or special characters.")
			return
		}
		switch strings.ToUpper(session.Str(a[2])) {
		case "LIB-NAME":
			c.setLib(string(a[3]), "")
		case "LIB-VER":
			c.setLib("", string(a[3]))
		default:
			c.Err("ERR Unrecognized option '" + session.CString(a[2], len(a[2])) + "'")
			return
		}
		c.OK()
	case "INFO":
		c.Verbatim(c.infoLine())
	case "LIST":
		conns, ok := c.clientList(a[2:])
		if !ok {
			return
		}
		var b strings.Builder
		for _, o := range conns {
			b.WriteString(o.infoLine())
		}
		c.Verbatim(b.String())
	case "TRACKING":
		c.ps.ClientTracking(a)
	case "CACHING":
		c.ps.ClientCaching(a)
	case "GETREDIR":
		if on, _, redirect := c.ps.Tracking(); on {
			c.Int(redirect)
		} else {
			c.Int(-1)
		}
	case "TRACKINGINFO":
		c.ps.TrackingInfo()
	case "NO-EVICT", "NO-TOUCH":
		if on := strings.ToUpper(session.Str(a[2])); on != "ON" && on != "OFF" {
			c.Err("ERR syntax error")
			return
		}
		c.OK()
	case "CAPA":
		c.OK()
	case "REPLY":
		c.clientReply(a)
	case "HELP":
		c.Help("CLIENT", clientHelp)
	}
}

// clientList is the connections CLIENT LIST [TYPE type | ID id...] names,
// its filters read and refused as Redis 7.0 reads them, in Redis's order
// (the order they connected in, which is their ids'; ID's own order for
// ID). A node has no Redis replication links: TYPE master and replica
// (or slave) name none. A caller without the admin role sees only the
// connections of its own uid or Redis user (Redis keeps CLIENT LIST for
// @admin): another user's names, addresses and commands are not its to
// read. False when it answered an error.
func (c *conn) clientList(filter [][]byte) ([]*conn, bool) {
	var all []*conn
	if an, ok := c.s.node.(adminNode); ok && an.AuthorizeAdmin(c.nc) == nil {
		all = c.s.allConns()
	} else {
		c.s.mu.Lock()
		peer := c.peer
		c.s.mu.Unlock()
		all = c.s.connsOf(peer)
	}
	slices.SortFunc(all, func(x, y *conn) int { return cmp.Compare(x.id, y.id) })
	switch {
	case len(filter) == 0:
		return all, true
	case len(filter) == 2 && strings.EqualFold(session.Str(filter[0]), "TYPE"):
		var pubsub bool
		switch strings.ToLower(session.Str(filter[1])) {
		case "normal":
		case "pubsub":
			pubsub = true
		case "master", "replica", "slave":
			return nil, true
		default:
			c.Err("ERR Unknown client type '" + session.CString(filter[1], len(filter[1])) + "'")
			return nil, false
		}
		var out []*conn
		for _, o := range all {
			// Subscribed over either protocol: Redis's CLIENT_PUBSUB.
			if subs, psubs := c.s.hub.Counts(&o.ps); (subs+psubs > 0) == pubsub {
				out = append(out, o)
			}
		}
		return out, true
	case len(filter) >= 2 && strings.EqualFold(session.Str(filter[0]), "ID"):
		byID := make(map[int64]*conn, len(all))
		for _, o := range all {
			byID[o.id] = o
		}
		var out []*conn
		for _, arg := range filter[1:] {
			id, ok := session.Int(arg)
			if !ok {
				c.Err("ERR Invalid client ID")
				return nil, false
			}
			if o := byID[id]; o != nil {
				out = append(out, o)
			}
		}
		return out, true
	}
	c.Err("ERR syntax error")
	return nil, false
}
