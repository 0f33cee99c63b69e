package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/cachecast/cachecast/store/record"
)

// Sample is what a node costs over a window: means over the fleet's
// running nodes, per node and per second where it is a rate.
type Sample struct {
	// CPU is cores per node (1 = one core busy all the time).
	CPU float64 `json:"cpu_cores"`
	// TxBps and RxBps are bytes written and read a second: the data port
	// and, under NATS, the node's share of the NATS server's traffic.
	TxBps float64 `json:"tx_bytes_per_s"`
	RxBps float64 `json:"rx_bytes_per_s"`
	// Conns is the open connections per node at the window's end (data
	// port both ways, plus one to NATS under NATS); MaxConns the most any
	// node had.
	Conns    float64 `json:"conns"`
	MaxConns int64   `json:"max_conns"`
	// VectorEntries is version vector entries sent and received a second.
	VectorEntries float64 `json:"vector_entries_per_s"`
	// ExchangeEntries is the part of VectorEntries the exchanges carried
	// (broadcast.Stats.ExchangeEntries; the rest is acks, a cost per
	// record pushed).
	ExchangeEntries float64 `json:"exchange_entries_per_s,omitempty"`
	// Exchanges is the anti-entropy exchanges a node started a second
	// (broadcast.Stats.Exchanges): VectorEntries over it is what an
	// exchange costs, which the machine's load does not move as it moves
	// the rounds a second.
	Exchanges float64 `json:"exchanges_per_s,omitempty"`
	// Pulls is the pull requests a node sent a second: records that the
	// pushes did not bring (a gap, a connection that failed) and the
	// exchanges found missing.
	Pulls float64 `json:"pulls_per_s,omitempty"`
	// RSSMiB is resident memory per node (the process's over N
	// in-process).
	RSSMiB float64 `json:"rss_mib"`
}

// Result is one fleet's measurement.
type Result struct {
	Kind      string `json:"kind"`      // "in-process" or "processes"
	Label     string `json:"label"`     // which build (before, after)
	Transport string `json:"transport"` // tcp (direct), tree or nats
	Nodes     int    `json:"nodes"`
	// Profile is the gossip profile the fleet ran (ProfileFor).
	Profile  string  `json:"gossip_profile,omitempty"`
	StartSec float64 `json:"start_s"` // to every node joined and one record from each everywhere
	Idle     Sample  `json:"idle"`
	Load     Sample  `json:"load"`
	Rate     int     `json:"rate"` // updates a second, fleet-wide, in Load
	// P50Ms and P99Ms are publish-to-every-node at Rate; a record not
	// on every node when the load stopped counts as its age then (a lower
	// bound), and LatePct says how many of the window's records that was.
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	LatePct float64 `json:"late_pct,omitempty"`
	// HealSec is from the end of a 2|3 data-port partition (records
	// written on both sides meanwhile) to identical views; RestartSec from
	// restarting a tenth of the nodes (stopped at once while the others
	// wrote) to identical views. 0: not measured.
	HealSec    float64 `json:"heal_s,omitempty"`
	RestartSec float64 `json:"restart_s,omitempty"`
	// Rejoins counts the joins the harness made again to mend a member
	// that gossip did not bring (WaitMembers, RejoinAfter), at the start
	// and after the restart.
	Rejoins uint64 `json:"rejoins,omitempty"`
	// MachineLoad is the machine's 1-minute load average at the end of
	// the run (the other agents' load moves the latencies).
	MachineLoad float64 `json:"machine_load,omitempty"`
	// Err says where the run stopped, if it did.
	Err string `json:"error,omitempty"`
}

// counters is a point-in-time reading of everything a Sample is made of.
type counters struct {
	at     time.Time
	cpu    time.Duration
	tx, rx uint64
	vec    uint64
	exch   uint64
	xent   uint64 // the exchanges' entries
	pulls  uint64
	natsIn uint64 // bytes the NATS server read (the nodes sent)
	natsOu uint64
}

// CPUTime is the process's user plus system CPU time so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (f *Fleet) read(ns *server.Server) counters {
	c := counters{at: time.Now(), cpu: CPUTime()}
	for _, n := range f.nodes {
		tx, rx := n.Bytes()
		c.tx += tx
		c.rx += rx
		c.vec += n.VectorEntries()
		c.exch += n.Exchanges()
		c.xent += n.ExchangeEntries()
		if b := n.Broadcast(); b != nil {
			c.pulls += b.Pulls()
		}
	}
	if ns != nil {
		if v, err := ns.Varz(nil); err == nil {
			c.natsIn, c.natsOu = uint64(v.InBytes), uint64(v.OutBytes)
		}
	}
	return c
}

