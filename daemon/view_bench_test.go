package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/localview/viewbench"

	"github.com/cachecast/cachecast/store/record"
)

// The shared view's benchmarks run against a real daemon holding 1M keys
// (16-byte keys, topic "prices"), with the socket GET in the same run:
//
//	go test -run '^$' -bench 'LocalGet|SocketGet|PublishToVisible|PythonGet' -benchtime 2s ./daemon/
//
// (SocketGet matches both the HTTP and the Redis socket's GET, LocalGet
// both LocalGet and LocalGetMany.)

const benchKeys = 1_000_000

func benchKey(i int) string { return fmt.Sprintf("sku-%012d", i) } // 16 bytes

// benchDaemon is a daemon whose view holds benchKeys keys of size-byte
// values, and a random order of the keys to read them in.
type benchDaemon struct {
	d     *Daemon
	stop  context.CancelFunc
	done  chan struct{}
	dir   string
	cfg   Config
	keys  []string
	order []int
	// inOrder is keys[order[i]] with the bytes of one after the other's,
	// so that finding the next key to read costs the benchmark's loop no
	// cache miss (an application has the key it asks for at hand).
	inOrder []string
	size    int
}

// benchDaemonKey names a benchmark daemon: its values' size and the
// directory of its view file (viewbench.Dir's name).
type benchDaemonKey struct {
	size int
	fs   string
}

var (
	benchMu      sync.Mutex
	benchDaemons = map[benchDaemonKey]*benchDaemon{}
)

// startBenchDaemon is startBenchDaemonOn with the view file beside the
// socket, in the default temporary directory.
func startBenchDaemon(b *testing.B, size int) *benchDaemon {
	return startBenchDaemonOn(b, size, viewbench.Dir{Name: "temp"})
}

// startBenchDaemonOn starts (once per value size and view directory, for
// every benchmark of the run) a daemon and publishes the keys through its
// store. Its view file is in fs.Path (a tmpfs, a huge-page one: see
// viewbench.BenchDirs), or beside the socket when that is "". It is not
// testConfig: that one wants a *testing.T.
func startBenchDaemonOn(b *testing.B, size int, fs viewbench.Dir) *benchDaemon {
	benchMu.Lock()
	defer benchMu.Unlock()
	key := benchDaemonKey{size, fs.Name}
	if bd := benchDaemons[key]; bd != nil {
		return bd
	}
	dir, err := os.MkdirTemp("", "ccb")
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Socket = filepath.Join(dir, "s.sock")
	if fs.Path != "" {
		viewDir, err := os.MkdirTemp(fs.Path, "ccb")
		if err != nil {
			b.Fatal(err)
		}
		cfg.ViewFile = filepath.Join(viewDir, "s.view")
	}
	cfg.NodeName = "bench"
	cfg.GossipAddr = ""
	cfg.LogLevel = "error"
	cfg.SnapshotInterval = time.Hour
	d, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	// Not b.Cleanup: the daemon serves every benchmark of the run;
	// closeBenchDaemons stops it after them.
	bd := &benchDaemon{d: d, stop: cancel, done: done, dir: dir, cfg: cfg, size: size, keys: make([]string, benchKeys)}
	for i := range bd.keys {
		bd.keys[i] = benchKey(i)
	}
	bd.order = rand.New(rand.NewPCG(1, uint64(size))).Perm(benchKeys)
	var all strings.Builder
	for _, i := range bd.order {
		all.WriteString(bd.keys[i])
	}
	bd.inOrder = make([]string, benchKeys)
	for i, at := 0, all.String(); i < benchKeys; i++ {
		bd.inOrder[i], at = at[:len(bd.keys[bd.order[i]])], at[len(bd.keys[bd.order[i]]):]
	}
	value := make([]byte, size)
	msgs := make([]record.Message, 0, 1000)
	for i := 0; i < benchKeys; i += 1000 {
		msgs = msgs[:0]
		for j := i; j < i+1000; j++ {
			copy(value, strconv.Itoa(j))
			msgs = append(msgs, record.Message{Topic: "prices", Key: bd.keys[j], Value: append([]byte(nil), value...)})
		}
		if _, err := d.Store().PublishBatch(msgs); err != nil {
			b.Fatal(err)
		}
	}
	r := bd.reader(b)
	defer r.Close()
	for deadline := time.Now().Add(5 * time.Minute); ; {
		st, err := r.Status()
		if err == nil && st.Ready && st.Keys == benchKeys {
			b.Logf("view of %d keys of %d-byte values: %d bytes (%.1f a key), generation %d",
				st.Keys, size, st.Size, float64(st.Size)/benchKeys, st.Generation)
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("view not loaded: %+v %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	benchDaemons[key] = bd
	return bd
}

// withBenchDaemonsClosed runs the tests and benchmarks, then stops the
// benchmarks' daemons (before TestMain looks for leaked goroutines).
type withBenchDaemonsClosed struct{ m *testing.M }

func (w withBenchDaemonsClosed) Run() int {
	code := w.m.Run()
	benchMu.Lock()
	defer benchMu.Unlock()
	for key, bd := range benchDaemons {
		bd.stop()
		<-bd.done
		os.RemoveAll(bd.dir)
		if bd.cfg.ViewFile != config.ViewFileAuto {
			os.RemoveAll(filepath.Dir(bd.cfg.ViewFile))
		}
		delete(benchDaemons, key)
	}
	return code
}

func (bd *benchDaemon) reader(b *testing.B) *localview.Reader {
	r, err := localview.Open(bd.cfg.ViewPath())
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// writeAt100k publishes updates of random keys through the store at
// 100,000 a second (100 every millisecond) until stop is called.
func (bd *benchDaemon) writeAt100k(b *testing.B) (stop func() int) {
	quit := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		rng := rand.New(rand.NewPCG(2, 3))
		msgs := make([]record.Message, 100)
		value := make([]byte, bd.size)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-quit:
				done <- n
				return
			case <-tick.C:
			}
			// Catch up after a late tick, so that the rate holds.
			for want := int(time.Since(start).Milliseconds()) * 100; n < want; n += len(msgs) {
				for j := range msgs {
					copy(value, strconv.Itoa(n+j))
					msgs[j] = record.Message{Topic: "prices", Key: bd.keys[rng.IntN(benchKeys)], Value: append([]byte(nil), value...)}
				}
				if _, err := bd.d.Store().PublishBatch(msgs); err != nil {
					b.Error(err)
				}
			}
		}
	}()
	t0 := time.Now()
	return func() int {
		close(quit)
		n := <-done
		b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "writes/s")
		return n
	}
}

