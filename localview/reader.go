package localview

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Reader reads a view file. Open maps it read-only; every read is a few
// loads from the mapping, with no system call and no lock shared with the
// writer. A Reader follows the file by itself: when the writer supersedes
// the generation it maps (growth, compaction, a daemon restart), the next
// call maps the new one.
//
// A Reader is not safe for concurrent use: give each goroutine its own
// (Open costs one open, one fstat and one mmap; the pages are shared).
// That is what lets it unmap an old generation without a reference count
// on the read path.
type Reader struct {
	path   string
	m      []byte
	dev    uint64
	ino    uint64
	gen    uint64
	mask   int
	slots  int // offset of the slot table
	arena  int // first byte of the arena
	end    int // one past the arena's last byte
	closed bool

	topics topicCache

	// reads counts Gets, for the check of the path every orphanCheckEvery
	// reads; nextStat is when that check may stat the path again.
	reads    uint64
	nextStat int64

	// many is GetMany's scratch, kept for the next call; sink keeps the
	// loads that only warm the cache from being dropped.
	many []manyKey
	sink uint64
}

// A Reader notices a file that is no longer the path's (its runtime
// directory deleted, the daemon killed and started again on a new file)
// although nobody marked it superseded: every orphanCheckEvery reads it
// compares the writer's heartbeat with the clock, and when the heartbeat
// is older than orphanAfter (the writer beats every 50ms) it stats the
// path, at most once every orphanStatEvery: another file there is mapped,
// no file there makes the read ErrNotReady. A view that is current costs
// one clock read every 64 reads and no system call. A read of a file that
// is closed or not ready looks at the path too (current).
const (
	orphanCheckEvery = 64
	orphanAfter      = time.Second
	orphanStatEvery  = 100 * time.Millisecond
)

// maxReopens bounds how many generations one call follows: a writer
// replacing files faster than a reader maps them is a broken writer.
const maxReopens = 8

// A reader retries an entry that is being written: spinning first (a
// write takes well under a microsecond), then yielding (the writer may
// have been descheduled in the middle of one), and gives up with ErrBusy
// after busyTimeout: an entry odd for that long was left by a writer that
// died. A variable so that the fuzz test can shorten it.
var busyTimeout = time.Second

const spinTries = 64

// busyWait waits a little for a writer in an entry; false once the entry
// has been busy for busyTimeout (started is set on the first call).
func busyWait(try int, started *time.Time) bool {
	switch {
	case try < spinTries:
		return true
	case try == spinTries:
		*started = time.Now()
	case time.Since(*started) > busyTimeout:
		return false
	}
	runtime.Gosched()
	return true
}

// Open maps the view file at path read-only. A file that is not a view
// (or is damaged) gives ErrCorrupt; a view that is not ready yet opens
// fine, and its reads report ErrNotReady until it is.
func Open(path string) (*Reader, error) {
	r := &Reader{path: path, topics: topicCache{n: -1}}
	if err := r.attach(); err != nil {
		return nil, err
	}
	return r, nil
}

