// Package bench is the load generator of `cachecast bench`: it publishes
// or reads through the daemon's socket over a number of connections (raw
// HTTP/1.1 connections, light on CPU so that the daemon and not the
// client is measured, or the Go client), or reads the shared view, and
// reports the throughput and the latency of each request. The command's
// flags and help are the CLI's (cmd/cachecast); this package is what runs.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/cmd/cachecast/internal/rawconn"
	"github.com/cachecast/cachecast/localview"
)

// Options say what a run measures and where the daemon is.
type Options struct {
	// The command's flags of the same names: --count, --size, --conns,
	// --batch, --keys, --mode, --topic, --tag, --transport, --expires-in,
	// --effective-at (see `cachecast help bench`).
	Count, Size, Conns, Batch, Keys int
	Mode, Topic, Tag, Transport     string
	ExpiresIn                       time.Duration
	EffectiveAt                     string

	// Socket and Timeout are the daemon's socket and the bound on each
	// request; ViewFile is its shared view, for Mode local-get.
	Socket   string
	Timeout  time.Duration
	ViewFile string
	// Progress, when set, shows the run's progress: a bar redrawn ten
	// times a second when ProgressTTY, else a line a second.
	Progress    io.Writer
	ProgressTTY bool
}

// Check says what is wrong with o, in the words of the command's flags,
// or nil.
func (o *Options) Check() error {
	switch {
	case o.Count < 1:
		return errors.New("--count must be at least 1")
	case o.Size < 0:
		return errors.New("--size must be 0 or more")
	case o.Conns < 1:
		return errors.New("--conns must be at least 1")
	case o.Batch < 0:
		return errors.New("--batch must be 0 or more")
	case o.Keys < 1:
		return errors.New("--keys must be at least 1")
	case o.Mode != "put" && o.Mode != "get" && o.Mode != "local-get":
		return errors.New("--mode must be put, get or local-get")
	case o.Transport != "conn" && o.Transport != "http":
		return errors.New("--transport must be conn or http")
	case o.Mode != "put" && o.Batch > 0:
		return errors.New("--batch applies to --mode put only (the API has no batch get)")
	case o.ExpiresIn < 0:
		return errors.New("--expires-in must be 0 or more")
	case o.EffectiveAt != "" && !isInstant(o.EffectiveAt):
		return errors.New("--effective-at must be Unix milliseconds or an RFC 3339 time")
	case (o.ExpiresIn > 0 || o.EffectiveAt != "") && (o.Mode != "put" || o.Transport != "conn"):
		return errors.New("--expires-in and --effective-at need --mode put and --transport conn")
	}
	return nil
}

// Report is what a run measured.
type Report struct {
	Mode       string  `json:"mode"`
	Messages   int     `json:"messages"`
	Requests   int     `json:"requests"`
	Size       int     `json:"size"`
	Conns      int     `json:"conns"`
	Batch      int     `json:"batch"`
	Keys       int     `json:"keys"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"`
	P50        float64 `json:"p50_us"`
	P99        float64 `json:"p99_us"`
	P999       float64 `json:"p999_us"`
	Max        float64 `json:"max_us"`
	Warnings   int     `json:"warnings"` // results stored with a status other than ok
}

func key(i int) string { return fmt.Sprintf("bench-%08d", i) }

