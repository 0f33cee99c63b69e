package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cachecast/cachecast/internal/jsonstr"
	"github.com/cachecast/cachecast/wire"
)

// DefaultTimeout bounds every call but Subscribe when the caller's context
// has no deadline of its own. A local daemon answers in microseconds; a
// call that takes this long is stuck.
const DefaultTimeout = 30 * time.Second

// Client talks to one cachecastd over its Unix socket. It is safe for
// concurrent use; it keeps a pool of connections (see WithMaxConns).
type Client struct {
	socket    string
	hc        *http.Client
	transport *http.Transport
	timeout   time.Duration
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout sets the bound on each call (Subscribe excepted) when the
// caller's context has no deadline. Zero or less means no bound. The
// default is DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// WithMaxConns bounds the connections the client opens to the daemon
// (0, the default, means no bound; idle connections kept: 64). bench uses
// one Client with WithMaxConns(1) per connection it measures.
func WithMaxConns(n int) Option {
	return func(c *Client) {
		c.transport.MaxConnsPerHost = n
		if n > 0 {
			c.transport.MaxIdleConnsPerHost = n
		}
	}
}

// WithUserAgent sets the User-Agent header (default "cachecast-go-client").
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client of the daemon listening on the Unix socket at
// socketPath. It does not connect until the first call.
func New(socketPath string, opts ...Option) *Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // a local socket: gzip would only cost CPU
	}
	c := &Client{
		socket:    socketPath,
		transport: t,
		timeout:   DefaultTimeout,
		userAgent: "cachecast-go-client",
		hc: &http.Client{
			Transport: t,
			// The API never redirects; a redirect means a path was
			// mangled (ServeMux cleaning, say), and following it would
			// answer a different question.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Socket is the path of the daemon's socket.
func (c *Client) Socket() string { return c.socket }

// Close closes the idle connections. Calls after Close still work (they
// open new connections); open subscriptions are not affected.
func (c *Client) Close() error {
	c.transport.CloseIdleConnections()
	return nil
}

// apiURL builds a URL from path segments: literal ones (even positions)
// and names to escape (odd positions), as in
// apiURL([]string{"/v1/topics/", topic, "/keys/", key}, nil).
func apiURL(parts []string, query url.Values) *url.URL {
	var raw, plain strings.Builder
	for i, p := range parts {
		if i%2 == 0 {
			raw.WriteString(p)
		} else {
			raw.WriteString(wire.EscapeSegment(p))
		}
		plain.WriteString(p)
	}
	u := &url.URL{Scheme: "http", Host: "cachecast", Path: plain.String(), RawPath: raw.String()}
	if query != nil {
		u.RawQuery = query.Encode()
	}
	return u
}

func keyURL(topic, key string) *url.URL {
	return apiURL([]string{"/v1/topics/", topic, "/keys/", key}, nil)
}

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidArgument, what)
	}
	return nil
}

// request is one call's description.
type request struct {
	method string
	url    *url.URL
	body   []byte
	ctype  string
	header http.Header
}

// send performs the request and returns the response with its body
// unread, or an error: *APIError for a non-2xx answer (body consumed).
// The caller must call done() once it has read the body.
func (c *Client) send(ctx context.Context, rq request, bounded bool) (resp *http.Response, done func(), err error) {
	cancel := context.CancelFunc(func() {})
	if bounded && c.timeout > 0 {
		if _, ok := ctx.Deadline(); !ok {
			ctx, cancel = context.WithTimeout(ctx, c.timeout)
		}
	}
	var body io.Reader
	if rq.body != nil {
		body = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, "http://cachecast/", body)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	req.URL = rq.url
	for k, v := range rq.header {
		req.Header[k] = v
	}
	if rq.ctype != "" {
		req.Header.Set("Content-Type", rq.ctype)
	}
	req.Header.Set("User-Agent", c.userAgent)
	resp, err = c.hc.Do(req)
	if err != nil {
		err = c.transportError(ctx, rq, err) // before cancel: it reads ctx.Err
		cancel()
		return nil, nil, err
	}
	done = func() {
		resp.Body.Close()
		cancel()
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		done()
		return nil, nil, ParseAPIError(resp.StatusCode, b)
	}
	return resp, done, nil
}

