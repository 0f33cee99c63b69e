package index

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/errs"
	"github.com/cachecast/cachecast/store/internal/fsys"
	"github.com/cachecast/cachecast/store/record"
)

// Origins is the set of origin indexes of a store (see set for the
// concurrency contract).
type Origins struct {
	set[uint64, *originIndex]
	feed changeFeed // the origins whose last seq changed (Changes)
}

// originIndex is the index of one origin: entry seq holds the position of
// the record (origin, seq) plus one.
type originIndex struct {
	origin uint64
	one
	queued atomic.Bool // in the change feed, not read yet
}

func (oi *originIndex) base() *one    { return &oi.one }
func (oi *originIndex) label() string { return fmt.Sprintf("origin %016x", oi.origin) }

// OpenOrigins opens (creating if needed) the origin indexes in dir
// (the store's <data>/index/origin). chunkEntries is the most entries per
// chunk file (0: 1<<20, 8 MiB; the first files are smaller, see
// firstIndexChunkEntries); maxMapped bounds the chunks mapped at once per
// origin.
func OpenOrigins(dir string, chunkEntries, maxMapped int, log *zap.Logger) (*Origins, error) {
	o := &Origins{feed: changeFeed{slots: make([]atomic.Uint64, changeSlots)}}
	if err := o.init(dir, originEntrySize, chunkEntries, maxMapped, log); err != nil {
		return nil, err
	}
	err := o.load(o.originOf, func(origin uint64, a *array) *originIndex {
		return &originIndex{origin: origin, one: one{arr: a}}
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// originOf names the origin whose index lives in the directory de, or
// logs why de is none.
func (o *Origins) originOf(de os.DirEntry) (uint64, bool) {
	origin, ok := parseOriginDirName(de.Name())
	if !ok || !de.IsDir() {
		o.log.Warn("unexpected file in the origin index directory", zap.String("path", filepath.Join(o.dir, de.Name())))
		return 0, false
	}
	return origin, true
}

// originDirName and parseOriginDirName name an origin's index directory.
func originDirName(origin uint64) string { return fmt.Sprintf("%016x", origin) }

func parseOriginDirName(name string) (uint64, bool) {
	if len(name) != 16 || strings.Trim(name, "0123456789abcdef") != "" {
		return 0, false
	}
	o, err := strconv.ParseUint(name, 16, 64)
	return o, err == nil && o != 0
}

// Put records that (origin, seq) is at log position pos. seq must be
// last(origin)+1; an origin not seen before accepts any seq >= 1 as its
// first (a node bootstrapped from a snapshot starts mid-sequence). A seq
// already held gives ErrDuplicate, one that skips ahead ErrOutOfOrder. It
// does not allocate unless the origin is new. Writer only.
func (o *Origins) Put(origin, seq uint64, pos int64) error {
	ps := [1]int64{pos}
	return o.PutAll(origin, seq, ps[:])
}

// PutAll is Put of (origin, seq+i) at poss[i] for each i, the positions
// ascending (a publish's records): the entries are published together,
// appendRun at a time. Nothing is written when one would be refused.
func (o *Origins) PutAll(origin, seq uint64, poss []int64) error {
	if o.closed.Load() {
		return errs.ErrClosed
	}
	for i, pos := range poss {
		if origin == 0 || seq == 0 || pos < 0 || i > 0 && pos <= poss[i-1] {
			return fmt.Errorf("%w: origin index entry (%016x, %d) at position %d", record.ErrInvalid, origin, seq+uint64(i), pos)
		}
	}
	if len(poss) == 0 {
		return fmt.Errorf("%w: no origin index entries", record.ErrInvalid)
	}
	oi := o.m[origin]
	created := false
	if oi == nil {
		var err error
		if oi, err = o.create(origin, seq); err != nil {
			return err
		}
		created = true
	}
	switch next := oi.arr.len(); {
	case seq < next:
		return fmt.Errorf("%w: origin %016x seq %d (held up to %d)", errs.ErrDuplicate, origin, seq, next-1)
	case seq > next:
		return fmt.Errorf("%w: origin %016x seq %d, expected %d", errs.ErrOutOfOrder, origin, seq, next)
	}
	if last := oi.last.Load(); poss[0] <= last {
		return fmt.Errorf("%w: origin %016x seq %d at position %d, not after %d", record.ErrInvalid, origin, seq, poss[0], last)
	}
	var buf [appendRun * originEntrySize]byte
	for len(poss) > 0 {
		run := poss[:min(len(poss), appendRun)]
		for i, pos := range run {
			binary.LittleEndian.PutUint64(buf[i*originEntrySize:], uint64(pos)+1)
		}
		if err := oi.arr.appendAll(buf[:len(run)*originEntrySize]); err != nil {
			if created {
				o.forget(oi)
			}
			return err
		}
		oi.last.Store(run[len(run)-1])
		if created {
			// Readers see a new origin only once it holds its first seq.
			o.publish(origin, oi)
			created = false
		}
		o.changed(oi) // once queued, a load a run
		poss = poss[len(run):]
	}
	return nil
}

// create makes the (empty) index of a new origin starting at seq.
func (o *Origins) create(origin, seq uint64) (*originIndex, error) {
	a, err := o.set.create(originDirName(origin), seq)
	if err != nil {
		return nil, err
	}
	oi := &originIndex{origin: origin, one: one{arr: a}}
	oi.last.Store(-1)
	return oi, nil
}

// forget removes the files of a new origin whose first put failed, so that
// the next put may start it at another seq.
func (o *Origins) forget(oi *originIndex) {
	oi.arr.close()
	dir := filepath.Join(o.dir, originDirName(oi.origin))
	if err := os.RemoveAll(dir); err != nil {
		o.log.Warn("removing an unused origin index failed", zap.String("path", dir), zap.Error(err))
	}
}

// Get returns the log position of (origin, seq); ok is false if the index
// does not hold it (never seen, or dropped by retention). Safe from any
// goroutine.
func (o *Origins) Get(origin, seq uint64) (pos int64, ok bool) {
	oi := o.lookup(origin)
	if oi == nil {
		return 0, false
	}
	p, err := entryPos(oi.arr, seq)
	if err != nil {
		return 0, false
	}
	return p, true
}

// Last is the highest seq of origin the index holds, 0 if none. An origin
// whose entries were all dropped keeps reporting the seq before the first
// one it retained: those records were held once.
func (o *Origins) Last(origin uint64) uint64 {
	oi := o.lookup(origin)
	if oi == nil {
		return 0
	}
	return oi.arr.len() - 1
}

// Holds reports whether the index holds seq of origin (a Put of it would
// be refused as a duplicate).
func (o *Origins) Holds(origin, seq uint64) bool {
	oi := o.lookup(origin)
	return oi != nil && seq < oi.arr.len()
}

// Vector returns origin -> last(origin) for every origin with a last seq.
func (o *Origins) Vector() map[uint64]uint64 {
	o.mu.RLock()
	defer o.mu.RUnlock()
	v := make(map[uint64]uint64, len(o.m))
	for origin, oi := range o.m {
		if last := oi.arr.len() - 1; last > 0 {
			v[origin] = last
		}
	}
	return v
}

// Reset makes origin's index start over at seq next, holding nothing: the
// node took the records before next from a peer's snapshot instead of
// from their records. The empty first chunk is made at once, so the start
// survives a restart. Writer only.
func (o *Origins) Reset(origin, next uint64) error {
	if o.closed.Load() {
		return errs.ErrClosed
	}
	dir := filepath.Join(o.dir, originDirName(origin))
	if old := o.m[origin]; old != nil {
		o.mu.Lock()
		delete(o.m, origin)
		o.mu.Unlock()
		old.arr.close()
		if err := os.RemoveAll(dir); err != nil {
			return fsys.FileError("remove", dir, err)
		}
	}
	oi, err := o.create(origin, next)
	if err != nil {
		return err
	}
	if _, err := oi.arr.grow(next); err != nil {
		o.forget(oi)
		return err
	}
	if err := oi.arr.syncDir(); err != nil {
		o.forget(oi)
		return err
	}
	o.publish(origin, oi)
	o.changed(oi)
	return nil
}

// Truncate is set's Truncate; the change feed's reader then looks at
// every origin again. Writer only.
func (o *Origins) Truncate(pos int64) error {
	defer o.feed.all.Add(1)
	return o.set.Truncate(pos)
}
