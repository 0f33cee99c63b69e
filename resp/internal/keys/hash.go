package keys

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
)

// The hash commands: a hash is a topic, its fields are the topic's keys.

// getField reads a topic's key, tracking the hash for the client.
func getField(c *session.Session, hash, field []byte) ([]byte, bool) {
	c.TrackRead(hash)
	t := session.TopicOf(hash)
	if t == "" {
		return nil, false
	}
	return c.Node().Get(t, session.Str(field))
}

// stringOnly reports whether name is a string key and not a hash (a
// topic with live keys): a hash command answers it WRONGTYPE, as Redis
// answers one on a string key. The reads ask it only when the hash gave
// them nothing.
func stringOnly(c *session.Session, name []byte) bool {
	if _, ok := c.Node().Get(c.Split(name)); !ok {
		return false
	}
	return !isHash(c, name)
}

func cmdHGet(c *session.Session, a [][]byte) {
	switch v, ok := getField(c, a[1], a[2]); {
	case ok:
		c.Bulk(v)
	case stringOnly(c, a[1]):
		c.Err(wrongType)
	default:
		c.Null()
	}
}

// cmdHMGet answers the fields; when none is there it asks whether the
// name is a string key, and then takes the answer back for WRONGTYPE
// (nothing else writes to out while the command runs under mu), so that
// a hit costs no lookup more.
func cmdHMGet(c *session.Session, a [][]byte) {
	mark := len(c.Out)
	c.Array(len(a) - 2)
	found := false
	for _, f := range a[2:] {
		if v, ok := getField(c, a[1], f); ok {
			c.Bulk(v)
			found = true
		} else {
			c.Null()
		}
	}
	if !found && stringOnly(c, a[1]) {
		c.Out = c.Out[:mark]
		c.Err(wrongType)
	}
}

func cmdHExists(c *session.Session, a [][]byte) {
	switch _, ok := getField(c, a[1], a[2]); {
	case ok:
		c.Int(1)
	case stringOnly(c, a[1]):
		c.Err(wrongType)
	default:
		c.Int(0)
	}
}

func cmdHStrlen(c *session.Session, a [][]byte) {
	v, ok := getField(c, a[1], a[2])
	if !ok && stringOnly(c, a[1]) {
		c.Err(wrongType)
		return
	}
	c.Int(int64(len(v)))
}

func cmdHLen(c *session.Session, a [][]byte) {
	c.TrackRead(a[1])
	t := session.TopicOf(a[1])
	for _, ti := range c.Node().Topics() {
		if ti.Name == t {
			c.Int(int64(ti.Keys))
			return
		}
	}
	if stringOnly(c, a[1]) {
		c.Err(wrongType)
		return
	}
	c.Int(0)
}

// maxHashReply bounds HGETALL, HKEYS and HVALS: a larger topic is read
// with HSCAN.
const maxHashReply = 10000

// hashKeys lists a whole topic for HKEYS, HVALS and HGETALL, or answers
// the error that points at HSCAN, or WRONGTYPE for a string key.
func hashKeys(c *session.Session, hash []byte) ([]string, bool) {
	c.TrackRead(hash)
	var keys []string
	if t := session.TopicOf(hash); t != "" {
		keys = c.Node().Keys(t, "", "", maxHashReply+1)
	}
	switch {
	case len(keys) == 0 && stringOnly(c, hash):
		c.Err(wrongType)
		return nil, false
	case len(keys) > maxHashReply:
		c.Err("ERR topic " + string(hash) + " has more than " + strconv.Itoa(maxHashReply) + " keys, too many for one reply; use HSCAN")
		return nil, false
	}
	return keys, true
}

func cmdHKeys(c *session.Session, a [][]byte) {
	keys, ok := hashKeys(c, a[1])
	if !ok {
		return
	}
	c.Array(len(keys))
	for _, k := range keys {
		c.BulkString(k)
	}
}

// hashPairs reads the values of keys; a key deleted meanwhile is left out.
func hashPairs(c *session.Session, t string, keys []string) (ks []string, vs [][]byte) {
	for _, k := range keys {
		if v, ok := c.Node().Get(t, k); ok {
			ks = append(ks, k)
			vs = append(vs, v)
		}
	}
	return ks, vs
}

func cmdHVals(c *session.Session, a [][]byte) {
	keys, ok := hashKeys(c, a[1])
	if !ok {
		return
	}
	_, vs := hashPairs(c, session.TopicOf(a[1]), keys)
	c.Array(len(vs))
	for _, v := range vs {
		c.Bulk(v)
	}
}

func cmdHGetAll(c *session.Session, a [][]byte) {
	keys, ok := hashKeys(c, a[1])
	if !ok {
		return
	}
	ks, vs := hashPairs(c, session.TopicOf(a[1]), keys)
	c.Map(len(ks))
	for i := range ks {
		c.BulkString(ks[i])
		c.Bulk(vs[i])
	}
}

func cmdHSet(c *session.Session, a [][]byte) {
	if len(a)%2 != 0 {
		c.Err("ERR wrong number of arguments for '" + strings.ToLower(session.Str(a[0])) + "' command")
		return
	}
	t := string(a[1])
	msgs := make([]record.Message, 0, len(a)/2-1)
	added := 0
	seen := distinct(len(a)/2 - 1) // a field named twice is added once, as in Redis
	for i := 2; i < len(a); i += 2 {
		k := string(a[i])
		if k == "" {
			c.Err("ERR invalid_name: key: must be 1 to 1024 bytes, got 0")
			return
		}
		if _, ok := c.Node().Get(t, k); !ok && seen(t, k) {
			added++
		}
		msgs = append(msgs, record.Message{Topic: t, Key: k, Value: bytes.Clone(a[i+1])})
	}
	if !c.Publish(msgs) {
		return
	}
	if strings.EqualFold(session.Str(a[0]), "hmset") {
		c.OK()
		return
	}
	c.Int(int64(added))
}

func cmdHDel(c *session.Session, a [][]byte) {
	t := session.TopicOf(a[1])
	var msgs []record.Message
	seen := distinct(len(a) - 2)
	for _, f := range a[2:] {
		if t == "" {
			break
		}
		if _, ok := c.Node().Get(t, session.Str(f)); ok && seen(t, session.Str(f)) {
			msgs = append(msgs, record.Message{Topic: strings.Clone(t), Key: string(f), Delete: true})
		}
	}
	if len(msgs) == 0 {
		if stringOnly(c, a[1]) {
			c.Err(wrongType)
			return
		}
		c.Int(0)
		return
	}
	if c.Publish(msgs) {
		c.Int(int64(len(msgs)))
	}
}
