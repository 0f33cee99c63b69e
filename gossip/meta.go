package gossip

import (
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// ProtocolVersion is the version of cachecast's node-to-node protocol this
// build speaks. It travels in every node's metadata (Member.Proto) so that
// the data plane can refuse or adapt to a peer of another version. It is
// also given to memberlist as the delegate protocol version, so memberlist
// refuses to merge with a cluster whose range excludes it: a later build
// that speaks 3 must keep 2 in its range, and speak 2, until every node is
// upgraded.
//
// 2: the data port authenticates every frame (broadcast.ProtocolVersion 2).
// Version 1 nodes sent frames without a MAC; they are not in the range,
// so a cluster moves to 2 whole (a 2 and a 1 do not merge).
const ProtocolVersion = 2

// MetaMaxSize is memberlist's limit on a node's metadata, in bytes.
const MetaMaxSize = memberlist.MetaMaxSize

// metaFormat is the first byte of encoded metadata. A new format number is
// for incompatible changes only; fields added at the end keep the number,
// and older decoders ignore them.
const metaFormat = 1

// metaHeader is the fixed part of encoded metadata: format, proto, node ID.
const metaHeader = 1 + 1 + 8

// Meta is what a node tells every other node about itself through
// memberlist's node metadata.
type Meta struct {
	// ID is the node's origin ID (the store's Origin).
	ID uint64
	// DataAddr is the host:port of the node's data port.
	DataAddr string
	// Proto is the node's ProtocolVersion.
	Proto uint8
	// Leaving is set by Leave before memberlist's own leave goes out, so
	// that the others can tell a leave from a failure (see the package
	// doc, "Events").
	Leaving bool
}

// metaLeaving is the bit of the flags byte that says Meta.Leaving.
const metaLeaving = 1 << 0

// EncodeMeta encodes m in the layout below. It returns ErrMetaTooLarge if
// the result would exceed MetaMaxSize.
//
//	0        1        2                       10
//	+--------+--------+-----------------------+---------------+--------------+-------+
//	| format | proto  | node ID (uint64, BE)  | len (uvarint) | data address | flags | ...
//	+--------+--------+-----------------------+---------------+--------------+-------+
//
// format is 1. flags is one byte, bit 0 Leaving; it is written only when
// a flag is set, so the metadata of a node that is not leaving is the
// same bytes as before the byte was added (and older decoders, which
// ignore bytes after the data address, read both). Unknown flag bits and
// bytes after the flags are reserved for fields added later; DecodeMeta
// ignores them.
func EncodeMeta(m Meta) ([]byte, error) {
	n := metaHeader + uvarintLen(uint64(len(m.DataAddr))) + len(m.DataAddr)
	if m.Leaving {
		n++
	}
	if n > MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d (data address is %d bytes)",
			ErrMetaTooLarge, n, MetaMaxSize, len(m.DataAddr))
	}
	b := make([]byte, 0, n)
	b = append(b, metaFormat, m.Proto)
	b = binary.BigEndian.AppendUint64(b, m.ID)
	b = binary.AppendUvarint(b, uint64(len(m.DataAddr)))
	b = append(b, m.DataAddr...)
	if m.Leaving {
		b = append(b, metaLeaving)
	}
	return b, nil
}

// DecodeMeta decodes metadata written by EncodeMeta. Malformed input gives
// an error wrapping ErrBadMeta, never a panic; lengths are checked against
// the bytes present before anything is allocated.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) > MetaMaxSize {
		return Meta{}, fmt.Errorf("%w: %d bytes, limit %d", ErrBadMeta, len(b), MetaMaxSize)
	}
	if len(b) < metaHeader {
		return Meta{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrBadMeta, len(b), metaHeader)
	}
	if b[0] != metaFormat {
		return Meta{}, fmt.Errorf("%w: unknown format %d", ErrBadMeta, b[0])
	}
	m := Meta{Proto: b[1], ID: binary.BigEndian.Uint64(b[2:10])}
	addr, rest, err := readString(b[metaHeader:])
	if err != nil {
		return Meta{}, fmt.Errorf("%w: data address: %v", ErrBadMeta, err)
	}
	m.DataAddr = addr
	if len(rest) > 0 {
		m.Leaving = rest[0]&metaLeaving != 0
	}
	return m, nil
}

// readBytes reads a uvarint length and that many bytes, returning them (a
// view of b) and the rest.
func readBytes(b []byte) (v, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || k != uvarintLen(n) {
		// Not a uvarint, or not its shortest form (0x80 0x00 for 0): one
		// value has one encoding, so what decodes re-encodes the same.
		return nil, nil, fmt.Errorf("bad length")
	}
	b = b[k:]
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("length %d exceeds the %d bytes left", n, len(b))
	}
	return b[:n], b[n:], nil
}

// readString is readBytes returning a string copy.
func readString(b []byte) (string, []byte, error) {
	v, rest, err := readBytes(b)
	return string(v), rest, err
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
