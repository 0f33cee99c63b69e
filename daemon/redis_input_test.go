package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
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
		{"refused computed write", "*3\r\n$6\r\nAPPEND\r\n$3\r\nb:k\r\n$1\r\nv\r\n", "-ERR APPEND is not served: it would write a value computed from this node's copy", false},
		{"SET PX without a number", "*4\r\n$3\r\nSET\r\n$3\r\nb:k\r\n$1\r\nv\r\n$2\r\nPX\r\n", "-ERR syntax error", false},
		{"bad count", "*x\r\n", "-ERR Protocol error: invalid multibulk length", true},
		{"count without CRLF", "*1\n", "-ERR Protocol error: invalid multibulk length", true},
		{"huge count", "*99999999\r\n", "-ERR Protocol error: invalid multibulk length: 99999999 arguments is more than the 65536", true},
		{"negative bulk length", "*2\r\n$3\r\nGET\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length", true},
		{"null bulk as argument", "*2\r\n$3\r\nGET\r\n$-1\r\n", "-ERR Protocol error: invalid bulk length", true},
		{"bulk over --max-value-size", "*3\r\n$3\r\nSET\r\n$3\r\nb:k\r\n$99999999\r\n", "-ERR Protocol error: invalid bulk length: a bulk string of 99999999 bytes is over --max-value-size", true},
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
	path := testkit.NeedTool(t, "redis-cli", "redis-tools")
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
		"TTL prices:sku-3",
		"SET prices:sku-3 2 NX",
		"CLUSTER INFO",
		"DBSIZE",
	}, "\n") + "\n"
	got, _ := redisCLI(t, td, strings.NewReader(script))
	want := strings.Join([]string{
		"PONG", "OK", "12.50", "12.50", "1", "sku-1", "12.50", "sku-2", "9.99", "OK", "hello", "1", "0",
		"OK", "10", // SET NX of an existing key: nil, which redis-cli prints as nothing
		"ERR This instance has cluster support disabled (cachecast answers on each node as a standalone endpoint; the fleet replicates by itself)",
		"3",
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
	testkit.Eventually(t, 5*time.Second, "the first command's buffer is counted", func() bool { return td.d.bodies.InUse() > 512<<10 })
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
	testkit.Eventually(t, 5*time.Second, "the memory is given back", func() bool { return td.d.bodies.InUse() == 0 })
	rc := goRedis(t, td, 2)
	if n := must(rc.HLen(context.Background(), "big").Result()); n != 10 {
		t.Fatalf("HLEN big: %d", n)
	}
}

// TestRedisIdleConnections: one uid opens 2,000 connections and sends
// nothing. Its share (--max-connections-per-uid) admits them and refuses
// the next with Redis's "max number of clients reached"; another uid is
// still served; --redis-idle-timeout closes the idle ones, and the uid
// may connect again.
func TestRedisIdleConnections(t *testing.T) {
	needRoot(t)
	const idle, other = 2000, 61070
	cfg := roleConfig(t)
	cfg.MaxConnections, cfg.MaxConnectionsPerUID = idle+100, idle
	cfg.RedisIdleTimeout = 2 * time.Second
	td := startDaemon(t, cfg)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range idle {
		c, err := net.Dial("unix", td.d.RedisSocketPath())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	testkit.Eventually(t, 10*time.Second, "the idle connections are admitted", func() bool {
		return td.d.redis.Stats().Connections == idle
	})
	out, _ := redisCLI(t, td, nil, "PING")
	if want := "ERR max number of clients reached for uid 0 (--max-connections-per-uid 2000)\n"; out != want {
		t.Fatalf("PING past the uid's share: %q, want %q", out, want)
	}
	got, err := exec.Command("setpriv", "--reuid="+strconv.Itoa(other), "--regid="+strconv.Itoa(other), "--clear-groups",
		"redis-cli", "-s", td.d.RedisSocketPath(), "PING").CombinedOutput()
	if err != nil || string(got) != "PONG\n" {
		t.Fatalf("PING as another uid while uid 0's share is full: %q %v", got, err)
	}
	td.put("idle", "k", "v") // the HTTP API too
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("idle connection %d: %v, want it closed by the daemon", i, err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the closed connections are forgotten", func() bool {
		return td.d.redis.Stats().Connections == 0
	})
	if out, _ := redisCLI(t, td, nil, "GET", "idle:k"); out != "v\n" {
		t.Fatalf("GET after the idle ones closed: %q", out)
	}
	if st := td.d.redis.Stats(); st.IdleClosed != idle || st.Refused != 1 {
		t.Fatalf("idle closed %d (want %d), refused %d (want 1)", st.IdleClosed, idle, st.Refused)
	}
	if st := redisStatus(t, td); st.IdleClosed != idle || st.ConnectionsRefused != 1 {
		t.Fatalf("/v1/status redis: idle_closed %d (want %d), connections_refused %d (want 1)", st.IdleClosed, idle, st.ConnectionsRefused)
	}
}

// redisStatus is the "redis" object of td's GET /v1/status.
func redisStatus(t *testing.T, td *testDaemon) wire.RedisStatus {
	t.Helper()
	r := td.do("GET", "/v1/status", nil)
	var st struct{ Redis *wire.RedisStatus }
	if err := json.Unmarshal(r.body, &st); err != nil || r.status != 200 || st.Redis == nil {
		t.Fatalf("GET /v1/status: %d %s %v", r.status, r.body, err)
	}
	return *st.Redis
}

// TestRedisNeverReadsReplies: a client pipelines GETs of a 60 KiB value
// and never reads the answers. Its connection is closed when a write has
// waited --write-timeout; meanwhile and after, another client is served.
func TestRedisNeverReadsReplies(t *testing.T) {
	cfg := testConfig(t)
	cfg.WriteTimeout = time.Second
	td := startDaemon(t, cfg)
	td.put("big", "v", strings.Repeat("x", 60<<10))
	deaf, err := net.Dial("unix", td.d.RedisSocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer deaf.Close()
	ctx := context.Background()
	rc := goRedis(t, td, 2)
	get := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$5\r\nbig:v\r\n", 100))
	deadline := time.Now().Add(60 * time.Second)
	for {
		_ = deaf.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := deaf.Write(get); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// The daemon stopped reading: it is stuck writing to us.
				if v := must(rc.Get(ctx, "big:v").Result()); len(v) != 60<<10 {
					t.Fatalf("GET by another client: %d bytes", len(v))
				}
				if time.Now().After(deadline) {
					t.Fatal("the daemon never closed the client that does not read")
				}
				continue
			}
			break // closed by the daemon
		}
	}
	noErr(t, rc.Set(ctx, "big:after", "ok", 0).Err())
	if v := must(rc.Get(ctx, "big:after").Result()); v != "ok" {
		t.Fatalf("GET after: %q", v)
	}
}

