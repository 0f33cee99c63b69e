package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestRedisMalformedInput: each frame gets the standard error; a stream
// that cannot be resynchronised closes that connection only, one that can
// answers the next command; nothing refused is written.
func TestRedisMalformedInput(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	big := strings.Repeat("a", 70<<10)
	for _, tc := range []struct {
		name, in, want string
		closes         bool
	}{
		{"empty array", "*0\r\n", "", false},
		{"null array", "*-1\r\n", "", false},
		{"bulk outside an array is an inline command", "$5\r\n", "-ERR unknown command '$5'", false},
		{"binary garbage is an unknown inline command", "\x00\xff\xfe\x80\r\n", "-ERR unknown command", false},
		{"unknown command", "*2\r\n$4\r\nFROB\r\n$1\r\nx\r\n", "-ERR unknown command 'FROB', with args beginning with: 'x'", false},
		{"arity", "*1\r\n$3\r\nGET\r\n", "-ERR wrong number of arguments for 'get' command", false},
		{"refused SET option", "*5\r\n$3\r\nSET\r\n$3\r\nb:k\r\n$1\r\nv\r\n$2\r\nPX\r\n$1\r\n9\r\n", "-ERR SET PX is not supported", false},
		{"bad count", "*x\r\n", "-ERR Protocol error: invalid length", true},
		{"count without CRLF", "*1\n", "-ERR Protocol error: invalid length", true},
		{"huge count", "*99999999\r\n", "-ERR Protocol error: 99999999 arguments is more than the 65536", true},
		{"negative bulk length", "*2\r\n$3\r\nGET\r\n$-5\r\n", "-ERR Protocol error: invalid length", true},
		{"null bulk as argument", "*2\r\n$3\r\nGET\r\n$-1\r\n", "-ERR Protocol error: invalid bulk length", true},
		{"bulk over --max-value-size", "*3\r\n$3\r\nSET\r\n$3\r\nb:k\r\n$99999999\r\n", "--max-value-size", true},
		{"not a bulk string", "*1\r\n+PING\r\n", "-ERR Protocol error: expected '$', got '+'", true},
		{"bulk without its CRLF", "*1\r\n$4\r\nPINGxx", "-ERR Protocol error: bulk string not followed by CRLF", true},
		{"an inline line that never ends", big, "-ERR Protocol error: too big inline request", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", td.d.RedisSocketPath())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			in := tc.in
			if !tc.closes {
				in += "*1\r\n$4\r\nPING\r\n"
			}
			if _, err := io.WriteString(c, in); err != nil && !tc.closes {
				t.Fatal(err)
			}
			var got []byte
			if tc.closes {
				got, err = io.ReadAll(c)
				if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
					t.Fatalf("read until the close: %v (got %q)", err, got)
				}
			} else {
				r := bufio.NewReader(c)
				for !bytes.HasSuffix(got, []byte("+PONG\r\n")) {
					line, err := r.ReadBytes('\n')
					if err != nil {
						t.Fatalf("connection did not answer PING after %q: %v (got %q)", tc.in, err, got)
					}
					got = append(got, line...)
				}
			}
			if !bytes.Contains(got, []byte(tc.want)) {
				t.Fatalf("answer %q, want it to hold %q", got, tc.want)
			}
		})
	}
	// Nothing was written, and the daemon serves everyone else.
	rc := goRedis(t, td, 2)
	if n := must(rc.DBSize(context.Background()).Result()); n != 0 {
		t.Fatalf("refused commands wrote %d keys", n)
	}
	if st := td.d.redis.Stats(); st.ProtocolErrors < 8 || st.Unknown < 3 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestRedisHalfFrames: a command split anywhere, even byte by byte, is