// Run measures what o says and reports it. It fails on the first request
// that fails, and when ctx ends first.
func Run(ctx context.Context, o Options) (Report, error) {
	keys := make([]string, o.Keys)
	for i := range keys {
		keys[i] = key(i)
	}
	// Printable bytes: values travel as JSON text in batches, not base64.
	value := []byte(strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz", o.Size/36+1)[:o.Size])

	if o.Mode != "put" {
		if err := preload(ctx, o, keys, value); err != nil {
			return Report{}, fmt.Errorf("publishing the keys to get: %w", err)
		}
	}
	if o.Mode == "local-get" {
		if err := waitLocalKeys(ctx, o.ViewFile, o.Topic, keys, o.Size); err != nil {
			return Report{}, err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &run{o: o, keys: keys, value: value, per: max(o.Batch, 1),
		times: timeHeaders(o, time.Now()), cancel: cancel, lats: make([][]time.Duration, o.Conns)}
	b.requests = (o.Count + b.per - 1) / b.per
	stopProgress := startProgress(o, "bench", int64(o.Count), &b.done)
	start := time.Now()
	b.wg.Add(o.Conns)
	for w := range o.Conns {
		go b.worker(ctx, w)
	}
	b.wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	if b.firstErr != nil {
		return Report{}, fmt.Errorf("after %d messages: %w", b.done.Load(), b.firstErr)
	}
	if err := ctx.Err(); err != nil {
		return Report{}, fmt.Errorf("interrupted after %d messages", b.done.Load())
	}
	return b.report(elapsed), nil
}

// run is one run of bench: its connections' workers take requests
// in turn (next) until count messages are done or one fails.
type run struct {
	o        Options
	keys     []string
	value    []byte
	per      int    // messages a request
	requests int    // requests in all
	times    string // the time headers every PUT carries (timeHeaders)
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	next     atomic.Int64 // next request index to take
	done     atomic.Int64 // messages done
	warnings atomic.Int64 // results stored with a status other than ok
	errOnce  sync.Once
	firstErr error
	lats     [][]time.Duration // each worker's request latencies
}

// fail keeps the run's first error and stops the other workers.
func (b *run) fail(err error) {
	b.errOnce.Do(func() { b.firstErr = err; b.cancel() })
}

// worker w sends requests on a connection of its own until none are left,
// the run fails or ctx ends.
func (b *run) worker(ctx context.Context, w int) {
	defer b.wg.Done()
	lat := make([]time.Duration, 0, b.requests/b.o.Conns+1)
	defer func() { b.lats[w] = lat }()
	if b.o.Mode == "local-get" {
		if err := localWorker(ctx, b.o.ViewFile, b.o, b.keys, &b.next, &b.done, &lat); err != nil {
			b.fail(err)
		}
		return
	}
	c, err := dial(ctx, b.o, b.times)
	if err != nil {
		b.fail(err)
		return
	}
	defer c.Close()
	var msgs []client.Message
	if b.o.Batch > 0 {
		msgs = make([]client.Message, b.o.Batch)
	}
	for ctx.Err() == nil {
		r := int(b.next.Add(1) - 1)
		if r >= b.requests {
			break
		}
		start := time.Now()
		n, err := b.request(c, msgs, r)
		if err != nil {
			if ctx.Err() == nil {
				b.fail(err)
			}
			break
		}
		lat = append(lat, time.Since(start))
		b.done.Add(int64(n))
	}
}

// request sends request r on c (msgs is the worker's batch buffer) and
// says how many messages it carried.
func (b *run) request(c conn, msgs []client.Message, r int) (int, error) {
	o := b.o
	first, n := r*b.per, min(b.per, o.Count-r*b.per)
	switch {
	case o.Mode == "get":
		v, err := c.Get(o.Topic, b.keys[first%o.Keys])
		if err == nil && len(v.Bytes) != o.Size {
			err = fmt.Errorf("get %s: %d bytes, want %d", b.keys[first%o.Keys], len(v.Bytes), o.Size)
		}
		return n, err
	case o.Batch == 0:
		res, err := c.Publish(o.Topic, b.keys[first%o.Keys], b.value, o.Tag)
		if err == nil && !res.OK() {
			b.warnings.Add(1)
		}
		return n, err
	default:
		for i := range n {
			msgs[i] = client.Message{Key: b.keys[(first+i)%o.Keys], Tag: o.Tag, Value: b.value}
		}
		notOK, err := c.PublishBatch(o.Topic, msgs[:n])
		b.warnings.Add(int64(notOK))
		return n, err
	}
}

// report sums the run up once every worker is done.
func (b *run) report(elapsed time.Duration) Report {
	o := b.o
	all := slices.Concat(b.lats...)
	slices.Sort(all)
	return Report{
		Mode: o.Mode, Messages: o.Count, Requests: len(all), Size: o.Size, Conns: o.Conns,
		Batch: o.Batch, Keys: o.Keys, Seconds: elapsed.Seconds(),
		MsgsPerSec: float64(o.Count) / elapsed.Seconds(),
		MBPerSec:   float64(o.Count) * float64(o.Size) / elapsed.Seconds() / 1e6,
		P50:        micros(percentile(all, 0.50)),
		P99:        micros(percentile(all, 0.99)),
		P999:       micros(percentile(all, 0.999)),
		Max:        micros(percentile(all, 1)),
		Warnings:   int(b.warnings.Load()),
	}
}

// preload publishes every key once, in batches of up to 1000, so
// that the GETs find them.
func preload(ctx context.Context, o Options, keys []string, value []byte) error {
	c, err := dial(ctx, o, "")
	if err != nil {
		return err
	}
	defer c.Close()
	var done atomic.Int64
	stop := startProgress(o, "preload", int64(len(keys)), &done)
	defer stop()
	msgs := make([]client.Message, 0, 1000)
	for i := 0; i < len(keys); i += 1000 {
		msgs = msgs[:0]
		for _, k := range keys[i:min(i+1000, len(keys))] {
			msgs = append(msgs, client.Message{Key: k, Tag: o.Tag, Value: value})
		}
		if _, err := c.PublishBatch(o.Topic, msgs); err != nil {
			return err
		}
		done.Add(int64(len(msgs)))
	}
	return nil
}

// waitLocalKeys waits until the shared view at path holds every key with
// a value of size bytes (the daemon mirrors the preload within
// microseconds; this bounds the wait at 30s).
func waitLocalKeys(ctx context.Context, path, topic string, keys []string, size int) error {
	deadline := time.Now().Add(30 * time.Second)
	var r *localview.Reader
	var err error
	for {
		if r == nil {
			r, err = localview.Open(path)
		}
		if r != nil {
			i := 0
			for ; i < len(keys); i++ {
				var v []byte
				if v, _, _, err = r.Get(topic, keys[i]); err != nil || len(v) != size {
					break
				}
			}
			if i == len(keys) {
				return r.Close()
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if r != nil {
				r.Close()
			}
			return fmt.Errorf("--view-file %s: the view does not hold the %d keys: %v", path, len(keys), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// localWorker is a local-get worker: its own reader of the view, each read
// into one reused buffer (no allocation), timed alone.
func localWorker(ctx context.Context, path string, o Options, keys []string, next, done *atomic.Int64, lat *[]time.Duration) error {
	r, err := localview.Open(path)
	if err != nil {
		return fmt.Errorf("--view-file: %w", err)
	}
	defer r.Close()
	buf := make([]byte, 0, o.Size+64)
	for ctx.Err() == nil {
		i := int(next.Add(1) - 1)
		if i >= o.Count {
			return nil
		}
		start := time.Now()
		v, tag, _, err := r.GetInto(buf, o.Topic, keys[i%o.Keys])
		d := time.Since(start)
		if err != nil {
			return fmt.Errorf("read %s: %w", keys[i%o.Keys], err)
		}
		if len(v) != o.Size {
			return fmt.Errorf("read %s: %d bytes, want %d", keys[i%o.Keys], len(v), o.Size)
		}
		buf = tag[:0]
		*lat = append(*lat, d)
		done.Add(1)
	}
	return nil
}

// conn is what a bench worker sends its requests through: a
// rawconn.Conn, or a client.Client limited to one connection.
type conn interface {
	Get(topic, key string) (client.Value, error)
	Publish(topic, key string, value []byte, tag string) (client.PutResult, error)
	// PublishBatch says how many of msgs were stored with a status
	// other than ok.
	PublishBatch(topic string, msgs []client.Message) (notOK int, err error)
	Close() error
}

// dial opens a worker's connection; headers (the time fields, from
// timeHeaders) go into every publish of a rawconn.Conn, the only transport
// Check lets them have.
func dial(ctx context.Context, o Options, headers string) (conn, error) {
	if o.Transport == "http" {
		return &httpConn{ctx: ctx, c: client.New(o.Socket, client.WithTimeout(o.Timeout), client.WithMaxConns(1),
			client.WithUserAgent("cachecast-bench"))}, nil
	}
	c, err := rawconn.Dial(ctx, o.Socket, o.Timeout)
	if err != nil {
		return nil, err
	}
	c.SetHeaders(headers)
	return c, nil
}

// timeHeaders is the header lines that give each message published the
// expiry of --expires-in (after start, in Unix milliseconds) and the
// schedule of --effective-at ("" when neither is set).
func timeHeaders(o Options, start time.Time) string {
	var h string
	if o.ExpiresIn > 0 {
		h += "Cachecast-Expires: " + strconv.FormatInt(start.Add(o.ExpiresIn).UnixMilli(), 10) + "\r\n"
	}
	if o.EffectiveAt != "" {
		h += "Cachecast-Effective-At: " + o.EffectiveAt + "\r\n"
	}
	return h
}

// isInstant reports whether s is an instant as the API takes one (Unix
// milliseconds or RFC 3339), which also keeps it a safe header value.
func isInstant(s string) bool {
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return true
	}
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// httpConn adapts a client.Client to conn.
type httpConn struct {
	ctx context.Context
	c   *client.Client
}

func (h *httpConn) Get(topic, key string) (client.Value, error) { return h.c.Get(h.ctx, topic, key) }
func (h *httpConn) Publish(topic, key string, value []byte, tag string) (client.PutResult, error) {
	return h.c.Publish(h.ctx, topic, key, value, tag)
}
func (h *httpConn) PublishBatch(topic string, msgs []client.Message) (notOK int, err error) {
	rs, err := h.c.PublishBatch(h.ctx, topic, msgs)
	for _, r := range rs {
		if !r.OK() {
			notOK++
		}
	}
	return notOK, err
}
func (h *httpConn) Close() error { return h.c.Close() }

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// WriteText writes r for a reader.
func (r Report) WriteText(w io.Writer) {
	how := "unbatched PUT"
	switch {
	case r.Mode == "get":
		how = "GET"
	case r.Mode == "local-get":
		how = "reads of the shared view"
	case r.Batch > 0:
		how = fmt.Sprintf("batches of %d (NDJSON)", r.Batch)
	}
	conns := "connection"
	if r.Conns > 1 {
		conns += "s"
	}
	fmt.Fprintf(w, "%s: %d messages of %d bytes, %d keys, %d %s, %s\n", r.Mode, r.Messages, r.Size, r.Keys, r.Conns, conns, how)
	fmt.Fprintf(w, "elapsed:    %.3fs\n", r.Seconds)
	fmt.Fprintf(w, "throughput: %.0f msgs/s, %.2f MB/s\n", r.MsgsPerSec, r.MBPerSec)
	fmt.Fprintf(w, "latency per request (%d requests): p50 %s  p99 %s  p99.9 %s  max %s\n",
		r.Requests, fmtMicros(r.P50), fmtMicros(r.P99), fmtMicros(r.P999), fmtMicros(r.Max))
	if r.Warnings > 0 {
		fmt.Fprintf(w, "warnings:   %d messages stored with a status other than ok\n", r.Warnings)
	}
}

func fmtMicros(us float64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%.1fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
}

// startProgress shows done/total on stderr until the returned function is
// called: a bar redrawn ten times a second on a terminal, else a line a
// second. The returned function waits for the drawing goroutine to stop.
func startProgress(o Options, what string, total int64, done *atomic.Int64) (stop func()) {
	if o.Progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := time.Second
		if o.ProgressTTY {
			every = 100 * time.Millisecond
		}
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-quit:
				if o.ProgressTTY {
					fmt.Fprint(o.Progress, "\r\033[K")
				}
				return
			case <-t.C:
				n := done.Load()
				rate := float64(n) / time.Since(start).Seconds()
				if o.ProgressTTY {
					fmt.Fprintf(o.Progress, "\r%s %s %d/%d %.0f msgs/s\033[K", what, bar(n, total, 30), n, total, rate)
				} else {
					fmt.Fprintf(o.Progress, "%s: %d/%d messages (%.0f%%), %.0f msgs/s\n", what, n, total, 100*float64(n)/float64(total), rate)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit); wg.Wait() })
	}
}

func bar(n, total int64, width int) string {
	filled := 0
	if total > 0 {
		filled = int(int64(width) * min(n, total) / total)
	}
	return "[" + strings.Repeat("=", filled) + strings.Repeat(" ", width-filled) + "]" +
		fmt.Sprintf(" %3d%%", 100*min(n, total)/max(total, 1))
}
