package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/wire"
)

// maxStdinValue bounds a value read from stdin; the daemon's own limit
// is far lower, this only keeps a mistaken pipe from eating memory.
const maxStdinValue = 256 << 20

var publishCmd = &command{
	name:    "publish",
	args:    "TOPIC KEY [VALUE]",
	summary: "publish a value under a key (the value from stdin when absent)",
	help: `Prints the message's identity: status, seq, origin, hlc, time.
Without VALUE the value is stdin, read to its end, byte for byte (a
file or a pipe: cachecast publish TOPIC KEY < value.bin); when stdin
is a terminal, that is refused as a usage error rather than waiting
for typing. An empty KEY ("") publishes a plain stream message:
delivered to subscribers, not cached. A status other than "ok" means stored locally
but not as replicated as asked; it is printed as a warning on stderr and
the exit status stays 0.`,
	minArgs: 2, maxArgs: 3,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		tag := fs.String("tag", "", "the message's tag (subscribers filter on it)")
		asJSON := fs.Bool("json", false, "print the result as the API's JSON")
		return func(ctx context.Context, e *env, args []string) error {
			var value []byte
			switch {
			case len(args) == 3:
				value = []byte(args[2])
			case e.stdinTTY:
				return usagef("no VALUE given and stdin is a terminal: give the value as an argument, or on stdin from a file or a pipe")
			default:
				b, err := io.ReadAll(io.LimitReader(e.stdin, maxStdinValue+1))
				if err != nil {
					return fmt.Errorf("reading the value from stdin: %w", err)
				}
				if len(b) > maxStdinValue {
					return fmt.Errorf("the value on stdin is larger than %d bytes", maxStdinValue)
				}
				value = b
			}
			c := g.client()
			defer c.Close()
			r, err := c.Publish(ctx, args[0], args[1], value, *tag)
			if err != nil {
				return err
			}
			return printResult(e, r, *asJSON)
		}
	},
}

var delCmd = &command{
	name:    "del",
	args:    "TOPIC KEY",
	summary: "delete a key (publishes a tombstone)",
	minArgs: 2, maxArgs: 2,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		asJSON := fs.Bool("json", false, "print the result as the API's JSON")
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			r, err := c.Delete(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return printResult(e, r, *asJSON)
		}
	},
}

func printResult(e *env, r client.PutResult, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		fmt.Fprintf(e.stdout, "%s seq=%d origin=%s hlc=%d time=%s\n",
			r.Status, r.Seq, client.FormatOrigin(r.Origin), r.HLC, r.Time.UTC().Format(timeLayout))
	}
	if !r.OK() {
		fmt.Fprintf(e.stderr, "cachecast: warning: stored locally, status %q\n", r.Status)
	}
	return nil
}

var getCmd = &command{
	name:    "get",
	args:    "TOPIC KEY",
	summary: "print a key's latest value, raw, on stdout",
	help: `The value is printed as it is stored, byte for byte, when stdout is a
file or a pipe. On a terminal a newline follows it (unless it ends
with one), so that the prompt starts on a line of its own. With -v,
the value's metadata (tag, origin, seq, hlc, time, size) goes to
stderr, so that stdout stays the raw value. A missing key is an error
(exit status 1).

With --local the value is read from the daemon's shared view (the file
--view-file, by default beside the socket) with no request to the
daemon; the read fails unless the daemon said the view was current
less than --max-age ago.`,
	minArgs: 2, maxArgs: 2,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		verbose := fs.BoolP("verbose", "v", false, "show the metadata on stderr")
		local := fs.Bool("local", false, "read the shared view (--view-file) instead of asking the daemon")
		maxAge := fs.Duration("max-age", time.Second, "with --local: fail unless the daemon said the view was current this recently")
		return func(ctx context.Context, e *env, args []string) error {
			var v client.Value
			var err error
			if *local {
				v, err = getLocal(g.viewPath(), args[0], args[1], *maxAge)
			} else {
				c := g.client()
				defer c.Close()
				v, err = c.Get(ctx, args[0], args[1])
			}
			if errors.Is(err, client.ErrNotFound) || errors.Is(err, localview.ErrNotFound) {
				return fmt.Errorf("%s/%s: not found", args[0], args[1])
			}
			if err != nil {
				return err
			}
			if *verbose {
				fmt.Fprintf(e.stderr, "tag:    %s\norigin: %s\nseq:    %d\nhlc:    %d\ntime:   %s\nsize:   %d\n",
					v.Tag, client.FormatOrigin(v.Origin), v.Seq, v.HLC, v.Time.UTC().Format(timeLayout), len(v.Bytes))
			}
			out := v.Bytes
			if e.stdoutTTY && !bytes.HasSuffix(out, []byte("\n")) {
				out = append(out, '\n')
			}
			_, err = e.stdout.Write(out)
			return err
		}
	},
}