// Measure samples the fleet for d. ns is the NATS server, if any.
func (f *Fleet) Measure(ctx context.Context, ns *server.Server, d time.Duration) Sample {
	a := f.read(ns)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	b := f.read(ns)
	run := f.Running()
	n := float64(max(1, len(run)))
	secs := b.at.Sub(a.at).Seconds()
	s := Sample{
		CPU:             (b.cpu - a.cpu).Seconds() / secs / n,
		TxBps:           float64(b.tx-a.tx+b.natsIn-a.natsIn) / secs / n,
		RxBps:           float64(b.rx-a.rx+b.natsOu-a.natsOu) / secs / n,
		VectorEntries:   float64(b.vec-a.vec) / secs / n,
		Exchanges:       float64(b.exch-a.exch) / secs / n,
		ExchangeEntries: float64(b.xent-a.xent) / secs / n,
		Pulls:           float64(b.pulls-a.pulls) / secs / n,
		RSSMiB:          float64(RSS(os.Getpid())) / (1 << 20) / n,
	}
	var total int64
	for _, x := range run {
		k := x.Conns()
		if ns != nil {
			k++ // its NATS connection
		}
		total += k
		s.MaxConns = max(s.MaxConns, k)
	}
	s.Conns = float64(total) / n
	return s
}

// RSS is a process's resident memory in bytes (0 if unknown).
func RSS(pid int) int64 {
	return statusField(pid, "VmRSS:")
}

// HWM is a process's resident memory high-water mark in bytes.
func HWM(pid int) int64 {
	return statusField(pid, "VmHWM:")
}

func statusField(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// Load publishes rate updates a second fleet-wide, round robin over the
// running nodes, 100-byte values over 10,000 keys, and times each record
// from its publish to the moment every running node holds it.
type Load struct {
	f    *Fleet
	rate int

	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	lat     []time.Duration
	pending []probe
	since   time.Time // Reset's
	errs    int
}

type probe struct {
	origin, seq uint64
	at          time.Time
	next        int // nodes [0, next) of the snapshot hold it
	nodes       []*Node
}

// StartLoad starts publishing at rate a second.
func (f *Fleet) StartLoad(rate int) *Load {
	l := &Load{f: f, rate: rate, stop: make(chan struct{})}
	l.wg.Add(2)
	go l.publish()
	go l.watch()
	return l
}

// Stop ends the load and returns the latencies of the records that
// reached every node and, as a lower bound, the ages of those published
// since Reset that had not: a fleet that falls behind shows in the
// quantiles instead of leaving only its fast records there. late is how
// many had not.
func (l *Load) Stop() (lat []time.Duration, late int) {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, p := range l.pending {
		if !p.at.Before(l.since) {
			l.lat = append(l.lat, now.Sub(p.at))
			late++
		}
	}
	return l.lat, late
}

// Reset drops the latencies gathered so far (after a warm-up).
func (l *Load) Reset() {
	l.mu.Lock()
	l.lat = l.lat[:0]
	l.since = time.Now()
	l.mu.Unlock()
}

const loadTick = 10 * time.Millisecond

func (l *Load) publish() {
	defer l.wg.Done()
	t := time.NewTicker(loadTick)
	defer t.Stop()
	val := make([]byte, 100)
	per := float64(l.rate) * loadTick.Seconds()
	owed := 0.0
	i := 0
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		run := l.f.Running()
		if len(run) == 0 {
			continue
		}
		owed += per
		for ; owed >= 1; owed-- {
			n := run[i%len(run)]
			i++
			st := n.Store()
			if st == nil {
				continue
			}
			m := record.Message{Topic: Topic, Key: fmt.Sprintf("k%05d", rand.IntN(10000)), Value: val}
			res, err := st.Publish(&m)
			if err != nil {
				l.mu.Lock()
				l.errs++
				l.mu.Unlock()
				continue
			}
			l.mu.Lock()
			l.pending = append(l.pending, probe{origin: res.Origin, seq: res.Seq, at: time.Now(), nodes: run})
			l.mu.Unlock()
		}
	}
}

// watch looks at the records on their way every millisecond; each probe
// remembers how many nodes already hold it, so a probe costs about N
// lookups in all.
func (l *Load) watch() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case <-time.After(time.Millisecond):
		}
		l.mu.Lock()
		ps := slices.Clone(l.pending)
		l.mu.Unlock()
		now := time.Now()
		var done []time.Duration
		keep := ps[:0]
		for _, p := range ps {
			for p.next < len(p.nodes) {
				st := p.nodes[p.next].Store()
				if st != nil && st.LastSeq(p.origin) < p.seq {
					break
				}
				p.next++ // it holds it (or stopped: it does not count)
			}
			if p.next == len(p.nodes) {
				done = append(done, now.Sub(p.at))
			} else {
				keep = append(keep, p)
			}
		}
		l.mu.Lock()
		// Probes published meanwhile were appended after the ones read.
		l.pending = append(keep, l.pending[len(ps):]...)
		l.lat = append(l.lat, done...)
		l.mu.Unlock()
	}
}

// Quantile returns the q-quantile of ds in milliseconds (ds is sorted).
func Quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := min(len(ds)-1, int(q*float64(len(ds))))
	return float64(ds[i]) / float64(time.Millisecond)
}

// Plan is what Run measures for one fleet.
type Plan struct {
	Options
	Label     string
	Window    time.Duration // each idle and load window (default 5s)
	Rate      int           // updates a second under load (default 1000)
	Partition bool          // measure the heal of a 2|3 partition
	Restart   bool          // measure the restart of a tenth of the nodes
	Timeout   time.Duration // for each wait (default 2 minutes)
}

