package broadcast

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cachecast/cachecast/broadcast/internal/batch"
	"github.com/cachecast/cachecast/broadcast/wire"
	"go.uber.org/zap"
)

// Snapshots on the data port (see "Bootstrap" in the package doc): the
// listener's side streams its view's snapshot in snapData frames
// (serveSnapshot); the link's side hands the frames as they arrive to
// the store's Bootstrap (snapWrite, bootstrap), one link at a time
// (startSnap, endSnap).

// serveSnapshot streams a snapshot of the view, for a peer that needs
// records this node has recycled or that bootstraps empty: encoded from
// a clone of the view straight into frames of batch.FrameBytes, with no file.
// A peer below ProtocolTimed gets one only while the view holds no time
// field (a snapshot of version 1, which older builds read).
func (n *Node) serveSnapshot(w *wire.Writer, proto uint8) error {
	t0 := time.Now()
	sw := &snapWriter{w: w, buf: make([]byte, 0, batch.FrameBytes)}
	if err := n.st.SnapshotToVersion(sw, int(wire.MaxRecordVersion(proto))); err != nil {
		return err
	}
	if err := sw.flush(); err != nil {
		return err
	}
	n.log.Info("sent a snapshot to a peer for its bootstrap", zap.Int64("bytes", sw.sent), zap.Duration("took", time.Since(t0)))
	return w.WriteFrame(wire.FrameSnapEnd, nil)
}

// snapWriter cuts a snapshot's stream into snapData frames.
type snapWriter struct {
	w    *wire.Writer
	buf  []byte
	sent int64 // bytes of the snapshot sent
}

func (s *snapWriter) Write(p []byte) (int, error) {
	k := len(p)
	for len(p) > 0 {
		c := min(len(p), cap(s.buf)-len(s.buf))
		s.buf = append(s.buf, p[:c]...)
		p = p[c:]
		if len(s.buf) == cap(s.buf) {
			if err := s.flush(); err != nil {
				return k - len(p), err
			}
		}
	}
	return k, nil
}

func (s *snapWriter) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	err := s.w.WriteParts(wire.FrameSnapData, s.buf)
	s.sent += int64(len(s.buf))
	s.buf = s.buf[:0]
	return err
}

// snapResult is what the store's Bootstrap of a received snapshot did.
type snapResult struct {
	moved map[uint64]uint64
	err   error
}

// errSnapCut ends the stream of a snapshot whose connection went.
var errSnapCut = errors.New("broadcast: the connection went before the snapshot's end")

// snapWrite hands the bytes of a snapshot on its way to the store, which
// applies them as they arrive (the first bytes start its Bootstrap). It
// returns once the store has taken them in, so that receiving the next
// frame overlaps applying these.
func (l *link) snapWrite(p []byte) error {
	l.mu.Lock()
	ok := l.snapping
	l.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: snapshot data not asked for", wire.ErrBadFrame)
	}
	if l.snapIn == nil {
		pr, pw := io.Pipe()
		done := make(chan snapResult, 1)
		go func() {
			moved, err := l.n.st.Bootstrap(pr)
			pr.CloseWithError(err) // a refused snapshot stops the writes
			done <- snapResult{moved, err}
		}()
		l.snapIn, l.snapDone = pw, done
		l.snapBegan, l.snapBytes = time.Now(), 0
	}
	l.snapBytes += int64(len(p))
	if _, err := l.snapIn.Write(p); err != nil {
		l.snapIn = nil
		if res := <-l.snapDone; res.err != nil {
			err = res.err
		}
		return fmt.Errorf("bootstrap from %s: %w", l.peer.Name, err)
	}
	return nil
}

// bootstrap ends a complete snapshot's stream, waits for the store to
// have applied it and resumes pulling.
func (l *link) bootstrap() error {
	in, done := l.snapIn, l.snapDone
	l.snapIn = nil
	l.mu.Lock()
	ok := l.snapping
	l.releasePulls()
	l.mu.Unlock()
	if !ok || in == nil {
		if in != nil {
			in.CloseWithError(fmt.Errorf("%w: snapshot end not asked for", wire.ErrBadFrame))
			<-done
		}
		return fmt.Errorf("%w: snapshot end without a snapshot", wire.ErrBadFrame)
	}
	defer func() {
		l.mu.Lock()
		l.endSnap()
		l.mu.Unlock()
	}()
	received := time.Since(l.snapBegan)
	in.Close()
	res := <-done
	if res.err != nil {
		return fmt.Errorf("bootstrap from %s: %w", l.peer.Name, res.err)
	}
	l.n.boots.Add(1)
	l.log.Info("bootstrapped from the peer's snapshot", zap.Int("origins-moved", len(res.moved)),
		zap.Int64("bytes", l.snapBytes), zap.Duration("receive-took", received), zap.Duration("took", time.Since(l.snapBegan)))
	return nil
}

// startSnap makes this link the one taking a snapshot, unless it or
// another link already is. Called with mu held.
func (l *link) startSnap() bool {
	if l.snapping || !l.n.booting.CompareAndSwap(false, true) {
		return false
	}
	l.wantSnap, l.snapping = true, true
	return true
}

// endSnap ends this link's snapshot, if it was taking one. Called with
// mu held.
func (l *link) endSnap() {
	if l.snapping {
		l.n.booting.Store(false)
	}
	l.wantSnap, l.snapping = false, false
}

// dropSnap ends the stream of a half-received snapshot and waits for the
// store to give it up (no origin moves). Called by the link's goroutines
// when no reader runs.
func (l *link) dropSnap() {
	if l.snapIn != nil {
		l.snapIn.CloseWithError(errSnapCut)
		if res := <-l.snapDone; res.err != nil {
			l.log.Info("a snapshot cut off on its way was given up", zap.Error(res.err))
		}
		l.snapIn = nil
	}
}
