// Package batch reads an origin's records out of the log in batches, for
// one write each: a records frame pushed or pulled on the data port, or a
// NATS message. It is the one reader of record batches of package
// broadcast and its NATS fan-out.
package batch

import (
	"errors"

	"github.com/cachecast/cachecast/store/record"
)

// The bounds of a batch of records read out of the log for one write: a
// push or pull frame, or a NATS message. They bound what one write holds
// in memory and how long one origin's backlog holds a connection before
// the link's other work (pulls, acks) gets its turn.
const (
	// Records is the most records a pushed frame or a NATS message
	// carries.
	Records = 1024
	// FrameBytes is the size at which a records frame (pushed or pulled)
	// is cut: the record that reaches it is the frame's last.
	FrameBytes = 1 << 20
	// NATSBytes is the same for a NATS message, well under NATS's default
	// max_payload (1 MiB), which a message may pass by one record.
	NATSBytes = 64 << 10
)

// errBatchFull stops a read that has filled its batch.
var errBatchFull = errors.New("batch full")

// ErrTooNew stops a read at a record of a newer version than the
// connection (or the NATS fleet) carries: see broadcast.ProtocolTimed.
var ErrTooNew = errors.New("broadcast: record version newer than the peer's protocol")

// Read copies origin's records from seq from on into buf: at most
// maxRecords of them, the last being the one that brings buf to maxBytes.
// It returns buf, the records as slices of it appended to recs, and the
// seq after the last record read. It stops early at the first seq this
// node does not hold yet. An error (store.ErrRecycled among them) comes
// back with the records read before it, and end the seq it stopped at;
// ErrTooNew stops it before the first record of a version above
// maxVersion (end is that record's seq).
func Read(st Reader, origin, from uint64, maxRecords, maxBytes int, maxVersion byte, buf []byte, recs [][]byte) ([]byte, [][]byte, uint64, error) {
	end, err := st.ReadOrigin(origin, from, from+uint64(maxRecords)-1, func(r record.Record) error {
		if r.Version() > maxVersion {
			return ErrTooNew
		}
		start := len(buf)
		buf = append(buf, r...)
		recs = append(recs, buf[start:])
		if len(buf) >= maxBytes {
			return errBatchFull
		}
		return nil
	})
	if errors.Is(err, errBatchFull) {
		end, err = end+1, nil // the record that filled the batch is in it
	}
	return buf, recs, end, err
}

// Reader reads an origin's records in order (store.Store.ReadOrigin):
// each valid only while fn runs.
type Reader interface {
	ReadOrigin(origin, from, to uint64, fn func(record.Record) error) (next uint64, err error)
}