// Run starts a fleet as plan says, measures it and stops it. A fleet
// that does not start or converge in time is reported in Result.Err with
// what was measured before.
func Run(ctx context.Context, plan Plan, ns *server.Server) (r Result) {
	m := &measurement{ctx: ctx, plan: plan.withDefaults(ns), ns: ns}
	r = m.result()
	t0 := time.Now()
	sctx, cancel := m.wait()
	f, err := Start(sctx, m.plan.Options)
	cancel()
	if err != nil {
		r.Err = "start: " + err.Error()
		return r
	}
	m.f = f
	defer f.Close()
	defer func() { r.Rejoins = f.Rejoins() }()
	r.StartSec = time.Since(t0).Seconds()

	// Idle: let the joins' catch-up settle first.
	time.Sleep(m.plan.Window / 2)
	r.Idle = f.Measure(ctx, ns, m.plan.Window)
	if err := m.load(&r); err != nil {
		r.Err = "after load: " + err.Error()
		return r
	}
	if m.plan.Partition {
		if r.HealSec, err = m.heal(); err != nil {
			r.Err = "partition: " + err.Error()
			return r
		}
	}
	if m.plan.Restart {
		if r.RestartSec, err = m.restart(); err != nil {
			r.Err = "restart: " + err.Error()
		}
	}
	return r
}

// withDefaults is p with its zero fields set to their defaults, and the
// NATS server's URL when there is one.
func (p Plan) withDefaults(ns *server.Server) Plan {
	if p.Window == 0 {
		p.Window = 5 * time.Second
	}
	if p.Rate == 0 {
		p.Rate = 1000
	}
	if p.Timeout == 0 {
		p.Timeout = 2 * time.Minute
	}
	if ns != nil {
		p.NATS = ns.ClientURL()
	}
	if p.Profile == "" {
		p.Profile = ProfileFor(p.Nodes)
	}
	return p
}

// measurement is one Run: its plan (with defaults), the NATS server if
// any, and the fleet once started.
type measurement struct {
	ctx  context.Context
	plan Plan
	ns   *server.Server
	f    *Fleet
}

// result is the Result before anything is measured: what the plan says.
func (m *measurement) result() Result {
	r := Result{Kind: "in-process", Label: m.plan.Label, Transport: "tcp", Nodes: m.plan.Nodes, Rate: m.plan.Rate, Profile: m.plan.Profile}
	if m.ns != nil {
		r.Transport = "nats"
	} else if m.plan.Tree {
		r.Transport = "tree"
	}
	return r
}

// wait bounds one wait of the run.
func (m *measurement) wait() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.plan.Timeout)
}

// load measures the fleet under the plan's rate into r (the sample and
// the publish-to-every-node latencies), then waits for it to converge.
func (m *measurement) load(r *Result) error {
	l := m.f.StartLoad(m.plan.Rate)
	time.Sleep(time.Second)
	l.Reset()
	r.Load = m.f.Measure(m.ctx, m.ns, m.plan.Window)
	lat, late := l.Stop()
	r.P50Ms, r.P99Ms = Quantile(lat, 0.50), Quantile(lat, 0.99)
	if len(lat) > 0 {
		r.LatePct = 100 * float64(late) / float64(len(lat))
	}
	cctx, cancel := m.wait()
	defer cancel()
	_, err := m.f.WaitConverged(cctx)
	return err
}

// heal partitions the data ports 2|3 while the load writes on both
// sides, heals, and returns the seconds to identical views.
func (m *measurement) heal() (float64, error) {
	m.f.Partition(2 * m.plan.Nodes / 5)
	l := m.f.StartLoad(m.plan.Rate)
	time.Sleep(m.plan.Window / 2)
	l.Stop()
	m.f.Heal()
	cctx, cancel := m.wait()
	defer cancel()
	took, err := m.f.WaitConverged(cctx)
	return took.Seconds(), err
}

// restart stops a tenth of the nodes at once while the others write,
// restarts them, and returns the seconds from the restart to identical
// views.
func (m *measurement) restart() (float64, error) {
	n := m.plan.Nodes
	idx := pick(n, max(1, n/10))
	if idx[0] == 0 && len(idx) < n {
		idx[0] = 1 // keep node 0, the seed, up; any node would do
	}
	var down []*Node
	for _, i := range slices.Compact(idx) {
		down = append(down, m.f.nodes[i])
	}
	var wg sync.WaitGroup
	for _, n := range down {
		wg.Go(func() { n.Stop() })
	}
	wg.Wait()
	l := m.f.StartLoad(m.plan.Rate)
	time.Sleep(m.plan.Window / 2)
	l.Stop()
	start := time.Now()
	cctx, cancel := m.wait()
	defer cancel()
	errs := make([]error, len(down))
	for i, n := range down {
		wg.Go(func() { errs[i] = n.Restart(cctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if err := m.f.WaitMembers(cctx, m.f.nodes); err != nil {
		return 0, err
	}
	if _, err := m.f.WaitConverged(cctx); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}
