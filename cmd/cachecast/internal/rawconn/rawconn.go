// Package rawconn is `cachecast bench`'s raw connection to the daemon's
// socket: one request at a time on one keep-alive HTTP/1.1 connection,
// read on the calling goroutine with a parser of only what the daemon
// sends (Content-Length or chunked bodies), so that a benchmark sharing
// the machine with the daemon measures the daemon rather than net/http's
// pooling (BenchmarkBenchConn sets it beside a client.Client). The
// answers' JSON is package client's and wire's; FuzzReadAnswer holds the
// parser to net/http's reading.
package rawconn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/wire"
)

// Conn is `cachecast bench`'s connection to the daemon (--transport raw, the
// default): each call writes its request and reads the answer on the
// calling goroutine, one request at a time on one keep-alive connection.
// A client.Client spends more CPU per request than a local daemon does
// (net/http's pooling and its two goroutines per connection); a benchmark
// that shares the machine with the daemon would measure that
// (BenchmarkBenchConn sets the two side by side). Conn speaks only
// what the daemon sends (HTTP/1.1, Content-Length or chunked bodies) and
// offers only the calls a benchmark makes; the answers' JSON is package
// client's and wire's.
//
// A Conn is not safe for concurrent use. After a transport error (or
// an answer that breaks HTTP) it is closed, and every later call returns
// that error; after Close, client.ErrClosed. Error answers of the API
// (*client.APIError) leave it usable.
type Conn struct {
	socket  string
	nc      net.Conn
	r       *bufio.Reader
	buf     []byte // the request being written
	body    []byte // the last answer's body, reused
	ua      string
	timeout time.Duration
	broken  error
	headers string // header lines every publish carries (bench's time fields)
}

// needName refuses an empty name before anything is sent: it cannot be
// expressed in a route's path.
func needName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s", client.ErrInvalidArgument, what)
	}
	return nil
}

// maxAnswer bounds an answer's body: far above any value or batch answer
// the daemon sends.
const maxAnswer = 256 << 20

// SetHeaders sets header lines ("Name: value\r\n" each) that every
// publish carries from now on (bench's time fields).
func (c *Conn) SetHeaders(lines string) { c.headers = lines }

// Dial opens a Conn to the daemon's socket. timeout bounds each call
// (zero: no bound).
func Dial(ctx context.Context, socketPath string, timeout time.Duration) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", client.ErrUnreachable, socketPath, err)
	}
	return &Conn{
		socket:  socketPath,
		nc:      nc,
		r:       bufio.NewReaderSize(nc, 64<<10),
		ua:      "cachecast-go-client",
		timeout: timeout,
	}, nil
}

// Close closes the connection.
func (c *Conn) Close() error {
	if c.broken == nil {
		c.broken = client.ErrClosed
	}
	return c.nc.Close()
}

// answer is what roundTrip reads back.
type answer struct {
	status int
	header answerHeader
	body   []byte // valid until the next call
}

// answerHeader holds the header fields the client reads.
type answerHeader struct {
	contentLength    int64 // -1: none
	chunked, close   bool
	origin, seq, hlc string
	time, tag        string
}

// roundTrip writes the request in c.buf and reads the answer. Any error
// breaks the connection.
func (c *Conn) roundTrip() (answer, error) {
	if c.broken != nil {
		return answer{}, c.broken
	}
	if c.timeout > 0 {
		c.nc.SetDeadline(time.Now().Add(c.timeout))
	}
	a, err := c.exchange()
	if err != nil {
		c.nc.Close()
		if errors.Is(err, client.ErrBadResponse) {
			c.broken = err
		} else {
			c.broken = fmt.Errorf("client: connection to %s: %w", c.socket, err)
		}
		return answer{}, c.broken
	}
	if a.header.close {
		c.nc.Close()
		c.broken = fmt.Errorf("client: connection to %s: closed by the daemon", c.socket)
	}
	return a, nil
}