// attach maps the file at r.path and checks its geometry.
func (r *Reader) attach() error {
	// O_NONBLOCK: a FIFO put at the path must not hang the reader (fstat
	// refuses it next); it changes nothing for a regular file.
	f, err := os.OpenFile(r.path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("localview: open: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("localview: stat %s: %w", r.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < headerSize || st.Size > maxFileSize {
		return fmt.Errorf("%w: %s is not a view file (%d bytes)", ErrCorrupt, r.path, st.Size)
	}
	m, err := mapFile(int(f.Fd()), int(st.Size), unix.PROT_READ)
	if err != nil {
		return fmt.Errorf("localview: mmap %s: %w", r.path, err)
	}
	var g geometry
	err = guard(func() error {
		var err error
		g, err = checkGeometry(m)
		return err
	})
	if err != nil {
		unix.Munmap(m)
		return fmt.Errorf("%w (%s)", err, r.path)
	}
	if r.m != nil {
		unix.Munmap(r.m)
	}
	r.m, r.dev, r.ino = m, st.Dev, st.Ino
	r.gen, r.mask, r.slots, r.arena, r.end = g.gen, g.slotCount-1, headerSize, g.arenaOff, g.arenaEnd
	return nil
}

type geometry struct {
	gen                           uint64
	slotCount, arenaOff, arenaEnd int
}

// checkGeometry checks the header's fixed fields against the mapping m.
// The writer never changes them in a generation, so the reader checks
// them once and keeps them.
func checkGeometry(m []byte) (geometry, error) {
	bad := func(what string) (geometry, error) {
		return geometry{}, fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	size := uint64(len(m))
	switch {
	case string(m[offMagic:offMagic+8]) != magic:
		return bad("bad magic")
	case binary.LittleEndian.Uint32(m[offVersion:]) != formatVersion:
		return bad(fmt.Sprintf("format version %d, this reader knows %d", binary.LittleEndian.Uint32(m[offVersion:]), formatVersion))
	case binary.LittleEndian.Uint32(m[offHeaderSize:]) != headerSize:
		return bad("header size")
	}
	fileSize, slotsOff, slots := le64(m, offFileSize), le64(m, offSlotsOff), le64(m, offSlotCount)
	arenaOff, arenaSize := le64(m, offArenaOff), le64(m, offArenaSize)
	switch {
	case fileSize > size:
		return bad(fmt.Sprintf("header says %d bytes, the file has %d", fileSize, size))
	case slotsOff != headerSize:
		return bad("slot table offset")
	case slots == 0 || slots&(slots-1) != 0 || slots > size/8:
		return bad(fmt.Sprintf("slot count %d", slots))
	case arenaOff < headerSize+8*slots || arenaOff%8 != 0 || arenaOff > fileSize:
		return bad(fmt.Sprintf("arena offset %d", arenaOff))
	case arenaSize > fileSize-arenaOff:
		return bad(fmt.Sprintf("arena size %d", arenaSize))
	}
	return geometry{
		gen:       le64(m, offGeneration),
		slotCount: int(slots),
		arenaOff:  int(arenaOff),
		arenaEnd:  int(arenaOff + arenaSize),
	}, nil
}

// guard runs fn with a fault on a mapped page (the file truncated under
// the mapping) turned into ErrCorrupt instead of a crash.
func guard(fn func() error) (err error) {
	defer func(old bool) {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			err = faultError(p)
		}
	}(debug.SetPanicOnFault(true))
	return fn()
}

// faultError is the ErrCorrupt of a fault on a mapped page, recovered as
// p by a reader's deferred function (which must call recover itself);
// any other panic goes on.
func faultError(p any) error {
	re, ok := p.(interface{ Addr() uintptr })
	if !ok {
		panic(p)
	}
	return fmt.Errorf("%w: fault reading the mapping at %#x (file truncated?)", ErrCorrupt, re.Addr())
}

// current checks the state word: it follows a superseded generation and
// reports a view that is not ready.
func (r *Reader) current() error {
	if r.closed {
		return ErrClosed
	}
	for range maxReopens {
		s := load64(r.m, offState)
		switch {
		case s&stateSuperseded != 0:
			if err := r.attach(); err != nil {
				return fmt.Errorf("%w: generation %d superseded, the next: %w", ErrNotReady, r.gen, err)
			}
			continue
		case s&(stateClosed|stateReady) != stateReady:
			// A closed or not ready file may be one nobody will mark
			// superseded (its daemon started over on a new file after
			// it was unlinked): look at the path now and then.
			if moved, _ := r.moved(); moved && r.attach() == nil {
				continue
			}
			if s&stateClosed != 0 {
				return fmt.Errorf("%w: the daemon closed it", ErrNotReady)
			}
			if away(r.m) {
				return fmt.Errorf("%w: %w", ErrNotReady, ErrAway)
			}
			return ErrNotReady
		}
		return nil
	}
	return fmt.Errorf("%w: more than %d generations in one read", ErrNotReady, maxReopens)
}

// away says the header counts no alive member of those known: the node
// left its cluster (ErrAway).
func away(m []byte) bool {
	cl := load64(m, offAlive)
	return uint32(cl) == 0 && cl>>32 != 0
}

// moved stats the path, at most once every orphanStatEvery, and reports
// whether it names another file than the mapped one; an error when there
// is no file there.
func (r *Reader) moved() (bool, error) {
	now := time.Now().UnixNano()
	if now < r.nextStat {
		return false, nil
	}
	r.nextStat = now + int64(orphanStatEvery)
	var st unix.Stat_t
	if err := unix.Stat(r.path, &st); err != nil {
		return false, err
	}
	return st.Dev != r.dev || st.Ino != r.ino, nil
}

// Get returns the value of (topic, key), with its tag and stamp, in new
// memory. A deleted or unknown key gives ErrNotFound.
func (r *Reader) Get(topic, key string) (value []byte, tag string, st Stamp, err error) {
	var buf []byte
	v, t, st, err := r.GetInto(buf, topic, key)
	if err != nil {
		return nil, "", Stamp{}, err
	}
	return v, string(t), st, nil
}

// GetInto is Get into the caller's buffer: tag and value are copied into
// buf, tag first, and returned as slices of it, so a caller that reuses
// its buffer allocates nothing. When buf is too short a larger one is
// made; tag[:0] is always the buffer used (tag starts it and keeps its
// capacity), the one to pass next time.
func (r *Reader) GetInto(buf []byte, topic, key string) (value, tag []byte, st Stamp, err error) {
	defer func(old bool) {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			value, tag, st, err = nil, nil, Stamp{}, faultError(p)
		}
	}(debug.SetPanicOnFault(true))
	if r.closed || load64(r.m, offState)&(stateReady|stateSuperseded|stateClosed) != stateReady {
		if err := r.current(); err != nil {
			return nil, nil, Stamp{}, err
		}
	}
	if r.reads++; r.reads%orphanCheckEvery == 0 {
		if err := r.checkOrphan(); err != nil {
			return nil, nil, Stamp{}, err
		}
	}
	h := r.topics.hash(topic, key)
	if value, tag, st, ok := r.getFast(buf, h, topic, key); ok {
		return value, tag, st, nil
	}
	off, c, err := r.lookup(h, topic, key)
	if err != nil {
		return nil, nil, Stamp{}, err
	}
	value, tag, st, _, err = r.readRecord(off, c, dataAt(off, len(topic), len(key)), &buf, 0)
	return value, tag, st, err
}