// TestRedisRolesReload: the read role is checked at every command, not
// only at connect: a SIGHUP that takes a uid off --read-uids answers the
// next command of its open connection NOPERM, and closes its subscriber
// at once; another reload gives the role back.
func TestRedisRolesReload(t *testing.T) {
	needRoot(t)
	const user = 61080
	cfg := roleConfig(t)
	cfg.ReadUIDs = []uint32{user}
	var reloadTo atomic.Pointer[Config]
	cfg.Reload = func() (Config, error) { return *reloadTo.Load(), nil }
	td := startDaemon(t, cfg)
	td.put("prices", "k0", "v0")
	id := strconv.Itoa(user)
	asUser := func(args ...string) *exec.Cmd {
		return exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups",
			"redis-cli", "-s", td.d.RedisSocketPath()}, args...)...)
	}
	// An interactive session: one connection, a command per line.
	session := asUser()
	in, err := session.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := session.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	noErr(t, session.Start())
	defer session.Process.Kill()
	out := bufio.NewReader(outPipe)
	ask := func(cmd string) string {
		t.Helper()
		if _, err := io.WriteString(in, cmd+"\n"); err != nil {
			t.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(line)
	}
	if got := ask("GET prices:k0"); got != "v0" {
		t.Fatalf("GET as a reader: %q", got)
	}
	sub := asUser("SUBSCRIBE", "prices")
	noErr(t, sub.Start())
	defer sub.Process.Kill()
	testkit.Eventually(t, 10*time.Second, "the subscriber is subscribed", func() bool { return td.d.redis.Stats().Subscriptions == 1 })

	nc := cfg
	nc.ReadUIDs = []uint32{user + 1}
	reloadTo.Store(&nc)
	noErr(t, td.d.Reload())
	exited := make(chan error, 1)
	go func() { exited <- sub.Wait() }()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the subscriber is still connected without the read role")
	}
	if got := ask("GET prices:k0"); !strings.HasPrefix(got, "NOPERM") || !strings.Contains(got, "read role") {
		t.Fatalf("GET on the open connection after the reload: %q, want NOPERM naming the read role", got)
	}
	reloadTo.Store(&cfg)
	noErr(t, td.d.Reload())
	if got, err := asUser("GET", "prices:k0").CombinedOutput(); err != nil || string(got) != "v0\n" {
		t.Fatalf("GET with the role back: %q %v", got, err)
	}
}

