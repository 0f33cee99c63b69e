package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// Seed writes keys keys of valueSize bytes to a store in dir, as one
// node that wrote them all, and closes it: a data directory a cachecastd
// started on it serves at once.
func Seed(dir string, keys, valueSize int) error {
	o := store.DefaultOptions(dir)
	st, err := store.Open(o)
	if err != nil {
		return err
	}
	val := make([]byte, valueSize)
	batch := make([]record.Message, 0, 1024)
	for i := 0; i < keys; i++ {
		copy(val, fmt.Sprintf("v%08d", i))
		batch = append(batch, record.Message{Topic: Topic, Key: fmt.Sprintf("k%08d", i), Value: val})
		if len(batch) == cap(batch) || i == keys-1 {
			if _, err := st.PublishBatch(batch); err != nil {
				st.Close()
				return err
			}
			batch = batch[:0]
		}
	}
	return st.Close()
}

// Bootstrap is one bootstrap measurement.
type Bootstrap struct {
	Keys int `json:"keys"`
	// ReadyzSec is from starting the fresh node's process to its first 200
	// from /readyz (503 catching_up until it has caught up); ReadySec to
	// its /v1/status showing the source's vector and view digests.
	ReadySec  float64 `json:"ready_s"`
	ReadyzSec float64 `json:"readyz_s"`
	// HWMMiB is the fresh node's resident memory high-water mark.
	HWMMiB    float64 `json:"hwm_mib"`
	SourceMiB float64 `json:"source_rss_mib"`
	// FreshCPUSec is the CPU time the fresh node spent to ReadySec,
	// SourceCPUSec the source's over the same span (encoding and sending
	// the snapshot): on a shared machine they move less than the wall
	// times. MachineLoad is the 1-minute load average at the end.
	FreshCPUSec float64 `json:"fresh_cpu_s"`
	// FreshReadyzCPUSec is the fresh node's CPU time to ReadyzSec (before
	// the /v1/status digests the harness asks for).
	FreshReadyzCPUSec float64 `json:"fresh_readyz_cpu_s"`
	SourceCPUSec      float64 `json:"source_cpu_s"`
	MachineLoad       float64 `json:"machine_load"`
	// AskSec is from starting the fresh node to its asking for the
	// snapshot, BootstrappedSec to its having applied it (both from its
	// log; 0 when the line is missing).
	AskSec          float64 `json:"ask_s"`
	BootstrappedSec float64 `json:"bootstrapped_s"`
	// Err says why the measurement failed; empty when it did not.
	Err string `json:"error,omitempty"`
}

// MeasureBootstrap seeds a source node with keys keys of 100 bytes (in
// dir/source, unless a run before seeded it: measurements in one dir
// share the source), starts it (cachecastd, the binary bin), then starts
// a fresh node that joins it and times it to caught up.
func MeasureBootstrap(ctx context.Context, bin, dir string, keys int, extra ...string) Bootstrap {
	r := Bootstrap{Keys: keys}
	src := &Proc{Name: "source", Dir: filepath.Join(dir, "source")}
	if _, err := os.Stat(filepath.Join(src.Dir, "data")); err != nil {
		if err := Seed(filepath.Join(src.Dir, "data"), keys, 100); err != nil {
			r.Err = "seed: " + err.Error()
			return r
		}
	}
	os.RemoveAll(filepath.Join(dir, "fresh"))
	pf := &Procs{Bin: bin}
	defer pf.Close()
	start := func(p *Proc, join string) error {
		os.MkdirAll(p.Dir, 0o755)
		p.Socket = filepath.Join(p.Dir, "s")
		p.Gossip = freeAddr()
		args := append([]string{
			"--data-dir", filepath.Join(p.Dir, "data"), "--socket", p.Socket, "--view-file", "",
			"--redis-socket", "off", "--node-name", p.Name,
			"--gossip-addr", p.Gossip, "--data-addr", "127.0.0.1:0", "--join", join,
			"--log-level", "info", "--log-format", "json",
		}, extra...)
		log, err := os.Create(filepath.Join(p.Dir, "log"))
		if err != nil {
			return err
		}
		defer log.Close()
		p.cmd = exec.Command(bin, args...)
		p.cmd.Stdout, p.cmd.Stderr = log, log
		p.http = unixClient(p.Socket)
		if err := p.start(); err != nil {
			return err
		}
		pf.Procs = append(pf.Procs, p)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := start(src, ""); err != nil {
		r.Err = "source: " + err.Error()
		return r
	}
	if err := src.waitReady(wctx); err != nil {
		r.Err = "source not ready: " + err.Error()
		return r
	}
	r.SourceMiB = float64(RSS(src.PID())) / (1 << 20)
	want, err := src.view()
	if err != nil {
		r.Err = "source: " + err.Error()
		return r
	}

	// The fresh node gets a wait of its own: the source's start (loading
	// 10M keys) must not eat it.
	wctx, cancel = context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	fresh := &Proc{Name: "fresh", Dir: filepath.Join(dir, "fresh")}
	srcCPU := readProc(src.PID(), nil).cpu
	t0 := time.Now()
	if err := start(fresh, src.Gossip); err != nil {
		r.Err = "fresh: " + err.Error()
		return r
	}
	// /readyz is cheap; /v1/status digests the whole view (seconds at 10M
	// keys on a loaded machine), so it is asked only once ready, and
	// again until it agrees.
	if err := fresh.waitReady(wctx); err != nil {
		r.Err = "fresh node not ready: " + err.Error() + "; its log ends: " + logTail(fresh, 3000)
		return r
	}
	r.ReadyzSec = time.Since(t0).Seconds()
	r.FreshReadyzCPUSec = readProc(fresh.PID(), nil).cpu.Seconds()
	for {
		if got, err := fresh.view(); err == nil && got == want {
			break
		}
		if wctx.Err() != nil {
			r.Err = "fresh node ready but its view differs: " + wctx.Err().Error() + "; its log ends: " + logTail(fresh, 3000)
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.ReadySec = time.Since(t0).Seconds()
	r.FreshCPUSec = readProc(fresh.PID(), nil).cpu.Seconds()
	r.SourceCPUSec = (readProc(src.PID(), nil).cpu - srcCPU).Seconds()
	r.HWMMiB = float64(HWM(fresh.PID())) / (1 << 20)
	r.MachineLoad = LoadAverage()
	r.AskSec = logSince(fresh, t0, "asking for its snapshot")
	r.BootstrappedSec = logSince(fresh, t0, "bootstrapped from the peer's snapshot")
	return r
}

// logSince is the time from t0 to the first line of p's JSON log whose
// message contains msg, in seconds (0 if there is none).
func logSince(p *Proc, t0 time.Time, msg string) float64 {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "log"))
	for _, line := range strings.Split(string(b), "\n") {
		var l struct {
			TS  string `json:"ts"`
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || !strings.Contains(l.Msg, msg) {
			continue
		}
		if ts, err := time.Parse("2006-01-02T15:04:05.000Z0700", l.TS); err == nil {
			return ts.Sub(t0).Seconds()
		}
	}
	return 0
}

// logTail is the last n bytes of a process's log.
func logTail(p *Proc, n int) string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "log"))
	return string(b[max(0, len(b)-n):])
}

// LoadAverage is the machine's 1-minute load average (0 if unknown).
func LoadAverage() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	l, _ := strconv.ParseFloat(f[0], 64)
	return l
}