func (c *Conn) exchange() (answer, error) {
	if _, werr := c.nc.Write(c.buf); werr != nil {
		// The daemon answers some requests before it has read them whole
		// (413 for a body over its limit) and closes: its answer, already
		// here, is what the caller needs, not the broken pipe. The
		// connection is spent either way.
		c.nc.SetReadDeadline(time.Now().Add(time.Second))
		a, err := c.readAnswer()
		if err != nil {
			return answer{}, werr
		}
		a.header.close = true
		return a, nil
	}
	return c.readAnswer()
}

// readAnswer reads one answer, its body into c.body.
func (c *Conn) readAnswer() (answer, error) {
	var err error
	var a answer
	a.status, a.header, err = readHead(c.r)
	if err != nil {
		return answer{}, err
	}
	c.body, err = readBody(c.r, a.status, a.header, c.body[:0])
	if err != nil {
		return answer{}, err
	}
	a.body = c.body
	return a, nil
}

// readHead reads a status line and header fields. It is the decoder of
// the raw answers (FuzzReadAnswer).
func readHead(r *bufio.Reader) (int, answerHeader, error) {
	h := answerHeader{contentLength: -1}
	line, err := readLine(r)
	if err != nil {
		return 0, h, err
	}
	// "HTTP/1.1 200 OK"
	// HTTP/1.1 only: the daemon answers our HTTP/1.1 requests in kind.
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) || (len(line) > 12 && line[12] != ' ') {
		return 0, h, fmt.Errorf("%w: status line %q", client.ErrBadResponse, line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 {
		return 0, h, fmt.Errorf("%w: status line %q", client.ErrBadResponse, line)
	}
	for n := 0; ; n++ {
		if n > 100 {
			return 0, h, fmt.Errorf("%w: more than 100 header fields", client.ErrBadResponse)
		}
		line, err := readLine(r)
		if err != nil {
			return 0, h, err
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || !isToken(name) || !isFieldValue(value) {
			return 0, h, fmt.Errorf("%w: header line %q", client.ErrBadResponse, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "Content-Length"):
			// Digits only, as net/http reads it: ParseInt takes a sign.
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || !allDigits(value) || (h.contentLength >= 0 && h.contentLength != n) {
				return 0, h, fmt.Errorf("%w: Content-Length %q", client.ErrBadResponse, value)
			}
			h.contentLength = n
		case asciiEqualFold(name, "Transfer-Encoding"):
			if !asciiEqualFold(value, "chunked") {
				return 0, h, fmt.Errorf("%w: Transfer-Encoding %q", client.ErrBadResponse, value)
			}
			h.chunked = true
		case asciiEqualFold(name, "Connection"):
			h.close = asciiEqualFold(value, "close")
		case asciiEqualFold(name, "Cachecast-Origin"):
			h.origin = string(value)
		case asciiEqualFold(name, "Cachecast-Seq"):
			h.seq = string(value)
		case asciiEqualFold(name, "Cachecast-Hlc"):
			h.hlc = string(value)
		case asciiEqualFold(name, "Cachecast-Time"):
			h.time = string(value)
		case asciiEqualFold(name, "Cachecast-Tag"):
			h.tag = string(value)
		}
	}
	if status < 200 {
		// No 1xx is ever asked for (no Expect: 100-continue).
		return 0, h, fmt.Errorf("%w: unexpected status %d", client.ErrBadResponse, status)
	}
	if h.chunked {
		h.contentLength = -1
	}
	return status, h, nil
}

// readLine reads one CRLF- (or LF-) terminated line of at most 64 KiB.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: a header line longer than %d bytes", client.ErrBadResponse, r.Size())
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// isToken reports whether b is an RFC 9110 token, as a field name must be.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

// isFieldValue reports whether b holds only what a field value may:
// visible characters, space, tab, and bytes from 0x80 (obs-text).
func isFieldValue(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(s) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// readBody reads the body the header announces, appended to dst.
func readBody(r *bufio.Reader, status int, h answerHeader, dst []byte) ([]byte, error) {
	switch {
	case status == http.StatusNoContent || status == http.StatusNotModified:
		return dst, nil // never a body, whatever the header says
	case h.chunked:
		b, err := io.ReadAll(io.LimitReader(httputil.NewChunkedReader(r), maxAnswer+1))
		if err != nil {
			return nil, fmt.Errorf("%w: chunked body: %v", client.ErrBadResponse, err)
		}
		if len(b) > maxAnswer {
			return nil, fmt.Errorf("%w: a body larger than %d bytes", client.ErrBadResponse, maxAnswer)
		}
		// The trailer section, usually empty, ends with an empty line: a
		// CRLF, strictly (net/http does not take a bare LF there).
		for n := 0; ; n++ {
			line, err := r.ReadSlice('\n')
			if err != nil {
				if err == io.EOF || errors.Is(err, bufio.ErrBufferFull) {
					err = fmt.Errorf("%w: trailer: %v", client.ErrBadResponse, err)
				}
				return nil, err
			}
			if len(line) < 2 || line[len(line)-2] != '\r' {
				return nil, fmt.Errorf("%w: trailer line without CRLF", client.ErrBadResponse)
			}
			if len(line) == 2 {
				break
			}
			if name, value, ok := bytes.Cut(line[:len(line)-2], []byte{':'}); !ok || !isToken(name) || !isFieldValue(value) {
				return nil, fmt.Errorf("%w: trailer line %q", client.ErrBadResponse, line)
			}
			if n > 100 {
				return nil, fmt.Errorf("%w: more than 100 trailer fields", client.ErrBadResponse)
			}
		}
		return append(dst, b...), nil
	case h.contentLength < 0:
		// The daemon always announces its bodies; reading to EOF would
		// need the connection closed.
		return nil, fmt.Errorf("%w: an answer without Content-Length", client.ErrBadResponse)
	case h.contentLength > maxAnswer:
		return nil, fmt.Errorf("%w: a body of %d bytes", client.ErrBadResponse, h.contentLength)
	}
	n := int(h.contentLength)
	if cap(dst)-len(dst) < n {
		dst = append(make([]byte, 0, len(dst)+n), dst...)
	}
	body := dst[len(dst) : len(dst)+n]
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return dst[:len(dst)+n], nil
}

// startRequest begins c.buf with a request line and the common fields.
func (c *Conn) startRequest(method string, parts []string) {
	c.buf = append(c.buf[:0], method...)
	c.buf = append(c.buf, ' ')
	for i, p := range parts {
		if i%2 == 1 {
			p = wire.EscapeSegment(p) // a name; the others are the route's
		}
		c.buf = append(c.buf, p...)
	}
	c.buf = append(c.buf, " HTTP/1.1\r\nHost: cachecast\r\nUser-Agent: "...)
	c.buf = append(c.buf, c.ua...)
	c.buf = append(c.buf, "\r\n"...)
}

// endRequest ends the header with the body's type and length, then adds
// the body.
func (c *Conn) endRequest(ctype string, body []byte) {
	if ctype != "" {
		c.buf = append(c.buf, "Content-Type: "...)
		c.buf = append(c.buf, ctype...)
		c.buf = append(c.buf, "\r\n"...)
	}
	c.buf = append(c.buf, "Content-Length: "...)
	c.buf = strconv.AppendInt(c.buf, int64(len(body)), 10)
	c.buf = append(c.buf, "\r\n\r\n"...)
	c.buf = append(c.buf, body...)
}

func (a *answer) apiError() error {
	if a.status >= 200 && a.status <= 299 {
		return nil
	}
	return client.ParseAPIError(a.status, a.body)
}

// Get is client.Client.Get on this connection.
func (c *Conn) Get(topic, key string) (client.Value, error) {
	if err := needName("topic", topic); err != nil {
		return client.Value{}, err
	}
	if err := needName("key", key); err != nil {
		return client.Value{}, err
	}
	c.startRequest(http.MethodGet, []string{"/v1/topics/", topic, "/keys/", key})
	c.buf = append(c.buf, "\r\n"...)
	a, err := c.roundTrip()
	if err != nil {
		return client.Value{}, err
	}
	if err := a.apiError(); err != nil {
		return client.Value{}, err
	}
	h := &a.header
	v, err := client.ParseValue(h.tag, h.origin, h.seq, h.hlc, h.time)
	if err != nil {
		return client.Value{}, err
	}
	v.Bytes = bytes.Clone(a.body)
	if v.Bytes == nil {
		v.Bytes = []byte{}
	}
	return v, nil
}

// Publish is client.Client.Publish on this connection (PUT; with an empty key,
// POST of one message).
func (c *Conn) Publish(topic, key string, value []byte, tag string) (client.PutResult, error) {
	if err := needName("topic", topic); err != nil {
		return client.PutResult{}, err
	}
	if key == "" {
		a, err := c.postMessages(topic, []client.Message{{Tag: tag, Value: value}}, "application/json")
		if err != nil {
			return client.PutResult{}, err
		}
		rs, err := results(a, 1)
		if err != nil {
			return client.PutResult{}, err
		}
		return rs[0], nil
	}
	c.startRequest(http.MethodPut, []string{"/v1/topics/", topic, "/keys/", key})
	c.buf = append(c.buf, c.headers...)
	if tag != "" {
		c.buf = append(c.buf, "Cachecast-Tag: "...)
		c.buf = append(c.buf, tag...)
		c.buf = append(c.buf, "\r\n"...)
	}
	c.endRequest("application/octet-stream", value)
	a, err := c.roundTrip()
	if err != nil {
		return client.PutResult{}, err
	}
	if err := a.apiError(); err != nil {
		return client.PutResult{}, err
	}
	return client.ParseResult(a.body)
}

// PublishBatch is client.Client.PublishBatch on this connection, but for
// what it returns: how many of the messages were stored with a status
// other than ok (client.PutResult.OK), the one thing of the results a
// benchmark reads. An answer whose every one of len(msgs) results says
// "status":"ok" is taken as it is, by counting (a tenth of the CPU of
// parsing the results, which was half the client's on a batch); any other
// answer is parsed whole.
func (c *Conn) PublishBatch(topic string, msgs []client.Message) (notOK int, err error) {
	if err := needName("topic", topic); err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	a, err := c.postMessages(topic, msgs, "application/x-ndjson")
	if err != nil {
		return 0, err
	}
	if bytes.Count(a.body, []byte(`"status":"ok"`)) == len(msgs) && bytes.Count(a.body, []byte(`"status":`)) == len(msgs) {
		return 0, nil
	}
	rs, err := results(a, len(msgs))
	for _, r := range rs {
		if !r.OK() {
			notOK++
		}
	}
	return notOK, err
}

// results parses the answer to a POST of n messages.
func results(a answer, n int) ([]client.PutResult, error) {
	rs, err := client.ParseResults(a.body)
	if err != nil {
		return nil, fmt.Errorf("POST messages: %w", err)
	}
	if len(rs) != n {
		return nil, fmt.Errorf("%w: %d results for %d messages", client.ErrBadResponse, len(rs), n)
	}
	return rs, nil
}

// postMessages sends msgs in one POST of ctype and reads the answer,
// refused when it is an error.
func (c *Conn) postMessages(topic string, msgs []client.Message, ctype string) (answer, error) {
	if err := client.CheckMessages(msgs); err != nil {
		return answer{}, err
	}
	c.startRequest(http.MethodPost, []string{"/v1/topics/", topic, "/messages"})
	c.buf = append(c.buf, c.headers...)
	c.buf = append(c.buf, "Content-Type: "...)
	c.buf = append(c.buf, ctype...)
	c.buf = append(c.buf, "\r\nContent-Length: "...)
	// The length goes before the body: leave room, encode, then fill it in.
	lenAt := len(c.buf)
	c.buf = append(c.buf, "0000000000\r\n\r\n"...)
	start := len(c.buf)
	for i := range msgs {
		c.buf = wire.AppendMessage(c.buf, msgs[i].Key, msgs[i].Tag, msgs[i].Value, msgs[i].Delete)
		c.buf = append(c.buf, '\n')
	}
	n := strconv.Itoa(len(c.buf) - start)
	copy(c.buf[lenAt:], "          "[:10-len(n)]) // leading spaces: optional white space
	copy(c.buf[lenAt+10-len(n):], n)
	a, err := c.roundTrip()
	if err != nil {
		return answer{}, err
	}
	return a, a.apiError()
}

// allDigits reports whether b is one or more ASCII digits.
func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}
