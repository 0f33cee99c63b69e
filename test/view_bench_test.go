package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/localview/viewbench"
)

// BenchmarkViewThroughput is issue 12's "500x the throughput of a socket
// GET on one core" as a throughput ratio: reads a second of the shared
// view by one thread on one core, beside the GETs a second a daemon
// confined to one core serves (GOMAXPROCS=1, every thread on CPU 0) over
// its HTTP socket and its Redis door, in the same run, of the same keys
// (1M keys of 100-byte values in topic "key", the Redis door's
// key:NNNNNNNNNNNN):
//
//	go test -run '^$' -bench ViewThroughput -benchtime 200000x -timeout 30m ./test/
//
// keys=uniform reads the 1M keys at random; keys=hot reads 10,000 of them
// (a random sample: a sale's hot products) at random, keys=hot1000 1,000
// of those (whose slots and records, 300 KB, stay in a core's 2 MiB
// cache, where the 10,000's do not: localview's BenchmarkMemoryFloor). local is one reader
// thread pinned to CPU 0; http and redis are 32 connections of minimal
// clients (no pipelining), their threads on CPU 1, so that the daemon's
// core does nothing else.
//
// Metrics: ops/s is the wall rate; cpu-ns/op the CPU an operation costs
// the one who serves it (the reader's thread for local, the daemon's
// process for a socket GET); core-ops/s = 1e9 / cpu-ns/op is the rate of
// one core that does nothing else, the figure that holds on a loaded
// machine (the wall rate does only on a quiet one); daemon-busy is the
// daemon's CPU over the wall time (about 1: its core was saturated, the
// rate is the daemon's and not the clients'); x-local is the local
// core-ops/s over this one's, the ratio the issue asks for. With
// CACHECAST_HUGE_TMPFS (or CACHECAST_TMPFS) naming a directory the view
// file is there (pmd-%: its share on huge pages).
func BenchmarkViewThroughput(b *testing.B) {
	const keys, hot, value = 1_000_000, 10_000, 100
	n := startThroughputNode(b, keys, value)
	rng := rand.New(rand.NewPCG(12, 500))
	hotKeys := rng.Perm(keys)[:hot]
	sets := []struct {
		name string
		key  func(rng *rand.Rand) int
	}{
		{"uniform", func(rng *rand.Rand) int { return rng.IntN(keys) }},
		{"hot", func(rng *rand.Rand) int { return hotKeys[rng.IntN(hot)] }},
		{"hot1000", func(rng *rand.Rand) int { return hotKeys[rng.IntN(1000)] }},
	}
	for _, set := range sets {
		// The keys in a random order drawn before the loops, laid out
		// one after the other: finding the next costs the loop no miss.
		order := throughputKeys(rand.New(rand.NewPCG(1, 2)), set.key, 1<<20)
		var localCPU float64
		b.Run("keys="+set.name+"/local", func(b *testing.B) {
			localCPU = benchLocalThroughput(b, n.view, order, value)
		})
		for _, door := range []string{"http", "redis"} {
			b.Run("keys="+set.name+"/"+door+"/conns=32", func(b *testing.B) {
				cpu := benchSocketThroughput(b, n, door, 32, order, value)
				if localCPU > 0 && cpu > 0 {
					b.ReportMetric(cpu/localCPU, "x-local")
				}
			})
		}
	}
}

// throughputNode is the daemon of BenchmarkViewThroughput.
type throughputNode struct {
	*Node
	view string
}

// startThroughputNode starts a daemon (GOMAXPROCS=1), publishes keys keys
// of size-byte values into topic "key", and then confines every thread of
// the daemon to CPU 0.
func startThroughputNode(b *testing.B, keys, size int) throughputNode {
	if runtime.NumCPU() < 2 {
		b.Skip("needs 2 CPUs: the daemon's and the clients'")
	}
	viewDir := ""
	for _, d := range viewbench.BenchDirs() {
		if d.Path != "" {
			viewDir = d.Path // the last named: the huge-page tmpfs when there is one
		}
	}
	var args []string
	view := ""
	if viewDir != "" {
		dir, err := os.MkdirTemp(viewDir, "ccv")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		view = filepath.Join(dir, "cc.view")
		args = append(args, "--view-file", view)
	}
	n := StartNode(b, bins, NodeOptions{Name: "throughput", Env: []string{"GOMAXPROCS=1"},
		Args: append(args, "--flush", "async", "--max-connections", "1024")})
	if view == "" {
		view = viewPath(n)
	}
	ctx := context.Background()
	value := make([]byte, size)
	msgs := make([]client.Message, 0, 1000)
	for i := 0; i < keys; i += cap(msgs) {
		msgs = msgs[:0]
		for j := i; j < min(i+cap(msgs), keys); j++ {
			copy(value, strconv.Itoa(j))
			msgs = append(msgs, client.Message{Key: throughputKey(j), Value: append([]byte(nil), value...)})
		}
		if _, err := n.Client.PublishBatch(ctx, "key", msgs); err != nil {
			b.Fatal(err)
		}
	}
	r, err := localview.Open(view)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		st, err := r.Status()
		if err == nil && st.Ready && st.Keys >= keys {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the view has not the %d keys: %+v %v", keys, st, err)
		}
	}
	// Confined once loaded (the load is not measured, and on a busy
	// machine would take minutes on one core).
	if err := pinProcess(n.PID(), 0); err != nil {
		b.Fatalf("pinning the daemon to CPU 0: %v", err)
	}
	return throughputNode{Node: n, view: view}
}

func throughputKey(i int) string { return fmt.Sprintf("%012d", i) }

