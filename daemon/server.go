package daemon

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
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// Limits of the list routes and of small bodies.
const (
	defaultKeysLimit = 1000
	maxKeysLimit     = 10000
	maxCursorBody    = 64 << 10
	maxHeaderBytes   = 64 << 10

	// streamFlushBytes is how much a subscription stream buffers before it
	// flushes while messages are waiting; an idle stream flushes each one.
	streamFlushBytes = 32 << 10
)

// params are the wildcards of a matched route, unescaped.
type params struct {
	topic, key, name string
}

// route is one method and path of the local API. A path segment "{x}"
// matches one escaped segment; "{key...}" matches the rest of the path,
// slashes included (so a key may hold a slash, escaped as %2F or not).
type route struct {
	name    string // the metrics label
	method  string
	path    []string
	handler func(w http.ResponseWriter, r *http.Request, p params)
	stream  bool // a subscription: no latency metric
	role    Role // what the caller needs to be served
}

// match reports whether the route's path matches segs and fills the
// wildcards; err is set when a wildcard's escaping is broken.
func (rt *route) match(segs []string) (p params, ok bool, err error) {
	for i, pat := range rt.path {
		if pat == "{key...}" {
			if i >= len(segs) {
				return p, false, nil
			}
			p.key, err = url.PathUnescape(strings.Join(segs[i:], "/"))
			return p, true, err
		}
		if i >= len(segs) {
			return p, false, nil
		}
		switch pat {
		case "{topic}":
			p.topic, err = url.PathUnescape(segs[i])
		case "{name}":
			p.name, err = url.PathUnescape(segs[i])
		default:
			if segs[i] != pat {
				return p, false, nil
			}
		}
		if err != nil {
			return p, true, err
		}
	}
	return p, len(segs) == len(rt.path), nil
}

// api is the local API's HTTP handler.
type api struct {
	d      *Daemon
	routes []route
}

func (d *Daemon) newServer() *http.Server {
	a := &api{d: d}
	seg := func(p string) []string { return strings.Split(strings.TrimPrefix(p, "/"), "/") }
	add := func(name, method, path string, role Role, h func(http.ResponseWriter, *http.Request, params)) *route {
		a.routes = append(a.routes, route{name: name, method: method, path: seg(path), handler: h, role: role})
		return &a.routes[len(a.routes)-1]
	}
	// The role of each route is the table of the package doc.
	add("healthz", http.MethodGet, "/healthz", RoleNone, a.healthz)
	add("readyz", http.MethodGet, "/readyz", RoleNone, a.readyz)
	add("status", http.MethodGet, "/v1/status", RoleRead, a.status)
	add("cluster", http.MethodGet, "/v1/cluster", RoleRead, a.clusterStatus)
	add("verify", http.MethodGet, "/v1/verify", RoleRead, a.verify)
	add("topics", http.MethodGet, "/v1/topics", RoleRead, a.topics)
	add("keys", http.MethodGet, "/v1/topics/{topic}/keys", RoleRead, a.listKeys)
	add("get", http.MethodGet, "/v1/topics/{topic}/keys/{key...}", RoleRead, a.getKey)
	add("put", http.MethodPut, "/v1/topics/{topic}/keys/{key...}", RolePublish, a.putKey)
	add("delete", http.MethodDelete, "/v1/topics/{topic}/keys/{key...}", RolePublish, a.deleteKey)
	add("messages", http.MethodPost, "/v1/topics/{topic}/messages", RolePublish, a.postMessages)
	// Read here; a subscription that moves a cursor or joins a group
	// needs consume, checked once the query is read.
	add("subscribe", http.MethodGet, "/v1/topics/{topic}/subscribe", RoleRead, a.subscribe).stream = true
	add("groups", http.MethodGet, "/v1/groups", RoleRead, a.groups)
	add("group_ack", http.MethodPost, "/v1/topics/{topic}/groups/{name}/ack", RoleConsume, a.groupAck)
	add("group_reset", http.MethodPost, "/v1/topics/{topic}/groups/{name}/reset", RoleAdmin, a.groupReset)
	add("dlq_list", http.MethodGet, "/v1/topics/{topic}/groups/{name}/dlq", RoleConsume, a.dlqList)
	add("dlq_replay", http.MethodPost, "/v1/topics/{topic}/groups/{name}/dlq/replay", RoleAdmin, a.dlqReplay)
	add("dlq_get", http.MethodGet, "/v1/topics/{topic}/groups/{name}/dlq/{key...}", RoleConsume, a.dlqGet)
	add("cursors", http.MethodGet, "/v1/cursors", RoleRead, a.listCursors)
	add("cursor_get", http.MethodGet, "/v1/cursors/{name}", RoleRead, a.getCursor)
	add("cursor_set", http.MethodPost, "/v1/cursors/{name}", RoleConsume, a.setCursor)
	add("cursor_delete", http.MethodDelete, "/v1/cursors/{name}", RoleConsume, a.deleteCursor)

	return &http.Server{
		Handler:           a,
		ReadHeaderTimeout: d.cfg.ReadHeaderTimeout,
		ReadTimeout:       d.cfg.ReadTimeout,
		WriteTimeout:      d.cfg.WriteTimeout,
		IdleTimeout:       d.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       connContext,
		ConnState:         d.limits.connState,
		ErrorLog:          zap.NewStdLog(d.log.Named("http")),
	}
}

