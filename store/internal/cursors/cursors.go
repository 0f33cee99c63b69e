// Package cursors is the store's file of durable named cursors: fixed
// cells, each two CRC'd copies updated in place, with each cursor's owner.
package cursors

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"

	"github.com/cachecast/cachecast/store/internal/errs"
)

// Durable named cursors live in one mapped file of fixed cells, updated in
// place. Each cursor owns one 1 KiB cell made of two 512-byte copies; an
// update writes the older copy with the next generation, so the newer copy
// is never touched while it is the current one:
//
//	cell (1024 bytes) = copy A (512 bytes) | copy B (512 bytes)
//
//	copy:
//	0       4     5      6          7           8                 16                24
//	+-------+-----+------+----------+-----------+-----------------+-----------------+
//	| crc32c| ver | state| name len | topic len | generation u64  |   offset u64    |
//	+-------+-----+------+----------+-----------+-----------------+-----------------+
//	24                      152                     280         284     285      512
//	|   name (128 bytes)     |   topic (128 bytes)   | owner u32 | owned |  zero   |
//	+------------------------+-----------------------+-----------+-------+---------+
//
// Integers are little endian; the CRC-32C covers bytes [4, 512). state is
// 1 for a live cursor, 2 for a deleted one (the cell is free). owned is 1
// when owner holds the user ID that created the cursor; a cursor written
// before owners were recorded has 0 there, and the first user who sets it
// adopts it. On open, the
// valid copy with the higher generation is the cell's state; a copy with a
// bad CRC (a torn write) is ignored with a warning, and an all-zero copy is
// simply unused. So a crash in the middle of an update leaves the cursor at
// its previous value (or absent, if it was being created; or present, if it
// was being deleted), never at garbage. A set is durable after the next
// sync.
//
// If two cells claim the same name (which only damage can cause), the one
// with the higher generation wins and the other is marked deleted.
//
// File is that file, open. The cursors are also held in memory, so get
// and list read no map. All methods are safe for concurrent use.
type File struct {
	path string
	log  *zap.Logger

	mu     sync.Mutex
	f      *os.File
	data   []byte // the map; len(data) == len(cells) * cursorCellSize
	size   int64  // file size; may end in a partial cell
	cells  []cursorCell
	byName map[string]int // name -> cell
	dirty  bool           // written since the last sync
	grown  bool           // file size changed since the last sync
	closed bool

	// max bounds the live cursors, perOwner the live cursors of one owner;
	// 0: no bound. Set by the store after open.
	max, perOwner int
}

// Owner is who sets or deletes a cursor: uid owns the cursors it
// creates (when known); override lets it move or delete another user's.
type Owner struct {
	uid      uint32
	known    bool
	override bool
}

// System is the store's own caller: it keeps a cursor's owner and
// may change any cursor.
var System = Owner{override: true}

// User is the user uid as a caller: it owns the cursors it creates, and
// with override (an admin) may move or delete another user's.
func User(uid uint32, override bool) Owner { return Owner{uid: uid, known: true, override: override} }

// SetLimits bounds the live cursors (max) and the live cursors of one
// owner (perOwner); 0: no bound. The store calls it once, after Open.
func (c *File) SetLimits(max, perOwner int) {
	c.mu.Lock()
	c.max, c.perOwner = max, perOwner
	c.mu.Unlock()
}

// cursorCell is the in-memory state of one cell.
type cursorCell struct {
	gen    uint64 // generation of the current copy, 0 if none is valid
	cur    int    // copy holding the current state, -1 if none
	live   bool
	name   string
	topic  string
	offset uint64
	owner  uint32
	owned  bool
}

// Entry is one cursor as list returns it.
type Entry struct {
	Name   string
	Topic  string
	Offset uint64
	Owner  uint32
	Owned  bool
}

const (
	cursorCopySize = 512
	cursorCellSize = 2 * cursorCopySize
	cursorVersion  = 1
	cursorLive     = 1
	cursorDeleted  = 2
	cursorNameOff  = 24
	cursorTopicOff = cursorNameOff + maxCursorNameLen
	cursorOwnerOff = cursorTopicOff + maxCursorTopicLen
	cursorMinCells = 16

	// maxCursorNameLen and maxCursorTopicLen bound a cursor's name and
	// topic; longer ones are refused with ErrTooLarge.
	maxCursorNameLen  = 128
	maxCursorTopicLen = 128
)

