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
// that speaks 2 must keep 1 in its range, and speak 1, until every node is
// upgraded.
const ProtocolVersion = 1

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
}

// EncodeMeta encodes m in the layout below. It returns ErrMetaTooLarge if
// the result would exceed MetaMaxSize.
//
//	0        1        2                       10
//	+--------+--------+-----------------------+-----------------+----------------+
//	| format | proto  | node ID (uint64, BE)  | len (uvarint)   | data address   | ...
//	+--------+--------+-----------------------+-----------------+----------------+
//
// format is 1. Bytes after the data address are reserved for fields added
// later; DecodeMeta ignores them.
func EncodeMeta(m Meta) ([]byte, error) {
	n := metaHeader + uvarintLen(uint64(len(m.DataAddr))) + len(m.DataAddr)
	if n > MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d (data address is %d bytes)",
			ErrMetaTooLarge, n, MetaMaxSize, len(m.DataAddr))
	}
	b := make([]byte, 0, n)
	b = append(b, metaFormat, m.Proto)
	b = binary.BigEndian.AppendUint64(b, m.ID)
	b = binary.AppendUvarint(b, uint64(len(m.DataAddr)))
	b = append(b, m.DataAddr...)
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
	addr, _, err := readString(b[metaHeader:])
	if err != nil {
		return Meta{}, fmt.Errorf("%w: data address: %v", ErrBadMeta, err)
	}
	m.DataAddr = addr
	return m, nil
}

// stateMagic opens every state envelope, so that a blob from something
// other than this package is recognised as such.
const stateMagic, stateFormat = 'G', 1

// encodeState wraps the application's push/pull state with the identity of
// the sender, because memberlist's MergeRemoteState does not say who sent
// the state (see the package doc, "Anti-entropy").
//
//	0       1        2
//	+-------+--------+--------------+------+--------------+------+-------------------+
//	| 'G'   | format | len (uvarint)| name | len (uvarint)| meta | application state |
//	+-------+--------+--------------+------+--------------+------+-------------------+
//
// meta is EncodeMeta's output; the application state runs to the end.
func encodeState(name string, meta, state []byte) []byte {
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(name)+len(meta)+len(state))
	b = append(b, stateMagic, stateFormat)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(meta)))
	b = append(b, meta...)
	return append(b, state...)
}

// decodeState splits an envelope written by encodeState. The returned state
// aliases b.
func decodeState(b []byte) (name string, meta Meta, state []byte, err error) {
	if len(b) < 2 || b[0] != stateMagic {
		return "", Meta{}, nil, fmt.Errorf("%w: state envelope: bad magic", ErrBadMeta)
	}
	if b[1] != stateFormat {
		return "", Meta{}, nil, fmt.Errorf("%w: state envelope: unknown format %d", ErrBadMeta, b[1])
	}
	name, rest, err := readString(b[2:])
	if err != nil {
		return "", Meta{}, nil, fmt.Errorf("%w: state envelope: node name: %v", ErrBadMeta, err)
	}
	if name == "" {
		return "", Meta{}, nil, fmt.Errorf("%w: state envelope: empty node name", ErrBadMeta)
	}
	mb, rest, err := readBytes(rest)
	if err != nil {
		return "", Meta{}, nil, fmt.Errorf("%w: state envelope: metadata: %v", ErrBadMeta, err)
	}
	if meta, err = DecodeMeta(mb); err != nil {
		return "", Meta{}, nil, fmt.Errorf("state envelope: %w", err)
	}
	return name, meta, rest, nil
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