// ServeHTTP routes a request: 404 route_not_found when no path matches,
// 405 method_not_allowed (with Allow) when the path matches under other
// methods. GET routes also answer HEAD.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !a.d.handlers.enter() {
		a.fail(w, r, errorf(CodeUnavailable, "the daemon is shutting down"))
		return
	}
	defer a.d.handlers.leave()

	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	var allow []string
	for i := range a.routes {
		rt := &a.routes[i]
		p, ok, err := rt.match(segs)
		if !ok {
			continue
		}
		if rt.method != r.Method && (rt.method != http.MethodGet || r.Method != http.MethodHead) {
			allow = append(allow, rt.method)
			if rt.method == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
			continue
		}
		if err != nil {
			a.fail(w, r, errorf(CodeInvalidName, "bad escaping in the path: %v", err))
			return
		}
		if !a.admitRoute(w, r, rt) {
			return
		}
		if e := a.d.authorize(callerFrom(r.Context()), rt.role); e != nil {
			a.fail(w, r, e)
			return
		}
		defer a.d.bodies.releaseHeld(connFrom(r.Context()))
		start := time.Now()
		rt.handler(w, r, p)
		if !rt.stream {
			a.d.m.latency.WithLabelValues(rt.name).Observe(time.Since(start).Seconds())
		}
		return
	}
	if len(allow) > 0 {
		slices.Sort(allow)
		e := errorf(CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", "))
		e.allow = strings.Join(allow, ", ")
		a.fail(w, r, e)
		return
	}
	a.fail(w, r, errorf(CodeRouteNotFound, "no route %s %s (see the cachecast API documentation)", r.Method, r.URL.Path))
}

// fail answers with an error object.
func (a *api) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	status := statusOf(e.Code)
	a.d.m.errors.WithLabelValues(e.Code).Inc()
	lvl := zapcore.DebugLevel
	if status >= 500 && e.Code != CodeUnavailable {
		// 503 is a state (starting, stopping, unhealthy) that health
		// probes ask about many times a second; it is logged where it
		// starts, not per request.
		lvl = zapcore.ErrorLevel
	}
	if ce := a.d.log.Check(lvl, "request failed"); ce != nil {
		ce.Write(append(callerFrom(r.Context()).fields(),
			zap.String("method", r.Method), zap.String("path", r.URL.Path),
			zap.String("code", e.Code), zap.String("message", e.Message))...)
	}
	h := w.Header()
	for k := range h {
		if strings.HasPrefix(k, "Cachecast-") {
			h.Del(k)
		}
	}
	if e.allow != "" {
		h.Set("Allow", e.allow)
	}
	if e.Code == CodeBusy {
		h.Set("Retry-After", "1")
	}
	b := []byte(`{"error":{"code":`)
	b = appendJSONString(b, e.Code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	b = append(b, "}}\n"...)
	writeJSONBytes(w, status, b)
}

func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (a *api) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		a.fail(w, r, errorf(CodeInternal, "encoding the answer: %v", err))
		return
	}
	writeJSONBytes(w, http.StatusOK, append(b, '\n'))
}

