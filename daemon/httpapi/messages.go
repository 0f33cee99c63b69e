package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/internal/jsonstr"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// wireMessage is one message of a POST /v1/topics/{topic}/messages body.
// Two other structs describe this object, on purpose apart: package
// client's messageWire (a client.Message read back: only the fields a
// Message has, no time fields) and clienttest's wireMessage (the test
// double's, written from the API's specification alone so that a
// misreading does not cancel out). This one reads every field the API
// takes, with pointers that tell a field left out from an empty one.
type wireMessage struct {
	Key         string  `json:"key"`
	Tag         string  `json:"tag"`
	Value       *string `json:"value"`
	ValueBase64 *string `json:"value_base64"`
	Delete      bool    `json:"delete"`
	// The time fields (DESIGN.md, "Time"): ttl_ms or expires_at, and
	// effective_at, instants as Unix milliseconds or RFC 3339 times;
	// cancel with effective_at voids the key's records scheduled then.
	TTLMs       *int64       `json:"ttl_ms"`
	ExpiresAt   *wireInstant `json:"expires_at"`
	EffectiveAt *wireInstant `json:"effective_at"`
	Cancel      bool         `json:"cancel"`

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
//
// now (Unix ms) turns a ttl_ms into an expiry. A batch of more than one
// message is marked to become visible together (record.Together).
func decodeMessages(topic string, body []byte, ndjson bool, maxValue, now int64) ([]record.Message, *wire.Error) {
	if !ndjson {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, wire.Errorf(wire.CodeBadJSON, "empty body: want one JSON message object (or NDJSON with Content-Type: application/x-ndjson)")
		}
		m, err := decodeMessage(topic, body, maxValue, now)
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
		m, err := decodeMessage(topic, l, maxValue, now)
		if err != nil {
			err.Message = "line " + strconv.Itoa(line) + ": " + err.Message
			return nil, err
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil, wire.Errorf(wire.CodeBadRequest, "empty batch: no messages in the body")
	}
	record.Together(msgs)
	return msgs, nil
}

// decodeMessage decodes and checks one JSON message object.
func decodeMessage(topic string, b []byte, maxValue, now int64) (record.Message, *wire.Error) {
	w, e := decodeWire(b)
	if e != nil {
		return record.Message{}, e
	}
	m := record.Message{Topic: topic, Key: w.Key, Tag: w.Tag, Delete: w.Delete, Cancel: w.Cancel}
	switch {
	case w.TTLMs != nil && w.ExpiresAt != nil:
		return m, wire.Errorf(wire.CodeBadRequest, `give "ttl_ms" or "expires_at", not both`)
	case w.TTLMs != nil && (*w.TTLMs <= 0 || *w.TTLMs > 1<<53):
		return m, wire.Errorf(wire.CodeBadRequest, "ttl_ms: want a positive number of milliseconds, got %d", *w.TTLMs)
	case w.TTLMs != nil:
		m.ExpiresAt = now + *w.TTLMs
	case w.ExpiresAt != nil:
		m.ExpiresAt = int64(*w.ExpiresAt)
	}
	if w.EffectiveAt != nil {
		m.EffectiveAt = int64(*w.EffectiveAt)
	}
	switch {
	case w.Value != nil && w.ValueBase64 != nil:
		return m, wire.Errorf(wire.CodeBadRequest, `give "value" or "value_base64", not both`)
	case w.raw != nil:
		m.Value = w.raw
	case w.Value != nil:
		m.Value = []byte(*w.Value)
	case w.ValueBase64 != nil:
		// Bounded before it is decoded; the exact size is checked below.
		if n := base64.StdEncoding.DecodedLen(len(*w.ValueBase64)); int64(n) > maxValue+2 {
			return m, wire.Errorf(wire.CodeValueTooLarge, "value of about %d bytes exceeds --max-value-size (%s)", n, wire.FormatSize(maxValue))
		}
		v, err := base64.StdEncoding.Strict().DecodeString(*w.ValueBase64)
		if err != nil {
			return m, wire.Errorf(wire.CodeBadBase64, "value_base64: %v", err)
		}
		m.Value = v
	}
	return m, command.Limits{MaxValue: maxValue}.Message(&m)
}

// decodeWire decodes one message object: by fastMessage when it can, by
// encoding/json (strict, after jsonstr.Check) otherwise.
func decodeWire(b []byte) (wireMessage, *wire.Error) {
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
func decodeStrict(b []byte, v any, what string) *wire.Error {
	if p := jsonstr.Check(b); p != nil {
		return wire.Errorf(wire.CodeBadJSON, "%v: JSON strings must be valid UTF-8 (send a binary value as \"value_base64\")", p)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wire.Errorf(wire.CodeBadJSON, "%s", jsonErrorText(err))
	}
	// Anything after the object other than white space (dec.More misses a
	// stray closing bracket).
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return wire.Errorf(wire.CodeBadJSON, "data after the %s", what)
	}
	return nil
}

// fastMessage decodes the common shape of a message object without
// reflection: the fields key, tag, value and value_base64 as strings with
// no escapes and valid UTF-8, delete and cancel as true or false, ttl_ms
// as a JSON integer, expires_at and effective_at as an instant (a JSON
// integer, or a string with no escapes) that parseInstant takes, each at
// most once, nothing else. Anything else reports !ok, and encoding/json
// decodes the object (with its exact errors); on what both accept they
// agree (FuzzFastMessage checks it). A batch of thousands of messages
// spends most of its decoding time here.
func fastMessage(b []byte) (w wireMessage, ok bool) {
	i := jsonstr.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return w, false
	}
	i = jsonstr.SkipSpace(b, i+1)
	var seen [len(fastFields)]bool
	if i < len(b) && b[i] == '}' {
		return w, jsonstr.SkipSpace(b, i+1) == len(b)
	}
	for {
		name, j, ok := fastBytes(b, i)
		if !ok {
			return w, false
		}
		i = jsonstr.SkipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return w, false
		}
		i = jsonstr.SkipSpace(b, i+1)
		field := slices.Index(fastFields[:], string(name))
		if field < 0 || seen[field] {
			return w, false
		}
		seen[field] = true
		if i, ok = w.fastField(field, b, i); !ok {
			return w, false
		}
		i = jsonstr.SkipSpace(b, i)
		if i >= len(b) {
			return w, false
		}
		if b[i] == '}' {
			return w, jsonstr.SkipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return w, false
		}
		i = jsonstr.SkipSpace(b, i+1)
	}
}

