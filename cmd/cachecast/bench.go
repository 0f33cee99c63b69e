package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/cmd/cachecast/internal/rawconn"
	"github.com/cachecast/cachecast/localview"
)

var benchCmd = &command{
	name:    "bench",
	args:    "",
	summary: "measure publish or get throughput and latency against the daemon",
	help: `Publishes --count messages of --size bytes over --conns connections
(each sending one request at a time, on the calling goroutine: a raw
HTTP/1.1 connection by default, light on CPU so that the daemon, not
the client, is measured; --transport http uses the Go client), to
--keys distinct keys of --topic. --batch 0 sends one PUT per message;
--batch B sends batches of B messages as NDJSON. --mode get first
publishes the --keys keys (in batches), then measures --count GETs
spread over them. --mode local-get publishes them too, waits until the
shared view (--view-file) has them, then measures --count reads of the
view with no request to the daemon, --conns goroutines each with its
own reader; each read is timed alone (the two clock reads, ~50ns,
are in the latency).

--expires-in D gives every message published an expiry D after the
start (the header Cachecast-Expires, one instant for the run);
--effective-at T schedules every one for the instant T (Unix
milliseconds or RFC 3339, Cachecast-Effective-At), so that runs with
the same T replace each key's pending value, as a price feed does.
Both need --mode put and --transport conn.

Prints throughput (messages/s and MB/s of values, MB = 10^6 bytes) and the
latency of each request (one PUT, one batch, or one GET): p50, p99,
p99.9, max. A progress bar goes to stderr when it is a terminal, a line
a second otherwise.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		var o benchOptions
		fs.IntVar(&o.count, "count", 100000, "messages to publish (or GETs to make)")
		fs.IntVar(&o.size, "size", 100, "value size in bytes")
		fs.IntVar(&o.conns, "conns", 1, "connections, each sending one request at a time")
		fs.IntVar(&o.batch, "batch", 0, "messages per request (0: one PUT per message; else NDJSON batches)")
		fs.IntVar(&o.keys, "keys", 1000, "distinct keys")
		fs.StringVar(&o.mode, "mode", "put", "put, get or local-get (the shared view)")
		fs.StringVar(&o.topic, "topic", "bench", "topic to publish to")
		fs.StringVar(&o.tag, "tag", "", "tag of the messages")
		fs.BoolVar(&o.json, "json", false, "print the figures as one JSON object")
		fs.StringVar(&o.transport, "transport", "conn", "conn (one raw HTTP/1.1 connection per worker, light on CPU) or http (the pooled net/http client)")
		fs.DurationVar(&o.expiresIn, "expires-in", 0, "give every message an expiry this long after the start (0: none)")
		fs.StringVar(&o.effectiveAt, "effective-at", "", "schedule every message for this instant, Unix ms or RFC 3339 (empty: now)")
		return func(ctx context.Context, e *env, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return bench(ctx, e, g, o)
		}
	},
}

type benchOptions struct {
	count, size, conns, batch, keys int
	mode, topic, tag, transport     string
	json                            bool
	expiresIn                       time.Duration
	effectiveAt                     string
}

func (o *benchOptions) validate() error {
	switch {
	case o.count < 1:
		return usagef("--count must be at least 1")
	case o.size < 0:
		return usagef("--size must be 0 or more")
	case o.conns < 1:
		return usagef("--conns must be at least 1")
	case o.batch < 0:
		return usagef("--batch must be 0 or more")
	case o.keys < 1:
		return usagef("--keys must be at least 1")
	case o.mode != "put" && o.mode != "get" && o.mode != "local-get":
		return usagef("--mode must be put, get or local-get")
	case o.transport != "conn" && o.transport != "http":
		return usagef("--transport must be conn or http")
	case o.mode != "put" && o.batch > 0:
		return usagef("--batch applies to --mode put only (the API has no batch get)")
	case o.expiresIn < 0:
		return usagef("--expires-in must be 0 or more")
	case o.effectiveAt != "" && !isInstant(o.effectiveAt):
		return usagef("--effective-at must be Unix milliseconds or an RFC 3339 time")
	case (o.expiresIn > 0 || o.effectiveAt != "") && (o.mode != "put" || o.transport != "conn"):
		return usagef("--expires-in and --effective-at need --mode put and --transport conn")
	}
	return nil
}

// benchReport is what bench prints.
type benchReport struct {
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

func benchKey(i int) string { return fmt.Sprintf("bench-%08d", i) }

func bench(ctx context.Context, e *env, g *globals, o benchOptions) error {
	keys := make([]string, o.keys)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	// Printable bytes: values travel as JSON text in batches, not base64.
	value := []byte(strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz", o.size/36+1)[:o.size])

	if o.mode != "put" {
		if err := benchPreload(ctx, e, g, o, keys, value); err != nil {
			return fmt.Errorf("publishing the keys to get: %w", err)
		}
	}
	if o.mode == "local-get" {
		if err := waitLocalKeys(ctx, g.viewPath(), o.topic, keys, o.size); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &benchRun{o: o, g: g, keys: keys, value: value, per: max(o.batch, 1),
		times: timeHeaders(o, time.Now()), cancel: cancel, lats: make([][]time.Duration, o.conns)}
	b.requests = (o.count + b.per - 1) / b.per
	stopProgress := startProgress(e, "bench", int64(o.count), &b.done)
	start := time.Now()
	b.wg.Add(o.conns)
	for w := range o.conns {
		go b.worker(ctx, w)
	}
	b.wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	if b.firstErr != nil {
		return fmt.Errorf("after %d messages: %w", b.done.Load(), b.firstErr)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted after %d messages", b.done.Load())
	}
	rep := b.report(elapsed)
	if o.json {
		b, _ := json.Marshal(rep)
		fmt.Fprintf(e.stdout, "%s\n", b)
		return nil
	}
	printBenchReport(e.stdout, rep)
	return nil
}

// benchRun is one run of bench: its connections' workers take requests
// in turn (next) until count messages are done or one fails.
type benchRun struct {
	o        benchOptions
	g        *globals
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
func (b *benchRun) fail(err error) {
	b.errOnce.Do(func() { b.firstErr = err; b.cancel() })
}

// worker w sends requests on a connection of its own until none are left,
// the run fails or ctx ends.
func (b *benchRun) worker(ctx context.Context, w int) {
	defer b.wg.Done()
	lat := make([]time.Duration, 0, b.requests/b.o.conns+1)
	defer func() { b.lats[w] = lat }()
	if b.o.mode == "local-get" {
		if err := benchLocal(ctx, b.g.viewPath(), b.o, b.keys, &b.next, &b.done, &lat); err != nil {
			b.fail(err)
		}
		return
	}
	c, err := dialBench(ctx, b.g, b.o.transport, b.times)
	if err != nil {
		b.fail(err)
		return
	}
	defer c.Close()
	var msgs []client.Message
	if b.o.batch > 0 {
		msgs = make([]client.Message, b.o.batch)
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
func (b *benchRun) request(c benchConn, msgs []client.Message, r int) (int, error) {
	o := b.o
	first, n := r*b.per, min(b.per, o.count-r*b.per)
	switch {
	case o.mode == "get":
		v, err := c.Get(o.topic, b.keys[first%o.keys])
		if err == nil && len(v.Bytes) != o.size {
			err = fmt.Errorf("get %s: %d bytes, want %d", b.keys[first%o.keys], len(v.Bytes), o.size)
		}
		return n, err
	case o.batch == 0:
		res, err := c.Publish(o.topic, b.keys[first%o.keys], b.value, o.tag)
		if err == nil && !res.OK() {
			b.warnings.Add(1)
		}
		return n, err
	default:
		for i := range n {
			msgs[i] = client.Message{Key: b.keys[(first+i)%o.keys], Tag: o.tag, Value: b.value}
		}
		rs, err := c.PublishBatch(o.topic, msgs[:n])
		for _, res := range rs {
			if !res.OK() {
				b.warnings.Add(1)
			}
		}
		return n, err
	}
}

// report sums the run up once every worker is done.
func (b *benchRun) report(elapsed time.Duration) benchReport {
	o := b.o
	all := slices.Concat(b.lats...)
	slices.Sort(all)
	return benchReport{
		Mode: o.mode, Messages: o.count, Requests: len(all), Size: o.size, Conns: o.conns,
		Batch: o.batch, Keys: o.keys, Seconds: elapsed.Seconds(),
		MsgsPerSec: float64(o.count) / elapsed.Seconds(),
		MBPerSec:   float64(o.count) * float64(o.size) / elapsed.Seconds() / 1e6,
		P50:        micros(percentile(all, 0.50)),
		P99:        micros(percentile(all, 0.99)),
		P999:       micros(percentile(all, 0.999)),
		Max:        micros(percentile(all, 1)),
		Warnings:   int(b.warnings.Load()),
	}
}

// benchPreload publishes every key once, in batches of up to 1000, so
// that the GETs find them.
func benchPreload(ctx context.Context, e *env, g *globals, o benchOptions, keys []string, value []byte) error {
	c, err := dialBench(ctx, g, o.transport, "")
	if err != nil {
		return err
	}
	defer c.Close()
	var done atomic.Int64
	stop := startProgress(e, "preload", int64(len(keys)), &done)
	defer stop()
	msgs := make([]client.Message, 0, 1000)
	for i := 0; i < len(keys); i += 1000 {
		msgs = msgs[:0]
		for _, k := range keys[i:min(i+1000, len(keys))] {
			msgs = append(msgs, client.Message{Key: k, Tag: o.tag, Value: value})
		}
		if _, err := c.PublishBatch(o.topic, msgs); err != nil {
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

// benchLocal is a local-get worker: its own reader of the view, each read
// into one reused buffer (no allocation), timed alone.
func benchLocal(ctx context.Context, path string, o benchOptions, keys []string, next, done *atomic.Int64, lat *[]time.Duration) error {
	r, err := localview.Open(path)
	if err != nil {
		return fmt.Errorf("--view-file: %w", err)
	}
	defer r.Close()
	buf := make([]byte, 0, o.size+64)
	for ctx.Err() == nil {
		i := int(next.Add(1) - 1)
		if i >= o.count {
			return nil
		}
		start := time.Now()
		v, tag, _, err := r.GetInto(buf, o.topic, keys[i%o.keys])
		d := time.Since(start)
		if err != nil {
			return fmt.Errorf("read %s: %w", keys[i%o.keys], err)
		}
		if len(v) != o.size {
			return fmt.Errorf("read %s: %d bytes, want %d", keys[i%o.keys], len(v), o.size)
		}
		buf = tag[:0]
		*lat = append(*lat, d)
		done.Add(1)
	}
	return nil
}

// benchConn is what a bench worker sends its requests through: a
// rawconn.Conn, or a client.Client limited to one connection.
type benchConn interface {
	Get(topic, key string) (client.Value, error)
	Publish(topic, key string, value []byte, tag string) (client.PutResult, error)
	PublishBatch(topic string, msgs []client.Message) ([]client.PutResult, error)
	Close() error
}

// dialBench opens a worker's connection; headers (the time fields, from
// timeHeaders) go into every publish of a rawconn.Conn, the only transport
// validate lets them have.
func dialBench(ctx context.Context, g *globals, transport, headers string) (benchConn, error) {
	if transport == "http" {
		return &httpBench{ctx: ctx, c: g.client(client.WithMaxConns(1), client.WithUserAgent("cachecast-bench"))}, nil
	}
	c, err := rawconn.Dial(ctx, g.socket, g.timeout)
	if err != nil {
		return nil, err
	}
	c.SetHeaders(headers)
	return c, nil
}

// timeHeaders is the header lines that give each message published the
// expiry of --expires-in (after start, in Unix milliseconds) and the
// schedule of --effective-at ("" when neither is set).
func timeHeaders(o benchOptions, start time.Time) string {
	var h string
	if o.expiresIn > 0 {
		h += "Cachecast-Expires: " + strconv.FormatInt(start.Add(o.expiresIn).UnixMilli(), 10) + "\r\n"
	}
	if o.effectiveAt != "" {
		h += "Cachecast-Effective-At: " + o.effectiveAt + "\r\n"
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

// httpBench adapts a client.Client to benchConn.
type httpBench struct {
	ctx context.Context
	c   *client.Client
}

func (h *httpBench) Get(topic, key string) (client.Value, error) { return h.c.Get(h.ctx, topic, key) }
func (h *httpBench) Publish(topic, key string, value []byte, tag string) (client.PutResult, error) {
	return h.c.Publish(h.ctx, topic, key, value, tag)
}
func (h *httpBench) PublishBatch(topic string, msgs []client.Message) ([]client.PutResult, error) {
	return h.c.PublishBatch(h.ctx, topic, msgs)
}
func (h *httpBench) Close() error { return h.c.Close() }

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func printBenchReport(w io.Writer, r benchReport) {
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
func startProgress(e *env, what string, total int64, done *atomic.Int64) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := time.Second
		if e.stderrTTY {
			every = 100 * time.Millisecond
		}
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-quit:
				if e.stderrTTY {
					fmt.Fprint(e.stderr, "\r\033[K")
				}
				return
			case <-t.C:
				n := done.Load()
				rate := float64(n) / time.Since(start).Seconds()
				if e.stderrTTY {
					fmt.Fprintf(e.stderr, "\r%s %s %d/%d %.0f msgs/s\033[K", what, bar(n, total, 30), n, total, rate)
				} else {
					fmt.Fprintf(e.stderr, "%s: %d/%d messages (%.0f%%), %.0f msgs/s\n", what, n, total, 100*float64(n)/float64(total), rate)
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
