package broadcast

import (
	"errors"

	"github.com/cachecast/cachecast/broadcast/internal/batch"
	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/store"
)

// The writer's side of a link's session: what a turn sends, and the
// frames it gathers this node's records (and, on the relay tree, the
// other origins' the peer lacks, tree.go) into.

// turn is what a writer's turn has to send, taken from the link under its
// lock at the turn's start.
type turn struct {
	pulls                           []wire.PullReq
	wantSnap, exchange, sendRetired bool
	push                            bool   // push this node's own records to the peer
	next                            uint64 // the first own seq the peer lacks
}

// takeTurn takes what the writer's turn sends on a connection of protocol
// proto, next being where its pushes stand.
func (l *link) takeTurn(proto uint8, next uint64) turn {
	self := l.n.self
	l.mu.Lock()
	defer l.mu.Unlock()
	t := turn{
		pulls:       append([]wire.PullReq(nil), l.pulls...),
		wantSnap:    l.wantSnap,
		exchange:    l.wantExchange && proto >= 3,
		sendRetired: l.sendRetired && proto >= 3,
	}
	l.pulls = l.pulls[:0]
	l.wantSnap, l.wantExchange, l.sendRetired = false, false, false
	// A peer that bootstrapped from a snapshot holds more than was
	// pushed to it: go on from what it holds.
	t.next = max(next, l.holds[self]+1)
	// Under NATS only the replica is pushed to. A peer that lacks
	// more than BootstrapRecords of this node's records chooses, on
	// its own vector, between a snapshot and pulls (wantsSnapshot);
	// until it holds all but BootstrapRecords of them, whichever it
	// chose, nothing is pushed to it. The choice is not guessed here
	// from the peer's vector as last learned: that may be old, or
	// torn by the bootstrap in progress (it moves the origins on one
	// at a time), and a peer seen holding as much as it lacked was
	// pushed every record while it took the snapshot.
	push := l.pushes()
	last := l.n.st.LogLast(self)
	l.holding = push && last >= t.next && last-t.next+1 > l.n.cfg.BootstrapRecords
	t.push = push && !l.holding
	return t
}

// pushOwn gathers into f what the peer lacks of this node's own records
// from seq next on (when push), and returns the seq it goes on from.
// f is flushed whenever full, so all of them go out in frames of up to
// batch.Records records and batch.FrameBytes bytes: one write (and one ack back)
// a turn for whatever is new, of every origin (relayDirty adds the other
// origins' on the relay tree). Up to the log's end, not LastSeq, and past
// an own record set aside as damaged (ErrLost): it must not hold the new
// ones back. A peer that holds it (or its placeholder: it lost it too)
// takes them; one that lacks it drops them (seqs go in order) and waits
// for it, as for any gap.
func (l *link) pushOwn(f *pushFrame, next uint64, proto uint8, push bool) (uint64, error) {
	self := l.n.self
	for push && next <= l.n.st.LogLast(self) {
		if err := f.flushIfFull(); err != nil {
			return next, err
		}
		mark := f.mark()
		end, err := f.read(self, next, proto)
		if errors.Is(err, store.ErrRecycled) {
			// The peer needs records this node no longer has: its own
			// pulls find that out and it bootstraps from a snapshot;
			// pushing resumes from what it then holds.
			f.undo(mark)
			break
		}
		lost, tooNew := errors.Is(err, store.ErrLost), errors.Is(err, batch.ErrTooNew)
		if err != nil && !lost && !tooNew {
			return next, err
		}
		f.own += len(f.buf) - mark.bytes
		if len(f.recs) == mark.recs && !lost && !tooNew {
			break
		}
		next = end
		if tooNew {
			l.holdBack(end, proto)
			break
		}
		if lost {
			next++ // pushed past: see above
		}
	}
	return next, nil
}

// pushFrame gathers what a link's writer pushes in one turn, records of
// any origins, into frames of up to batch.Records records and batch.FrameBytes
// bytes. On the relay tree a node forwards many origins' records to each
// neighbour: a frame per origin would cost a write, and an ack back, for
// each of them.
type pushFrame struct {
	l    *link
	w    *wire.Writer
	buf  []byte
	recs [][]byte
	own  int // bytes of this node's own records in the frame (Node.BytesSent)
}

// frameMark is how far a frame was filled, to tell what a read added.
type frameMark struct{ bytes, recs int }

func (f *pushFrame) mark() frameMark { return frameMark{len(f.buf), len(f.recs)} }

// undo drops what was read since m.
func (f *pushFrame) undo(m frameMark) { f.buf, f.recs = f.buf[:m.bytes], f.recs[:m.recs] }

// read adds origin's records from seq from on, as many as the frame has
// room for (readBatch: end is the seq after the last one read).
func (f *pushFrame) read(origin, from uint64, proto uint8) (end uint64, err error) {
	f.buf, f.recs, end, err = batch.Read(f.l.n.st, origin, from, batch.Records-len(f.recs), batch.FrameBytes, wire.MaxRecordVersion(proto), f.buf, f.recs)
	return end, err
}

// flushIfFull sends the frame when it has no room for another record.
func (f *pushFrame) flushIfFull() error {
	if len(f.recs) < batch.Records && len(f.buf) < batch.FrameBytes {
		return nil
	}
	return f.flush()
}

// flush sends the records gathered, if any, as one frame.
func (f *pushFrame) flush() error {
	if len(f.recs) == 0 {
		return nil
	}
	err := f.w.WriteRecords(f.recs)
	if err == nil {
		f.l.n.bytesSent.Add(uint64(f.own))
		f.l.n.pushFrames.Add(1)
		f.l.pushedNow()
		f.l.touch()
	}
	f.buf, f.recs, f.own = f.buf[:0], f.recs[:0], 0
	return err
}
