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
	"math"
	"strconv"
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
// Version 2 (Version2) is written only for a message that needs it:
// one with an expiry, an effective time, a cancel, or a record of a batch
// that more records of the same batch follow. Its header is 64 bytes: the
// reserved word at 44 holds "batch follow" and two fields come before the
// topic:
//
//	40              44              48                              56
//	| value len u32 | batch follow  |     expires at (u64, Unix ms,  |
//	|               | (u32)         |     0 = never)                 |
//	+---------------+---------------+--------------------------------+
//	56                              64
//	|  effective at (u64, Unix ms,  | topic | key | tag | value | pad
//	|  0 = its stamp's wall time)   |
//	+-------------------------------+
//
// batch follow is how many records of the same batch come after this one
// in its origin's sequence (0: the last one). A version 2 record always
// needs one of the four (the encoding is canonical: the same message is
// always the same bytes); kind 3 (cancel) exists only in version 2.
//
// Version 3 (Version3) is an expiry change (kind 5, KindExpiry, and only
// it): EXPIRE, PERSIST and the like change the expiry of one version of
// a key, the one they saw, and nothing else (see "Time" in DESIGN.md).
// Its header is 88 bytes: version 2's 64, where expires at is the new
// expiry (0: none, a PERSIST) and effective at the changed version's
// effective_at (0: an ordinary write), then the changed version's stamp:
//
//	64                              72                              80
//	|  target hlc (u64)             |  target origin (u64) != 0     |
//	+-------------------------------+-------------------------------+
//	80                              88
//	|  target seq (u64) != 0        | topic | key | tag | value | pad
//	+-------------------------------+
//
// tag and value are the target version's own (so that a node that holds
// the version expired already, or not yet, can serve it from this record
// alone): the record never makes a version of its own, it only ever
// gives the target version this expiry, and does nothing to any other.
// Its own stamp (origin, seq, hlc) orders the expiry changes of one
// version: the greatest wins.
//
// Version 4 (Version4) is a counter increment (kind 6, KindCounter, and
// only it): INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT and HINCRBY add to
// one version of a key, the one they saw, and to no other (see
// "Counters" in DESIGN.md). Its header is laid out as version 3's (88
// bytes): expires at is 0, effective at is the counted version's
// effective_at (0: an ordinary write), then the counted version's stamp
// at 64 (target hlc, origin, seq, none of them 0). The tag is empty and
// the value is the increment in decimal: an integer within int64, or a
// finite float (INCRBYFLOAT), never empty. Every increment counts once
// on every node (its origin and seq name it), summed per origin.
//
// Version 5 (Version5) is a counter increment of a key the node held no
// value of (kind 6, KindCounter, and only it): it counts on the absence
// after the key's last version, from 0 ("Counters" in DESIGN.md), so
// that increments made on several nodes of a key none had a value of
// all count. Its header is version 4's: the target is the last version
// the node held, a tombstone or an expired value, expires at that
// version's expiry when it expired (0: deleted), effective at its
// effective_at; or, when the node held nothing of the key (never
// written, or its tombstone collected), target origin and seq are 0,
// target hlc is the node's horizon (an HLC whose wall time is the
// instant before which it may have collected tombstones, 0: none), and
// expires at and effective at are 0.
//
// Version 6 (Version6) is an expiry change (kind 5, KindExpiry, and only
// it) of a counter's revival: the value served for the absence after a
// version, which an increment of version 5 counts on ("Counters" in
// DESIGN.md). It names that absence as version 5 does, so that no node
// applies it to another absence of the same version, nor to the version
// itself. Its header is 96 bytes: version 3's 88, where the target is
// the version the absence follows (record.Genesis for a key no node
// held), effective at that version's effective_at, expires at the
// revival's new expiry; then the instant the absence began:
//
//	88                              96
//	|  gone (u64, Unix ms: the       | topic | key | tag | value | pad
//	|  target's expiry when it       |
//	|  expired, 0: deleted)          |
//	+-------------------------------+
//
// tag is empty and value the revival's base, "0".
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

	// Version is the version byte of a record that uses none of the
	// time fields: the format every build reads.
	Version = 1
	// Version2 is the version of a record with an expiry, an
	// effective time, a cancel or a batch follow.
	Version2 = 2
	// HeaderSizeV2 is the header of a version 2 record.
	HeaderSizeV2 = 64
	// Version3 is the version of an expiry change (KindExpiry), which
	// builds before it refuse: a node sends one only on data protocol 7
	// and later (package broadcast, ProtocolExpiry).
	Version3 = 3
	// HeaderSizeV3 is the header of a version 3 record: version 2's and
	// the target version's stamp.
	HeaderSizeV3 = 88
	// Version4 is the version of a counter increment (KindCounter),
	// which builds before it refuse: a node sends one only on data
	// protocol 8 and later (package broadcast, ProtocolCounter).
	Version4 = 4
	// HeaderSizeV4 is the header of a version 4 record, laid out as
	// version 3's.
	HeaderSizeV4 = 88
	// Version5 is the version of a counter increment of a key without
	// a value (KindCounter on the absence after a version), which
	// builds before it refuse: a node sends one only on data protocol 9
	// and later (package broadcast, ProtocolAbsent). Its header is
	// version 4's.
	Version5 = 5
	// Version6 is the version of an expiry change of a counter's
	// revival (KindExpiry naming the absence after a version), which
	// builds before it refuse: a node sends one only on data protocol
	// 10 and later (package broadcast, ProtocolRevival).
	Version6 = 6
	// HeaderSizeV6 is the header of a version 6 record: version 3's and
	// the absence's gone.
	HeaderSizeV6 = 96
)

