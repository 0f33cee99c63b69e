package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one cachecastd process of a process fleet.
type Proc struct {
	Name   string
	Dir    string
	Socket string
	Gossip string
	cmd    *exec.Cmd
	http   *http.Client
	exited chan struct{} // closed once the process has exited
}

// start starts p.cmd, killed with this process, and reaps it.
func (p *Proc) start() error {
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.exited = make(chan struct{})
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	return nil
}

// Procs is a fleet of cachecastd processes on 127.0.0.1.
type Procs struct {
	Bin   string
	Procs []*Proc
	nats  string
}

// StartProcs runs n cachecastd processes (the binary bin), each in its
// own directory under dir, all joining the first; natsURL, when set,
// makes them fan out through NATS. It returns once every node is ready
// and a record written on each is on every node.
func StartProcs(ctx context.Context, bin, dir string, n int, natsURL string, extra ...string) (*Procs, error) {
	pf := &Procs{Bin: bin, nats: natsURL}
	var seed string
	for i := 0; i < n; i++ {
		p := &Proc{Name: fmt.Sprintf("p%03d", i), Dir: filepath.Join(dir, fmt.Sprintf("p%03d", i))}
		if err := os.MkdirAll(p.Dir, 0o755); err != nil {
			return nil, err
		}
		p.Socket = filepath.Join(p.Dir, "s")
		p.Gossip = freeAddr()
		if i == 0 {
			seed = p.Gossip
		}
		args := []string{
			"--data-dir", filepath.Join(p.Dir, "data"), "--socket", p.Socket, "--view-file", "",
			"--redis-socket", "off", "--node-name", p.Name,
			"--gossip-addr", p.Gossip, "--data-addr", "127.0.0.1:0", "--join", seed,
			"--segment-size", "1MiB", "--max-value-size", "64KiB", "--log-level", "warn", "--log-format", "json",
		}
		if natsURL != "" {
			args = append(args, "--transport", "nats", "--nats-url", natsURL)
		}
		args = append(args, extra...)
		log, err := os.Create(filepath.Join(p.Dir, "log"))
		if err != nil {
			pf.Close()
			return nil, err
		}
		p.cmd = exec.Command(bin, args...)
		p.cmd.Stdout, p.cmd.Stderr = log, log
		if err := p.start(); err != nil {
			log.Close()
			pf.Close()
			return nil, err
		}
		log.Close()
		p.http = unixClient(p.Socket)
		pf.Procs = append(pf.Procs, p)
		if i == 0 {
			if err := p.waitReady(ctx); err != nil {
				pf.Close()
				return nil, err
			}
		}
	}
	for _, p := range pf.Procs {
		if err := p.waitReady(ctx); err != nil {
			pf.Close()
			return nil, err
		}
	}
	for _, p := range pf.Procs {
		if err := p.Put("hello-"+p.Name, []byte("hello")); err != nil {
			pf.Close()
			return nil, err
		}
	}
	if _, err := pf.WaitConverged(ctx); err != nil {
		pf.Close()
		return nil, err
	}
	return pf, nil
}

// freeAddr is a 127.0.0.1 port free for TCP and UDP (memberlist binds
// both).
func freeAddr() string {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
}

func unixClient(path string) *http.Client {
	// Long enough for /v1/status, which digests the whole view.
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 4,
	}}
}

// PID is the process's ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

func (p *Proc) waitReady(ctx context.Context) error {
	for {
		resp, err := p.http.Get("http://x/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(filepath.Join(p.Dir, "log"))
			return fmt.Errorf("%s exited: %.2000s", p.Name, b)
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(p.Dir, "log"))
			return fmt.Errorf("%s not ready: %w (log: %.2000s)", p.Name, ctx.Err(), b)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Put writes one key of the fleet's topic on the node.
func (p *Proc) Put(key string, val []byte) error {
	req, _ := http.NewRequest(http.MethodPut, "http://x/v1/topics/"+Topic+"/keys/"+key, bytes.NewReader(val))
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: put: %w", p.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: put: %s", p.Name, resp.Status)
	}
	return nil
}

// view is the part of /v1/status that says what a node holds.
type view struct {
	View struct {
		Vector map[string]uint64 `json:"vector"`
		Topics map[string]string `json:"topics"`
	} `json:"view"`
}

func (p *Proc) view() (string, error) {
	resp, err := p.http.Get("http://x/v1/status")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v view
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	b, _ := json.Marshal(v.View) // maps marshal sorted: comparable
	return string(b), nil
}

