package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/client/clienttest"
	"github.com/cachecast/cachecast/cmd/cachecast/internal/bench"
)

// The CLI is tested in-process (run) against clienttest.Server, a double
// of the daemon's wire format on a real Unix socket. End-to-end runs of
// the binary against a real cachecastd belong to test/.

type result struct {
	stdout, stderr string
	code           int
}

func cli(t *testing.T, srv *clienttest.Server, stdin string, args ...string) result {
	t.Helper()
	return cliCtx(context.Background(), t, srv, stdin, args...)
}

func cliCtx(ctx context.Context, t *testing.T, srv *clienttest.Server, stdin string, args ...string) result {
	t.Helper()
	socket := ""
	if srv != nil {
		socket = srv.Socket
	}
	return cliSocket(ctx, t, socket, stdin, args...)
}

// cliSocket runs a command line with CACHECAST_SOCKET set to socket
// (unset when empty).
func cliSocket(ctx context.Context, t *testing.T, socket, stdin string, args ...string) result {
	t.Helper()
	return cliEnv(ctx, t, socket, stdin, nil, args...)
}

// cliEnv is cliSocket with edit applied to the env first (nil: none),
// for the terminal flags.
func cliEnv(ctx context.Context, t *testing.T, socket, stdin string, edit func(*env), args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{
		stdin:  strings.NewReader(stdin),
		stdout: &out,
		stderr: &errOut,
		getenv: func(k string) string {
			if k == "CACHECAST_SOCKET" {
				return socket
			}
			return ""
		},
	}
	if edit != nil {
		edit(e)
	}
	code := run(ctx, e, args)
	return result{out.String(), errOut.String(), code}
}

