// Package backup is the file `cachecast backup` writes and `cachecast
// restore` reads: a node's view as the daemon streams it to a peer that
// bootstraps (store.SnapshotTo), with the node's durable cursors and who
// it was, under one SHA-256.
//
//	+------------------+-------------+---------------+------------------+
//	| magic "CCBACKUP" | format (u32)| meta len (u32)| meta (JSON)      |
//	+------------------+-------------+---------------+------------------+
//	| the view's snapshot (store/view's snapshot layout, its own CRC)   |
//	+--------------------------------------------------------------------+
//	| SHA-256 (32 bytes) of every byte before it                        |
//	+--------------------------------------------------------------------+
//
// Integers are little endian. The consumer groups' state (positions,
// hosts, dead letters) is in the view, as the internal topics that carry
// it. A reader refuses a file whose checksum does not match, that is cut
// short, or whose format is not one it knows, saying which.
package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// Format is the version of the layout this build writes; it reads
// formats MinFormat to Format.
const (
	Format    = 1
	MinFormat = 1
	magic     = "CCBACKUP"
	headSize  = 16
	sumSize   = sha256.Size
	// maxMeta bounds the metadata (cursors are at most a few thousand).
	maxMeta = 64 << 20
)

// ErrCorrupt is wrapped by every error about a file that is not a whole,
// intact backup.
var ErrCorrupt = errors.New("not an intact cachecast backup")

// ErrFormat is wrapped by the error about a backup of a format this build
// does not read.
var ErrFormat = errors.New("backup format not readable by this build")

// Meta is who the backed-up node was and its durable cursors.
type Meta struct {
	Format  int       `json:"format"`
	Version string    `json:"version"` // the daemon's
	Node    string    `json:"node"`
	Origin  string    `json:"origin"` // hex; a restored node never takes it
	Created time.Time `json:"created"`
	Cursors []Cursor  `json:"cursors"`
}

// Cursor is one durable cursor of the backed-up node.
type Cursor struct {
	Name   string `json:"name"`
	Topic  string `json:"topic"`
	Offset uint64 `json:"offset"` // in the backed-up node's log
	Owner  uint32 `json:"owner"`
	Owned  bool   `json:"owned"`
}

// Write writes a backup of meta and the snapshot that snapshot streams to
// w.
func Write(w io.Writer, meta Meta, snapshot func(io.Writer) error) error {
	meta.Format = Format
	mj, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	sum := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 1<<20)
	head := make([]byte, headSize)
	copy(head, magic)
	binary.LittleEndian.PutUint32(head[8:], Format)
	binary.LittleEndian.PutUint32(head[12:], uint32(len(mj)))
	bw.Write(head)
	bw.Write(mj)
	if err := snapshot(bw); err != nil {
		return fmt.Errorf("backup: the view's snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(sum.Sum(nil))
	return err
}

// Reader reads a backup: Meta first, then the snapshot from Snapshot.
type Reader struct {
	Meta Meta
	r    *tailReader
}

// NewReader reads the header and the metadata of the backup r holds. The
// checksum is checked when Snapshot's reader reaches the end: read it to
// its end (Verify does) before trusting anything.
func NewReader(r io.Reader) (*Reader, error) {
	sum := sha256.New()
	tr := &tailReader{r: bufio.NewReaderSize(r, 1<<20), sum: sum}
	head := make([]byte, headSize)
	if _, err := io.ReadFull(tr, head); err != nil {
		return nil, fmt.Errorf("%w: %d bytes is too short for the header", ErrCorrupt, tr.n)
	}
	if string(head[:8]) != magic {
		return nil, fmt.Errorf("%w: no %q at the start", ErrCorrupt, magic)
	}
	if f := binary.LittleEndian.Uint32(head[8:]); f < MinFormat || f > Format {
		return nil, fmt.Errorf("%w: the file is format %d, this build reads formats %d to %d: restore it with a build that reads it (a newer cachecast)", ErrFormat, f, MinFormat, Format)
	}
	n := binary.LittleEndian.Uint32(head[12:])
	if n > maxMeta {
		return nil, fmt.Errorf("%w: metadata of %d bytes", ErrCorrupt, n)
	}
	mj := make([]byte, 0, min(n, 1<<16))
	b := bytes.NewBuffer(mj)
	if _, err := io.CopyN(b, tr, int64(n)); err != nil {
		return nil, fmt.Errorf("%w: cut short in the metadata", ErrCorrupt)
	}
	var rd Reader
	if err := json.Unmarshal(b.Bytes(), &rd.Meta); err != nil {
		return nil, fmt.Errorf("%w: metadata: %v", ErrCorrupt, err)
	}
	rd.r = tr
	return &rd, nil
}

// Snapshot is the reader of the view's snapshot: at its end it returns
// an error wrapping ErrCorrupt if the file's checksum does not match.
func (r *Reader) Snapshot() io.Reader { return r.r }

// Verify reads the whole backup in r and returns its metadata if the file
// is whole and its checksum matches.
func Verify(r io.Reader) (Meta, error) {
	rd, err := NewReader(r)
	if err != nil {
		return Meta{}, err
	}
	if _, err := io.Copy(io.Discard, rd.Snapshot()); err != nil {
		return Meta{}, err
	}
	return rd.Meta, nil
}

// tailReader passes on what r holds except its last sumSize bytes, which
// it keeps back and, at the end, compares with the SHA-256 of the rest.
type tailReader struct {
	r    *bufio.Reader
	sum  hash.Hash
	n    int64
	done bool
}

func (t *tailReader) Read(p []byte) (int, error) {
	if t.done {
		return 0, io.EOF
	}
	// What is buffered beyond the last sumSize bytes can go out.
	peek, err := t.r.Peek(sumSize + 1)
	if len(peek) <= sumSize {
		if err == nil || err == io.EOF {
			return 0, t.finish(peek)
		}
		return 0, err
	}
	avail := t.r.Buffered() - sumSize
	n, _ := t.r.Read(p[:min(len(p), avail)])
	t.sum.Write(p[:n])
	t.n += int64(n)
	return n, nil
}

func (t *tailReader) finish(tail []byte) error {
	t.done = true
	if len(tail) < sumSize {
		return fmt.Errorf("%w: cut short (%d bytes, no checksum)", ErrCorrupt, t.n+int64(len(tail)))
	}
	if !bytes.Equal(tail, t.sum.Sum(nil)) {
		return fmt.Errorf("%w: the SHA-256 of its %d bytes does not match the one it ends with (damaged or changed)", ErrCorrupt, t.n)
	}
	return io.EOF
}
