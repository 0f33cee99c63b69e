package daemon

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/internal/jsonstr"
	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// Error codes of the local API: stable words clients branch on. The HTTP
// status of each is fixed (see statusOf).
const (
	CodeBadRequest          = "bad_request"
	CodeInvalidName         = "invalid_name"
	CodeBadJSON             = "bad_json"
	CodeBadBase64           = "bad_base64"
	CodeValueTooLarge       = "value_too_large"
	CodeBodyTooLarge        = "body_too_large"
	CodeNotFound            = "not_found"
	CodeConflict            = "conflict"
	CodeRouteNotFound       = "route_not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeUnsupportedEncoding = "unsupported_encoding"
	CodeForbidden           = "forbidden"
	CodeStoreFull           = "store_full"
	CodeTooMany             = "too_many"
	CodeDiskFull            = "disk_full"
	CodeUnavailable         = "unavailable"
	CodeBusy                = "busy" // a limit of the node (--max-connections, --max-streams, --max-body-memory)
	CodeTimeout             = "timeout"
	CodeInternal            = "internal"
)

// errorCodes lists every code, for the metrics.
var errorCodes = []string{
	CodeBadRequest, CodeInvalidName, CodeBadJSON, CodeBadBase64, CodeValueTooLarge, CodeBodyTooLarge,
	CodeNotFound, CodeConflict, CodeRouteNotFound, CodeMethodNotAllowed, CodeUnsupportedEncoding, CodeForbidden, CodeStoreFull, CodeDiskFull,
	CodeTooMany, CodeUnavailable, CodeBusy, CodeTimeout, CodeInternal,
}

// statusOf is the HTTP status of each error code.
func statusOf(code string) int {
	switch code {
	case CodeBadRequest, CodeInvalidName, CodeBadJSON, CodeBadBase64:
		return http.StatusBadRequest
	case CodeValueTooLarge, CodeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeNotFound, CodeRouteNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeUnsupportedEncoding:
		return http.StatusUnsupportedMediaType
	case CodeConflict:
		return http.StatusConflict
	case CodeForbidden:
		return http.StatusForbidden
	case CodeStoreFull, CodeDiskFull:
		return http.StatusInsufficientStorage
	case CodeTooMany:
		return http.StatusTooManyRequests
	case CodeUnavailable, CodeBusy:
		return http.StatusServiceUnavailable
	case CodeTimeout:
		return http.StatusRequestTimeout
	}
	return http.StatusInternalServerError
}

// apiError is an error the local API answers with.
type apiError struct {
	Code    string
	Message string
	allow   string // the Allow header of a 405
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// storeError maps an error of the store onto the API's codes.
func storeError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, store.ErrFull):
		return errorf(CodeStoreFull, "%v", err)
	case errors.Is(err, store.ErrDiskFull):
		return errorf(CodeDiskFull, "%v", err)
	case errors.Is(err, store.ErrCursorLimit):
		return errorf(CodeTooMany, "%v", err)
	case errors.Is(err, store.ErrNotOwner):
		return errorf(CodeForbidden, "%v; only its owner or an admin (--admin-uids, --admin-gids) may change it", err)
	case errors.Is(err, store.ErrTooLarge):
		return errorf(CodeValueTooLarge, "%v", err)
	case errors.Is(err, store.ErrInvalid):
		return errorf(CodeBadRequest, "%v", err)
	case errors.Is(err, store.ErrClosed):
		return errorf(CodeUnavailable, "the daemon is shutting down")
	}
	return errorf(CodeInternal, "%v", err)
}

// validTopic checks a topic or cursor name: 1..128 bytes of [A-Za-z0-9._-].
func validTopic(what, s string) *apiError {
	if s == "" || len(s) > MaxTopicLen {
		return errorf(CodeInvalidName, "%s: must be 1 to %d bytes, got %d", what, MaxTopicLen, len(s))
	}
	if i := badNameByte(s); i >= 0 {
		return errorf(CodeInvalidName, "%s %q: %s is not one of A-Z a-z 0-9 . _ -", what, s, badByteText(s, i))
	}
	return nil
}

