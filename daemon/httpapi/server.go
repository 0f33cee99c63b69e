package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// Limits of the list routes and of small bodies.
const (
	defaultKeysLimit = 1000
	maxKeysLimit     = 10000
	maxCursorBody    = 64 << 10
	MaxHeaderBytes   = 64 << 10 // the http.Server's MaxHeaderBytes

	// streamFlushBytes is how much a subscription stream buffers before it
	// flushes while messages are waiting; an idle stream flushes each one.
	streamFlushBytes = 32 << 10

	// errorWriteGrace is how long an error answer may take to write once the
	// request's own deadline has passed: a body that stalls past
	// --read-timeout is answered 408 even when --write-timeout is as long.
	errorWriteGrace = 2 * time.Second
)

// Server is the local API's HTTP handler: its routes, each checked for
// its role, the handlers, and their errors. New makes it; the daemon
// serves it on its Unix socket (with access.ConnContext and
// Limits.ConnState as the http.Server's hooks).
type Server struct {
	cfg      Config
	node     Node
	guard    *access.Guard
	limits   *access.Limits
	bodies   *access.Budget
	log      *zap.Logger
	m        metrics
	members  memberCounts
	mux      http.Handler
	handlers gate
	// getLatency is the get route's latency histogram, for the fast lane.
	getLatency prometheus.Observer
}

// New makes the local API's handler of cfg. Its metrics are registered
// on cfg.Registry.
func New(cfg Config) *Server {
	a := &Server{cfg: cfg, node: cfg.Node, guard: cfg.Guard, limits: cfg.Limits, bodies: cfg.Bodies, log: cfg.Logger}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	a.m = newMetrics(cfg.Registry)
	a.getLatency = a.m.latency.WithLabelValues("get")
	a.mux = newMux(a.routes(), a.serve, a.fail)
	return a
}

// ServeHTTP routes a request (see newMux): 404 route_not_found when no
// path matches, 405 method_not_allowed (with Allow) when the path matches
// under other methods. GET routes also answer HEAD.
func (a *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !a.handlers.enter() {
		a.fail(w, r, wire.Errorf(wire.CodeUnavailable, "the daemon is shutting down"))
		return
	}
	defer a.handlers.leave()
	a.mux.ServeHTTP(w, r)
}

// serve runs a matched route: a spare connection only for health, the
// caller's role, the handler; the body's memory is given back after it.
func (a *Server) serve(w http.ResponseWriter, r *http.Request, rt *route, p params) {
	if !a.admitRoute(w, r, rt) {
		return
	}
	if a.failed(w, r, a.guard.Authorize(access.CallerFrom(r.Context()), rt.role)) {
		return
	}
	defer a.bodies.ReleaseHeld(access.ConnFrom(r.Context()))
	start := time.Now()
	rt.handler(w, r, p)
	if !rt.stream {
		a.m.latency.WithLabelValues(rt.name).Observe(time.Since(start).Seconds())
	}
}

// Drain admits no more requests (they are answered unavailable) and
// returns a channel closed once no handler is left.
func (a *Server) Drain() <-chan struct{} { return a.handlers.closeAndWait() }

// Handlers is how many requests are being handled now.
func (a *Server) Handlers() int { return a.handlers.count() }

// fail answers with an error object.
// failed answers e when it is an error and reports whether it did, so that
// each check of a handler's preamble is one if.
func (a *Server) failed(w http.ResponseWriter, r *http.Request, e *wire.Error) bool {
	if e == nil {
		return false
	}
	a.fail(w, r, e)
	return true
}

func (a *Server) fail(w http.ResponseWriter, r *http.Request, e *wire.Error) {
	status := a.noteFailure(access.CallerFrom(r.Context()), r.Method, r.URL.Path, e)
	h := w.Header()
	for k := range h {
		if strings.HasPrefix(k, "Cachecast-") {
			h.Del(k)
		}
	}
	if e.Code == wire.CodeBusy || e.Code == wire.CodeCatchingUp {
		h.Set("Retry-After", "1")
	}
	writeJSONBytes(w, status, errorBody(e))
}

// noteFailure counts the error answer e to a request of c in the metrics
// and logs it, and returns its status.
func (a *Server) noteFailure(c access.Caller, method, path string, e *wire.Error) int {
	status := wire.HTTPStatus(e.Code)
	a.m.errors.WithLabelValues(e.Code).Inc()
	lvl := zapcore.DebugLevel
	if status >= 500 && e.Code != wire.CodeUnavailable && e.Code != wire.CodeCatchingUp {
		// 503 is a state (starting, catching up, stopping, unhealthy) that health
		// probes ask about many times a second; it is logged where it
		// starts, not per request.
		lvl = zapcore.ErrorLevel
	}
	if ce := a.log.Check(lvl, "request failed"); ce != nil {
		ce.Write(append(c.Fields(), zap.String("method", method), zap.String("path", path),
			zap.String("code", e.Code), zap.String("message", e.Message))...)
	}
	return status
}