// getFast is GetInto's common case in one piece, with the checks of
// lookup and readRecord: the key in its first slot, its record not being
// written, live, and buf large enough. Anything else (ok false) takes
// the general path, which reads again from the slot.
func (r *Reader) getFast(buf []byte, h uint32, topic, key string) (value, tag []byte, st Stamp, ok bool) {
	m := r.m
	s := load64(m, r.slots+8*(int(h)&r.mask))
	off := int(uint32(s)) * 8
	k, kl := off+recordHeader, len(topic)+len(key)
	if uint32(s>>32) != h || off < r.arena || k+kl > r.end {
		return nil, nil, Stamp{}, false
	}
	fixed := load64(m, off+recCap) // immutable: cap, topic and key lengths
	c, data := int(uint32(fixed)), k+align8(kl)
	if int(uint16(fixed>>32)) != len(topic) || int(uint16(fixed>>48)) != len(key) || c%8 != 0 || c > r.end-data ||
		string(m[k:k+len(topic)]) != topic || string(m[k+len(topic):k+kl]) != key {
		return nil, nil, Stamp{}, false
	}
	v1 := load64(m, off+recVersion)
	st = Stamp{HLC: load64(m, off+recHLC), Origin: load64(m, off+recOrigin), Seq: load64(m, off+recSeq)}
	lw := load64(m, off+recValueLen)
	vl, tl := int(uint32(lw)), int(uint16(lw>>32))
	n := vl + tl
	if v1&1 != 0 || uint16(lw>>48)&flagDeleted != 0 || n > c || n > cap(buf) {
		return nil, nil, Stamp{}, false
	}
	b := buf[:n]
	loadWords(b, m, data)
	if load64(m, off+recVersion) != v1 {
		return nil, nil, Stamp{}, false
	}
	return b[tl:n:n], b[:tl], st, true
}

