package wire

import (
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"
)

// Publish statuses. Every status means the message was stored on the
// node; the words other than StatusOK say that a promise beyond that (the
// replica's copy, under --replication=sync) was not kept: like RocketMQ's
// SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT, neither is a plain success
// nor a failure. A client treats a status it does not know the same way:
// stored, with a warning.
const (
	// StatusOK: stored as the flush mode (and replication mode) promises.
	StatusOK = "ok"
	// StatusReplicaUnavailable: stored locally; the replica peer is down.
	StatusReplicaUnavailable = "replica_unavailable"
	// StatusReplicaTimeout: stored locally; the replica did not confirm
	// in time.
	StatusReplicaTimeout = "replica_timeout"
)

// TimeLayout is the wire's time: RFC 3339 with milliseconds, the
// resolution of an HLC.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatOrigin renders an origin ID as the wire does: 16 lower-case hex
// digits.
func FormatOrigin(o uint64) string {
	var b [16]byte
	return string(AppendOrigin(b[:0], o))
}

// AppendOrigin appends an origin ID as FormatOrigin renders it.
func AppendOrigin(b []byte, o uint64) []byte {
	for i := 60; i >= 0; i -= 4 {
		b = append(b, hexDigits[(o>>uint(i))&0xf])
	}
	return b
}

// PutResult is the answer to a publish, one per message, in its wire form:
//
//	{"topic":"t","key":"k","origin":"00ab..","seq":7,"hlc":"123...","time":"...","status":"ok"}
//
// origin is 16 hex digits and hlc a decimal string (it exceeds 2^53).
type PutResult struct {
	Topic  string `json:"topic"`
	Key    string `json:"key"`
	Origin string `json:"origin"`
	Seq    uint64 `json:"seq"`
	HLC    string `json:"hlc"`
	Time   string `json:"time"`
	// Status is StatusOK or another status word (see the Status
	// constants).
	Status string `json:"status"`
}

// Published is one message's publish result as the daemon holds it, for
// AppendResults: its numbers are formatted as they are appended (16 hex
// digits, a decimal string, TimeLayout), with no string made for each.
type Published struct {
	Topic, Key       string
	Origin, Seq, HLC uint64
	// Millis is the HLC's wall-clock part in Unix milliseconds, the
	// result's "time".
	Millis int64
	// Status is StatusOK or another status word.
	Status string
}

// AppendJSON appends the result as one JSON object, the wire form of a
// PutResult, without reflection (a batch answers thousands of them).
func (p *Published) AppendJSON(b []byte) []byte {
	b = append(b, `{"topic":`...)
	b = AppendString(b, p.Topic)
	b = append(b, `,"key":`...)
	b = AppendString(b, p.Key)
	b = append(b, `,"origin":"`...)
	b = AppendOrigin(b, p.Origin)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, p.Seq, 10)
	b = append(b, `,"hlc":"`...)
	b = strconv.AppendUint(b, p.HLC, 10)
	b = append(b, `","time":"`...)
	b = AppendUnixMilli(b, p.Millis)
	b = append(b, `","status":`...)
	b = AppendString(b, p.Status)
	return append(b, '}')
}

// AppendResults appends a publish's answer: one result object (PUT,
// DELETE) or, for a batch, {"results":[...]}.
func AppendResults(b []byte, results []Published, batch bool) []byte {
	if batch {
		b = append(b, `{"results":[`...)
	}
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = results[i].AppendJSON(b)
	}
	if batch {
		b = append(b, "]}"...)
	}
	return b
}

// maxFastMilli is 9999-12-31T23:59:59.999Z, the last instant that
// AppendUnixMilli formats itself.
const maxFastMilli = 253402300799999