// fastField reads the value of field (an index in fastFields) at b[i:]
// into w, as fastMessage takes it, and returns the index after it.
func (w *wireMessage) fastField(field int, b []byte, i int) (int, bool) {
	switch field {
	case fieldDelete, fieldCancel:
		v, j, ok := fastBool(b, i)
		if field == fieldDelete {
			w.Delete = v
		} else {
			w.Cancel = v
		}
		return j, ok
	case fieldTTL:
		lit, j, ok := fastInt(b, i)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(string(lit), 10, 64)
		w.TTLMs = &n
		return j, err == nil
	case fieldExpires, fieldEffective:
		lit, j, ok := fastInt(b, i)
		if !ok {
			lit, j, ok = fastBytes(b, i)
		}
		if !ok {
			return 0, false
		}
		n, ok := parseInstant(string(lit))
		at := wireInstant(n)
		if field == fieldExpires {
			w.ExpiresAt = &at
		} else {
			w.EffectiveAt = &at
		}
		return j, ok // !ok: encoding/json names the problem
	case fieldValue:
		// The value is kept as bytes of the body, not copied.
		raw, j, ok := fastBytes(b, i)
		w.raw, w.Value = raw, &rawValue // Value marks the field as given
		return j, ok
	}
	v, j, ok := fastString(b, i)
	switch field {
	case fieldKey:
		w.Key = v
	case fieldTag:
		w.Tag = v
	case fieldBase64:
		v64 := v // only this field's string is moved to the heap
		w.ValueBase64 = &v64
	}
	return j, ok
}

// rawValue is what a wireMessage's Value points to when fastMessage took
// the value as raw bytes: an allocation fewer a message. Nothing writes
// through it.
var rawValue = ""

// The fields fastMessage reads, by their index in fastFields.
const (
	fieldKey = iota
	fieldTag
	fieldValue
	fieldBase64
	fieldDelete
	fieldCancel
	fieldTTL
	fieldExpires
	fieldEffective
)

var fastFields = [...]string{"key", "tag", "value", "value_base64", "delete", "cancel", "ttl_ms", "expires_at", "effective_at"}

// fastBool reads true or false at b[i].
func fastBool(b []byte, i int) (v bool, next int, ok bool) {
	switch {
	case bytes.HasPrefix(b[i:], []byte("true")):
		return true, i + 4, true
	case bytes.HasPrefix(b[i:], []byte("false")):
		return false, i + 5, true
	}
	return false, i, false
}

// fastInt reads a JSON number at b[i] that is a non-negative integer
// (digits, no leading zero, no fraction or exponent) and returns its
// digits. A sign, a fraction or an exponent report !ok: encoding/json
// decodes those.
func fastInt(b []byte, i int) ([]byte, int, bool) {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i || j-i > 1 && b[i] == '0' || j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return nil, i, false
	}
	return b[i:j], j, true
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

// jsonErrorText makes encoding/json's errors read well on their own.
func jsonErrorText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, new(*instantError)):
		var ie *instantError
		errors.As(err, &ie)
		return "an instant: " + ie.Error()
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
