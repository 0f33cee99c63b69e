// Command cachecast is the command-line client of cachecastd: it publishes,
// reads, lists, deletes and watches messages over the daemon's Unix
// socket, consumes them in consumer groups and handles the groups' dead
// letters, shows the daemon's status, and measures it (bench).
//
//	cachecast [--socket PATH] COMMAND [flags] [args]
//
// Commands: publish, get, del, keys, watch, topics, groups, group reset,
// dlq list, dlq show, dlq replay, status, bench, version, completion, help.
// `cachecast help COMMAND` or `cachecast COMMAND --help` documents each;
// `cachecast --man` prints the manual page cachecast(1) made from the same
// table, and `cachecast completion bash|zsh|fish` a completion script.
//
// The socket is --socket, else $CACHECAST_SOCKET, else ./cachecast.sock
// (where `cachecastd` with no flags puts it). Exit status: 0 success, 1
// an error (its message on stderr), 2 a usage error.
//
// The package is about 2,550 lines and stays one: it is a table of small
// commands (commands.go), each a flag set and a few calls of package
// client, that share the globals, the output and the exit rules of
// main.go; no seam runs between them that a second package would show.
// What runs on its own is out of it: bench's load generator is package
// cmd/cachecast/internal/bench, and its raw HTTP connection
// cmd/cachecast/internal/rawconn.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/client"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// defaultSocket is where cachecastd with no flags listens.
const defaultSocket = "./cachecast.sock"

// env is what a command may touch of the process, so that tests run
// commands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stdinTTY       bool // publish refuses to wait for a value typed at a terminal
	stdoutTTY      bool // get ends a value with a newline
	stderrTTY      bool // draw a progress bar rather than print lines
}

// globals are the flags every command takes.
type globals struct {
	socket  string
	timeout time.Duration
	view    string // --view-file; "" means beside the socket
}

func (g *globals) register(fs *pflag.FlagSet, e *env) {
	def := defaultSocket
	if s := e.getenv("CACHECAST_SOCKET"); s != "" {
		def = s
	}
	fs.StringVar(&g.socket, "socket", def, "the daemon's Unix socket ($CACHECAST_SOCKET)")
	fs.DurationVar(&g.timeout, "timeout", client.DefaultTimeout, "bound on each request (0: none; watch streams are not bounded)")
	fs.StringVar(&g.view, "view-file", e.getenv("CACHECAST_VIEW_FILE"), "the daemon's shared view, for get --local and bench --mode local-get ($CACHECAST_VIEW_FILE; default: beside --socket, .view for .sock)")
}

// viewPath is the shared view file the local reads map: --view-file, or
// the daemon's default (--view-file=auto) beside the socket.
func (g *globals) viewPath() string {
	if g.view != "" {
		return g.view
	}
	return strings.TrimSuffix(g.socket, ".sock") + ".view"
}

func (g *globals) client(opts ...client.Option) *client.Client {
	return client.New(g.socket, append([]client.Option{client.WithTimeout(g.timeout)}, opts...)...)
}

// A command is one subcommand, named by one word ("watch") or two ("dlq
// list"). setup defines its flags on fs and returns
// the function that runs it with the arguments left after the flags.
type command struct {
	name    string
	args    string // synopsis of the arguments, after the flags
	summary string
	help    string // more text for `cachecast help NAME`
	minArgs int
	maxArgs int      // -1: any
	choices []string // the words the argument is one of, for completion
	setup   func(fs *pflag.FlagSet, g *globals) func(ctx context.Context, e *env, args []string) error
}