// getLocal reads (topic, key) from the shared view at path.
func getLocal(path, topic, key string, maxAge time.Duration) (client.Value, error) {
	r, err := localview.Open(path)
	if err != nil {
		return client.Value{}, fmt.Errorf("--local: %w", err)
	}
	defer r.Close()
	if err := r.Fresh(maxAge); err != nil {
		return client.Value{}, fmt.Errorf("--local: %s: %w", path, err)
	}
	value, tag, st, err := r.Get(topic, key)
	if err != nil {
		return client.Value{}, err
	}
	return client.Value{Bytes: value, Tag: tag, Origin: st.Origin, Seq: st.Seq, HLC: st.HLC, Time: st.Time()}, nil
}

var keysCmd = &command{
	name:    "keys",
	args:    "TOPIC",
	summary: "list a topic's live keys, sorted, one per line",
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		prefix := fs.String("prefix", "", "only keys that start with this")
		after := fs.String("after", "", "only keys greater than this")
		limit := fs.Int("limit", 0, "at most this many keys (0: all)")
		return func(ctx context.Context, e *env, args []string) error {
			if *limit < 0 {
				return usagef("--limit must be 0 or more")
			}
			c := g.client()
			defer c.Close()
			w := bufio.NewWriter(e.stdout)
			defer w.Flush()
			from, n := *after, 0
			for {
				page := 10000
				if *limit > 0 {
					page = min(page, *limit-n)
				}
				keys, next, err := c.Keys(ctx, args[0], *prefix, from, page)
				if err != nil {
					return err
				}
				for _, k := range keys {
					w.WriteString(k)
					w.WriteByte('\n')
				}
				n += len(keys)
				if next == "" || (*limit > 0 && n >= *limit) {
					return w.Flush()
				}
				from = next
			}
		}
	},
}

var pendingCmd = &command{
	name:    "pending",
	args:    "TOPIC",
	summary: "list a topic's scheduled values not in force yet",
	help: `One line a record: the key, the instant it takes effect (each node
flips at that instant of its own clock), and the value, "(delete)" for
a scheduled delete or "(cancel)" for a cancel of the key's records
scheduled then, and the expiry when it has one.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tEFFECTIVE AT\tVALUE\tEXPIRES AT")
			after := ""
			for {
				recs, next, err := c.Pending(ctx, args[0], after, 10000)
				if err != nil {
					return err
				}
				for _, p := range recs {
					v := p.Value
					switch {
					case p.Cancel:
						v = "(cancel)"
					case p.Delete:
						v = "(delete)"
					case p.ValueBase64 != "":
						v = "base64:" + p.ValueBase64
					}
					exp := "-"
					if !p.ExpiresAt.IsZero() {
						exp = p.ExpiresAt.UTC().Format(time.RFC3339Nano)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Key, p.EffectiveAt.UTC().Format(time.RFC3339Nano), v, exp)
				}
				if next == "" {
					return tw.Flush()
				}
				after = next
			}
		}
	},
}

var topicsCmd = &command{
	name:    "topics",
	args:    "",
	summary: "list the topics with their key and message counts",
	help: `The daemon's internal topics, whose names start with '$', are left out
unless --internal: $groups (which node hosts which consumer group),
$offsets (the groups' positions), $owners (who owns each group on each
node), $dlq/TOPIC/GROUP (a group's dead
letters) and $retry/TOPIC/GROUP (dead letters replayed to it). No topic
command reads them; "cachecast groups" and the dlq commands do.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		internal := fs.Bool("internal", false, "list the daemon's internal topics too ($groups, $offsets, $owners, $dlq/..., $retry/...)")
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			list := c.Topics
			if *internal {
				list = c.AllTopics
			}
			topics, err := list(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tKEYS\tMESSAGES")
			for _, t := range topics {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", t.Name, t.Keys, t.Messages)
			}
			return tw.Flush()
		}
	},
}

