// Package clienttest serves the cachecast local API's wire format from
// memory on a real Unix socket, so that code which speaks the API (package
// client, the cachecast CLI) can be tested without a daemon, as
// net/http/httptest does for HTTP handlers.
//
// It is a test double of the wire format only, written from the API's
// specification independently of package client (it does not import it),
// so that a misreading in the client shows up as a failed test rather than
// cancelling out. It is not the daemon: nothing is durable, there is no
// log, no flush mode and no cluster. It is strict where the specification
// allows it to be (unknown JSON fields, value/value_base64 both present,
// names) so that a client sending something the daemon would refuse fails
// here too. End-to-end tests against the real cachecastd live in test/.
//
// It does not serve time (DESIGN.md, "Time"): no expiry, no scheduled
// value, no cancel, no pending routes. A request that asks for one, by the
// fields "ttl_ms", "expires_at", "effective_at" or "cancel" of a POSTed
// message or by the header Cachecast-Expires or Cachecast-Effective-At,
// is refused with 400 bad_request saying so (never stored as a plain
// value), and GET /v1/topics/{topic}/pending and DELETE
// /v1/topics/{topic}/pending/{key} are 404 route_not_found. Why: their
// meaning is the view's (instants against the node's clock, a schedule
// in force at its instant on every node, ordering by HLC), and a second
// copy of it here would be a second implementation to keep in step, not
// a double of the wire format. Test a client's time fields against a real
// daemon: daemon/daemontest, as package client's TestContract does.
package clienttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// Limits of the double, the daemon's defaults as the specification gives
// them where it does.
const (
	DefaultMaxValueSize = 1 << 20
	defaultKeysLimit    = 1000
	maxKeysLimit        = 10000
	maxBodySize         = 64 << 20
)

// Server is a running wire-format double. Create it with NewServer.
type Server struct {
	// Socket is the path of the Unix socket the server listens on.
	Socket string

	srv          *http.Server
	ln           net.Listener
	dir          string
	maxValueSize int
	origin       uint64
	started      time.Time

	mu       sync.Mutex
	seq      uint64
	lastHLC  uint64
	topics   map[string]*topic
	cursors  map[string]cursor
	changed  chan struct{} // closed and replaced on every append
	health   error
	ready    error
	requests map[string]int // by "METHOD route-pattern"
	closing  chan struct{}
}

type topic struct {
	msgs []stored
	live map[string]int // key -> index in msgs of its latest (non-tombstone) message
}

type stored struct {
	key, tag string
	value    []byte
	del      bool
	seq, hlc uint64
}

type cursor struct {
	Name   string `json:"name"`
	Topic  string `json:"topic"`
	Offset uint64 `json:"offset"`
	End    uint64 `json:"end"`
	Lag    uint64 `json:"lag"`
	// OwnerUID: this server reads no peer credentials; every cursor is
	// owned by the process's user, as a same-user caller's is.
	OwnerUID uint32 `json:"owner_uid"`
}

// withLag fills End and Lag from the topic; called under s.mu.
func (s *Server) withLag(c cursor) cursor {
	c.End, c.Lag = 0, 0
	if t := s.topics[c.Topic]; t != nil {
		c.End = uint64(len(t.msgs))
	}
	if c.End > c.Offset {
		c.Lag = c.End - c.Offset
	}
	return c
}

// Option configures a Server.
type Option func(*Server)

// WithMaxValueSize sets the largest value accepted (default 1 MiB).
func WithMaxValueSize(n int) Option { return func(s *Server) { s.maxValueSize = n } }

// NewServer starts a server on a fresh socket in a short temporary
// directory (socket paths are limited to 107 bytes, and t.TempDir's can be
// longer) and stops it when the test ends.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "cctest")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		Socket:       filepath.Join(dir, "api.sock"),
		dir:          dir,
		maxValueSize: DefaultMaxValueSize,
		origin:       0x00c0ffee12345678,
		started:      time.Now(),
		topics:       map[string]*topic{},
		cursors:      map[string]cursor{},
		changed:      make(chan struct{}),
		requests:     map[string]int{},
		closing:      make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.ln, err = net.Listen("unix", s.Socket)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	s.srv = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(s.ln)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server, ending open subscriptions, and removes its
