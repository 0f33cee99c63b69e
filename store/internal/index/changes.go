package index

import "sync/atomic"

// changeSlots is how many origins the change feed holds between two
// reads: an origin is in it once however often it changes, so only a
// reader that falls more than changeSlots distinct origins behind has
// to look at them all again. (A variable for the tests.)
var changeSlots = 1 << 12

// changeFeed is a ring of the origins whose last seq changed, written by
// the store's writer (Put, Reset, NoteChanged: one writer at a time, under
// the store's write lock) and read by one reader (Changes) without a lock.
type changeFeed struct {
	slots []atomic.Uint64 // changeSlots of them
	next  atomic.Uint64   // slots written so far
	// all counts the changes too wide for the ring (Truncate): the
	// reader then looks at every origin.
	all atomic.Uint64
	// reader is the reader's token (Origins.NewReader); read, seenAll and
	// primed (the token they are for) are its cursor, touched by the
	// reader only.
	reader  atomic.Uint64
	read    uint64
	seenAll uint64
	primed  uint64
}

// size is how many slots the feed has.
func (f *changeFeed) size() uint64 { return uint64(len(f.slots)) }

// changed queues origin oi in the feed unless it is queued already.
func (o *Origins) changed(oi *originIndex) {
	if oi.queued.Load() || oi.queued.Swap(true) {
		return
	}
	f := &o.feed
	i := f.next.Load()
	f.slots[i%f.size()].Store(oi.origin)
	f.next.Store(i + 1)
}

// NoteChanged puts origin in the change feed: its last seq as the store
// reports it changed for a reason outside the index (a record set aside
// as damaged, or back). Writer only.
func (o *Origins) NoteChanged(origin uint64) {
	if oi := o.lookup(origin); oi != nil {
		o.changed(oi)
	}
}

// NewReader starts the change feed over for a new reader and returns its
// token: the reader's first Changes reports that it cannot tell, and a
// reader whose token is not the latest gets that answer every time.
func (o *Origins) NewReader() uint64 { return o.feed.reader.Add(1) }

// Changes calls fn with every origin whose last seq may have changed
// since reader's last call (some more than once, some that did not
// change) and returns true; or returns false, calling fn for none, when
// it cannot tell (the first call, a reader that fell too far behind, a
// Truncate, another reader took over): then every origin may have
// changed. fn is called before the caller reads the origins' seqs, so a
// change after that read is in the next call. One caller at a time.
func (o *Origins) Changes(reader uint64, fn func(origin uint64)) bool {
	f := &o.feed
	if f.reader.Load() != reader {
		return false
	}
	w, all := f.next.Load(), f.all.Load()
	if f.primed != reader || all != f.seenAll || w-f.read > f.size() {
		o.requeueAll(reader, w, all)
		return false
	}
	var got []uint64
	for i := f.read; i < w; i++ {
		got = append(got, f.slots[i%f.size()].Load())
	}
	if f.next.Load()-f.read > f.size() { // the writer lapped what was read
		o.requeueAll(reader, w, all)
		return false
	}
	f.read = w
	for _, origin := range got {
		if oi := o.lookup(origin); oi != nil {
			oi.queued.Store(false) // before the caller reads its seq
		}
		fn(origin)
	}
	return true
}

// requeueAll starts reader's cursor at w, all, with no origin queued:
// the caller then reads every origin's seq.
func (o *Origins) requeueAll(reader, w, all uint64) {
	f := &o.feed
	f.read, f.seenAll, f.primed = w, all, reader
	o.each(func(oi *originIndex) error {
		oi.queued.Store(false)
		return nil
	})
}
