// Package record is the unit of cachecast's log, of its indexes and of
// its wire: the record format (a checked, 8-byte aligned header followed by
// topic, key, tag and value) and the hybrid logical clock that stamps each
// record. It depends on nothing else of the module, so that the cluster
// layer can frame, check and forward records without the store.
package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Errors of the record format. The store returns them too (store.ErrCorrupt
// and the others are the same values), so callers test for either name with
// errors.Is.
var (
	// ErrCorrupt means a record failed its length or CRC check. Recovery
	// truncates the log at the first such record; a read that meets one
	// (a page damaged after recovery) returns this error, never the bytes.
	ErrCorrupt = errors.New("store: record corrupt")

	// ErrTooLarge means a record does not fit the limits: a field longer
	// than its length field can hold, or a record larger than a segment.
	ErrTooLarge = errors.New("store: record too large")

	// ErrInvalid means a message or record breaks a rule that does not
	// depend on size: an empty topic, an unknown kind, a zero origin.
	ErrInvalid = errors.New("store: invalid record")
)

// A record is the unit of the log, of the indexes and of the wire: the bytes
// a node appends are the bytes it sends to its peers, and a receiver checks
// the CRC and appends them as they are.
//
//	 0               4               8       9      10      12      14      16
//	+---------------+---------------+-------+------+-------+-------+-------+
//	|     size      |    crc32c     | kind  | ver  | topic |  key  |  tag  |
//	|   (uint32)    |   (uint32)    | (u8)  | (u8) | len16 | len16 | len16 |
//	+---------------+---------------+-------+------+-------+-------+-------+
//	16                              24                              32
//	|          origin (uint64)      |           seq (uint64)        |
//	+-------------------------------+-------------------------------+
//	32                              40              44              48
//	|           hlc (uint64)        | value len u32 | reserved (0)  |
//	+-------------------------------+---------------+---------------+
//	48
//	| topic | key | tag | value | zero padding to a multiple of 8   |
//	+---------------------------------------------------------------+
//
// All integers are little endian. size counts the header and the four
// fields, not the padding; the record occupies Padded(size) bytes of the log.
// The CRC-32C (Castagnoli) covers bytes [8, size). A size of zero means
// "nothing written here": a preallocated, zeroed segment reads as the end of
// the log, and inside the written part of the log it means the writer moved
// on to the next segment because the record did not fit.
const (
	// HeaderSize is the fixed part of every record.
	HeaderSize = 48

	// Align is the alignment of every record in the log.
	Align = 8

	// Version is the version byte written into every record.
	Version = 1
)

// Kind says what a record does to the key/value view.
type Kind uint8

const (
	// KindValue sets (topic, key) to the value; with an empty key the
	// record is a plain stream message that the view ignores.
	KindValue Kind = 1
	// KindTombstone deletes (topic, key).
	KindTombstone Kind = 2
)

// String returns "value", "tombstone" or kind(N).
func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindTombstone:
		return "tombstone"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits of the record format itself, in bytes: what the length fields of
// the header can hold. They are not the local API's limits, which are much
// smaller (daemon.MaxKeyLen is 1024 bytes, against MaxKeyBytes here); the
// names differ so that the two cannot be taken for each other.
const (
	MaxTopicBytes = 1<<16 - 1
	MaxKeyBytes   = 1<<16 - 1
	MaxTagBytes   = 1<<16 - 1
	MaxValueBytes = 1<<31 - 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Padded is the number of log bytes a record of the given size occupies.
func Padded(size int) int { return (size + Align - 1) &^ (Align - 1) }

// Message is what a publisher hands to the store: the store stamps origin,
// seq and HLC.
type Message struct {
	Topic string
	Key   string
	Tag   string
	Value []byte
	// Delete makes the message a tombstone for (Topic, Key).
	Delete bool
}

// Kind is the record kind this message is written as.
func (m *Message) Kind() Kind {
	if m.Delete {
		return KindTombstone
	}
	return KindValue
}

// EncodedSize is the size (unpadded) of the record the message becomes.
func (m *Message) EncodedSize() int {
	return HeaderSize + len(m.Topic) + len(m.Key) + len(m.Tag) + len(m.Value)
}

// Validate checks the message against the record format's own rules.
func (m *Message) Validate() error {
	switch {
	case m.Topic == "":
		return fmt.Errorf("%w: empty topic", ErrInvalid)
	case m.Delete && m.Key == "":
		return fmt.Errorf("%w: a delete needs a key", ErrInvalid)
	case len(m.Topic) > MaxTopicBytes:
		return fmt.Errorf("%w: topic of %d bytes", ErrTooLarge, len(m.Topic))
	case len(m.Key) > MaxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes", ErrTooLarge, len(m.Key))
	case len(m.Tag) > MaxTagBytes:
		return fmt.Errorf("%w: tag of %d bytes", ErrTooLarge, len(m.Tag))
	case len(m.Value) > MaxValueBytes:
		return fmt.Errorf("%w: value of %d bytes", ErrTooLarge, len(m.Value))
	}
	return nil
}

// Stamp is the identity the accepting node gives a message.
type Stamp struct {
	Origin uint64
	Seq    uint64
	HLC    uint64
}

// Encode writes the record for m with stamp st into dst, which must
// hold at least m.EncodedSize() bytes, and returns the unpadded size. It does
// not write the padding: the log's bytes past a record are already zero.
func Encode(dst []byte, m *Message, st Stamp) int {
	size := m.EncodedSize()
	_ = dst[size-1]
	binary.LittleEndian.PutUint32(dst[0:], uint32(size))
	dst[8] = byte(m.Kind())
	dst[9] = Version
	binary.LittleEndian.PutUint16(dst[10:], uint16(len(m.Topic)))
	binary.LittleEndian.PutUint16(dst[12:], uint16(len(m.Key)))
	binary.LittleEndian.PutUint16(dst[14:], uint16(len(m.Tag)))
	binary.LittleEndian.PutUint64(dst[16:], st.Origin)
	binary.LittleEndian.PutUint64(dst[24:], st.Seq)
	binary.LittleEndian.PutUint64(dst[32:], st.HLC)
	binary.LittleEndian.PutUint32(dst[40:], uint32(len(m.Value)))
	binary.LittleEndian.PutUint32(dst[44:], 0)
	n := HeaderSize
	n += copy(dst[n:], m.Topic)
	n += copy(dst[n:], m.Key)
	n += copy(dst[n:], m.Tag)
	copy(dst[n:], m.Value)
	binary.LittleEndian.PutUint32(dst[4:], crc32.Checksum(dst[8:size], castagnoli))
	return size
}

// Record is a checked record: a view over bytes, usually a slice of the log's
// map, without a copy. Its accessors return sub-slices of those bytes; the
// string forms copy. A Record handed out by a zero-copy read is only valid
// while the read's callback runs.
type Record []byte

// Decode checks the record at the start of b: that the size is sane
// and fits in b, that the field lengths add up to the size, that the kind is
// known and that the CRC matches. It returns the record (exactly size bytes,
// no padding) or an error wrapping ErrCorrupt. A zero size is reported as
// (nil, nil): nothing is written there.
func Decode(b []byte) (Record, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes left, header needs %d", ErrCorrupt, len(b), HeaderSize)
	}
	size := int(binary.LittleEndian.Uint32(b))
	if size == 0 {
		return nil, nil
	}
	if size < HeaderSize || size > len(b) {
		return nil, fmt.Errorf("%w: size %d with %d bytes left", ErrCorrupt, size, len(b))
	}
	r := Record(b[:size])
	if fields := HeaderSize + int(r.topicLen()) + int(r.keyLen()) + int(r.tagLen()) + int(r.valueLen()); fields != size {
		return nil, fmt.Errorf("%w: fields add up to %d, size says %d", ErrCorrupt, fields, size)
	}
	if got, want := crc32.Checksum(b[8:size], castagnoli), binary.LittleEndian.Uint32(b[4:]); got != want {
		return nil, fmt.Errorf("%w: crc %08x, header says %08x", ErrCorrupt, got, want)
	}
	if k := r.Kind(); k != KindValue && k != KindTombstone {
		return nil, fmt.Errorf("%w: unknown kind %d", ErrCorrupt, k)
	}
	if r[9] != Version {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorrupt, r[9])
	}
	if r.Origin() == 0 || r.Seq() == 0 || r.topicLen() == 0 {
		return nil, fmt.Errorf("%w: zero origin, seq or topic", ErrCorrupt)
	}
	if r.Kind() == KindTombstone && r.keyLen() == 0 {
		return nil, fmt.Errorf("%w: tombstone without a key", ErrCorrupt)
	}
	return r, nil
}

