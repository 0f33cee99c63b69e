package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cachecast/cachecast/internal/jsonstr"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// wireMessage is one message of a POST /v1/topics/{topic}/messages body.
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
	if w.Key != "" {
		if err := wire.CheckKey(w.Key); err != nil {
			return m, err
		}
	}
	if err := wire.CheckTag(w.Tag); err != nil {
		return m, err
	}
	switch {
	case w.Value != nil && w.ValueBase64 != nil:
		return m, wire.Errorf(wire.CodeBadRequest, `give "value" or "value_base64", not both`)
	case w.raw != nil:
		if int64(len(w.raw)) > maxValue {
			return m, wire.Errorf(wire.CodeValueTooLarge, "value of %d bytes exceeds --max-value-size (%d)", len(w.raw), maxValue)
		}
		m.Value = w.raw
	case w.Value != nil:
		if int64(len(*w.Value)) > maxValue {
			return m, wire.Errorf(wire.CodeValueTooLarge, "value of %d bytes exceeds --max-value-size (%d)", len(*w.Value), maxValue)
		}
		m.Value = []byte(*w.Value)
	case w.ValueBase64 != nil:
		if n := base64.StdEncoding.DecodedLen(len(*w.ValueBase64)); int64(n) > maxValue+2 {
			return m, wire.Errorf(wire.CodeValueTooLarge, "value of about %d bytes exceeds --max-value-size (%d)", n, maxValue)
		}
		v, err := base64.StdEncoding.Strict().DecodeString(*w.ValueBase64)
		if err != nil {
			return m, wire.Errorf(wire.CodeBadBase64, "value_base64: %v", err)
		}
		if int64(len(v)) > maxValue {
			return m, wire.Errorf(wire.CodeValueTooLarge, "value of %d bytes exceeds --max-value-size (%d)", len(v), maxValue)
		}
		m.Value = v
	}
	if m.Delete {
		if m.Key == "" {
			return m, wire.Errorf(wire.CodeInvalidName, "a delete needs a key")
		}
		if len(m.Value) > 0 {
			return m, wire.Errorf(wire.CodeBadRequest, "a delete carries no value")
		}
	}
	if e := checkTimeFields(&m); e != nil {
		return m, e
	}
	return m, nil
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
