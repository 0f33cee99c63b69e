package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cachecast/cachecast/wire"
)

// Values of SubscribeOptions.From besides FromOffset and FromTime.
const (
	FromEarliest = "earliest" // the oldest message the daemon retains
	FromLatest   = "latest"   // only messages published after Subscribe returns
)

// FromOffset is the From for starting at a topic offset.
func FromOffset(offset uint64) string { return strconv.FormatUint(offset, 10) }

// FromTime is the From for starting at the first message stamped at or
// after t.
func FromTime(t time.Time) string { return t.UTC().Format(wire.TimeLayout) }

// Values of SubscribeOptions.Mode.
const (
	// ModeBroadcasting delivers every message to every subscriber (the
	// default).
	ModeBroadcasting = "broadcasting"
	// ModeClustering makes the subscriber a member of a consumer group:
	// each message goes to one member of the group, which acknowledges it
	// with Client.Ack (or Subscription.Ack).
	ModeClustering = "clustering"
)

// MaxEventBytes bounds one line of a subscription stream. The daemon's
// value size limit keeps lines far below it; a longer line means a broken
// stream.
const MaxEventBytes = 64 << 20

// SubscribeOptions choose where a subscription starts and what it
// delivers.
type SubscribeOptions struct {
	// From is FromEarliest, FromLatest, FromOffset(n) or FromTime(t).
	// Empty means the daemon's default: the named cursor's position when
	// Name names an existing cursor, else latest.
	From string
	// Tags keeps only messages with one of these tags; empty keeps all.
	Tags []string
	// Name makes the position durable under this cursor name: it survives
	// restarts of the subscriber and of the daemon. Advance it with
	// AutoAck or Subscription.Ack.
	Name string
	// AutoAck lets the daemon advance the named cursor as it writes each
	// message to the stream (at most once for a subscriber that crashes
	// before handling what it was sent). Without it, Ack advances it
	// (at least once).
	AutoAck bool
	// Mode is ModeBroadcasting (or empty: the daemon's default, the same)
	// or ModeClustering. Clustering needs Group and refuses From and
	// AutoAck: the group's committed position (see ResetGroup) says where
	// it starts.
	Mode string
	// Group is the consumer group in clustering mode. In broadcasting
	// mode the daemon takes it as Name.
	Group string
	// MaxInflight bounds, in clustering mode, the messages the daemon
	// sends this member before it acknowledges them (0: the daemon's
	// default, 1000; at most 100000).
	MaxInflight int
	// RawLines keeps each message's NDJSON line, as the daemon sent it,
	// in Event.Raw (for a caller that passes the lines on, as `cachecast
	// watch --json` prints them).
	RawLines bool
}

// Subscription is a stream of the messages of one topic, in topic offset
// order (in clustering mode, the member's share of them, redeliveries
// out of that order). Read it with Next, or with Events for a channel; not both. Close
// ends it. The daemon keeps pace with the reader: a reader that stops
// reading stops its own stream, nothing is dropped.
type Subscription struct {
	c      *Client
	topic  string
	name   string          // the cursor Ack advances, in broadcasting mode
	group  string          // the group Ack acknowledges to, in clustering mode
	ctx    context.Context // the caller's
	cancel context.CancelFunc
	resp   *http.Response
	r      *bufio.Reader
	closed atomic.Bool
	buf    []byte // line accumulation when a line outgrows r's buffer
	raw    bool   // SubscribeOptions.RawLines

	malformed atomic.Uint64 // lines that did not decode

	once   sync.Once
	events chan Event
	stop   chan struct{}
	wg     sync.WaitGroup
	err    error // why the Events channel closed; read after it closes
}

// Subscribe opens a subscription to topic. It returns once the daemon has
// answered with the stream's headers: from then on, a subscription from
// latest misses nothing that is published. The stream lives until ctx
// ends, Close is called, or the daemon ends it; the client's timeout does
// not apply.
func (c *Client) Subscribe(ctx context.Context, topic string, opts SubscribeOptions) (*Subscription, error) {
	if err := checkName("topic", topic); err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.From != "" {
		q.Set("from", opts.From)
	}
	if len(opts.Tags) > 0 {
		q.Set("tags", strings.Join(opts.Tags, "||"))
	}
	if opts.Name != "" {
		q.Set("name", opts.Name)
	}
	if opts.AutoAck {
		q.Set("ack", "auto")
	}
	if opts.Mode != "" {
		q.Set("mode", opts.Mode)
	}
	if opts.Group != "" {
		q.Set("group", opts.Group)
	}
	if opts.MaxInflight > 0 {
		q.Set("max_inflight", strconv.Itoa(opts.MaxInflight))
	}
	name, group := opts.Name, ""
	switch {
	case opts.Mode == ModeClustering:
		name, group = "", opts.Group
	case name == "":
		name = opts.Group
	}
	subCtx, cancel := context.WithCancel(ctx)
	rq := request{method: http.MethodGet, url: apiURL([]string{"/v1/topics/", topic, "/subscribe"}, q)}
	resp, _, err := c.send(subCtx, rq, false)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Subscription{
		c:      c,
		topic:  topic,
		name:   name,
		group:  group,
		ctx:    ctx,
		cancel: cancel,
		resp:   resp,
		r:      bufio.NewReaderSize(resp.Body, 64<<10),
		raw:    opts.RawLines,
		stop:   make(chan struct{}),
	}, nil
}

