package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/pflag"
)

var repairCmd = &command{
	name:    "repair",
	args:    "",
	summary: "list the records of the node's log lost to damage and whether a peer can give them back",
	help: `A record of the daemon's log found damaged (a bad sector, a stray write)
is set aside: its bytes are copied to corrupt/ in the data directory and
the daemon pulls it back from a peer that holds it, which repairs the log
and the view. Listed here until it is back; AVAILABLE says whether a live
peer holds it. The exit status is 1 while some record is lost. Records
that no peer holds will never come back: give them up with "cachecast
repair accept".`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			r := st.Repair
			if r == nil {
				fmt.Fprintln(e.stdout, "no damage found in the log")
				return nil
			}
			fmt.Fprintf(e.stdout, "%d records lost (%d held by no live peer); %d found damaged and %d pulled back since the start\n",
				r.LostRecords, r.Unavailable, r.DamagedTotal, r.RepairedTotal)
			if len(r.Lost) > 0 {
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ORIGIN\tSEQ\tTOPIC\tAVAILABLE\tSEGMENT\tOFFSET\tCOPIED TO")
				for _, lr := range r.Lost {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%s\t%d\t%s\n", lr.Origin, lr.Seq, lr.Topic, lr.Available, lr.Segment, lr.Offset, lr.CopiedTo)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if r.LostRecords > 0 {
				return errors.New("records are lost")
			}
			return nil
		}
	},
}

var repairAcceptCmd = &command{
	name:    "repair accept",
	args:    "",
	summary: "give up the records of the node's log lost to damage (no peer holds them)",
	help: `Once no peer that might hold them is coming back, the records listed by
"cachecast repair" are given up: the node stops waiting for them, its
version vector goes on past them, and a peer that lacks them too is
answered as for a recycled record (it bootstraps from a snapshot). Their
damaged bytes stay in corrupt/. Needs the admin role.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			gone, err := c.AcceptLost(ctx)
			if err != nil {
				return err
			}
			for _, lr := range gone {
				fmt.Fprintf(e.stdout, "gave up %s/%d (%s)\n", lr.Origin, lr.Seq, lr.Topic)
			}
			fmt.Fprintf(e.stdout, "%d records given up\n", len(gone))
			return nil
		}
	},
}

var peersForgetCmd = &command{
	name:    "peers forget",
	args:    "NAME",
	summary: "forget a member removed from the fleet for good, so that it no longer counts as missing",
	help: `A node counts a member it has seen and that is not alive now as missing
(status degraded, verify lists it unreachable and exits 1) and calls it
back, for max(24h, --tombstone-grace). Once a machine is taken out of the
fleet for good, forget it: the node drops it from its remembered peers
and stops calling it back. With --fleet, every alive member is asked to
forget it too, and each one's answer is printed; without it, run this on
each node. A member alive now is refused. The exit status is 1 when a
node did not forget it. Needs the admin role.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		fleet := fs.Bool("fleet", false, "ask every alive member to forget it too")
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			res, err := c.ForgetMember(ctx, args[0], *fleet)
			if err != nil {
				return err
			}
			failed := 0
			for _, n := range res.Nodes {
				switch {
				case n.Error != "":
					failed++
					fmt.Fprintf(e.stdout, "%s: not forgotten: %s\n", n.Name, n.Error)
				case n.Held:
					fmt.Fprintf(e.stdout, "%s: forgot %s\n", n.Name, res.Member)
				default:
					fmt.Fprintf(e.stdout, "%s: did not know %s (nothing to forget)\n", n.Name, res.Member)
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d nodes did not forget %s", failed, res.Member)
			}
			return nil
		}
	},
}