// Kind says what a record does to the key/value view.
type Kind uint8

const (
	// KindValue sets (topic, key) to the value; with an empty key the
	// record is a plain stream message that the view ignores.
	KindValue Kind = 1
	// KindTombstone deletes (topic, key).
	KindTombstone Kind = 2
	// KindCancel voids the scheduled records of (topic, key) with the
	// same effective time and a smaller (HLC, origin): see "Time" in
	// DESIGN.md. Version 2 only.
	KindCancel Kind = 3
	// KindLost is a placeholder this node wrote in its own log over a
	// record it found damaged (see EncodeLost): it keeps the record's
	// place, size, origin, seq and topic, and nothing else. It never
	// leaves the node and the view ignores it (it has no key). Version 1
	// only.
	KindLost Kind = 4
	// KindExpiry changes the expiry of one version of (topic, key), the
	// one its target stamp names, and of no other: see Version3 and
	// "Time" in DESIGN.md; or of the revival of one absence after that
	// version (Version6). Versions 3 and 6 only.
	KindExpiry Kind = 5
	// KindCounter adds its value, a decimal increment, to the version of
	// (topic, key) its target stamp names, and to no other: see Version4
	// and "Counters" in DESIGN.md. Version 4 only.
	KindCounter Kind = 6
)

// String returns "value", "tombstone", "cancel", "lost", "expiry",
// "counter" or kind(N).
func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindTombstone:
		return "tombstone"
	case KindCancel:
		return "cancel"
	case KindLost:
		return "lost"
	case KindExpiry:
		return "expiry"
	case KindCounter:
		return "counter"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits of the record format itself, in bytes: what the length fields of
