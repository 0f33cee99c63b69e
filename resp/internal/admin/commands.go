package admin

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// Server commands.

func cmdDBSize(c *session.Session, _ [][]byte) { c.Int(int64(liveKeys(c.Env.Node))) }

// liveKeys counts the keys of the topics the door maps (not the
// $-topics).
func liveKeys(v session.View) int {
	n := 0
	for _, t := range v.Topics() {
		if !strings.HasPrefix(t.Name, "$") {
			n += t.Keys
		}
	}
	return n
}

func cmdTime(c *session.Session, _ [][]byte) {
	now := time.Now()
	c.Array(2)
	c.BulkString(strconv.FormatInt(now.Unix(), 10))
	c.BulkString(strconv.FormatInt(int64(now.Nanosecond()/1000), 10))
}

// configArity is each CONFIG subcommand's arity, as Redis's command
// table has it; REWRITE and HELP are not served.
var configArity = map[string]int{"get": -3, "set": -4, "resetstat": 2}

func cmdConfig(c *session.Session, a [][]byte) {
	switch strings.ToUpper(session.Str(a[1])) {
	case "GET":
		params := map[string]string{
			"notify-keyspace-events": serverOf(c).NotifyFlags(),
			"databases":              "1",
			"save":                   "",
			"appendonly":             "no",
			"maxmemory":              "0",
			"maxmemory-policy":       "noeviction",
			"proto-max-bulk-len":     strconv.Itoa(serverOf(c).Info().MaxBulk),
			"timeout":                "0",
		}
		var names []string
		for name := range params {
			for _, p := range a[2:] {
				if session.Match(strings.ToLower(session.Str(p)), name) {
					names = append(names, name)
					break
				}
			}
		}
		sort.Strings(names)
		c.Map(len(names))
		for _, n := range names {
			c.BulkString(n)
			c.BulkString(params[n])
		}
	case "SET":
		if len(a)%2 == 1 {
			c.Err("ERR syntax error") // not parameter and value pairs: Redis's first check
			return
		}
		if len(a) != 4 || !strings.EqualFold(session.Str(a[2]), "notify-keyspace-events") {
			c.Err("ERR CONFIG SET supports notify-keyspace-events only")
			return
		}
		if !serverOf(c).AuthorizeWrite() {
			return
		}
		if err := serverOf(c).SetNotify(session.Str(a[3])); err != nil {
			c.Err("ERR Invalid argument '" + session.Clip(a[3]) + "' for CONFIG SET 'notify-keyspace-events'")
			return
		}
		c.OK()
	case "RESETSTAT":
		c.OK()
	}
}

// commandArity is each COMMAND subcommand's arity, as Redis's command
// table has it; GETKEYS, GETKEYSANDFLAGS and HELP are not served.
var commandArity = map[string]int{"count": 2, "list": -2, "info": -2, "docs": -2}

func cmdCommand(c *session.Session, a [][]byte) {
	srv := serverOf(c)
	table := srv.Table()
	if len(a) == 1 {
		c.Array(len(table))
		for _, cmd := range table {
			commandInfo(c, cmd)
		}
		return
	}
	switch strings.ToUpper(session.Str(a[1])) {
	case "COUNT":
		c.Int(int64(len(table)))
	case "LIST":
		listCommands(c, a[2:])
	case "INFO":
		if len(a) == 2 {
			c.Array(len(table))
			for _, cmd := range table {
				commandInfo(c, cmd)
			}
			return
		}
		c.Array(len(a) - 2)
		for _, name := range a[2:] {
			if cmd := srv.Lookup(name); cmd != nil {
				commandInfo(c, cmd)
			} else {
				c.Null()
			}
		}
	case "DOCS":
		var list []*session.Command
		if len(a) == 2 {
			list = table
		} else {
			for _, name := range a[2:] {
				if cmd := srv.Lookup(name); cmd != nil {
					list = append(list, cmd)
				}
			}
		}
		c.Map(len(list))
		for _, cmd := range list {
			c.BulkString(cmd.Name)
			c.Map(3)
			c.BulkString("summary")
			c.BulkString(cmd.Summary)
			c.BulkString("since")
			c.BulkString("1.0.0")
			c.BulkString("group")
			c.BulkString(cmd.Group)
		}
	}
}

// listCommands is COMMAND LIST [FILTERBY MODULE name | ACLCAT category |
// PATTERN pattern], read as Redis 7.0 reads it. There are no modules, and
// the commands are in no ACL category (COMMAND INFO lists none); a
// pattern matches the names in any case, as in Redis.
func listCommands(c *session.Session, opts [][]byte) {
	match := func(string) bool { return true }
	switch {
	case len(opts) == 0:
	case len(opts) == 3 && strings.EqualFold(session.Str(opts[0]), "FILTERBY"):
		switch strings.ToUpper(session.Str(opts[1])) {
		case "MODULE", "ACLCAT":
			match = func(string) bool { return false }
		case "PATTERN":
			pattern := strings.ToLower(string(opts[2])) // the names are lower case
			match = func(name string) bool { return session.Match(pattern, name) }
		default:
			c.Err("ERR syntax error")
			return
		}
	default:
		c.Err("ERR syntax error")
		return
	}
	var names []string
	for _, cmd := range serverOf(c).Table() {
		if match(cmd.Name) {
			names = append(names, cmd.Name)
		}
	}
	c.Array(len(names))
	for _, n := range names {
		c.BulkString(n)
	}
}

// commandInfo writes one command as COMMAND INFO does (Redis 7's ten
// fields; in RESP3 the flags, categories, tips, key specs and an empty
// list of subcommands are sets, as Redis writes them).
func commandInfo(c *session.Session, cmd *session.Command) {
	c.Array(10)
	c.BulkString(cmd.Name)
	c.Int(int64(cmd.Arity))
	c.Set(len(cmd.Flags))
	for _, f := range cmd.Flags {
		c.Simple(f)
	}
	c.Int(int64(cmd.First))
	c.Int(int64(cmd.Last))
	c.Int(int64(cmd.Step))
	c.Set(0) // ACL categories
	c.Set(0) // tips
	c.Set(0) // key specs
	c.Set(0) // subcommands
}

// pid is INFO's process_id.
var pid = os.Getpid()