// validTag checks a tag: 0..128 bytes of [A-Za-z0-9._-].
func validTag(s string) *apiError {
	if len(s) > MaxTagLen {
		return errorf(CodeInvalidName, "tag: must be at most %d bytes, got %d", MaxTagLen, len(s))
	}
	if i := badNameByte(s); i >= 0 {
		return errorf(CodeInvalidName, "tag %q: %s is not one of A-Z a-z 0-9 . _ -", s, badByteText(s, i))
	}
	return nil
}

// badByteText shows the character at byte i of s as what it is: a
// character of UTF-8 with its bytes ('ü' (bytes c3 bc) at byte 0), or a
// byte that is not UTF-8 as hex (byte 0xff at byte 3), never a byte
// misread as a Latin-1 character.
func badByteText(s string, i int) string {
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && n <= 1:
		return fmt.Sprintf("byte 0x%02x at byte %d (not UTF-8)", s[i], i)
	case n > 1:
		return fmt.Sprintf("%q (bytes % x) at byte %d", r, s[i:i+n], i)
	}
	return fmt.Sprintf("%q at byte %d", r, i)
}

func badNameByte(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return i
		}
	}
	return -1
}

// validKey checks a key: 1..1024 bytes of UTF-8 without control characters.
// (A message in a batch may have no key: it is then a stream message, and
// the caller does not call validKey.)
func validKey(s string) *apiError {
	if s == "" || len(s) > MaxKeyLen {
		return errorf(CodeInvalidName, "key: must be 1 to %d bytes, got %d", MaxKeyLen, len(s))
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return errorf(CodeInvalidName, "key: invalid UTF-8 at byte %d", i)
			}
		}
		if unicode.IsControl(r) {
			return errorf(CodeInvalidName, "key: control character %U at byte %d", r, i)
		}
	}
	return nil
}

// PutResult is the answer to a publish, one per message.
type PutResult struct {
	Topic  string `json:"topic"`
	Key    string `json:"key"`
	Origin string `json:"origin"`
	Seq    uint64 `json:"seq"`
	HLC    string `json:"hlc"`
	Time   string `json:"time"`
	// Status is "ok": stored as the flush mode promises. The cluster layer
	// adds "replica_unavailable" and "replica_timeout" (stored locally, the
	// replica did not confirm); clients treat any other word as stored,
	// with a warning.
	Status string `json:"status"`
}

// StatusOK is the status of a message stored as the flush mode promises.
const StatusOK = "ok"

// timeLayout is RFC 3339 with milliseconds, the resolution of an HLC.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func hlcTime(h uint64) string { return record.HLCTime(h).UTC().Format(timeLayout) }

func newPutResult(m *record.Message, st record.Stamp, status string) PutResult {
	return PutResult{
		Topic:  m.Topic,
		Key:    m.Key,
		Origin: formatOrigin(st.Origin),
		Seq:    st.Seq,
		HLC:    strconv.FormatUint(st.HLC, 10),
		Time:   hlcTime(st.HLC),
		Status: status,
	}
}

// appendJSON appends the result as one JSON object, without reflection
// (a batch answers thousands of them).
func (p *PutResult) appendJSON(b []byte) []byte {
	b = append(b, `{"topic":`...)
	b = appendJSONString(b, p.Topic)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, p.Key)
	b = append(b, `,"origin":"`...)
	b = append(b, p.Origin...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, p.Seq, 10)
	b = append(b, `,"hlc":"`...)
	b = append(b, p.HLC...)
	b = append(b, `","time":"`...)
	b = append(b, p.Time...)
	b = append(b, `","status":`...)
	b = appendJSONString(b, p.Status)
	return append(b, '}')
}

// appendDelivery appends one line of a subscription stream (without the
// newline): the message's fields, its value as "value" when it is valid
// UTF-8 and as "value_base64" otherwise.
func appendDelivery(b []byte, d store.Delivery) []byte {
	return append(appendMessageFields(b, d.Offset, d.Record.Topic(), d.Record), '}')
}

