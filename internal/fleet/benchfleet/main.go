// Command benchfleet runs the fleet measurements of package fleet (make
// bench-fleet): in-process fleets of each size over TCP and NATS, a
// process fleet, and the bootstrap of a fresh node; it merges the results
// into a JSON file (a run with another -label adds its own, so a before
// and an after can be plotted together), writes the plot as a PNG and
// prints the tables BENCHMARKS.md shows.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/cachecast/cachecast/internal/fleet"
)

func main() {
	var o options
	o.register(flag.CommandLine)
	flag.Parse()
	fleet.RaiseFileLimit()
	b := &bench{o: o, ctx: context.Background()}
	if err := b.load(); err != nil {
		fatal(err)
	}
	base, err := os.MkdirTemp(o.dir, "cachecast-fleet-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(base)
	b.base = base

	b.inProcess()
	if o.procs != "" || o.boot != "" {
		bin := b.binary()
		b.processes(bin)
		b.bootstraps(bin)
	}
	if o.plot != "" {
		b.writePlot()
	}
	b.res.print(os.Stdout)
}

// options are the command's flags.
type options struct {
	nodes, transports, procs, boot, label, dir string
	window                                     time.Duration
	rate                                       int
	out, plot, plotLabels, bin, bootBins       string
	rounds                                     int
	profile                                    string
	timeout                                    time.Duration
}

// register binds o to the flags of fs.
func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.nodes, "nodes", "10,25,50,100,200", "in-process fleet sizes, comma separated (empty: none)")
	fs.StringVar(&o.transports, "transports", "tcp,tree,nats", "fan-outs to measure in-process: tcp (direct pushes), tree (the relay tree over TCP), nats")
	fs.StringVar(&o.procs, "procs", "25", "process fleet sizes (empty: none)")
	fs.StringVar(&o.boot, "bootstrap", "1000000,10000000", "bootstrap source sizes in keys (empty: none)")
	fs.StringVar(&o.label, "label", "now", "the build measured (before, after, ...)")
	fs.StringVar(&o.dir, "dir", "/dev/shm", "where the nodes' directories go (a tmpfs)")
	fs.DurationVar(&o.window, "window", 5*time.Second, "each idle and load window")
	fs.IntVar(&o.rate, "rate", 1000, "updates a second under load, fleet-wide")
	fs.StringVar(&o.out, "out", "docs/fleet.json", "results file (merged)")
	fs.StringVar(&o.plot, "png", "docs/fleet.png", "plot file")
	fs.StringVar(&o.plotLabels, "plot-labels", "", "the builds the plot draws, comma separated (empty: every one in the results file)")
	fs.StringVar(&o.bin, "bin", "", "cachecastd binary for the process fleets and bootstraps (empty: built from this tree)")
	fs.StringVar(&o.bootBins, "boot-bins", "", "builds to compare in the bootstraps, label=binary,... (empty: -label with -bin); they take turns on one seeded source")
	fs.IntVar(&o.rounds, "boot-rounds", 1, "bootstraps of each size and build")
	fs.StringVar(&o.profile, "gossip-profile", "", "memberlist timers of the in-process fleets: lan, wan or local (empty: lan below 50 nodes, wan from 50; see fleet.ProfileFor)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "bound on each wait of an in-process fleet (start, convergence)")
}

// bench is one run of the command: its options, the results file's
// contents and the directory the nodes' directories go in.
type bench struct {
	o    options
	ctx  context.Context
	res  results
	base string
}

// load reads the results file, if there is one, to merge into.
func (b *bench) load() error {
	buf, err := os.ReadFile(b.o.out)
	if err != nil {
		return nil
	}
	return json.Unmarshal(buf, &b.res)
}

// save writes the results file, after each measurement so that a run
// cut short keeps what it measured.
func (b *bench) save() {
	buf, _ := json.MarshalIndent(b.res, "", "  ")
	if err := os.WriteFile(b.o.out, append(buf, '\n'), 0o644); err != nil {
		fatal(err)
	}
}