// readBody reads the whole body, at most limit bytes (tooLarge names the
// error code past it), counted in the bodies' memory budget until the
// request is answered. A body that ends before its Content-Length is
// bad_request, one that stalls past --read-timeout is timeout.
func (a *api) readBody(w http.ResponseWriter, r *http.Request, limit int64, tooLarge, what string) ([]byte, *apiError) {
	if e := checkContentEncoding(r); e != nil {
		return nil, e
	}
	if r.ContentLength > limit {
		return nil, errorf(tooLarge, "%s of %d bytes exceeds %s", what, r.ContentLength, limitName(tooLarge, limit))
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	var (
		b   []byte
		err error
	)
	if r.ContentLength >= 0 {
		if e := a.d.bodies.hold(connFrom(r.Context()), r.ContentLength); e != nil {
			closeAfter(w) // rather than wait for the body to discard it
			return nil, e
		}
		b = make([]byte, r.ContentLength)
		var n int
		n, err = io.ReadFull(body, b)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errorf(CodeBadRequest, "body cut short: got %d of the %d bytes of Content-Length", n, r.ContentLength)
		}
	} else {
		b, err = a.d.bodies.readAll(connFrom(r.Context()), body, limit)
	}
	if err == nil {
		return b, nil
	}
	var (
		mbe *http.MaxBytesError
		ne  net.Error
		ae  *apiError
	)
	switch {
	case errors.As(err, &ae):
		closeAfter(w)
		return nil, ae
	case errors.As(err, &mbe):
		return nil, errorf(tooLarge, "%s exceeds %s", what, limitName(tooLarge, limit))
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		answerLate(w)
		return nil, errorf(CodeTimeout, "the body did not arrive within --read-timeout (%v)", a.d.cfg.ReadTimeout)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, errorf(CodeBadRequest, "body cut short: %v", err)
	}
	return nil, errorf(CodeBadRequest, "reading the body: %v", err)
}

// checkContentEncoding refuses a body sent with a Content-Encoding other
// than identity (gzip, say): stored as it came it would be another value,
// and decoding it would let a small body grow past every size limit.
func checkContentEncoding(r *http.Request) *apiError {
	for _, v := range r.Header.Values("Content-Encoding") {
		for enc := range strings.SplitSeq(v, ",") {
			if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
				return errorf(CodeUnsupportedEncoding, "Content-Encoding %q: the daemon takes bodies as they are (identity) only; send the body uncompressed", enc)
			}
		}
	}
	return nil
}

func limitName(code string, limit int64) string {
	if code == CodeValueTooLarge {
		return "--max-value-size (" + formatSize(limit) + ")"
	}
	return "the limit of " + formatSize(limit) + " (--max-body-size)"
}

// writeResults answers a publish: one result object (PUT, DELETE) or
// {"results":[...]} (POST messages).
func writeResults(w http.ResponseWriter, results []PutResult, batch bool) {
	b := make([]byte, 0, 64+len(results)*160)
	if batch {
		b = append(b, `{"results":[`...)
	}
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = results[i].appendJSON(b)
	}
	if batch {
		b = append(b, "]}"...)
	}
	writeJSONBytes(w, http.StatusOK, append(b, '\n'))
}

func (a *api) putKey(w http.ResponseWriter, r *http.Request, p params) {
	tags := r.Header.Values("Cachecast-Tag")
	if len(tags) > 1 {
		a.fail(w, r, errorf(CodeBadRequest, "Cachecast-Tag: given %d times; a message has one tag", len(tags)))
		return
	}
	tag := r.Header.Get("Cachecast-Tag")
	if e := firstError(validTopic("topic", p.topic), validKey(p.key), validTag(tag)); e != nil {
		a.fail(w, r, e)
		return
	}
	value, e := a.readBody(w, r, a.d.cfg.MaxValueSize, CodeValueTooLarge, "value")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	msgs := []record.Message{{Topic: p.topic, Key: p.key, Tag: tag, Value: value}}
	results, err := a.d.publish(r.Context(), msgs, callerFrom(r.Context()))
	if err != nil {
		a.fail(w, r, storeError(err))
		return
	}
	writeResults(w, results, false)
}

