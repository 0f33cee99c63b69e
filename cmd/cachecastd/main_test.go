package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/goleak"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noEnv(string) (string, bool) { return "", false }

func tempStderr(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, noEnv, &out, tempStderr(t)); code != exitOK {
		t.Fatalf("--help exit %d", code)
	}
	// Long flag names widen the column and wrap the help differently:
	// compare with the line breaks and indents folded into spaces.
	help := strings.Join(strings.Fields(out.String()), " ")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	cfg := config.Default()
	cfg.AddFlags(fs)
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		if !strings.Contains(help, "--"+f.Name+" ") && !strings.Contains(help, "--"+f.Name+"[") {
			t.Errorf("--help lacks --%s", f.Name)
		}
		if !strings.Contains(help, "$"+config.EnvName(f.Name)) {
			t.Errorf("--help lacks $%s", config.EnvName(f.Name))
		}
	})
	for _, want := range []string{`(default "./data")`, `(default "./cachecast.sock")`, `(default "async")`,
		"(default 0660)", "(default 1MiB)", "(default 64MiB)", `(default "recycle")`, `(default "info")`,
		"--version", "console on a terminal"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if n < 25 {
		t.Fatalf("only %d flags", n)
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--version"}, noEnv, &out, tempStderr(t)); code != exitOK || out.String() != "cachecastd "+daemon.Version+"\n" {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--flush=x"}, nil, `--flush: must be "sync" or "async", got "x"`},
		{[]string{"--nope"}, nil, "unknown flag: --nope"},
		{[]string{"serve"}, nil, "unexpected arguments"},
		{nil, map[string]string{"CACHECAST_WHEN_FULL": "panic"}, `--when-full: must be "recycle" or "refuse", got "panic"`},
		{nil, map[string]string{"CACHECAST_SEGMENT_SIZE": "big"}, "CACHECAST_SEGMENT_SIZE: invalid value"},
		{[]string{"--log-format=xml"}, nil, "--log-format"},
		// Refused by validation, before anything is bound.
		{[]string{"--gossip-addr", "0.0.0.0:17946"}, nil, "--gossip-addr: 0.0.0.0:17946 is reachable beyond this machine and there is no --cluster-key-file"},
		{nil, map[string]string{"CACHECAST_DATA_ADDR": ":17947"}, "--data-addr: :17947 is reachable beyond this machine"},
		{[]string{"--gossip-addr=", "--ack-timeout=0"}, nil, "--ack-timeout: must be positive"},
	} {
		stderr := tempStderr(t)
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if code := run(tc.args, lookup, io.Discard, stderr); code != exitUsage {
			t.Errorf("%v %v: exit %d; want %d", tc.args, tc.env, code, exitUsage)
		}
		if got := readAll(t, stderr); !strings.Contains(got, tc.want) {
			t.Errorf("%v %v: stderr %q; want %q", tc.args, tc.env, got, tc.want)
		}
	}
}

// The binary's main path: start with flags and environment, serve, stop on
// SIGTERM with exit 0, socket removed; a second one on the same data
// directory exits 1 with a clear message.
func TestRunUntilSIGTERM(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "cc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "s.sock")
	dataDir := filepath.Join(t.TempDir(), "data")
	args := []string{"--data-dir", dataDir, "--socket", sock, "--max-value-size=64KiB", "--gossip-addr="}
	env := map[string]string{"CACHECAST_SEGMENT_SIZE": "1MiB", "CACHECAST_LOG_FORMAT": "json"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	stderr := tempStderr(t)

	done := make(chan int, 1)
	go func() { done <- run(args, lookup, io.Discard, stderr) }()

	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case code := <-done:
			t.Fatalf("run exited %d before serving: %s", code, readAll(t, stderr))
		default:
		}
		res, err := c.Get("http://x/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v\n%s", err, readAll(t, stderr))
		}
		time.Sleep(10 * time.Millisecond)
	}
	req, _ := http.NewRequest("PUT", "http://x/v1/topics/t/keys/k", strings.NewReader("v"))
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("PUT: %d", res.StatusCode)
	}

	// A second daemon on the same data directory is refused.
	stderr2 := tempStderr(t)
	if code := run([]string{"--data-dir", dataDir, "--socket", sock + "2", "--max-value-size=64KiB", "--gossip-addr="}, lookup, io.Discard, stderr2); code != exitError {
		t.Fatalf("second daemon: exit %d", code)
	}
	if got := readAll(t, stderr2); !strings.Contains(got, "is in use by another cachecastd") {
		t.Fatalf("second daemon said: %s", got)
	}

	c.CloseIdleConnections()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after SIGTERM: %s", code, readAll(t, stderr))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit 10s after SIGTERM")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	logs := readAll(t, stderr)
	if !strings.Contains(logs, `"msg":"serving"`) || !strings.Contains(logs, `"msg":"stopped"`) {
		t.Fatalf("json logs expected, got:\n%s", logs)
	}
}

// TestUnknownSettingsWarned: a CACHECAST_ name in the env file that no
// flag reads (a typo) is warned about at start, and one added later on
// SIGHUP, when the file is read again.
func TestUnknownSettingsWarned(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "cc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "s.sock")
	envFile := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(envFile, []byte("CACHECAST_MAX_VALU_SIZE=1KiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--socket", sock, "--gossip-addr=",
		"--segment-size=1MiB", "--max-value-size=64KiB", "--log-format=json", "--env-file", envFile}
	stderr := tempStderr(t)
	done := make(chan int, 1)
	go func() { done <- run(args, noEnv, io.Discard, stderr) }()
	waitLog := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(readAll(t, stderr), want); time.Sleep(10 * time.Millisecond) {
			select {
			case code := <-done:
				t.Fatalf("run exited %d: %s", code, readAll(t, stderr))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after 10s:\n%s", want, readAll(t, stderr))
			}
		}
	}
	waitLog("no flag reads CACHECAST_MAX_VALU_SIZE (in " + envFile + ")")
	waitLog(`"msg":"serving"`)

	if err := os.WriteFile(envFile, []byte("CACHECAST_MAX_VALUE_SIZE=32KiB\nCACHECAST_LOG_LEVL=debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("no flag reads CACHECAST_LOG_LEVL (in " + envFile + ")")
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after SIGTERM: %s", code, readAll(t, stderr))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit 10s after SIGTERM")
	}
}