// WaitConverged waits until every node reports the same vector and view
// digests in /v1/status.
func (pf *Procs) WaitConverged(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	for {
		why := ""
		var ref string
		for i, p := range pf.Procs {
			v, err := p.view()
			if err != nil {
				why = fmt.Sprintf("%s: %v", p.Name, err)
				break
			}
			if i == 0 {
				ref = v
			} else if v != ref {
				why = p.Name + " differs from " + pf.Procs[0].Name
				break
			}
		}
		if why == "" {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("fleet: processes not converged: %s: %w", why, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close kills every process (SIGKILL: a fleet-wide leave would take each
// node a leave timeout).
func (pf *Procs) Close() {
	for _, p := range pf.Procs {
		if p.exited != nil {
			p.cmd.Process.Kill()
		}
	}
	for _, p := range pf.Procs {
		if p.exited != nil {
			<-p.exited
		}
	}
}

// procCounters is a reading of one process from /proc.
type procCounters struct {
	cpu    time.Duration
	rx, tx uint64 // rchar, wchar: bytes through read and write calls
	conns  int    // established TCP connections
	rss    int64
}

// clockTick is the kernel's USER_HZ, which /proc/PID/stat counts in.
const clockTick = 100

func readProc(pid int, established map[string]bool) procCounters {
	var c procCounters
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// The fields after the command name, which may hold spaces.
		if i := bytes.LastIndexByte(b, ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 13 {
				u, _ := strconv.ParseUint(f[11], 10, 64)
				s, _ := strconv.ParseUint(f[12], 10, 64)
				c.cpu = time.Duration(u+s) * time.Second / clockTick
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "rchar: "); ok {
				c.rx, _ = strconv.ParseUint(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "wchar: "); ok {
				c.tx, _ = strconv.ParseUint(v, 10, 64)
			}
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && established[l] {
			c.conns++
		}
	}
	c.rss = RSS(pid)
	return c
}

// establishedTCP is the set of "socket:[inode]" of the established TCP
// sockets of this network namespace.
func establishedTCP() map[string]bool {
	out := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "01" {
				out["socket:["+fs[9]+"]"] = true
			}
		}
	}
	return out
}

// Measure samples the processes for d. Bytes are everything the
// processes read and wrote through system calls (data port, gossip,
// NATS, the local API, files read); the store's writes go through mmap
// and are not among them.
func (pf *Procs) Measure(ctx context.Context, d time.Duration) Sample {
	read := func() ([]procCounters, time.Time) {
		est := establishedTCP()
		cs := make([]procCounters, len(pf.Procs))
		for i, p := range pf.Procs {
			cs[i] = readProc(p.PID(), est)
		}
		return cs, time.Now()
	}
	a, ta := read()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	b, tb := read()
	secs := tb.Sub(ta).Seconds()
	n := float64(len(pf.Procs))
	var s Sample
	for i := range a {
		s.CPU += (b[i].cpu - a[i].cpu).Seconds() / secs / n
		s.TxBps += float64(b[i].tx-a[i].tx) / secs / n
		s.RxBps += float64(b[i].rx-a[i].rx) / secs / n
		s.Conns += float64(b[i].conns) / n
		s.MaxConns = max(s.MaxConns, int64(b[i].conns))
		s.RSSMiB += float64(b[i].rss) / (1 << 20) / n
	}
	return s
}

// StartLoad writes rate keys a second, round robin over the processes,
// each through its local API, until stop is closed; it returns how many
// writes failed.
func (pf *Procs) StartLoad(rate int) (stop func() int) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	fails := 0
	val := make([]byte, 100)
	// One writer per process, each at its share of the rate.
	per := float64(rate) / float64(len(pf.Procs))
	for _, p := range pf.Procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owed := 0.0
			t := time.NewTicker(loadTick)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
				}
				for owed += per * loadTick.Seconds(); owed >= 1; owed-- {
					if err := p.Put(fmt.Sprintf("k%05d", rand.IntN(10000)), val); err != nil {
						mu.Lock()
						fails++
						mu.Unlock()
					}
				}
			}
		}()
	}
	return func() int {
		close(done)
		wg.Wait()
		return fails
	}
}

// RunProcs measures a process fleet of n nodes: idle and at rate writes
// a second, then the convergence after the load. Without natsURL the
// fan-out is the data port's, direct or, with tree, the relay tree
// (--tcp-fanout, named: the daemon's default, auto, follows the size).
func RunProcs(ctx context.Context, bin, dir string, n, rate int, window time.Duration, natsURL string, tree bool, label string) Result {
	r := Result{Kind: "processes", Label: label, Transport: "tcp", Nodes: n, Rate: rate}
	fanout := []string{"--tcp-fanout", "direct"}
	switch {
	case natsURL != "":
		r.Transport, fanout = "nats", nil
	case tree:
		r.Transport, fanout = "tree", []string{"--tcp-fanout", "tree"}
	}
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	pf, err := StartProcs(sctx, bin, dir, n, natsURL, fanout...)
	cancel()
	if err != nil {
		r.Err = "start: " + err.Error()
		return r
	}
	defer pf.Close()
	r.StartSec = time.Since(t0).Seconds()
	time.Sleep(window / 2)
	r.Idle = pf.Measure(ctx, window)
	stop := pf.StartLoad(rate)
	time.Sleep(time.Second)
	r.Load = pf.Measure(ctx, window)
	if fails := stop(); fails > 0 {
		r.Err = fmt.Sprintf("%d writes failed under load", fails)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	_, err = pf.WaitConverged(cctx)
	cancel()
	if err != nil {
		r.Err = strings.TrimSpace(r.Err + " " + err.Error())
	}
	return r
}