// the header can hold. They are not the local API's limits, which are much
// smaller (wire.MaxAPIKeyLen, the API's, is 1024 bytes, against MaxKeyBytes here); the
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
	// ExpiresAt, in Unix milliseconds, is when the value stops being
	// served (0: never). Not for a delete or a cancel.
	ExpiresAt int64
	// EffectiveAt, in Unix milliseconds, schedules the message: it takes
	// effect at that instant instead of at once (0: an ordinary write,
	// effective at its stamp's time).
	EffectiveAt int64
	// Cancel makes the message a cancel of the scheduled records of
	// (Topic, Key) at EffectiveAt (which it needs).
	Cancel bool
	// BatchFollow is how many messages of the same batch come after this
	// one; Together sets it. A batch's records become visible together.
	BatchFollow uint32
	// ExpiryOf, when its Origin is set, makes the message an expiry
	// change (KindExpiry) of the version of (Topic, Key) it stamps, and
	// of no other: Tag and Value are that version's, EffectiveAt its
	// effective_at (0 for an ordinary write), ExpiresAt the new expiry
	// (0: none).
	ExpiryOf Stamp
	// ExpiryAbsent makes an expiry change (ExpiryOf set) one of the
	// revival of the absence after the version ExpiryOf stamps (a
	// counter's, see CountAbsent): that version deleted (Gone 0) or
	// expired at Gone. Value is the revival's base, "0" (version 6).
	ExpiryAbsent bool
	// Gone is, for ExpiryAbsent, the instant ExpiryOf's version expired
	// at, in Unix milliseconds (0: it was deleted).
	Gone int64
	// CountOn, when its Origin is set, makes the message a counter
	// increment (KindCounter) of the version of (Topic, Key) it stamps,
	// and of no other: Value is the increment in decimal (Delta reads
	// it), EffectiveAt the version's effective_at (0 for an ordinary
	// write).
	CountOn Stamp
	// CountAbsent makes the message a counter increment (KindCounter,
	// version 5) of the absence after the version CountOn stamps, which
	// the node held deleted, or expired at ExpiresAt; a zero CountOn
	// Origin and Seq say that it held nothing of the key, CountOn's HLC
	// is then its horizon (see Version5).
	CountAbsent bool
	// CountOnEarlier, when above 0, makes the message a counter increment
	// of the version an earlier message of its batch writes, message
	// CountOnEarlier-1 (with CountAbsent, of the absence after that
	// message's delete): an INCR after a SET or DEL in one MULTI. That
	// version's stamp is known only when the store stamps the batch,
	// which sets CountOn then (and CountOnEarlier back to 0).
	CountOnEarlier int
}

// Counter reports whether the message is a counter increment (CountOn
// set, CountOnEarlier, or CountAbsent): a version 4 or 5 record.
func (m *Message) Counter() bool {
	return m.CountOn.Origin != 0 || m.CountAbsent || m.CountOnEarlier > 0
}

// Unversioned reports whether the message counts on the absence of a
// key its node held nothing of (CountAbsent without a target version).
func (m *Message) Unversioned() bool {
	return m.CountAbsent && m.CountOn.Origin == 0 && m.CountOnEarlier == 0
}

// Genesis is the stamp of the version before every version of a key,
// which the views give to a counter created on a key no node held
// anything of (see Version5): no node stamps a message so (its HLC is
// the instant 0, before every clock's).
var Genesis = Stamp{Origin: math.MaxUint64, Seq: math.MaxUint64, HLC: 1}

// Shown is s as an answer shows a version: the zero stamp (origin 0,
// seq 0, hlc 0: no version) for Genesis, which no record wrote, the
// version of the revival of a key never held; s otherwise.
func (s Stamp) Shown() Stamp {
	if s == Genesis {
		return Stamp{}
	}
	return s
}

// Delta reads a counter increment's value: an integer within int64 (n),
// or else a finite float (f, isFloat). ok is false for anything else.
func Delta(v []byte) (n int64, f float64, isFloat, ok bool) {
	s := string(v)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, 0, false, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, 0, false, false
	}
	return 0, f, true, true
}

// ExpiryChange reports whether the message is an expiry change
// (ExpiryOf set): a version 3 record.
func (m *Message) ExpiryChange() bool { return m.ExpiryOf.Origin != 0 }

