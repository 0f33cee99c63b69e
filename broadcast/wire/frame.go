package wire

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// Frames on the data port. After the handshake both sides exchange frames:
//
//	+----------------+--------+---------------------------+---------------+
//	| length (u32 LE)| type u8| payload (length-1 bytes)  | MAC (32 bytes)|
//	+----------------+--------+---------------------------+---------------+
//
// length counts the type byte and the payload. It is checked against
// MaxFrameSize before anything is read or allocated.
//
// MAC = HMAC-SHA256(session key of this direction, frame number u64 LE |
// length | type | payload). The session keys come from the handshake (see
// handshake.go); frames are numbered from 0 in each direction, so a frame
// changed, replayed, reordered or dropped on the way fails the check, and
// the receiver closes the connection before it looks at the payload. (The
// CRC in each record catches a flipped bit, not someone who recomputes it.)
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
//	vector    (protocol 3) count u32, count x (origin u64, seq u64), then
//	          retired u32 and a 16-byte digest: the sender's whole vector
//	          but the origins it has retired, and how many it retired and
//	          their digest (RetiredDigest). The dialer sends it to start an
//	          exchange; the listener answers with its own.
//	retired   (protocol 3) as ack: the origins the sender has retired with
//	          the seq it holds of each; sent when the other side's digest
//	          differs from its own
//	sums      (protocol 5, in place of vector) kind u8 (0 a step, 1 the
//	          opening of an exchange, 2 the answer to an opening); on
//	          protocol 6 the cut u64 next (an HLC stamp: the sums are
//	          over each origin's highest seq stamped at or before it,
//	          package digest; the dialer's, carried back and forth); for 1
//	          and 2 the retired u32 and 16-byte digest as in vector; then
//	          count u32, count x (flags u8 (bit 0: final), depth u8,
//	          prefix u64, origins u32, digest u64): the sender's digests
//	          of nodes of the digest tree (see "Anti-entropy" in the
//	          package doc of broadcast and package digest)
//	entries   (protocol 5) flags u8 (bit 0: answer with yours), count
//	          u32, count x (depth u8, prefix u64): nodes of the digest
//	          tree, then an ack's payload: every live entry the sender
//	          holds under those nodes, and none outside them
const (
	FrameRecords  = 1
	FrameAck      = 2
	FramePull     = 3
	FramePullEnd  = 4
	FrameSnapReq  = 5
	FrameSnapData = 6
	FrameSnapEnd  = 7
	FrameVector   = 8
	FrameRetired  = 9
	FrameSums     = 10
	FrameEntries  = 11
)

// MaxFrameSize bounds a frame; a peer that announces more is cut off.
const MaxFrameSize = 64 << 20

// Pull statuses, the status byte of a pullEnd frame.
const (
	PullDone     = 0
	PullRecycled = 1
)

// ErrBadFrame means a peer sent bytes that are not a valid frame. The
// connection is closed; nothing else is affected.
var ErrBadFrame = errors.New("broadcast: bad frame")

// Writer writes frames to a connection. Not safe for concurrent use:
// a link serializes its writes.
//
// Each frame must be written within timeout (when the connection has
// deadlines): a peer that stops reading (stopped, stalled, its receive
// window full) fails the write with os.ErrDeadlineExceeded instead of
// blocking the writer for good. The connection is then unusable (part of
// a frame may be out) and is closed.
type Writer struct {
	conn     io.Writer
	deadline writeDeadliner // conn's, nil when it has none
	timeout  time.Duration  // 0: no deadline
	mac      hash.Hash      // HMAC-SHA256 with this direction's session key
	seq      uint64         // number of the next frame
	bufs     net.Buffers
	hdr      [5]byte
	sum      [macSize]byte
	sent     *atomic.Uint64 // counts the bytes of frames written, when set
}

type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// NewWriter writes frames to conn, sealed with the session key of this
// direction (Session), each within timeout (0: none); sent, when set,
// counts the bytes written.
func NewWriter(conn io.Writer, key []byte, timeout time.Duration, sent *atomic.Uint64) *Writer {
	w := &Writer{conn: conn, mac: hmac.New(sha256.New, key), timeout: timeout, sent: sent}
	w.deadline, _ = conn.(writeDeadliner)
	return w
}

