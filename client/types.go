package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cachecast/cachecast/internal/jsonstr"
	"github.com/cachecast/cachecast/wire"
)

// Status words of a PutResult. Every status means the message was stored
// on this node; the words other than StatusOK say that a promise beyond
// that (the replica's copy) was not kept. A status this client does not
// know must be treated the same way: stored, with a warning.
const (
	// StatusOK: stored as the daemon's flush mode (and replication mode,
	// in a cluster) promises.
	StatusOK = wire.StatusOK
	// StatusReplicaUnavailable: stored locally; the replica peer is down.
	StatusReplicaUnavailable = wire.StatusReplicaUnavailable
	// StatusReplicaTimeout: stored locally; the replica did not answer in time.
	StatusReplicaTimeout = wire.StatusReplicaTimeout
)

// PutResult is the daemon's answer for one published message (a PUT, a
// DELETE, or one line of a batch). It mirrors the wire object
//
//	{"topic":"t","key":"k","origin":"00ab..","seq":7,"hlc":"123...","time":"...","status":"ok"}
//
// where origin is 16 hex digits and hlc a decimal string (it exceeds 2^53).
type PutResult struct {
	Topic  string
	Key    string
	Origin uint64    // the node that stamped the message
	Seq    uint64    // per-origin sequence number, from 1, gap-free
	HLC    uint64    // hybrid logical clock: wall milliseconds << 16 | counter
	Time   time.Time // the HLC's wall part, to the millisecond
	Status string    // StatusOK or another word; see the Status* constants
}

// OK reports whether the status is StatusOK. A false OK still means the
// message was stored locally (see the Status* constants).
func (r PutResult) OK() bool { return r.Status == StatusOK }

// Message is one message of a batch publish. It mirrors the wire object
// {"key":"k","tag":"t","value":"text"} (or "value_base64" when the value is
// not valid UTF-8; the client picks), with "delete":true for a tombstone.
// An empty Key makes a plain stream message: stored and delivered to
// subscribers, not cached in the view.
type Message struct {
	Key    string
	Tag    string
	Value  []byte
	Delete bool
}

// Event is one message delivered by a subscription. It mirrors the wire
// line {"offset":12,"topic":"t","key":"k","tag":"","value":"...","delete":false,
// "origin":"..","seq":3,"hlc":"...","time":"..."}, plus its time fields
// and the change it makes when set, and, in clustering mode,
// "id":"<origin>-<seq>","attempt":1,"queue":0.
type Event struct {
	Offset uint64 // the message's position in its topic on this node (0 = first ever)
	Topic  string
	Key    string
	Tag    string
	Value  []byte
	Delete bool // a tombstone: Key was deleted
	Origin uint64
	Seq    uint64
	HLC    uint64
	Time   time.Time
	// ExpiryOf and IncrementOf, at most one set, make the message a
	// change of the version of Key they name rather than a version of
	// its own: an expiry change (EXPIRE, PERSIST; Value is that
	// version's) or a counter increment (Value is the increment, not the
	// sum). The wire's "expiry_of" and "increment_of".
	ExpiryOf, IncrementOf *VersionOf
	// ExpiresAt, when not zero, is when the version expires (after it
	// the key reads as absent); on an expiry change, the version's new
	// expiry, and zero there means the change removed it (PERSIST). The
	// wire's "expires_at".
	ExpiresAt time.Time
	// EffectiveAt, when not zero, is the instant a scheduled message
	// takes effect: until then the key's value in force is another. The
	// wire's "effective_at".
	EffectiveAt time.Time
	// Cancel marks a cancel of Key's scheduled messages at EffectiveAt
	// (DELETE .../pending/{key}, CACHECAST.CANCEL): nothing takes effect
	// then. The wire's "cancel".
	Cancel bool

	// ID, Attempt and Queue are set in clustering mode only.

	// ID is the message's id, "<origin as 16 hex digits>-<seq>", the same
	// on every node: what Client.Ack takes.
	ID string
	// Attempt is 1 for a message's first delivery to the group, 2 and up
	// for redeliveries.
	Attempt int
	// Queue is the group's queue the message came through (0..Q-1).
	Queue int

	// Raw is the message's line as the daemon sent it, without the
	// newline, when SubscribeOptions.RawLines asks for it.
	Raw []byte
}