// Together marks ms as one batch whose records become visible together on
// every node (each message's BatchFollow). A batch of one is left alone.
func Together(ms []Message) {
	if len(ms) < 2 {
		return
	}
	for i := range ms {
		ms[i].BatchFollow = uint32(len(ms) - 1 - i)
	}
}

// Kind is the record kind this message is written as.
func (m *Message) Kind() Kind {
	switch {
	case m.Counter():
		return KindCounter
	case m.ExpiryChange():
		return KindExpiry
	case m.Cancel:
		return KindCancel
	case m.Delete:
		return KindTombstone
	}
	return KindValue
}

// timed reports whether the message needs a version 2 record.
func (m *Message) timed() bool {
	return m.TimeFields() || m.BatchFollow != 0 || m.ExpiryChange() || m.Counter()
}

// TimeFields reports whether the message carries an expiry, an effective
// time or a cancel: what only a version 2 record can say. (A batch's
// marking, BatchFollow, needs version 2 too; a batch written without it
// is applied one record at a time, as before version 2.)
func (m *Message) TimeFields() bool {
	return m.ExpiresAt != 0 || m.EffectiveAt != 0 || m.Cancel
}

// headerSize is the header of the record the message becomes.
func (m *Message) headerSize() int {
	if m.Counter() {
		return HeaderSizeV4
	}
	if m.ExpiryAbsent {
		return HeaderSizeV6
	}
	if m.ExpiryChange() {
		return HeaderSizeV3
	}
	if m.timed() {
		return HeaderSizeV2
	}
	return HeaderSize
}

// EncodedSize is the size (unpadded) of the record the message becomes.
func (m *Message) EncodedSize() int {
	return m.headerSize() + len(m.Topic) + len(m.Key) + len(m.Tag) + len(m.Value)
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
	case m.ExpiresAt < 0 || m.EffectiveAt < 0:
		return fmt.Errorf("%w: a negative expiry or effective time", ErrInvalid)
	case m.ExpiresAt > MaxInstant || m.EffectiveAt > MaxInstant:
		return fmt.Errorf("%w: an expiry or effective time after 9999-12-31T23:59:59.999Z: no date could show it", ErrInvalid)
	case (m.ExpiresAt != 0 || m.EffectiveAt != 0 || m.Cancel) && m.Key == "":
		return fmt.Errorf("%w: an expiry, an effective time or a cancel needs a key", ErrInvalid)
	case m.ExpiresAt != 0 && (m.Delete || m.Cancel):
		return fmt.Errorf("%w: a delete or a cancel cannot expire", ErrInvalid)
	case m.Cancel && (m.Delete || m.EffectiveAt == 0 || len(m.Value) != 0):
		return fmt.Errorf("%w: a cancel needs the effective time it cancels, and no value", ErrInvalid)
	case m.ExpiresAt != 0 && m.EffectiveAt != 0 && m.ExpiresAt <= m.EffectiveAt:
		return fmt.Errorf("%w: the expiry is not after the effective time", ErrInvalid)
	case m.ExpiryChange() && (m.Key == "" || m.Delete || m.Cancel || m.ExpiryOf.Seq == 0 || m.ExpiryOf.HLC == 0):
		return fmt.Errorf("%w: an expiry change needs a key and the whole stamp of a value it changes", ErrInvalid)
	case (m.ExpiryAbsent || m.Gone != 0) && !m.ExpiryChange() || m.Gone != 0 && !m.ExpiryAbsent || m.Gone < 0 || m.Gone > MaxInstant:
		return fmt.Errorf("%w: the absence of a revival (and its gone) belongs to an expiry change only", ErrInvalid)
	case m.CountOnEarlier < 0 || m.CountOnEarlier > 0 && (m.CountOn != Stamp{} || m.ExpiresAt != 0 || m.EffectiveAt != 0):
		return fmt.Errorf("%w: an increment of an earlier message of its batch names no stamp, expiry or effective time of its own", ErrInvalid)
	case m.Counter() && (m.Key == "" || m.Delete || m.Cancel || m.ExpiryChange() || m.ExpiresAt != 0 && !m.CountAbsent || m.Tag != "" ||
		!m.Unversioned() && m.CountOnEarlier == 0 && (m.CountOn.Origin == 0 || m.CountOn.Seq == 0 || m.CountOn.HLC == 0)):
		return fmt.Errorf("%w: a counter increment needs a key and the whole stamp of a value it counts on, and no expiry or tag", ErrInvalid)
	case m.Unversioned() && (m.CountOn.Seq != 0 || m.ExpiresAt != 0 || m.EffectiveAt != 0):
		return fmt.Errorf("%w: an increment of a key without a version names no seq, expiry or effective time", ErrInvalid)
	case m.Counter():
		if _, _, _, ok := Delta(m.Value); !ok {
			return fmt.Errorf("%w: a counter increment's value is an integer or a finite float", ErrInvalid)
		}
	}
	return nil
}