// TestRedisRueidisTrackingCap: a rueidis client with client-side caching
// reads 500 keys while the daemon tracks at most 50 for it; every key
// is then updated over HTTP, and each cached read returns the new value:
// the keys the daemon forgot were invalidated first, so the client's
// cache never serves one that changed.
func TestRedisRueidisTrackingCap(t *testing.T) {
	const keys, limit = 500, 50
	cfg := testConfig(t)
	cfg.RedisTrackingMaxKeys = limit
	td := startDaemon(t, cfg)
	ctx := context.Background()
	c := rueidisClient(t, td, rueidis.ClientOption{})
	for i := range keys {
		td.put("cap", fmt.Sprintf("k%d", i), "old")
	}
	read := func(i int) string {
		v, err := c.DoCache(ctx, c.B().Get().Key(fmt.Sprintf("cap:k%d", i)).Cache(), time.Hour).ToString()
		noErr(t, err)
		return v
	}
	for i := range keys {
		if v := read(i); v != "old" {
			t.Fatalf("cap:k%d = %q", i, v)
		}
	}
	// rueidis may spread its reads over more than one connection: each
	// is tracked for at most limit keys.
	testkit.Eventually(t, 10*time.Second, "the daemon evicted past the cap", func() bool {
		st := td.d.redis.Stats()
		return st.TrackingEvicted >= keys-limit*st.TrackingClients
	})
	if st := redisStatus(t, td); st.TrackingEvictedKeys < keys-limit*st.TrackingClients {
		t.Fatalf("/v1/status redis: tracking_evicted_keys %d with %d tracking clients, want at least %d", st.TrackingEvictedKeys, st.TrackingClients, keys-limit*st.TrackingClients)
	}
	for i := range keys {
		td.put("cap", fmt.Sprintf("k%d", i), "new")
	}
	for i := range keys {
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("cap:k%d reads the new value", i), func() bool { return read(i) == "new" })
	}
}

// TestRedisIdleTimeoutGoRedis: go-redis's pooled connection, closed by
// --redis-idle-timeout while it waits in the pool, is replaced without
// an error reaching the application.
func TestRedisIdleTimeoutGoRedis(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisIdleTimeout = 300 * time.Millisecond
	td := startDaemon(t, cfg)
	ctx := context.Background()
	rc := goRedis(t, td, 3)
	noErr(t, rc.Set(ctx, "idle:k", "v", 0).Err())
	testkit.Eventually(t, 10*time.Second, "the pooled connection is closed as idle", func() bool {
		return td.d.redis.Stats().IdleClosed == 1
	})
	if st := redisStatus(t, td); st.IdleClosed != 1 || st.ConnectionsRefused != 0 {
		t.Fatalf("/v1/status redis: idle_closed %d (want 1), connections_refused %d (want 0)", st.IdleClosed, st.ConnectionsRefused)
	}
	if v, err := rc.Get(ctx, "idle:k").Result(); err != nil || v != "v" {
		t.Fatalf("GET on the pool after its connection was closed as idle: %q %v", v, err)
	}
}

// TestRedisPathologicalPatterns: a pattern of many stars that cannot
// match (Redis's CVE-2022-36021), given to KEYS, SCAN MATCH or PSUBSCRIBE
// by any reader, is answered at once and holds nobody up: the
// subscriptions' follower, which matches every update's channel against
// it, goes on delivering to the others.
func TestRedisPathologicalPatterns(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	rdb := goRedis(t, td, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	long := strings.Repeat("a", 200)
	bad := "pat:" + strings.Repeat("*a", 40) + "*b"
	evil := rdb.PSubscribe(ctx, bad)
	defer evil.Close()
	good := rdb.PSubscribe(ctx, "pat:*")
	defer good.Close()
	for _, ps := range []*goredis.PubSub{evil, good} {
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatalf("PSUBSCRIBE: %v", err)
		}
	}
	must(rdb.Set(ctx, "pat:"+long, "v", 0).Result())
	if keys := must(rdb.Keys(ctx, bad).Result()); len(keys) != 0 {
		t.Fatalf("KEYS %.20q...: %q", bad, keys)
	}
	if keys, _ := must2(rdb.Scan(ctx, 0, bad, 1000).Result()); len(keys) != 0 {
		t.Fatalf("SCAN MATCH %.20q...: %q", bad, keys)
	}
	msg, err := good.ReceiveMessage(ctx)
	if err != nil || msg.Channel != "pat:"+long {
		t.Fatalf("the other subscriber got %+v, %v; want the update of pat:%.20s...", msg, err, long)
	}
	if got := must(rdb.Ping(ctx).Result()); got != "PONG" {
		t.Fatalf("PING: %q", got)
	}
}