// socket directory.
func (s *Server) Close() {
	s.mu.Lock()
	select {
	case <-s.closing:
		s.mu.Unlock()
		return
	default:
		close(s.closing)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	os.RemoveAll(s.dir)
}

// Origin is the origin ID the server stamps messages with.
func (s *Server) Origin() uint64 { return s.origin }

// SetHealth makes /healthz answer 503 with err's text (nil: 200).
func (s *Server) SetHealth(err error) { s.mu.Lock(); s.health = err; s.mu.Unlock() }

// SetReady makes /readyz answer 503 with err's text (nil: 200).
func (s *Server) SetReady(err error) { s.mu.Lock(); s.ready = err; s.mu.Unlock() }

// Messages is how many messages topic holds (tombstones included).
func (s *Server) Messages(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.topics[topic]; t != nil {
		return len(t.msgs)
	}
	return 0
}

// Requests is how many requests the route pattern (as in
// "PUT /v1/topics/{topic}/keys/{key}") has served.
func (s *Server) Requests(pattern string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[pattern]
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.requests[pattern]++
			s.mu.Unlock()
			for _, name := range []string{"Cachecast-Expires", "Cachecast-Effective-At"} {
				if r.Header.Get(name) != "" {
					fail(w, timeRefused(name+" (a header)"))
					return
				}
			}
			h(w, r)
		})
	}
	handle("PUT /v1/topics/{topic}/keys/{key}", s.put)
	handle("GET /v1/topics/{topic}/keys/{key}", s.get)
	handle("DELETE /v1/topics/{topic}/keys/{key}", s.del)
	handle("POST /v1/topics/{topic}/messages", s.post)
	handle("GET /v1/topics/{topic}/keys", s.keys)
	handle("GET /v1/topics", s.listTopics)
	handle("GET /v1/topics/{topic}/subscribe", s.subscribe)
	handle("POST /v1/cursors/{name}", s.setCursor)
	handle("GET /v1/cursors/{name}", s.getCursor)
	handle("GET /v1/cursors", s.listCursors)
	handle("DELETE /v1/cursors/{name}", s.deleteCursor)
	handle("GET /v1/status", s.status)
	handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) { s.probe(w, &s.health) })
	handle("GET /readyz", func(w http.ResponseWriter, r *http.Request) { s.probe(w, &s.ready) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "route_not_found", "no route "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// apiError is an error answer: status, code, message.
type apiError struct {
	status        int
	code, message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status, code, fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

func fail(w http.ResponseWriter, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeError(w, ae.status, ae.code, ae.message)
		return
	}
	writeError(w, http.StatusInternalServerError, "internal", err.Error())
}

func writeJSON(w http.ResponseWriter, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(body, '\n'))
}

// Names, as the specification has them.

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

func checkSimpleName(what, s string, min, max int) error {
	if len(s) < min || len(s) > max {
		return errorf(400, "invalid_name", "%s %q: length must be %d..%d bytes", what, s, min, max)
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return errorf(400, "invalid_name", "%s %q: only [A-Za-z0-9._-] allowed", what, s)
		}
	}
	return nil
}

func checkTopic(s string) error { return checkSimpleName("topic", s, 1, 128) }
func checkTag(s string) error   { return checkSimpleName("tag", s, 0, 128) }

func checkKey(s string, allowEmpty bool) error {
	if s == "" && allowEmpty {
		return nil
	}
	if len(s) < 1 || len(s) > 1024 {
		return errorf(400, "invalid_name", "key: length must be 1..1024 bytes")
	}
	if !utf8.ValidString(s) {
		return errorf(400, "invalid_name", "key: not UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return errorf(400, "invalid_name", "key: control character")
		}
	}
	return nil
}

