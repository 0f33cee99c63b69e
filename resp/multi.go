package resp

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/resp/internal/session"
	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// Transactions: MULTI queues reads and writes of keys; EXEC runs them in
// order against the transaction's view (session.TxView: the node's view under the
// transaction's own earlier writes, so that a read sees them, as in
// Redis), keeps their writes, and publishes them as one batch
// (record.Together): every node applies it all or nothing, under one hold
// of its view's lock. WATCH compares the watched keys of this node's view
// at EXEC with what they were at WATCH; it is not fleet-wide.

// runsInMulti are the commands MULTI does not queue, as Redis's
// processCommand lists them.
var runsInMulti = map[string]bool{"exec": true, "discard": true, "multi": true, "watch": true, "quit": true, "reset": true}

// queue queues a command after MULTI, or answers why not (then EXEC
// aborts). A write was authorized before (exec), as Redis checks ACLs
// while queueing, so that a writer without the role learns it before EXEC.
//
// The queue is held until EXEC, whose writes are one batch, and a batch
// is at most --max-body-size (Config.MaxFrameSize): past that the
// queueing is refused and the queue dropped, so that a connection holds
// at most that much. Its bytes count against the node's budget for
// request bodies, in the caller's share (Node.HoldMemory), with its large
// commands' and HTTP bodies': a command that would pass it is refused and
// the queue dropped as well. Once EXEC is bound to abort, a command is
// answered QUEUED, as in Redis, and not kept.
func (c *conn) queue(cmd *session.Command, a [][]byte) {
	if !cmd.InMulti && !cmd.Write {
		c.abortMulti("ERR " + strings.ToUpper(cmd.Name) + " cannot be queued: MULTI here holds the reads and writes of keys")
		return
	}
	size := 0
	for _, arg := range a {
		size += len(arg)
	}
	if limit := c.s.cfg.MaxFrameSize; limit > 0 && !c.multiErr && c.queuedBytes+size > limit {
		c.abortMulti("ERR the transaction's queued commands pass " + strconv.Itoa(limit) +
			" bytes (--max-body-size), the most one batch of writes holds: it is discarded and EXEC will abort")
		return
	}
	if !c.multiErr {
		if err := c.s.node.HoldMemory(c.nc, size); err != nil {
			c.abortMulti(session.RedisText(err) + " (the transaction's queued commands: it is discarded and EXEC will abort)")
			return
		}
		c.held += size
		q := make([][]byte, len(a))
		for i := range a {
			q[i] = bytes.Clone(a[i])
		}
		c.queued = append(c.queued, q)
		c.queuedBytes += size
	}
	c.Out = append(c.Out, "+QUEUED\r\n"...)
}

// abortMulti answers why a command cannot be queued: EXEC will abort, so
// the queue is dropped.
func (c *conn) abortMulti(why string) {
	c.multiErr = true
	c.dropQueue()
	c.Err(why)
}

// dropQueue drops the commands queued after MULTI and gives their bytes
// back to the node's budget.
func (c *conn) dropQueue() {
	c.release(c.queuedBytes)
	c.queued, c.queuedBytes = nil, 0
}

func cmdMulti(c *conn, _ [][]byte) {
	if c.inMulti {
		c.Err("ERR MULTI calls can not be nested")
		return
	}
	c.inMulti, c.multiErr = true, false
	c.dropQueue()
	c.OK()
}

func cmdDiscard(c *conn, _ [][]byte) {
	if !c.inMulti {
		c.Err("ERR DISCARD without MULTI")
		return
	}
	c.inMulti, c.multiErr, c.watched = false, false, nil
	c.dropQueue()
	c.OK()
}

func cmdExec(c *conn, _ [][]byte) {
	if !c.inMulti {
		c.Err("ERR EXEC without MULTI")
		return
	}
	queued, failed := c.queued, c.multiErr
	changed := c.watchedChanged()
	c.inMulti, c.multiErr, c.watched = false, false, nil
	defer c.dropQueue() // held until its writes are published
	c.queued = nil
	switch {
	case failed:
		c.Err("EXECABORT Transaction discarded because of previous errors.")
		return
	case changed:
		c.nullArray()
		return
	}
	for _, q := range queued {
		if lookup(q[0]).Write {
			c.execBatch(queued)
			return
		}
	}
	c.Array(len(queued))
	for _, q := range queued {
		c.Run(lookup(q[0]), q)
	}
}

// nullArray answers Redis's null array: an EXEC a watched key aborted.
func (c *conn) nullArray() {
	if c.Proto == 3 {
		c.Out = append(c.Out, "_\r\n"...)
		return
	}
	c.Out = append(c.Out, "*-1\r\n"...)
}

// execBatch runs a transaction with writes: each command against the
// transaction's view, its answer kept aside; then the writes as one
// publish. When the publish fails nothing was written (NOREPLICAS aside,
// which says the batch is stored here): each command that wrote answers
// the publish's error in its place, the others their own answer.
func (c *conn) execBatch(queued [][][]byte) {
	// Its own writes are read at the instant EXEC starts, as Redis reads
	// every key in a transaction (a SET PX 1 is still there after a DEBUG
	// SLEEP queued after it).
	tx := session.NewTx(c.s.node, c.s.env.Now())
	out := c.Out
	c.Tx, c.Out = tx, make([]byte, 0, 256)
	ends := make([]int, len(queued))
	wrote := make([]bool, len(queued))
	for i, q := range queued {
		n := len(tx.Msgs())
		c.Run(lookup(q[0]), q)
		ends[i], wrote[i] = len(c.Out), len(tx.Msgs()) > n
	}
	answers := c.Out
	c.Tx, c.Out = nil, out
	msg := ""
	if msgs := tx.Msgs(); len(msgs) > 0 {
		record.Together(msgs) // visible together on every node
		msg = c.PublishBatch(msgs, true)
	}
	c.Array(len(queued))
	if msg == "" {
		c.Out = append(c.Out, answers...)
		return
	}
	start := 0
	for i, end := range ends {
		if wrote[i] {
			c.Err(msg)
		} else {
			c.Out = append(c.Out, answers[start:end]...)
		}
		start = end
	}
}

// watchedKey is a key WATCH saw: whether it held a value, and which.
type watchedKey struct {
	topic, key string
	found      bool
	e          storeview.Entry // its Value a copy
}

func cmdWatch(c *conn, a [][]byte) {
	if c.inMulti {
		c.Err("ERR WATCH inside MULTI is not allowed")
		return
	}
	for _, name := range a[1:] {
		t, k := c.s.env.Split(name)
		w := watchedKey{topic: strings.Clone(t), key: strings.Clone(k)}
		w.e, w.found = c.s.node.Entry(t, k)
		w.e.Value = bytes.Clone(w.e.Value)
		c.watched = append(c.watched, w)
	}
	c.OK()
}

func cmdUnwatch(c *conn, _ [][]byte) {
	c.watched = nil
	c.OK()
}

// watchedChanged reports whether a watched key changed in this node's
// view since WATCH: another value, stamp or expiry, a delete, an expiry
// that came, whichever node wrote it (this connection included, as in
// Redis).
func (c *conn) watchedChanged() bool {
	for _, w := range c.watched {
		e, found := c.s.node.Entry(w.topic, w.key)
		if found != w.found || found && (e.Stamp != w.e.Stamp || e.ExpiresAt != w.e.ExpiresAt ||
			e.EffectiveAt != w.e.EffectiveAt || !bytes.Equal(e.Value, w.e.Value)) {
			return true
		}
	}
	return false
}
