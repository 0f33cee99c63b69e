package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// Time on the HTTP API (DESIGN.md, "Time"): a message may expire
// ("ttl_ms", "expires_at", or the Cachecast-Expires header) and may be
// scheduled ("effective_at" or Cachecast-Effective-At); a cancel removes
// a pending one; an NDJSON batch becomes visible together on every node.

// Headers of time.
const (
	headerExpires   = "Cachecast-Expires"
	headerEffective = "Cachecast-Effective-At"
)

// parseInstant reads an instant as the API takes one: Unix milliseconds,
// or an RFC 3339 time (with a zone; fractions of a second allowed),
// after 1970 and at most record.MaxInstant (the end of year 9999).
func parseInstant(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, n > 0 && n <= record.MaxInstant
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.UnixMilli() <= 0 || t.UnixMilli() > record.MaxInstant {
		return 0, false
	}
	return t.UnixMilli(), true
}

// wireInstant is an instant in a message object: a JSON number of Unix
// milliseconds or an RFC 3339 string.
type wireInstant int64

func (w *wireInstant) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		s = string(b[1 : len(b)-1])
	}
	n, ok := parseInstant(s)
	if !ok {
		return &instantError{s}
	}
	*w = wireInstant(n)
	return nil
}

// instantError is a message field that is not an instant.
type instantError struct{ s string }

func (e *instantError) Error() string {
	return "want Unix milliseconds or an RFC 3339 time (2026-12-01T00:00:00Z) from 1970 to 9999, got " + strconv.Quote(e.s)
}

// timeHeaders reads the request's Cachecast-Expires and
// Cachecast-Effective-At (0 when absent).
func timeHeaders(r *http.Request) (expires, effective int64, e *wire.Error) {
	for _, h := range []struct {
		name string
		to   *int64
	}{{headerExpires, &expires}, {headerEffective, &effective}} {
		vs := r.Header.Values(h.name)
		if len(vs) == 0 {
			continue
		}
		n, ok := parseInstant(strings.TrimSpace(vs[0]))
		if len(vs) > 1 || !ok {
			return 0, 0, wire.Errorf(wire.CodeBadRequest, "%s: want one instant from 1970 to 9999, Unix milliseconds or an RFC 3339 time, got %q", h.name, strings.Join(vs, ", "))
		}
		*h.to = n
	}
	return expires, effective, nil
}

