package broadcast

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/cachecast/cachecast/store"
)

// Frames on the data port. After the handshake both sides exchange frames:
//
//	+----------------+--------+---------------------------+
//	| length (u32 LE)| type u8| payload (length-1 bytes)  |
//	+----------------+--------+---------------------------+
//
// length counts the type byte and the payload. It is checked against
// MaxFrameSize before anything is read or allocated.
//
//	type      payload
//	records   one or more records exactly as the log holds them
//	          (unpadded, back to back); each carries its own size and CRC
//	ack       count u32, then count x (origin u64, seq u64): the highest
//	          contiguous seq the sender holds of each origin
//	pull      origin u64, from u64, to u64: send me these records
//	pullEnd   origin u64, next u64, status u8 (0 done, 1 recycled):
//	          the end of the records answering a pull
//	snapReq   (empty) send me your view snapshot: I need records you
//	          have recycled
//	snapData  the next bytes of the snapshot file
//	snapEnd   (empty) the snapshot is complete
const (
	frameRecords  = 1
	frameAck      = 2
	framePull     = 3
	framePullEnd  = 4
	frameSnapReq  = 5
	frameSnapData = 6
	frameSnapEnd  = 7
)

// MaxFrameSize bounds a frame; a peer that announces more is cut off.
const MaxFrameSize = 64 << 20

// Pull statuses.
const (
	pullDone     = 0
	pullRecycled = 1
)

// ErrBadFrame means a peer sent bytes that are not a valid frame. The
// connection is closed; nothing else is affected.
var ErrBadFrame = errors.New("broadcast: bad frame")

// frameWriter writes frames to a connection. Not safe for concurrent use:
// a link serializes its writes.
type frameWriter struct {
	conn net.Conn
	bufs net.Buffers
	hdr  [5]byte
}

// writeRecords sends the records as one frame, with one writev of the
// slices it is given (the callers copy the records out of the log's map
// into a send buffer first).
func (w *frameWriter) writeRecords(recs [][]byte) error {
	n := 1
	for _, r := range recs {
		n += len(r)
	}
	binary.LittleEndian.PutUint32(w.hdr[:], uint32(n))
	w.hdr[4] = frameRecords
	w.bufs = append(w.bufs[:0], w.hdr[:])
	w.bufs = append(w.bufs, recs...)
	bufs := w.bufs // WriteTo consumes the slice
	_, err := bufs.WriteTo(w.conn)
	return err
}

// writeFrame sends a small frame built in one buffer.
func (w *frameWriter) writeFrame(typ byte, payload []byte) error {
	b := make([]byte, 5+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(1+len(payload)))
	b[4] = typ
	copy(b[5:], payload)
	_, err := w.conn.Write(b)
	return err
}

func encodeAck(v map[uint64]uint64) []byte {
	b := make([]byte, 4, 4+16*len(v))
	binary.LittleEndian.PutUint32(b, uint32(len(v)))
	for o, s := range v {
		b = binary.LittleEndian.AppendUint64(b, o)
		b = binary.LittleEndian.AppendUint64(b, s)
	}
	return b
}

func decodeAck(p []byte) (map[uint64]uint64, error) {
	if len(p) < 4 {
		return nil, fmt.Errorf("%w: ack of %d bytes", ErrBadFrame, len(p))
	}
	n := binary.LittleEndian.Uint32(p)
	if uint64(len(p)-4) != uint64(n)*16 {
		return nil, fmt.Errorf("%w: ack says %d entries in %d bytes", ErrBadFrame, n, len(p)-4)
	}
	v := make(map[uint64]uint64, n)
	for i := 0; i < int(n); i++ {
		o := binary.LittleEndian.Uint64(p[4+16*i:])
		v[o] = binary.LittleEndian.Uint64(p[12+16*i:])
	}
	return v, nil
}

type pullReq struct{ origin, from, to uint64 }

func encodePull(r pullReq) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint64(b, r.origin)
	binary.LittleEndian.PutUint64(b[8:], r.from)
	binary.LittleEndian.PutUint64(b[16:], r.to)
	return b
}

func decodePull(p []byte) (pullReq, error) {
	if len(p) != 24 {
		return pullReq{}, fmt.Errorf("%w: pull of %d bytes", ErrBadFrame, len(p))
	}
	r := pullReq{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]), binary.LittleEndian.Uint64(p[16:])}
	if r.origin == 0 || r.from == 0 || r.to < r.from {
		return pullReq{}, fmt.Errorf("%w: pull %+v", ErrBadFrame, r)
	}
	return r, nil
}

type pullEnd struct {
	origin, next uint64
	status       byte
}

func encodePullEnd(e pullEnd) []byte {
	b := make([]byte, 17)
	binary.LittleEndian.PutUint64(b, e.origin)
	binary.LittleEndian.PutUint64(b[8:], e.next)
	b[16] = e.status
	return b
}

func decodePullEnd(p []byte) (pullEnd, error) {
	if len(p) != 17 || p[16] > pullRecycled {
		return pullEnd{}, fmt.Errorf("%w: pull end of %d bytes", ErrBadFrame, len(p))
	}
	return pullEnd{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]), p[16]}, nil
}

// frameReader reads frames into a buffer it reuses.
type frameReader struct {
	r   *bufio.Reader
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 256<<10)}
}

// next returns the next frame's type and payload; the payload is valid
// until the following call.
func (fr *frameReader) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(fr.r, hdr[:4]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:4])
	if n < 1 || n > MaxFrameSize {
		return 0, nil, fmt.Errorf("%w: length %d", ErrBadFrame, n)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return 0, nil, err
	}
	if b[0] < frameRecords || b[0] > frameSnapEnd {
		return 0, nil, fmt.Errorf("%w: type %d", ErrBadFrame, b[0])
	}
	return b[0], b[1:], nil
}

// splitRecords cuts a records payload into its records, checking each
// one's size and CRC; fn gets each record as a slice of p.
func splitRecords(p []byte, fn func(store.Record) error) error {
	if len(p) == 0 {
		return fmt.Errorf("%w: empty records frame", ErrBadFrame)
	}
	for len(p) > 0 {
		r, err := store.DecodeRecord(p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadFrame, err)
		}
		if r == nil {
			return fmt.Errorf("%w: zero-size record", ErrBadFrame)
		}
		if err := fn(r); err != nil {
			return err
		}
		p = p[len(r):]
	}
	return nil
}
