package resp

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// Transactions: MULTI queues reads and writes of keys; EXEC runs them in
// order against the transaction's view (txView: the node's view under the
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
func (c *conn) queue(cmd *command, a [][]byte) {
	if !cmd.inMulti && !cmd.write {
		c.multiErr = true
		c.err("ERR " + strings.ToUpper(cmd.name) + " cannot be queued: MULTI here holds the reads and writes of keys")
		return
	}
	q := make([][]byte, len(a))
	for i := range a {
		q[i] = bytes.Clone(a[i])
	}
	c.queued = append(c.queued, q)
	c.out = append(c.out, "+QUEUED\r\n"...)
}

func cmdMulti(c *conn, _ [][]byte) {
	if c.inMulti {
		c.err("ERR MULTI calls can not be nested")
		return
	}
	c.inMulti, c.multiErr, c.queued = true, false, nil
	c.ok()
}

func cmdDiscard(c *conn, _ [][]byte) {
	if !c.inMulti {
		c.err("ERR DISCARD without MULTI")
		return
	}
	c.inMulti, c.multiErr, c.queued, c.watched = false, false, nil, nil
	c.ok()
}

func cmdExec(c *conn, _ [][]byte) {
	if !c.inMulti {
		c.err("ERR EXEC without MULTI")
		return
	}
	queued, failed := c.queued, c.multiErr
	changed := c.watchedChanged()
	c.inMulti, c.multiErr, c.queued, c.watched = false, false, nil, nil
	switch {
	case failed:
		c.err("EXECABORT Transaction discarded because of previous errors.")
		return
	case changed:
		c.nullArray()
		return
	}
	for _, q := range queued {
		if lookup(q[0]).write {
			c.execBatch(queued)
			return
		}
	}
	c.array(len(queued))
	for _, q := range queued {
		lookup(q[0]).fn(c, q)
	}
}

// nullArray answers Redis's null array: an EXEC a watched key aborted.
func (c *conn) nullArray() {
	if c.proto == 3 {
		c.out = append(c.out, "_\r\n"...)
		return
	}
	c.out = append(c.out, "*-1\r\n"...)
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
	at := c.s.now()
	tx := &txView{Node: c.s.node, now: func() time.Time { return at }, seen: make(map[[2]string]txSeen)}
	out := c.out
	c.tx, c.out = tx, make([]byte, 0, 256)
	ends := make([]int, len(queued))
	wrote := make([]bool, len(queued))
	for i, q := range queued {
		n := len(tx.msgs)
		lookup(q[0]).fn(c, q)
		ends[i], wrote[i] = len(c.out), len(tx.msgs) > n
	}
	answers := c.out
	c.tx, c.out = nil, out
	msg := ""
	if len(tx.msgs) > 0 {
		record.Together(tx.msgs) // visible together on every node
		msg = c.publishChecked(tx.msgs, true)
	}
	c.array(len(queued))
	if msg == "" {
		c.out = append(c.out, answers...)
		return
	}
	start := 0
	for i, end := range ends {
		if wrote[i] {
			c.err(msg)
		} else {
			c.out = append(c.out, answers[start:end]...)
		}
		start = end
	}
}

// node is the view the connection's commands read: the transaction's
// while EXEC runs one, the node's otherwise.
func (c *conn) node() Node {
	if c.tx != nil {
		return c.tx
	}
	return c.s.node
}

// txView is a transaction's view while EXEC runs it: the node's, under
// the writes of the transaction's commands so far, which it keeps (msgs)
// for one publish. Reads of a key the transaction wrote see its latest
// write; scheduled records and cancels change no read, as in the view.
// A key the transaction wrote has no stamp (its records have none yet):
// a command that binds a record to the version it reads (an expiry
// change, an increment) writes the key's value itself then, in the same
// batch. An increment of a version the node holds keeps that version's
// stamp, so that the next one counts on the same version.
type txView struct {
	Node
	now  func() time.Time
	msgs []record.Message
	// seen is what a read of each key the transaction wrote sees.
	seen map[[2]string]txSeen
}

// txSeen is a key as the transaction's writes left it.
type txSeen struct {
	e    storeview.Entry
	live bool
}

// add keeps msgs, checked one by one (publishChecked), for the
// transaction's publish; the batch's own checks (its size, the role)
// come with the publish.
func (t *txView) add(msgs []record.Message) string {
	for _, m := range msgs {
		t.msgs = append(t.msgs, m)
		if m.Key == "" || m.Cancel || m.EffectiveAt != 0 && !m.ExpiryChange() || m.Counter() {
			continue // no change of what a read sees (a counter's: counted)
		}
		e := storeview.Entry{Value: m.Value, Tag: m.Tag, ExpiresAt: m.ExpiresAt}
		if len(e.Value) == 0 {
			e.Value = nil
		}
		if m.ExpiryChange() {
			e.Stamp, e.EffectiveAt = m.ExpiryOf, m.EffectiveAt
			if prior, ok := t.Entry(m.Topic, m.Key); ok && prior.Stamp == m.ExpiryOf {
				e.Value, e.Base, e.Absence = prior.Value, prior.Base, prior.Absence // a counter's count stays
			}
		}
		t.seen[[2]string{m.Topic, m.Key}] = txSeen{e: e, live: !m.Delete}
	}
	return ""
}