// inProcess measures the in-process fleets of each fan-out and size; a
// fan-out's larger sizes are skipped once one did not start.
func (b *bench) inProcess() {
	for _, tr := range split(b.o.transports) {
		for _, n := range ints(b.o.nodes) {
			ns, err := natsFor(tr)
			if err != nil {
				fatal(err)
			}
			d, _ := os.MkdirTemp(b.base, "n")
			log("in-process %s N=%d", tr, n)
			r := fleet.Run(b.ctx, fleet.Plan{Options: fleet.Options{Nodes: n, Dir: d, Profile: b.o.profile, Tree: tr == "tree"}, Label: b.o.label,
				Window: b.o.window, Rate: b.o.rate, Partition: tr != "nats", Restart: true, Timeout: b.o.timeout}, ns)
			b.record(r, ns, d)
			if r.Err != "" && strings.HasPrefix(r.Err, "start") {
				break
			}
		}
	}
}

// record adds a fleet's result, with the machine's load, to the results
// and saves them; it stops the fleet's NATS server and removes its
// directory.
func (b *bench) record(r fleet.Result, ns *server.Server, dir string) {
	r.MachineLoad = fleet.LoadAverage()
	if ns != nil {
		ns.Shutdown()
	}
	os.RemoveAll(dir)
	log("  %+v", r)
	b.res.add(r)
	b.save()
}

// binary is the cachecastd of the process fleets and bootstraps: -bin,
// or one built from this tree.
func (b *bench) binary() string {
	if b.o.bin != "" {
		return b.o.bin
	}
	bin := filepath.Join(b.base, "cachecastd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/cachecastd")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fatal(err)
	}
	return bin
}

// processes measures the process fleets of each fan-out and size.
func (b *bench) processes(bin string) {
	for _, tr := range split(b.o.transports) {
		for _, n := range ints(b.o.procs) {
			ns, err := natsFor(tr)
			if err != nil {
				fatal(err)
			}
			url := ""
			if ns != nil {
				url = ns.ClientURL()
			}
			d, _ := os.MkdirTemp(b.base, "p")
			log("processes %s N=%d", tr, n)
			b.record(fleet.RunProcs(b.ctx, bin, d, n, b.o.rate, b.o.window, url, tr == "tree", b.o.label), ns, d)
		}
	}
}

// bootstraps measures the bootstrap of a fresh node from a source of
// each size, the builds taking turns on one seeded source.
func (b *bench) bootstraps(bin string) {
	builds := [][2]string{{b.o.label, bin}}
	if b.o.bootBins != "" {
		builds = nil
		for _, lb := range split(b.o.bootBins) {
			l, bin, ok := strings.Cut(lb, "=")
			if !ok {
				fatal(fmt.Errorf("-boot-bins: %q is not label=binary", lb))
			}
			builds = append(builds, [2]string{l, bin})
		}
	}
	for _, k := range ints(b.o.boot) {
		d, _ := os.MkdirTemp(b.base, "b")
		for round := 1; round <= b.o.rounds; round++ {
			for i := range builds {
				// The builds take turns, each round in the other order.
				lb := builds[(i+round-1)%len(builds)]
				log("bootstrap of %d keys, %s, round %d", k, lb[0], round)
				r := fleet.MeasureBootstrap(b.ctx, lb[1], d, k)
				log("  %+v", r)
				b.res.addBoot(lb[0], round, r)
				b.save()
			}
		}
		os.RemoveAll(d)
	}
}

// writePlot draws the results of the -plot-labels builds into -png.
func (b *bench) writePlot() {
	f, err := os.Create(b.o.plot)
	if err != nil {
		fatal(err)
	}
	labels := split(b.o.plotLabels)
	if err := fleet.Plot(f, b.res.title(labels), b.res.charts(labels)); err != nil {
		fatal(err)
	}
	if err := f.Close(); err != nil {
		fatal(err)
	}
}