// TestRedisMultiQueueMemoryBudget: the commands a MULTI queues count
// against --max-body-memory-per-uid with the uid's other requests: a
// second connection of the same uid whose queue would pass the share is
// refused, its queue dropped (EXEC aborts) and its bytes given back; once
// the first's EXEC has run, its bytes are back too and the second may
// queue as many.
func TestRedisMultiQueueMemoryBudget(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxBodyMemory = 2 * cfg.MaxBodySize
	cfg.MaxBodyMemoryPerUID = cfg.MaxBodySize
	td := startDaemon(t, cfg)
	const sets = 100
	value := strings.Repeat("v", 8<<10) // each command fits the read buffer: only the queue is held
	var tx strings.Builder
	tx.WriteString("*1\r\n$5\r\nMULTI\r\n")
	each := 0
	for i := range sets {
		key := fmt.Sprintf("big:k%03d", i)
		fmt.Fprintf(&tx, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(value), value)
		each = len("SET") + len(key) + len(value)
	}
	queue := func(name string) (net.Conn, *bufio.Reader, []string) {
		c, err := net.Dial("unix", td.d.RedisSocketPath())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, tx.String()); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		lines := make([]string, 1+sets)
		for i := range lines {
			if lines[i], err = r.ReadString('\n'); err != nil {
				t.Fatalf("%s: answer %d: %v", name, i, err)
			}
		}
		return c, r, lines
	}
	exec := func(name string, c net.Conn, r *bufio.Reader) string {
		if _, err := io.WriteString(c, "*1\r\n$4\r\nEXEC\r\n"); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: EXEC: %v", name, err)
		}
		return line
	}

	first, r1, lines := queue("first")
	if n := strings.Count(strings.Join(lines, ""), "+QUEUED\r\n"); lines[0] != "+OK\r\n" || n != sets {
		t.Fatalf("first: MULTI %q, %d of %d queued", lines[0], n, sets)
	}
	if got := td.d.bodies.InUse(); got != int64(sets*each) {
		t.Fatalf("first's queue holds %d bytes of the budget; want %d", got, sets*each)
	}

	second, r2, lines := queue("second")
	fits := (int(cfg.MaxBodyMemoryPerUID) - sets*each) / each
	refused := lines[1+fits]
	if !strings.HasPrefix(refused, "-ERR too_many: ") || !strings.Contains(refused, "--max-body-memory-per-uid") {
		t.Fatalf("second: the command past the share answered %q; want the per-uid share refused", refused)
	}
	if q := strings.Count(strings.Join(lines[1:1+fits], ""), "+QUEUED\r\n"); q != fits {
		t.Fatalf("second: %d of the %d commands within the share queued", q, fits)
	}
	if got := exec("second", second, r2); !strings.HasPrefix(got, "-EXECABORT") {
		t.Fatalf("second: EXEC answered %q; want EXECABORT", got)
	}
	if got := td.d.bodies.InUse(); got != int64(sets*each) {
		t.Fatalf("after the second's abort the budget holds %d bytes; want the first's %d", got, sets*each)
	}

	if got := exec("first", first, r1); got != fmt.Sprintf("*%d\r\n", sets) {
		t.Fatalf("first: EXEC answered %q; want %d answers", got, sets)
	}
	testkit.Eventually(t, 5*time.Second, "the first's queue given back", func() bool { return td.d.bodies.InUse() == 0 })
	_, _, lines = queue("second, again")
	if n := strings.Count(strings.Join(lines, ""), "+QUEUED\r\n"); n != sets {
		t.Fatalf("second, again: %d of %d queued once the first's bytes are back", n, sets)
	}
	rc := goRedis(t, td, 2)
	if n := must(rc.HLen(context.Background(), "big").Result()); n != sets {
		t.Fatalf("HLEN big: %d", n)
	}
}