// transportError says what went wrong before an answer arrived.
func (c *Client) transportError(ctx context.Context, rq request, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("client: %s %s: %w", rq.method, rq.url.Path, ctxErr)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, c.socket, op.Err)
	}
	return fmt.Errorf("client: %s %s: %w", rq.method, rq.url.Path, err)
}

// rawBody makes call hand back the answer's bytes undecoded.
type rawBody []byte

// call performs a bounded request and decodes a JSON answer into out
// (skipped when out is nil).
func (c *Client) call(ctx context.Context, rq request, out any) error {
	resp, done, err := c.send(ctx, rq, true)
	if err != nil {
		return err
	}
	defer done()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("client: %s %s: reading answer: %w", rq.method, rq.url.Path, err)
	}
	switch out := out.(type) {
	case nil:
		return nil
	case *rawBody:
		*out = b
		return nil
	}
	if err := jsonstr.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrBadResponse, rq.method, rq.url.Path, err)
	}
	return nil
}

// Publish stores value under (topic, key) with an optional tag and returns
// the message's identity. It sends PUT /v1/topics/{topic}/keys/{key}; with
// an empty key it publishes a plain stream message through
// POST /v1/topics/{topic}/messages instead (no key, nothing cached).
// A result whose Status is not StatusOK was stored nonetheless.
func (c *Client) Publish(ctx context.Context, topic, key string, value []byte, tag string) (PutResult, error) {
	if err := checkName("topic", topic); err != nil {
		return PutResult{}, err
	}
	if key == "" {
		rs, err := c.publishMessages(ctx, topic, []Message{{Tag: tag, Value: value}}, "application/json")
		if err != nil {
			return PutResult{}, err
		}
		return rs[0], nil
	}
	rq := request{method: http.MethodPut, url: keyURL(topic, key), body: value, ctype: "application/octet-stream"}
	if value == nil {
		rq.body = []byte{}
	}
	if tag != "" {
		rq.header = http.Header{"Cachecast-Tag": {tag}}
	}
	var raw rawBody
	if err := c.call(ctx, rq, &raw); err != nil {
		return PutResult{}, err
	}
	return ParseResult(raw)
}

// PublishBatch publishes msgs to topic in one request (NDJSON, all or
// nothing) and returns one result per message, in order.
func (c *Client) PublishBatch(ctx context.Context, topic string, msgs []Message) ([]PutResult, error) {
	if err := checkName("topic", topic); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	return c.publishMessages(ctx, topic, msgs, "application/x-ndjson")
}

func (c *Client) publishMessages(ctx context.Context, topic string, msgs []Message, ctype string) ([]PutResult, error) {
	if err := checkMessages(msgs); err != nil {
		return nil, err
	}
	size := 0
	for i := range msgs {
		size += len(msgs[i].Key) + len(msgs[i].Tag) + len(msgs[i].Value) + 48
	}
	body := make([]byte, 0, size)
	for i := range msgs {
		body = appendMessage(body, &msgs[i])
		body = append(body, '\n')
	}
	rq := request{
		method: http.MethodPost,
		url:    apiURL([]string{"/v1/topics/", topic, "/messages"}, nil),
		body:   body,
		ctype:  ctype,
	}
	var raw rawBody
	if err := c.call(ctx, rq, &raw); err != nil {
		return nil, err
	}
	wires, err := wire.DecodeResults(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: POST %s: %v", ErrBadResponse, rq.url.Path, err)
	}
	if len(wires) != len(msgs) {
		return nil, fmt.Errorf("%w: %d results for %d messages", ErrBadResponse, len(wires), len(msgs))
	}
	return convertResults(wires)
}

// convertResults turns wire results into PutResults.
func convertResults(wires []wire.PutResult) ([]PutResult, error) {
	rs := make([]PutResult, len(wires))
	var lastTime string
	var lastParsed time.Time
	for i := range wires {
		// Results of a batch mostly share their millisecond: parse each
		// distinct time once.
		t := wires[i].Time
		if t == lastTime && t != "" {
			wires[i].Time = ""
		}
		r, err := resultOf(&wires[i])
		if err != nil {
			return nil, err
		}
		if t == lastTime && t != "" {
			r.Time = lastParsed
		} else {
			lastTime, lastParsed = t, r.Time
		}
		rs[i] = r
	}
	return rs, nil
}