// arm sets the deadline of the frame about to be written.
func (w *Writer) arm() {
	if w.deadline != nil && w.timeout > 0 {
		w.deadline.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

// seal computes the MAC of the next frame (its header in w.hdr, its
// payload in parts) into w.sum.
func (w *Writer) seal(parts ...[]byte) {
	var seq [8]byte
	binary.LittleEndian.PutUint64(seq[:], w.seq)
	w.seq++
	w.mac.Reset()
	w.mac.Write(seq[:])
	w.mac.Write(w.hdr[:])
	for _, p := range parts {
		w.mac.Write(p)
	}
	w.mac.Sum(w.sum[:0])
}

// WriteRecords sends the records as one frame, with one writev of the
// slices it is given (the callers copy the records out of the log's map
// into a send buffer first).
func (w *Writer) WriteRecords(recs [][]byte) error {
	return w.WriteParts(FrameRecords, recs...)
}

// WriteParts sends a frame whose payload is the parts back to back, with
// one writev and no copy (a snapshot's data frames are 1 MiB each).
func (w *Writer) WriteParts(typ byte, parts ...[]byte) error {
	n := 1
	for _, r := range parts {
		n += len(r)
	}
	binary.LittleEndian.PutUint32(w.hdr[:], uint32(n))
	w.hdr[4] = typ
	w.seal(parts...)
	w.bufs = append(w.bufs[:0], w.hdr[:])
	w.bufs = append(w.bufs, parts...)
	w.bufs = append(w.bufs, w.sum[:])
	bufs := w.bufs // WriteTo consumes the slice
	w.arm()
	k, err := bufs.WriteTo(w.conn)
	w.count(int(k))
	return err
}

func (w *Writer) count(k int) {
	if w.sent != nil {
		w.sent.Add(uint64(k))
	}
}

// WriteFrame sends a small frame built in one buffer.
func (w *Writer) WriteFrame(typ byte, payload []byte) error {
	binary.LittleEndian.PutUint32(w.hdr[:], uint32(1+len(payload)))
	w.hdr[4] = typ
	w.seal(payload)
	b := make([]byte, 0, 5+len(payload)+macSize)
	b = append(append(append(b, w.hdr[:]...), payload...), w.sum[:]...)
	w.arm()
	k, err := w.conn.Write(b)
	w.count(k)
	return err
}

// EncodeAck is an ack frame's payload (and a retired frame's): the
// entries of v in no order.
func EncodeAck(v map[uint64]uint64) []byte {
	b := make([]byte, 4, 4+16*len(v))
	binary.LittleEndian.PutUint32(b, uint32(len(v)))
	for o, s := range v {
		b = binary.LittleEndian.AppendUint64(b, o)
		b = binary.LittleEndian.AppendUint64(b, s)
	}
	return b
}

// DecodeAck reads an ack frame's payload (and a retired frame's).
func DecodeAck(p []byte) (map[uint64]uint64, error) {
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

// VectorMsg is the payload of a vector frame: the origins the sender has
// not retired, and the size and digest of the set it has.
type VectorMsg struct {
	Live    map[uint64]uint64 // the sender's vector, its retired origins left out
	Retired uint32            // how many origins the sender retired
	Digest  [16]byte          // their RetiredDigest
}

// SameRetired says whether both sides retired the same origins at the same
// seqs (to the digest's certainty).
func (m VectorMsg) SameRetired(o VectorMsg) bool {
	return m.Retired == o.Retired && m.Digest == o.Digest
}

// EncodeVector is a vector frame's payload.
func EncodeVector(m VectorMsg) []byte {
	b := EncodeAck(m.Live)
	b = binary.LittleEndian.AppendUint32(b, m.Retired)
	return append(b, m.Digest[:]...)
}

// DecodeVector reads a vector frame's payload.
func DecodeVector(p []byte) (VectorMsg, error) {
	if len(p) < 4+4+16 {
		return VectorMsg{}, fmt.Errorf("%w: vector of %d bytes", ErrBadFrame, len(p))
	}
	tail := p[len(p)-20:]
	live, err := DecodeAck(p[:len(p)-20])
	if err != nil {
		return VectorMsg{}, err
	}
	m := VectorMsg{Live: live, Retired: binary.LittleEndian.Uint32(tail)}
	copy(m.Digest[:], tail[4:])
	return m, nil
}

// RetiredDigest is the digest of a set of retired origins with their seqs:
// the first 16 bytes of SHA-256 over the entries sorted by origin; zero
// for none.
func RetiredDigest(v map[uint64]uint64) (d [16]byte) {
	if len(v) == 0 {
		return d
	}
	origins := make([]uint64, 0, len(v))
	for o := range v {
		origins = append(origins, o)
	}
	slices.Sort(origins)
	h := sha256.New()
	var e [16]byte
	for _, o := range origins {
		binary.LittleEndian.PutUint64(e[:], o)
		binary.LittleEndian.PutUint64(e[8:], v[o])
		h.Write(e[:])
	}
	copy(d[:], h.Sum(nil))
	return d
}

// PullReq is a pull frame's payload: the records of Origin from seq From
// to To, both included.
type PullReq struct{ Origin, From, To uint64 }

// EncodePull is a pull frame's payload.
func EncodePull(r PullReq) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint64(b, r.Origin)
	binary.LittleEndian.PutUint64(b[8:], r.From)
	binary.LittleEndian.PutUint64(b[16:], r.To)
	return b
}

// DecodePull reads a pull frame's payload.
func DecodePull(p []byte) (PullReq, error) {
	if len(p) != 24 {
		return PullReq{}, fmt.Errorf("%w: pull of %d bytes", ErrBadFrame, len(p))
	}
	r := PullReq{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]), binary.LittleEndian.Uint64(p[16:])}
	if r.Origin == 0 || r.From == 0 || r.To < r.From {
		return PullReq{}, fmt.Errorf("%w: pull %+v", ErrBadFrame, r)
	}
	return r, nil
}