// append stamps and stores messages, all or nothing (they were checked).
// The caller holds s.mu.
func (s *Server) append(topicName string, ms []stored) []map[string]any {
	t := s.topics[topicName]
	if t == nil {
		t = &topic{live: map[string]int{}}
		s.topics[topicName] = t
	}
	results := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		s.seq++
		// HLC: wall milliseconds << 16 | counter, strictly increasing.
		h := uint64(time.Now().UnixMilli()) << 16
		if h <= s.lastHLC {
			h = s.lastHLC + 1
		}
		s.lastHLC = h
		m.seq, m.hlc = s.seq, h
		t.msgs = append(t.msgs, m)
		if m.key != "" {
			if m.del {
				delete(t.live, m.key)
			} else {
				t.live[m.key] = len(t.msgs) - 1
			}
		}
		results = append(results, map[string]any{
			"topic": topicName, "key": m.key, "origin": fmt.Sprintf("%016x", s.origin), "seq": m.seq,
			"hlc": strconv.FormatUint(m.hlc, 10), "time": hlcTime(m.hlc), "status": "ok",
		})
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return results
}

func hlcTime(h uint64) string {
	return time.UnixMilli(int64(h >> 16)).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func (s *Server) put(w http.ResponseWriter, r *http.Request) {
	topicName, key, tag := r.PathValue("topic"), r.PathValue("key"), r.Header.Get("Cachecast-Tag")
	for _, err := range []error{checkTopic(topicName), checkKey(key, false), checkTag(tag)} {
		if err != nil {
			fail(w, err)
			return
		}
	}
	value, err := io.ReadAll(io.LimitReader(r.Body, int64(s.maxValueSize)+1))
	if err != nil {
		fail(w, errorf(400, "bad_request", "reading body: %v", err))
		return
	}
	if len(value) > s.maxValueSize {
		fail(w, errorf(413, "value_too_large", "value larger than %d bytes", s.maxValueSize))
		return
	}
	s.mu.Lock()
	res := s.append(topicName, []stored{{key: key, tag: tag, value: value}})
	s.mu.Unlock()
	writeJSON(w, res[0])
}

// keyPath is the topic and key of a request's path; ok is false, and
// the error answered, when either is not a valid name.
func keyPath(w http.ResponseWriter, r *http.Request) (topic, key string, ok bool) {
	topic, key = r.PathValue("topic"), r.PathValue("key")
	for _, err := range []error{checkTopic(topic), checkKey(key, false)} {
		if err != nil {
			fail(w, err)
			return "", "", false
		}
	}
	return topic, key, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	topicName, key, ok := keyPath(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	var m stored
	ok = false
	if t := s.topics[topicName]; t != nil {
		var i int
		if i, ok = t.live[key]; ok {
			m = t.msgs[i]
		}
	}
	s.mu.Unlock()
	if !ok {
		fail(w, errorf(404, "not_found", "no key %q in topic %q", key, topicName))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cachecast-Origin", fmt.Sprintf("%016x", s.origin))
	h.Set("Cachecast-Seq", strconv.FormatUint(m.seq, 10))
	h.Set("Cachecast-Hlc", strconv.FormatUint(m.hlc, 10))
	h.Set("Cachecast-Time", hlcTime(m.hlc))
	h.Set("Cachecast-Tag", m.tag)
	h.Set("Content-Length", strconv.Itoa(len(m.value)))
	w.Write(m.value)
}

func (s *Server) del(w http.ResponseWriter, r *http.Request) {
	topicName, key, ok := keyPath(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	res := s.append(topicName, []stored{{key: key, del: true}})
	s.mu.Unlock()
	writeJSON(w, res[0])
}

// wireMessage is a POST body object, this package's own copy (see the
// package doc: not shared with the daemon or package client). The time
// fields are read only to be refused: the double does not serve them.
type wireMessage struct {
	Key         string  `json:"key"`
	Tag         string  `json:"tag"`
	Value       *string `json:"value"`
	ValueBase64 *string `json:"value_base64"`
	Delete      bool    `json:"delete"`

	TTLMs       json.RawMessage `json:"ttl_ms"`
	ExpiresAt   json.RawMessage `json:"expires_at"`
	EffectiveAt json.RawMessage `json:"effective_at"`
	Cancel      json.RawMessage `json:"cancel"`
}

// timeRefused is the answer to a request that asks for time, which the
// double does not serve (see the package doc).
func timeRefused(what string) *apiError {
	return errorf(400, "bad_request", "%s: clienttest does not serve expiries or schedules; test them against a daemon (daemon/daemontest)", what)
}

func (s *Server) parseMessage(line []byte) (stored, error) {
	// As the daemon: JSON text is UTF-8 (encoding/json would read an
	// invalid byte as U+FFFD, another key).
	if !utf8.Valid(line) {
		return stored{}, errorf(400, "bad_json", "invalid UTF-8: JSON strings must be valid UTF-8 (send a binary value as \"value_base64\")")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var m wireMessage
	if err := dec.Decode(&m); err != nil {
		return stored{}, errorf(400, "bad_json", "%v", err)
	}
	if dec.More() {
		return stored{}, errorf(400, "bad_json", "more than one object on a line")
	}
	for i, v := range []json.RawMessage{m.TTLMs, m.ExpiresAt, m.EffectiveAt, m.Cancel} {
		if v != nil {
			return stored{}, timeRefused(strconv.Quote([...]string{"ttl_ms", "expires_at", "effective_at", "cancel"}[i]))
		}
	}
	if err := checkKey(m.Key, true); err != nil {
		return stored{}, err
	}
	if err := checkTag(m.Tag); err != nil {
		return stored{}, err
	}
	var value []byte
	switch {
	case m.Value != nil && m.ValueBase64 != nil:
		return stored{}, errorf(400, "bad_request", "both value and value_base64")
	case m.Value != nil:
		value = []byte(*m.Value)
	case m.ValueBase64 != nil:
		v, err := base64.StdEncoding.DecodeString(*m.ValueBase64)
		if err != nil {
			return stored{}, errorf(400, "bad_base64", "%v", err)
		}
		value = v
	}
	if len(value) > s.maxValueSize {
		return stored{}, errorf(413, "value_too_large", "value larger than %d bytes", s.maxValueSize)
	}
	if m.Delete && m.Key == "" {
		return stored{}, errorf(400, "bad_request", "delete without a key")
	}
	return stored{key: m.Key, tag: m.Tag, value: value, del: m.Delete}, nil
}

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	topicName := r.PathValue("topic")
	if err := checkTopic(topicName); err != nil {
		fail(w, err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodySize+1))
	if err != nil {
		fail(w, errorf(400, "bad_request", "reading body: %v", err))
		return
	}
	if len(body) > maxBodySize {
		fail(w, errorf(413, "body_too_large", "body larger than %d bytes", maxBodySize))
		return
	}
	ctype := r.Header.Get("Content-Type")
	var lines [][]byte
	if strings.HasPrefix(ctype, "application/x-ndjson") {
		for _, l := range bytes.Split(body, []byte{'\n'}) {
			if len(bytes.TrimSpace(l)) > 0 {
				lines = append(lines, l)
			}
		}
	} else {
		lines = [][]byte{body}
	}
	if len(lines) == 0 {
		fail(w, errorf(400, "bad_request", "no message in the body"))
		return
	}
	ms := make([]stored, 0, len(lines))
	for i, l := range lines {
		m, err := s.parseMessage(l)
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				ae.message = fmt.Sprintf("line %d: %s", i+1, ae.message)
			}
			fail(w, err)
			return
		}
		ms = append(ms, m)
	}
	s.mu.Lock()
	res := s.append(topicName, ms)
	s.mu.Unlock()
	writeJSON(w, map[string]any{"results": res})
}

func (s *Server) keys(w http.ResponseWriter, r *http.Request) {
	topicName := r.PathValue("topic")
	if err := checkTopic(topicName); err != nil {
		fail(w, err)
		return
	}
	q := r.URL.Query()
	prefix, after := q.Get("prefix"), q.Get("after")
	limit := defaultKeysLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			fail(w, errorf(400, "bad_request", "limit %q: want a positive integer", l))
			return
		}
		limit = min(n, maxKeysLimit)
	}
	s.mu.Lock()
	var all []string
	if t := s.topics[topicName]; t != nil {
		for k := range t.live {
			if strings.HasPrefix(k, prefix) && k > after {
				all = append(all, k)
			}
		}
	}
	s.mu.Unlock()
	sort.Strings(all)
	out := map[string]any{"keys": []string{}, "next": ""}
	if len(all) > limit {
		out["keys"], out["next"] = all[:limit], all[limit-1]
	} else if all != nil {
		out["keys"] = all
	}
	writeJSON(w, out)
}

