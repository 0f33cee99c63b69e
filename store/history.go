package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cachecast/cachecast/store/record"
)

// KeyHistory is what Store.KeyHistory found of one key in its topic's
// log.
type KeyHistory struct {
	// Records are the key's records, newest first.
	Records []Delivery
	// Scanned counts the topic's messages looked at, from its last one
	// back; ScannedBytes their sizes.
	Scanned      uint64
	ScannedBytes int64
	// Complete: the scan reached the topic's oldest message retained, so
	// the log holds no older record of the key than the last of Records.
	Complete bool
}

// KeyHistory reads the records of (topic, key) in the topic's log on
// this node, newest first: it looks at the topic's messages from the
// last one back and stops at limit records of the key, after maxScan
// messages, or once the messages looked at add up to maxBytes (at least
// one is looked at). The topic index does not hold keys, so each message
// is read from the log (mapped, a copy of the key's records only): the
// bounds are what a caller pays. A message indexed but not committed
// yet, one lost to damage, and one given up (AcceptLost) are passed
// over.
func (s *Store) KeyHistory(topic, key string, limit int, maxScan uint64, maxBytes int64) (KeyHistory, error) {
	if s.closed.Load() {
		return KeyHistory{}, ErrClosed
	}
	if topic == "" || key == "" || limit < 1 || maxScan < 1 {
		return KeyHistory{}, fmt.Errorf("%w: key history of %q/%q, limit %d, scan %d", ErrInvalid, topic, key, limit, maxScan)
	}
	var h KeyHistory
	ti := s.topics.Get(topic)
	if ti == nil {
		h.Complete = true
		return h, nil
	}
	k := []byte(key)
	for off := ti.Len(); ; {
		if off <= ti.First() {
			h.Complete = true
			return h, nil
		}
		if len(h.Records) >= limit || h.Scanned >= maxScan || (h.Scanned > 0 && h.ScannedBytes >= maxBytes) {
			return h, nil
		}
		off--
		e, err := ti.Entry(off)
		if errors.Is(err, ErrRecycled) {
			h.Complete = true // retention dropped it, and every older one
			return h, nil
		}
		if err != nil {
			return h, err
		}
		h.Scanned++
		h.ScannedBytes += int64(e.Size)
		var rec record.Record
		_, err = s.readIndexed(e.Pos, func(x record.Record) error {
			if x.Kind() != record.KindLost && bytes.Equal(x.Key(), k) {
				rec = x.Clone()
			}
			return nil
		})
		switch {
		case errors.Is(err, ErrBeyondEnd), errors.Is(err, ErrRecycled), errors.Is(err, ErrCorrupt):
			continue // not committed yet, given up, or damaged (the readers set it aside)
		case err != nil:
			return h, err
		}
		if rec != nil {
			h.Records = append(h.Records, Delivery{Offset: off, Record: rec})
		}
	}
}