// reportPercentiles times samples reads one by one and reports p50 and
// p99. Each figure includes one clock pair (time.Now, time.Since: the
// vDSO's clock_gettime twice, about 40-90ns with the TSC as the clock
// source, 300-400ns with kvm-clock), which the clock-p50-ns reported
// beside them measures in the same run: the time of a timed read of
// nothing. ns/op and cpu-ns/op are the mean over the whole loop, timed
// once, without it.
func reportPercentiles(b *testing.B, samples int, read func(i int)) {
	lat := make([]time.Duration, samples)
	for i := range lat {
		t0 := time.Now()
		read(i)
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
	for i := range lat {
		t0 := time.Now()
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "clock-p50-ns")
}

// BenchmarkLocalGet reads the view of a daemon holding 1M keys at random,
// with and without a writer at 100k updates/s. With a tmpfs named in the
// environment (viewbench.BenchDirs: CACHECAST_TMPFS, CACHECAST_HUGE_TMPFS)
// it also reads a daemon whose view file is there, "/fs=NAME" after the
// name; pmd-% is the share of the mapping on huge pages.
func BenchmarkLocalGet(b *testing.B) {
	for _, fs := range viewbench.BenchDirs() {
		suffix := ""
		if fs.Path != "" {
			suffix = "/fs=" + fs.Name
		}
		for _, size := range []int{16, 100} {
			for _, writer := range []string{"none", "100k"} {
				benchLocalGet(b, fmt.Sprintf("keys=1M/value=%d/writer=%s%s", size, writer, suffix), size, writer, fs)
			}
		}
	}
}

// benchLocalGet is one case of BenchmarkLocalGet: values of size bytes,
// writer "none" or "100k", the view file in fs.
func benchLocalGet(b *testing.B, name string, size int, writer string, fs viewbench.Dir) {
	b.Run(name, func(b *testing.B) {
		bd := startBenchDaemonOn(b, size, fs)
		r := bd.reader(b)
		defer r.Close()
		if writer == "100k" {
			defer bd.writeAt100k(b)()
		}
		buf := make([]byte, 0, 256)
		read := func(i int) {
			v, tag, _, err := r.GetInto(buf, "prices", bd.inOrder[i%benchKeys])
			if err != nil || len(v) != size {
				b.Fatalf("get: %d bytes, %v", len(v), err)
			}
			buf = tag[:0]
		}
		b.ReportAllocs()
		cpu := testkit.StartThreadCPU()
		n := 0
		for i := 0; b.Loop(); i++ {
			read(i)
			n++
		}
		cpu.Report(b, n)
		reportPercentiles(b, 200_000, read)
		viewbench.ReportHugeShare(b, bd.cfg.ViewPath())
	})
}

// BenchmarkLocalGetMany reads keys=n random keys of the 1M at a time with
// one GetMany (one instant, a batch whole or not at all), as MGET does: the
// keys' cache misses overlap, so a key costs less than a Get. ns/key is the
// wall time a key, cpu-ns/op the thread's CPU time a key; p50-ns and
// p99-ns are a whole GetMany's.
func BenchmarkLocalGetMany(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("keys=1M/value=100/n=%d", n), func(b *testing.B) {
			bd := startBenchDaemon(b, 100)
			r := bd.reader(b)
			defer r.Close()
			topics := []string{"prices"}
			var items []localview.Item
			buf := make([]byte, 0, 100*n)
			read := func(i int) {
				at := i * n % (benchKeys - n)
				var err error
				items, buf, err = r.GetMany(topics, bd.inOrder[at:at+n], items, buf)
				if err != nil || !items[n-1].Found || len(items[0].Value) != 100 {
					b.Fatalf("GetMany: %v", err)
				}
			}
			b.ReportAllocs()
			cpu := testkit.StartThreadCPU()
			calls := 0
			for i := 0; b.Loop(); i++ {
				read(i)
				calls++
			}
			cpu.Report(b, calls*n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(calls*n), "ns/key")
			reportPercentiles(b, 20_000, read)
		})
	}
}