func (s *Server) listTopics(w http.ResponseWriter, r *http.Request) {
	// The double has no internal topics: internal=1 lists the same.
	if v := r.URL.Query().Get("internal"); v != "" && v != "1" && v != "0" && v != "true" && v != "false" {
		fail(w, errorf(400, "bad_request", "internal: want 1 or 0, got %q", v))
		return
	}
	s.mu.Lock()
	list := []map[string]any{}
	for name, t := range s.topics {
		list = append(list, map[string]any{"name": name, "keys": len(t.live), "messages": len(t.msgs)})
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i]["name"].(string) < list[j]["name"].(string) })
	writeJSON(w, map[string]any{"topics": list})
}

func (s *Server) subscribe(w http.ResponseWriter, r *http.Request) {
	topicName := r.PathValue("topic")
	q := r.URL.Query()
	name, autoAck := q.Get("name"), q.Get("ack") == "auto"
	tags, err := subscribeArgs(topicName, q)
	if err != nil {
		fail(w, err)
		return
	}
	off, err := s.subscribeFrom(topicName, name, q.Get("from"))
	if err != nil {
		fail(w, err)
		return
	}

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	bw := bufio.NewWriter(w)
	for {
		batch, changed := s.streamBatch(topicName, &off, tags)
		for _, ev := range batch {
			b, _ := json.Marshal(ev)
			bw.Write(append(b, '\n'))
		}
		if err := bw.Flush(); err != nil {
			return
		}
		rc.Flush()
		if autoAck && name != "" {
			s.mu.Lock()
			s.cursors[name] = cursor{Name: name, Topic: topicName, Offset: off, OwnerUID: uint32(os.Getuid())}
			s.mu.Unlock()
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		}
	}
}