// throughputKeys draws count keys with pick, one string's bytes after the
// other's.
func throughputKeys(rng *rand.Rand, pick func(*rand.Rand) int, count int) []string {
	var all strings.Builder
	for range count {
		all.WriteString(throughputKey(pick(rng)))
	}
	s := all.String()
	out := make([]string, count)
	for i := range out {
		out[i] = s[12*i : 12*i+12]
	}
	return out
}

// benchLocalThroughput reads the view with one reader on one thread
// pinned to CPU 0 and returns its CPU time a read.
func benchLocalThroughput(b *testing.B, path string, order []string, size int) float64 {
	r, err := localview.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		b.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &all)
	if err := pinThread(0, 0); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 256)
	cpu0 := testkit.ThreadCPU()
	t0 := time.Now()
	reads := 0
	for i := 0; b.Loop(); i++ {
		v, tag, _, err := r.GetInto(buf, "key", order[i&(len(order)-1)])
		if err != nil || len(v) != size {
			b.Fatalf("get: %d bytes, %v", len(v), err)
		}
		buf = tag[:0]
		reads++
	}
	wall, cpu := time.Since(t0), testkit.ThreadCPU()-cpu0
	perRead := float64(cpu) / float64(reads)
	b.ReportMetric(float64(reads)/wall.Seconds(), "ops/s")
	b.ReportMetric(perRead, "cpu-ns/op")
	b.ReportMetric(1e9/perRead, "core-ops/s")
	viewbench.ReportHugeShare(b, path)
	return perRead
}

// benchSocketThroughput makes b.N GETs over conns connections to the
// daemon's HTTP socket or Redis door, clients on CPU 1, and returns the
// daemon's CPU time a GET.
func benchSocketThroughput(b *testing.B, n throughputNode, door string, conns int, order []string, size int) float64 {
	sock := n.Socket
	if door == "redis" {
		sock = n.RedisSocket()
	}
	clients := make([]*getConn, conns)
	for i := range clients {
		c, err := dialGetConn(sock, door == "redis")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	b.ResetTimer()
	cpu0, err := processCPU(n.PID())
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	total := int64(b.N)
	for _, c := range clients {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			pinThread(0, 1)
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				if err := c.get(order[int(i)&(len(order)-1)], size); err != nil {
					errs <- err
					next.Store(total)
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	cpu1, err := processCPU(n.PID())
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	perGet := float64(cpu1-cpu0) / float64(total)
	b.ReportMetric(float64(total)/wall.Seconds(), "ops/s")
	b.ReportMetric(perGet, "cpu-ns/op")
	b.ReportMetric(1e9/perGet, "core-ops/s")
	b.ReportMetric(float64(cpu1-cpu0)/float64(wall), "daemon-busy")
	return perGet
}

// getConn is a minimal client of one connection (HTTP/1.1 or RESP): the
// request written, the answer read, nothing kept, so that a client core
// keeps a one-core daemon busy.
type getConn struct {
	nc    net.Conn
	r     *bufio.Reader
	redis bool
	req   []byte
	body  []byte
}

func dialGetConn(sock string, redis bool) (*getConn, error) {
	nc, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	return &getConn{nc: nc, r: bufio.NewReaderSize(nc, 4096), redis: redis}, nil
}

func (c *getConn) Close() error { return c.nc.Close() }

// get asks for key of topic "key" and checks that the value has size
// bytes.
func (c *getConn) get(key string, size int) error {
	if c.redis {
		c.req = fmt.Appendf(c.req[:0], "*2\r\n$3\r\nGET\r\n$%d\r\nkey:%s\r\n", len(key)+4, key)
	} else {
		c.req = fmt.Appendf(c.req[:0], "GET /v1/topics/key/keys/%s HTTP/1.1\r\nHost: cachecast\r\n\r\n", key)
	}
	if _, err := c.nc.Write(c.req); err != nil {
		return err
	}
	length := -1
	if c.redis {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) < 4 || line[0] != '$' {
			return fmt.Errorf("GET key:%s: %q", key, line)
		}
		length, _ = strconv.Atoi(string(line[1 : len(line)-2]))
		length += 2 // the CRLF after the bulk string
	} else {
		status := true
		for {
			line, err := c.r.ReadSlice('\n')
			if err != nil {
				return err
			}
			if status {
				if !strings.HasPrefix(string(line), "HTTP/1.1 200 ") {
					return fmt.Errorf("GET %s: %q", key, line)
				}
				status = false
			}
			if len(line) <= 2 {
				break
			}
			if name, v, ok := strings.Cut(string(line), ":"); ok && strings.EqualFold(name, "Content-Length") {
				length, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
	}
	if length < 0 {
		return fmt.Errorf("GET %s: no length", key)
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	if _, err := io.ReadFull(c.r, c.body[:length]); err != nil {
		return err
	}
	if got := length - map[bool]int{true: 2, false: 0}[c.redis]; got != size {
		return fmt.Errorf("GET %s: %d bytes, want %d", key, got, size)
	}
	return nil
}

// pinThread binds the thread tid (0: the calling one) to CPU cpu.
func pinThread(tid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(tid, &set)
}

// pinProcess binds every thread of the process pid to CPU cpu; threads it
// starts later inherit it from the one that starts them.
func pinProcess(pid, cpu int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := pinThread(tid, cpu); err != nil {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}

// processCPU is the CPU time (user and system) the process pid has used,
// from /proc/PID/stat (in clock ticks of 10ms: a run should last seconds).
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's ")": state is the 3rd field of the
	// line, utime and stime the 14th and 15th.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100), nil
}
