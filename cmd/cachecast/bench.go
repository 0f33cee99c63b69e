package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/cmd/cachecast/internal/bench"
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
		var o bench.Options
		fs.IntVar(&o.Count, "count", 100000, "messages to publish (or GETs to make)")
		fs.IntVar(&o.Size, "size", 100, "value size in bytes")
		fs.IntVar(&o.Conns, "conns", 1, "connections, each sending one request at a time")
		fs.IntVar(&o.Batch, "batch", 0, "messages per request (0: one PUT per message; else NDJSON batches)")
		fs.IntVar(&o.Keys, "keys", 1000, "distinct keys")
		fs.StringVar(&o.Mode, "mode", "put", "put, get or local-get (the shared view)")
		fs.StringVar(&o.Topic, "topic", "bench", "topic to publish to")
		fs.StringVar(&o.Tag, "tag", "", "tag of the messages")
		asJSON := fs.Bool("json", false, "print the figures as one JSON object")
		fs.StringVar(&o.Transport, "transport", "conn", "conn (one raw HTTP/1.1 connection per worker, light on CPU) or http (the pooled net/http client)")
		fs.DurationVar(&o.ExpiresIn, "expires-in", 0, "give every message an expiry this long after the start (0: none)")
		fs.StringVar(&o.EffectiveAt, "effective-at", "", "schedule every message for this instant, Unix ms or RFC 3339 (empty: now)")
		return func(ctx context.Context, e *env, args []string) error {
			if err := o.Check(); err != nil {
				return usagef("%s", err)
			}
			o.Socket, o.Timeout, o.ViewFile = g.socket, g.timeout, g.viewPath()
			o.Progress, o.ProgressTTY = e.stderr, e.stderrTTY
			rep, err := bench.Run(ctx, o)
			if err != nil {
				return err
			}
			if *asJSON {
				b, _ := json.Marshal(rep)
				fmt.Fprintf(e.stdout, "%s\n", b)
				return nil
			}
			rep.WriteText(e.stdout)
			return nil
		}
	},
}
