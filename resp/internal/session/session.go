// Package session is the seam between the Redis door's server (package
// resp: listeners, connections, the event loop, dispatch) and its command
// families (resp/internal/keys, ...): what a command's handler receives.
//
// A handler is a func(*Session, [][]byte) in a Command of the table. The
// Session is the connection as a handler sees it: the answers it writes
// (Out, in the connection's protocol, Proto), the view it reads (Node:
// the node's, or the transaction's while EXEC runs one), the keys it
// registers for client-side caching (TrackRead), the one publish path
// (Publish), and the server's shared part (Env: the default topic, the
// clock, the write checks, the SCAN cursors). The server's connection
// embeds it and implements Host, what a Session asks of the server; a
// handler never sees the connection itself.
//
// Everything here runs on the connection's goroutine (or the event
// loop), with the connection's lock held, as the handlers do.
package session

import (
	"bytes"
	"strings"
	"time"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// View is what the commands read of a node: its local view. The server's
// Node includes it; a transaction's view (TxView) is one too.
type View interface {
	// Get returns the live value of (topic, key) in the local view. The
	// bytes are shared with the view and must not be modified or kept.
	Get(topic, key string) ([]byte, bool)
	// GetInto is Get for a caller done with the value before its next
	// read: a value the view does not keep on the heap (the daemon's
	// --view-file-values) is read into buf, from its start (grown when
	// short), instead of a new allocation. It returns the buffer to pass
	// next time; until then the value may be a slice of it.
	GetInto(buf []byte, topic, key string) (value, next []byte, ok bool)
	// Entry is Get with the rest of the entry: tag, stamp, expiry.
	Entry(topic, key string) (storeview.Entry, bool)
	// Counting is Entry for a counter command: for a key without a
	// value, the entry's Absence says what the key had last.
	Counting(topic, key string) (storeview.Entry, bool)
	// GetMany looks up (topics[i], keys[i]) at one instant: the records
	// of a batch are all seen or none. The values the view does not keep
	// on the heap are read into buf, as GetInto's value, and it returns
	// buf for the next call.
	GetMany(topics, keys []string, entries []storeview.Entry, found []bool, buf []byte) []byte
	// PendingKey lists the records of (topic, key) not in force yet:
	// scheduled values and deletes, and cancels.
	PendingKey(topic, key string) []storeview.PendingRecord
	// Keys lists the live keys of topic that start with prefix and sort
	// after after, in byte order, at most limit.
	Keys(topic, prefix, after string, limit int) []string
	// Topics lists the topics of the view, sorted, with their live keys.
	Topics() []storeview.TopicInfo
}

// Host is what a Session asks of the server's connection that embeds it.
// Its methods run with the connection's lock held.
type Host interface {
	// Track registers a key the client reads for client-side caching
	// (CLIENT TRACKING); asked only while Session.Tracking is set.
	Track(name []byte)
	// PublishBatch writes msgs through the node's write path (or keeps
	// them for EXEC's batch) and returns the error text to answer, ""
	// when they were written and confirmed as asked. checked says each
	// message passed Env.Checks.Message already.
	PublishBatch(msgs []record.Message, checked bool) string
	// AuthorizeAdmin answers the error when the connection's peer has no
	// admin role (false); cmd names the command in it.
	AuthorizeAdmin(cmd string) bool
}

// Env is the server's part every Session shares; set before the server
// serves and not changed after (Cursors guards itself).
type Env struct {
	// Node is the node's view.
	Node View
	// DefaultTopic holds the keys without a ':'.
	DefaultTopic string
	// Clock is the node's wall clock; time.Now when nil.
	Clock func() time.Time
	// Checks are the node's bounds on a write, checked by package
	// command before a publish.
	Checks core.Limits
	// AllowFlush lets FLUSHDB and FLUSHALL run (for the admin role).
	AllowFlush bool
	// Cursors are the SCAN and HSCAN cursors of the whole server.
	Cursors Cursors
}

// Now is the node's clock.
func (e *Env) Now() time.Time {
	if e.Clock != nil {
		return e.Clock()
	}
	return time.Now()
}

// Split maps a Redis key onto (topic, key): at the first ':', or the
// default topic when there is none. The strings share name.
func (e *Env) Split(name []byte) (topic, key string) {
	if i := bytes.IndexByte(name, ':'); i >= 0 {
		return Str(name[:i]), Str(name[i+1:])
	}
	return e.DefaultTopic, Str(name)
}

// RedisName is the Redis key of (topic, key): the bare key in the default
// topic when it holds no ':', topic:key otherwise.
func (e *Env) RedisName(topic, key string) string {
	if topic == e.DefaultTopic && strings.IndexByte(key, ':') < 0 {
		return key
	}
	return topic + ":" + key
}

// Session is one connection as a command's handler sees it.
type Session struct {
	// Out holds the answers not written yet; the writers append to it.
	Out []byte
	// Proto is the connection's protocol: 2 or 3 (HELLO).
	Proto int
	// Env is the server's shared part.
	Env *Env
	// Tx is the transaction's view while EXEC runs one; nil otherwise.
	Tx *TxView
	// Tracking says CLIENT TRACKING is on: a read registers its keys
	// (TrackRead). The host sets it.
	Tracking bool
	// writing says the command running (Run) is a write: its reads
	// register no key for tracking.
	writing bool
	// Lookups are MGET's buffers, reused by the session's next MGET.
	Lookups Lookups
	// values is Value's buffer (View.GetInto).
	values []byte

	host Host
	// setTopic is the topic of the last SET (SetMessage); one an
	// unpipelined SET's batch.
	setTopic string
	one      [1]record.Message
}

// Init makes s the session of host over env, answering in RESP2.
func (s *Session) Init(host Host, env *Env) {
	s.host, s.Env, s.Proto = host, env, 2
	s.Out = make([]byte, 0, 4096)
}

// Host is the connection that embeds s.
func (s *Session) Host() Host { return s.host }

// Node is the view the commands read: the transaction's while EXEC runs
// one, the node's otherwise.
func (s *Session) Node() View {
	if s.Tx != nil {
		return s.Tx
	}
	return s.Env.Node
}

// Split is Env.Split.
func (s *Session) Split(name []byte) (topic, key string) { return s.Env.Split(name) }

// TrackRead registers a key the client reads; before the read, so that a
// change after the read is always invalidated. A write command's reads
// (INCR's, GETSET's, EXPIRE's...) register nothing: Redis remembers the
// keys of read-only commands only (CMD_READONLY in its call()).
func (s *Session) TrackRead(name []byte) {
	if s.Tracking && !s.writing {
		s.host.Track(name)
	}
}

// Run runs cmd with the arguments a (a[0] its name) on s.
func (s *Session) Run(cmd *Command, a [][]byte) {
	s.writing = cmd.Write
	cmd.Fn(s, a)
	s.writing = false
}

// Publish writes msgs through the node, answering the error when there
// is one (false).
func (s *Session) Publish(msgs []record.Message) bool {
	if msg := s.host.PublishBatch(msgs, false); msg != "" {
		s.Err(msg)
		return false
	}
	return true
}

// PublishMsgs is Publish without the answer: the error text it would
// answer, or "" when msgs were written and confirmed as asked.
func (s *Session) PublishMsgs(msgs []record.Message) string {
	return s.host.PublishBatch(msgs, false)
}

// PublishOne publishes m alone (Publish) in the session's own one-message
// batch: a slice made for it would be one more allocation per SET.
func (s *Session) PublishOne(m record.Message) bool {
	s.one[0] = m
	ok := s.Publish(s.one[:])
	s.one[0] = record.Message{}
	return ok
}

// SetMessage is the message of SET topic:key value. Key and value are
// not copied: a SET's publish returns before the read buffer they point
// into is read into again (the command runs on the goroutine that reads,
// and a write is never queued, not even in MULTI), and no one keeps a
// message's key or value past its publish (the log and the view copy
// them). The topic is the session's copy of the last one it set (the
// store keeps a new topic's name): a copy the first time, none for the
// next SETs of the same topic.
func (s *Session) SetMessage(topic, key string, value []byte) record.Message {
	if topic != s.setTopic {
		s.setTopic = strings.Clone(topic)
	}
	return record.Message{Topic: s.setTopic, Key: key, Value: value}
}

// The answer writers.

// OK answers +OK.
func (s *Session) OK() { s.Out = append(s.Out, "+OK\r\n"...) }

// Simple answers a simple string.
func (s *Session) Simple(str string) { s.Out = codec.AppendSimple(s.Out, str) }

// Err answers an error; msg starts with its prefix (ERR, WRONGTYPE...).
func (s *Session) Err(msg string) { s.Out = codec.AppendError(s.Out, msg) }

// WriteError answers err in Redis's words (RedisText).
func (s *Session) WriteError(err error) { s.Err(RedisText(err)) }

// Int answers an integer.
func (s *Session) Int(n int64) { s.Out = codec.AppendInt(s.Out, n) }

// Bulk answers a bulk string.
func (s *Session) Bulk(b []byte) { s.Out = codec.AppendBulk(s.Out, b) }

// BulkString answers a bulk string.
func (s *Session) BulkString(str string) { s.Out = codec.AppendBulkString(s.Out, str) }

// Verbatim answers a verbatim string (a bulk string in RESP2).
func (s *Session) Verbatim(str string) { s.Out = codec.AppendVerbatim(s.Out, str, s.Proto) }

// Null answers the null of the connection's protocol.
func (s *Session) Null() { s.Out = codec.AppendNull(s.Out, s.Proto) }

// Array starts an array of n elements.
func (s *Session) Array(n int) { s.Out = codec.AppendArray(s.Out, n) }

// Map starts a map of n pairs (an array of 2n in RESP2).
func (s *Session) Map(n int) { s.Out = codec.AppendMap(s.Out, n, s.Proto) }

// Set starts a set of n elements (an array in RESP2).
func (s *Session) Set(n int) { s.Out = codec.AppendSet(s.Out, n, s.Proto) }

// Help answers a HELP subcommand as Redis does: a line of usage, the
// lines, then HELP's own.
func (s *Session) Help(cmd string, lines []string) {
	s.Array(len(lines) + 3)
	s.Simple(cmd + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
	for _, l := range lines {
		s.Simple(l)
	}
	s.Simple("HELP")
	s.Simple("    Prints this help.")
}

// keepValues is the most room a session keeps for the values it reads
// (Value, MGET's Lookups) between commands: a connection that read a
// large value once does not hold its copy for its life.
const keepValues = 64 << 10

// Value is the live value of (topic, key) in the session's view, for a
// command that is done with it before its next read (it answers it, or
// looks at it): it may be in a buffer of the session's, which the next
// Value reuses (View.GetInto).
func (s *Session) Value(topic, key string) ([]byte, bool) {
	v, next, ok := s.Node().GetInto(s.values, topic, key)
	s.values = next
	if cap(next) > keepValues {
		s.values = nil
	}
	return v, ok
}

// Lookups are buffers for a GetMany, reused by the session's next one.
type Lookups struct {
	Topics, Keys []string
	Entries      []storeview.Entry
	Found        []bool
	// Values is where GetMany reads the values the view does not keep on
	// the heap.
	Values []byte
}

// Drop lets go of what the buffers point at (the read buffer, the view's
// values), and of buffers grown for a very large lookup.
func (l *Lookups) Drop() {
	if cap(l.Keys) > 1024 || cap(l.Values) > keepValues {
		*l = Lookups{}
		return
	}
	clear(l.Topics[:cap(l.Topics)])
	clear(l.Keys[:cap(l.Keys)])
	clear(l.Entries[:cap(l.Entries)])
}