var statusCmd = &command{
	name:    "status",
	args:    "",
	summary: "show the daemon's node, store figures, health, readiness and groups",
	help: `The exit status is 1 when the daemon answers but is not healthy, not
ready, or degraded (told to join a cluster with --join, it is alone past
its --join-timeout: a wrong cluster key, a firewall, or every other member
gone), the table printed all the same, so that scripts can use it as a
check. The cluster's members follow, and the consumer groups when
there are any (as "cachecast groups" prints them).`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		asJSON := fs.Bool("json", false, "print the API's JSON answer as it is")
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				fmt.Fprintf(e.stdout, "%s\n", strings.TrimSpace(string(st.Raw)))
				return nil
			}
			health, ready := c.Healthz(ctx), c.Readyz(ctx)
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "node\t%s\n", st.Node.Name)
			fmt.Fprintf(tw, "origin\t%s\n", client.FormatOrigin(st.Node.Origin))
			fmt.Fprintf(tw, "version\t%s\n", st.Node.Version)
			fmt.Fprintf(tw, "uptime\t%s\n", st.Uptime.Round(time.Second))
			fmt.Fprintf(tw, "flush\t%s\n", st.Flush)
			fmt.Fprintf(tw, "segments\t%d (%d mapped)\n", st.Store.Segments, st.Store.MappedSegments)
			fmt.Fprintf(tw, "log size\t%s\n", humanBytes(st.Store.LogBytes))
			fmt.Fprintf(tw, "write position\t%d\n", st.Store.WritePos)
			fmt.Fprintf(tw, "flushed position\t%d (%s behind)\n", st.Store.FlushedPos, humanBytes(st.Store.WritePos-st.Store.FlushedPos))
			fmt.Fprintf(tw, "oldest position\t%d\n", st.Store.OldestPos)
			fmt.Fprintf(tw, "records\t%d\n", st.Store.Records)
			fmt.Fprintf(tw, "keys\t%d\n", st.Store.Keys)
			fmt.Fprintf(tw, "health\t%s\n", probeText(health))
			readyText := probeText(ready)
			if ready == nil && st.Degraded != "" {
				readyText = "degraded: " + st.Degraded
			}
			fmt.Fprintf(tw, "ready\t%s\n", readyText)
			var obs struct {
				Observer *wire.ObserverStatus `json:"observer"`
			}
			if json.Unmarshal(st.Raw, &obs) == nil && obs.Observer != nil {
				fmt.Fprintf(tw, "consistency\t%s\n", obs.Observer.Summary)
				for _, d := range obs.Observer.Differences {
					fmt.Fprintf(tw, "view differed\twith %s on %s at %s\n", d.Peer, strings.Join(d.Topics, ", "), d.At)
				}
			}
			if r := st.Repair; r != nil {
				fmt.Fprint(tw, snapshotRepairLine(r))
			}
			if r := st.Repair; r != nil && r.LostRecords > 0 {
				fmt.Fprintf(tw, "repair\t%d records lost to a damaged log, %d held by no live peer (cachecast repair)\n", r.LostRecords, r.Unavailable)
			}
			if r := st.Redis; r != nil {
				fmt.Fprintf(tw, "redis\t%s\n", strings.Trim(r.Socket+" "+r.Addr, " "))
				fmt.Fprintf(tw, "redis clients\t%d (%d tracking, %d subscriptions)\n", r.Connections, r.TrackingClients, r.Subscriptions)
				fmt.Fprintf(tw, "redis commands\t%d (%d protocol errors)\n", r.Commands, r.ProtocolErrors)
				fmt.Fprintf(tw, "invalidations sent\t%d\n", r.Invalidations)
				fmt.Fprintf(tw, "slow clients disconnected\t%d\n", r.SlowDisconnects)
				fmt.Fprintf(tw, "redis connections refused\t%d (--max-connections, --max-connections-per-uid)\n", r.ConnectionsRefused)
				fmt.Fprintf(tw, "redis idle closed\t%d (--redis-idle-timeout)\n", r.IdleClosed)
				fmt.Fprintf(tw, "tracking keys evicted\t%d (--redis-tracking-max-keys)\n", r.TrackingEvictedKeys)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if cl, err := c.Cluster(ctx); err == nil {
				printCluster(e.stdout, cl)
			}
			printStatusGroups(ctx, e, c)
			if health != nil {
				return fmt.Errorf("not healthy: %w", health)
			}
			if ready != nil {
				return fmt.Errorf("not ready: %w", ready)
			}
			if st.Degraded != "" {
				return fmt.Errorf("degraded: %s", st.Degraded)
			}
			return nil
		}
	},
}