// subscribeArgs checks a subscription's topic, ack, cursor name and tags
// as the daemon does, and returns the tags to filter on.
func subscribeArgs(topicName string, q url.Values) (map[string]bool, error) {
	if err := checkTopic(topicName); err != nil {
		return nil, err
	}
	if ack := q.Get("ack"); ack != "" && ack != "auto" {
		return nil, errorf(400, "bad_request", "ack %q: want auto", ack)
	}
	if name := q.Get("name"); name != "" {
		if err := checkSimpleName("cursor name", name, 1, 128); err != nil {
			return nil, err
		}
	}
	tags := map[string]bool{}
	if t := q.Get("tags"); t != "" {
		for _, tag := range strings.Split(t, "||") {
			tag = strings.TrimSpace(tag)
			if err := checkTag(tag); err != nil || tag == "" {
				return nil, errorf(400, "bad_request", "tags %q: bad tag %q", t, tag)
			}
			tags[tag] = true
		}
	}
	return tags, nil
}

// subscribeFrom is the offset a subscription starts at: its cursor's when
// it names one and no from, else what from says.
func (s *Server) subscribeFrom(topicName, name, from string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topicName]
	n := uint64(0)
	if t != nil {
		n = uint64(len(t.msgs))
	}
	cur, hasCursor := s.cursors[name]
	switch {
	case from == "" && name != "" && hasCursor:
		if cur.Topic != topicName {
			return 0, errorf(400, "bad_request", "cursor %q belongs to topic %q", name, cur.Topic)
		}
		return cur.Offset, nil
	case from == "" || from == "latest":
		return n, nil
	case from == "earliest":
		return 0, nil
	}
	if v, err := strconv.ParseUint(from, 10, 64); err == nil {
		return v, nil
	}
	ts, err := time.Parse(time.RFC3339Nano, from)
	if err != nil {
		return 0, errorf(400, "bad_request", "from %q: want earliest, latest, an offset or an RFC 3339 time", from)
	}
	for i := uint64(0); i < n; i++ {
		if int64(t.msgs[i].hlc>>16) >= ts.UnixMilli() {
			return i, nil
		}
	}
	return n, nil
}