// VersionOf names the version of a key a change applies to: Origin and
// Seq its stamp's (Origin 0: none, the key was never held); Absent says
// the change applies to the key's absence after that version (deleted
// or expired), or with no version to the absence of a key never held.
// An expiry change of the revival of a deleted or expired key names the
// version it follows without Absent, as Get shows that revival.
type VersionOf struct {
	Origin, Seq uint64
	Absent      bool
}

// Value is a key's latest value and its identity, as Get returns it.
type Value struct {
	Bytes  []byte
	Tag    string
	Origin uint64
	Seq    uint64
	HLC    uint64
	Time   time.Time
}

// TopicInfo describes one topic in the Topics list.
type TopicInfo struct {
	Name     string `json:"name"`
	Keys     int    `json:"keys"`     // live keys in the view
	Messages uint64 `json:"messages"` // messages ever appended on this node
}

// Cursor is a durable named position in a topic: Offset is the next
// message to read, End the topic's next offset on the node, Lag the
// messages from Offset to End, OwnerUID the user that created it (only it
// or an admin may move or delete it; nil when none is recorded). It is
// the wire package's type, which the daemon writes.
type Cursor = wire.Cursor

// Status is the daemon's GET /v1/status answer: the wire's objects as
// the daemon writes them (package wire), the node's origin and uptime
// converted.
type Status struct {
	Node   NodeInfo
	Uptime time.Duration
	Flush  string // "async" or "sync"
	Store  StoreStats
	// Redis is the daemon's Redis front door, nil when it is off.
	Redis *RedisStats
	// Degraded, when set, says why the node, told to join a cluster, runs
	// alone past its join timeout (it serves, but gets nothing from the
	// fleet).
	Degraded string
	// Away, when set, says why the node, out of contact with its fleet
	// for more than half of --tombstone-grace, left its cluster and
	// stopped serving.
	Away string
	// CatchUp is the node's catch-up with its cluster before its first
	// ready; nil once done.
	CatchUp *wire.CatchUpStatus
	// Repair is the repair of the node's damaged log; nil while nothing
	// was found damaged since it started.
	Repair *Repair
	// View is the view's digest per topic and the vector it covers.
	View *wire.ViewDigest
	// Raw is the whole answer as received, fields this client does not
	// know (cluster figures, for instance) included.
	Raw json.RawMessage
}

// NodeInfo identifies the daemon's node.
type NodeInfo struct {
	Name    string
	Origin  uint64
	Version string
}

// StoreStats are the store's figures in Status: the wire package's
// type, which the daemon writes.
type StoreStats = wire.StoreStatus

// The wire forms. Identities travel as strings (origin hex, hlc decimal);
// these structs hold them as received and convert in one place.

type eventWire struct {
	Offset      uint64      `json:"offset"`
	Topic       string      `json:"topic"`
	Key         string      `json:"key"`
	Tag         string      `json:"tag"`
	Value       *string     `json:"value,omitempty"`
	ValueBase64 *string     `json:"value_base64,omitempty"`
	Delete      bool        `json:"delete"`
	Origin      string      `json:"origin"`
	Seq         uint64      `json:"seq"`
	HLC         json.Number `json:"hlc"`
	Time        string      `json:"time"`
	ID          string      `json:"id,omitempty"`
	Attempt     int         `json:"attempt,omitempty"`
	Queue       *int        `json:"queue,omitempty"` // a pointer: queue 0 is a queue
	ExpiresAt   string      `json:"expires_at,omitempty"`
	EffectiveAt string      `json:"effective_at,omitempty"`
	Cancel      bool        `json:"cancel,omitempty"`
	ExpiryOf    *ofWire     `json:"expiry_of,omitempty"`
	IncrementOf *ofWire     `json:"increment_of,omitempty"`
}

// ofWire is a VersionOf on the wire: {"origin":"..","seq":N}, with
// "absent":true, or {"absent":true} alone.
type ofWire struct {
	Origin string `json:"origin,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	Absent bool   `json:"absent,omitempty"`
}

// versionOf decodes o; nil for nil.
func (o *ofWire) versionOf() (*VersionOf, error) {
	if o == nil {
		return nil, nil
	}
	origin, err := parseOrigin(o.Origin)
	if err != nil {
		return nil, err
	}
	return &VersionOf{Origin: origin, Seq: o.Seq, Absent: o.Absent}, nil
}

// ofWireOf encodes v; nil for nil.
func ofWireOf(v *VersionOf) *ofWire {
	if v == nil {
		return nil
	}
	o := &ofWire{Seq: v.Seq, Absent: v.Absent}
	if v.Origin != 0 {
		o.Origin = FormatOrigin(v.Origin)
	}
	return o
}

// messageWire is the API's message object as a Message holds it (no time
// fields: a Message has none); the daemon's decoder (daemon/httpapi) and
// clienttest's have their own, each reading what it serves.
type messageWire struct {
	Key         string  `json:"key,omitempty"`
	Tag         string  `json:"tag,omitempty"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Delete      bool    `json:"delete,omitempty"`
}