// errorBody is the body of the error answer e.
func errorBody(e *wire.Error) []byte {
	return append(wire.AppendError(make([]byte, 0, 64+len(e.Message)), e), '\n')
}

func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (a *Server) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		a.fail(w, r, wire.Errorf(wire.CodeInternal, "encoding the answer: %v", err))
		return
	}
	writeJSONBytes(w, http.StatusOK, append(b, '\n'))
}

// readBody reads the whole body, at most limit bytes (tooLarge names the
// error code past it, and flag the flag that sets the limit: "" for a
// fixed one), counted in the bodies' memory budget until the
// request is answered. A body that ends before its Content-Length is
// bad_request, one that stalls past --read-timeout is timeout.
func (a *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64, tooLarge, what, flag string) ([]byte, *wire.Error) {
	if e := checkContentEncoding(r); e != nil {
		return nil, e
	}
	if r.ContentLength > limit {
		return nil, wire.Errorf(tooLarge, "%s of %d bytes exceeds %s", what, r.ContentLength, limitName(flag, limit))
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	var (
		b   []byte
		err error
	)
	if r.ContentLength >= 0 {
		if e := a.bodies.Hold(access.ConnFrom(r.Context()), r.ContentLength); e != nil {
			closeAfter(w) // rather than wait for the body to discard it
			return nil, e
		}
		b = make([]byte, r.ContentLength)
		var n int
		n, err = io.ReadFull(body, b)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, wire.Errorf(wire.CodeBadRequest, "body cut short: got %d of the %d bytes of Content-Length", n, r.ContentLength)
		}
	} else {
		b, err = a.bodies.ReadAll(access.ConnFrom(r.Context()), body, limit)
	}
	if err == nil {
		return b, nil
	}
	var (
		mbe *http.MaxBytesError
		ne  net.Error
		ae  *wire.Error
	)
	switch {
	case errors.As(err, &ae):
		closeAfter(w)
		return nil, ae
	case errors.As(err, &mbe):
		return nil, wire.Errorf(tooLarge, "%s exceeds %s", what, limitName(flag, limit))
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		answerLate(w)
		return nil, wire.Errorf(wire.CodeTimeout, "the body did not arrive within --read-timeout (%v)", a.cfg.ReadTimeout)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, wire.Errorf(wire.CodeBadRequest, "body cut short: %v", err)
	}
	return nil, wire.Errorf(wire.CodeBadRequest, "reading the body: %v", err)
}

// checkContentEncoding refuses a body sent with a Content-Encoding other
// than identity (gzip, say): stored as it came it would be another value,
// and decoding it would let a small body grow past every size limit.
func checkContentEncoding(r *http.Request) *wire.Error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for enc := range strings.SplitSeq(v, ",") {
			if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
				return wire.Errorf(wire.CodeUnsupportedEncoding, "Content-Encoding %q: the daemon takes bodies as they are (identity) only; send the body uncompressed", enc)
			}
		}
	}
	return nil
}

// limitName names a size limit in an error: its flag and value, or that
// it is fixed.
func limitName(flag string, limit int64) string {
	if flag == "" {
		return "the fixed limit of " + wire.FormatSize(limit) + " of this route (no flag sets it)"
	}
	return flag + " (" + wire.FormatSize(limit) + ")"
}

// publish publishes msgs as the request's caller and answers the
// results: one result object (PUT, DELETE) or {"results":[...]} (POST
// messages, batch).
func (a *Server) publish(w http.ResponseWriter, r *http.Request, msgs []record.Message, batch bool) {
	results, status, err := a.node.PublishAs(r.Context(), msgs, access.CallerFrom(r.Context()))
	if err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	sc := answers.Get().(*answerScratch)
	defer sc.put()
	sc.out = slices.Grow(sc.out[:0], len(msgs))
	for i := range msgs {
		st := results[i].Stamp
		sc.out = append(sc.out, wire.Published{Topic: msgs[i].Topic, Key: msgs[i].Key, Origin: st.Origin, Seq: st.Seq,
			HLC: st.HLC, Millis: record.HLCMillis(st.HLC), Status: status})
	}
	sc.b = wire.AppendResults(slices.Grow(sc.b[:0], 64+len(msgs)*160), sc.out, batch)
	sc.b = append(sc.b, '\n')
	writeJSONBytes(w, http.StatusOK, sc.b) // Write copies it: sc is free after
}

// answerScratch is the memory a publish's answer is made in, reused
// through answers: a batch of a thousand messages would allocate some
// 250 KB for its answer, most of the garbage it leaves.
type answerScratch struct {
	out []wire.Published
	b   []byte
}

// answers holds the answerScratch not in use.
var answers = sync.Pool{New: func() any { return new(answerScratch) }}

// maxKeptAnswer bounds the answer memory kept for reuse: one batch of
// 10,000 messages' worth; a larger answer's memory is left to the GC.
const maxKeptAnswer = 10000 * 160