// Get returns the latest value of (topic, key). A missing key (or a
// deleted one) is an *APIError that matches ErrNotFound.
func (c *Client) Get(ctx context.Context, topic, key string) (Value, error) {
	if err := checkName("topic", topic); err != nil {
		return Value{}, err
	}
	if err := checkName("key", key); err != nil {
		return Value{}, err
	}
	rq := request{method: http.MethodGet, url: keyURL(topic, key)}
	resp, done, err := c.send(ctx, rq, true)
	if err != nil {
		return Value{}, err
	}
	defer done()
	v, err := valueFromHeader(resp.Header)
	if err != nil {
		return Value{}, err
	}
	if resp.ContentLength > 0 {
		v.Bytes = make([]byte, resp.ContentLength)
		_, err = io.ReadFull(resp.Body, v.Bytes)
	} else {
		v.Bytes, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		return Value{}, fmt.Errorf("client: GET %s: reading value: %w", rq.url.Path, err)
	}
	return v, nil
}

// valueFromHeader reads a value's identity from the Cachecast-* headers.
func valueFromHeader(h http.Header) (Value, error) {
	return valueFromFields(h.Get("Cachecast-Tag"), h.Get("Cachecast-Origin"), h.Get("Cachecast-Seq"),
		h.Get("Cachecast-Hlc"), h.Get("Cachecast-Time"))
}

func valueFromFields(tag, origin, seq, hlc, t string) (Value, error) {
	return ParseValue(tag, origin, seq, hlc, t)
}

// ParseValue makes a value's identity from the Cachecast-Tag, -Origin,
// -Seq, -Hlc and -Time headers of a GET's answer (Bytes is left empty),
// for code that reads the daemon's answers itself, as `cachecast bench`
// does.
func ParseValue(tag, origin, seq, hlc, t string) (Value, error) {
	v := Value{Tag: tag}
	var err error
	if v.Origin, err = parseOrigin(origin); err != nil {
		return Value{}, err
	}
	if v.Seq, err = parseSeq(seq); err != nil {
		return Value{}, err
	}
	if v.HLC, err = parseHLC(hlc); err != nil {
		return Value{}, err
	}
	if v.Time, err = parseTime(t); err != nil {
		return Value{}, err
	}
	return v, nil
}

// Delete publishes a tombstone for (topic, key). Deleting a key that does
// not exist is not an error: the tombstone is published all the same.
func (c *Client) Delete(ctx context.Context, topic, key string) (PutResult, error) {
	if err := checkName("topic", topic); err != nil {
		return PutResult{}, err
	}
	if err := checkName("key", key); err != nil {
		return PutResult{}, err
	}
	var raw rawBody
	if err := c.call(ctx, request{method: http.MethodDelete, url: keyURL(topic, key)}, &raw); err != nil {
		return PutResult{}, err
	}
	return ParseResult(raw)
}

// Keys lists up to limit live keys of topic in sorted order, those
// starting with prefix and greater than after. limit 0 takes the daemon's
// default (1000); the daemon caps it at 10000. next is the after to pass
// for the following page, "" when there is none.
func (c *Client) Keys(ctx context.Context, topic, prefix, after string, limit int) (keys []string, next string, err error) {
	if err := checkName("topic", topic); err != nil {
		return nil, "", err
	}
	q := pageQuery(after, limit)
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	var out struct {
		Keys []string `json:"keys"`
		Next string   `json:"next"`
	}
	rq := request{method: http.MethodGet, url: apiURL([]string{"/v1/topics/", topic, "/keys"}, q)}
	if err := c.call(ctx, rq, &out); err != nil {
		return nil, "", err
	}
	return out.Keys, out.Next, nil
}

// Topics lists the topics the daemon holds for its users, without its
// internal ones (AllTopics has those).
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	return c.topics(ctx, nil)
}

