package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/spf13/pflag"
)

// version is the CLI's version, set at build time as the daemon's is (the
// Makefile's LDFLAGS):
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/cachecast
var version = "dev"

// cliVersion is version, or the module's version when the binary was
// built by `go install ...@v1.2.3` without the Makefile.
func cliVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

// versionTimeout bounds version's question to the daemon, unless
// --timeout says otherwise.
const versionTimeout = 3 * time.Second

var versionCmd = &command{
	name:    "version",
	args:    "",
	summary: "print the CLI's version and the daemon's",
	help: `The first line is this command's version ("cachecast v1.2.3"); the
second, when a daemon answers on the socket, the daemon's version from
/v1/status ("cachecastd v1.2.3"). When none answers (within 3s, or
--timeout), stderr says so and the exit status is still 0: the CLI's
version does not need a daemon.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet, g *globals) func(context.Context, *env, []string) error {
		return func(ctx context.Context, e *env, args []string) error {
			fmt.Fprintf(e.stdout, "cachecast %s\n", cliVersion())
			c := g.client()
			defer c.Close()
			if !fs.Changed("timeout") {
				// A wedged daemon must not hold up the CLI's own version.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, versionTimeout)
				defer cancel()
			}
			st, err := c.Status(ctx)
			if err != nil {
				fmt.Fprintf(e.stderr, "cachecast version: no daemon answered: %v\n", err)
				return nil
			}
			fmt.Fprintf(e.stdout, "cachecastd %s\n", st.Node.Version)
			return nil
		}
	},
}