// checkOrphan is the check of the path that a read makes every
// orphanCheckEvery reads (see orphanAfter).
func (r *Reader) checkOrphan() error {
	if time.Now().UnixNano()-int64(load64(r.m, offHeartbeat)) < int64(orphanAfter) {
		return nil
	}
	moved, err := r.moved()
	switch {
	case err != nil:
		return fmt.Errorf("%w: the writer's heartbeat stopped and %s is gone: %w", ErrNotReady, r.path, err)
	case !moved:
		return nil // still the path's file (or looked at a moment ago): a stuck writer is Fresh's to report
	}
	if err := r.attach(); err != nil {
		return fmt.Errorf("%w: another file is at %s: %w", ErrNotReady, r.path, err)
	}
	return r.current()
}

// lookup walks the key's probe path: the offset of its record and the
// record's capacity, or ErrNotFound at the first empty slot.
func (r *Reader) lookup(h uint32, topic, key string) (off, capacity int, err error) {
	m := r.m
	for n, i := 0, int(h)&r.mask; n <= r.mask; n, i = n+1, (i+1)&r.mask {
		s := load64(m, r.slots+8*i)
		if s == 0 {
			return 0, 0, ErrNotFound
		}
		if uint32(s>>32) != h {
			continue
		}
		off = int(uint32(s)) * 8
		if c := r.keyRecord(off, topic, key); c >= 0 {
			return off, c, nil
		}
		if _, _, _, err := r.recordAt(uint32(s)); err != nil {
			return 0, 0, err
		}
	}
	return 0, 0, ErrNotFound
}

// keyRecord is the capacity of the record at off when it is (topic,
// key)'s and inside the arena, else -1 (recordAt tells a record that
// overruns the arena). The topic and key are right after the fixed
// fields, and are compared at the wanted lengths before those are
// loaded: every address is known from the offset alone, so the record's
// cache lines are fetched together, not one after another.
func (r *Reader) keyRecord(off int, topic, key string) int {
	m := r.m
	k := off + recordHeader
	if off < r.arena || k+len(topic)+len(key) > r.end ||
		string(m[k:k+len(topic)]) != topic || string(m[k+len(topic):k+len(topic)+len(key)]) != key {
		return -1
	}
	fixed := load64(m, off+recCap) // immutable: cap, topic and key lengths
	c := int(uint32(fixed))
	if int(uint16(fixed>>32)) != len(topic) || int(uint16(fixed>>48)) != len(key) ||
		c%8 != 0 || c > r.end-k-align8(len(topic)+len(key)) {
		return -1
	}
	return c
}

// recordAt checks the record a slot names against the arena and returns
// its offset and its topic's and key's lengths.
func (r *Reader) recordAt(slot uint32) (off, topicLen, keyLen int, err error) {
	off = int(slot) * 8
	if off < r.arena || off > r.end-recordHeader {
		return 0, 0, 0, fmt.Errorf("%w: a slot points at %d, outside the arena [%d, %d)", ErrCorrupt, off, r.arena, r.end)
	}
	fixed := load64(r.m, off+recCap) // immutable: cap, topic and key lengths
	c, tl, kl := int(uint32(fixed)), int(uint16(fixed>>32)), int(uint16(fixed>>48))
	if c%8 != 0 || c > r.end-off-recordHeader || align8(tl+kl) > r.end-off-recordHeader-c {
		return 0, 0, 0, fmt.Errorf("%w: the record at %d overruns the arena", ErrCorrupt, off)
	}
	return off, tl, kl, nil
}