// BenchmarkSocketGet is a GET over the Unix socket (HTTP/1.1, one
// connection of a client.Client, as an application reads) of the same
// daemon and keys. (cachecast bench's raw connection spends less on the
// client's side: cmd/cachecast/internal/rawconn's BenchmarkBenchConn.)
func BenchmarkSocketGet(b *testing.B) {
	b.Run("keys=1M/value=100", func(b *testing.B) {
		bd := startBenchDaemon(b, 100)
		c := client.New(bd.cfg.Socket, client.WithMaxConns(1), client.WithTimeout(10*time.Second))
		defer c.Close()
		ctx := context.Background()
		read := func(i int) {
			v, err := c.Get(ctx, "prices", bd.inOrder[i%benchKeys])
			if err != nil || len(v.Bytes) != 100 {
				b.Fatalf("get: %v", err)
			}
		}
		b.ReportAllocs()
		cpu := testkit.StartThreadCPU() // the client's side only
		n := 0
		for i := 0; b.Loop(); i++ {
			read(i)
			n++
		}
		cpu.Report(b, n)
		reportPercentiles(b, 20_000, read)
	})
}

// BenchmarkRedisSocketGet is a GET through the Redis door's Unix socket
// of the same daemon and keys: one connection, a minimal RESP client (the
// command written, the bulk answer read), as the HTTP one is minimal.
func BenchmarkRedisSocketGet(b *testing.B) {
	b.Run("keys=1M/value=100", func(b *testing.B) {
		bd := startBenchDaemon(b, 100)
		conn, err := net.Dial("unix", bd.d.RedisSocketPath())
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		rd := bufio.NewReader(conn)
		var cmd, answer []byte
		read := func(i int) {
			name := "prices:" + bd.inOrder[i%benchKeys]
			cmd = fmt.Appendf(cmd[:0], "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(name), name)
			if _, err := conn.Write(cmd); err != nil {
				b.Fatal(err)
			}
			line, err := rd.ReadSlice('\n')
			if err != nil || string(line) != "$100\r\n" {
				b.Fatalf("get %s: %q %v", name, line, err)
			}
			answer = slices.Grow(answer[:0], 102)[:102]
			if _, err := io.ReadFull(rd, answer); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		cpu := testkit.StartThreadCPU() // the client's side only
		n := 0
		for i := 0; b.Loop(); i++ {
			read(i)
			n++
		}
		cpu.Report(b, n)
		reportPercentiles(b, 20_000, read)
	})
}

// BenchmarkPublishToVisible: a publish on this node (the store, as the
// API's handler calls it), then a reader of the view spins until it sees
// the value: the time from the publish's return (the store's view has
// applied it) to the shared view showing it.
func BenchmarkPublishToVisible(b *testing.B) {
	bd := startBenchDaemon(b, 100)
	r := bd.reader(b)
	defer r.Close()
	lat := make([]time.Duration, 0, 1<<16)
	buf := make([]byte, 0, 256)
	value := make([]byte, 100)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		key := bd.keys[bd.order[i%benchKeys]]
		want := strconv.Itoa(i)
		copy(value, want+"|")
		if _, err := bd.d.Store().Publish(&record.Message{Topic: "prices", Key: key, Value: value}); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for {
			v, tag, _, err := r.GetInto(buf, "prices", key)
			if err == nil && strings.HasPrefix(string(v), want+"|") {
				buf = tag[:0]
				break
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
}

// BenchmarkPythonGet runs the Python reader (localview/python) over the
// same view: ns per Get, measured by the script in CPU time.
func BenchmarkPythonGet(b *testing.B) {
	bd := startBenchDaemon(b, 100)
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Fatalf("python3: %v", err)
	}
	b.ResetTimer()
	for b.Loop() {
		out, err := exec.Command(py, "../localview/python/bench_view.py", bd.cfg.ViewPath(), "prices", strconv.Itoa(benchKeys), "200000").CombinedOutput()
		if err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		var cpu, wall float64
		if _, err := fmt.Sscanf(string(out), "%g %g", &cpu, &wall); err != nil {
			b.Fatalf("%q: %v", out, err)
		}
		b.ReportMetric(cpu, "py-cpu-ns/get")
		b.ReportMetric(wall, "py-wall-ns/get")
	}
}

// BenchmarkPublishRandom1M is the writer of BenchmarkLocalGet's
// writer=100k alone, unpaced: batches of 100 updates of random keys
// among the 1M of the benchmark daemon (100-byte values), through the
// store and its view mirror: the rate one goroutine sustains, and so the
// bound of the paced writer when a reader shares the machine with it.
func BenchmarkPublishRandom1M(b *testing.B) {
	bd := startBenchDaemon(b, 100)
	rng := rand.New(rand.NewPCG(4, 5))
	msgs := make([]record.Message, 100)
	value := make([]byte, 100)
	b.ResetTimer()
	cpu0 := testkit.ProcessCPU()
	n := 0
	for b.Loop() {
		for j := range msgs {
			copy(value, strconv.Itoa(n+j))
			msgs[j] = record.Message{Topic: "prices", Key: bd.keys[rng.IntN(benchKeys)], Value: append([]byte(nil), value...)}
		}
		if _, err := bd.d.Store().PublishBatch(msgs); err != nil {
			b.Fatal(err)
		}
		n += len(msgs)
	}
	b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(n), "proc-cpu-ns/msg")
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkPublishViewMirror is what the shared view's mirror adds to a
// publish: batches of 100 messages (100-byte values over 10,000 keys, as
// redis-benchmark -r 10000) through the store of a daemon with the view
// file on and off, in the same run. proc-cpu-ns/msg is the whole
// process's CPU time a message (getrusage RUSAGE_SELF: the publishing
// goroutine, the mirror's and the runtime's).
func BenchmarkPublishViewMirror(b *testing.B) {
	for _, view := range []string{"on", "off"} {
		b.Run("view="+view, func(b *testing.B) {
			dir := b.TempDir()
			cfg := config.Default()
			cfg.DataDir = filepath.Join(dir, "data")
			cfg.Socket = filepath.Join(dir, "s.sock")
			cfg.NodeName = "bench"
			cfg.GossipAddr = ""
			cfg.LogLevel = "error"
			cfg.SnapshotInterval = time.Hour
			if view == "off" {
				cfg.ViewFile = ""
			}
			d, err := New(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { d.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			const keys = 10_000
			msgs := make([]record.Message, 100)
			value := make([]byte, 100)
			publish := func(i int) {
				for j := range msgs {
					copy(value, strconv.Itoa(i+j))
					msgs[j] = record.Message{Topic: "prices", Key: benchKey((i + j) * 7919 % keys), Value: append([]byte(nil), value...)}
				}
				if _, err := d.Store().PublishBatch(msgs); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < keys; i += len(msgs) {
				publish(i)
			}
			b.ResetTimer()
			cpu0 := testkit.ProcessCPU()
			n := 0
			for b.Loop() {
				publish(n)
				n += len(msgs)
			}
			b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(n), "proc-cpu-ns/msg")
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
