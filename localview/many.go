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

// manyKey is GetMany's scratch for one key: its hash, then its record.
type manyKey struct {
	hash         uint32
	off, c, data int // off 0: no record
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
// Every key's slot, then every record, is touched before any is used,
// so that a CPU able to overlap the misses does (BENCHMARKS.md: on a
// VM whose page walks do not overlap, a key costs what a Get does).
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
		// Touch every key's first slot: the loads are independent, so
		// their misses overlap. Nothing is decided on them.
		var sink uint64
		for i := range ks {
			sink += *word(m, r.slots+8*(int(ks[i].hash)&r.mask))
		}
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
			if c > 0 {
				sink += *word(m, k.data) // the data's first line, while the next key's is looked up
			}
		}
		r.sink = sink
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