// commands, in the order help lists them.
var commands = []*command{
	backupCmd, benchCmd, completionCmd, cursorDeleteCmd, cursorsCmd, delCmd, dlqListCmd, dlqReplayCmd, dlqShowCmd, getCmd, groupResetCmd, groupsCmd,
	historyCmd, keysCmd, peersForgetCmd, pendingCmd, publishCmd, repairCmd, repairAcceptCmd, restoreCmd, statusCmd, topCmd, topicsCmd, verifyCmd, versionCmd, watchCmd,
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// resolve finds the command args start with, by one word or two, and
// returns it with the arguments after its name; nil if there is none.
func resolve(args []string) (*command, []string) {
	if len(args) > 1 {
		if c := lookup(args[0] + " " + args[1]); c != nil {
			return c, args[2:]
		}
	}
	return lookup(args[0]), args[1:]
}

// unknownCommand explains why args name no command: a family of
// commands ("dlq") without its second word, or nothing known.
func unknownCommand(args []string) string {
	var subs []string
	for _, c := range commands {
		if first, second, ok := strings.Cut(c.name, " "); ok && first == args[0] {
			subs = append(subs, second)
		}
	}
	if len(subs) > 0 {
		return fmt.Sprintf("%q needs a subcommand: %s", args[0], strings.Join(subs, ", "))
	}
	return fmt.Sprintf("unknown command %q", args[0])
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := &env{
		stdin:     os.Stdin,
		stdout:    os.Stdout,
		stderr:    os.Stderr,
		getenv:    os.Getenv,
		stdinTTY:  isTerminal(os.Stdin),
		stdoutTTY: isTerminal(os.Stdout),
		stderrTTY: isTerminal(os.Stderr),
	}
	code := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(code)
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, e *env, argv []string) int {
	// Global flags may come before the command name.
	var topG, g globals
	top := pflag.NewFlagSet("cachecast", pflag.ContinueOnError)
	top.SetInterspersed(false)
	top.SetOutput(io.Discard)
	top.Usage = func() {}
	topG.register(top, e)
	man := top.Bool("man", false, "print the manual page cachecast(1) in roff")
	_ = top.MarkHidden("man") // for the package's build, not for people
	if err := top.Parse(argv); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			topUsage(e.stdout, top)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "cachecast: %v\n", err)
		topUsage(e.stderr, top)
		return exitUsage
	}
	if *man {
		io.WriteString(e.stdout, manPage())
		return exitOK
	}
	args := top.Args()
	if len(args) == 0 {
		topUsage(e.stderr, top)
		return exitUsage
	}
	if args[0] == "help" {
		return help(e, top, args[1:])
	}
	cmd, args := resolve(args)
	if cmd == nil {
		fmt.Fprintf(e.stderr, "cachecast: %s\nRun 'cachecast help' for the list of commands.\n", unknownCommand(top.Args()))
		return exitUsage
	}

	fs := newFlagSet(cmd)
	g.register(fs, e)
	// The values given before the command name are the defaults here.
	top.Visit(func(f *pflag.Flag) { fs.Set(f.Name, f.Value.String()) })
	runCmd := cmd.setup(fs, &g)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			cmdUsage(e.stdout, cmd, fs)
			return exitOK
		}
		return fail(e, cmd, &usageError{err.Error()})
	}
	args = fs.Args()
	if len(args) < cmd.minArgs || (cmd.maxArgs >= 0 && len(args) > cmd.maxArgs) {
		return fail(e, cmd, usagef("wrong number of arguments"))
	}
	return fail(e, cmd, runCmd(ctx, e, args))
}

func newFlagSet(cmd *command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(cmd.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = true
	return fs
}

// fail reports err (if any) and returns the exit status for it.
func fail(e *env, cmd *command, err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "cachecast %s: %v\nUsage: cachecast %s [flags] %s\nRun 'cachecast %s --help' for more.\n",
			cmd.name, err, cmd.name, cmd.args, cmd.name)
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "cachecast %s: %v\n", cmd.name, err)
	if errors.Is(err, client.ErrUnreachable) {
		fmt.Fprintln(e.stderr, "Is cachecastd running? --socket or CACHECAST_SOCKET choose the socket.")
	}
	return exitError
}

func help(e *env, top *pflag.FlagSet, args []string) int {
	if len(args) == 0 {
		topUsage(e.stdout, top)
		return exitOK
	}
	if len(args) == 1 && args[0] == "help" {
		fmt.Fprint(e.stdout, helpUsage)
		return exitOK
	}
	cmd, rest := resolve(args)
	if cmd == nil || len(rest) > 0 {
		fmt.Fprintf(e.stderr, "cachecast help: %s\n", unknownCommand(args))
		return exitUsage
	}
	cmdUsage(e.stdout, cmd, commandFlags(cmd, e))
	return exitOK
}

// helpUsage is what `cachecast help help` prints: help is not a command
// of the table (it takes no flags), so its text is here.
const helpUsage = `Usage: cachecast help [COMMAND]

Without COMMAND, lists the commands and the flags they all take; with
one, prints its usage, flags and details, as "cachecast COMMAND --help"
does. A command of two words is named with both: cachecast help dlq list.
`

func topUsage(w io.Writer, top *pflag.FlagSet) {
	var b strings.Builder
	b.WriteString("cachecast is the command-line client of cachecastd.\n\n")
	b.WriteString("Usage: cachecast [--socket PATH] COMMAND [flags] [args]\n\nCommands:\n")
	width := len("help")
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-*s  show the help of a command: cachecast help COMMAND\n\n", width, "help")
	b.WriteString("Flags (every command takes them too):\n")
	b.WriteString(top.FlagUsages())
	b.WriteString("\nExit status: 0 success, 1 error, 2 usage error.\n")
	io.WriteString(w, b.String())
}

func cmdUsage(w io.Writer, cmd *command, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "Usage: cachecast %s [flags] %s\n\n%s\n", cmd.name, cmd.args, cmd.summary)
	if cmd.help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.help))
	}
	fmt.Fprintf(w, "\nFlags:\n%s", fs.FlagUsages())
}