// answered once it is whole.
func TestRedisHalfFrames(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	c, err := net.Dial("unix", td.d.RedisSocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	frame := "*3\r\n$3\r\nSET\r\n$5\r\nh:key\r\n$5\r\nvalue\r\n*2\r\n$3\r\nGET\r\n$5\r\nh:key\r\n"
	for i := range len(frame) {
		if _, err := io.WriteString(c, frame[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(c)
	var got []byte
	for !bytes.HasSuffix(got, []byte("value\r\n")) {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("got %q: %v", got, err)
		}
		got = append(got, line...)
	}
	if string(got) != "+OK\r\n$5\r\nvalue\r\n" {
		t.Fatalf("answers %q", got)
	}
}

// TestRedisSlowReader: a tracking client that never reads its
// invalidations is disconnected once they pass --redis-push-buffer; the
// daemon and the other clients carry on.
func TestRedisSlowReader(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisPushBuffer = 64 << 10
	td := startDaemon(t, cfg)
	ctx := context.Background()
	slow, err := net.Dial("unix", td.d.RedisSocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = slow.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(slow, "HELLO 3\r\nCLIENT TRACKING ON BCAST\r\n"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the slow client tracks", func() bool { return td.d.redis.Stats().TrackingClients == 1 })
	other := goRedis(t, td, 3)
	for i := 0; td.d.redis.Stats().SlowDisconnects == 0; i++ {
		if i > 200000 {
			t.Fatal("the slow client was never disconnected")
		}
		pipe := other.Pipeline()
		for j := range 500 {
			pipe.Set(ctx, fmt.Sprintf("slow:a-rather-long-key-name-%d-%d", i, j), "v", 0)
		}
		noErr(t, must(pipe.Exec(ctx))[0].Err())
	}
	testkit.Eventually(t, 5*time.Second, "the slow client is gone", func() bool { return td.d.redis.Stats().TrackingClients == 0 })
	// Its connection ends after whatever the kernel still held.
	if _, err := io.Copy(io.Discard, slow); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the slow client's connection: %v", err)
	}
	must(other.Set(ctx, "slow:after", "ok", 0).Result())
	if v := must(other.Get(ctx, "slow:after").Result()); v != "ok" {
		t.Fatalf("GET after: %q", v)
	}
}

// redisCLI runs Debian's redis-cli (redis-tools) against td and returns
// its standard output and error (where it writes the errors it got).
func redisCLI(t *testing.T, td *testDaemon, stdin io.Reader, args ...string) (stdout, stderr string) {
	t.Helper()
	path, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli: %v (install redis-tools; .ci/run does)", err)
	}
	cmd := exec.Command(path, append([]string{"-s", td.d.RedisSocketPath()}, args...)...)
	cmd.Stdin = stdin
	var eb bytes.Buffer
	cmd.Stderr = &eb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s%s", args, err, out, eb.Bytes())
	}
	// It prints a blank line after an error: dropped, to compare lines.
	var lines []string
	for l := range strings.Lines(string(out)) {
		if l != "\n" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, ""), eb.String()
}

// TestRedisCLI: a scripted redis-cli session, and --pipe mass insertion
// of 100,000 keys.
func TestRedisCLI(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	script := strings.Join([]string{
		"PING",
		"SET prices:sku-1 12.50",
		"GET prices:sku-1",
		"HGET prices sku-1",
		"HSET prices sku-2 9.99",
		"HGETALL prices",
		"SET greeting hello",
		"GET default:greeting",
		"DEL prices:sku-1",
		"EXISTS prices:sku-1",
		"SET prices:sku-3 1 EX 10",
		"CLUSTER INFO",
		"DBSIZE",
	}, "\n") + "\n"
	got, _ := redisCLI(t, td, strings.NewReader(script))
	want := strings.Join([]string{
		"PONG", "OK", "12.50", "12.50", "1", "sku-1", "12.50", "sku-2", "9.99", "OK", "hello", "1", "0",
		"ERR SET EX is not supported: cachecast keys do not expire and every write is unconditional (the latest write wins on every node); SET key value is supported",
		"ERR This instance has cluster support disabled (cachecast answers on each node as a standalone endpoint; the fleet replicates by itself)",
		"2",
	}, "\n") + "\n"
	if got != want {
		t.Fatalf("redis-cli session:\n%s\nwant:\n%s", got, want)
	}

	var b bytes.Buffer
	const n = 100000
	for i := range n {
		k, v := fmt.Sprintf("mass:key-%d", i), fmt.Sprintf("value-%d", i)
		fmt.Fprintf(&b, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
	}
	out, _ := redisCLI(t, td, &b, "--pipe")
	if !strings.Contains(out, fmt.Sprintf("errors: 0, replies: %d", n)) {
		t.Fatalf("redis-cli --pipe:\n%s", out)
	}
	rc := goRedis(t, td, 2)
	ctx := context.Background()
	if got := must(rc.HLen(ctx, "mass").Result()); got != n {
		t.Fatalf("HLEN mass after --pipe: %d", got)
	}
	if v := must(rc.Get(ctx, "mass:key-99999").Result()); v != "value-99999" {
		t.Fatalf("GET mass:key-99999: %q", v)
	}
	if _, err := rc.Get(ctx, "mass:key-100000").Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("GET past the end: %v", err)
	}
}

// TestRedisFrameMemoryBudget: a large command's buffer counts against
// --max-body-memory-per-uid like an HTTP body: a second connection of the
// same uid that would pass the share is refused and closed; once the
// first is answered its memory is back.
func TestRedisFrameMemoryBudget(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxBodyMemory = 2 * cfg.MaxBodySize // the uid's share (1 MiB) is passed first
	cfg.MaxBodyMemoryPerUID = cfg.MaxBodySize
	td := startDaemon(t, cfg)
	value := strings.Repeat("v", 60<<10)
	var frame strings.Builder
	fmt.Fprintf(&frame, "*%d\r\n$4\r\nMSET\r\n", 1+2*10)
	for i := range 10 {
		fmt.Fprintf(&frame, "$6\r\nbig:k%d\r\n$%d\r\n%s\r\n", i, len(value), value)
	}
	whole := frame.String() // about 600 KiB
	dial := func() net.Conn {
		c, err := net.Dial("unix", td.d.RedisSocketPath())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	first := dial()
	defer first.Close()
	if _, err := io.WriteString(first, whole[:len(whole)-10]); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the first command's buffer is counted", func() bool { return td.d.bodies.inUse() > 512<<10 })
	second := dial()
	defer second.Close()
	_, _ = io.WriteString(second, whole)
	got, _ := io.ReadAll(second)
	if !strings.HasPrefix(string(got), "-ERR too_many: ") || !strings.Contains(string(got), "--max-body-memory-per-uid") {
		t.Fatalf("second connection: %q, want the per-uid share refused", got)
	}
	if _, err := io.WriteString(first, whole[len(whole)-10:]); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(first)
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("first connection: %q %v", line, err)
	}
	testkit.Eventually(t, 5*time.Second, "the memory is given back", func() bool { return td.d.bodies.inUse() == 0 })
	rc := goRedis(t, td, 2)
	if n := must(rc.HLen(context.Background(), "big").Result()); n != 10 {
		t.Fatalf("HLEN big: %d", n)
	}
}