// now is the node's clock in Unix milliseconds.
func (a *Server) now() int64 {
	if a.cfg.Clock != nil {
		return a.cfg.Clock().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// applyTimes gives every message the headers' expiry and effective time
// where it has none of its own, and checks them all.
func (a *Server) applyTimes(r *http.Request, msgs []record.Message) *wire.Error {
	expires, effective, e := timeHeaders(r)
	if e != nil {
		return e
	}
	now := a.now()
	for i := range msgs {
		m := &msgs[i]
		if m.ExpiresAt == 0 && !m.Delete && !m.Cancel {
			m.ExpiresAt = expires
		}
		if m.EffectiveAt == 0 && m.Key != "" {
			m.EffectiveAt = effective
		}
		if e := command.Times(m, now); e != nil {
			if len(msgs) > 1 {
				e.Message = "message " + strconv.Itoa(i+1) + ": " + e.Message
			}
			return e
		}
	}
	return nil
}

// setTimeHeaders adds the entry's expiry and effective time to a GET's
// answer.
func setTimeHeaders(h http.Header, e view.Entry) {
	if e.ExpiresAt != 0 {
		h.Set(headerExpires, command.FormatMs(e.ExpiresAt))
	}
	if e.EffectiveAt != 0 {
		h.Set(headerEffective, command.FormatMs(e.EffectiveAt))
	}
}

// listPending is GET /v1/topics/{topic}/pending: the records not in force
// yet (scheduled values and deletes, and cancels), by key and instant.
func (a *Server) listPending(w http.ResponseWriter, r *http.Request, p params) {
	q, limit, ok := a.listing(w, r, wire.CheckName("topic", p.topic))
	if !ok {
		return
	}
	recs := a.node.Pending(p.topic, q.Get("after"), limit+1)
	var next string
	keys := 0
	for i := range recs {
		if i == 0 || recs[i].Key != recs[i-1].Key {
			if keys++; keys > limit {
				next = recs[i-1].Key
				recs = recs[:i]
				break
			}
		}
	}
	b := append(make([]byte, 0, 256+len(recs)*160), `{"topic":`...)
	b = wire.AppendString(b, p.topic)
	b = append(b, `,"pending":[`...)
	for i, pr := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPending(b, &pr)
	}
	b = append(b, ']')
	if next != "" {
		b = append(b, `,"next":`...)
		b = wire.AppendString(b, next)
	}
	writeJSONBytes(w, http.StatusOK, append(b, "}\n"...))
}

// appendPending appends one pending record as
//
//	{"key":"k","effective_at":"...","tag":"","value":"...","delete":false,
//	 "cancel":false,"expires_at":"...","origin":"..","seq":3,"hlc":"..."}
//
// (expires_at only when set; value_base64 for a value that is not UTF-8).
func appendPending(b []byte, p *view.PendingRecord) []byte {
	b = append(b, `{"key":`...)
	b = wire.AppendString(b, p.Key)
	b = append(b, `,"effective_at":"`...)
	b = append(b, command.FormatMs(p.EffectiveAt)...)
	b = append(b, `","tag":`...)
	b = wire.AppendString(b, p.Tag)
	b = wire.AppendValue(b, p.Value)
	b = append(b, `,"delete":`...)
	b = strconv.AppendBool(b, p.Delete)
	b = append(b, `,"cancel":`...)
	b = strconv.AppendBool(b, p.Cancel)
	if p.ExpiresAt != 0 {
		b = append(b, `,"expires_at":"`...)
		b = append(b, command.FormatMs(p.ExpiresAt)...)
		b = append(b, '"')
	}
	b = append(b, `,"origin":"`...)
	b = append(b, wire.FormatOrigin(p.Stamp.Origin)...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, p.Stamp.Seq, 10)
	b = append(b, `,"hlc":"`...)
	b = strconv.AppendUint(b, p.Stamp.HLC, 10)
	return append(b, `"}`...)
}

// expiriesBounds of GET /v1/topics/{topic}/expiries: ?limit= keys
// answered, ?scan= keys of the topic looked at, expiriesBatch of them
// under one hold of the view's read lock.
var expiriesBounds = walkBounds{limit: 100, maxLimit: 1000, scan: 100_000, maxScan: 10_000_000}

const expiriesBatch = 4096

// listExpiries answers GET /v1/topics/{topic}/expiries: the keys of topic
// whose value in force expires, soonest first. The view has no order by
// expiry: the keys are walked in byte order, at most scan of them,
// keeping the limit soonest.
func (a *Server) listExpiries(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, wire.CheckName("topic", p.topic)) {
		return
	}
	limit, scan, e := expiriesBounds.read(r)
	if a.failed(w, r, e) || a.failed(w, r, a.catchingUp()) {
		return
	}
	soonest := func(x, y view.KeyedEntry) int {
		return cmp.Or(cmp.Compare(x.ExpiresAt, y.ExpiresAt), strings.Compare(x.Key, y.Key))
	}
	var found []view.KeyedEntry
	scanned, after := 0, ""
	for {
		keys, walked, next := a.node.Expiring(p.topic, after, min(expiriesBatch, scan-scanned))
		scanned += walked
		if found = append(found, keys...); len(found) > 4*limit {
			slices.SortFunc(found, soonest)
			found = found[:limit]
		}
		if after = next; after == "" || scanned >= scan {
			break
		}
	}
	slices.SortFunc(found, soonest)
	found = found[:min(limit, len(found))]
	b := append(make([]byte, 0, 256+len(found)*160), `{"topic":`...)
	b = wire.AppendString(b, p.topic)
	b = append(b, `,"expiries":[`...)
	for i := range found {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendExpiring(b, &found[i])
	}
	b = append(b, `],"scanned":`...)
	b = strconv.AppendInt(b, int64(scanned), 10)
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, after != "")
	writeJSONBytes(w, http.StatusOK, append(b, "}\n"...))
}

// appendExpiring appends one key of GET .../expiries as
//
//	{"key":"k","expires_at":"...","tag":"","value":"...","origin":"..",
//	 "seq":3,"hlc":"..."}
//
// (value_base64 for a value that is not UTF-8).
func appendExpiring(b []byte, k *view.KeyedEntry) []byte {
	b = append(b, `{"key":`...)
	b = wire.AppendString(b, k.Key)
	b = append(b, `,"expires_at":"`...)
	b = append(b, command.FormatMs(k.ExpiresAt)...)
	b = append(b, `","tag":`...)
	b = wire.AppendString(b, k.Tag)
	b = wire.AppendValue(b, k.Value)
	b = append(b, `,"origin":"`...)
	st := k.Stamp.Shown() // a counter revived from nothing: no version
	b = append(b, wire.FormatOrigin(st.Origin)...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, st.Seq, 10)
	b = append(b, `,"hlc":"`...)
	b = strconv.AppendUint(b, st.HLC, 10)
	return append(b, `"}`...)
}