// appendGroupDelivery appends a consumer group's delivery: the fields of
// appendDelivery, the topic the group's (a replayed message's record names
// the retry topic), and the message id, attempt and queue.
func appendGroupDelivery(b []byte, d group.Delivery) []byte {
	b = appendMessageFields(b, d.Offset, []byte(d.Topic), d.Record)
	b = append(b, `,"id":"`...)
	b = append(b, d.ID.String()...)
	b = append(b, `","attempt":`...)
	b = strconv.AppendInt(b, int64(d.Attempt), 10)
	b = append(b, `,"queue":`...)
	b = strconv.AppendInt(b, int64(d.Queue), 10)
	return append(b, '}')
}

// appendMessageFields appends a delivered message's object without its
// closing brace.
func appendMessageFields(b []byte, offset uint64, topic []byte, r record.Record) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendUint(b, offset, 10)
	b = append(b, `,"topic":`...)
	b = appendJSONBytes(b, topic)
	b = append(b, `,"key":`...)
	b = appendJSONBytes(b, r.Key())
	b = append(b, `,"tag":`...)
	b = appendJSONBytes(b, r.Tag())
	if v := r.Value(); utf8.Valid(v) {
		b = append(b, `,"value":`...)
		b = appendJSONBytes(b, v)
	} else {
		b = append(b, `,"value_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, v)
		b = append(b, '"')
	}
	b = append(b, `,"delete":`...)
	b = strconv.AppendBool(b, r.Kind() == record.KindTombstone)
	b = append(b, `,"origin":"`...)
	b = append(b, formatOrigin(r.Origin())...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, r.Seq(), 10)
	b = append(b, `,"hlc":"`...)
	b = strconv.AppendUint(b, r.HLC(), 10)
	b = append(b, `","time":"`...)
	b = record.HLCTime(r.HLC()).UTC().AppendFormat(b, timeLayout)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript parsers.
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += n
			start = i
			continue
		}
		i += n
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendJSONBytes(b, s []byte) []byte {
	// The string conversion does not escape: the compiler sees it is only read.
	return appendJSONString(b, string(s))
}

// wireMessage is one message of a POST /v1/topics/{topic}/messages body.
type wireMessage struct {
	Key         string  `json:"key"`
	Tag         string  `json:"tag"`
	Value       *string `json:"value"`
	ValueBase64 *string `json:"value_base64"`
	Delete      bool    `json:"delete"`

	// raw, set by fastMessage only, is the value's bytes (a view of the
	// body, which outlives the publish): one copy fewer than Value.
	raw []byte
}

// decodeMessages decodes the body of POST /v1/topics/{topic}/messages: one
// JSON object, or with ndjson one object a line (blank lines skipped), and
// checks every message (key, tag, value size, value vs value_base64, a
// delete has a key and no value). It returns at least one message or the
// first problem, naming the line of an NDJSON batch. Nothing is written
// here; the batch is published whole or not at all.
func decodeMessages(topic string, body []byte, ndjson bool, maxValue int64) ([]record.Message, *apiError) {
	if !ndjson {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, errorf(CodeBadJSON, "empty body: want one JSON message object (or NDJSON with Content-Type: application/x-ndjson)")
		}
		m, err := decodeMessage(topic, body, maxValue)
		if err != nil {
			if strings.HasPrefix(err.Message, "data after") && bytes.Count(bytes.TrimSpace(body), []byte{'\n'}) > 0 {
				err.Message += " (for a batch, send one object a line with Content-Type: application/x-ndjson)"
			}
			return nil, err
		}
		return []record.Message{m}, nil
	}
	msgs := make([]record.Message, 0, bytes.Count(body, []byte{'\n'})+1)
	line := 0
	for len(body) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			l, body = body, nil
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		m, err := decodeMessage(topic, l, maxValue)
		if err != nil {
			err.Message = "line " + strconv.Itoa(line) + ": " + err.Message
			return nil, err
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil, errorf(CodeBadRequest, "empty batch: no messages in the body")
	}
	return msgs, nil
}

