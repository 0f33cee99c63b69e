package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/client/clienttest"
)

// The terminal checks are injected here (env.stdinTTY, env.stdoutTTY);
// test.TestCLITerminal runs the binary on a real pseudo-terminal.

// TestGetNewlineOnTerminal: get ends the value with a newline on a
// terminal (unless it has one), and prints the raw bytes otherwise.
func TestGetNewlineOnTerminal(t *testing.T) {
	srv := clienttest.NewServer(t)
	for key, value := range map[string]string{"plain": "12.50", "newline": "line\n", "empty": "", "binary": "\x00\xff"} {
		cli(t, srv, "", "publish", "prices", key, value).check(t, exitOK)
	}
	tests := []struct {
		key  string
		tty  bool
		want string
	}{
		{"plain", true, "12.50\n"},
		{"plain", false, "12.50"},
		{"newline", true, "line\n"},
		{"newline", false, "line\n"},
		{"empty", true, "\n"},
		{"empty", false, ""},
		{"binary", true, "\x00\xff\n"},
		{"binary", false, "\x00\xff"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s tty=%v", tc.key, tc.tty), func(t *testing.T) {
			r := cliEnv(context.Background(), t, srv.Socket, "", func(e *env) { e.stdoutTTY = tc.tty }, "get", "prices", tc.key).check(t, exitOK)
			if r.stdout != tc.want {
				t.Errorf("stdout %q, want %q", r.stdout, tc.want)
			}
		})
	}
}

// TestPublishStdinTerminal: publish without a value refuses a terminal
// on stdin (a usage error, nothing published) instead of waiting, and
// reads stdin otherwise.
func TestPublishStdinTerminal(t *testing.T) {
	srv := clienttest.NewServer(t)
	tty := func(e *env) { e.stdinTTY = true }
	r := cliEnv(context.Background(), t, srv.Socket, "typed", tty, "publish", "prices", "k").check(t, exitUsage)
	if !strings.Contains(r.stderr, "stdin is a terminal") || r.stdout != "" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if n := srv.Messages("prices"); n != 0 {
		t.Fatalf("%d messages published", n)
	}
	cliEnv(context.Background(), t, srv.Socket, "", tty, "publish", "prices", "k", "arg").check(t, exitOK)
	cli(t, srv, "piped", "publish", "prices", "k2").check(t, exitOK)
	if r := cli(t, srv, "", "get", "prices", "k2").check(t, exitOK); r.stdout != "piped" {
		t.Errorf("value from a pipe: %q", r.stdout)
	}
}

// TestHelpHelp: help documents itself.
func TestHelpHelp(t *testing.T) {
	r := cli(t, nil, "", "help", "help").check(t, exitOK)
	if !strings.HasPrefix(r.stdout, "Usage: cachecast help [COMMAND]") || r.stderr != "" {
		t.Errorf("help help: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// TestVersion: version prints the CLI's version, then the daemon's when
// one answers; without a daemon it says so on stderr and succeeds.
func TestVersion(t *testing.T) {
	srv := clienttest.NewServer(t)
	r := cli(t, srv, "", "version").check(t, exitOK)
	if want := "cachecast " + cliVersion() + "\ncachecastd test\n"; r.stdout != want {
		t.Errorf("version printed %q, want %q", r.stdout, want)
	}
	r = cliSocket(context.Background(), t, filepath.Join(t.TempDir(), "none.sock"), "", "version").check(t, exitOK)
	if r.stdout != "cachecast "+cliVersion()+"\n" || !strings.Contains(r.stderr, "no daemon answered") {
		t.Errorf("version without a daemon: stdout %q stderr %q", r.stdout, r.stderr)
	}

	// A daemon that accepts and never answers does not hold version up.
	dir, err := os.MkdirTemp("", "ccver") // short: socket paths are limited to 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	r = cliSocket(context.Background(), t, filepath.Join(dir, "s.sock"), "", "version", "--timeout", "100ms").check(t, exitOK)
	if r.stdout != "cachecast "+cliVersion()+"\n" || !strings.Contains(r.stderr, "no daemon answered") {
		t.Errorf("version with a stalled daemon: stdout %q stderr %q", r.stdout, r.stderr)
	}
}
