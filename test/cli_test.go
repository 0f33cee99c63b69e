package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
)

// cliResult is what one run of the cachecast command printed.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs the cachecast command against n (CACHECAST_SOCKET), with stdin
// if not empty, bounded to 30s.
func cli(t *testing.T, n *Node, stdin string, args ...string) cliResult {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, bins.CLI, args...)
	cmd.Env = bins.Env("CACHECAST_SOCKET=" + n.Socket)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
	if err != nil && r.code < 0 {
		t.Fatalf("cachecast %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ok fails the test unless the command exited 0.
func (r cliResult) ok(t *testing.T, what string) cliResult {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("cachecast %s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
	return r
}

var publishLine = regexp.MustCompile(`^ok seq=(\d+) origin=([0-9a-f]{16}) hlc=\d+ time=\S+\n$`)

// TestCLI runs every command of cachecast against a real daemon: publish
// (argument and stdin), get, del, keys, topics, status, watch (history,
// live, durable cursor, JSON) and a small bench, and the exit statuses of
// errors.
func TestCLI(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "cli", Args: smallNode})
	st, err := n.Client.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	origin := client.FormatOrigin(st.Node.Origin)

	t.Run("publish", func(t *testing.T) {
		r := cli(t, n, "", "publish", "--tag", "eu", "prices", "sku-1", "12.50").ok(t, "publish")
		if m := publishLine.FindStringSubmatch(r.stdout); m == nil || m[1] != "1" || m[2] != origin {
			t.Fatalf("publish printed %q; want ok seq=1 origin=%s ...", r.stdout, origin)
		}
		r = cli(t, n, "9.99", "publish", "prices", "sku-2").ok(t, "publish from stdin")
		if m := publishLine.FindStringSubmatch(r.stdout); m == nil || m[1] != "2" {
			t.Fatalf("publish from stdin printed %q", r.stdout)
		}
		r = cli(t, n, "", "publish", "--json", "prices", "sku-3", "1.00").ok(t, "publish --json")
		var pr client.PutResult
		if err := json.Unmarshal([]byte(r.stdout), &pr); err != nil || pr.Seq != 3 || pr.Key != "sku-3" {
			t.Fatalf("publish --json printed %q: %v", r.stdout, err)
		}
		// --socket wins over CACHECAST_SOCKET.
		cmd := exec.Command(bins.CLI, "--socket", n.Socket, "publish", "prices", "sku-4", "4.00")
		cmd.Env = bins.Env("CACHECAST_SOCKET=/nonexistent/cachecast.sock")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("publish with --socket: %v: %s", err, out)
		}
	})

	t.Run("get", func(t *testing.T) {
		r := cli(t, n, "", "get", "prices", "sku-2").ok(t, "get")
		if r.stdout != "9.99" {
			t.Fatalf("get printed %q; want the raw value 9.99", r.stdout)
		}
		r = cli(t, n, "", "get", "-v", "prices", "sku-1").ok(t, "get -v")
		if r.stdout != "12.50" || !regexp.MustCompile(`(?m)^tag:\s+eu$`).MatchString(r.stderr) ||
			!regexp.MustCompile(`(?m)^seq:\s+1$`).MatchString(r.stderr) || !strings.Contains(r.stderr, origin) {
			t.Fatalf("get -v: stdout %q, stderr %q", r.stdout, r.stderr)
		}
		r = cli(t, n, "", "get", "prices", "absent")
		if r.code != 1 || !strings.Contains(r.stderr, "not found") || r.stdout != "" {
			t.Fatalf("get of an absent key: exit %d, %q %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("del", func(t *testing.T) {
		r := cli(t, n, "", "del", "prices", "sku-2").ok(t, "del")
		if m := publishLine.FindStringSubmatch(r.stdout); m == nil || m[1] != "5" {
			t.Fatalf("del printed %q; want ok seq=5", r.stdout)
		}
		if r := cli(t, n, "", "get", "prices", "sku-2"); r.code != 1 {
			t.Fatalf("get after del: exit %d %q", r.code, r.stdout)
		}
	})

	t.Run("keys", func(t *testing.T) {
		if r := cli(t, n, "", "keys", "prices").ok(t, "keys"); r.stdout != "sku-1\nsku-3\nsku-4\n" {
			t.Fatalf("keys printed %q", r.stdout)
		}
		if r := cli(t, n, "", "keys", "--prefix", "sku-", "--after", "sku-1", "--limit", "1", "prices").ok(t, "keys --after"); r.stdout != "sku-3\n" {
			t.Fatalf("keys --prefix --after --limit printed %q", r.stdout)
		}
	})

	t.Run("topics", func(t *testing.T) {
		r := cli(t, n, "", "topics").ok(t, "topics")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != "prices 3 5" {
			t.Fatalf("topics printed %q; want a header and prices 3 keys 5 messages", r.stdout)
		}
	})

	t.Run("status", func(t *testing.T) {
		r := cli(t, n, "", "status").ok(t, "status")
		for _, want := range []string{`(?m)^node\s+cli$`, `(?m)^origin\s+` + origin + `$`, `(?m)^version\s+` + regexp.QuoteMeta(testVersion) + `$`,
			`(?m)^flush\s+async$`, `(?m)^health\s+ok$`, `(?m)^ready\s+ok$`} {
			if !regexp.MustCompile(want).MatchString(r.stdout) {
				t.Fatalf("status does not match %s:\n%s", want, r.stdout)
			}
		}
		r = cli(t, n, "", "status", "--json").ok(t, "status --json")
		var s struct{ Node struct{ Origin string } }
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Node.Origin != origin {
			t.Fatalf("status --json printed %q: %v", r.stdout, err)
		}
	})

	t.Run("watch history", func(t *testing.T) {
		r := cli(t, n, "", "watch", "--from", "earliest", "--count", "3", "prices").ok(t, "watch")
		want := "0\tsku-1\teu\t12.50\n1\tsku-2\t-\t9.99\n2\tsku-3\t-\t1.00\n"
		if r.stdout != want {
			t.Fatalf("watch printed %q; want %q", r.stdout, want)
		}
		r = cli(t, n, "", "watch", "--from", "4", "--count", "1", "prices").ok(t, "watch --from 4")
		if r.stdout != "4\tsku-2\t-\t(deleted)\n" {
			t.Fatalf("watch of a tombstone printed %q", r.stdout)
		}
		r = cli(t, n, "", "watch", "--json", "--from", "earliest", "--count", "1", "prices").ok(t, "watch --json")
		var ev client.Event
		if err := json.Unmarshal([]byte(r.stdout), &ev); err != nil || ev.Key != "sku-1" || ev.Tag != "eu" {
			t.Fatalf("watch --json printed %q: %v", r.stdout, err)
		}
		// --json is the daemon's own lines, byte for byte.
		r = cli(t, n, "", "watch", "--json", "--from", "earliest", "--count", "5", "prices").ok(t, "watch --json")
		if want := subscriptionLines(t, n, "prices", 5); r.stdout != want {
			t.Fatalf("watch --json printed\n%s\nthe daemon's stream is\n%s", r.stdout, want)
		}
	})

	t.Run("watch with a durable cursor", func(t *testing.T) {
		r := cli(t, n, "", "watch", "--name", "w1", "--from", "earliest", "--count", "2", "prices").ok(t, "watch --name")
		if !strings.HasPrefix(r.stdout, "0\t") || strings.Count(r.stdout, "\n") != 2 {
			t.Fatalf("first watch --name printed %q", r.stdout)
		}
		r = cli(t, n, "", "watch", "--name", "w1", "--count", "1", "prices").ok(t, "watch --name again")
		if !strings.HasPrefix(r.stdout, "2\tsku-3\t") {
			t.Fatalf("watch --name resumed with %q; want offset 2", r.stdout)
		}
	})

	t.Run("watch live", func(t *testing.T) {
		// From latest: publish until three lines came (the first publishes
		// may precede the subscription); they must be consecutive.
		c, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(c, bins.CLI, "watch", "--count", "3", "live")
		cmd.Env = bins.Env("CACHECAST_SOCKET=" + n.Socket)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 3)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		var got []string
		for i := 0; len(got) < 3 && c.Err() == nil; i++ {
			if _, err := n.Client.Publish(ctx(t), "live", fmt.Sprintf("k%03d", i), []byte(fmt.Sprint(i)), ""); err != nil {
				t.Fatal(err)
			}
			select {
			case l, ok := <-lines:
				if ok {
					got = append(got, l)
				}
			case <-time.After(20 * time.Millisecond):
			}
		}
		for len(got) < 3 {
			l, ok := <-lines
			if !ok {
				break
			}
			got = append(got, l)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("watch --count 3: %v (lines %q)", err, got)
		}
		if len(got) != 3 {
			t.Fatalf("watch printed %q", got)
		}
		var first int
		if _, err := fmt.Sscanf(got[0], "%d\t", &first); err != nil {
			t.Fatalf("line %q: %v", got[0], err)
		}
		for i, l := range got {
			if want := fmt.Sprintf("%d\tk%03d\t-\t%d", first+i, first+i, first+i); l != want {
				t.Fatalf("line %d: %q; want %q", i, l, want)
			}
		}
	})

	t.Run("bench", func(t *testing.T) {
		re := regexp.MustCompile(`throughput: (\d+) msgs/s.*\n.*p50 (\S+)\s+p99 (\S+)\s+p99\.9 (\S+)\s+max (\S+)`)
		for _, args := range [][]string{
			{"bench", "--count", "2000"},
			{"bench", "--count", "2000", "--conns", "4"},
			{"bench", "--count", "2000", "--batch", "100"},
			{"bench", "--count", "2000", "--mode", "get", "--keys", "100"},
		} {
			r := cli(t, n, "", args...).ok(t, strings.Join(args, " "))
			m := re.FindStringSubmatch(r.stdout)
			if m == nil {
				t.Fatalf("%s printed no throughput and percentiles:\n%s", strings.Join(args, " "), r.stdout)
			}
			t.Logf("%s: %s msgs/s, p50 %s p99 %s p99.9 %s max %s", strings.Join(args[1:], " "), m[1], m[2], m[3], m[4], m[5])
		}
		r := cli(t, n, "", "bench", "--count", "2000", "--batch", "100", "--json").ok(t, "bench --json")
		var b struct {
			Messages int     `json:"messages"`
			Rate     float64 `json:"msgs_per_sec"`
			P50      float64 `json:"p50_us"`
			P999     float64 `json:"p999_us"`
			Max      float64 `json:"max_us"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || b.Messages != 2000 || b.Rate <= 0 || b.P50 <= 0 || b.P50 > b.Max || b.P999 > b.Max {
			t.Fatalf("bench --json printed %q: %v", r.stdout, err)
		}
		// --effective-at and --expires-in put the time fields on every
		// message: each key's value is pending, with its expiry.
		at := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
		for _, batch := range []string{"0", "10"} {
			topic := "bench-timed-" + batch
			cli(t, n, "", "bench", "--count", "200", "--keys", "100", "--batch", batch, "--topic", topic, "--effective-at", at, "--expires-in", "2h").ok(t, "bench with time fields")
			r = cli(t, n, "", "pending", topic).ok(t, "pending")
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 101 || !strings.Contains(lines[1], "bench-00000000") {
				t.Fatalf("after bench --batch %s --effective-at: pending printed %d lines, want the header and 100 keys:\n%s", batch, len(lines), r.stdout)
			}
			for _, l := range lines[1:] {
				if f := strings.Fields(l); len(f) != 4 || f[1] >= f[3] {
					t.Fatalf("pending line %q: want a key, its instant, its value and a later expiry", l)
				}
			}
		}
	})

	t.Run("version", func(t *testing.T) {
		r := cli(t, n, "", "version").ok(t, "version")
		if want := "cachecast " + testVersion + "\ncachecastd " + testVersion + "\n"; r.stdout != want {
			t.Fatalf("version printed %q, want %q", r.stdout, want)
		}
	})

	t.Run("errors", func(t *testing.T) {
		// A value over --max-value-size (64KiB here) is refused before
		// the daemon reads it: bench reports the daemon's answer, not the
		// broken pipe of its write, with either transport.
		for _, transport := range []string{"conn", "http"} {
			r := cli(t, n, "", "bench", "--size", "2000000", "--count", "3", "--transport", transport)
			if r.code != 1 || !strings.Contains(r.stderr, "value_too_large") || !strings.Contains(r.stderr, "--max-value-size (64KiB)") {
				t.Fatalf("bench --size 2000000 --transport %s: exit %d, %q; want value_too_large naming the limit", transport, r.code, r.stderr)
			}
		}
		if r := cli(t, n, "", "nosuchcommand"); r.code != 2 {
			t.Fatalf("unknown command: exit %d; want 2 (usage)", r.code)
		}
		if r := cli(t, n, "", "publish", "prices"); r.code != 2 {
			t.Fatalf("publish without a key: exit %d; want 2 (usage)", r.code)
		}
		if r := cli(t, n, "", "publish", "bad topic", "k", "v"); r.code != 1 || !strings.Contains(r.stderr, "invalid_name") && !strings.Contains(r.stderr, "topic") {
			t.Fatalf("publish to a bad topic: exit %d, %q", r.code, r.stderr)
		}
		cmd := exec.Command(bins.CLI, "--socket", "/nonexistent/cachecast.sock", "status")
		cmd.Env = bins.Env()
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "/nonexistent/cachecast.sock") {
			t.Fatalf("status without a daemon: %v %q; want exit 1 naming the socket", err, out)
		}
	})
}

// subscriptionLines reads the first count lines of topic's stream from
// the earliest message straight off the socket (net/http, not package
// client), each with its newline.
func subscriptionLines(t *testing.T, n *Node, topic string, count int) string {
	t.Helper()
	conn, err := net.Dial("unix", n.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /v1/topics/%s/subscribe?from=earliest HTTP/1.1\r\nHost: x\r\n\r\n", topic)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var b strings.Builder
	for range count {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("subscription of %s: %v after %q", topic, err, b.String())
		}
		b.WriteString(line)
	}
	return b.String()
}

// TestCLIPending: cachecast pending lists a topic's scheduled values, a
// scheduled delete and an expiry, and nothing once their instant has come.
func TestCLIPending(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "cli-pending", Args: smallNode})
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	soon := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	body := fmt.Sprintf(`{"key":"sku-1","value":"7.99","effective_at":%q,"ttl_ms":7200000}
{"key":"sku-2","delete":true,"effective_at":%d}
{"key":"sku-3","value":"soon","effective_at":%d}`, at.Format(time.RFC3339Nano), at.UnixMilli(), soon)
	if r := httpDo(t, n, "POST", "/v1/topics/prices/messages", strings.NewReader(body), "Content-Type", "application/x-ndjson"); r.status != 200 {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	out := cli(t, n, "", "pending", "prices").ok(t, "pending").stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "KEY") ||
		!regexp.MustCompile(`^sku-1\s+`+regexp.QuoteMeta(at.Format(time.RFC3339Nano))+`\s+7\.99\s+\S+Z$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^sku-2\s+\S+\s+\(delete\)\s+-$`).MatchString(lines[2]) || !strings.HasPrefix(lines[3], "sku-3") {
		t.Fatalf("cachecast pending printed:\n%s", out)
	}
	testkit.Eventually(t, 10*time.Second, "sku-3 to take effect", func() bool {
		v, err := n.Client.Get(ctx(t), "prices", "sku-3")
		return err == nil && string(v.Bytes) == "soon"
	})
	if out := cli(t, n, "", "pending", "prices").ok(t, "pending").stdout; strings.Contains(out, "sku-3") {
		t.Fatalf("sku-3 is still listed after its instant:\n%s", out)
	}
}

// TestCLIStatusRedis checks that cachecast status prints the Redis front
// door's refusal, idle and tracking-cap counters, made to move by real
// connections to the node's Redis socket: a client-side-caching client
// past --redis-tracking-max-keys, a silent one past --redis-idle-timeout
// and one past --max-connections.
func TestCLIStatusRedis(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "cli-redis", Args: append(smallNode,
		"--max-connections", "2", "--max-connections-per-uid", "2",
		"--redis-idle-timeout", "3s", "--redis-tracking-max-keys", "10")})
	sock := n.RedisSocket()
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		return c
	}
	// A tracking client reads 11 keys: one past the cap of 10 evicts a
	// tenth of them. Tracking exempts it from the idle timeout.
	tracker := dial()
	cmds := "HELLO 3\r\nCLIENT TRACKING ON\r\n"
	for i := range 11 {
		cmds += fmt.Sprintf("GET k%d\r\n", i)
	}
	if _, err := io.WriteString(tracker, cmds+"PING\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := readUntil(tracker, "+PONG\r\n"); err != nil {
		t.Fatalf("tracking client: %v", err)
	}
	// A second connection that sends nothing takes the last place (once
	// the server counts it); a third is refused.
	dial()
	testkit.Until(t, 15*time.Second, "two Redis connections", func() string {
		st, err := n.Client.Status(ctx(t))
		if err != nil {
			return err.Error()
		}
		if st.Redis == nil || st.Redis.Connections != 2 {
			return fmt.Sprintf("redis status %+v", st.Redis)
		}
		return ""
	})
	refused := dial()
	io.WriteString(refused, "PING\r\n")
	if err := readUntil(refused, "-ERR max number of clients reached"); err != nil {
		t.Fatalf("third connection: %v", err)
	}
	testkit.Until(t, 20*time.Second, "the silent connection to close", func() string {
		st, err := n.Client.Status(ctx(t))
		if err != nil {
			return err.Error()
		}
		if r := st.Redis; r == nil || r.IdleClosed != 1 || r.ConnectionsRefused != 1 || r.TrackingEvictedKeys != 1 || r.Connections != 1 {
			return fmt.Sprintf("redis status %+v", st.Redis)
		}
		return ""
	})
	r := cli(t, n, "", "status").ok(t, "status")
	for _, want := range []string{`(?m)^redis clients\s+1 \(1 tracking, 0 subscriptions\)$`,
		`(?m)^redis connections refused\s+1 \(--max-connections, --max-connections-per-uid\)$`,
		`(?m)^redis idle closed\s+1 \(--redis-idle-timeout\)$`,
		`(?m)^tracking keys evicted\s+1 \(--redis-tracking-max-keys\)$`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("status does not match %s:\n%s", want, r.stdout)
		}
	}
}

// readUntil reads c until what it read holds want, or fails.
func readUntil(c net.Conn, want string) error {
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte(want)) {
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			return fmt.Errorf("read %q, then %w; want %q", got, err, want)
		}
	}
	return nil
}