// RedisStats are the Redis front door's figures in Status: the wire
// package's type, which the daemon writes.
type RedisStats = wire.RedisStatus

// FormatOrigin renders an origin ID the way the wire does: 16 lower-case
// hex digits.
func FormatOrigin(o uint64) string { return wire.FormatOrigin(o) }

// parseOrigin accepts 1 to 16 hex digits; "" is zero (absent).
func parseOrigin(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	if len(s) > 16 {
		return 0, fmt.Errorf("%w: origin %q: more than 16 hex digits", ErrBadResponse, s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: origin %q: not hex", ErrBadResponse, s)
	}
	return v, nil
}

// parseHLC accepts a decimal uint64; "" is zero (absent).
func parseHLC(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: hlc %q: not a decimal uint64", ErrBadResponse, s)
	}
	return v, nil
}

func parseSeq(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: seq %q: not a decimal uint64", ErrBadResponse, s)
	}
	return v, nil
}

// parseTime accepts RFC 3339 with any fraction; "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: time %q: not RFC 3339", ErrBadResponse, s)
	}
	return t, nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(wire.TimeLayout)
}

// checkMessages refuses, before anything is sent, a message whose key or
// tag is not valid UTF-8: the wire's JSON would carry it as U+FFFD, and
// the daemon would store another key. Values may be any bytes (they go as
// value_base64).
func checkMessages(msgs []Message) error { return CheckMessages(msgs) }

// CheckMessages refuses, with ErrInvalidArgument, a batch with a message
// whose key or tag is not valid UTF-8 (see PublishBatch), for code that
// sends batches itself, as `cachecast bench` does.
func CheckMessages(msgs []Message) error {
	for i := range msgs {
		if !utf8.ValidString(msgs[i].Key) {
			return fmt.Errorf("%w: message %d: key %q is not valid UTF-8", ErrInvalidArgument, i, msgs[i].Key)
		}
		if !utf8.ValidString(msgs[i].Tag) {
			return fmt.Errorf("%w: message %d: tag %q is not valid UTF-8", ErrInvalidArgument, i, msgs[i].Tag)
		}
	}
	return nil
}

// decodeValue turns the wire's value / value_base64 pair into bytes:
// exactly one of them, or neither for an empty value.
func decodeValue(text, b64 *string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, fmt.Errorf("%w: both value and value_base64", ErrBadResponse)
	case text != nil:
		return []byte(*text), nil
	case b64 != nil:
		v, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, fmt.Errorf("%w: value_base64: %v", ErrBadResponse, err)
		}
		return v, nil
	}
	return []byte{}, nil
}