// cursorCopy is a decoded copy.
type cursorCopy struct {
	state  byte
	gen    uint64
	offset uint64
	name   string
	topic  string
	owner  uint32
	owned  bool
}

// encodeCursorCopy fills b (one copy) with c and its CRC.
func encodeCursorCopy(b []byte, c cursorCopy) {
	_ = b[cursorCopySize-1]
	clear(b[4:cursorCopySize])
	b[4] = cursorVersion
	b[5] = c.state
	b[6] = byte(len(c.name))
	b[7] = byte(len(c.topic))
	binary.LittleEndian.PutUint64(b[8:], c.gen)
	binary.LittleEndian.PutUint64(b[16:], c.offset)
	copy(b[cursorNameOff:], c.name)
	copy(b[cursorTopicOff:], c.topic)
	if c.owned {
		binary.LittleEndian.PutUint32(b[cursorOwnerOff:], c.owner)
		b[cursorOwnerOff+4] = 1
	}
	binary.LittleEndian.PutUint32(b[0:], crc32.Checksum(b[4:cursorCopySize], fsys.Castagnoli))
}

// decodeCursorCopy checks and reads one copy; ok is false for a copy that
// is not valid (bad CRC, unknown version or state, lengths out of range).
func decodeCursorCopy(b []byte) (c cursorCopy, ok bool) {
	_ = b[cursorCopySize-1]
	if crc32.Checksum(b[4:cursorCopySize], fsys.Castagnoli) != binary.LittleEndian.Uint32(b[0:]) {
		return c, false
	}
	if b[4] != cursorVersion || (b[5] != cursorLive && b[5] != cursorDeleted) {
		return c, false
	}
	nl, tl := int(b[6]), int(b[7])
	if nl > maxCursorNameLen || tl > maxCursorTopicLen || b[5] == cursorLive && nl == 0 {
		return c, false
	}
	c.state = b[5]
	c.gen = binary.LittleEndian.Uint64(b[8:])
	c.offset = binary.LittleEndian.Uint64(b[16:])
	c.name = string(b[cursorNameOff : cursorNameOff+nl])
	c.topic = string(b[cursorTopicOff : cursorTopicOff+tl])
	c.owned = b[cursorOwnerOff+4] == 1
	if c.owned {
		c.owner = binary.LittleEndian.Uint32(b[cursorOwnerOff:])
	}
	return c, c.gen != 0
}