// AllTopics lists every topic the daemon holds, its internal ones
// included: $groups, $offsets, $owners, $dlq/<topic>/<group> and
// $retry/<topic>/<group>, which the consumer groups keep (no topic call
// reads them; the group calls do).
func (c *Client) AllTopics(ctx context.Context) ([]TopicInfo, error) {
	return c.topics(ctx, url.Values{"internal": {"1"}})
}

func (c *Client) topics(ctx context.Context, q url.Values) ([]TopicInfo, error) {
	var out struct {
		Topics []TopicInfo `json:"topics"`
	}
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/topics"}, q)}, &out); err != nil {
		return nil, err
	}
	return out.Topics, nil
}

// Status returns the daemon's node identity and store figures.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var raw json.RawMessage
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/status"}, nil)}, &raw); err != nil {
		return nil, err
	}
	var w wire.Status
	if err := jsonstr.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("%w: status: %v", ErrBadResponse, err)
	}
	origin, err := parseOrigin(w.Node.Origin)
	if err != nil {
		return nil, err
	}
	return &Status{
		Node:     NodeInfo{Name: w.Node.Name, Origin: origin, Version: w.Node.Version},
		Uptime:   time.Duration(w.UptimeSeconds * float64(time.Second)),
		Flush:    w.Flush,
		Store:    w.Store,
		Redis:    w.Redis,
		Degraded: w.Degraded,
		Away:     w.Away,
		CatchUp:  w.CatchUp,
		Repair:   w.Repair,
		View:     w.View,
		Raw:      raw,
	}, nil
}

// Healthz returns nil when the daemon is healthy (GET /healthz answers
// 200), else the reason: an *APIError (503) or a transport error.
func (c *Client) Healthz(ctx context.Context) error {
	return c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/healthz"}, nil)}, nil)
}

// Readyz returns nil when the daemon has recovered and serves (GET
// /readyz answers 200), else the reason.
func (c *Client) Readyz(ctx context.Context) error {
	return c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/readyz"}, nil)}, nil)
}

// SetCursor sets the durable cursor name to offset (the next message to
// read) in topic, creating it if needed.
func (c *Client) SetCursor(ctx context.Context, name, topic string, offset uint64) (Cursor, error) {
	if err := checkName("cursor name", name); err != nil {
		return Cursor{}, err
	}
	if err := checkName("topic", topic); err != nil {
		return Cursor{}, err
	}
	body, _ := json.Marshal(struct {
		Topic  string `json:"topic"`
		Offset uint64 `json:"offset"`
	}{topic, offset})
	rq := request{method: http.MethodPost, url: apiURL([]string{"/v1/cursors/", name}, nil), body: body, ctype: "application/json"}
	var cur Cursor
	if err := c.call(ctx, rq, &cur); err != nil {
		return Cursor{}, err
	}
	return cur, nil
}

// Cursors lists the node's durable cursors, sorted by name.
func (c *Client) Cursors(ctx context.Context) ([]Cursor, error) {
	var out struct {
		Cursors []Cursor `json:"cursors"`
	}
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/cursors"}, nil)}, &out); err != nil {
		return nil, err
	}
	return out.Cursors, nil
}

// DeleteCursor deletes the durable cursor name (its owner or an admin
// may) and returns it as it was; an unknown cursor is an *APIError that
// matches ErrNotFound.
func (c *Client) DeleteCursor(ctx context.Context, name string) (Cursor, error) {
	if err := checkName("cursor name", name); err != nil {
		return Cursor{}, err
	}
	var cur Cursor
	if err := c.call(ctx, request{method: http.MethodDelete, url: apiURL([]string{"/v1/cursors/", name}, nil)}, &cur); err != nil {
		return Cursor{}, err
	}
	return cur, nil
}

// GetCursor returns the durable cursor name; an unknown cursor is an
// *APIError that matches ErrNotFound.
func (c *Client) GetCursor(ctx context.Context, name string) (Cursor, error) {
	if err := checkName("cursor name", name); err != nil {
		return Cursor{}, err
	}
	var cur Cursor
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/cursors/", name}, nil)}, &cur); err != nil {
		return Cursor{}, err
	}
	return cur, nil
}

// pageQuery is the query of a paged listing: the key (or id) to list after
// and the page's size, each left out when zero so the daemon's default holds.
func pageQuery(after string, limit int) url.Values {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}