// encodeValue is decodeValue's inverse: text when the bytes are valid
// UTF-8, base64 otherwise, neither when empty.
func encodeValue(v []byte) (text, b64 *string) {
	if len(v) == 0 {
		return nil, nil
	}
	if utf8.Valid(v) {
		s := string(v)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(v)
	return nil, &s
}

// ParseResult decodes the answer of a PUT or a DELETE (one result object)
// into a PutResult, for code that reads the daemon's answers itself, as
// `cachecast bench` does; ParseResults decodes a batch's answer.
func ParseResult(b []byte) (PutResult, error) {
	w, err := wire.DecodeResult(b)
	if err != nil {
		return PutResult{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return resultOf(&w)
}

// ParseResults decodes a batch publish's answer, {"results":[...]}.
func ParseResults(b []byte) ([]PutResult, error) {
	ws, err := wire.DecodeResults(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return convertResults(ws)
}

// resultOf turns a result in its wire form (identities as strings) into a
// PutResult.
func resultOf(w *wire.PutResult) (PutResult, error) {
	r := PutResult{Topic: w.Topic, Key: w.Key, Seq: w.Seq, Status: w.Status}
	var err error
	if r.Origin, err = parseOrigin(w.Origin); err != nil {
		return PutResult{}, err
	}
	if r.HLC, err = parseHLC(w.HLC); err != nil {
		return PutResult{}, err
	}
	if r.Time, err = parseTime(w.Time); err != nil {
		return PutResult{}, err
	}
	return r, nil
}

func (w *eventWire) event() (Event, error) {
	e := Event{Offset: w.Offset, Topic: w.Topic, Key: w.Key, Tag: w.Tag, Delete: w.Delete, Seq: w.Seq,
		Cancel: w.Cancel, ID: w.ID, Attempt: w.Attempt}
	if w.Queue != nil {
		e.Queue = *w.Queue
	}
	var err error
	if e.Value, err = decodeValue(w.Value, w.ValueBase64); err != nil {
		return Event{}, err
	}
	if e.Origin, err = parseOrigin(w.Origin); err != nil {
		return Event{}, err
	}
	if e.HLC, err = parseHLC(string(w.HLC)); err != nil {
		return Event{}, err
	}
	if e.Time, err = parseTime(w.Time); err != nil {
		return Event{}, err
	}
	if e.ExpiresAt, err = parseTime(w.ExpiresAt); err != nil {
		return Event{}, err
	}
	if e.EffectiveAt, err = parseTime(w.EffectiveAt); err != nil {
		return Event{}, err
	}
	if e.ExpiryOf, err = w.ExpiryOf.versionOf(); err != nil {
		return Event{}, err
	}
	if e.IncrementOf, err = w.IncrementOf.versionOf(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// decodeEvent decodes one NDJSON line of a subscription.
func decodeEvent(line []byte) (Event, error) {
	var w eventWire
	if err := jsonstr.Unmarshal(line, &w); err != nil {
		return Event{}, fmt.Errorf("%w: event: %v", ErrBadResponse, err)
	}
	return w.event()
}

// hlcString renders an HLC as the wire does: a decimal string. (The wire
// structs hold it as a json.Number, which reads a string or a number but
// writes a number; ",string" makes it a string again.)
func hlcString(h uint64) json.Number { return json.Number(strconv.FormatUint(h, 10)) }

// MarshalJSON renders the result in its wire form.
func (r PutResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(wire.PutResult{
		Topic: r.Topic, Key: r.Key, Origin: FormatOrigin(r.Origin), Seq: r.Seq,
		HLC: strconv.FormatUint(r.HLC, 10), Time: formatTime(r.Time), Status: r.Status,
	})
}

// UnmarshalJSON parses the wire form.
func (r *PutResult) UnmarshalJSON(b []byte) error {
	v, err := ParseResult(b)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalJSON renders the event in its wire form.
func (e Event) MarshalJSON() ([]byte, error) {
	type out struct {
		eventWire
		HLC json.Number `json:"hlc,string"`
	}
	w := out{eventWire: eventWire{
		Offset: e.Offset, Topic: e.Topic, Key: e.Key, Tag: e.Tag, Delete: e.Delete,
		Origin: FormatOrigin(e.Origin), Seq: e.Seq, Time: formatTime(e.Time),
		ExpiresAt: formatTime(e.ExpiresAt), EffectiveAt: formatTime(e.EffectiveAt), Cancel: e.Cancel,
		ID: e.ID, Attempt: e.Attempt, ExpiryOf: ofWireOf(e.ExpiryOf), IncrementOf: ofWireOf(e.IncrementOf),
	}, HLC: hlcString(e.HLC)}
	w.Value, w.ValueBase64 = encodeValue(e.Value)
	if e.ID != "" || e.Queue != 0 {
		q := e.Queue
		w.Queue = &q
	}
	return json.Marshal(w)
}

// UnmarshalJSON parses the wire form.
func (e *Event) UnmarshalJSON(b []byte) error {
	v, err := decodeEvent(b)
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// MarshalJSON renders the message in its wire form (what PublishBatch sends).
func (m Message) MarshalJSON() ([]byte, error) {
	return appendMessage(nil, &m), nil
}

// UnmarshalJSON parses the wire form.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w messageWire
	if err := jsonstr.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: message: %v", ErrBadResponse, err)
	}
	v, err := decodeValue(w.Value, w.ValueBase64)
	if err != nil {
		return err
	}
	*m = Message{Key: w.Key, Tag: w.Tag, Value: v, Delete: w.Delete}
	return nil
}

// appendMessage appends m's wire object to dst (wire.AppendMessage).
func appendMessage(dst []byte, m *Message) []byte {
	return wire.AppendMessage(dst, m.Key, m.Tag, m.Value, m.Delete)
}
