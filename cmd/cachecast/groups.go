package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/client"
)

// Consumer groups: watch --group, groups, group reset and the dlq
// commands.

// How a group watch batches its acknowledgements: it sends them every
// groupAckInterval or once groupAckBatch are pending, whichever comes
// first, and once more before it exits.
const (
	groupAckInterval = 100 * time.Millisecond
	groupAckBatch    = 256
)

// watchGroup prints the messages of a clustering subscription and
// acknowledges them after printing (at least once: a message printed but
// not yet acknowledged when the command dies is delivered again, to this
// member or another). batch is how many pending acks trigger a send.
// The final acks go out before the caller closes the subscription:
// closing it ends the membership, and the daemon would hand what is
// still in flight to another member.
func watchGroup(ctx context.Context, e *env, c *client.Client, sub *client.Subscription, topic, group string, batch, count int, asJSON bool) error {
	var pending []string // ids printed, not yet acknowledged
	line := func(w *bufio.Writer, ev client.Event) {
		w.WriteString(ev.ID)
		w.WriteByte('\t')
		w.WriteString(strconv.Itoa(ev.Attempt))
		writeEventFields(w, ev)
	}
	return printEvents(ctx, e, sub, count, asJSON, line, acker{
		every: groupAckInterval,
		mark: func(ev client.Event) bool {
			pending = append(pending, ev.ID)
			return len(pending) >= batch
		},
		// At the end of the stream the member is most likely gone, and its
		// messages with it; the acks are tried all the same.
		send: func(actx context.Context) error {
			if len(pending) == 0 {
				return nil
			}
			if _, err := c.Ack(actx, topic, group, pending, nil); err != nil {
				return fmt.Errorf("acknowledging %d messages: %w", len(pending), err)
			}
			pending = pending[:0]
			return nil
		},
	})
}

// subscribeGroup opens the clustering subscription of watch --group. The
// stream does not end with ctx (an interrupt), only with Close, so that
// watchGroup can send its last acks first; until the stream is open, an
// interrupt aborts it. Call the returned cancel after Close.
func subscribeGroup(ctx context.Context, c *client.Client, topic string, opts client.SubscribeOptions) (*client.Subscription, context.CancelFunc, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	sub, err := c.Subscribe(sctx, topic, opts)
	stop()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return sub, cancel, nil
}

// topicGroup holds the --topic and --group flags of the group and dlq
// commands.
type topicGroup struct{ topic, group string }

func (tg *topicGroup) register(fs *pflag.FlagSet) {
	fs.StringVar(&tg.topic, "topic", "", "the group's topic (required)")
	fs.StringVar(&tg.group, "group", "", "the group (required)")
}

func (tg *topicGroup) check() error {
	if tg.topic == "" || tg.group == "" {
		return usagef("--topic and --group are required")
	}
	return nil
}