// MaxInstant is the last instant an expiry or an effective time may be,
// in Unix milliseconds: 9999-12-31T23:59:59.999Z. A later one could not be
// written as an RFC 3339 date (the API's, the CLI's), so it is refused
// when published, as one before 1970 is.
const MaxInstant = 253402300799999

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
	n := HeaderSize
	if m.timed() {
		dst[9] = Version2
		binary.LittleEndian.PutUint64(dst[48:], uint64(m.ExpiresAt))
		binary.LittleEndian.PutUint64(dst[56:], uint64(m.EffectiveAt))
		n = HeaderSizeV2
	}
	if m.ExpiryChange() {
		dst[9] = Version3
		putTarget(dst, m.ExpiryOf)
		n = HeaderSizeV3
	}
	if m.ExpiryAbsent {
		dst[9] = Version6
		binary.LittleEndian.PutUint64(dst[88:], uint64(m.Gone))
		n = HeaderSizeV6
	}
	if m.Counter() {
		dst[9] = Version4
		if m.CountAbsent {
			dst[9] = Version5
		}
		putTarget(dst, m.CountOn)
		n = HeaderSizeV4
	}
	binary.LittleEndian.PutUint16(dst[10:], uint16(len(m.Topic)))
	binary.LittleEndian.PutUint16(dst[12:], uint16(len(m.Key)))
	binary.LittleEndian.PutUint16(dst[14:], uint16(len(m.Tag)))
	binary.LittleEndian.PutUint64(dst[16:], st.Origin)
	binary.LittleEndian.PutUint64(dst[24:], st.Seq)
	binary.LittleEndian.PutUint64(dst[32:], st.HLC)
	binary.LittleEndian.PutUint32(dst[40:], uint32(len(m.Value)))
	binary.LittleEndian.PutUint32(dst[44:], m.BatchFollow)
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
func Decode(b []byte) (Record, error) { return decode(b, true) }

// DecodeChecked is Decode without the CRC, for bytes that passed Decode
// since they were last written (a recovery's replay of the records its
// scan has just checked): the CRC, one pass over every byte, is most of
// a check's cost.
func DecodeChecked(b []byte) (Record, error) { return decode(b, false) }

