package resp

import (
	"bytes"

	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/resp/internal/keys"
	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
)

// maxSetBatch bounds the SETs of a pipeline published as one batch.
const maxSetBatch = 1024

// setCommand is SET's entry of the command table (set by its init).
var setCommand *session.Command

// isBatchSet reports whether a is a SET a pipeline's run can batch: SET
// key value, with any options but KEEPTTL, NX, XX and GET (which read
// the key, one an earlier SET of the batch may not have written yet).
func isBatchSet(a [][]byte) bool {
	if len(a) < 3 || len(a[0]) != 3 || !bytes.EqualFold(a[0], []byte("set")) {
		return false
	}
	for _, o := range a[3:] {
		// KEEPTTL, the conditions and GET read the key first: alone.
		if bytes.EqualFold(o, []byte("keepttl")) || bytes.EqualFold(o, []byte("nx")) ||
			bytes.EqualFold(o, []byte("xx")) || bytes.EqualFold(o, []byte("get")) {
			return false
		}
	}
	return true
}

// execSets runs a pipeline's run of SETs (isBatchSet), the first one a and the
// next ones parsed from rest, as few publishes as it can: each SET that
// the node would accept on its own joins one batch (one publish, one
// flush and replication wait); a SET the node would refuse ends the
// batch, which is published first, and then runs alone, so that it gets
// the answer it would get alone and the others are not refused with it.
// Any other command, an incomplete one or a protocol error ends the run
// (the main loop parses it again). It returns the bytes of rest it used,
// or -1 when a is not the start of a run of two SETs or more: then the
// caller runs a as usual; and, as exec, whether the answers waiting
// reached outFlushSize.
func (c *conn) execSets(a [][]byte, rest []byte) (used int, full bool) {
	if !isBatchSet(a) {
		return -1, false
	}
	next, n, _, err := codec.Parse(rest, c.peek[:0], c.lim)
	c.peek = next
	if err != nil || n == 0 || !isBatchSet(next) {
		return -1, false
	}
	c.mu.Lock()
	if c.inMulti || c.reply.muted() || c.Proto == 2 && c.ps.Subscribed() || c.refusal(setCommand) != "" {
		c.mu.Unlock()
		return -1, false // exec answers these as it does
	}
	defer func() {
		full = len(c.Out) >= outFlushSize
		c.mu.Unlock()
	}()
	sets := 2
	c.batchSet(a)
	for {
		c.batchSet(next)
		used += n
		if len(c.Out) >= outFlushSize {
			break // the main loop writes the answers so far
		}
		next, n, _, err = codec.Parse(rest[used:], c.peek[:0], c.lim)
		c.peek = next
		if err != nil || n == 0 || !isBatchSet(next) {
			break
		}
		sets++
	}
	// Counted once for the run: two atomic adds a SET otherwise.
	c.s.stats.commands.Add(int64(sets))
	c.s.stats.byCommand[setCommand.Index].Add(int64(sets))
	c.publishSets()
	c.ps.EndCommand() // CLIENT CACHING applies to the command after it only
	c.showCmd(setCommand, nil)
	c.show()
	return used, false
}

// batchSet adds one SET to the pending batch, or, when its options are
// wrong or the node would refuse it, publishes the pending batch and runs
// the SET alone (which answers the error).
func (c *conn) batchSet(a [][]byte) {
	c.lastCmd = setCommand
	if c.s.hub.Monitoring() {
		c.s.hub.Feed(c, setCommand, a)
	}
	t, k := c.s.env.Split(a[1])
	limit := c.s.cfg.MaxFrameSize
	if limit <= 0 {
		limit = c.s.lim.MaxFrame
	}
	if k == "" {
		c.publishSets()
		setCommand.Fn(&c.Session, a)
		return
	}
	if len(c.sets) == maxSetBatch || c.setBytes+len(a[2]) > limit {
		c.publishSets()
	}
	// Checked in place: a message of its own passed to Check would be
	// one more allocation per SET.
	c.sets = append(c.sets, c.SetMessage(t, k, a[2]))
	last := len(c.sets) - 1
	bad := ""
	if len(a) > 3 {
		bad = keys.SetOptions(&c.Session, &c.sets[last], a[3:])
	}
	if bad != "" || c.s.env.Checks.Message(&c.sets[last]) != nil {
		c.sets[last] = record.Message{}
		c.sets = c.sets[:last]
		c.publishSets()
		setCommand.Fn(&c.Session, a)
		return
	}
	c.setBytes += len(a[2])
}

// publishSets publishes the pending SETs as one batch and answers each:
// OK, or the batch's error (the node's, for a reason that is not one
// SET's: the writer's role, a full store, the replica's NOREPLICAS).
func (c *conn) publishSets() {
	if len(c.sets) == 0 {
		return
	}
	msg := c.PublishBatch(c.sets, true)
	for range c.sets {
		if msg == "" {
			c.OK()
		} else {
			c.Err(msg)
		}
	}
	clear(c.sets)
	c.sets, c.setBytes = c.sets[:0], 0
	if cap(c.sets) > maxSetBatch {
		c.sets = nil
	}
}

// maxWarmGets bounds the GETs of a pipeline's run that warmGets loads
// ahead: two pipelines of 16 (redis-benchmark -P 16).
const maxWarmGets = 32

// isGet reports whether a is GET key.
func isGet(a [][]byte) bool {
	return len(a) == 2 && len(a[0]) == 3 && bytes.EqualFold(a[0], []byte("get"))
}

// warmGets, before the GET a runs, when the commands after it in rest
// (read already) are GETs too, has the node load what the run's reads
// will (Node.WarmReads), so that their cache misses overlap instead of
// coming one GET after another (in the view's index, and in the view
// file for the values there). Each GET then runs as it would have. It
// returns how many GETs after a it loaded.
func (c *conn) warmGets(a [][]byte, rest []byte) int {
	t, k := c.s.env.Split(a[1])
	c.warmTopics, c.warmKeys = append(c.warmTopics[:0], t), append(c.warmKeys[:0], k)
	for used := 0; len(c.warmKeys) < maxWarmGets; {
		next, n, _, err := codec.Parse(rest[used:], c.peek[:0], c.lim)
		c.peek = next
		if err != nil || n == 0 || !isGet(next) {
			break
		}
		used += n
		t, k := c.s.env.Split(next[1])
		c.warmTopics, c.warmKeys = append(c.warmTopics, t), append(c.warmKeys, k)
	}
	ahead := len(c.warmKeys) - 1
	if ahead > 0 {
		c.s.node.WarmReads(c.warmTopics, c.warmKeys)
	}
	// They point into the read buffer.
	clear(c.warmTopics)
	clear(c.warmKeys)
	return ahead
}