// Open opens the cursors file at path, creating it if needed.
func Open(path string, log *zap.Logger) (*File, error) {
	if log == nil {
		log = zap.NewNop()
	}
	c := &File{path: path, log: log, byName: make(map[string]int)}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fsys.FileError("open", path, err)
	}
	c.f = f
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsys.FileError("stat", path, err)
	}
	n := int(st.Size() / cursorCellSize)
	if n == 0 {
		// New (or too short to hold a cell: nothing to keep).
		c.size = st.Size()
		if err := c.resize(cursorMinCells); err != nil {
			f.Close()
			return nil, err
		}
		if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	c.size = st.Size()
	if st.Size()%cursorCellSize != 0 {
		log.Warn("cursor file has a partial cell at its end, ignoring it",
			zap.String("path", path), zap.Int64("size", st.Size()))
	}
	if c.data, err = fsys.Map(f, n*cursorCellSize); err != nil {
		f.Close()
		return nil, err
	}
	c.cells = make([]cursorCell, n)
	if err := fsys.Guard(c.load); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// load reads every cell of the map into memory.
func (c *File) load() error {
	for i := range c.cells {
		cell := &c.cells[i]
		cell.cur = -1
		for k := 0; k < 2; k++ {
			b := c.copyBytes(i, k)
			cp, ok := decodeCursorCopy(b)
			if !ok {
				if !fsys.IsZero(b) {
					c.log.Warn("ignoring a damaged cursor slot (torn write?)",
						zap.String("path", c.path), zap.Int("cell", i), zap.Int("copy", k))
				}
				continue
			}
			if cell.cur < 0 || cp.gen > cell.gen {
				cell.cur, cell.gen = k, cp.gen
				cell.live = cp.state == cursorLive
				cell.name, cell.topic, cell.offset = cp.name, cp.topic, cp.offset
				cell.owner, cell.owned = cp.owner, cp.owned
			}
		}
		if !cell.live {
			continue
		}
		j, dup := c.byName[cell.name]
		if !dup {
			c.byName[cell.name] = i
			continue
		}
		// Two cells for one name: keep the newer, delete the other.
		loser := i
		if cell.gen > c.cells[j].gen {
			loser = j
			c.byName[cell.name] = i
		}
		c.log.Warn("cursor stored twice, keeping the newer",
			zap.String("path", c.path), zap.String("cursor", cell.name), zap.Int("cell", loser))
		if err := c.writeCell(loser, cursorCopy{state: cursorDeleted}); err != nil {
			return err
		}
	}
	return nil
}

func (c *File) copyBytes(cell, k int) []byte {
	off := cell*cursorCellSize + k*cursorCopySize
	return c.data[off : off+cursorCopySize]
}

// writeCell writes cp with the cell's next generation into the copy that
// is not current, then makes it current.
func (c *File) writeCell(i int, cp cursorCopy) error {
	cell := &c.cells[i]
	k := 0
	if cell.cur == 0 {
		k = 1
	}
	cp.gen = cell.gen + 1
	if err := fsys.Guard(func() error {
		encodeCursorCopy(c.copyBytes(i, k), cp)
		return nil
	}); err != nil {
		return fmt.Errorf("%w (cursor file %s)", err, c.path)
	}
	cell.cur, cell.gen = k, cp.gen
	cell.live = cp.state == cursorLive
	cell.name, cell.topic, cell.offset = cp.name, cp.topic, cp.offset
	cell.owner, cell.owned = cp.owner, cp.owned
	c.dirty = true
	return nil
}

// resize grows the file to n cells and maps it again. The bytes past the
// last whole cell (a partial cell) are zeroed so they read as unused.
func (c *File) resize(n int) error {
	whole := int64(len(c.cells)) * cursorCellSize
	if c.size > whole {
		if err := fsys.ZeroRange(c.f, whole, c.size-whole); err != nil {
			return err
		}
	}
	if err := fsys.Allocate(c.f, int64(n)*cursorCellSize); err != nil {
		return err
	}
	c.size = max(c.size, int64(n)*cursorCellSize)
	if err := c.f.Sync(); err != nil {
		return fsys.FileError("fsync", c.path, err)
	}
	if c.data != nil {
		// Push what the old map holds to the file before dropping it.
		if err := fsys.SyncRange(c.data, 0, len(c.data)); err != nil {
			return err
		}
		if err := fsys.Unmap(c.data); err != nil {
			return err
		}
		c.data = nil
	}
	data, err := fsys.Map(c.f, n*cursorCellSize)
	if err != nil {
		return err
	}
	c.data = data
	for i := len(c.cells); i < n; i++ {
		c.cells = append(c.cells, cursorCell{cur: -1})
	}
	c.grown = true
	return nil
}

// Get returns the cursor's topic and offset.
func (c *File) Get(name string) (topic string, offset uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.byName[name]
	if !ok {
		return "", 0, false
	}
	return c.cells[i].topic, c.cells[i].offset, true
}

// Lookup returns one cursor as list does.
func (c *File) Lookup(name string) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.byName[name]
	if !ok {
		return Entry{}, false
	}
	cell := &c.cells[i]
	return Entry{Name: name, Topic: cell.topic, Offset: cell.offset, Owner: cell.owner, Owned: cell.owned}, true
}

// Set creates or moves a cursor as the store itself (its owner stays).
func (c *File) Set(name, topic string, offset uint64) error {
	return c.SetAs(System, name, topic, offset)
}