func decode(b []byte, crc bool) (Record, error) {
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
	switch r[9] {
	case Version:
	case Version2:
		if size < HeaderSizeV2 {
			return nil, fmt.Errorf("%w: version 2 record of %d bytes", ErrCorrupt, size)
		}
	case Version3:
		if size < HeaderSizeV3 {
			return nil, fmt.Errorf("%w: version 3 record of %d bytes", ErrCorrupt, size)
		}
	case Version4, Version5:
		if size < HeaderSizeV4 {
			return nil, fmt.Errorf("%w: version %d record of %d bytes", ErrCorrupt, r[9], size)
		}
	case Version6:
		if size < HeaderSizeV6 {
			return nil, fmt.Errorf("%w: version 6 record of %d bytes", ErrCorrupt, size)
		}
	default:
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorrupt, r[9])
	}
	if fields := r.headerLen() + int(r.topicLen()) + int(r.keyLen()) + int(r.tagLen()) + int(r.valueLen()); fields != size {
		return nil, fmt.Errorf("%w: fields add up to %d, size says %d", ErrCorrupt, fields, size)
	}
	if crc {
		if got, want := crc32.Checksum(b[8:size], castagnoli), binary.LittleEndian.Uint32(b[4:]); got != want {
			return nil, fmt.Errorf("%w: crc %08x, header says %08x", ErrCorrupt, got, want)
		}
	}
	if k := r.Kind(); (k == KindExpiry) != r.expiryChange() || (k == KindCounter) != r.counter() ||
		k != KindValue && k != KindTombstone && k != KindExpiry && k != KindCounter && (k != KindCancel || r[9] != Version2) && (k != KindLost || r[9] != Version) {
		return nil, fmt.Errorf("%w: unknown kind %d in a version %d record", ErrCorrupt, k, r[9])
	}
	if err := r.checkTime(); err != nil {
		return nil, err
	}
	if r.Origin() == 0 || r.Seq() == 0 || r.topicLen() == 0 {
		return nil, fmt.Errorf("%w: zero origin, seq or topic", ErrCorrupt)
	}
	if r.Kind() == KindTombstone && r.keyLen() == 0 {
		return nil, fmt.Errorf("%w: tombstone without a key", ErrCorrupt)
	}
	return r, nil
}

