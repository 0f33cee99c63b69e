package resp

import (
	"strings"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// CLIENT REPLY ON|OFF|SKIP, as Redis 7.0 serves it: OFF drops the
// answers of every command until ON; SKIP drops the answer of the next
// command only (SKIP's own is dropped too; after OFF it does nothing).
// What a connection receives without asking stays: pub/sub messages,
// invalidations and the confirmations of SUBSCRIBE, PSUBSCRIBE,
// UNSUBSCRIBE and PUNSUBSCRIBE (Redis writes those as pushes,
// CLIENT_PUSHING). An answer is dropped after its command ran, so the
// command's effect is the same whether its answer is sent or not.

// replyMode is a connection's CLIENT REPLY state, under mu.
type replyMode struct {
	off      bool // OFF: no answers until ON
	skip     bool // the command running now answers nothing (SKIP before it)
	skipNext bool // SKIP ran: the next command answers nothing
}

// muted says whether answers are being dropped (OFF, or a SKIP that
// applies to the command running now).
func (r *replyMode) muted() bool { return r.off || r.skip }

// clientReply is CLIENT REPLY's own part: ON answers OK, OFF and SKIP
// answer nothing (their answer is dropped as the next ones are).
func (c *conn) clientReply(a [][]byte) {
	switch strings.ToUpper(session.Str(a[2])) {
	case "ON":
		c.reply = replyMode{}
		c.OK()
	case "OFF":
		c.reply.off = true
	case "SKIP":
		if !c.reply.off {
			c.reply.skipNext = true
		}
	default:
		c.Err("ERR syntax error")
	}
}

// replied ends a command for CLIENT REPLY, as Redis's resetClient does
// after every command (an unknown or refused one too): while answers are
// muted it drops what the command wrote after mark (the length of out
// before it ran), but not a subscription command's confirmations; then a
// SKIP applies to the next command only.
func (c *conn) replied(cmd *session.Command, mark int) {
	if c.reply.muted() && !pushesOnly(cmd) && len(c.Out) > mark {
		c.Out = c.Out[:mark]
	}
	c.reply.skip, c.reply.skipNext = c.reply.skipNext, false
}

// pushesOnly says whether cmd answers only with what Redis writes as
// pushes, which CLIENT REPLY OFF does not drop: the confirmations of the
// subscription commands.
func pushesOnly(cmd *session.Command) bool {
	if cmd == nil {
		return false
	}
	switch cmd.Name {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe":
		return true
	}
	return false
}
