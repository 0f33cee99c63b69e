package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/pflag"
)

var cursorsCmd = &command{
	name:    "cursors",
	args:    "",
	summary: "list the node's durable cursors with their owner, offset and lag",
	help: `LAG is the number of messages of the topic past the cursor: a cursor
far behind holds retention back (store_full names it). OWNER is the uid
that created it: only it or an admin may move or delete it.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			cursors, err := c.Cursors(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CURSOR\tTOPIC\tOFFSET\tLAG\tOWNER")
			for _, cur := range cursors {
				owner := "-"
				if cur.OwnerUID != nil {
					owner = strconv.FormatUint(uint64(*cur.OwnerUID), 10)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", cur.Name, cur.Topic, cur.Offset, cur.Lag, owner)
			}
			return tw.Flush()
		}
	},
}

var cursorDeleteCmd = &command{
	name:    "cursor delete",
	args:    "NAME",
	summary: "delete a durable cursor (retention no longer waits for it)",
	help:    `Its owner or an admin may delete a cursor. Prints where it stood.`,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			cur, err := c.DeleteCursor(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "deleted %s topic=%s offset=%d\n", cur.Name, cur.Topic, cur.Offset)
			return nil
		}
	},
}