// checkTime checks the version 2 fields: a v1 record has none (its
// reserved word is 0), a v2 record needs one, and they obey
// Message.Validate's rules, so that a record decodes to a message that
// encodes to the same bytes.
func (r Record) checkTime() error {
	if r[9] == Version {
		if binary.LittleEndian.Uint32(r[44:]) != 0 {
			return fmt.Errorf("%w: reserved word set in a version 1 record", ErrCorrupt)
		}
		return nil
	}
	m := Message{Topic: "t", Key: "k", Delete: r.Kind() == KindTombstone, Cancel: r.Kind() == KindCancel,
		ExpiresAt: int64(r.ExpiresAt()), EffectiveAt: int64(r.EffectiveAt()), BatchFollow: r.BatchFollow(),
		ExpiryOf: r.expiryOf(), CountOn: r.countOn(), CountAbsent: r[9] == Version5,
		ExpiryAbsent: r[9] == Version6, Gone: r.gone()}
	if (r.expiryChange() || r[9] == Version4) && r.Target().Origin == 0 {
		return fmt.Errorf("%w: an expiry change or an increment without a target origin", ErrCorrupt)
	}
	if len(r.Key()) == 0 {
		m.Key = ""
	}
	if len(r.Value()) != 0 {
		m.Value = []byte{0}
	}
	if r.counter() {
		m.Value, m.Tag = r.Value(), string(r.Tag())
	}
	if !m.timed() {
		return fmt.Errorf("%w: a version 2 record without an expiry, effective time, cancel or batch", ErrCorrupt)
	}
	if m.ExpiresAt < 0 || m.EffectiveAt < 0 || m.Gone < 0 {
		return fmt.Errorf("%w: time field out of range", ErrCorrupt)
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return nil
}

// headerLen is the header's size: 48 bytes in version 1, 64 in 2, 88
// in 3, 4 and 5, 96 in 6.
func (r Record) headerLen() int {
	switch r[9] {
	case Version6:
		return HeaderSizeV6
	case Version2:
		return HeaderSizeV2
	case Version3:
		return HeaderSizeV3
	case Version4, Version5:
		return HeaderSizeV4
	}
	return HeaderSize
}

// counter reports whether the record's version is a counter
// increment's (4 or 5).
func (r Record) counter() bool { return r[9] == Version4 || r[9] == Version5 }

// expiryChange reports whether the record's version is an expiry
// change's (3 or 6).
func (r Record) expiryChange() bool { return r[9] == Version3 || r[9] == Version6 }

// Absent reports whether the record applies to the absence after its
// target: a counter increment of it (version 5), or an expiry change of
// its revival (version 6).
func (r Record) Absent() bool { return r[9] == Version5 || r[9] == Version6 }

// Gone is, for a record that applies to the absence after its target
// (Absent), the instant that target expired at, in Unix milliseconds (0:
// it was deleted); 0 for any other record.
func (r Record) Gone() int64 {
	switch r[9] {
	case Version5:
		return int64(r.ExpiresAt())
	case Version6:
		return r.gone()
	}
	return 0
}

// gone is a version 6 record's gone field, 0 for any other.
func (r Record) gone() int64 {
	if r[9] != Version6 {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(r[88:]))
}

func (r Record) topicLen() uint16 { return binary.LittleEndian.Uint16(r[10:]) }
func (r Record) keyLen() uint16   { return binary.LittleEndian.Uint16(r[12:]) }
func (r Record) tagLen() uint16   { return binary.LittleEndian.Uint16(r[14:]) }
func (r Record) valueLen() uint32 { return binary.LittleEndian.Uint32(r[40:]) }

// Size is the record's unpadded length in bytes.
func (r Record) Size() int { return len(r) }

// Kind is the record's kind.
func (r Record) Kind() Kind { return Kind(r[8]) }

// Version is the record's format version: Version to Version6. Builds
// before Version2 refuse a Version2 record as corrupt, builds before
// Version3 a Version3 record, and so on to Version6, so a node never sends
// one to a peer that speaks an older data protocol (package broadcast,
// ProtocolTimed, ProtocolExpiry, ProtocolCounter, ProtocolAbsent,
// ProtocolRevival).
func (r Record) Version() byte { return r[9] }

// Origin is the ID of the node that first accepted the message.
func (r Record) Origin() uint64 { return binary.LittleEndian.Uint64(r[16:]) }

// Seq is the message's sequence number within its origin.
func (r Record) Seq() uint64 { return binary.LittleEndian.Uint64(r[24:]) }

// HLC is the message's hybrid logical clock timestamp.
func (r Record) HLC() uint64 { return binary.LittleEndian.Uint64(r[32:]) }

// ExpiresAt is when the value stops being served, in Unix milliseconds
// (0: never).
func (r Record) ExpiresAt() uint64 {
	if r[9] == Version {
		return 0
	}
	return binary.LittleEndian.Uint64(r[48:])
}

// EffectiveAt is the instant a scheduled record takes effect, in Unix
// milliseconds; 0 for an ordinary record.
func (r Record) EffectiveAt() uint64 {
	if r[9] == Version {
		return 0
	}
	return binary.LittleEndian.Uint64(r[56:])
}

// Effective is the record's effective time in Unix milliseconds: its
// EffectiveAt when scheduled, else its stamp's wall time. An expiry
// change's is its target version's (the target's HLC, not its own).
func (r Record) Effective() uint64 {
	if e := r.EffectiveAt(); e != 0 {
		return e
	}
	if r[9] == Version5 && r.Target().Origin == 0 {
		return 0 // the absence of a key without a version: before every version
	}
	if r.expiryChange() || r.counter() {
		return uint64(HLCMillis(r.Target().HLC))
	}
	return uint64(HLCMillis(r.HLC()))
}

// Target is the stamp of the version an expiry change (KindExpiry)
// changes or a counter increment (KindCounter) counts on; the zero
// Stamp for any other record.
func (r Record) Target() Stamp {
	if !r.expiryChange() && !r.counter() {
		return Stamp{}
	}
	return Stamp{HLC: binary.LittleEndian.Uint64(r[64:]), Origin: binary.LittleEndian.Uint64(r[72:]), Seq: binary.LittleEndian.Uint64(r[80:])}
}

// AppliesTo is the version an expiry change or a counter increment
// applies to, as answers show it: v is its stamp, the zero Stamp for
// none (the key was never held: an increment counting on its absence,
// or an expiry change of the revival of that absence, which names
// Genesis); absent says the record applies to the key's absence after v
// (an increment of version 5, an expiry change of its revival of
// version 6) or to a key never held. A version 3 expiry change of the
// revival after a held version (deleted or expired), which a build
// before version 6 writes, names that version, not absent: the revival
// is served as that version, and the record does not say which of the
// two it changed. Other records apply to no version: the zero Stamp,
// false.
func (r Record) AppliesTo() (v Stamp, absent bool) {
	v = r.Target()
	absent = r.Absent() || v == Genesis
	if v = v.Shown(); v.Origin == 0 {
		v = Stamp{}
	}
	return v, absent
}

// putTarget writes the stamp of the version a version 3 to 6 record
// names (Target reads it back): HLC, origin, seq at bytes 64 to 88.
func putTarget(dst []byte, t Stamp) {
	binary.LittleEndian.PutUint64(dst[64:], t.HLC)
	binary.LittleEndian.PutUint64(dst[72:], t.Origin)
	binary.LittleEndian.PutUint64(dst[80:], t.Seq)
}

// expiryOf is Target for an expiry change, the zero Stamp otherwise.
func (r Record) expiryOf() Stamp {
	if !r.expiryChange() {
		return Stamp{}
	}
	return r.Target()
}

// countOn is Target for a counter increment, the zero Stamp otherwise.
func (r Record) countOn() Stamp {
	if !r.counter() {
		return Stamp{}
	}
	return r.Target()
}

// BatchFollow is how many records of the record's batch come after it in
// its origin's sequence.
func (r Record) BatchFollow() uint32 {
	if r[9] == Version {
		return 0
	}
	return binary.LittleEndian.Uint32(r[44:])
}

// Stamp is the record's identity.
func (r Record) Stamp() Stamp { return Stamp{Origin: r.Origin(), Seq: r.Seq(), HLC: r.HLC()} }

// Topic is the topic's bytes.
func (r Record) Topic() []byte {
	h := r.headerLen()
	return r[h : h+int(r.topicLen())]
}

// Key is the key's bytes; empty for a plain stream message.
func (r Record) Key() []byte {
	o := r.headerLen() + int(r.topicLen())
	return r[o : o+int(r.keyLen())]
}

// Tag is the tag's bytes; often empty.
func (r Record) Tag() []byte {
	o := r.headerLen() + int(r.topicLen()) + int(r.keyLen())
	return r[o : o+int(r.tagLen())]
}

// Value is the value's bytes; empty for a tombstone.
func (r Record) Value() []byte {
	o := r.headerLen() + int(r.topicLen()) + int(r.keyLen()) + int(r.tagLen())
	return r[o:]
}

// Message copies the record's fields into a Message.
func (r Record) Message() Message {
	return Message{
		Topic:        string(r.Topic()),
		Key:          string(r.Key()),
		Tag:          string(r.Tag()),
		Value:        append([]byte(nil), r.Value()...),
		Delete:       r.Kind() == KindTombstone,
		ExpiresAt:    int64(r.ExpiresAt()),
		EffectiveAt:  int64(r.EffectiveAt()),
		Cancel:       r.Kind() == KindCancel,
		BatchFollow:  r.BatchFollow(),
		ExpiryOf:     r.expiryOf(),
		CountOn:      r.countOn(),
		CountAbsent:  r[9] == Version5,
		ExpiryAbsent: r[9] == Version6,
		Gone:         r.gone(),
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
