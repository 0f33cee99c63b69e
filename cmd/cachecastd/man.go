package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/manpage"
)

// manPage is cachecastd(8): its options are the flags of fs, the flag set
// the daemon parses, so that a new flag is in the page without an edit
// here.
func manPage(fs *pflag.FlagSet) string {
	p := manpage.New("cachecastd", "8", "fleet-wide replicated key/value cache daemon", daemon.Version, "System Administration")
	p.Section("Synopsis")
	p.Literal("cachecastd [flags]")
	p.Section("Description")
	p.Para(`cachecastd keeps a durable, memory-mapped log and a key/value view of cachecast topics on this machine and serves them to local applications over HTTP on a Unix socket, over the Redis protocol, and as a shared-memory view read with no system call. Nodes of a fleet find each other by gossip and copy every record to every node, so that each serves the same view.

With no flags it runs a single node with its data in ./data, its socket at ./cachecast.sock and its cluster ports on loopback only. Installed from the package it runs as the user cachecast under systemd (cachecastd.service), with its data in /var/lib/cachecast and its socket in /run/cachecast.

Only one daemon may use a data directory: a second one refuses to start. Two nodes must never share a data directory, nor a copy of one: a node's directory holds its origin, the identity that stamps its writes, and two nodes stamping under one origin would give different records the same identity, which the fleet would never repair.`)
	p.Section("Options")
	p.Para("Every flag can also be set by the environment variable shown after it, CACHECAST_ then the flag's name in upper case with dashes as underscores; the command line wins. Sizes take units: 4096, 512KiB, 64MiB, 1GiB (powers of 1024), 1GB (powers of 1000). Durations: 100ms, 30s, 5m, 24h.")
	p.Flags(fs)
	p.Section("Environment")
	p.Item("CACHECAST_<FLAG>", "the flag --<flag>, as above.")
	p.Item("CACHECAST_ENV_FILE", "a file of CACHECAST_<FLAG>=value lines applied over the environment and read again on SIGHUP; the unit points it at /etc/default/cachecastd. A CACHECAST_ name that no flag reads is logged as a warning.")
	p.Section("Signals")
	p.Item("SIGTERM, SIGINT", "shut down gracefully: drain the requests in flight, flush the log, write the view's snapshot.")
	p.Item("SIGHUP", "read the command line, the environment and the env file again, and apply --"+
		strings.Join(config.ReloadFlags(), ", --")+"; read the files of --cluster-key-file, --tls-cert, --tls-key, --tls-ca, --redis-tls-cert and --redis-tls-key again (renewed keys and certificates at the same paths; files that do not load fail the reload and what is in force stays); a change to another flag is logged as needing a restart.")
	p.Section("Files")
	p.Item("/etc/default/cachecastd", "the settings of the packaged service, one CACHECAST_<FLAG>=value a line.")
	p.Item("/var/lib/cachecast", "the data directory of the packaged service: log segments, meta, cursors, snapshot. Kept when the package is removed, deleted when it is purged.")
	p.Item("/run/cachecast/cachecast.sock", "the local API's socket (HTTP); redis.sock beside it is the Redis door, cachecast.view the shared view.")
	p.Item("/usr/lib/systemd/system/cachecastd.service", "the systemd unit.")
	p.Section("Backup")
	p.Para("cachecast backup FILE copies a running node's view, cursors and consumer-group state into FILE, with a checksum, without stopping writes. cachecast restore --data-dir DIR FILE seeds a new node's empty data directory from it before its first start: the node takes a new origin and catches up from its peers. See cachecast(1).")
	p.Section("Exit status")
	p.Para("0 after a clean shutdown, 1 when the daemon failed, 2 for bad flags or configuration.")
	p.Section("See also")
	p.Para("cachecast(1), systemd.service(5), sysusers.d(5), tmpfiles.d(5)")
	return p.String()
}