// put gives sc back to answers, without references to the topics and
// keys it held.
func (sc *answerScratch) put() {
	if cap(sc.b) > maxKeptAnswer || cap(sc.out) > maxKeptAnswer/160 {
		return
	}
	clear(sc.out)
	answers.Put(sc)
}

// hlcTime is an HLC's wall-clock part as the wire writes it.
func hlcTime(h uint64) string {
	return string(wire.AppendUnixMilli(make([]byte, 0, len(wire.TimeLayout)), record.HLCMillis(h)))
}

func (a *Server) putKey(w http.ResponseWriter, r *http.Request, p params) {
	tags := r.Header.Values("Cachecast-Tag")
	if len(tags) > 1 {
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "Cachecast-Tag: given %d times; a message has one tag", len(tags)))
		return
	}
	tag := r.Header.Get("Cachecast-Tag")
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckKey(p.key), wire.CheckTag(tag))) {
		return
	}
	value, e := a.readBody(w, r, a.cfg.MaxValueSize, wire.CodeValueTooLarge, "value", "--max-value-size")
	if a.failed(w, r, e) {
		return
	}
	msgs := []record.Message{{Topic: p.topic, Key: p.key, Tag: tag, Value: value}}
	if a.failed(w, r, a.applyTimes(r, msgs)) {
		return
	}
	a.publish(w, r, msgs, false)
}

func (a *Server) deleteKey(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckKey(p.key))) {
		return
	}
	msgs := []record.Message{{Topic: p.topic, Key: p.key, Delete: true}}
	if a.failed(w, r, a.applyTimes(r, msgs)) { // a scheduled delete
		return
	}
	a.publish(w, r, msgs, false)
}

// entry is what a GET of topic/key reads: the key's entry, or the error
// that answers the GET (a bad name, catching up, no such key). getKey
// and the fast lane's appendValue answer from it. The value may be read
// into buf (Node.EntryInto), which it returns for the next read.
func (a *Server) entry(buf []byte, topic, key string) (view.Entry, []byte, *wire.Error) {
	if e := firstError(wire.CheckName("topic", topic), wire.CheckKey(key)); e != nil {
		return view.Entry{}, buf, e
	}
	if e := a.catchingUp(); e != nil {
		return view.Entry{}, buf, e
	}
	e, buf, ok := a.node.EntryInto(buf, topic, key)
	if !ok {
		return view.Entry{}, buf, wire.Errorf(wire.CodeNotFound, "no key %q in topic %q", key, topic)
	}
	return e, buf, nil
}

func (a *Server) getKey(w http.ResponseWriter, r *http.Request, p params) {
	e, _, we := a.entry(nil, p.topic, p.key)
	if a.failed(w, r, we) {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(e.Value)))
	st := e.Stamp.Shown()
	h.Set("Cachecast-Origin", wire.FormatOrigin(st.Origin))
	h.Set("Cachecast-Seq", strconv.FormatUint(st.Seq, 10))
	h.Set("Cachecast-Hlc", strconv.FormatUint(st.HLC, 10))
	h.Set("Cachecast-Time", hlcTime(st.HLC))
	h.Set("Cachecast-Tag", e.Tag)
	setTimeHeaders(h, e)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(e.Value)
	}
}

// ndjsonTypes are the media types that mark a body as a batch.
var ndjsonTypes = []string{"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}

func (a *Server) postMessages(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, wire.CheckName("topic", p.topic)) {
		return
	}
	ndjson := false
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "Content-Type %q: %v", ct, err))
			return
		}
		ndjson = slices.Contains(ndjsonTypes, mt)
	}
	body, e := a.readBody(w, r, a.cfg.MaxBodySize, wire.CodeBodyTooLarge, "body", "--max-body-size")
	if a.failed(w, r, e) {
		return
	}
	msgs, e := decodeMessages(p.topic, body, ndjson, a.cfg.MaxValueSize, a.now())
	if e == nil {
		e = a.applyTimes(r, msgs)
	}
	if e != nil {
		a.fail(w, r, e)
		return
	}
	a.publish(w, r, msgs, true)
}

// query parses the query string strictly: a malformed one is bad_request
// rather than silently dropped.
func query(r *http.Request) (url.Values, *wire.Error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "query string: %v", err)
	}
	return q, nil
}

// listing is the preamble of a paged listing (keys, pending records,
// dead letters): names, the check of its route's names, then its query
// and limit (listQuery). ok is false when it answered an error.
func (a *Server) listing(w http.ResponseWriter, r *http.Request, names *wire.Error) (q url.Values, limit int, ok bool) {
	if a.failed(w, r, names) {
		return nil, 0, false
	}
	q, limit, e := listQuery(r)
	if a.failed(w, r, e) {
		return nil, 0, false
	}
	return q, limit, true
}

