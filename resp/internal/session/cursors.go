package session

import "sync"

// Cursors maps SCAN cursors (numbers, as clients expect) onto positions:
// a topic and the last key seen. It keeps the last CursorSlots cursors of
// the whole server: a cursor older than that is unknown and the scan
// starts again. Safe for concurrent use.
type Cursors struct {
	mu    sync.Mutex
	next  uint64
	slots [CursorSlots]cursor
}

// CursorSlots is how many cursors the server keeps.
const CursorSlots = 4096

// cursor is where a SCAN or HSCAN stopped.
type cursor struct {
	id           uint64
	topic, after string
}

// Put keeps a position and returns its cursor.
func (t *Cursors) Put(topic, after string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	id := t.next
	t.slots[id%CursorSlots] = cursor{id: id, topic: topic, after: after}
	return id
}

// Get is the position of cursor id; false when the server no longer
// keeps it (or never handed it out).
func (t *Cursors) Get(id uint64) (topic, after string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.slots[id%CursorSlots]
	return p.topic, p.after, p.id == id && id != 0
}
