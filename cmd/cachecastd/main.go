// Command cachecastd is the cachecast daemon: it keeps a durable,
// memory-mapped log and a key/value view on this machine and serves them to
// local applications over HTTP on a Unix socket.
//
// Every flag can also be set by an environment variable CACHECAST_<FLAG>
// (upper case, dashes as underscores), so that systemd's EnvironmentFile
// works; the command line wins. `cachecastd --help` lists every flag with
// its default. With no flags it runs a single node with its data in ./data,
// its socket at ./cachecast.sock and its cluster ports on loopback only
// (without --cluster-key-file a wider bind needs --allow-insecure-cluster).
//
// Signals: SIGTERM and SIGINT shut down gracefully (drain, flush, snapshot);
// `cachecastd --man` prints the manual page cachecastd(8), made from the
// same flags (make deb packs it).
//
// The Go collector's headroom is bounded (internal/gctune: 64 MiB or 60% of
// the live heap), and the free heap is handed back to the system once the
// process goes quiet after 64 MiB of allocation, unless GOGC is set in the
// environment (docs/operations.md, "Memory and the collector").
//
// SIGHUP reloads the log level and the role lists from the command line,
// the environment and --env-file. At start and on SIGHUP it warns about
// every CACHECAST_ name of the environment or the env file that no flag
// reads.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/gctune"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the daemon failed
	exitUsage = 2 // bad flags or configuration
)

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code.
func run(args []string, lookup func(string) (string, bool), stdout io.Writer, stderr *os.File) int {
	cfg, action, unknown, err := parse(args, lookup, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "cachecastd: %v\nRun 'cachecastd --help' for the flags.\n", err)
		return exitUsage
	}
	switch action {
	case actionHelp:
		return exitOK
	case actionVersion:
		fmt.Fprintf(stdout, "cachecastd %s\n", daemon.Version)
		return exitOK
	case actionMan:
		return exitOK
	}
	log, err := daemon.NewLogger(cfg.LogFormat, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cachecastd: %v\n", err)
		return exitUsage
	}
	defer func() { _ = log.Sync() }()
	warnUnknown := func(names []string) {
		for _, n := range names {
			log.Warn("unknown setting ignored: no flag reads " + n)
		}
	}
	warnUnknown(unknown)
	cfg.Reload = func() (daemon.Config, error) {
		c, _, unknown, err := parse(args, lookup, io.Discard)
		if err == nil {
			warnUnknown(unknown)
		}
		return c, err
	}

	if gctune.Operator(lookup) {
		log.Info("collector: GOGC from the environment")
	} else {
		defer gctune.Start(gctune.Default).Stop()
		defer gctune.StartRelease(gctune.DefaultQuiet).Stop()
	}
	d, err := daemon.New(cfg, log)
	if err != nil {
		log.Error("cannot start: " + err.Error())
		return exitError
	}
	// Run catches SIGTERM, SIGINT and SIGHUP itself.
	if err := d.Run(context.Background()); err != nil {
		log.Error("stopped with an error: " + err.Error())
		return exitError
	}
	return exitOK
}

type action int

const (
	actionRun action = iota
	actionHelp
	actionVersion
	actionMan // --man: the manual page printed
)

// parse builds the configuration: defaults, then the command line, then
// --env-file and the environment for the flags the command line left out.
// It also names the CACHECAST_ variables of the environment and the env
// file that no flag reads (config.UnknownEnv), for run to warn about.
func parse(args []string, lookup func(string) (string, bool), stdout io.Writer) (daemon.Config, action, []string, error) {
	fs := pflag.NewFlagSet("cachecastd", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard) // errors are printed once, by run
	cfg := config.Default()
	cfg.AddFlags(fs)
	help := fs.BoolP("help", "h", false, "show this help and exit")
	version := fs.BoolP("version", "V", false, "print the version and exit")
	man := fs.Bool("man", false, "print the manual page cachecastd(8) in roff and exit")
	_ = fs.MarkHidden("man") // for the package's build, not for people
	if err := fs.Parse(args); err != nil {
		return cfg, actionRun, nil, err
	}
	switch {
	case *help:
		fmt.Fprintf(stdout, `Usage: cachecastd [flags]

cachecastd keeps a durable log and a key/value view of cachecast topics on
this machine and serves them over HTTP on a Unix socket.

Every flag can also be set by the environment variable shown after it
(the command line wins). Sizes take units: 64MiB, 1GB, 512KiB, 4096.

Flags:
%s`, fs.FlagUsagesWrapped(100))
		return cfg, actionHelp, nil, nil
	case *version:
		return cfg, actionVersion, nil, nil
	case *man:
		fmt.Fprint(stdout, manPage(fs))
		return cfg, actionMan, nil, nil
	case fs.NArg() > 0:
		return cfg, actionRun, nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := config.ApplyEnv(fs, lookup); err != nil {
		return cfg, actionRun, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, actionRun, nil, err
	}
	return cfg, actionRun, config.UnknownEnv(fs, os.Environ()), nil
}