// listQuery reads the query of a list route and its limit=: 1 to
// maxKeysLimit, default defaultKeysLimit.
func listQuery(r *http.Request) (url.Values, int, *wire.Error) {
	q, e := query(r)
	if e != nil {
		return nil, 0, e
	}
	n, e := boundedInt(q.Get("limit"), "limit", defaultKeysLimit, maxKeysLimit)
	if e != nil {
		return nil, 0, e
	}
	return q, n, nil
}

// walkBounds are the defaults and bounds of a walk over a topic that
// answers at most ?limit= results after looking at most at ?scan= entries.
type walkBounds struct {
	limit, maxLimit, scan, maxScan int
}

// read reads ?limit= and ?scan= of r within b.
func (b walkBounds) read(r *http.Request) (limit, scan int, e *wire.Error) {
	q, e := query(r)
	if e != nil {
		return 0, 0, e
	}
	if limit, e = boundedInt(q.Get("limit"), "limit", b.limit, b.maxLimit); e != nil {
		return 0, 0, e
	}
	scan, e = boundedInt(q.Get("scan"), "scan", b.scan, b.maxScan)
	return limit, scan, e
}

// boundedInt reads a query parameter of 1 to max, def when absent.
func boundedInt(s, name string, def, max int) (int, *wire.Error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: want 1 to %d, got %q", name, max, s)
	}
	return n, nil
}

func (a *Server) listKeys(w http.ResponseWriter, r *http.Request, p params) {
	q, limit, ok := a.listing(w, r, wire.CheckName("topic", p.topic))
	if !ok {
		return
	}
	prefix, after := q.Get("prefix"), q.Get("after")
	if len(prefix) > wire.MaxAPIKeyLen || len(after) > wire.MaxAPIKeyLen {
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "prefix and after: at most %d bytes", wire.MaxAPIKeyLen))
		return
	}
	if a.failed(w, r, a.catchingUp()) {
		return
	}
	keys := a.node.Keys(p.topic, prefix, after, limit+1)
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = keys[limit-1]
	}
	if keys == nil {
		keys = []string{}
	}
	a.writeJSON(w, r, struct {
		Keys []string `json:"keys"`
		Next string   `json:"next"`
	}{keys, next})
}

// topics lists the topics; the daemon's internal ones ('$', which a
// user's topic cannot hold, and which no topic route reads) only with
// internal=1.
func (a *Server) topics(w http.ResponseWriter, r *http.Request, _ params) {
	type topic struct {
		Name     string `json:"name"`
		Keys     int    `json:"keys"`
		Messages uint64 `json:"messages"`
	}
	q, e := query(r)
	if a.failed(w, r, e) {
		return
	}
	internal := false
	if s := q.Get("internal"); s != "" {
		var err error
		if internal, err = strconv.ParseBool(s); err != nil {
			a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "internal: want 1 or 0, got %q", s))
			return
		}
	}
	out := []topic{}
	for _, t := range a.node.Topics() {
		if internal || !strings.HasPrefix(t.Name, "$") {
			out = append(out, topic{t.Name, t.Keys, t.Messages})
		}
	}
	a.writeJSON(w, r, struct {
		Topics []topic `json:"topics"`
	}{out})
}

// subscribe streams a topic as NDJSON. The reader is made before the
// headers go out, so a subscriber from latest misses nothing published
// after it has the headers. Backpressure is the connection's: a slow
// reader blocks its own handler in Write, and the store's reader simply
// stays behind; nothing is dropped and no one else waits.
func (a *Server) subscribe(w http.ResponseWriter, r *http.Request, p params) {
	release, e := a.streamSlot(r)
	if a.failed(w, r, e) {
		return
	}
	defer release()
	if a.failed(w, r, wire.CheckName("topic", p.topic)) {
		return
	}
	q, e := query(r)
	if a.failed(w, r, e) {
		return
	}
	switch mode := q.Get("mode"); mode {
	case "", "broadcasting":
	case "clustering":
		if a.failed(w, r, a.guard.Authorize(access.CallerFrom(r.Context()), access.RoleConsume)) {
			return
		}
		a.subscribeGroup(w, r, p, q)
		return
	default:
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "mode: want \"broadcasting\" or \"clustering\", got %q", mode))
		return
	}
	o, e := a.subscribeOptions(r, q)
	if a.failed(w, r, e) {
		return
	}
	start, e := a.startOf(p.topic, q.Get("from"), o.name)
	if a.failed(w, r, e) {
		return
	}
	reader, err := a.node.NewTopicReader(p.topic, start, o.tags)
	if err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	defer reader.Close()
	if o.auto {
		// The cursor is taken (made, or checked as the caller's) where the
		// stream starts, so that a refusal is a status, not a stream's end.
		if err := a.node.SetCursor(r.Context(), o.name, p.topic, reader.Offset()); err != nil {
			a.fail(w, r, command.StoreError(err))
			return
		}
	}

	st, ok := a.openStream(w, r)
	if !ok {
		return
	}
	defer st.close()
	a.log.Debug("subscribe", append(access.CallerFrom(r.Context()).Fields(),
		zap.String("topic", p.topic), zap.String("cursor", o.name), zap.Uint64("offset", reader.Offset()))...)
	a.streamTopic(w, r, st, reader, p.topic, o)
}