// Next blocks until the next message arrives and returns it. It returns
// io.EOF when the daemon ended the stream (it shuts down, for one),
// ErrClosed after Close, the context's error when the caller's context
// ended, and an error wrapping *APIError when the daemon ended the stream
// with an error line ({"error":{...}}; its Status is 0: the stream's own
// status was 200). A line that does not decode is counted (Malformed)
// and returned as an error wrapping ErrBadResponse; the stream stays
// usable, and the next call reads the next line, but the message on that
// line is lost to the caller: one that goes on should say so.
// Next must not be called concurrently with itself or with Events.
func (s *Subscription) Next() (Event, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			return Event{}, s.streamError(err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue // tolerate blank keep-alive lines
		}
		if bytes.HasPrefix(line, []byte(`{"error":`)) {
			return Event{}, fmt.Errorf("client: subscription to %q ended by the daemon: %w", s.topic, ParseAPIError(0, line))
		}
		ev, err := decodeEvent(line)
		if err != nil {
			n := s.malformed.Add(1)
			return Event{}, fmt.Errorf("subscription to %q: line %q (malformed lines so far: %d): %w", s.topic, shortLine(line), n, err)
		}
		if s.raw {
			ev.Raw = bytes.Clone(line)
		}
		return ev, nil
	}
}

// Malformed is the number of lines of the stream that did not decode as
// a message so far.
func (s *Subscription) Malformed() uint64 { return s.malformed.Load() }

// shortLine cuts a line for an error message.
func shortLine(line []byte) []byte {
	if len(line) > 200 {
		return append(line[:200:200], "..."...)
	}
	return line
}

// readLine returns the next line without its newline. The slice is valid
// until the next call.
func (s *Subscription) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	s.buf = append(s.buf[:0], line...)
	for {
		line, err = s.r.ReadSlice('\n')
		s.buf = append(s.buf, line...)
		if len(s.buf) > MaxEventBytes {
			return nil, fmt.Errorf("%w: a subscription line longer than %d bytes", ErrBadResponse, MaxEventBytes)
		}
		switch {
		case err == nil:
			return s.buf[:len(s.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

func (s *Subscription) streamError(err error) error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case s.ctx.Err() != nil:
		return s.ctx.Err()
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, ErrBadResponse):
		return err
	}
	return fmt.Errorf("client: subscription to %q: %w", s.topic, err)
}

// Events returns a channel that delivers the stream's messages; it is
// closed when the stream ends, after which Err says why. The first call
// starts one goroutine that Close stops; later calls return the same
// channel. Do not call Next as well.
func (s *Subscription) Events() <-chan Event {
	s.once.Do(func() {
		s.events = make(chan Event)
		s.wg.Add(1)
		go s.pump()
	})
	return s.events
}

func (s *Subscription) pump() {
	defer s.wg.Done()
	defer close(s.events)
	for {
		ev, err := s.Next()
		if err != nil {
			// A line that does not decode ends the channel too: skipping
			// it would lose its message without a word, and a caller
			// acknowledging what comes next would move its cursor past it.
			s.err = err
			return
		}
		select {
		case s.events <- ev:
		case <-s.stop:
			s.err = ErrClosed
			return
		}
	}
}

// Err is why the Events channel closed: io.EOF when the daemon ended the
// stream, an error wrapping *APIError when it ended it with an error line,
// one wrapping ErrBadResponse for a line that did not decode (the channel
// ends there rather than skip a message), ErrClosed, the context's error,
// or a transport error. It is meaningful only after the channel is closed.
func (s *Subscription) Err() error { return s.err }

// Ack acknowledges ev. In broadcasting mode it advances the subscription's
// named cursor past ev: the next subscription under that name starts at
// ev.Offset+1; it needs SubscribeOptions.Name (or Group). In clustering
// mode it acknowledges ev.ID to the group, one request per call: a
// consumer that handles many messages batches its acks with Client.Ack.
func (s *Subscription) Ack(ctx context.Context, ev Event) error {
	if s.group != "" {
		_, err := s.c.Ack(ctx, s.topic, s.group, []string{ev.ID}, nil)
		return err
	}
	if s.name == "" {
		return fmt.Errorf("%w: Ack on a subscription without a cursor name", ErrInvalidArgument)
	}
	_, err := s.c.SetCursor(ctx, s.name, s.topic, ev.Offset+1)
	return err
}

// Close ends the subscription and waits for the Events goroutine, if any,
// to stop. It is safe to call more than once and concurrently with Next.
func (s *Subscription) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.cancel() // first: it unblocks a Read that Body.Close would wait for
	s.resp.Body.Close()
	s.wg.Wait()
	return nil
}