func (r result) check(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

func TestHelp(t *testing.T) {
	r := cli(t, nil, "", "help").check(t, exitOK)
	for _, c := range commands {
		if !strings.Contains(r.stdout, "  "+c.name+" ") {
			t.Errorf("help lacks %s:\n%s", c.name, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "--socket") || !strings.Contains(r.stdout, "./cachecast.sock") {
		t.Errorf("help lacks --socket and its default:\n%s", r.stdout)
	}
	cli(t, nil, "", "--help").check(t, exitOK)
	for _, c := range commands {
		name := strings.Fields(c.name)
		for _, args := range [][]string{slices.Concat(name, []string{"--help"}), slices.Concat(name, []string{"-h"}), slices.Concat([]string{"help"}, name)} {
			r := cli(t, nil, "", args...).check(t, exitOK)
			if !strings.Contains(r.stdout, "Usage: cachecast "+c.name) || !strings.Contains(r.stdout, "--socket") {
				t.Errorf("%v:\n%s", args, r.stdout)
			}
		}
	}
	r = cli(t, nil, "", "help", "bench").check(t, exitOK)
	for _, f := range []string{"--count", "--size", "--conns", "--batch", "--keys", "--mode", "--expires-in", "--effective-at"} {
		if !strings.Contains(r.stdout, f) {
			t.Errorf("bench help lacks %s", f)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	srv := clienttest.NewServer(t)
	tests := [][]string{
		{},
		{"nope"},
		{"help", "nope"},
		{"--bogus"},
		{"publish", "t"},
		{"publish", "t", "k", "v", "extra"},
		{"get", "t"},
		{"get", "t", "k", "x"},
		{"del", "t"},
		{"keys"},
		{"keys", "t", "--limit", "-1"},
		{"keys", "t", "--limit", "many"},
		{"topics", "x"},
		{"status", "x"},
		{"watch"},
		{"watch", "t", "--ack", "sometimes"},
		{"bench", "--mode", "scan"},
		{"bench", "--mode", "get", "--batch", "10"},
		{"bench", "--count", "0"},
		{"bench", "--conns", "0"},
		{"bench", "--transport", "carrier-pigeon"},
		{"bench", "--expires-in", "-1s"},
		{"bench", "--expires-in", "1h", "--transport", "http"},
		{"bench", "--effective-at", "1999999999999", "--mode", "get"},
		{"bench", "--effective-at", "soon"},
		{"bench", "--effective-at", "1\r\nX-Evil: 1"},
		{"get", "--nope", "t", "k"},
		{"dlq"},
		{"dlq", "nope"},
		{"help", "dlq"},
		{"help", "dlq", "list", "x"},
		{"group"},
		{"groups", "x"},
		{"dlq", "list"},
		{"dlq", "list", "--topic", "t"},
		{"dlq", "list", "--topic", "t", "--group", "g", "--limit", "-1"},
		{"dlq", "show", "--topic", "t", "--group", "g"},
		{"dlq", "show", "--group", "g", "id"},
		{"dlq", "replay", "--topic", "t", "--group", "g"},
		{"dlq", "replay", "--topic", "t", "--group", "g", "--all", "id"},
		{"group", "reset", "--topic", "t", "--group", "g"},
		{"group", "reset", "--group", "g", "--to", "earliest"},
		{"watch", "t", "--group", "g", "--from", "earliest"},
		{"watch", "t", "--group", "g", "--name", "n"},
		{"watch", "t", "--group", "g", "--ack", "auto"},
		{"watch", "t", "--max-inflight", "5"},
		{"watch", "t", "--group", "g", "--max-inflight", "-1"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := cli(t, srv, "", args...).check(t, exitUsage)
			if r.stderr == "" || r.stdout != "" {
				t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
			}
		})
	}
	if n := srv.Messages("t"); n != 0 {
		t.Errorf("usage errors published %d messages", n)
	}
}

var resultLine = regexp.MustCompile(`^ok seq=(\d+) origin=00c0ffee12345678 hlc=(\d{17,}) time=\d{4}-\d\d-\d\dT[0-9:.]+Z\n$`)

func TestPublishGetDel(t *testing.T) {
	srv := clienttest.NewServer(t)
	r := cli(t, srv, "", "publish", "prices", "sku/42", "12.50", "--tag", "eu").check(t, exitOK)
	if !resultLine.MatchString(r.stdout) {
		t.Errorf("publish printed %q", r.stdout)
	}
	binary := "\x00\xff\nbinary\r\n"
	cli(t, srv, binary, "publish", "prices", "bin").check(t, exitOK)
	cli(t, srv, "", "publish", "prices", "empty", "").check(t, exitOK)

	r = cli(t, srv, "", "get", "prices", "sku/42").check(t, exitOK)
	if r.stdout != "12.50" || r.stderr != "" {
		t.Errorf("get: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = cli(t, srv, "", "get", "prices", "bin", "-v").check(t, exitOK)
	if r.stdout != binary {
		t.Errorf("get of a value from stdin: %q, want %q", r.stdout, binary)
	}
	for _, want := range []string{"origin: 00c0ffee12345678", "seq:    2", "size:   11", "tag:    \n"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("get -v stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	r = cli(t, srv, "", "get", "prices", "empty").check(t, exitOK)
	if r.stdout != "" {
		t.Errorf("empty value: %q", r.stdout)
	}

	r = cli(t, srv, "", "del", "prices", "sku/42", "--json").check(t, exitOK)
	var pr client.PutResult
	if err := json.Unmarshal([]byte(r.stdout), &pr); err != nil || pr.Seq != 4 || pr.Key != "sku/42" || !pr.OK() {
		t.Errorf("del --json: %q (%+v, %v)", r.stdout, pr, err)
	}
	r = cli(t, srv, "", "get", "prices", "sku/42").check(t, exitError)
	if !strings.Contains(r.stderr, "prices/sku/42: not found") {
		t.Errorf("get of a deleted key: %q", r.stderr)
	}

	// A keyless publish is a stream message.
	cli(t, srv, "", "publish", "events", "", "hello").check(t, exitOK)
	if n := srv.Messages("events"); n != 1 {
		t.Errorf("%d stream messages", n)
	}
	// An API error is reported with its code, exit 1.
	r = cli(t, srv, "", "publish", "bad topic", "k", "v").check(t, exitError)
	if !strings.Contains(r.stderr, "invalid_name") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestSocketSelection(t *testing.T) {
	a, b := clienttest.NewServer(t), clienttest.NewServer(t)
	// env names a; --socket, before or after the command, names b.
	cli(t, a, "", "publish", "t", "k", "from-env").check(t, exitOK)
	cli(t, a, "", "--socket", b.Socket, "publish", "t", "k", "flag-before").check(t, exitOK)
	cli(t, a, "", "publish", "--socket="+b.Socket, "t", "k2", "flag-after").check(t, exitOK)
	if a.Messages("t") != 1 || b.Messages("t") != 2 {
		t.Errorf("a has %d, b has %d messages; want 1 and 2", a.Messages("t"), b.Messages("t"))
	}

	// Without either, ./cachecast.sock in the working directory.
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	r := cli(t, nil, "", "get", "t", "k").check(t, exitError)
	if !strings.Contains(r.stderr, "cachecast.sock") || !strings.Contains(r.stderr, "Is cachecastd running?") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestKeysTopics(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := client.New(srv.Socket)
	defer c.Close()
	var msgs []client.Message
	var want []string
	for i := range 30 {
		k := fmt.Sprintf("p/%03d", i)
		msgs = append(msgs, client.Message{Key: k, Value: []byte("v")})
		want = append(want, k)
	}
	msgs = append(msgs, client.Message{Key: "q", Value: []byte("v")})
	if _, err := c.PublishBatch(context.Background(), "cat", msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(context.Background(), "dog", "x", []byte("v"), ""); err != nil {
		t.Fatal(err)
	}

	r := cli(t, srv, "", "keys", "cat", "--prefix", "p/").check(t, exitOK)
	if r.stdout != strings.Join(want, "\n")+"\n" {
		t.Errorf("keys --prefix:\n%s", r.stdout)
	}
	r = cli(t, srv, "", "keys", "cat", "--limit", "3", "--after", "p/010").check(t, exitOK)
	if r.stdout != "p/011\np/012\np/013\n" {
		t.Errorf("keys --limit --after: %q", r.stdout)
	}
	r = cli(t, srv, "", "keys", "none").check(t, exitOK)
	if r.stdout != "" {
		t.Errorf("keys of an unknown topic: %q", r.stdout)
	}

	r = cli(t, srv, "", "topics").check(t, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "TOPIC KEYS MESSAGES" ||
		strings.Join(strings.Fields(lines[1]), " ") != "cat 31 31" || strings.Join(strings.Fields(lines[2]), " ") != "dog 1 1" {
		t.Errorf("topics:\n%s", r.stdout)
	}
}

func TestStatus(t *testing.T) {
	srv := clienttest.NewServer(t)
	r := cli(t, srv, "", "status").check(t, exitOK)
	for _, want := range []string{"node", "clienttest", "00c0ffee12345678", "flush", "async", "segments", "1 (1 mapped)", "64.0 MiB", "health", "ready"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = cli(t, srv, "", "status", "--json").check(t, exitOK)
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil || raw["cluster"] == nil || raw["store"] == nil {
		t.Errorf("status --json: %s (%v)", r.stdout, err)
	}
	srv.SetHealth(errors.New("last flush failed: EIO"))
	r = cli(t, srv, "", "status").check(t, exitError)
	if !strings.Contains(r.stdout, "FAIL: last flush failed: EIO") || !strings.Contains(r.stderr, "not healthy") {
		t.Errorf("unhealthy status: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestWatch(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := client.New(srv.Socket)
	defer c.Close()
	msgs := []client.Message{
		{Key: "a", Tag: "red", Value: []byte("12.50")},
		{Key: "b", Value: []byte("two words")},
		{Key: "", Tag: "red", Value: []byte("line\nbreak\xff")},
		{Key: "a", Tag: "red", Delete: true},
		{Key: "c", Tag: "blue", Value: []byte("x")},
	}
	if _, err := c.PublishBatch(context.Background(), "w", msgs); err != nil {
		t.Fatal(err)
	}
	r := cli(t, srv, "", "watch", "w", "--from", "earliest", "--count", "5").check(t, exitOK)
	want := "0\ta\tred\t12.50\n" +
		"1\tb\t-\ttwo words\n" +
		"2\t-\tred\t\"line\\nbreak\\xff\"\n" +
		"3\ta\tred\t(deleted)\n" +
		"4\tc\tblue\tx\n"
	if r.stdout != want {
		t.Errorf("watch:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = cli(t, srv, "", "watch", "w", "--from", "1", "--tags", "red,blue", "--count", "2").check(t, exitOK)
	if r.stdout != "2\t-\tred\t\"line\\nbreak\\xff\"\n3\ta\tred\t(deleted)\n" {
		t.Errorf("watch --tags --from 1:\n%s", r.stdout)
	}
	r = cli(t, srv, "", "watch", "w", "--from", "earliest", "--count", "3", "--json").check(t, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var ev client.Event
	if len(lines) != 3 || json.Unmarshal([]byte(lines[2]), &ev) != nil || !bytes.Equal(ev.Value, msgs[2].Value) || ev.Offset != 2 {
		t.Errorf("watch --json:\n%s", r.stdout)
	}

	// --name with client acks: the cursor follows what was printed, and a
	// second watch resumes there.
	cli(t, srv, "", "watch", "w", "--from", "earliest", "--name", "me", "--count", "2").check(t, exitOK)
	if cur, err := c.GetCursor(context.Background(), "me"); err != nil || cur.Offset != 2 {
		t.Fatalf("cursor after 2 printed: %+v %v", cur, err)
	}
	r = cli(t, srv, "", "watch", "w", "--name", "me", "--count", "1").check(t, exitOK)
	if !strings.HasPrefix(r.stdout, "2\t") {
		t.Errorf("resumed watch printed %q", r.stdout)
	}
	cli(t, srv, "", "watch", "w", "--from", "earliest", "--name", "auto", "--ack", "auto", "--count", "5").check(t, exitOK)
	// The server acks as it writes, so its last ack may land just after
	// the CLI has printed its fifth line and gone: wait for it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cur, err := c.GetCursor(context.Background(), "auto")
		if err == nil && cur.Offset == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("auto-acked cursor: %+v %v", cur, err)
		}
	}

	// Live: a watch from latest sees what is published after it starts;
	// an interrupt ends it with status 0 and acks what it printed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result)
	go func() { done <- cliCtx(ctx, t, srv, "", "watch", "w", "--name", "live", "--from", "latest") }()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Requests("GET /v1/topics/{topic}/subscribe") < 7 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the headers reach the client
	if _, err := c.Publish(context.Background(), "w", "live", []byte("now"), ""); err != nil {
		t.Fatal(err)
	}
	for {
		cur, err := c.GetCursor(context.Background(), "live")
		if err == nil && cur.Offset == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live message was not acked: %+v %v", cur, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	r = (<-done).check(t, exitOK)
	if r.stdout != "5\tlive\t-\tnow\n" {
		t.Errorf("live watch printed %q", r.stdout)
	}

	// The daemon going away ends watch with an error.
	go func() { time.Sleep(50 * time.Millisecond); srv.Close() }()
	r = cli(t, srv, "", "watch", "w").check(t, exitError)
	if !strings.Contains(r.stderr, "ended the stream") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestBench(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		route    string
		requests int
		stored   int
	}{
		{"put", []string{"--count", "300", "--conns", "3", "--keys", "50"}, "PUT /v1/topics/{topic}/keys/{key}", 300, 300},
		{"batch", []string{"--count", "1050", "--batch", "100", "--conns", "2", "--size", "10"}, "POST /v1/topics/{topic}/messages", 11, 1050},
		{"get", []string{"--mode", "get", "--count", "200", "--keys", "2500", "--conns", "2"}, "GET /v1/topics/{topic}/keys/{key}", 200, 2500},
	}
	for _, tt := range tests {
		for _, transport := range []string{"conn", "http"} {
			t.Run(tt.name+"/"+transport, func(t *testing.T) {
				srv := clienttest.NewServer(t)
				r := cli(t, srv, "", append([]string{"bench", "--transport", transport}, tt.args...)...).check(t, exitOK)
				for _, want := range []string{"throughput:", "msgs/s", "MB/s", "p50 ", "p99 ", "p99.9 ", "max "} {
					if !strings.Contains(r.stdout, want) {
						t.Errorf("report lacks %q:\n%s", want, r.stdout)
					}
				}
				if n := srv.Requests(tt.route); n != tt.requests {
					t.Errorf("%d requests on %s, want %d", n, tt.route, tt.requests)
				}
				if n := srv.Messages("bench"); n != tt.stored {
					t.Errorf("%d messages stored, want %d", n, tt.stored)
				}
			})
		}
	}
	srv := clienttest.NewServer(t)
	r := cli(t, srv, "", "bench", "--count", "100", "--batch", "7", "--json", "--topic", "bj").check(t, exitOK)
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Messages != 100 || rep.Requests != 15 ||
		rep.MsgsPerSec <= 0 || rep.P50 <= 0 || rep.P50 > rep.P99 || rep.P99 > rep.P999 || rep.P999 > rep.Max {
		t.Errorf("bench --json: %s (%+v, %v)", r.stdout, rep, err)
	}
	// An error on the way (the value is too large) ends the bench, exit 1.
	small := clienttest.NewServer(t, clienttest.WithMaxValueSize(10))
	for _, transport := range []string{"conn", "http"} {
		r = cli(t, small, "", "bench", "--count", "100", "--size", "11", "--transport", transport).check(t, exitError)
		if !strings.Contains(r.stderr, "value_too_large") {
			t.Errorf("stderr %q", r.stderr)
		}
	}
	// No daemon: a clear error, exit 1.
	dir := t.TempDir()
	r = cliCtx(context.Background(), t, nil, "", "bench", "--socket", dir+"/none.sock").check(t, exitError)
	if !strings.Contains(r.stderr, "Is cachecastd running?") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestCursorsCommands(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := client.New(srv.Socket)
	defer c.Close()
	for i := range 5 {
		if _, err := c.Publish(context.Background(), "t", fmt.Sprint("k", i), []byte("v"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SetCursor(context.Background(), "behind", "t", 1); err != nil {
		t.Fatal(err)
	}
	r := cli(t, srv, "", "cursors").check(t, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := fmt.Sprintf("behind t 1 4 %d", os.Getuid())
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "CURSOR TOPIC OFFSET LAG OWNER" ||
		strings.Join(strings.Fields(lines[1]), " ") != want {
		t.Errorf("cursors:\n%s\nwant the row %q", r.stdout, want)
	}
	r = cli(t, srv, "", "cursor", "delete", "behind").check(t, exitOK)
	if r.stdout != "deleted behind topic=t offset=1\n" {
		t.Errorf("cursor delete: %q", r.stdout)
	}
	r = cli(t, srv, "", "cursors").check(t, exitOK)
	if strings.TrimSpace(r.stdout) != "CURSOR  TOPIC  OFFSET  LAG  OWNER" {
		t.Errorf("cursors after the delete: %q", r.stdout)
	}
	cli(t, srv, "", "cursor", "delete", "behind").check(t, exitError)
}