// AppendUnixMilli appends the instant ms (Unix milliseconds) in
// TimeLayout, UTC, as time.UnixMilli(ms).UTC().AppendFormat(b,
// TimeLayout) does, in a tenth of its time for the years 1970 to 9999
// (by that call for the others). A batch's answer and a subscription
// write one or more times a message.
func AppendUnixMilli(b []byte, ms int64) []byte {
	if ms < 0 || ms > maxFastMilli {
		return time.UnixMilli(ms).UTC().AppendFormat(b, TimeLayout)
	}
	const msDay = 24 * 60 * 60 * 1000
	days, rem := ms/msDay, ms%msDay
	// Days to a civil date (H. Hinnant's days_from_civil, inverted), for
	// days counted from 0000-03-01 so that a leap day ends each year.
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day := doy - (153*mp+2)/5 + 1
	month := mp + 3
	year := yoe + era*400
	if month > 12 {
		month -= 12
		year++
	}
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, month, 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, rem/3600000, 2)
	b = append(b, ':')
	b = appendDigits(b, rem/60000%60, 2)
	b = append(b, ':')
	b = appendDigits(b, rem/1000%60, 2)
	b = append(b, '.')
	b = appendDigits(b, rem%1000, 3)
	return append(b, 'Z')
}

// appendDigits appends the n (at most 4) lowest decimal digits of v
// (v >= 0), with leading zeros.
func appendDigits(b []byte, v int64, n int) []byte {
	b = append(b, "0000"[:n]...)
	for i := len(b) - 1; i >= len(b)-n; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// Delivery is one message of a subscription, as the daemon holds it (the
// bytes are the record's), for AppendDelivery. Its line is
//
//	{"offset":12,"topic":"t","key":"k","tag":"","value":"...","delete":false,
//	 "origin":"..","seq":3,"hlc":"...","time":"..."}
//
// with "value_base64" instead of "value" when the value is not UTF-8,
// and after "time" the fields of its time and its Change, when set:
// "expires_at", "effective_at", "cancel", "expiry_of", "increment_of".
type Delivery struct {
	Offset           uint64
	Topic, Key, Tag  []byte
	Value            []byte
	Delete           bool
	Origin, Seq, HLC uint64
	Time             time.Time // the HLC's wall-clock part
	// ExpiresAt and EffectiveAt (Unix ms) and Cancel are the record's
	// time fields: "expires_at", "effective_at" and "cancel":true on the
	// line, only when set.
	ExpiresAt, EffectiveAt int64
	Cancel                 bool
	// Change, when not ChangeNone, makes the message a change of the
	// key's version Of names rather than a version of its own.
	Change Change
	Of     Of
}

// Change is what a message of a subscription does to the version of its
// key that Delivery.Of names.
type Change uint8

const (
	// ChangeNone: the message is a version of its own (a write, a
	// delete, a cancel).
	ChangeNone Change = iota
	// ChangeExpiry: an expiry change (EXPIRE, PERSIST), "expiry_of" on
	// the line. Its value is that version's, not a new one; no
	// "expires_at" means the expiry was removed.
	ChangeExpiry
	// ChangeIncrement: a counter increment (INCRBY, POST
	// .../counters/{key}), "increment_of" on the line. Its value is the
	// increment, not the sum.
	ChangeIncrement
)

// Of names the version of a key a change applies to, on the line
// {"origin":"..","seq":N}: Origin and Seq its stamp's, Origin 0 for none
// (a key never held). Absent, "absent":true, says the change applies to
// the key's absence after that version (deleted or expired), or with no
// version to the absence of a key never held (an increment of it, or an
// expiry change of the counter such increments revived). An expiry
// change of the revival after a version names that version without
// Absent: the revival is served as it (record.Record.AppliesTo).
type Of struct {
	Origin, Seq uint64
	Absent      bool
}

// AppendDelivery appends d's line (without the newline).
func AppendDelivery(b []byte, d *Delivery) []byte {
	return append(appendDeliveryFields(b, d), '}')
}

// AppendGroupDelivery appends a consumer group's delivery: d's fields and
// the message id ("<origin>-<seq>"), attempt and queue.
func AppendGroupDelivery(b []byte, d *Delivery, id string, attempt, queue int) []byte {
	b = appendDeliveryFields(b, d)
	b = append(b, `,"id":`...)
	b = AppendString(b, id)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(attempt), 10)
	b = append(b, `,"queue":`...)
	b = strconv.AppendInt(b, int64(queue), 10)
	return append(b, '}')
}

