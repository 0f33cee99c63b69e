// Package keys is the Redis door's commands of the key space: strings
// (GET, SET, MGET, MSET, SETNX, GETSET, GETDEL, GETEX, FLUSHDB...),
// hashes (a hash is a topic, its fields are the topic's keys: HGET,
// HSET, HSCAN...), the generic commands (EXISTS, TYPE, DEL, OBJECT,
// SCAN, KEYS), counters (INCR and its kin) and time (expiries, SET's
// options, scheduled values). Each is a handler over a session.Session:
// it reads the session's view, registers what it reads for client-side
// caching, writes through the session's one publish path, and answers;
// it holds no state of its own but the server's SCAN cursors (Env).
// The commands' meaning for the user is resp's package doc.
package keys

import "github.com/cachecast/cachecast/resp/internal/session"

// Commands is the key space's part of the command table.
func Commands() []*session.Command {
	ro := []string{"readonly", "fast"}
	wr := []string{"write", "denyoom"}
	table := []*session.Command{
		// Reads.
		{Name: "get", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "string", Summary: "The value of topic:key.", Fn: cmdGet, InMulti: true},
		{Name: "mget", Arity: -2, Flags: ro, First: 1, Last: -1, Step: 1, Group: "string", Summary: "The values of several keys.", Fn: cmdMGet, InMulti: true},
		{Name: "exists", Arity: -2, Flags: ro, First: 1, Last: -1, Step: 1, Group: "generic", Summary: "How many of the keys exist.", Fn: cmdExists, InMulti: true},
		{Name: "type", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "string, hash (a topic) or none.", Fn: cmdType, InMulti: true},
		{Name: "strlen", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "string", Summary: "The length of a value.", Fn: cmdStrlen, InMulti: true},
		{Name: "getrange", Arity: 4, Flags: ro, First: 1, Last: 1, Step: 1, Group: "string", Summary: "A substring of a value.", Fn: cmdGetRange, InMulti: true},
		{Name: "ttl", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "Seconds until the key expires, -1 (no expiry) or -2 (no key).", Fn: cmdTTL, InMulti: true},
		{Name: "pttl", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "generic", Summary: "Milliseconds until the key expires, -1 or -2.", Fn: cmdTTL, InMulti: true},
		{Name: "object", Arity: -2, Flags: ro, First: 2, Last: 2, Step: 1, Group: "generic", Summary: "OBJECT ENCODING, OBJECT HELP.", Fn: cmdObject, InMulti: true, Subcommands: objectArity},
		{Name: "scan", Arity: -2, Flags: []string{"readonly"}, Group: "generic", Summary: "Iterates the keys (MATCH, COUNT, TYPE).", Fn: cmdScan, InMulti: true},
		{Name: "keys", Arity: 2, Flags: []string{"readonly"}, Group: "generic", Summary: "The keys matching a pattern (bounded; use SCAN).", Fn: cmdKeys, InMulti: true},
		{Name: "hget", Arity: 3, Flags: ro, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "HGET topic key is GET topic:key.", Fn: cmdHGet, InMulti: true},
		{Name: "hmget", Arity: -3, Flags: ro, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "Several keys of a topic.", Fn: cmdHMGet, InMulti: true},
		{Name: "hexists", Arity: 3, Flags: ro, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "Whether a topic has a key.", Fn: cmdHExists, InMulti: true},
		{Name: "hstrlen", Arity: 3, Flags: ro, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "The length of a topic's value.", Fn: cmdHStrlen, InMulti: true},
		{Name: "hlen", Arity: 2, Flags: ro, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "The live keys of a topic.", Fn: cmdHLen, InMulti: true},
		{Name: "hkeys", Arity: 2, Flags: []string{"readonly"}, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "The keys of a topic (bounded; use HSCAN).", Fn: cmdHKeys, InMulti: true},
		{Name: "hvals", Arity: 2, Flags: []string{"readonly"}, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "The values of a topic (bounded; use HSCAN).", Fn: cmdHVals, InMulti: true},
		{Name: "hgetall", Arity: 2, Flags: []string{"readonly"}, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "A topic's keys and values (bounded; use HSCAN).", Fn: cmdHGetAll, InMulti: true},
		{Name: "hscan", Arity: -3, Flags: []string{"readonly"}, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "Iterates a topic (MATCH, COUNT, NOVALUES).", Fn: cmdHScan, InMulti: true},

		// Writes.
		{Name: "set", Arity: -3, Flags: wr, First: 1, Last: 1, Step: 1, Group: "string", Summary: "SET key value [EX|PX|EXAT|PXAT n | KEEPTTL] [EFFECTIVEAT unix-ms].", Fn: cmdSet, Write: true},
		{Name: "mset", Arity: -3, Flags: wr, First: 1, Last: -1, Step: 2, Group: "string", Summary: "One batch: all or nothing.", Fn: cmdMSet, Write: true},
		{Name: "del", Arity: -2, Flags: []string{"write"}, First: 1, Last: -1, Step: 1, Group: "generic", Summary: "Tombstones for the keys that exist.", Fn: cmdDel, Write: true},
		{Name: "unlink", Arity: -2, Flags: []string{"write", "fast"}, First: 1, Last: -1, Step: 1, Group: "generic", Summary: "Like DEL.", Fn: cmdDel, Write: true},
		{Name: "hset", Arity: -4, Flags: wr, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "HSET topic key value ... is one batch.", Fn: cmdHSet, Write: true},
		{Name: "hmset", Arity: -4, Flags: wr, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "Like HSET; answers OK.", Fn: cmdHSet, Write: true},
		{Name: "hdel", Arity: -3, Flags: []string{"write", "fast"}, First: 1, Last: 1, Step: 1, Group: "hash", Summary: "Tombstones for a topic's keys.", Fn: cmdHDel, Write: true},
	}
	table = append(table, timeCommands()...)
	table = append(table, stringCommands()...)
	return append(table, counterCommands()...)
}

// wrongType is Redis's answer to a command on a key of another kind.
const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