// subOptions are a broadcasting subscription's options, checked.
type subOptions struct {
	name   string // the durable cursor, if any
	auto   bool   // ack=auto: the daemon moves the cursor as it sends
	tags   []string
	events streamEvents
	// linger: after a write, the stream waits this long before the next,
	// gathering what arrives meanwhile into one write (the operator
	// console's tail: a wake and a write a message cost the node for
	// every open tail).
	linger time.Duration
}

// subscribeOptions checks a broadcasting subscription's name (or group),
// ack, tags and events.
func (a *Server) subscribeOptions(r *http.Request, q url.Values) (subOptions, *wire.Error) {
	o := subOptions{name: q.Get("name")}
	if g := q.Get("group"); g != "" {
		// In broadcasting a group is a cursor: each node keeps its own.
		if o.name != "" && o.name != g {
			return o, wire.Errorf(wire.CodeBadRequest, "name %q and group %q: in broadcasting mode group is another word for name; give one", o.name, g)
		}
		o.name = g
	}
	if o.name != "" {
		if e := wire.CheckName("cursor name", o.name); e != nil {
			return o, e
		}
	}
	switch ack := q.Get("ack"); ack {
	case "", "client":
	case "auto":
		if o.name == "" {
			return o, wire.Errorf(wire.CodeBadRequest, "ack=auto needs a cursor: name=<cursor>")
		}
		if e := a.guard.Authorize(access.CallerFrom(r.Context()), access.RoleConsume); e != nil {
			return o, e
		}
		o.auto = true
	default:
		return o, wire.Errorf(wire.CodeBadRequest, "ack: want \"auto\" or \"client\", got %q", ack)
	}
	var e *wire.Error
	if o.tags, e = parseTags(q.Get("tags")); e != nil {
		return o, e
	}
	if o.events, e = parseEvents(q.Get("events")); e != nil {
		return o, e
	}
	if l := q.Get("linger"); l != "" {
		d, err := time.ParseDuration(l)
		if err != nil || d < 0 || d > maxLinger {
			return o, wire.Errorf(wire.CodeBadRequest, "linger: want a duration from 0 to %s, got %q", maxLinger, l)
		}
		o.linger = d
	}
	return o, nil
}

// maxLinger bounds a subscription's ?linger=.
const maxLinger = time.Second

// streamTopic writes the topic's messages from reader to the open stream
// st until the client goes, the daemon stops or the reader fails: as many
// as are waiting at once, up to streamFlushBytes, then a flush.
func (a *Server) streamTopic(w http.ResponseWriter, r *http.Request, st stream, reader *store.TopicReader, topic string, o subOptions) {
	ctx, rc, sse := st.ctx, st.rc, st.sse
	frame := func(b []byte, d store.Delivery) []byte {
		wd := delivery(d.Offset, d.Record.Topic(), d.Record)
		if !sse {
			return append(wire.AppendDelivery(b, &wd), '\n')
		}
		b = append(b, "id: "...)
		b = strconv.AppendUint(b, d.Offset, 10)
		b = append(b, "\ndata: "...)
		return append(wire.AppendDelivery(b, &wd), "\n\n"...)
	}

	// polled is already done: Next with it returns a waiting message or
	// the context's error at once, so the stream can gather what is
	// waiting and flush once.
	polled, cancelPolled := context.WithCancel(context.Background())
	cancelPolled()
	buf := make([]byte, 0, streamFlushBytes+4096)
	// With events=..., the time events go out between the messages, each
	// writer holding mu.
	var mu sync.Mutex
	stopEvents := a.startEvents(ctx, w, rc, topic, o.events, sse, &mu)
	defer stopEvents()
	for {
		d, err := reader.Next(ctx)
		if err != nil {
			stopEvents()
			a.endStream(w, rc, ctx, err, topic, sse)
			return
		}
		next := d.Offset + 1
		buf = frame(buf[:0], d)
		for len(buf) < streamFlushBytes {
			d, err := reader.Next(polled)
			if err != nil {
				break
			}
			next = d.Offset + 1
			buf = frame(buf, d)
		}
		mu.Lock()
		_, err = w.Write(buf)
		if err == nil {
			err = rc.Flush()
		}
		mu.Unlock()
		if err != nil {
			return
		}
		if o.linger > 0 && len(buf) < streamFlushBytes {
			// Caught up: linger before looking again.
			t := time.NewTimer(o.linger)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if o.auto {
			if err := a.node.SetCursor(r.Context(), o.name, topic, next); err != nil {
				stopEvents()
				a.endStream(w, rc, ctx, err, topic, sse)
				return
			}
		}
	}
}

// startEvents starts the writer of a stream's time events (events=...),
// if it asked for any, and returns what stops it: the event writer is gone
// before the handler writes its last line or returns. Calling it again is
// harmless.
func (a *Server) startEvents(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, topic string, events streamEvents, sse bool, mu *sync.Mutex) (stop func()) {
	if !events.expired && !events.effective {
		return func() {}
	}
	write := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	evCtx, cancel := context.WithCancel(ctx)
	ended := a.followEvents(evCtx, cancel, topic, events, sse, mu, write)
	return func() { cancel(); <-ended }
}

// stream is an open subscription response.
type stream struct {
	ctx   context.Context // ends with the client or at shutdown
	rc    *http.ResponseController
	sse   bool
	close func()
}

// openStream starts a subscription's response: server-sent events when the
// client asks for them (a browser's EventSource does), NDJSON otherwise,
// with the server's timeouts lifted and the daemon's shutdown ending it.
// ok is false when the client is already gone.
func (a *Server) openStream(w http.ResponseWriter, r *http.Request) (st stream, ok bool) {
	// A stream lives longer than any timeout of the server: clear the
	// deadlines (a passed read deadline would end the request's context).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})

	ctx, cancel := context.WithCancel(r.Context())
	// Shutdown ends the stream: a reading client gets the stream's proper
	// end (the last chunk), one blocked writing to a client that does not
	// read is cut off a second later.
	stop := context.AfterFunc(a.cfg.Stop, func() {
		cancel()
		_ = rc.SetWriteDeadline(time.Now().Add(time.Second))
	})
	a.m.subscribers.Inc()
	st = stream{ctx: ctx, rc: rc, sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream"),
		close: func() { a.m.subscribers.Dec(); stop(); cancel() }}

	h := w.Header()
	if st.sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		st.close()
		return stream{}, false
	}
	return st, true
}