// appendDeliveryFields appends d's object without its closing brace.
func appendDeliveryFields(b []byte, d *Delivery) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendUint(b, d.Offset, 10)
	b = append(b, `,"topic":`...)
	b = AppendBytes(b, d.Topic)
	b = append(b, `,"key":`...)
	b = AppendBytes(b, d.Key)
	b = append(b, `,"tag":`...)
	b = AppendBytes(b, d.Tag)
	b = AppendValue(b, d.Value)
	b = append(b, `,"delete":`...)
	b = strconv.AppendBool(b, d.Delete)
	b = append(b, `,"origin":"`...)
	b = AppendOrigin(b, d.Origin)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, d.Seq, 10)
	b = append(b, `,"hlc":"`...)
	b = strconv.AppendUint(b, d.HLC, 10)
	b = append(b, `","time":"`...)
	b = AppendUnixMilli(b, d.Time.UnixMilli())
	b = append(b, '"')
	if d.ExpiresAt != 0 {
		b = append(b, `,"expires_at":"`...)
		b = AppendUnixMilli(b, d.ExpiresAt)
		b = append(b, '"')
	}
	if d.EffectiveAt != 0 {
		b = append(b, `,"effective_at":"`...)
		b = AppendUnixMilli(b, d.EffectiveAt)
		b = append(b, '"')
	}
	if d.Cancel {
		b = append(b, `,"cancel":true`...)
	}
	switch d.Change {
	case ChangeExpiry:
		b = appendOf(append(b, `,"expiry_of":`...), d.Of)
	case ChangeIncrement:
		b = appendOf(append(b, `,"increment_of":`...), d.Of)
	}
	return b
}

// appendOf appends of's object: {"origin":"..","seq":N}, with
// "absent":true when of.Absent, {"absent":true} alone for no version.
func appendOf(b []byte, of Of) []byte {
	b = append(b, '{')
	if of.Origin != 0 {
		b = append(b, `"origin":"`...)
		b = AppendOrigin(b, of.Origin)
		b = append(b, `","seq":`...)
		b = strconv.AppendUint(b, of.Seq, 10)
		if of.Absent {
			b = append(b, ',')
		}
	}
	if of.Absent {
		b = append(b, `"absent":true`...)
	}
	return append(b, '}')
}

// AppendValue appends a value field with its leading comma: "value" when
// v is valid UTF-8, "value_base64" otherwise.
func AppendValue(b, v []byte) []byte {
	if utf8.Valid(v) {
		b = append(b, `,"value":`...)
		return AppendBytes(b, v)
	}
	b = append(b, `,"value_base64":"`...)
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

// AppendMessage appends one message object of a POST
// /v1/topics/{topic}/messages body: {"key":"k","tag":"t","value":"text"},
// "value_base64" instead of "value" when the value is not valid UTF-8,
// "delete":true for a tombstone; empty fields are left out. Hand-written
// rather than encoding/json: a batch of a thousand messages is encoded
// per request, and reflection would make the client, not the daemon, what
// a benchmark measures.
func AppendMessage(dst []byte, key, tag string, value []byte, del bool) []byte {
	dst = append(dst, '{')
	first := len(dst) // a field after this one needs a comma
	if key != "" {
		dst = AppendString(append(dst, `"key":`...), key)
	}
	if tag != "" {
		dst = AppendString(append(comma(dst, first), `"tag":`...), tag)
	}
	if len(value) > 0 {
		if utf8.Valid(value) {
			dst = AppendBytes(append(comma(dst, first), `"value":`...), value)
		} else {
			dst = append(comma(dst, first), `"value_base64":"`...)
			dst = append(base64.StdEncoding.AppendEncode(dst, value), '"')
		}
	}
	if del {
		dst = append(comma(dst, first), `"delete":true`...)
	}
	return append(dst, '}')
}

// comma appends the comma before a field unless it is the object's
// first (the object's fields start at first).
func comma(dst []byte, first int) []byte {
	if len(dst) > first {
		return append(dst, ',')
	}
	return dst
}