// results is the results file.
type results struct {
	Fleets     []fleet.Result `json:"fleets"`
	Bootstraps []bootstrap    `json:"bootstraps"`
}

type bootstrap struct {
	Label string `json:"label"`
	Round int    `json:"round,omitempty"`
	fleet.Bootstrap
}

func (r *results) add(x fleet.Result) {
	r.Fleets = slices.DeleteFunc(r.Fleets, func(y fleet.Result) bool {
		return y.Kind == x.Kind && y.Label == x.Label && y.Transport == x.Transport && y.Nodes == x.Nodes
	})
	r.Fleets = append(r.Fleets, x)
	slices.SortStableFunc(r.Fleets, func(a, b fleet.Result) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Label, b.Label),
			cmp.Compare(a.Transport, b.Transport), cmp.Compare(a.Nodes, b.Nodes))
	})
}

func (r *results) addBoot(label string, round int, b fleet.Bootstrap) {
	r.Bootstraps = slices.DeleteFunc(r.Bootstraps, func(y bootstrap) bool {
		return y.Label == label && y.Keys == b.Keys && max(y.Round, 1) == round
	})
	r.Bootstraps = append(r.Bootstraps, bootstrap{label, round, b})
}

// title is the plot's title, with the machine's load average over the
// runs it draws (latencies on a loaded machine are starved).
func (r *results) title(labels []string) string {
	lo, hi := math.Inf(1), 0.0
	for _, x := range r.Fleets {
		if x.MachineLoad > 0 && (len(labels) == 0 || slices.Contains(labels, x.Label)) {
			lo, hi = min(lo, x.MachineLoad), max(hi, x.MachineLoad)
		}
	}
	if hi == 0 {
		return "cachecast: per node against fleet size (2-core machine)"
	}
	return fmt.Sprintf("cachecast: per node against fleet size (2-core machine, load average %.0f-%.0f)", lo, hi)
}

// charts are the plot's panels: one line per kind, label and transport,
// for the labels given (all when none is).
func (r *results) charts(labels []string) []fleet.Chart {
	type key struct{ kind, label, transport string }
	var keys []key
	lines := map[key][]fleet.Result{}
	for _, x := range r.Fleets {
		if x.Err != "" && x.Idle.CPU == 0 {
			continue // nothing measured
		}
		if len(labels) > 0 && !slices.Contains(labels, x.Label) {
			continue
		}
		k := key{x.Kind, x.Label, x.Transport}
		if _, ok := lines[k]; !ok {
			keys = append(keys, k)
		}
		lines[k] = append(lines[k], x)
	}
	// procs: whether the processes' lines belong (their vector entries
	// are not counted).
	chart := func(title string, procs bool, y func(fleet.Result) float64) fleet.Chart {
		c := fleet.Chart{Title: title}
		for _, k := range keys {
			if k.kind == "processes" && !procs {
				continue
			}
			name := k.transport
			if name == "tcp" {
				name = "direct" // the TCP fan-out's direct pushes
			}
			s := fleet.Series{Label: name + " " + k.label}
			if k.kind == "processes" {
				s.Label = "procs " + s.Label
			}
			for _, x := range lines[k] {
				s.X = append(s.X, float64(x.Nodes))
				s.Y = append(s.Y, y(x))
			}
			c.Series = append(c.Series, s)
		}
		return c
	}
	return []fleet.Chart{
		chart("vector entries/s per node, idle", false, func(x fleet.Result) float64 { return x.Idle.VectorEntries }),
		chart("vector entries/s per node, 1000 updates/s", false, func(x fleet.Result) float64 { return x.Load.VectorEntries }),
		chart("vector entries per exchange started, 1000 updates/s", false, func(x fleet.Result) float64 {
			return cmp.Or(x.Load.ExchangeEntries, x.Load.VectorEntries) / max(x.Load.Exchanges, 1e-9) // older results: acks too
		}),
		chart("bytes/s per node (sent+received), idle", true, func(x fleet.Result) float64 { return x.Idle.TxBps + x.Idle.RxBps }),
		chart("bytes/s per node (sent+received), 1000 updates/s", true, func(x fleet.Result) float64 { return x.Load.TxBps + x.Load.RxBps }),
		chart("open connections per node, idle", true, func(x fleet.Result) float64 { return x.Idle.Conns }),
		chart("open connections per node, 1000 updates/s", true, func(x fleet.Result) float64 { return x.Load.Conns }),
		chart("idle cpu per node (% of a core)", true, func(x fleet.Result) float64 { return 100 * x.Idle.CPU }),
		// Latencies span 3 ms to 10 s: log10, so both ends show.
		chart("publish to every node, p50, log10 ms, 1000 updates/s", false, func(x fleet.Result) float64 { return math.Log10(max(x.P50Ms, 1)) }),
		chart("publish to every node, p99, log10 ms, 1000 updates/s", false, func(x fleet.Result) float64 { return math.Log10(max(x.P99Ms, 1)) }),
	}
}