// endStream ends a subscription: quietly when the client left or the
// daemon is stopping, with a last {"error":...} line otherwise (the status
// line is long gone).
func (a *Server) endStream(w http.ResponseWriter, rc *http.ResponseController, ctx context.Context, err error, topic string, sse bool) {
	if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
		return
	}
	e := command.StoreError(err)
	a.m.errors.WithLabelValues(e.Code).Inc()
	a.log.Error("subscription ended", zap.String("topic", topic), zap.Error(err))
	var b []byte
	if sse {
		b = append(b, "event: error\ndata: "...)
	}
	b = append(wire.AppendError(b, e), '\n')
	if sse {
		b = append(b, '\n')
	}
	_, _ = w.Write(b)
	_ = rc.Flush()
}

// startOf reads from=: earliest, latest, an offset (at most the topic's
// end), or an RFC 3339 time.
// Without it, a named cursor that exists resumes where it stands, and
// anything else starts at latest.
func (a *Server) startOf(topic, from, name string) (store.Start, *wire.Error) {
	switch {
	case from == "" && name != "":
		c, ok := a.node.Cursor(name)
		if !ok {
			return store.Start{From: store.FromLatest}, nil
		}
		if c.Topic != topic {
			return store.Start{}, wire.Errorf(wire.CodeBadRequest, "cursor %q reads topic %q, not %q", name, c.Topic, topic)
		}
		return store.Start{From: store.FromOffset, Offset: c.Offset}, nil
	case from == "" || from == "latest":
		return store.Start{From: store.FromLatest}, nil
	case from == "earliest":
		return store.Start{From: store.FromEarliest}, nil
	}
	if n, err := strconv.ParseUint(from, 10, 64); err == nil {
		// An offset past the end would wait, silently, for messages that
		// may never come (a position from another node, or from before the
		// data directory was wiped). The end itself is the next message.
		if end := a.node.TopicEnd(topic); n > end {
			return store.Start{}, wire.Errorf(wire.CodeBadRequest, "from=%d is beyond the end of topic %q on this node (its next offset is %d); from=latest waits for new messages", n, topic, end)
		}
		return store.Start{From: store.FromOffset, Offset: n}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, from); err == nil {
		return store.Start{From: store.FromTime, Time: t}, nil
	}
	return store.Start{}, wire.Errorf(wire.CodeBadRequest, "from: want earliest, latest, an offset or an RFC 3339 time, got %q", from)
}

// parseTags reads tags=a||b.
func parseTags(s string) ([]string, *wire.Error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tags []string
	for t := range strings.SplitSeq(s, "||") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, wire.Errorf(wire.CodeInvalidName, "tags: an empty tag in %q (separate tags with ||)", s)
		}
		if e := wire.CheckTag(t); e != nil {
			return nil, e
		}
		tags = append(tags, t)
	}
	return tags, nil
}