func (r Record) topicLen() uint16 { return binary.LittleEndian.Uint16(r[10:]) }
func (r Record) keyLen() uint16   { return binary.LittleEndian.Uint16(r[12:]) }
func (r Record) tagLen() uint16   { return binary.LittleEndian.Uint16(r[14:]) }
func (r Record) valueLen() uint32 { return binary.LittleEndian.Uint32(r[40:]) }

// Size is the record's unpadded length in bytes.
func (r Record) Size() int { return len(r) }

// Kind is the record's kind.
func (r Record) Kind() Kind { return Kind(r[8]) }

// Origin is the ID of the node that first accepted the message.
func (r Record) Origin() uint64 { return binary.LittleEndian.Uint64(r[16:]) }

// Seq is the message's sequence number within its origin.
func (r Record) Seq() uint64 { return binary.LittleEndian.Uint64(r[24:]) }

// HLC is the message's hybrid logical clock timestamp.
func (r Record) HLC() uint64 { return binary.LittleEndian.Uint64(r[32:]) }

// Stamp is the record's identity.
func (r Record) Stamp() Stamp { return Stamp{Origin: r.Origin(), Seq: r.Seq(), HLC: r.HLC()} }

// Topic is the topic's bytes.
func (r Record) Topic() []byte { return r[HeaderSize : HeaderSize+int(r.topicLen())] }

// Key is the key's bytes; empty for a plain stream message.
func (r Record) Key() []byte {
	o := HeaderSize + int(r.topicLen())
	return r[o : o+int(r.keyLen())]
}

// Tag is the tag's bytes; often empty.
func (r Record) Tag() []byte {
	o := HeaderSize + int(r.topicLen()) + int(r.keyLen())
	return r[o : o+int(r.tagLen())]
}

// Value is the value's bytes; empty for a tombstone.
func (r Record) Value() []byte {
	o := HeaderSize + int(r.topicLen()) + int(r.keyLen()) + int(r.tagLen())
	return r[o:]
}

// Message copies the record's fields into a Message.
func (r Record) Message() Message {
	return Message{
		Topic:  string(r.Topic()),
		Key:    string(r.Key()),
		Tag:    string(r.Tag()),
		Value:  append([]byte(nil), r.Value()...),
		Delete: r.Kind() == KindTombstone,
	}
}

// Clone copies the record out of the bytes it views.
func (r Record) Clone() Record { return append(Record(nil), r...) }

// TagHash is the hash stored in topic index entries so that a tag filter
// can skip a record without reading it. Zero is the hash of the empty tag.
func TagHash(tag []byte) uint32 {
	if len(tag) == 0 {
		return 0
	}
	h := crc32.Checksum(tag, castagnoli)
	if h == 0 {
		h = 1
	}
	return h
}