func (a *api) deleteKey(w http.ResponseWriter, r *http.Request, p params) {
	if e := firstError(validTopic("topic", p.topic), validKey(p.key)); e != nil {
		a.fail(w, r, e)
		return
	}
	msgs := []record.Message{{Topic: p.topic, Key: p.key, Delete: true}}
	results, err := a.d.publish(r.Context(), msgs, callerFrom(r.Context()))
	if err != nil {
		a.fail(w, r, storeError(err))
		return
	}
	writeResults(w, results, false)
}

func (a *api) getKey(w http.ResponseWriter, r *http.Request, p params) {
	if e := firstError(validTopic("topic", p.topic), validKey(p.key)); e != nil {
		a.fail(w, r, e)
		return
	}
	e, ok := a.d.store.Get(p.topic, p.key)
	if !ok {
		a.fail(w, r, errorf(CodeNotFound, "no key %q in topic %q", p.key, p.topic))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(e.Value)))
	h.Set("Cachecast-Origin", formatOrigin(e.Stamp.Origin))
	h.Set("Cachecast-Seq", strconv.FormatUint(e.Stamp.Seq, 10))
	h.Set("Cachecast-Hlc", strconv.FormatUint(e.Stamp.HLC, 10))
	h.Set("Cachecast-Time", hlcTime(e.Stamp.HLC))
	h.Set("Cachecast-Tag", e.Tag)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(e.Value)
	}
}

// ndjsonTypes are the media types that mark a body as a batch.
var ndjsonTypes = []string{"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}

func (a *api) postMessages(w http.ResponseWriter, r *http.Request, p params) {
	if e := validTopic("topic", p.topic); e != nil {
		a.fail(w, r, e)
		return
	}
	ndjson := false
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			a.fail(w, r, errorf(CodeBadRequest, "Content-Type %q: %v", ct, err))
			return
		}
		ndjson = slices.Contains(ndjsonTypes, mt)
	}
	body, e := a.readBody(w, r, a.d.cfg.MaxBodySize, CodeBodyTooLarge, "body")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	msgs, e := decodeMessages(p.topic, body, ndjson, a.d.cfg.MaxValueSize)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	results, err := a.d.publish(r.Context(), msgs, callerFrom(r.Context()))
	if err != nil {
		a.fail(w, r, storeError(err))
		return
	}
	writeResults(w, results, true)
}

// query parses the query string strictly: a malformed one is bad_request
// rather than silently dropped.
func query(r *http.Request) (url.Values, *apiError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf(CodeBadRequest, "query string: %v", err)
	}
	return q, nil
}

