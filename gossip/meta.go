package gossip

import (
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// ProtocolVersion is the version of the gossip layer given to memberlist
// as its delegate protocol version (memberlist refuses a node whose
// version is outside another's range). It stays 2, the version of the
// builds before the data-port range existed, so that memberlist never
// splits a rolling upgrade: which nodes can talk is decided by the range
// each node's metadata carries (Meta.ProtoMin, Meta.Proto), the same one
// its data port negotiates with.
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
	// Proto is the highest data-port protocol version the node speaks,
	// ProtoMin the lowest (DecodeMeta sets it to Proto for a node that
	// did not send it: one that speaks one version).
	Proto, ProtoMin uint8
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
//	+--------+--------+-----------------------+---------------+--------------+-------+-----------+
//	| format | proto  | node ID (uint64, BE)  | len (uvarint) | data address | flags | proto min | ...
//	+--------+--------+-----------------------+---------------+--------------+-------+-----------+
//
// format is 1, proto the highest protocol version. flags is one byte, bit
// 0 Leaving; proto min follows it when it differs from proto (0 or equal:
// omitted). Both are written only when needed, so the metadata of a node
// that speaks one version and is not leaving is the same bytes as before
// they were added (and older decoders, which ignore bytes after the data
// address, read all of them). Unknown flag bits and bytes after proto min
// are reserved for fields added later; DecodeMeta ignores them.
func EncodeMeta(m Meta) ([]byte, error) {
	withMin := m.ProtoMin != 0 && m.ProtoMin != m.Proto
	n := metaHeader + uvarintLen(uint64(len(m.DataAddr))) + len(m.DataAddr)
	if m.Leaving || withMin {
		n++
	}
	if withMin {
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
	if m.Leaving || withMin {
		var flags byte
		if m.Leaving {
			flags |= metaLeaving
		}
		b = append(b, flags)
	}
	if withMin {
		b = append(b, m.ProtoMin)
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
	m := Meta{Proto: b[1], ProtoMin: b[1], ID: binary.BigEndian.Uint64(b[2:10])}
	addr, rest, err := readString(b[metaHeader:])
	if err != nil {
		return Meta{}, fmt.Errorf("%w: data address: %v", ErrBadMeta, err)
	}
	m.DataAddr = addr
	if len(rest) > 0 {
		m.Leaving = rest[0]&metaLeaving != 0
	}
	if len(rest) > 1 {
		if rest[1] == 0 || rest[1] > m.Proto {
			return Meta{}, fmt.Errorf("%w: protocol range [%d,%d]", ErrBadMeta, rest[1], m.Proto)
		}
		m.ProtoMin = rest[1]
	}
	return m, nil
}

// overlaps reports whether the protocol ranges [aMin, aMax] and [bMin,
// bMax] have a version in common.
func overlaps(aMin, aMax, bMin, bMax uint8) bool { return max(aMin, bMin) <= min(aMax, bMax) }

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
