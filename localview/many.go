package localview

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// Item is one key's answer of GetMany.
type Item struct {
	// Found is false for a key the view does not hold (or holds deleted).
	Found bool
	// Value and Tag are slices of GetMany's buffer.
	Value, Tag []byte
	// Stamp is the record's origin, seq and HLC, as Get gives it.
	Stamp Stamp
}

// manyKey is GetMany's scratch for one key: its hash, its first slot as
// prefetch loaded it, then its record.
type manyKey struct {
	hash         uint32
	slot         uint64
	off, c, data int // off 0: no record
}

// prefetchLines is how much of a record prefetch touches: three cache
// lines, all of a record of a 16-byte key and a 100-byte value (176
// bytes) wherever it starts; a longer one's other lines come with the
// copy.
const prefetchLines = 3

// prefetch loads, for every key, its first slot, and then the first
// prefetchLines lines of the record that slot names when its hash is the
// key's: every slot's miss is under way before any record's is, and every
// record's before any key is read, so that the misses of all the keys
// overlap instead of coming one key after another. Nothing is decided on
// these loads (GetMany reads everything again after the committed word);
// they stay inside the arena.
func (r *Reader) prefetch(ks []manyKey) {
	m := r.m
	var sink uint64
	for i := range ks {
		ks[i].slot = *word(m, r.slots+8*(int(ks[i].hash)&r.mask))
	}
	last := r.end - 64*(prefetchLines-1) - 8
	for i := range ks {
		s := ks[i].slot
		off := int(uint32(s)) * 8
		if uint32(s>>32) != ks[i].hash || off < r.arena || off > last {
			continue
		}
		for l := range prefetchLines {
			sink += *word(m, off+64*l)
		}
	}
	r.sink = sink
}

// GetMany reads keys[i] of topics[i] (or of topics[0], for every key, when
// topics has one element) as of one instant: a batch the writer made
// (Writer.BeginBatch: the daemon's batches are an HTTP NDJSON batch, a
// Redis MSET, and each store publish) is seen whole or not at all. It
// fills items[i] (grown to len(keys)) with keys[i]'s answer; values and
// tags are copied into buf, grown as needed. Pass the returned items and
// buf next time, and a read allocates nothing.
//
// It reads the committed word, then every key as Get does, and checks
// that no version it saw is of a write after the committed word (a batch
// not whole when the read began); otherwise it waits for that batch to be
// whole and reads again. Keys under a stream of batches may make it wait:
// past about a second it gives up with ErrBusy (wrapping ErrNotReady).
// Every key's slot, then every record, is touched before any is used
// (prefetch), so that their misses overlap.
func (r *Reader) GetMany(topics, keys []string, items []Item, buf []byte) (_ []Item, _ []byte, err error) {
	defer func(old bool) {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			err = faultError(p)
		}
	}(debug.SetPanicOnFault(true))
	if len(topics) != 1 && len(topics) != len(keys) {
		return items, buf, fmt.Errorf("%w: GetMany of %d keys with %d topics (want 1 or %d)", ErrInvalid, len(keys), len(topics), len(keys))
	}
	if cap(items) < len(keys) {
		items = make([]Item, len(keys))
	}
	items = items[:len(keys)]
	if cap(r.many) < len(keys) {
		r.many = make([]manyKey, len(keys))
	}
	ks := r.many[:len(keys)]
	topic := func(i int) string {
		if len(topics) == 1 {
			return topics[0]
		}
		return topics[i]
	}
	for i := range keys {
		ks[i].hash = r.topics.hash(topic(i), keys[i])
	}
	var started time.Time
	for try := 0; ; {
		if r.closed || load64(r.m, offState)&(stateReady|stateSuperseded|stateClosed) != stateReady {
			if err := r.current(); err != nil {
				return items, buf, err
			}
		}
		if r.reads++; r.reads%orphanCheckEvery == 0 {
			if err := r.checkOrphan(); err != nil {
				return items, buf, err
			}
		}
		m := r.m
		r.prefetch(ks)
		// Every load that decides anything comes after the committed
		// word's (an atomic load: acquire), so a batch whole before it
		// is seen in full: its new slots and records included.
		committed := load64(m, offCommitted)
		for i := range ks {
			k := &ks[i]
			off, c, err := r.lookup(k.hash, topic(i), keys[i])
			switch {
			case errors.Is(err, ErrNotFound):
				k.off = 0
				continue
			case err != nil:
				return items, buf, err
			}
			k.off, k.c, k.data = off, c, dataAt(off, len(topic(i)), len(keys[i]))
		}
		newest, used := uint64(0), 0
		for i := range ks {
			k := &ks[i]
			items[i] = Item{}
			if k.off == 0 {
				continue
			}
			v, t, st, version, err := r.readRecord(k.off, k.c, k.data, &buf, used)
			newest = max(newest, version)
			if errors.Is(err, ErrNotFound) {
				continue // deleted: its version counts all the same
			}
			if err != nil {
				return items, buf, err
			}
			items[i] = Item{Found: true, Value: v, Tag: t, Stamp: st}
			used += len(t) + len(v)
		}
		buf = buf[:used]
		// A version is twice its write's number.
		if newest/2 <= committed {
			return items, buf, nil
		}
		// A write of a batch that was not whole when the read began: wait
		// for it to be (or for the file to be superseded), read again.
		for load64(m, offCommitted) < newest/2 && load64(m, offState)&stateSuperseded == 0 {
			if !busyWait(try, &started) {
				return items, buf, fmt.Errorf("%w: %w: a batch stayed unfinished for %s", ErrNotReady, ErrBusy, busyTimeout)
			}
			try++
		}
		if !busyWait(try, &started) {
			return items, buf, fmt.Errorf("%w: %w: the keys kept changing for %s", ErrNotReady, ErrBusy, busyTimeout)
		}
		try++
	}
}
