package session

import (
	"slices"
	"strings"
	"time"

	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
)

// TxView is a transaction's view while EXEC runs it: the node's, under
// the writes of the transaction's commands so far, which it keeps (msgs)
// for one publish. Reads of a key the transaction wrote see its latest
// write; scheduled records and cancels change no read, as in the view.
// A key the transaction wrote has no stamp (its records have none yet):
// an expiry change of it writes the key's value itself then, in the same
// batch; an increment names the batch's message that wrote it
// (WrittenBy, record.Message.CountOnEarlier). An increment of a version
// the node holds keeps that version's stamp, so that the next one counts
// on the same version.
type TxView struct {
	View
	now  func() time.Time
	msgs []record.Message
	// seen is what a read of each key the transaction wrote sees.
	seen map[[2]string]txSeen
}

// NewTx is the view of a transaction over v whose reads of its own
// writes are at the instant at (EXEC's start).
func NewTx(v View, at time.Time) *TxView {
	return &TxView{View: v, now: func() time.Time { return at }, seen: make(map[[2]string]txSeen)}
}

// Msgs are the transaction's writes so far, for its one publish.
func (t *TxView) Msgs() []record.Message { return t.msgs }

// txSeen is a key as the transaction's writes left it.
type txSeen struct {
	e    storeview.Entry
	live bool
	// by is the message (1-based; 0: none) that wrote the version a read
	// sees, a delete when deleted (WrittenBy).
	by      int
	deleted bool
}

// Add keeps msgs, checked one by one (Host.PublishBatch), for the
// transaction's publish; the batch's own checks (its size, the role)
// come with the publish.
func (t *TxView) Add(msgs []record.Message) string {
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
		s := txSeen{e: e, live: !m.Delete, by: len(t.msgs), deleted: m.Delete}
		if m.ExpiryChange() {
			s.by = 0 // a version the node holds, not one of the transaction
		}
		t.seen[[2]string{m.Topic, m.Key}] = s
	}
	return ""
}

// Counted makes a read of (topic, key) see e, the entry an increment
// left; the version it counts on stays the one that was written.
func (t *TxView) Counted(topic, key string, e storeview.Entry) {
	s := t.seen[[2]string{topic, key}]
	s.e, s.live = e, true
	t.seen[[2]string{topic, key}] = s
}

// WrittenBy is the message of the transaction (1-based; 0: none) that
// wrote the version of (topic, key) a read sees, and whether it was a
// delete: an increment counts on it (command.Batch).
func (t *TxView) WrittenBy(topic, key string) (msg int, deleted bool) {
	s := t.seen[[2]string{topic, key}]
	return s.by, s.deleted
}

// written is what a read of (topic, key) sees after the transaction's
// writes: found says whether it wrote the key, live whether the key
// holds a value after them.
func (t *TxView) written(topic, key string) (e storeview.Entry, live, found bool) {
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
func (t *TxView) Entry(topic, key string) (storeview.Entry, bool) {
	if e, live, found := t.written(topic, key); found {
		return e, live
	}
	return t.View.Entry(topic, key)
}

// Counting is the node's Counting under the transaction's writes: a key
// the transaction wrote has no Absence (a write of its own, not stamped
// yet, which an increment cannot name).
func (t *TxView) Counting(topic, key string) (storeview.Entry, bool) {
	if e, live, found := t.written(topic, key); found {
		return e, live
	}
	return t.View.Counting(topic, key)
}

// Get is the node's Get under the transaction's writes.
func (t *TxView) Get(topic, key string) ([]byte, bool) {
	e, ok := t.Entry(topic, key)
	return e.Value, ok
}

// GetInto is the node's GetInto under the transaction's writes.
func (t *TxView) GetInto(buf []byte, topic, key string) ([]byte, []byte, bool) {
	if e, live, found := t.written(topic, key); found {
		return e.Value, buf, live
	}
	return t.View.GetInto(buf, topic, key)
}

// GetMany is the node's GetMany under the transaction's writes.
func (t *TxView) GetMany(topics, keys []string, entries []storeview.Entry, found []bool, buf []byte) []byte {
	buf = t.View.GetMany(topics, keys, entries, found, buf)
	for i := range keys {
		if e, live, ok := t.written(topics[i], keys[i]); ok {
			entries[i], found[i] = e, live
		}
	}
	return buf
}

// Keys is the node's Keys under the transaction's writes: the node's
// page, asked for as many more keys as the transaction deleted, less
// those, plus the keys the transaction set that the page's range holds.
func (t *TxView) Keys(topic, prefix, after string, limit int) []string {
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
	page := t.View.Keys(topic, prefix, after, limit+len(deleted))
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
func (t *TxView) Topics() []storeview.TopicInfo {
	topics := t.View.Topics()
	for tk := range t.seen {
		_, live, _ := t.written(tk[0], tk[1])
		_, was := t.View.Get(tk[0], tk[1])
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
