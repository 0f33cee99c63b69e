package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/client"
)

var historyCmd = &command{
	name:    "history",
	args:    "TOPIC KEY",
	summary: "list a key's records in the daemon's log, newest first",
	help: `One line a record of the key in its topic's log on the daemon's node
(GET /v1/topics/{topic}/history/{key}): its offset in the topic, what it
did (write, delete, cancel, expiry: a change of the expiry of one
version, counter: an increment), the value (Go-quoted; hex: for bytes
that are not UTF-8), the tag, and its version (HLC, origin, seq, time).
The log has no index by key: the daemon reads the topic's messages from
the last one back, at most --scan of them, and stops at --limit records;
a last line says when it stopped before the topic's oldest message.`,
	minArgs: 2, maxArgs: 2,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		limit := fs.Int("limit", 20, "at most this many records (1 to 1000)")
		scan := fs.Int("scan", 10000, "read at most this many messages of the topic back (1 to 1000000)")
		asJSON := fs.Bool("json", false, "print the API's JSON answer")
		return func(ctx context.Context, e *env, args []string) error {
			if *limit < 1 || *scan < 1 {
				return usagef("--limit and --scan: at least 1")
			}
			c := g.client()
			defer c.Close()
			h, err := c.KeyHistory(ctx, args[0], args[1], *limit, *scan)
			if err != nil {
				return err
			}
			if *asJSON {
				b, err := json.Marshal(h)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "%s\n", b)
				return nil
			}
			printHistory(e, h)
			return nil
		}
	},
}

// printHistory writes a key's history as a table.
func printHistory(e *env, h *client.KeyHistory) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OFFSET\tKIND\tVALUE\tTAG\tHLC\tORIGIN\tSEQ\tTIME")
	for _, r := range h.Records {
		v := strconv.Quote(r.Value)
		switch {
		case r.Kind == "delete" || r.Kind == "cancel":
			v = "-"
		case r.Kind == "expiry" && r.ExpiresAt == "":
			v = "no expiry"
		case r.Kind == "expiry":
			v = "expires " + r.ExpiresAt
		case r.Binary:
			v = "hex:" + r.Value
		case r.Kind == "counter":
			v = "+" + r.Value
		}
		if r.Truncated {
			v += "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Offset, r.Kind, v, r.Tag, r.HLC, r.Origin, r.Seq, r.Time)
	}
	_ = tw.Flush()
	if h.Truncated {
		fmt.Fprintf(e.stdout, "(read the last %d messages of %s: older records of the key may be in the log; --scan reads further)\n", h.Scanned, h.Topic)
	}
}