// readRecord copies the record at off (checked: capacity c, its data at
// data) under its seqlock: version, fields, data, version again; a torn
// copy is retried. The tag and value go to (*bufp)[at:], which grows (at
// most twice what it needs: GetMany's reads follow) when too short. It
// returns the version it read (for a deleted record too, with
// ErrNotFound).
func (r *Reader) readRecord(off, c, data int, bufp *[]byte, at int) (value, tag []byte, st Stamp, version uint64, err error) {
	m := r.m
	var started time.Time
	for try := 0; busyWait(try, &started); try++ {
		v1 := load64(m, off+recVersion)
		if v1&1 != 0 {
			continue
		}
		st = Stamp{HLC: load64(m, off+recHLC), Origin: load64(m, off+recOrigin), Seq: load64(m, off+recSeq)}
		lw := load64(m, off+recValueLen)
		vl, tl, flags := int(uint32(lw)), int(uint16(lw>>32)), uint16(lw>>48)
		if vl+tl > c {
			if load64(m, off+recVersion) == v1 {
				return nil, nil, Stamp{}, 0, fmt.Errorf("%w: the record at %d holds %d bytes in %d", ErrCorrupt, off, vl+tl, c)
			}
			continue
		}
		if flags&flagDeleted != 0 {
			if load64(m, off+recVersion) == v1 {
				return nil, nil, Stamp{}, v1, ErrNotFound
			}
			continue
		}
		n := tl + vl
		if cap(*bufp) < at+n {
			grown := make([]byte, at+n, at+n+at)
			copy(grown, (*bufp)[:at])
			*bufp = grown
		}
		buf := (*bufp)[at : at+n]
		loadWords(buf, m, data)
		if load64(m, off+recVersion) == v1 {
			return buf[tl:n:n], buf[:tl], st, v1, nil
		}
	}
	return nil, nil, Stamp{}, 0, fmt.Errorf("%w: %w: the record at %d stayed odd for %s", ErrNotReady, ErrBusy, off, busyTimeout)
}

// loadWords copies len(dst) bytes from m at off (8-aligned, with the last
// word inside m) so that the copy stays between the two loads of the
// version: on x86 (tso) loads are not reordered with loads and a plain
// copy does; elsewhere with atomic 64-bit loads (acquire loads on arm64).
func loadWords(dst []byte, m []byte, off int) {
	if tso {
		copy(dst, m[off:])
		return
	}
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], load64(m, off+i))
	}
	if i < len(dst) {
		x := load64(m, off+i)
		for j := 0; i+j < len(dst); j++ {
			dst[i+j] = byte(x >> (8 * j))
		}
	}
}

// Keys returns the live keys of topic, sorted.
func (r *Reader) Keys(topic string) ([]string, error) {
	var keys []string
	err := r.Scan(topic, func(key string, _, _ []byte, _ Stamp) bool {
		keys = append(keys, key)
		return true
	})
	sort.Strings(keys)
	return keys, err
}

// Scan calls fn with every live key of topic, its value, tag and stamp, in
// the table's order (not sorted), until fn returns false. value and tag are
// valid only during the call. A key changed during the scan is seen once,
// with a value it held during the scan.
func (r *Reader) Scan(topic string, fn func(key string, value, tag []byte, st Stamp) bool) error {
	return guard(func() error {
		if err := r.current(); err != nil {
			return err
		}
		m := r.m
		var buf []byte
		for i := 0; i <= r.mask; i++ {
			s := load64(m, r.slots+8*i)
			if s == 0 {
				continue
			}
			off, tl, kl, err := r.recordAt(uint32(s))
			if err != nil {
				return err
			}
			k := off + recordHeader
			if tl != len(topic) || string(m[k:k+tl]) != topic {
				continue
			}
			v, t, st, _, err := r.readRecord(off, int(uint32(load64(m, off+recCap))), dataAt(off, tl, kl), &buf, 0)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if !fn(string(m[k+tl:k+tl+kl]), v, t, st) {
				return nil
			}
		}
		return nil
	})
}