// PullEnd is a pullEnd frame's payload: the pull of Origin ended before
// seq Next, with Status PullDone or PullRecycled.
type PullEnd struct {
	Origin, Next uint64
	Status       byte
}

// EncodePullEnd is a pullEnd frame's payload.
func EncodePullEnd(e PullEnd) []byte {
	b := make([]byte, 17)
	binary.LittleEndian.PutUint64(b, e.Origin)
	binary.LittleEndian.PutUint64(b[8:], e.Next)
	b[16] = e.Status
	return b
}

// DecodePullEnd reads a pullEnd frame's payload.
func DecodePullEnd(p []byte) (PullEnd, error) {
	if len(p) != 17 || p[16] > PullRecycled {
		return PullEnd{}, fmt.Errorf("%w: pull end of %d bytes", ErrBadFrame, len(p))
	}
	return PullEnd{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]), p[16]}, nil
}

// Reader reads frames into a buffer it reuses and checks each one's
// MAC before it hands it out.
//
// With a timeout (and a connection with deadlines), each frame must
// arrive within it: the dialer's side, whose peer sends its vector every
// SyncInterval, so that silence means the peer is gone or stopped.
type Reader struct {
	r        *bufio.Reader
	deadline readDeadliner // the connection's, nil when it has none
	timeout  time.Duration // 0: no deadline
	mac      hash.Hash     // HMAC-SHA256 with the peer's direction's session key
	seq      uint64        // number of the next frame
	buf      []byte
	sum      [macSize]byte
	received *atomic.Uint64 // counts the bytes of frames read, when set
}

type readDeadliner interface{ SetReadDeadline(time.Time) error }

// NewReader reads frames from r, checked with the session key of the
// peer's direction (Session), each within timeout (0: none); received,
// when set, counts the bytes read.
func NewReader(r io.Reader, key []byte, timeout time.Duration, received *atomic.Uint64) *Reader {
	fr := &Reader{r: bufio.NewReaderSize(r, 256<<10), mac: hmac.New(sha256.New, key), timeout: timeout, received: received}
	fr.deadline, _ = r.(readDeadliner)
	return fr
}

// Next returns the next frame's type and payload; the payload is valid
// until the following call. A frame whose MAC does not match is
// ErrBadFrame: the connection must be closed, nothing of it applied.
func (fr *Reader) Next() (byte, []byte, error) {
	if fr.deadline != nil && fr.timeout > 0 {
		fr.deadline.SetReadDeadline(time.Now().Add(fr.timeout))
	}
	var hdr [5]byte
	if _, err := io.ReadFull(fr.r, hdr[:4]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:4])
	if n < 1 || n > MaxFrameSize {
		return 0, nil, fmt.Errorf("%w: length %d", ErrBadFrame, n)
	}
	if cap(fr.buf) < int(n)+macSize {
		fr.buf = make([]byte, int(n)+macSize)
	}
	b := fr.buf[:int(n)+macSize]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return 0, nil, err
	}
	if fr.received != nil {
		fr.received.Add(uint64(4 + len(b)))
	}
	b, got := b[:n], b[n:]
	var seq [8]byte
	binary.LittleEndian.PutUint64(seq[:], fr.seq)
	fr.seq++
	fr.mac.Reset()
	fr.mac.Write(seq[:])
	fr.mac.Write(hdr[:4])
	fr.mac.Write(b)
	if !hmac.Equal(fr.mac.Sum(fr.sum[:0]), got) {
		return 0, nil, fmt.Errorf("%w: frame %d fails its MAC (changed on the way, or not from the peer)", ErrBadFrame, fr.seq-1)
	}
	if b[0] < FrameRecords || b[0] > FrameEntries {
		return 0, nil, fmt.Errorf("%w: type %d", ErrBadFrame, b[0])
	}
	return b[0], b[1:], nil
}

// Waiting says whether the reader holds the next frame whole already,
// so that reading it does not wait on the peer.
func (fr *Reader) Waiting() bool {
	k := fr.r.Buffered()
	if k < 4 {
		return false
	}
	h, err := fr.r.Peek(4)
	return err == nil && k >= 4+int(binary.LittleEndian.Uint32(h))+macSize
}

// SplitRecords cuts a records payload into its records, checking each
// one's size and CRC; fn gets each record as a slice of p.
func SplitRecords(p []byte, fn func(record.Record) error) error {
	if len(p) == 0 {
		return fmt.Errorf("%w: empty records frame", ErrBadFrame)
	}
	for len(p) > 0 {
		r, err := record.Decode(p)
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