// decodeMessage decodes and checks one JSON message object.
func decodeMessage(topic string, b []byte, maxValue int64) (record.Message, *apiError) {
	w, e := decodeWire(b)
	if e != nil {
		return record.Message{}, e
	}
	m := record.Message{Topic: topic, Key: w.Key, Tag: w.Tag, Delete: w.Delete}
	if w.Key != "" {
		if err := validKey(w.Key); err != nil {
			return m, err
		}
	}
	if err := validTag(w.Tag); err != nil {
		return m, err
	}
	switch {
	case w.Value != nil && w.ValueBase64 != nil:
		return m, errorf(CodeBadRequest, `give "value" or "value_base64", not both`)
	case w.raw != nil:
		if int64(len(w.raw)) > maxValue {
			return m, errorf(CodeValueTooLarge, "value of %d bytes exceeds --max-value-size (%d)", len(w.raw), maxValue)
		}
		m.Value = w.raw
	case w.Value != nil:
		if int64(len(*w.Value)) > maxValue {
			return m, errorf(CodeValueTooLarge, "value of %d bytes exceeds --max-value-size (%d)", len(*w.Value), maxValue)
		}
		m.Value = []byte(*w.Value)
	case w.ValueBase64 != nil:
		if n := base64.StdEncoding.DecodedLen(len(*w.ValueBase64)); int64(n) > maxValue+2 {
			return m, errorf(CodeValueTooLarge, "value of about %d bytes exceeds --max-value-size (%d)", n, maxValue)
		}
		v, err := base64.StdEncoding.Strict().DecodeString(*w.ValueBase64)
		if err != nil {
			return m, errorf(CodeBadBase64, "value_base64: %v", err)
		}
		if int64(len(v)) > maxValue {
			return m, errorf(CodeValueTooLarge, "value of %d bytes exceeds --max-value-size (%d)", len(v), maxValue)
		}
		m.Value = v
	}
	if m.Delete {
		if m.Key == "" {
			return m, errorf(CodeInvalidName, "a delete needs a key")
		}
		if len(m.Value) > 0 {
			return m, errorf(CodeBadRequest, "a delete carries no value")
		}
	}
	return m, nil
}

// decodeWire decodes one message object: by fastMessage when it can, by
// encoding/json (strict, after jsonstr.Check) otherwise.
func decodeWire(b []byte) (wireMessage, *apiError) {
	if w, ok := fastMessage(b); ok {
		return w, nil
	}
	var w wireMessage
	if e := decodeStrict(b, &w, "message object"); e != nil {
		return wireMessage{}, e
	}
	return w, nil
}

// decodeStrict decodes one JSON object from b into v: no unknown field,
// nothing but white space after it (what names the object in that error),
// and no string that encoding/json would silently change (jsonstr.Check).
func decodeStrict(b []byte, v any, what string) *apiError {
	if p := jsonstr.Check(b); p != nil {
		return errorf(CodeBadJSON, "%v: JSON strings must be valid UTF-8 (send a binary value as \"value_base64\")", p)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(CodeBadJSON, "%s", jsonErrorText(err))
	}
	// Anything after the object other than white space (dec.More misses a
	// stray closing bracket).
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return errorf(CodeBadJSON, "data after the %s", what)
	}
	return nil
}

// fastMessage decodes the common shape of a message object without
// reflection: the fields key, tag, value and value_base64 as strings with
// no escapes and valid UTF-8, delete as true or false, each at most once,
// nothing else. Anything else reports !ok, and encoding/json decodes the
// object (with its exact errors); on what both accept they agree
// (FuzzDecodeMessages checks it). A batch of thousands of messages spends
// most of its decoding time here.
func fastMessage(b []byte) (w wireMessage, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return w, false
	}
	i = skipSpace(b, i+1)
	var seen [5]bool
	if i < len(b) && b[i] == '}' {
		return w, skipSpace(b, i+1) == len(b)
	}
	for {
		name, j, ok := fastString(b, i)
		if !ok {
			return w, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return w, false
		}
		i = skipSpace(b, i+1)
		field := -1
		switch name {
		case "key":
			field = 0
		case "tag":
			field = 1
		case "value":
			field = 2
		case "value_base64":
			field = 3
		case "delete":
			field = 4
		}
		if field < 0 || seen[field] {
			return w, false
		}
		seen[field] = true
		if field == 4 {
			switch {
			case bytes.HasPrefix(b[i:], []byte("true")):
				w.Delete, i = true, i+4
			case bytes.HasPrefix(b[i:], []byte("false")):
				i += 5
			default:
				return w, false
			}
		} else {
			if field == 2 {
				// The value is kept as bytes of the body, not copied.
				raw, j, ok := fastBytes(b, i)
				if !ok {
					return w, false
				}
				i, w.raw = j, raw
				empty := ""
				w.Value = &empty // marks the field as given
			} else {
				v, j, ok := fastString(b, i)
				if !ok {
					return w, false
				}
				i = j
				switch field {
				case 0:
					w.Key = v
				case 1:
					w.Tag = v
				case 3:
					w.ValueBase64 = &v
				}
			}
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return w, false
		}
		if b[i] == '}' {
			return w, skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return w, false
		}
		i = skipSpace(b, i+1)
	}
}