func (r *results) print(w *os.File) {
	fmt.Fprintln(w, "| kind | build | fan-out | N | gossip | idle CPU %/node | idle B/s out+in | idle vec/s | conns (max) | load CPU %/node | load B/s out+in | load vec/s | load conns (max) | load pulls/s | p50 / p99 ms (late %) | heal s | restart s | rejoins | RSS MiB/node | machine load | note |")
	fmt.Fprintln(w, "|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, x := range r.Fleets {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %.2f | %.0f | %.0f | %.1f (%d) | %.2f | %.0f | %.0f | %.1f (%d) | %.2f | %.1f / %.1f (%.0f) | %s | %s | %d | %.1f | %.1f | %s |\n",
			x.Kind, x.Label, x.Transport, x.Nodes, x.Profile, 100*x.Idle.CPU, x.Idle.TxBps+x.Idle.RxBps, x.Idle.VectorEntries,
			x.Idle.Conns, x.Idle.MaxConns, 100*x.Load.CPU, x.Load.TxBps+x.Load.RxBps, x.Load.VectorEntries, x.Load.Conns, x.Load.MaxConns,
			x.Load.Pulls, x.P50Ms, x.P99Ms, x.LatePct, secs(x.HealSec), secs(x.RestartSec), x.Rejoins, x.Idle.RSSMiB, x.MachineLoad, firstLine(x.Err))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| build | keys | round | to caught up s | /readyz 200 s | fresh node CPU s | source CPU s | fresh node HWM MiB | source RSS MiB | machine load | note |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, b := range r.Bootstraps {
		fmt.Fprintf(w, "| %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %.1f | %s |\n", b.Label, b.Keys, max(b.Round, 1), b.ReadySec, b.ReadyzSec,
			b.FreshCPUSec, b.SourceCPUSec, b.HWMMiB, b.SourceMiB, b.MachineLoad, firstLine(b.Err))
	}
}

func secs(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", s)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return strings.ReplaceAll(s, "|", "/")
}

// natsFor starts an embedded NATS server for the nats fan-out; nil for
// tcp and tree.
func natsFor(transport string) (*server.Server, error) {
	switch transport {
	case "tcp", "tree":
		return nil, nil
	case "nats":
		return fleet.NATSServer()
	}
	return nil, fmt.Errorf("unknown fan-out %q (tcp, tree or nats)", transport)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func ints(s string) []int {
	var out []int
	for _, f := range split(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			fatal(fmt.Errorf("%q: %w", f, err))
		}
		out = append(out, n)
	}
	return out
}

func log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchfleet:", err)
	os.Exit(1)
}