var groupsCmd = &command{
	name:    "groups",
	args:    "",
	summary: "list the consumer groups with this node's figures",
	help: `One line per group: its topic and name, its queues, the nodes that host
it, this node's members, this node's figures: backlog (messages not yet
delivered, approximate), in flight (delivered, not acknowledged) and
retries (redeliveries); the dead letters the group holds now (what "dlq
list" lists, the same on every node); and LIVE: "no" when the group has
no live member on any node. Such a group stays listed while it has
positions or dead letters, so that "dlq list", "dlq replay" and "group
reset" can still be pointed at it.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			groups, err := c.Groups(ctx)
			if err != nil {
				return err
			}
			return printGroups(e.stdout, groups)
		}
	},
}

// printGroups prints the groups as a table.
func printGroups(w io.Writer, groups []client.Group) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tGROUP\tQUEUES\tNODES\tLOCAL MEMBERS\tBACKLOG\tINFLIGHT\tRETRIES\tDEAD LETTERS\tLIVE")
	for _, g := range groups {
		live := "yes"
		if !g.Live() {
			live = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n",
			g.Topic, g.Group, g.Queues, len(g.Nodes), len(g.Members), g.Backlog, g.Inflight, g.Retries, g.DLQ, live)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The queues each local member serves, when there are members here.
	header := false
	for _, g := range groups {
		for _, m := range g.Members {
			if !header {
				fmt.Fprintln(tw, "\nTOPIC\tGROUP\tMEMBER\tQUEUES\tINFLIGHT")
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", g.Topic, g.Group, m.ID, queueList(m.Queues), m.Inflight)
		}
	}
	return tw.Flush()
}

// queueList writes queue numbers compactly: 0-5,8.
func queueList(qs []int) string {
	if len(qs) == 0 {
		return "-"
	}
	var b strings.Builder
	for i := 0; i < len(qs); {
		j := i
		for j+1 < len(qs) && qs[j+1] == qs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", qs[i], qs[j])
		} else {
			fmt.Fprintf(&b, "%d", qs[i])
		}
		i = j + 1
	}
	return b.String()
}

// printStatusGroups adds the groups table to status when there are
// groups. A daemon that answers 404 predates consumer groups: nothing is
// printed. Another error is a warning: status is about the node.
func printStatusGroups(ctx context.Context, e *env, c *client.Client) {
	groups, err := c.Groups(ctx)
	var ae *client.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == 404:
	case err != nil:
		fmt.Fprintf(e.stderr, "cachecast status: warning: groups: %v\n", err)
	case len(groups) > 0:
		fmt.Fprintf(e.stdout, "\ngroups\n")
		printGroups(e.stdout, groups)
	}
}

var groupResetCmd = &command{
	name:    "group reset",
	args:    "--topic TOPIC --group GROUP --to POSITION",
	summary: "move a consumer group to a position of its topic (replay or skip)",
	help: `--to is earliest, latest, an offset in the topic on this node, or an
RFC 3339 time. Every queue of the group moves there; members in flight
learn of it by a rebalance. Prints the group's new epoch.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		var tg topicGroup
		tg.register(fs)
		to := fs.String("to", "", "earliest, latest, an offset or an RFC 3339 time (required)")
		return func(ctx context.Context, e *env, args []string) error {
			if err := tg.check(); err != nil {
				return err
			}
			if *to == "" {
				return usagef("--to is required")
			}
			c := g.client()
			defer c.Close()
			epoch, err := c.ResetGroup(ctx, tg.topic, tg.group, *to)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "ok epoch=%d\n", epoch)
			return nil
		}
	},
}

