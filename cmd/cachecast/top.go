package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/client"
)

var topCmd = &command{
	name:    "top",
	args:    "",
	summary: "show the fleet as the daemon sees it, refreshed every second",
	help: `The operator console's fleet view in a terminal (GET /v1/fleet): every
member, up or down, with its data protocol, keys, publish and apply rates
(records of its own origin and of the others, per second, between two
answers), its consistency observer's freshness p99 (a peer's record's
stamp to its apply there) and comparisons with peers' views that agreed,
how far it is behind this node (records, and the age of the
oldest it lacks, per origin), its clock against this node's, and its
flags. The daemon asks every live member over gossip; a member that does
not answer within 2s shows as "no answer". On a terminal the screen is
redrawn; otherwise each answer is printed after the last. Ctrl-C ends it.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		interval := fs.Duration("interval", time.Second, "time between two answers (at least 500ms)")
		count := fs.Int("count", 0, "stop after this many answers (0: until Ctrl-C)")
		return func(ctx context.Context, e *env, args []string) error {
			if *interval < 500*time.Millisecond {
				return usagef("--interval: at least 500ms (the daemon gives one answer for half a second), got %s", *interval)
			}
			c := g.client()
			defer c.Close()
			prev := map[string]*client.NodeSummary{}
			tick := time.NewTicker(*interval)
			defer tick.Stop()
			for n := 0; *count == 0 || n < *count; n++ {
				if n > 0 {
					select {
					case <-ctx.Done():
						return nil
					case <-tick.C:
					}
				}
				f, err := c.Fleet(ctx, 0)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if e.stdoutTTY {
					fmt.Fprint(e.stdout, "\x1b[H\x1b[2J")
				} else if n > 0 {
					fmt.Fprintln(e.stdout)
				}
				if err := printFleet(e.stdout, f, prev); err != nil {
					return err
				}
			}
			return nil
		}
	},
}

// printFleet prints one answer of GET /v1/fleet as a table, the rates
// from prev (each member's previous summary, updated).
func printFleet(w io.Writer, f *client.Fleet, prev map[string]*client.NodeSummary) error {
	up := 0
	for _, m := range f.Members {
		if m.State == "alive" && m.Summary != nil {
			up++
		}
	}
	fmt.Fprintf(w, "%s sees %d of %d members up at %s\n", f.Node, up, len(f.Members), f.Time)
	origins := map[string]string{}
	for _, m := range f.Members {
		origins[m.Origin] = m.Name
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATE\tPROTO\tKEYS\tPUBLISH/S\tAPPLY/S\tFRESH P99\tAGREED\tLAG\tCLOCK\tFLAGS")
	for _, m := range f.Members {
		name, state := m.Name, "down"
		if m.Self {
			name += "*"
		}
		s := m.Summary
		keys, pub, apply, clock, fresh, agreed := "-", "-", "-", "-", "-", "-"
		if s != nil {
			state, keys = "up", fmt.Sprint(s.Keys)
			if p := prev[m.Name]; p != nil {
				pub, apply = summaryRates(p, s)
			}
			clock = fmt.Sprintf("%+.0fms", m.ClockOffsetSeconds*1000)
			prev[m.Name] = s
			if o := s.Observer; o != nil {
				if o.FreshnessP99Seconds > 0 {
					fresh = fmt.Sprintf("%.3gs", o.FreshnessP99Seconds)
				}
				if n := o.Agreed + o.Differed; n > 0 {
					agreed = fmt.Sprintf("%d/%d", o.Agreed, n)
				}
			}
		} else if m.State == "alive" {
			state = "no answer"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, state, m.Protocol, keys, pub, apply,
			fresh, agreed, lagText(m.Lag, origins), clock, strings.Join(memberFlags(m), ", "))
	}
	return tw.Flush()
}

// summaryRates are the publish and apply rates between two summaries of
// one member.
func summaryRates(a, b *client.NodeSummary) (pub, apply string) {
	ta, err1 := time.Parse(time.RFC3339Nano, a.Time)
	tb, err2 := time.Parse(time.RFC3339Nano, b.Time)
	dt := tb.Sub(ta).Seconds()
	if err1 != nil || err2 != nil || dt <= 0 || b.Published < a.Published || b.Applied < a.Applied {
		return "-", "-" // a restart, or a clock stepped back
	}
	return fmt.Sprintf("%.1f", float64(b.Published-a.Published)/dt), fmt.Sprintf("%.1f", float64(b.Applied-a.Applied)/dt)
}

// lagText is how far a member is behind, per origin, named by member
// where one has that origin.
func lagText(lag []client.OriginLag, origins map[string]string) string {
	if len(lag) == 0 {
		return "0"
	}
	var parts []string
	for _, l := range lag {
		o := origins[l.Origin]
		if o == "" {
			o = l.Origin
		}
		parts = append(parts, fmt.Sprintf("%s:%d/%.1fs", o, l.Records, l.Seconds))
	}
	return strings.Join(parts, " ")
}

// memberFlags are the words for what is wrong with a member.
func memberFlags(m client.FleetMember) []string {
	var out []string
	if s := m.Summary; s != nil {
		if s.Degraded != "" {
			out = append(out, "degraded")
		}
		if s.Away != "" {
			out = append(out, "away")
		}
		if s.CatchUp != nil {
			out = append(out, "catching up ("+s.CatchUp.Phase+")")
		}
		if !s.Healthy {
			out = append(out, "unhealthy")
		}
		if s.ClockBehind {
			out = append(out, "clock behind")
		}
	}
	if m.ClockAhead {
		out = append(out, fmt.Sprintf("clock ahead %.1fs", m.ClockAheadSeconds))
	}
	if m.TooOld {
		out = append(out, "protocol too old")
	}
	if m.Error != "" {
		out = append(out, m.Error)
	}
	return out
}
