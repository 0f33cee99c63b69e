package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
)

// A broken log pipe never stops the node (`cachecastd 2>&1 | head -1`, a
// killed tee): the daemon's stdout and stderr are one pipe, and once it
// serves the test closes the pipe's only reader. Writes to fd 1 and 2 then
// fail with EPIPE; without SIGPIPE ignored the Go runtime exits with
// SIGPIPE at the next log line (exit 141, no drain, the socket left
// behind). The daemon must keep serving, count the lost lines in
// cachecast_log_lines_lost_total, note the loss once to journald when it
// runs, and stop cleanly on SIGTERM: exit 0, socket removed.
func TestBrokenLogPipe(t *testing.T) {
	t.Parallel()
	t.Run("no journald", func(t *testing.T) {
		brokenLogPipe(t, bins.Daemon, nil)
	})
	t.Run("journald", func(t *testing.T) {
		// journald's socket is a datagram socket of the test's: the daemon
		// is built with go-systemd's socket path pointing at it.
		dir, err := os.MkdirTemp("", "ccj")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		sockPath := filepath.Join(dir, "journal.sock")
		bin := filepath.Join(dir, "cachecastd")
		build := exec.Command("go", "build", "-o", bin, "-ldflags",
			"-X github.com/coreos/go-systemd/v22/journal.journalSocket="+sockPath, Module+"/cmd/cachecastd")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		journal, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer journal.Close()

		brokenLogPipe(t, bin, func() {
			// The note arrives once, whatever number of lines was lost.
			var notes []string
			buf := make([]byte, 64<<10)
			for {
				_ = journal.SetReadDeadline(time.Now().Add(time.Second))
				n, err := journal.Read(buf)
				if err != nil {
					break
				}
				notes = append(notes, string(buf[:n]))
			}
			if len(notes) != 1 {
				t.Fatalf("journald got %d datagrams; want one note: %q", len(notes), notes)
			}
			for _, want := range []string{"MESSAGE=cachecastd: writing the log failed (", "broken pipe",
				"cachecast_log_lines_lost_total", "PRIORITY=4\n", "SYSLOG_IDENTIFIER=cachecastd\n"} {
				if !strings.Contains(notes[0], want) {
					t.Fatalf("journald note %q lacks %q", notes[0], want)
				}
			}
		})
	})
}

// brokenLogPipe runs bin with its log on a pipe, closes the pipe's reader
// once the daemon serves, and checks that it serves on, counts the lost
// lines and stops cleanly; then it calls check, if set, with the process
// gone.
func brokenLogPipe(t *testing.T, bin string, check func()) {
	sockDir, err := os.MkdirTemp("", "cc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "cc.sock")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--socket", sock,
		"--gossip-addr=", "--log-format", "json", "--metrics-addr", "127.0.0.1:0"}, smallNode...)...)
	cmd.Env = bins.Env()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the child holds the only writer
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	// Read the log until the daemon serves, then go away.
	_ = r.SetReadDeadline(time.Now().Add(15 * time.Second))
	var metricsAddr string
	lines := bufio.NewScanner(r)
	var seen []string
	for metricsAddr == "" && lines.Scan() {
		seen = append(seen, lines.Text())
		var l struct {
			Msg         string `json:"msg"`
			MetricsAddr string `json:"metrics-addr"`
		}
		if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "serving" {
			metricsAddr = l.MetricsAddr
		}
	}
	if metricsAddr == "" {
		t.Fatalf("no serving line with a metrics-addr in the log (%v):\n%s", lines.Err(), strings.Join(seen, "\n"))
	}
	r.Close()

	// Every one of these logs a line (debug level) into the broken pipe.
	c := client.New(sock, client.WithTimeout(10*time.Second))
	defer c.Close()
	lost := func() float64 { return scrapeCounter(t, metricsAddr, "cachecast_log_lines_lost_total") }
	for i := 0; lost() < 3; i++ {
		select {
		case <-exited:
			t.Fatalf("the daemon died at a log line into the broken pipe: %v", cmd.ProcessState)
		default:
		}
		if i == 200 {
			t.Fatalf("after %d writes, %v log lines counted lost; want 3", i, lost())
		}
		if _, err := c.Publish(ctx(t), "t", "k"+strconv.Itoa(i), []byte("v"), ""); err != nil {
			select {
			case <-exited:
				t.Fatalf("publish %d: %v: the daemon died at a log line into the broken pipe: %v", i, err, cmd.ProcessState)
			case <-time.After(time.Second):
			}
			t.Fatalf("publish %d with the log broken: %v", i, err)
		}
		if _, err := c.Get(ctx(t), "t", "absent"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("get absent: %v", err)
		}
	}
	// SIGHUP logs too; the daemon still serves after it.
	before := lost()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); lost() == before; {
		select {
		case <-exited:
			t.Fatalf("the daemon died at SIGHUP with the log broken: %v", cmd.ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP logged no line in 10s")
		}
	}
	if err := c.Readyz(ctx(t)); err != nil {
		t.Fatalf("readyz with the log broken: %v", err)
	}
	if v, err := c.Get(ctx(t), "t", "k0"); err != nil || string(v.Bytes) != "v" {
		t.Fatalf("get k0: %q %v", v.Bytes, err)
	}

	c.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit 20s after SIGTERM")
	}
	if st := cmd.ProcessState; !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("after SIGTERM: %v; want exit status 0", st)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if check != nil {
		check()
	}
}

// scrapeCounter reads one unlabelled counter from a daemon's /metrics.
func scrapeCounter(t *testing.T, addr, name string) float64 {
	t.Helper()
	v, err := scrapeSeries(addr, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// scrapeSeries reads one series from a daemon's /metrics: its name with
// its labels as the exposition writes them (`name{peer="c"}`).
func scrapeSeries(addr, series string) (float64, error) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	res, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+|NaN|[+-]Inf)$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no %s in the metrics of %s", series, addr)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", series, err)
	}
	return v, nil
}