// cursorOf looks up the cursor a route names, answering the refusal
// itself when the name is invalid or there is no such cursor.
func (a *Server) cursorOf(w http.ResponseWriter, r *http.Request, name string) (store.CursorInfo, bool) {
	if e := wire.CheckName("cursor name", name); e != nil {
		a.fail(w, r, e)
		return store.CursorInfo{}, false
	}
	c, ok := a.node.Cursor(name)
	if !ok {
		a.fail(w, r, wire.Errorf(wire.CodeNotFound, "no cursor %q", name))
	}
	return c, ok
}

func (a *Server) getCursor(w http.ResponseWriter, r *http.Request, p params) {
	if c, ok := a.cursorOf(w, r, p.name); ok {
		a.writeJSON(w, r, newCursorAnswer(c))
	}
}

// listCursors answers GET /v1/cursors: every durable cursor of the node
// (at most --max-cursors), sorted by name.
func (a *Server) listCursors(w http.ResponseWriter, r *http.Request, _ params) {
	cs := a.node.Cursors()
	out := make([]wire.Cursor, len(cs))
	for i, c := range cs {
		out[i] = newCursorAnswer(c)
	}
	a.writeJSON(w, r, struct {
		Cursors []wire.Cursor `json:"cursors"`
	}{out})
}

// deleteCursor answers DELETE /v1/cursors/{name}: the cursor's owner or an
// admin may delete it; retention then no longer waits for it.
func (a *Server) deleteCursor(w http.ResponseWriter, r *http.Request, p params) {
	c, ok := a.cursorOf(w, r, p.name)
	if !ok {
		return
	}
	caller := access.CallerFrom(r.Context())
	if err := a.node.DeleteCursor(r.Context(), p.name); err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	a.log.Info("cursor deleted", append(caller.Fields(), zap.String("cursor", p.name), zap.String("topic", c.Topic))...)
	a.writeJSON(w, r, newCursorAnswer(c))
}

func (a *Server) setCursor(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, wire.CheckName("cursor name", p.name)) {
		return
	}
	body, e := a.readBody(w, r, maxCursorBody, wire.CodeBodyTooLarge, "body", "")
	if a.failed(w, r, e) {
		return
	}
	var req cursorRequest
	if a.failed(w, r, decodeStrict(body, &req, "cursor object")) {
		return
	}
	if a.failed(w, r, wire.CheckName("topic", req.Topic)) {
		return
	}
	if req.Offset == nil {
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, `"offset" is required (the offset of the next message to read)`))
		return
	}
	// Past the end its subscriber would wait, silently, for messages
	// that may never come, as from= past the end would.
	if end := a.node.TopicEnd(req.Topic); *req.Offset > end {
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "offset %d is beyond the end of topic %q on this node (its next offset is %d)", *req.Offset, req.Topic, end))
		return
	}
	if err := a.node.SetCursor(r.Context(), p.name, req.Topic, *req.Offset); err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	c, _ := a.node.Cursor(p.name)
	a.writeJSON(w, r, newCursorAnswer(c))
}

func (a *Server) status(w http.ResponseWriter, r *http.Request, _ params) {
	st := a.node.NodeStatus()
	a.writeJSON(w, r, &st)
}

// repairAccept answers POST /v1/repair/accept: the records lost to a
// damaged log are given up.
func (a *Server) repairAccept(w http.ResponseWriter, r *http.Request, _ params) {
	res, err := a.node.AcceptLost()
	if err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	a.writeJSON(w, r, &res)
}

// clusterForget answers POST /v1/cluster/forget/{name}[?fleet=true]: a
// member removed for good is forgotten.
func (a *Server) clusterForget(w http.ResponseWriter, r *http.Request, p params) {
	q, e := query(r)
	if a.failed(w, r, e) {
		return
	}
	fleet := false
	if s := q.Get("fleet"); s != "" {
		var err error
		if fleet, err = strconv.ParseBool(s); err != nil {
			a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "fleet: want true or false, got %q", s))
			return
		}
	}
	res, err := a.node.ForgetMember(r.Context(), p.name, fleet)
	if err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	a.log.Info("member forgotten", append(access.CallerFrom(r.Context()).Fields(), zap.String("member", p.name), zap.Bool("fleet", fleet))...)
	a.writeJSON(w, r, &res)
}

// backup answers GET /v1/backup: the node's backup file, streamed as it
// is written (a view of any size), with the server's deadlines lifted. A failure on the way cuts the file short, which the reader's
// checksum refuses.
func (a *Server) backup(w http.ResponseWriter, r *http.Request, _ params) {
	// As a stream's: a passed read deadline would end the request.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/octet-stream")
	if err := a.node.Backup(w); err != nil {
		a.log.Warn("backup cut short", zap.Error(err))
	}
}

// clusterStatus answers GET /v1/cluster: the members as this node sees
// them and how far each is behind each origin.
func (a *Server) clusterStatus(w http.ResponseWriter, r *http.Request, _ params) {
	st := a.node.Cluster()
	a.writeJSON(w, r, &st)
}

