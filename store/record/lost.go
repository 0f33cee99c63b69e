package record

import (
	"encoding/binary"
	"hash/crc32"
)

// EncodeLost writes into dst (at least Padded(size) bytes) the placeholder
// of a damaged record of the given size, stamp and topic: a record of kind
// KindLost with the same size, so that it takes the damaged record's
// place byte for byte and the log reads on past it, with no key and no
// tag, and zeros for the value. size must be at least HeaderSize plus the
// topic's length (the damaged record held the topic). The padding is
// zeroed too.
func EncodeLost(dst []byte, topic []byte, st Stamp, size int) {
	dst = dst[:Padded(size)]
	clear(dst)
	binary.LittleEndian.PutUint32(dst[0:], uint32(size))
	dst[8] = byte(KindLost)
	dst[9] = Version
	binary.LittleEndian.PutUint16(dst[10:], uint16(len(topic)))
	binary.LittleEndian.PutUint64(dst[16:], st.Origin)
	binary.LittleEndian.PutUint64(dst[24:], st.Seq)
	binary.LittleEndian.PutUint64(dst[32:], st.HLC)
	binary.LittleEndian.PutUint32(dst[40:], uint32(size-HeaderSize-len(topic)))
	copy(dst[HeaderSize:], topic)
	binary.LittleEndian.PutUint32(dst[4:], crc32.Checksum(dst[8:size], castagnoli))
}