// Status is what the header tells of the view and its daemon.
type Status struct {
	// Generation is the number of the mapped file.
	Generation uint64
	// Ready is false while the daemon loads the view, after it stopped, or
	// after it lost the view.
	Ready bool
	// Heartbeat is when the writer last said the view was current.
	Heartbeat time.Time
	// WriterPID is the daemon's process ID.
	WriterPID int
	// Keys is the number of live keys.
	Keys int
	// Changes counts the changes the writer applied since it started.
	Changes uint64
	// LastChange is when the last change was applied, to within the
	// writer's heartbeat (50ms for the daemon).
	LastChange time.Time
	// Alive and Members are the cluster's alive and known members, this
	// node included (0 and 0 for a lone node).
	Alive, Members int
	// Away: the node left its cluster, out of contact with its fleet too
	// long (not ready, Alive 0 of Members; reads fail with ErrAway).
	Away bool
	// Origins maps each origin to the greatest HLC applied from it.
	Origins map[uint64]uint64
	// Size is the file's size in bytes.
	Size int
}

// Status reads the header (under its seqlock) and follows a superseded
// generation first. It reports the state even when the view is not ready.
func (r *Reader) Status() (Status, error) {
	var out Status
	err := guard(func() error {
		if err := r.current(); err != nil && !errors.Is(err, ErrNotReady) {
			return err
		}
		m := r.m
		var started time.Time
		for try := 0; busyWait(try, &started); try++ {
			v1 := load64(m, offMetaSeq)
			if v1&1 != 0 {
				continue
			}
			s := load64(m, offState)
			out = Status{
				Generation: r.gen,
				Ready:      s&(stateReady|stateClosed|stateSuperseded) == stateReady,
				Heartbeat:  time.Unix(0, int64(load64(m, offHeartbeat))),
				WriterPID:  int(load64(m, offWriterPID)),
				Keys:       int(load64(m, offLiveKeys)),
				Changes:    load64(m, offChanges),
				LastChange: time.Unix(0, int64(load64(m, offLastChange))),
				Size:       len(m),
			}
			cl := load64(m, offAlive)
			out.Alive, out.Members = int(uint32(cl)), int(cl>>32)
			out.Away = !out.Ready && out.Alive == 0 && out.Members > 0
			n := min(int(load64(m, offOrigins)), MaxOrigins)
			out.Origins = make(map[uint64]uint64, n)
			for i := range n {
				out.Origins[load64(m, offOriginList+16*i)] = load64(m, offOriginList+16*i+8)
			}
			if load64(m, offMetaSeq) == v1 {
				return nil
			}
		}
		return fmt.Errorf("%w: the header", ErrBusy)
	})
	return out, err
}

// Fresh returns nil when the view is ready and its writer said it was
// current less than maxAge ago (the daemon's mirror says so every 50ms and
// after each batch). Otherwise it fails loudly: ErrNotReady (loading,
// stopped, file gone) or ErrStale (the daemon is dead, stuck or behind by
// more than maxAge). It also checks that the path still names the mapped
// file (one stat), and maps the one there if not.
func (r *Reader) Fresh(maxAge time.Duration) error {
	return guard(func() error {
		if r.closed {
			return ErrClosed
		}
		var st unix.Stat_t
		if err := unix.Stat(r.path, &st); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNotReady, r.path, err)
		}
		if st.Dev != r.dev || st.Ino != r.ino {
			if err := r.attach(); err != nil {
				return fmt.Errorf("%w: %w", ErrNotReady, err)
			}
		}
		if err := r.current(); err != nil {
			return err
		}
		hb := time.Unix(0, int64(load64(r.m, offHeartbeat)))
		if age := time.Since(hb); age > maxAge {
			return fmt.Errorf("%w: the daemon (pid %d) last said it was current %s ago (max %s)",
				ErrStale, load64(r.m, offWriterPID), age.Round(time.Millisecond), maxAge)
		}
		return nil
	})
}

// Generation is the number of the generation the reader maps.
func (r *Reader) Generation() uint64 { return r.gen }

// Close unmaps the file.
func (r *Reader) Close() error {
	if r.closed {
		return ErrClosed
	}
	r.closed = true
	err := unix.Munmap(r.m)
	r.m = nil
	return err
}