// verify answers GET /v1/verify: whether every live node holds the same
// view.
func (a *Server) verify(w http.ResponseWriter, r *http.Request, _ params) {
	res := a.node.Verify(r.Context())
	a.writeJSON(w, r, &res)
}

func (a *Server) healthz(w http.ResponseWriter, r *http.Request, _ params) {
	if err := a.node.Healthy(); err != nil {
		a.fail(w, r, wire.Errorf(wire.CodeUnavailable, "%v", err))
		return
	}
	if err := a.node.DiskFull(); err != nil {
		a.fail(w, r, wire.Errorf(wire.CodeDiskFull, "writes are refused until space is freed (reads go on): %v", err))
		return
	}
	writeJSONBytes(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// readyz is 200 once the store is recovered, the node has caught up with
// its peers and the daemon serves, until shutdown begins; 503
// catching_up with the progress before it caught up. A degraded node
// (told to join, alone) still serves, so it is still 200, with
// {"status":"degraded","reason":...}: the last node of a cluster whose
// others are gone must not be taken out of service.
func (a *Server) readyz(w http.ResponseWriter, r *http.Request, _ params) {
	if a.failed(w, r, a.catchingUp()) {
		return
	}
	if !a.node.Ready() {
		a.fail(w, r, wire.Errorf(wire.CodeUnavailable, "not ready: starting or shutting down"))
		return
	}
	if why := a.node.Degraded(); why != "" && a.node.Healthy() == nil && a.node.DiskFull() == nil {
		b, _ := json.Marshal(map[string]string{"status": "degraded", "reason": why})
		writeJSONBytes(w, http.StatusOK, append(b, '\n'))
		return
	}
	a.healthz(w, r, params{})
}

// catchingUp is the refusal of a read of the view in the node's state
// (command.State.Read): catching_up with the progress before the node
// has caught up with its peers, unavailable once it stopped serving for
// being away; nil when it serves.
func (a *Server) catchingUp() *wire.Error { return a.node.State().Read() }

func firstError(errs ...*wire.Error) *wire.Error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// answerLate lets an error answer out after the request's deadline has
// passed (a stalled body), and closes the connection after it.
func answerLate(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(errorWriteGrace))
	w.Header().Set("Connection", "close")
}

// closeAfter closes the connection after the answer: the request's body
// was not read, and net/http would otherwise wait for the client to send
// it, to discard it (up to 256 KiB; of a chunked body, even after a
// Connection: close). The passed read deadline makes that wait end at
// once; the answer is written under the write deadline.
func closeAfter(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// admitRoute refuses what a spare connection may not ask (anything but
// health), and makes a spare connection close after its answer.
func (a *Server) admitRoute(w http.ResponseWriter, r *http.Request, rt *route) bool {
	c := access.ConnFrom(r.Context())
	if c == nil || c.Spare() == nil {
		return true
	}
	w.Header().Set("Connection", "close")
	if rt.name == "healthz" || rt.name == "readyz" {
		return true
	}
	a.fail(w, r, c.Spare())
	return false
}

// streamSlot takes a stream's place for a subscription; release gives it
// back as a connection.
func (a *Server) streamSlot(r *http.Request) (release func(), e *wire.Error) {
	c := access.ConnFrom(r.Context())
	if c == nil {
		return func() {}, nil
	}
	if e := a.limits.StartStream(c); e != nil {
		return nil, e
	}
	return func() { a.limits.EndStream(c) }, nil
}

// cursorRequest is the body of POST /v1/cursors/{name}.
type cursorRequest struct {
	Topic  string  `json:"topic"`
	Offset *uint64 `json:"offset"`
}

func newCursorAnswer(c store.CursorInfo) wire.Cursor {
	a := wire.Cursor{Name: c.Name, Topic: c.Topic, Offset: c.Offset, End: c.End, Lag: c.Lag()}
	if c.Owned {
		a.OwnerUID = &c.Owner
	}
	return a
}

// delivery is a record's message as a subscription line writes it; topic
// is the subscribed one (a consumer group's replayed message's record
// names the retry topic).
func delivery(offset uint64, topic []byte, r record.Record) wire.Delivery {
	d := wire.Delivery{Offset: offset, Topic: topic, Key: r.Key(), Tag: r.Tag(), Value: r.Value(),
		Delete: r.Kind() == record.KindTombstone, Origin: r.Origin(), Seq: r.Seq(), HLC: r.HLC(), Time: record.HLCTime(r.HLC()),
		ExpiresAt: int64(r.ExpiresAt()), EffectiveAt: int64(r.EffectiveAt()), Cancel: r.Kind() == record.KindCancel}
	switch r.Kind() {
	case record.KindExpiry:
		d.Change = wire.ChangeExpiry
	case record.KindCounter:
		d.Change = wire.ChangeIncrement
	}
	if d.Change != wire.ChangeNone {
		v, absent := r.AppliesTo()
		d.Of = wire.Of{Origin: v.Origin, Seq: v.Seq, Absent: absent}
	}
	return d
}
