package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
)

var verifyCmd = &command{
	name:    "verify",
	args:    "",
	summary: "prove every live node holds the same view, or name the nodes and topics that differ",
	help: `The daemon asks every live member for its view digest (a SHA-256 per
topic) once it covers the daemon's own vector, and asks again while writes
in flight keep the vectors apart. For each topic the digest most nodes
hold is the reference. Members the daemon has seen (or remembers) that are
not alive now are listed as unreachable. The exit status is 1 when a node
differs, did not answer or is unreachable, or no common vector was
reached; 0 when all are identical.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		asJSON := fs.Bool("json", false, "print the API's JSON answer")
		return func(ctx context.Context, e *env, args []string) error {
			c := g.client()
			defer c.Close()
			v, err := c.Verify(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				b, err := json.Marshal(v)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "%s\n", b)
			} else {
				differ := map[string][]string{}
				for _, d := range v.Differ {
					differ[d.Node] = d.Topics
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NODE\tTOPICS\tVERDICT")
				for _, n := range v.Nodes {
					switch {
					case n.View == nil:
						fmt.Fprintf(tw, "%s\t-\tno answer: %s\n", n.Name, n.Error)
					case differ[n.Name] != nil:
						fmt.Fprintf(tw, "%s\t%d\tdiffers on %s\n", n.Name, len(n.View.Topics), strings.Join(differ[n.Name], ", "))
					default:
						fmt.Fprintf(tw, "%s\t%d\tsame\n", n.Name, len(n.View.Topics))
					}
				}
				for _, name := range v.Unreachable {
					fmt.Fprintf(tw, "%s\t-\tunreachable: seen as a member, not alive now\n", name)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			switch {
			case v.Identical:
				return nil
			case len(v.Unreachable) > 0:
				return fmt.Errorf("members unreachable: %s (a split, or stopped nodes)", strings.Join(v.Unreachable, ", "))
			case len(v.Differ) > 0:
				var names []string
				for _, d := range v.Differ {
					names = append(names, fmt.Sprintf("%s (%s)", d.Node, strings.Join(d.Topics, ", ")))
				}
				return fmt.Errorf("views differ: %s", strings.Join(names, "; "))
			case !v.CommonVector:
				return errors.New("no common vector: writes kept the nodes apart, or a node did not answer; try again")
			}
			return errors.New("not every node answered")
		}
	},
}
