package main

import (
	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/internal/manpage"
)

// manPage is cachecast(1), made from the table of commands and their flag
// sets: a new command or flag is in the page without an edit here. The
// defaults shown are the built-in ones, whatever the environment of the
// build says.
func manPage() string {
	e := &env{getenv: func(string) string { return "" }}
	top := pflag.NewFlagSet("cachecast", pflag.ContinueOnError)
	(&globals{}).register(top, e)
	p := manpage.New("cachecast", "1", "command-line client of the cachecast daemon", cliVersion(), "User Commands")
	p.Section("Synopsis")
	p.Literal("cachecast [--socket PATH] COMMAND [flags] [args]\ncachecast help [COMMAND]")
	p.Section("Description")
	p.Para(`cachecast publishes, reads, lists, deletes and watches messages over the Unix socket of cachecastd(8), consumes them in consumer groups and handles their dead letters, shows the daemon's status, and measures it.

The socket is --socket, else $CACHECAST_SOCKET, else ./cachecast.sock (where cachecastd with no flags puts it); the packaged service's is /run/cachecast/cachecast.sock, which the members of the group cachecast may open.`)
	p.Section("Options")
	p.Para("Every command takes these flags, before or after its name:")
	p.Flags(top)
	p.Section("Commands")
	for _, c := range commands {
		p.Item("cachecast "+c.name+" [flags] "+c.args, c.summary+".")
		p.In()
		if c.help != "" {
			p.Para(c.help)
		}
		own := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
		commandFlags(c, e).VisitAll(func(f *pflag.Flag) {
			if top.Lookup(f.Name) == nil {
				own.AddFlag(f)
			}
		})
		if own.HasFlags() {
			p.Para("Flags of " + c.name + ":")
			p.Flags(own)
		}
		p.Out()
	}
	p.Section("Exit status")
	p.Para("0 success, 1 an error (its message on stderr), 2 a usage error.")
	p.Section("Environment")
	p.Item("CACHECAST_SOCKET", "the daemon's socket when --socket is not given.")
	p.Item("CACHECAST_VIEW_FILE", "the daemon's shared view when --view-file is not given.")
	p.Section("See also")
	p.Para("cachecastd(8)")
	return p.String()
}