var dlqListCmd = &command{
	name:    "dlq list",
	args:    "--topic TOPIC --group GROUP",
	summary: "list a consumer group's dead letters",
	help: `One line per dead letter: id, reason (nack or timeout), attempts, when
it was dead-lettered, key, tag, and the value (cut at 40 bytes; "dlq
show" prints it whole). --json prints the API's objects as the daemon
sent them, one per line.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		var tg topicGroup
		tg.register(fs)
		limit := fs.Int("limit", 0, "at most this many dead letters (0: all)")
		asJSON := fs.Bool("json", false, "print the API's JSON objects, one per line")
		return func(ctx context.Context, e *env, args []string) error {
			if err := tg.check(); err != nil {
				return err
			}
			if *limit < 0 {
				return usagef("--limit must be 0 or more")
			}
			c := g.client()
			defer c.Close()
			w := bufio.NewWriter(e.stdout)
			defer w.Flush()
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			if !*asJSON {
				fmt.Fprintln(tw, "ID\tREASON\tATTEMPTS\tDEAD AT\tKEY\tTAG\tVALUE")
			}
			after, n := "", 0
			for {
				page := 1000
				if *limit > 0 {
					page = min(page, *limit-n)
				}
				dls, next, err := c.DeadLetters(ctx, tg.topic, tg.group, after, page)
				if err != nil {
					return err
				}
				for _, d := range dls {
					if *asJSON {
						w.Write(d.Raw) // the daemon's object, byte for byte
						w.WriteByte('\n')
						continue
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", d.ID, d.Reason, d.Attempts,
						d.DeadAt.UTC().Format(timeLayout), dash(d.Key), dash(d.Tag), shortValue(d.Value, 40))
				}
				n += len(dls)
				if next == "" || len(dls) == 0 || (*limit > 0 && n >= *limit) {
					if err := tw.Flush(); err != nil {
						return err
					}
					return w.Flush()
				}
				after = next
			}
		}
	},
}

// shortValue renders a value on one line: as it is when printable, else
// Go-quoted; cut at n bytes (or fewer, not to split a character).
func shortValue(v []byte, n int) string {
	cut := len(v) > n
	if cut {
		for n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
		v = v[:n]
	}
	s := string(v)
	if !printable(v) {
		s = strconv.Quote(s)
	}
	if cut {
		s += "..."
	}
	return s
}

var dlqShowCmd = &command{
	name:    "dlq show",
	args:    "--topic TOPIC --group GROUP ID",
	summary: "show one dead letter of a consumer group, value included",
	help: `Prints the dead letter's fields, then its value: as it is when it is
printable text, Go-quoted otherwise. --json prints the API's object as
the daemon sent it.
An unknown ID is an error (exit status 1).`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		var tg topicGroup
		tg.register(fs)
		asJSON := fs.Bool("json", false, "print the API's JSON object")
		return func(ctx context.Context, e *env, args []string) error {
			if err := tg.check(); err != nil {
				return err
			}
			c := g.client()
			defer c.Close()
			d, err := c.DeadLetter(ctx, tg.topic, tg.group, args[0])
			if errors.Is(err, client.ErrNotFound) {
				return fmt.Errorf("%s/%s: no dead letter %s", tg.topic, tg.group, args[0])
			}
			if err != nil {
				return err
			}
			if *asJSON {
				fmt.Fprintf(e.stdout, "%s\n", d.Raw)
				return nil
			}
			value := string(d.Value)
			if !printable(d.Value) {
				value = strconv.Quote(value)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "id\t%s\n", d.ID)
			fmt.Fprintf(tw, "topic\t%s\n", d.Topic)
			fmt.Fprintf(tw, "group\t%s\n", d.Group)
			fmt.Fprintf(tw, "key\t%s\n", dash(d.Key))
			fmt.Fprintf(tw, "tag\t%s\n", dash(d.Tag))
			fmt.Fprintf(tw, "reason\t%s\n", d.Reason)
			fmt.Fprintf(tw, "attempts\t%d\n", d.Attempts)
			fmt.Fprintf(tw, "origin\t%s\n", client.FormatOrigin(d.Origin))
			fmt.Fprintf(tw, "seq\t%d\n", d.Seq)
			fmt.Fprintf(tw, "time\t%s\n", d.Time.UTC().Format(timeLayout))
			fmt.Fprintf(tw, "dead at\t%s\n", d.DeadAt.UTC().Format(timeLayout))
			fmt.Fprintf(tw, "size\t%d\n", len(d.Value))
			fmt.Fprintf(tw, "value\t%s\n", value)
			return tw.Flush()
		}
	},
}

var dlqReplayCmd = &command{
	name:    "dlq replay",
	args:    "--topic TOPIC --group GROUP (ID... | --all)",
	summary: "deliver dead letters to their consumer group again",
	help: `The messages go to the group again (not to broadcasting subscribers,
and the keys' values do not change) and leave the dead-letter list.
Prints how many were replayed.`,
	minArgs: 0, maxArgs: -1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		var tg topicGroup
		tg.register(fs)
		all := fs.Bool("all", false, "replay every dead letter of the group")
		return func(ctx context.Context, e *env, args []string) error {
			if err := tg.check(); err != nil {
				return err
			}
			if *all == (len(args) > 0) {
				return usagef("give the IDs to replay, or --all")
			}
			c := g.client()
			defer c.Close()
			n, err := c.Replay(ctx, tg.topic, tg.group, args, *all)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "ok replayed=%d\n", n)
			return nil
		}
	},
}