// cancelPending is DELETE /v1/topics/{topic}/pending/{key}?effective_at=T:
// a cancel of the key's records scheduled for T (409 not_pending when
// none is pending at T).
func (a *Server) cancelPending(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckKey(p.key))) {
		return
	}
	q, e := query(r)
	if a.failed(w, r, e) {
		return
	}
	at, ok := parseInstant(q.Get("effective_at"))
	if !ok {
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "effective_at: want the instant of the records to cancel, Unix milliseconds or an RFC 3339 time, got %q", q.Get("effective_at")))
		return
	}
	m, e := command.CancelKey(a.node, p.topic, p.key, at, a.now())
	if a.failed(w, r, e) {
		return
	}
	a.publish(w, r, []record.Message{m}, false)
}

// streamEvents are a subscription's time events (events=expired,effective).
type streamEvents struct {
	expired, effective bool
}

// parseEvents reads the events parameter: a comma list of expired and
// effective.
func parseEvents(s string) (streamEvents, *wire.Error) {
	var ev streamEvents
	if s == "" {
		return ev, nil
	}
	for _, e := range strings.Split(s, ",") {
		switch e {
		case "expired":
			ev.expired = true
		case "effective":
			ev.effective = true
		default:
			return ev, wire.Errorf(wire.CodeBadRequest, "events: want a comma list of \"expired\" and \"effective\", got %q", s)
		}
	}
	return ev, nil
}

// appendEvent appends a time event's line:
//
//	{"event":"expired","topic":"t","key":"k","time":"..."}
//	{"event":"effective","topic":"t","key":"k","tag":"","value":"...","delete":false,
//	 "effective_at":"...","origin":"..","seq":3,"hlc":"...","time":"..."}
//
// time is the instant it happened on this node.
func appendEvent(b []byte, c *view.Change, now int64) []byte {
	b = append(b, `{"event":`...)
	b = wire.AppendString(b, c.Cause)
	b = append(b, `,"topic":`...)
	b = wire.AppendString(b, c.Topic)
	b = append(b, `,"key":`...)
	b = wire.AppendString(b, c.Key)
	if c.Cause == view.CauseEffective {
		b = append(b, `,"tag":`...)
		b = wire.AppendString(b, c.Tag)
		b = wire.AppendValue(b, c.Value)
		b = append(b, `,"delete":`...)
		b = strconv.AppendBool(b, c.Deleted)
		if c.EffectiveAt != 0 {
			b = append(b, `,"effective_at":"`...)
			b = append(b, command.FormatMs(c.EffectiveAt)...)
			b = append(b, '"')
		}
		b = append(b, `,"origin":"`...)
		b = append(b, wire.FormatOrigin(c.Stamp.Origin)...)
		b = append(b, `","seq":`...)
		b = strconv.AppendUint(b, c.Stamp.Seq, 10)
		b = append(b, `,"hlc":"`...)
		b = strconv.AppendUint(b, c.Stamp.HLC, 10)
		b = append(b, '"')
	}
	b = append(b, `,"time":"`...)
	b = append(b, command.FormatMs(now)...)
	return append(b, `"}`...)
}

// followEvents writes the topic's time events that ev asks for to the
// stream, under mu (the stream's other writer holds it too), until ctx
// ends or a write fails (then it calls stop); the channel closes when it
// has ended. It follows the store (the one reader of its
// changes, Node.FollowStore) from the moment it is called, and writes each round's events
// at the round's end, formatted outside the view's lock.
func (a *Server) followEvents(ctx context.Context, stop func(), topic string, ev streamEvents, sse bool,
	mu *sync.Mutex, write func([]byte) error) <-chan struct{} {
	var buf []byte
	failed := false
	tell := func(f store.Followed) {
		c := f.Event
		if failed || c.Topic != topic || c.Cause == view.CauseExpired && !ev.expired || c.Cause == view.CauseEffective && !ev.effective {
			return
		}
		now := a.now()
		if sse {
			buf = append(buf, "event: "...)
			buf = append(buf, c.Cause...)
			buf = append(buf, "\ndata: "...)
			buf = append(appendEvent(buf, c, now), "\n\n"...)
		} else {
			buf = append(appendEvent(buf, c, now), '\n')
		}
	}
	end := func() {
		if len(buf) == 0 || failed {
			return
		}
		mu.Lock()
		err := write(bytes.Clone(buf))
		mu.Unlock()
		buf = buf[:0]
		if err != nil {
			failed = true
			stop()
		}
	}
	return a.node.FollowStore(ctx, store.FollowOptions{Events: true}, tell, end)
}
