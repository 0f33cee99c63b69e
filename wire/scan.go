package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/cachecast/cachecast/internal/jsonstr"
)

// ErrMalformed is what DecodeResults and DecodeResult return for a text
// that is not the object they read (wrapped, with encoding/json's reason).
var ErrMalformed = errors.New("wire: malformed answer")

// resultJSON is a PutResult as encoding/json reads it when the scanner
// does not: hlc as a decimal string or as a number.
type resultJSON struct {
	Topic  string      `json:"topic"`
	Key    string      `json:"key"`
	Origin string      `json:"origin"`
	Seq    uint64      `json:"seq"`
	HLC    json.Number `json:"hlc"`
	Time   string      `json:"time"`
	Status string      `json:"status"`
}

func (r *resultJSON) result() PutResult {
	return PutResult{Topic: r.Topic, Key: r.Key, Origin: r.Origin, Seq: r.Seq, HLC: string(r.HLC), Time: r.Time, Status: r.Status}
}

// DecodeResults decodes a batch publish answer {"results":[PutResult,...]}.
// encoding/json spends about a microsecond per result, as much as the
// daemon spends storing the message, and a benchmark would measure the
// client; so the usual answer is read by a small scanner, and anything it
// does not expect (an escape in a string, a field it does not know, a
// null) goes to encoding/json instead. The scanner only ever accepts input
// that encoding/json reads the same way (FuzzDecodeResults checks this).
// hlc may be a decimal string (as the daemon writes it) or a number.
func DecodeResults(body []byte) ([]PutResult, error) {
	if rs, ok := scanResults(body); ok {
		return rs, nil
	}
	var out struct {
		Results []resultJSON `json:"results"`
	}
	if err := jsonstr.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("%w: results: %v", ErrMalformed, err)
	}
	rs := make([]PutResult, len(out.Results))
	for i := range out.Results {
		rs[i] = out.Results[i].result()
	}
	return rs, nil
}

// DecodeResult decodes one PutResult object, as DecodeResults does.
func DecodeResult(body []byte) (PutResult, error) {
	s := &scanner{b: body}
	if r, ok := s.result(&PutResult{}); ok {
		if s.ws(); s.i == len(s.b) {
			return r, nil
		}
	}
	var w resultJSON
	if err := jsonstr.Unmarshal(body, &w); err != nil {
		return PutResult{}, fmt.Errorf("%w: result: %v", ErrMalformed, err)
	}
	return w.result(), nil
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips white space and consumes c if it comes next.
func (s *scanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads a string without escapes or control characters, valid UTF-8.
func (s *scanner) str() (string, bool) { return s.strLike("") }

// name reads an object key as str does, without copying it: the caller
// compares it and lets it go.
func (s *scanner) name() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		c := s.b[s.i]
		if c == '"' {
			s.i++
			return s.b[start : s.i-1], true
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return nil, false // not one of our ASCII names: bail out
		}
	}
	return nil, false
}

// strLike is str that returns prev itself, not a copy, when the string
// equals it: the results of a batch repeat their topic, origin, status and
// mostly their time.
func (s *scanner) strLike(prev string) (string, bool) {
	if !s.next('"') {
		return "", false
	}
	start, ascii := s.i, true
	for ; s.i < len(s.b); s.i++ {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(v) {
				return "", false
			}
			if string(v) == prev { // no allocation
				return prev, true
			}
			return string(v), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// digits reads an unsigned integer literal as JSON writes one: no sign,
// fraction, exponent or leading zero; at most 19 digits so it fits.
func (s *scanner) digits() ([]byte, bool) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	d := s.b[start:s.i]
	if len(d) == 0 || len(d) > 19 || (len(d) > 1 && d[0] == '0') {
		return nil, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return nil, false
		}
	}
	return d, true
}

func (s *scanner) uint() (uint64, bool) {
	d, ok := s.digits()
	if !ok {
		return 0, false
	}
	var v uint64
	for _, c := range d {
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// decimalString is a string holding what digits accepts.
func decimalString(v string) bool {
	if len(v) == 0 || len(v) > 19 || (len(v) > 1 && v[0] == '0') {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

func scanResults(b []byte) ([]PutResult, bool) {
	s := &scanner{b: b}
	if !s.next('{') {
		return nil, false
	}
	if k, ok := s.name(); !ok || string(k) != "results" || !s.next(':') || !s.next('[') {
		return nil, false
	}
	rs := make([]PutResult, 0, len(b)/160)
	var prev PutResult
	if !s.next(']') {
		for {
			r, ok := s.result(&prev)
			prev = r
			if !ok {
				return nil, false
			}
			rs = append(rs, r)
			if s.next(']') {
				break
			}
			if !s.next(',') {
				return nil, false
			}
		}
	}
	if !s.next('}') {
		return nil, false
	}
	s.ws()
	return rs, s.i == len(s.b)
}

// result reads one result object; prev is the one before, whose strings
// are reused where they repeat.
func (s *scanner) result(prev *PutResult) (PutResult, bool) {
	var r PutResult
	if !s.next('{') {
		return r, false
	}
	if s.next('}') {
		return r, true
	}
	for {
		k, ok := s.name()
		if !ok || !s.next(':') {
			return r, false
		}
		switch string(k) { // no allocation
		case "topic":
			r.Topic, ok = s.strLike(prev.Topic)
		case "key":
			r.Key, ok = s.str()
		case "origin":
			r.Origin, ok = s.strLike(prev.Origin)
		case "time":
			r.Time, ok = s.strLike(prev.Time)
		case "status":
			r.Status, ok = s.strLike(prev.Status)
		case "seq":
			r.Seq, ok = s.uint()
		case "hlc":
			var v string
			if s.peek() == '"' {
				v, ok = s.strLike(prev.HLC)
				ok = ok && decimalString(v)
			} else {
				var d []byte
				d, ok = s.digits()
				v = string(d)
			}
			r.HLC = v
		default:
			// A field this scanner does not know (or a case variant that
			// encoding/json would match): let encoding/json decide.
			return r, false
		}
		if !ok {
			return r, false
		}
		if s.next('}') {
			return r, true
		}
		if !s.next(',') {
			return r, false
		}
	}
}