// SetAs creates or moves a cursor for who. A cursor another user owns is
// ErrNotOwner unless who overrides; a new cursor past the bounds is
// ErrCursorLimit. It is durable after the next sync.
func (c *File) SetAs(who Owner, name, topic string, offset uint64) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty cursor name", record.ErrInvalid)
	case len(name) > maxCursorNameLen:
		return fmt.Errorf("%w: cursor name of %d bytes, at most %d", record.ErrTooLarge, len(name), maxCursorNameLen)
	case len(topic) > maxCursorTopicLen:
		return fmt.Errorf("%w: cursor topic of %d bytes, at most %d", record.ErrTooLarge, len(topic), maxCursorTopicLen)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errs.ErrClosed
	}
	cp := cursorCopy{state: cursorLive, name: name, topic: topic, offset: offset, owner: who.uid, owned: who.known}
	i, ok := c.byName[name]
	if ok {
		cell := &c.cells[i]
		if err := cell.mayChange(who, name); err != nil {
			return err
		}
		if cell.owned {
			cp.owner, cp.owned = cell.owner, true
		}
		if cell.topic == topic && cell.offset == offset && cell.owned == cp.owned {
			return nil
		}
	} else {
		if err := c.checkLimits(who, name); err != nil {
			return err
		}
		var err error
		if i, err = c.freeCell(); err != nil {
			return err
		}
	}
	if err := c.writeCell(i, cp); err != nil {
		return err
	}
	c.byName[name] = i
	return nil
}

// mayChange reports whether who may move or delete the cell's cursor.
func (cell *cursorCell) mayChange(who Owner, name string) error {
	if who.override || !cell.owned || who.known && who.uid == cell.owner {
		return nil
	}
	return fmt.Errorf("%w: cursor %q belongs to uid %d", errs.ErrNotOwner, name, cell.owner)
}

// checkLimits refuses a new cursor past max or perOwner.
func (c *File) checkLimits(who Owner, name string) error {
	if c.max > 0 && len(c.byName) >= c.max {
		return fmt.Errorf("%w: cursor %q would be cursor %d of at most %d on this node (--max-cursors); delete unused ones",
			errs.ErrCursorLimit, name, len(c.byName)+1, c.max)
	}
	if c.perOwner > 0 && who.known && !who.override {
		n := 0
		for _, i := range c.byName {
			if c.cells[i].owned && c.cells[i].owner == who.uid {
				n++
			}
		}
		if n >= c.perOwner {
			return fmt.Errorf("%w: uid %d already has %d cursors, at most %d (--max-cursors-per-uid); delete unused ones",
				errs.ErrCursorLimit, who.uid, n, c.perOwner)
		}
	}
	return nil
}

// freeCell returns a cell holding no live cursor, growing the file if all
// are taken.
func (c *File) freeCell() (int, error) {
	for i := range c.cells {
		if !c.cells[i].live {
			return i, nil
		}
	}
	i := len(c.cells)
	if err := c.resize(2 * len(c.cells)); err != nil {
		return 0, err
	}
	return i, nil
}

// Delete removes a cursor as the store itself; deleting an unknown one is
// not an error.
func (c *File) Delete(name string) error {
	return c.DeleteAs(System, name)
}

// DeleteAs removes a cursor for who: ErrNotOwner when another user owns
// it and who does not override. Deleting an unknown one is not an error.
func (c *File) DeleteAs(who Owner, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errs.ErrClosed
	}
	i, ok := c.byName[name]
	if !ok {
		return nil
	}
	if err := c.cells[i].mayChange(who, name); err != nil {
		return err
	}
	if err := c.writeCell(i, cursorCopy{state: cursorDeleted}); err != nil {
		return err
	}
	delete(c.byName, name)
	return nil
}

// List returns every cursor, sorted by name.
func (c *File) List() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Entry, 0, len(c.byName))
	for name, i := range c.byName {
		cell := &c.cells[i]
		out = append(out, Entry{Name: name, Topic: cell.topic, Offset: cell.offset, Owner: cell.owner, Owned: cell.owned})
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Sync makes every change so far durable.
func (c *File) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errs.ErrClosed
	}
	return c.syncLocked()
}

func (c *File) syncLocked() error {
	if c.dirty {
		if err := fsys.SyncRange(c.data, 0, len(c.data)); err != nil {
			return fmt.Errorf("%w (cursor file %s)", err, c.path)
		}
		c.dirty = false
	}
	if c.grown {
		if err := c.f.Sync(); err != nil {
			return fsys.FileError("fsync", c.path, err)
		}
		c.grown = false
	}
	return nil
}

// Close syncs, unmaps and closes the file.
func (c *File) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.data != nil {
		err = c.syncLocked()
		if uerr := fsys.Unmap(c.data); err == nil {
			err = uerr
		}
		c.data = nil
	}
	if cerr := c.f.Close(); err == nil && cerr != nil {
		err = fsys.FileError("close", c.path, cerr)
	}
	return err
}