// streamBatch takes up to 256 of the topic's messages from *off on that
// pass the tags, moving *off past them, and the channel closed at the next
// change.
func (s *Server) streamBatch(topicName string, off *uint64, tags map[string]bool) ([]map[string]any, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch []map[string]any
	if t := s.topics[topicName]; t != nil {
		for ; *off < uint64(len(t.msgs)) && len(batch) < 256; *off++ {
			m := t.msgs[*off]
			if len(tags) > 0 && !tags[m.tag] {
				continue
			}
			ev := map[string]any{
				"offset": *off, "topic": topicName, "key": m.key, "tag": m.tag, "delete": m.del,
				"origin": fmt.Sprintf("%016x", s.origin), "seq": m.seq,
				"hlc": strconv.FormatUint(m.hlc, 10), "time": hlcTime(m.hlc),
			}
			if utf8.Valid(m.value) {
				ev["value"] = string(m.value)
			} else {
				ev["value_base64"] = base64.StdEncoding.EncodeToString(m.value)
			}
			batch = append(batch, ev)
		}
	}
	return batch, s.changed
}

func (s *Server) setCursor(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := checkSimpleName("cursor name", name, 1, 128); err != nil {
		fail(w, err)
		return
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var body struct {
		Topic  string  `json:"topic"`
		Offset *uint64 `json:"offset"`
	}
	if err := dec.Decode(&body); err != nil {
		fail(w, errorf(400, "bad_json", "%v", err))
		return
	}
	if err := checkTopic(body.Topic); err != nil {
		fail(w, err)
		return
	}
	if body.Offset == nil {
		fail(w, errorf(400, "bad_request", "offset missing"))
		return
	}
	c := cursor{Name: name, Topic: body.Topic, Offset: *body.Offset, OwnerUID: uint32(os.Getuid())}
	s.mu.Lock()
	if end := s.withLag(c).End; c.Offset > end {
		s.mu.Unlock()
		fail(w, errorf(400, "bad_request", "offset %d is beyond the end of topic %q on this node (its next offset is %d)", c.Offset, c.Topic, end))
		return
	}
	s.cursors[name] = c
	c = s.withLag(c)
	s.mu.Unlock()
	writeJSON(w, c)
}

func (s *Server) listCursors(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := make([]cursor, 0, len(s.cursors))
	for _, c := range s.cursors {
		out = append(out, s.withLag(c))
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, map[string]any{"cursors": out})
}

func (s *Server) deleteCursor(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	c, ok := s.cursors[name]
	delete(s.cursors, name)
	c = s.withLag(c)
	s.mu.Unlock()
	if !ok {
		fail(w, errorf(404, "not_found", "no cursor %q", name))
		return
	}
	writeJSON(w, c)
}

func (s *Server) getCursor(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	c, ok := s.cursors[name]
	c = s.withLag(c)
	s.mu.Unlock()
	if !ok {
		fail(w, errorf(404, "not_found", "no cursor %q", name))
		return
	}
	writeJSON(w, c)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	records, keys := 0, 0
	for _, t := range s.topics {
		records += len(t.msgs)
		keys += len(t.live)
	}
	s.mu.Unlock()
	writeJSON(w, map[string]any{
		"node":           map[string]any{"name": "clienttest", "origin": fmt.Sprintf("%016x", s.origin), "version": "test"},
		"uptime_seconds": time.Since(s.started).Seconds(),
		"flush":          "async",
		"store": map[string]any{
			"segments": 1, "mapped_segments": 1, "log_bytes": 64 << 20, "write_pos": records * 64,
			"flushed_pos": records * 64, "oldest_pos": 0, "records": records, "keys": keys,
		},
		"cluster": map[string]any{"members": 1}, // a field the client does not know
	})
}

func (s *Server) probe(w http.ResponseWriter, state *error) {
	s.mu.Lock()
	err := *state
	s.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}