// listQuery reads the query of a list route and its limit=: 1 to
// maxKeysLimit, default defaultKeysLimit.
func listQuery(r *http.Request) (url.Values, int, *apiError) {
	q, e := query(r)
	if e != nil {
		return nil, 0, e
	}
	s := q.Get("limit")
	if s == "" {
		return q, defaultKeysLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxKeysLimit {
		return nil, 0, errorf(CodeBadRequest, "limit: want 1 to %d, got %q", maxKeysLimit, s)
	}
	return q, n, nil
}

func (a *api) listKeys(w http.ResponseWriter, r *http.Request, p params) {
	if e := validTopic("topic", p.topic); e != nil {
		a.fail(w, r, e)
		return
	}
	q, limit, e := listQuery(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	prefix, after := q.Get("prefix"), q.Get("after")
	if len(prefix) > MaxKeyLen || len(after) > MaxKeyLen {
		a.fail(w, r, errorf(CodeBadRequest, "prefix and after: at most %d bytes", MaxKeyLen))
		return
	}
	keys := a.d.store.Keys(p.topic, prefix, after, limit+1)
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
func (a *api) topics(w http.ResponseWriter, r *http.Request, _ params) {
	type topic struct {
		Name     string `json:"name"`
		Keys     int    `json:"keys"`
		Messages uint64 `json:"messages"`
	}
	q, e := query(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	internal := false
	if s := q.Get("internal"); s != "" {
		var err error
		if internal, err = strconv.ParseBool(s); err != nil {
			a.fail(w, r, errorf(CodeBadRequest, "internal: want 1 or 0, got %q", s))
			return
		}
	}
	out := []topic{}
	for _, t := range a.d.store.Topics() {
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
func (a *api) subscribe(w http.ResponseWriter, r *http.Request, p params) {
	release, e := a.streamSlot(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	defer release()
	if e := validTopic("topic", p.topic); e != nil {
		a.fail(w, r, e)
		return
	}
	q, e := query(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	switch mode := q.Get("mode"); mode {
	case "", "broadcasting":
	case "clustering":
		if e := a.d.authorize(callerFrom(r.Context()), RoleConsume); e != nil {
			a.fail(w, r, e)
			return
		}
		a.subscribeGroup(w, r, p, q)
		return
	default:
		a.fail(w, r, errorf(CodeBadRequest, "mode: want \"broadcasting\" or \"clustering\", got %q", mode))
		return
	}
	name, ack := q.Get("name"), q.Get("ack")
	if g := q.Get("group"); g != "" {
		// In broadcasting a group is a cursor: each node keeps its own.
		if name != "" && name != g {
			a.fail(w, r, errorf(CodeBadRequest, "name %q and group %q: in broadcasting mode group is another word for name; give one", name, g))
			return
		}
		name = g
	}
	if name != "" {
		if e := validTopic("cursor name", name); e != nil {
			a.fail(w, r, e)
			return
		}
	}
	switch ack {
	case "", "client":
		ack = ""
	case "auto":
		if name == "" {
			a.fail(w, r, errorf(CodeBadRequest, "ack=auto needs a cursor: name=<cursor>"))
			return
		}
		if e := a.d.authorize(callerFrom(r.Context()), RoleConsume); e != nil {
			a.fail(w, r, e)
			return
		}
	default:
		a.fail(w, r, errorf(CodeBadRequest, "ack: want \"auto\" or \"client\", got %q", ack))
		return
	}
	tags, e := parseTags(q.Get("tags"))
	if e != nil {
		a.fail(w, r, e)
		return
	}
	start, e := a.startOf(p.topic, q.Get("from"), name)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	reader, err := a.d.store.NewTopicReader(p.topic, start, tags)
	if err != nil {
		a.fail(w, r, storeError(err))
		return
	}
	defer reader.Close()
	if ack == "auto" {
		// The cursor is taken (made, or checked as the caller's) where the
		// stream starts, so that a refusal is a status, not a stream's end.
		if err := a.d.setCursorAs(r.Context(), name, p.topic, reader.Offset()); err != nil {
			a.fail(w, r, storeError(err))
			return
		}
	}

	st, ok := a.openStream(w, r)
	if !ok {
		return
	}
	defer st.close()
	ctx, rc, sse := st.ctx, st.rc, st.sse
	a.d.log.Debug("subscribe", append(callerFrom(r.Context()).fields(),
		zap.String("topic", p.topic), zap.String("cursor", name), zap.Uint64("offset", reader.Offset()))...)
	frame := func(b []byte, d store.Delivery) []byte {
		if !sse {
			return append(appendDelivery(b, d), '\n')
		}
		b = append(b, "id: "...)
		b = strconv.AppendUint(b, d.Offset, 10)
		b = append(b, "\ndata: "...)
		return append(appendDelivery(b, d), "\n\n"...)
	}

	// polled is already done: Next with it returns a waiting message or
	// the context's error at once, so the stream can gather what is
	// waiting and flush once.
	polled, cancelPolled := context.WithCancel(context.Background())
	cancelPolled()
	buf := make([]byte, 0, streamFlushBytes+4096)
	for {
		d, err := reader.Next(ctx)
		if err != nil {
			a.endStream(w, rc, ctx, err, p.topic, sse)
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
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if ack == "auto" {
			if err := a.d.setCursorAs(r.Context(), name, p.topic, next); err != nil {
				a.endStream(w, rc, ctx, err, p.topic, sse)
				return
			}
		}
	}
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
func (a *api) openStream(w http.ResponseWriter, r *http.Request) (st stream, ok bool) {
	// A stream lives longer than any timeout of the server: clear the
	// deadlines (a passed read deadline would end the request's context).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})

	ctx, cancel := context.WithCancel(r.Context())
	// Shutdown ends the stream: a reading client gets the stream's proper
	// end (the last chunk), one blocked writing to a client that does not
	// read is cut off a second later.
	stop := context.AfterFunc(a.d.subsCtx, func() {
		cancel()
		_ = rc.SetWriteDeadline(time.Now().Add(time.Second))
	})
	a.d.m.subscribers.Inc()
	st = stream{ctx: ctx, rc: rc, sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream"),
		close: func() { a.d.m.subscribers.Dec(); stop(); cancel() }}

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
func (a *api) endStream(w http.ResponseWriter, rc *http.ResponseController, ctx context.Context, err error, topic string, sse bool) {
	if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
		return
	}
	e := storeError(err)
	a.d.m.errors.WithLabelValues(e.Code).Inc()
	a.d.log.Error("subscription ended", zap.String("topic", topic), zap.Error(err))
	var b []byte
	if sse {
		b = append(b, "event: error\ndata: "...)
	}
	b = append(b, `{"error":{"code":`...)
	b = appendJSONString(b, e.Code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	b = append(b, "}}\n"...)
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
func (a *api) startOf(topic, from, name string) (store.Start, *apiError) {
	switch {
	case from == "" && name != "":
		ct, off, ok := a.d.store.Cursor(name)
		if !ok {
			return store.Start{From: store.FromLatest}, nil
		}
		if ct != topic {
			return store.Start{}, errorf(CodeBadRequest, "cursor %q reads topic %q, not %q", name, ct, topic)
		}
		return store.Start{From: store.FromOffset, Offset: off}, nil
	case from == "" || from == "latest":
		return store.Start{From: store.FromLatest}, nil
	case from == "earliest":
		return store.Start{From: store.FromEarliest}, nil
	}
	if n, err := strconv.ParseUint(from, 10, 64); err == nil {
		// An offset past the end would wait, silently, for messages that
		// may never come (a position from another node, or from before the
		// data directory was wiped). The end itself is the next message.
		if end := a.d.store.TopicEnd(topic); n > end {
			return store.Start{}, errorf(CodeBadRequest, "from=%d is beyond the end of topic %q on this node (its next offset is %d); from=latest waits for new messages", n, topic, end)
		}
		return store.Start{From: store.FromOffset, Offset: n}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, from); err == nil {
		return store.Start{From: store.FromTime, Time: t}, nil
	}
	return store.Start{}, errorf(CodeBadRequest, "from: want earliest, latest, an offset or an RFC 3339 time, got %q", from)
}

// parseTags reads tags=a||b.
func parseTags(s string) ([]string, *apiError) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tags []string
	for t := range strings.SplitSeq(s, "||") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, errorf(CodeInvalidName, "tags: an empty tag in %q (separate tags with ||)", s)
		}
		if e := validTag(t); e != nil {
			return nil, e
		}
		tags = append(tags, t)
	}
	return tags, nil
}

// cursorOf looks up the cursor a route names, answering the refusal
// itself when the name is invalid or there is no such cursor.
func (a *api) cursorOf(w http.ResponseWriter, r *http.Request, name string) (store.CursorInfo, bool) {
	if e := validTopic("cursor name", name); e != nil {
		a.fail(w, r, e)
		return store.CursorInfo{}, false
	}
	c, ok := a.d.store.LookupCursor(name)
	if !ok {
		a.fail(w, r, errorf(CodeNotFound, "no cursor %q", name))
	}
	return c, ok
}

func (a *api) getCursor(w http.ResponseWriter, r *http.Request, p params) {
	if c, ok := a.cursorOf(w, r, p.name); ok {
		a.writeJSON(w, r, newCursorAnswer(c))
	}
}

// listCursors answers GET /v1/cursors: every durable cursor of the node
// (at most --max-cursors), sorted by name.
func (a *api) listCursors(w http.ResponseWriter, r *http.Request, _ params) {
	cs := a.d.store.Cursors()
	out := make([]cursorAnswer, len(cs))
	for i, c := range cs {
		out[i] = newCursorAnswer(c)
	}
	a.writeJSON(w, r, struct {
		Cursors []cursorAnswer `json:"cursors"`
	}{out})
}

// deleteCursor answers DELETE /v1/cursors/{name}: the cursor's owner or an
// admin may delete it; retention then no longer waits for it.
func (a *api) deleteCursor(w http.ResponseWriter, r *http.Request, p params) {
	c, ok := a.cursorOf(w, r, p.name)
	if !ok {
		return
	}
	caller := callerFrom(r.Context())
	if err := a.d.store.DeleteCursorAs(caller.UID, a.d.roles.Load().has(caller, RoleAdmin), p.name); err != nil {
		a.fail(w, r, storeError(err))
		return
	}
	a.d.log.Info("cursor deleted", append(caller.fields(), zap.String("cursor", p.name), zap.String("topic", c.Topic))...)
	a.writeJSON(w, r, newCursorAnswer(c))
}

// setCursorAs creates or moves a durable cursor for the request's caller:
// the caller owns a cursor it creates, and only the owner or an admin may
// move it afterwards. A caller the kernel did not name may not own one.
func (d *Daemon) setCursorAs(ctx context.Context, name, topic string, offset uint64) error {
	c := callerFrom(ctx)
	if !c.Known {
		return errorf(CodeForbidden, "a durable cursor needs a caller the kernel names (SO_PEERCRED); connect over the Unix socket")
	}
	return d.store.SetCursorAs(c.UID, d.roles.Load().has(c, RoleAdmin), name, topic, offset)
}

func (a *api) setCursor(w http.ResponseWriter, r *http.Request, p params) {
	if e := validTopic("cursor name", p.name); e != nil {
		a.fail(w, r, e)
		return
	}
	body, e := a.readBody(w, r, maxCursorBody, CodeBodyTooLarge, "body")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	var req cursorRequest
	if e := decodeStrict(body, &req, "cursor object"); e != nil {
		a.fail(w, r, e)
		return
	}
	if e := validTopic("topic", req.Topic); e != nil {
		a.fail(w, r, e)
		return
	}
	if req.Offset == nil {
		a.fail(w, r, errorf(CodeBadRequest, `"offset" is required (the offset of the next message to read)`))
		return
	}
	if err := a.d.setCursorAs(r.Context(), p.name, req.Topic, *req.Offset); err != nil {
		a.fail(w, r, storeError(err))
		return
	}
	c, _ := a.d.store.LookupCursor(p.name)
	a.writeJSON(w, r, newCursorAnswer(c))
}

func (a *api) status(w http.ResponseWriter, r *http.Request, _ params) {
	s := a.d.store.Stats()
	var b statusBody
	b.Node.Name = a.d.cfg.NodeName
	b.Node.Origin = formatOrigin(s.Origin)
	b.Node.Version = Version
	b.UptimeSeconds = uptime(a.d.started)
	b.Flush = s.Flush.String()
	b.Store.Segments = s.Segments
	b.Store.MappedSegments = s.MappedSegments
	b.Store.LogBytes = s.LogBytes
	b.Store.WritePos = s.WritePos
	b.Store.FlushedPos = s.FlushedPos
	b.Store.OldestPos = s.OldestPos
	b.Store.Records = s.Records
	b.Store.Keys = s.Keys
	if a.d.redis != nil {
		rs := a.d.redis.Stats()
		b.Redis = &redisStatus{Socket: a.d.RedisSocketPath(), Addr: a.d.RedisAddr(), Connections: rs.Connections,
			Commands: rs.Commands, TrackingClients: rs.TrackingClients, Invalidations: rs.Invalidations,
			SlowDisconnects: rs.SlowDisconnects, ProtocolErrors: rs.ProtocolErrors, Subscriptions: rs.Subscriptions}
	}
	b.Degraded = a.d.degraded()
	view := viewDigest(a.d.store.ViewDigests())
	b.View = &view
	a.writeJSON(w, r, &b)
}

// clusterStatus answers GET /v1/cluster: the members as this node sees
// them and how far each is behind each origin. A lone node (no
// --gossip-addr) lists only itself.
func (a *api) clusterStatus(w http.ResponseWriter, r *http.Request, _ params) {
	if a.d.cluster == nil {
		st := ClusterStatus{Node: a.d.cfg.NodeName, Origin: formatOrigin(a.d.store.Origin()),
			Members: []ClusterMember{{Name: a.d.cfg.NodeName, Origin: formatOrigin(a.d.store.Origin()), State: "alive", Self: true}}}
		a.writeJSON(w, r, &st)
		return
	}
	st := a.d.cluster.status()
	a.writeJSON(w, r, &st)
}

func (a *api) healthz(w http.ResponseWriter, r *http.Request, _ params) {
	if err := a.d.store.Healthy(); err != nil {
		a.fail(w, r, errorf(CodeUnavailable, "%v", err))
		return
	}
	if err := a.d.store.DiskFull(); err != nil {
		a.fail(w, r, errorf(CodeDiskFull, "writes are refused until space is freed (reads go on): %v", err))
		return
	}
	writeJSONBytes(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// readyz is 200 once the store is recovered and the daemon serves, until
// shutdown begins. A degraded node (told to join, alone) still serves, so
// it is still 200, with {"status":"degraded","reason":...}: the last node
// of a cluster whose others are gone must not be taken out of service.
func (a *api) readyz(w http.ResponseWriter, r *http.Request, _ params) {
	if !a.d.ready.Load() {
		a.fail(w, r, errorf(CodeUnavailable, "not ready: starting or shutting down"))
		return
	}
	if why := a.d.degraded(); why != "" && a.d.store.Healthy() == nil && a.d.store.DiskFull() == nil {
		b, _ := json.Marshal(map[string]string{"status": "degraded", "reason": why})
		writeJSONBytes(w, http.StatusOK, append(b, '\n'))
		return
	}
	a.healthz(w, r, params{})
}

func firstError(errs ...*apiError) *apiError {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// publish is the one path every write takes: PUT, DELETE and POST messages
// of the local API call it, and the cluster layer extends it (replication to
// the peer, fan-out, the replica statuses of PutResult). It checks that the
// caller has the publish role, appends msgs as one all-or-nothing batch
// (stamped with this node's origin, seq and HLC), counts and logs the write.
// msgs are checked by the caller (names, sizes); the store checks again.
func (d *Daemon) publish(ctx context.Context, msgs []record.Message, c Caller) ([]PutResult, error) {
	results, status, err := d.publishStamped(ctx, msgs, c)
	if err != nil {
		return nil, err
	}
	out := make([]PutResult, len(msgs))
	for i := range msgs {
		out[i] = newPutResult(&msgs[i], results[i].Stamp, status)
	}
	return out, nil
}

// publishStamped is publish without the answers' text: the store's
// results and the replica status, for the Redis front door (which
// answers OK, and keeps only the last seq for WAIT).
func (d *Daemon) publishStamped(ctx context.Context, msgs []record.Message, c Caller) ([]store.Result, string, error) {
	if e := d.authorize(c, RolePublish); e != nil {
		return nil, "", e
	}
	if err := ctx.Err(); err != nil {
		// The client left before anything was written: write nothing.
		return nil, "", errorf(CodeTimeout, "request cancelled before the write: %v", err)
	}
	var (
		results []store.Result
		err     error
	)
	if len(msgs) == 1 {
		var res store.Result
		res, err = d.store.Publish(&msgs[0])
		results = []store.Result{res}
	} else {
		results, err = d.store.PublishBatch(msgs)
	}
	if err != nil {
		d.log.Warn("publish failed", append(c.fields(),
			zap.String("topic", msgs[0].Topic), zap.Int("messages", len(msgs)), zap.Error(err))...)
		return nil, "", err
	}
	var n int
	for i := range msgs {
		n += len(msgs[i].Value)
	}
	d.m.publishes.Add(float64(len(msgs)))
	d.m.publishBytes.Add(float64(n))
	if ce := d.log.Check(zapcore.DebugLevel, "published"); ce != nil {
		ce.Write(append(c.fields(),
			zap.String("topic", msgs[0].Topic), zap.Int("messages", len(msgs)), zap.Int("bytes", n),
			zap.Uint64("first-seq", results[0].Seq))...)
	}
	status := StatusOK
	if d.cluster != nil && d.cfg.Replication == "sync" {
		// The write stands whatever the replica does; the status says
		// whether the replica confirmed it in time.
		status = d.cluster.waitReplica(ctx, results[len(results)-1].Seq)
		if status != StatusOK {
			d.m.replicaMisses.WithLabelValues(status).Inc()
		}
	} else if d.cluster == nil && d.cfg.Replication == "sync" {
		status = StatusReplicaUnavailable
	}
	return results, status, nil
}