// counted makes a read of (topic, key) see e, the entry an increment
// left.
func (t *txView) counted(topic, key string, e storeview.Entry) {
	t.seen[[2]string{topic, key}] = txSeen{e: e, live: true}
}

// written is what a read of (topic, key) sees after the transaction's
// writes: found says whether it wrote the key, live whether the key
// holds a value after them.
func (t *txView) written(topic, key string) (e storeview.Entry, live, found bool) {
	s, found := t.seen[[2]string{topic, key}]
	if !found {
		return e, false, false
	}
	if !s.live || s.e.ExpiresAt != 0 && s.e.ExpiresAt <= t.now().UnixMilli() {
		return e, false, true
	}
	return s.e, true, true
}

// Entry is the node's Entry under the transaction's writes.
func (t *txView) Entry(topic, key string) (storeview.Entry, bool) {
	if e, live, found := t.written(topic, key); found {
		return e, live
	}
	return t.Node.Entry(topic, key)
}

// Counting is the node's Counting under the transaction's writes: a key
// the transaction wrote has no Absence (a write of its own, not stamped
// yet, which an increment cannot name).
func (t *txView) Counting(topic, key string) (storeview.Entry, bool) {
	if e, live, found := t.written(topic, key); found {
		return e, live
	}
	return t.Node.Counting(topic, key)
}

// Get is the node's Get under the transaction's writes.
func (t *txView) Get(topic, key string) ([]byte, bool) {
	e, ok := t.Entry(topic, key)
	return e.Value, ok
}

// GetMany is the node's GetMany under the transaction's writes.
func (t *txView) GetMany(topics, keys []string, entries []storeview.Entry, found []bool) {
	t.Node.GetMany(topics, keys, entries, found)
	for i := range keys {
		if e, live, ok := t.written(topics[i], keys[i]); ok {
			entries[i], found[i] = e, live
		}
	}
}

// Keys is the node's Keys under the transaction's writes: the node's
// page, asked for as many more keys as the transaction deleted, less
// those, plus the keys the transaction set that the page's range holds.
func (t *txView) Keys(topic, prefix, after string, limit int) []string {
	var set, deleted []string
	for tk := range t.seen {
		if tk[0] != topic || !strings.HasPrefix(tk[1], prefix) || tk[1] <= after {
			continue
		}
		if _, live, _ := t.written(tk[0], tk[1]); live {
			set = append(set, tk[1])
		} else {
			deleted = append(deleted, tk[1])
		}
	}
	page := t.Node.Keys(topic, prefix, after, limit+len(deleted))
	full := len(page) == limit+len(deleted)
	keys := slices.DeleteFunc(page, func(k string) bool { return slices.Contains(deleted, k) })
	for _, k := range set {
		if !full || len(page) > 0 && k <= page[len(page)-1] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return keys[:min(len(keys), limit)]
}

// Topics is the node's Topics with the live keys the transaction's
// writes add or remove.
func (t *txView) Topics() []storeview.TopicInfo {
	topics := t.Node.Topics()
	for tk := range t.seen {
		_, live, _ := t.written(tk[0], tk[1])
		_, was := t.Node.Get(tk[0], tk[1])
		d := 0
		switch {
		case live && !was:
			d = 1
		case was && !live:
			d = -1
		default:
			continue
		}
		i, ok := slices.BinarySearchFunc(topics, tk[0], func(ti storeview.TopicInfo, name string) int { return strings.Compare(ti.Name, name) })
		if !ok {
			topics = slices.Insert(topics, i, storeview.TopicInfo{Name: tk[0]})
		}
		topics[i].Keys += d
	}
	return topics
}

// watchedKey is a key WATCH saw: whether it held a value, and which.
type watchedKey struct {
	topic, key string
	found      bool
	e          storeview.Entry // its Value a copy
}

func cmdWatch(c *conn, a [][]byte) {
	if c.inMulti {
		c.err("ERR WATCH inside MULTI is not allowed")
		return
	}
	for _, name := range a[1:] {
		t, k := c.s.split(name)
		w := watchedKey{topic: strings.Clone(t), key: strings.Clone(k)}
		w.e, w.found = c.s.node.Entry(t, k)
		w.e.Value = bytes.Clone(w.e.Value)
		c.watched = append(c.watched, w)
	}
	c.ok()
}

func cmdUnwatch(c *conn, _ [][]byte) {
	c.watched = nil
	c.ok()
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
