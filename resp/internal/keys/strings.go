package keys

import (
	"bytes"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// isHash reports whether name is a topic with live keys (a hash).
func isHash(c *session.Session, name []byte) bool {
	if bytes.IndexByte(name, ':') >= 0 || len(name) == 0 {
		return false
	}
	return len(c.Node().Keys(session.Str(name), "", "", 1)) > 0
}

// getString reads a Redis key as a string, tracking it for the client;
// the value is the caller's until the session's next read (Value).
func getString(c *session.Session, name []byte) ([]byte, bool) {
	c.TrackRead(name)
	t, k := c.Split(name)
	return c.Value(t, k)
}

func cmdGet(c *session.Session, a [][]byte) {
	v, ok := getString(c, a[1])
	switch {
	case ok:
		c.Bulk(v)
	case isHash(c, a[1]):
		c.Err(wrongType)
	default:
		c.Null()
	}
}

// cmdMGet reads the keys at one instant (Node.GetMany): a batch
// published together is seen whole or not at all.
func cmdMGet(c *session.Session, a [][]byte) {
	n := len(a) - 1
	lk := &c.Lookups
	lk.Topics, lk.Keys = lk.Topics[:0], lk.Keys[:0]
	for _, name := range a[1:] {
		c.TrackRead(name)
		t, k := c.Split(name)
		lk.Topics, lk.Keys = append(lk.Topics, t), append(lk.Keys, k)
	}
	if cap(lk.Entries) < n {
		lk.Entries, lk.Found = make([]storeview.Entry, n), make([]bool, n)
	}
	lk.Values = c.Node().GetMany(lk.Topics, lk.Keys, lk.Entries[:n], lk.Found[:n], lk.Values)
	c.Array(n)
	for i := range n {
		if lk.Found[i] {
			c.Bulk(lk.Entries[i].Value)
		} else {
			c.Null()
		}
	}
	lk.Drop()
}

func cmdExists(c *session.Session, a [][]byte) {
	n := 0
	for _, name := range a[1:] {
		if _, ok := getString(c, name); ok || isHash(c, name) {
			n++
		}
	}
	c.Int(int64(n))
}

func cmdType(c *session.Session, a [][]byte) {
	if _, ok := getString(c, a[1]); ok {
		c.Simple("string")
	} else if isHash(c, a[1]) {
		c.Simple("hash")
	} else {
		c.Simple("none")
	}
}

func cmdStrlen(c *session.Session, a [][]byte) {
	v, ok := getString(c, a[1])
	if !ok && isHash(c, a[1]) {
		c.Err(wrongType)
		return
	}
	c.Int(int64(len(v)))
}

func cmdGetRange(c *session.Session, a [][]byte) {
	start, ok1 := session.Int(a[2])
	end, ok2 := session.Int(a[3])
	if !ok1 || !ok2 {
		c.Err("ERR value is not an integer or out of range")
		return
	}
	v, ok := getString(c, a[1])
	if !ok && isHash(c, a[1]) {
		c.Err(wrongType)
		return
	}
	// Redis 7's arithmetic (7.0 to 7.4; Redis 8 answers "" where a
	// negative end falls before the value, which 7 clamps to its first
	// byte: GETRANGE k 0 -100 is the first byte).
	n := int64(len(v))
	if start < 0 && end < 0 && start > end {
		c.Bulk(nil)
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
		c.Bulk(nil)
		return
	}
	c.Bulk(v[start : end+1])
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

func cmdObject(c *session.Session, a [][]byte) {
	sub := strings.ToLower(session.Str(a[1]))
	if sub == "help" {
		c.Help("OBJECT", objectHelp)
		return
	}
	if v, ok := getString(c, a[2]); ok {
		c.BulkString(stringEncoding(v))
	} else if isHash(c, a[2]) {
		c.BulkString(hashEncoding(c.Env.Node, session.Str(a[2])))
	} else {
		c.Null()
	}
}

// stringEncoding is the encoding Redis 7.0 gives a value SET stores
// (tryObjectEncoding): int for an integer it reads whole within 64 bits,
// embstr up to 44 bytes, raw past them.
func stringEncoding(v []byte) string {
	if _, ok := session.Int(v); ok && len(v) <= 20 {
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
func hashEncoding(v session.View, topic string) string {
	keys := v.Keys(topic, "", "", 129)
	if len(keys) > 128 {
		return "hashtable"
	}
	for _, k := range keys {
		if v, _ := v.Get(topic, k); len(k) > 64 || len(v) > 64 {
			return "hashtable"
		}
	}
	return "listpack"
}

// message builds a message for a Redis key; the strings are copies. A
// name with nothing after its ':' has no key (a message without one would
// be a stream message): false, with the error answered.
func message(c *session.Session, name []byte, value []byte, del bool) (record.Message, bool) {
	t, k, ok := keyOf(c, name)
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
func keyOf(c *session.Session, name []byte) (topic, key string, ok bool) {
	t, k := c.Split(name)
	if k == "" {
		c.Err("ERR invalid_name: the key " + strconv.Quote(session.Clip(name)) + " is empty after its ':' (topic:key)")
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

func cmdSet(c *session.Session, a [][]byte) {
	if len(a) > 3 {
		cmdSetWithOptions(c, a)
		return
	}
	t, k, ok := keyOf(c, a[1])
	if !ok {
		return
	}
	if c.PublishOne(c.SetMessage(t, k, a[2])) {
		c.OK()
	}
}

func cmdMSet(c *session.Session, a [][]byte) {
	if len(a)%2 != 1 {
		c.Err("ERR wrong number of arguments for 'mset' command")
		return
	}
	msgs := make([]record.Message, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		m, ok := message(c, a[i], a[i+1], false)
		if !ok {
			return
		}
		msgs = append(msgs, m)
	}
	record.Together(msgs) // visible together on every node
	if c.Publish(msgs) {
		c.OK()
	}
}

func cmdDel(c *session.Session, a [][]byte) {
	var msgs []record.Message
	seen := distinct(len(a) - 1)
	for _, name := range a[1:] {
		t, k := c.Split(name)
		if _, ok := c.Node().Get(t, k); ok && seen(t, k) {
			m, _ := message(c, name, nil, true)
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 || c.Publish(msgs) {
		if len(msgs) == 0 {
			c.Int(0)
			return
		}
		c.Int(int64(len(msgs)))
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