// printCluster prints the members as a table, with how far each is
// behind this node, summed over origins.
func printCluster(w io.Writer, cl *client.ClusterStatus) {
	fmt.Fprintf(w, "\nmembers")
	if cl.Replica != "" {
		fmt.Fprintf(w, " (replica: %s)", cl.Replica)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tORIGIN\tDATA ADDR\tLINK\tBEHIND")
	for _, m := range cl.Members {
		link := "-"
		switch {
		case m.Self:
			link = "self"
		case m.Connected:
			link = "up"
		case m.State == "alive":
			link = "down"
		}
		var recs uint64
		var secs float64
		for _, l := range m.Lag {
			recs += l.Records
			secs = max(secs, l.Seconds)
		}
		behind := "0"
		if recs > 0 {
			behind = fmt.Sprintf("%d records, %.1fs", recs, secs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.State, m.Origin, m.DataAddr, link, behind)
	}
	tw.Flush()
	printClocks(w, cl)
}

// printClocks says which members' records arrive stamped ahead of this
// node's clock, and whether this node's clock is the one behind; and
// which members run a build too old for time fields.
func printClocks(w io.Writer, cl *client.ClusterStatus) {
	for _, m := range cl.Members {
		if m.ClockAhead || m.HeldRecords > 0 {
			fmt.Fprintf(w, "clock: %s stamps its records %.1fs ahead of this node's clock (beyond --max-clock-offset; %d held, %d offers refused)\n",
				m.Name, m.ClockAheadSeconds, m.HeldRecords, m.RefusedRecords)
		}
	}
	if cl.ClockBehind {
		fmt.Fprintln(w, "clock: WARNING: this node's clock is behind most of its peers; check its time sync (chronyc tracking, timedatectl)")
	}
	for _, m := range cl.Members {
		if m.TooOld && m.State == "alive" {
			fmt.Fprintf(w, "upgrade: %s speaks data protocol %d: writes with an expiry or a schedule are refused (fleet_too_old) until it runs this build\n", m.Name, m.Protocol)
		}
		if m.HeldBack > 0 {
			fmt.Fprintf(w, "upgrade: this node's records from seq %d on are held back from %s, which cannot read records with time fields\n", m.HeldBack, m.Name)
		}
	}
}

// snapshotRepairLine is status's line for a damaged or lost view snapshot
// ("" when there was none).
func snapshotRepairLine(r *wire.RepairStatus) string {
	aside := ""
	if r.SnapshotSetAside != "" {
		aside = "the view snapshot was damaged: set aside to " + r.SnapshotSetAside + ", "
	}
	switch {
	case r.ViewFromPeer == "waiting":
		return "repair\t" + aside + "the log no longer covers it: waiting for a peer's snapshot (not ready until then)\n"
	case r.ViewFromPeer == "done":
		return "repair\t" + aside + "the log no longer covered it: the view taken from a peer's snapshot\n"
	case aside != "":
		return "repair\t" + aside + "the view rebuilt from the log\n"
	}
	return ""
}

func probeText(err error) string {
	if err == nil {
		return "ok"
	}
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Message != "" {
		return "FAIL: " + ae.Message
	}
	return "FAIL: " + err.Error()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for ; (f >= unit || f <= -unit) && i < 5; i++ {
		f /= unit
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTPE"[i])
}

var watchCmd = &command{
	name:    "watch",
	args:    "TOPIC",
	summary: "print a topic's messages as they arrive, one per line",
	help: `Each line is: offset, key, tag, value, separated by tabs. An empty key
or tag shows as "-"; a tombstone's value as "(deleted)", a cancel of
scheduled values as "(cancel)", a counter increment of N as "+N", an
expiry change (EXPIRE, PERSIST) as "(expiry change)"; a value that is
not printable text is shown Go-quoted ("\xff..."). A message's times
follow, each after a tab, when it has them: "effective TIME" (a
scheduled message, or the instant a cancel cancels), "expires TIME",
and "no expiry" for an expiry change that removes the expiry. --json prints the
API's NDJSON lines instead, byte for byte as the daemon sent them.

--from is earliest, latest (the default, or the cursor's position when
--name names an existing cursor), an offset, or an RFC 3339 time.
--tags keeps messages with one of the tags: "a,b" or "a||b".

With --name the position is a durable cursor: by default (--ack client)
the command advances it after printing, at most every 200ms and on exit,
so a message may be printed twice after a crash but never skipped;
--ack auto lets the daemon advance it as it sends (never twice, but a
message in flight at a crash is skipped).

With --group the command is a member of that consumer group (clustering
mode): each message of the topic goes to one member of the group. Each
line is then: id, attempt (1, or more for a redelivery), key, tag,
value. The command acknowledges what it printed, in batches (every 100ms
or 256 messages, or --max-inflight if fewer) and once more on exit; a
message printed but not acknowledged when the command dies is delivered
again. A group starts where the group stands, not at --from, and is its
own cursor (no --name): "cachecast group reset" moves it.

watch runs until interrupted (exit status 0), until --count messages were
printed, or until the daemon ends the stream (exit status 1, with the
daemon's error when it sent one). A line that does not decode as a
message ends it too (exit status 1, the line on stderr), rather than be
skipped: with --name or --group, what comes after it would be
acknowledged past it.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		from := fs.String("from", "", "earliest, latest, an offset or an RFC 3339 time")
		tags := fs.String("tags", "", `only these tags: "a,b" or "a||b"`)
		name := fs.String("name", "", "durable cursor name: resume where it left off")
		ack := fs.String("ack", "client", "with --name: client (ack after printing) or auto (the daemon acks)")
		count := fs.Int("count", 0, "exit after this many messages (0: no limit)")
		asJSON := fs.Bool("json", false, "print the API's NDJSON lines")
		group := fs.String("group", "", "consume as a member of this consumer group")
		maxInflight := fs.Int("max-inflight", 0, "with --group: messages the daemon may send before they are acknowledged (0: its default, 1000)")
		return func(ctx context.Context, e *env, args []string) error {
			if *ack != "client" && *ack != "auto" {
				return usagef("--ack must be client or auto")
			}
			if *count < 0 {
				return usagef("--count must be 0 or more")
			}
			if *maxInflight < 0 {
				return usagef("--max-inflight must be 0 or more")
			}
			var tagList []string // nil without --tags
			tagList = append(tagList, strings.FieldsFunc(*tags, func(r rune) bool { return r == ',' || r == '|' || unicode.IsSpace(r) })...)
			c := g.client()
			defer c.Close()
			if *group != "" {
				if fs.Changed("from") || fs.Changed("name") || fs.Changed("ack") {
					return usagef("--group takes no --from, --name or --ack: a group keeps its own position")
				}
				opts := client.SubscribeOptions{Mode: client.ModeClustering, Group: *group, Tags: tagList, MaxInflight: *maxInflight, RawLines: *asJSON}
				sub, cancel, err := subscribeGroup(ctx, c, args[0], opts)
				if err != nil {
					return err
				}
				defer cancel()
				defer sub.Close()
				batch := groupAckBatch
				if *maxInflight > 0 {
					batch = min(batch, *maxInflight)
				}
				return watchGroup(ctx, e, c, sub, args[0], *group, batch, *count, *asJSON)
			}
			if fs.Changed("max-inflight") {
				return usagef("--max-inflight needs --group")
			}
			opts := client.SubscribeOptions{From: *from, Name: *name, AutoAck: *name != "" && *ack == "auto", Tags: tagList, RawLines: *asJSON}
			sub, err := c.Subscribe(ctx, args[0], opts)
			if err != nil {
				return err
			}
			defer sub.Close()
			return watch(ctx, e, c, sub, args[0], *name, *name != "" && *ack == "client", *count, *asJSON)
		}
	},
}

// watch prints the messages of a subscription; with clientAck it moves
// the durable cursor name past what it printed, every 200ms and once more
// before it exits.
func watch(ctx context.Context, e *env, c *client.Client, sub *client.Subscription, topic, name string, clientAck bool, count int, asJSON bool) error {
	var (
		pending bool   // an offset printed but not acked
		ackTo   uint64 // the offset after the last printed
	)
	return printEvents(ctx, e, sub, count, asJSON, writeEventLine, acker{
		every: 200 * time.Millisecond,
		mark: func(ev client.Event) bool {
			pending, ackTo = clientAck, ev.Offset+1
			return false
		},
		send: func(actx context.Context) error {
			if !pending {
				return nil
			}
			if _, err := c.SetCursor(actx, name, topic, ackTo); err != nil {
				return fmt.Errorf("acknowledging offset %d: %w", ackTo, err)
			}
			pending = false
			return nil
		},
	})
}

// acker is how a watch acknowledges what it printed: mark records an
// event once its line is out and says whether to acknowledge at once;
// send acknowledges what is marked (nothing when nothing is), every
// period and once more at the end.
type acker struct {
	every time.Duration
	mark  func(client.Event) (now bool)
	send  func(context.Context) error
}

// printEvents prints sub's events on e.stdout, a line each (the daemon's
// own line with asJSON, else line's), until count lines (0: no bound), an
// interrupt (ctx: a normal end) or the end of the stream (an error), and
// acknowledges them through a as it goes and before it returns.
func printEvents(ctx context.Context, e *env, sub *client.Subscription, count int, asJSON bool, line func(*bufio.Writer, client.Event), a acker) error {
	w := bufio.NewWriter(e.stdout)
	defer w.Flush()
	ticker := time.NewTicker(a.every)
	defer ticker.Stop()
	ack := func() error {
		// A bounded context of its own: on interrupt the caller's is done,
		// and the final ack must still go out.
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return a.send(actx)
	}
	printed := 0
	events := sub.Events()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				err := sub.Err()
				ackErr := ack()
				if ctx.Err() != nil {
					return ackErr // interrupted: a normal end
				}
				if err == io.EOF {
					err = errors.New("the daemon ended the stream")
				}
				return errors.Join(err, ackErr)
			}
			if asJSON {
				w.Write(ev.Raw) // the daemon's line, byte for byte
				w.WriteByte('\n')
			} else {
				line(w, ev)
			}
			if err := w.Flush(); err != nil {
				return errors.Join(err, ack()) // what was printed before
			}
			printed++
			now := a.mark(ev)
			if count > 0 && printed >= count {
				return ack()
			}
			if now {
				if err := ack(); err != nil {
					return err
				}
			}
		case <-ticker.C:
			if err := ack(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ack()
		}
	}
}

func writeEventLine(w *bufio.Writer, ev client.Event) {
	w.WriteString(strconv.FormatUint(ev.Offset, 10))
	writeEventFields(w, ev)
}

// writeEventFields writes the end of an event's line: a tab, then key,
// tag and value: "(deleted)" for a delete, "(cancel)" for a cancel,
// "+N" for a counter increment of N (as history prints it), "(expiry
// change)" for an expiry change; then, each after a tab, when set,
// "effective TIME" and "expires TIME", and "no expiry" for an expiry
// change that removes it.
func writeEventFields(w *bufio.Writer, ev client.Event) {
	w.WriteByte('\t')
	w.WriteString(dash(ev.Key))
	w.WriteByte('\t')
	w.WriteString(dash(ev.Tag))
	w.WriteByte('\t')
	switch {
	case ev.Delete:
		w.WriteString("(deleted)")
	case ev.Cancel:
		w.WriteString("(cancel)")
	case ev.ExpiryOf != nil:
		w.WriteString("(expiry change)")
	case ev.IncrementOf != nil:
		w.WriteByte('+')
		w.Write(ev.Value)
	case printable(ev.Value):
		w.Write(ev.Value)
	default:
		w.WriteString(strconv.Quote(string(ev.Value)))
	}
	if !ev.EffectiveAt.IsZero() {
		w.WriteString("\teffective " + ev.EffectiveAt.UTC().Format(timeLayout))
	}
	switch {
	case !ev.ExpiresAt.IsZero():
		w.WriteString("\texpires " + ev.ExpiresAt.UTC().Format(timeLayout))
	case ev.ExpiryOf != nil:
		w.WriteString("\tno expiry")
	}
	w.WriteByte('\n')
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable reports whether b is UTF-8 text without control characters,
// so that printing it raw keeps one message per line.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != ' ' {
			return false
		}
	}
	return true
}

// timeLayout is RFC 3339 with milliseconds, as the API writes times.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"