// fastString reads a JSON string at b[i] that needs no unescaping.
func fastString(b []byte, i int) (string, int, bool) {
	s, j, ok := fastBytes(b, i)
	return string(s), j, ok
}

// fastBytes is fastString returning a view of b.
func fastBytes(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !utf8.Valid(s) {
				return nil, i, false // jsonstr.Check names the problem
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, i, false
		}
	}
	return nil, i, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonErrorText makes encoding/json's errors read well on their own.
func jsonErrorText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("want a JSON object, got JSON %s", te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: the object ends early"
	}
	return "malformed JSON: " + err.Error()
}

// statusBody is GET /v1/status.
type statusBody struct {
	Node struct {
		Name    string `json:"name"`
		Origin  string `json:"origin"`
		Version string `json:"version"`
	} `json:"node"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	Flush         string  `json:"flush"`
	Store         struct {
		Segments       int    `json:"segments"`
		MappedSegments int    `json:"mapped_segments"`
		LogBytes       int64  `json:"log_bytes"`
		WritePos       int64  `json:"write_pos"`
		FlushedPos     int64  `json:"flushed_pos"`
		OldestPos      int64  `json:"oldest_pos"`
		Records        uint64 `json:"records"`
		Keys           int    `json:"keys"`
	} `json:"store"`
	// Redis is the Redis front door's counters; absent when it is off.
	Redis *redisStatus `json:"redis,omitempty"`
	// Degraded says why a node told to join (--join) runs alone past
	// --join-timeout; absent when it does not.
	Degraded string `json:"degraded,omitempty"`
	// View is the view's digest per topic and the vector it covers.
	View *ViewDigest `json:"view"`
}

// redisStatus is the "redis" object of GET /v1/status.
type redisStatus struct {
	Socket          string `json:"socket,omitempty"`
	Addr            string `json:"addr,omitempty"`
	Connections     int64  `json:"connections"`
	Commands        int64  `json:"commands"`
	TrackingClients int64  `json:"tracking_clients"`
	Invalidations   int64  `json:"invalidations"`
	SlowDisconnects int64  `json:"slow_clients_disconnected"`
	ProtocolErrors  int64  `json:"protocol_errors"`
	Subscriptions   int64  `json:"subscriptions"`
}

// cursorRequest is the body of POST /v1/cursors/{name}.
type cursorRequest struct {
	Topic  string  `json:"topic"`
	Offset *uint64 `json:"offset"`
}

// cursorAnswer is one cursor in the answers of the cursor routes.
type cursorAnswer struct {
	Name   string `json:"name"`
	Topic  string `json:"topic"`
	Offset uint64 `json:"offset"`
	// End is the topic's next offset, Lag the messages between.
	End uint64 `json:"end"`
	Lag uint64 `json:"lag"`
	// OwnerUID is the user that created the cursor; null when none is
	// recorded.
	OwnerUID *uint32 `json:"owner_uid"`
}

func newCursorAnswer(c store.CursorInfo) cursorAnswer {
	a := cursorAnswer{Name: c.Name, Topic: c.Topic, Offset: c.Offset, End: c.End, Lag: c.Lag()}
	if c.Owned {
		a.OwnerUID = &c.Owner
	}
	return a
}

// uptime rounds to milliseconds for the status page.
func uptime(since time.Time) float64 {
	return time.Since(since).Round(time.Millisecond).Seconds()
}
