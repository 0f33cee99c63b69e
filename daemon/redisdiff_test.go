package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
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

	"github.com/cachecast/cachecast/internal/testkit"
)

// startRedisServer runs Debian's redis-server (redis-server, which
// .ci/run installs) on a Unix socket of its own, without persistence,
// with the options in extra too, and returns the socket's path once it
// accepts connections; the server is killed when the test ends.
func startRedisServer(t *testing.T, extra ...string) string {
	t.Helper()
	bin := testkit.NeedTool(t, "redis-server", "redis-server")
	dir, err := os.MkdirTemp("", "rs") // short: a socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "redis.sock")
	args := []string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no"}
	cmd := exec.Command(bin, append(args, extra...)...)
	out := &readyWriter{ready: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case <-out.ready:
	case <-exited:
		t.Fatalf("redis-server exited before it was ready:\n%s", out.text())
	case <-time.After(30 * time.Second): // a bound for a loaded CI machine; it takes milliseconds
		t.Fatalf("redis-server not ready after 30s:\n%s", out.text())
	}
	return sock
}

// readyWriter keeps redis-server's log and closes ready at its line that
// it is ready to accept connections (7.0: "The server is now ready to
// accept connections at <socket>"; 7.2: "Ready to accept connections unix").
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	done  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && bytes.Contains(bytes.ToLower(w.buf.Bytes()), []byte("ready to accept connections")) {
		w.done = true
		close(w.ready)
	}
	return len(p), nil
}

func (w *readyWriter) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// rawReply reads one RESP2 or RESP3 reply off r and returns its bytes as
// they came.
func rawReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("bad line %q", line)
	}
	var n int
	switch line[0] {
	case '$', '=', '!', '*', '%', '~', '>', '|':
		if n, err = strconv.Atoi(line[1 : len(line)-2]); err != nil {
			return "", fmt.Errorf("bad length in %q", line)
		}
	}
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return line, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", err
		}
		return line + string(b), nil
	case '*', '%', '~', '>', '|':
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		var b strings.Builder
		b.WriteString(line)
		for range max(n, 0) {
			v, err := rawReply(r)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		}
		return b.String(), nil
	}
	return line, nil
}

// wrongTypeErr is Redis's WRONGTYPE error.
const wrongTypeErr = "WRONGTYPE Operation against a key holding the wrong kind of value"

// clientFields are the field names of a CLIENT INFO reply's line.
func clientFields(reply string) []string {
	var out []string
	for _, f := range strings.Fields(reply[strings.Index(reply, "\n")+1:]) {
		if k, _, ok := strings.Cut(f, "="); ok {
			out = append(out, strings.TrimPrefix(k, "txt:"))
		}
	}
	return out
}

// kind names a reply's kind: its type byte, and for a verbatim string
// its format too.
func kind(reply string) string {
	if reply == "" {
		return "nothing"
	}
	if i := strings.Index(reply, "\r\n"); reply[0] == '=' && i > 0 && len(reply) >= i+6 {
		return "verbatim string of " + reply[i+2:i+5]
	}
	return "reply of type " + reply[:1]
}

// sortedElems is an array reply's elements, sorted, one a line (or the
// reply itself when it is no array).
func sortedElems(reply string) string {
	r := bufio.NewReader(strings.NewReader(reply))
	head, err := r.ReadString('\n')
	if err != nil || head[0] != '*' {
		return reply
	}
	var elems []string
	for {
		e, err := rawReply(r)
		if err != nil {
			break
		}
		elems = append(elems, e)
	}
	slices.Sort(elems)
	return head + strings.Join(elems, "")
}

// redisPair sends each command to cachecast's Redis door and to a real
// redis-server and compares the replies.
type redisPair struct {
	t     *testing.T
	conns [2]net.Conn // 0: cachecast, 1: redis-server
	rs    [2]*bufio.Reader
	start time.Time // the first command: TTL-like answers differ by at most what has elapsed since
}

func newRedisPair(t *testing.T, ours, theirs string) *redisPair {
	p := &redisPair{t: t, start: time.Now()}
	for i, sock := range []string{ours, theirs} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		p.conns[i], p.rs[i] = c, bufio.NewReader(c)
	}
	return p
}

// do sends args to both and returns cachecast's and redis-server's replies.
func (p *redisPair) do(args ...string) (ours, theirs string) {
	p.t.Helper()
	got := p.pipeline([][]string{args})
	return got[0][0], got[1][0]
}

// pipeline sends cmds to both in one write each and returns each
// server's replies, in order (0: cachecast, 1: redis-server).
func (p *redisPair) pipeline(cmds [][]string) (got [2][]string) {
	p.t.Helper()
	wire := encodeCommands(cmds)
	for i, c := range p.conns {
		if _, err := io.WriteString(c, wire); err != nil {
			p.t.Fatalf("%q to %s: %v", cmds, p.name(i), err)
		}
	}
	for i, r := range p.rs {
		for _, args := range cmds {
			v, err := rawReply(r)
			if err != nil {
				p.t.Fatalf("%q: reading %s's reply: %v", args, p.name(i), err)
			}
			got[i] = append(got[i], v)
		}
	}
	return got
}

// encodeCommands is cmds as a client writes them, RESP arrays of bulk
// strings.
func encodeCommands(cmds [][]string) string {
	var b strings.Builder
	for _, args := range cmds {
		b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
		for _, a := range args {
			b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
		}
	}
	return b.String()
}

// inline sends line, an inline command as telnet sends it, to both and
// compares their replies.
func (p *redisPair) inline(line string) {
	p.t.Helper()
	var got [2]string
	for i, c := range p.conns {
		if _, err := io.WriteString(c, line); err != nil {
			p.t.Fatalf("%q to %s: %v", line, p.name(i), err)
		}
		v, err := rawReply(p.rs[i])
		if err != nil {
			p.t.Fatalf("%q: reading %s's reply: %v", line, p.name(i), err)
		}
		got[i] = v
	}
	if got[0] != got[1] {
		p.t.Errorf("inline %q: cachecast %q, redis-server %q", line, got[0], got[1])
	}
}

func (p *redisPair) name(i int) string { return [...]string{"cachecast", "redis-server"}[i] }

// same: both replies are equal byte for byte.
func (p *redisPair) same(args ...string) {
	p.t.Helper()
	if ours, theirs := p.do(args...); ours != theirs {
		p.t.Errorf("%q: cachecast %q, redis-server %q", args, ours, theirs)
	}
}

// near is same for TTL and PTTL of a key with an expiry: both positive
// integers (a -1 or -2 fails: use same for those), apart by at most what a
// real elapsed millisecond (PTTL) or second (TTL, rounded to the nearest
// second by both) makes: the two servers set the key and read its TTL at
// moments apart by at most the time since the first command.
func (p *redisPair) near(args ...string) {
	p.t.Helper()
	ours, theirs := p.do(args...)
	a, errA := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(ours, ":"), "\r\n"), 10, 64)
	b, errB := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(theirs, ":"), "\r\n"), 10, 64)
	slack := time.Since(p.start).Milliseconds() + 1
	if strings.EqualFold(args[0], "ttl") {
		slack = slack/1000 + 1
	}
	if errA != nil || errB != nil || a < 0 || b < 0 || a-b > slack || b-a > slack {
		p.t.Errorf("%q: cachecast %q, redis-server %q (apart by at most %d allowed)", args, ours, theirs, slack)
	}
}

// An instant after year 9999 is refused by design (issue 31): no date
// could show it, and it was kept forever.
const (
	after9999 = "an instant after year 9999 is refused: no date could show it"
	past9999  = "-ERR bad_request: store: invalid record: an expiry or effective time after 9999-12-31T23:59:59.999Z: no date could show it\r\n"
)

// differs is a reply that differs by design, for why: cachecast answers
// ours exactly and redis-server a reply that starts with theirs.
func (p *redisPair) differs(why, ours, theirs string, args ...string) {
	p.t.Helper()
	o, th := p.do(args...)
	if o != ours || !strings.HasPrefix(th, theirs) {
		p.t.Errorf("%q (differs by design: %s): cachecast %q, want %q; redis-server %q, want it to start with %q", args, why, o, ours, th, theirs)
	}
}

// eachProtocol starts a redis-server (with the options in extra) and a
// daemon, and runs fn in a subtest for RESP2 and for RESP3 with a pair
// of connections to them (over RESP3 once both answered HELLO 3, whose
// description of the server is not compared); pair opens another.
func eachProtocol(t *testing.T, extra []string, fn func(t *testing.T, proto string, p *redisPair, pair func() *redisPair)) {
	theirs := startRedisServer(t, extra...)
	td := startDaemon(t, testConfig(t))
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			pair := func() *redisPair { return newRedisPair(t, td.d.RedisSocketPath(), theirs) }
			p := pair()
			if proto == "3" {
				p.do("HELLO", "3")
			}
			fn(t, proto, p, pair)
		})
	}
}

// TestRedisTimeAgainstRedisServer sends the time commands (SET's expiry
// options, SETEX, PSETEX, the EXPIRE family, PERSIST, TTL, PTTL,
// EXPIRETIME, PEXPIRETIME), MSET/MGET of expiring keys, a pipeline of
// them, the string and hash commands beside them (a string key is no
// hash), wrong arguments of SCAN, HSCAN, WAIT, OBJECT, CLIENT (LIST's
// filters, TRACKING's modes), COMMAND, CONFIG, HELLO and SELECT, unknown
// commands, and transactions of reads to a daemon's Redis door and to a
// real redis-server, over RESP2 and RESP3, and compares
// the replies byte for byte, TTL-like integers within what elapses
// between the two. The replies that differ by design are listed
// with their reasons (resp's package doc and README say them).
func TestRedisTimeAgainstRedisServer(t *testing.T) {
	t.Parallel()
	eachProtocol(t, nil, func(t *testing.T, proto string, p *redisPair, pair func() *redisPair) {
		k := func(name string) string { return "t" + proto + ":" + name } // this run's keys
		now := time.Now()
		inS := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
		// An instant 600 ms past a whole second: EXPIRETIME rounds it to the nearest second.
		atMs := strconv.FormatInt(now.Add(time.Hour).Unix()*1000+600, 10)

		// Keys without an expiry, and missing keys.
		p.same("SET", k("a"), "v")
		for _, c := range []string{"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"} {
			p.same(c, k("a"))
			p.same(c, k("missing"))
		}
		p.same("EXPIRE", k("missing"), "10")
		p.same("PERSIST", k("missing"))
		p.same("PERSIST", k("a"))

		// NX, XX, GT, LT: no expiry counts as infinite for GT and LT.
		// (Relative times a few seconds apart: the two servers' clocks
		// run on between one command and the next.)
		p.same("EXPIRE", k("a"), "100", "XX")
		p.same("EXPIRE", k("a"), "100", "GT")
		p.same("EXPIRE", k("a"), "100", "LT")
		p.near("TTL", k("a"))
		p.same("EXPIRE", k("a"), "200", "NX")
		p.same("EXPIRE", k("a"), "200", "GT")
		p.same("EXPIRE", k("a"), "150", "GT")
		p.same("EXPIRE", k("a"), "150", "lt")
		p.same("EXPIRE", k("a"), "300", "xx")
		p.same("EXPIRE", k("a"), "400", "XX", "GT")
		p.same("EXPIRE", k("a"), "500", "XX", "LT")
		p.near("TTL", k("a"))
		p.same("PEXPIRE", k("a"), "5000")
		p.near("PTTL", k("a"))
		p.near("TTL", k("a"))
		p.same("PEXPIREAT", k("a"), atMs)
		p.same("PEXPIRETIME", k("a"))
		p.same("EXPIRETIME", k("a"))
		p.same("EXPIREAT", k("a"), inS(2*time.Hour))
		p.same("EXPIRETIME", k("a"))
		p.same("PEXPIRETIME", k("a"))
		p.same("EXPIREAT", k("a"), inS(3*time.Hour), "NX")
		p.same("PEXPIREAT", k("a"), atMs, "GT")
		p.same("PEXPIREAT", k("a"), atMs, "LT")
		p.same("PEXPIRETIME", k("a"))
		p.same("PERSIST", k("a"))
		p.same("TTL", k("a"))
		p.same("PERSIST", k("a"))

		// SET's options: a SET without KEEPTTL drops the expiry.
		p.same("SET", k("b"), "v", "EX", "100")
		p.near("TTL", k("b"))
		p.same("SET", k("b"), "w", "KEEPTTL")
		p.near("TTL", k("b"))
		p.same("GET", k("b"))
		p.same("SET", k("b"), "x")
		p.same("TTL", k("b"))
		p.same("SET", k("b"), "x", "keepttl")
		p.same("TTL", k("b"))
		p.same("SET", k("c"), "v", "PX", "100000")
		p.near("PTTL", k("c"))
		p.same("SET", k("c"), "v", "EXAT", inS(time.Hour))
		p.same("EXPIRETIME", k("c"))
		p.same("SET", k("c"), "v", "px", "100000", "KEEPTTL")
		p.same("SET", k("c"), "v", "PXAT", atMs)
		p.same("PEXPIRETIME", k("c"))
		p.same("EXPIRETIME", k("c"))
		p.differs(after9999, past9999, "+OK", "SET", k("c"), "v", "PXAT", "9223372036854775807")
		p.same("SET", k("c"), "v", "PXAT", atMs)
		p.same("PEXPIRETIME", k("c"))
		p.same("SETEX", k("d"), "100", "v")
		p.near("TTL", k("d"))
		p.same("PSETEX", k("d"), "100000", "v")
		p.near("PTTL", k("d"))
		p.same("GET", k("d"))

		// An expiry at or before now deletes the key (1), even with
		// LT against no expiry; GT against none does nothing.
		for _, c := range [][]string{{"EXPIRE", "0"}, {"PEXPIRE", "-5"}, {"EXPIRE", "-100", "LT"}, {"EXPIREAT", "1"}, {"PEXPIREAT", "0"}} {
			p.same("SET", k("e"), "v")
			p.same(append([]string{c[0], k("e")}, c[1:]...)...)
			p.same("EXISTS", k("e"))
			p.same("GET", k("e"))
			p.same("TTL", k("e"))
		}
		p.same("SET", k("e"), "v")
		p.same("EXPIRE", k("e"), "-100", "GT")
		p.same("EXISTS", k("e"))
		p.same("EXPIRE", k("e"), "0", "NX")
		p.same("EXISTS", k("e"))

		// Expired keys: set with an instant already past, and one the
		// clock passes.
		p.same("SET", k("f"), "v", "PXAT", strconv.FormatInt(now.Add(-time.Second).UnixMilli(), 10))
		for _, c := range []string{"GET", "EXISTS", "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "PERSIST"} {
			p.same(c, k("f"))
		}
		p.same("EXPIRE", k("f"), "10")
		p.same("SET", k("g"), "v", "PX", "50")
		testkit.Until(t, 10*time.Second, "the 50 ms key to expire on both", func() string {
			if ours, theirs := p.do("EXISTS", k("g")); ours != ":0\r\n" || theirs != ":0\r\n" {
				return "EXISTS: cachecast " + ours + ", redis-server " + theirs
			}
			return ""
		})
		for _, c := range []string{"GET", "TTL", "PTTL", "EXPIRETIME", "PERSIST"} {
			p.same(c, k("g"))
		}

		// MSET and MGET of expiring keys: MSET drops an expiry.
		p.same("SET", k("m1"), "v", "PX", "100000")
		p.same("SET", k("m3"), "v", "EX", "100")
		p.same("MSET", k("m1"), "a", k("m2"), "b")
		p.same("TTL", k("m1"))
		p.near("TTL", k("m3"))
		p.same("MGET", k("m1"), k("m2"), k("m3"), k("f"), k("g"), k("missing"))
		p.same("MSET", k("m1"), "a", k("m2"))

		// Pipelined: consecutive plain SETs are one batch in
		// cachecast; the expiry commands between them see them.
		pipe := [][]string{{"SET", k("p1"), "v", "EX", "100"}, {"SET", k("p1"), "w"}, {"SET", k("p2"), "x"},
			{"TTL", k("p1")}, {"EXPIRE", k("p2"), "100"}, {"SET", k("p2"), "y"}, {"SET", k("p3"), "z"},
			{"TTL", k("p2")}, {"SET", k("p3"), "z", "KEEPTTL"}, {"PEXPIRE", k("p3"), "0"}, {"SET", k("p1"), "u"},
			{"MGET", k("p1"), k("p2"), k("p3")}}
		got := p.pipeline(pipe)
		for i := range pipe {
			if got[0][i] != got[1][i] {
				t.Errorf("pipelined %q: cachecast %q, redis-server %q", pipe[i], got[0][i], got[1][i])
			}
		}

		// Bad arguments: types, ranges, syntax, arities.
		for _, c := range [][]string{
			{"EXPIRE", k("a"), "abc"}, {"EXPIRE", k("a"), "1.5"}, {"EXPIRE", k("a"), "10", "FOO"},
			{"EXPIRE", k("a"), "abc", "FOO"}, {"EXPIRE", k("missing"), "10", "FOO"},
			{"EXPIRE", k("a"), "10", "NX", "XX"}, {"EXPIRE", k("a"), "10", "NX", "GT"}, {"EXPIRE", k("a"), "10", "GT", "LT"},
			{"EXPIRE", k("a"), "10", "LT", "GT"}, {"EXPIRE", k("a")}, {"PEXPIRE", k("a")},
			{"EXPIRE", k("a"), "9223372036854775807"}, {"EXPIRE", k("a"), "-9223372036854775807"},
			{"EXPIRE", k("a"), "9223372036854775"}, {"PEXPIRE", k("a"), "9223372036854775807"},
			{"EXPIREAT", k("a"), "9223372036854775807"}, {"EXPIREAT", k("a"), "-9223372036854775807"},
			{"PEXPIREAT", k("a"), "abc"},
			{"SET", k("a"), "v", "EX"}, {"SET", k("a"), "v", "EX", "abc"}, {"SET", k("a"), "v", "EX", "0"},
			{"SET", k("a"), "v", "PX", "-1"}, {"SET", k("a"), "v", "EXAT", "0"}, {"SET", k("a"), "v", "PXAT", "-1"},
			{"SET", k("a"), "v", "EX", "10", "PX", "10"}, {"SET", k("a"), "v", "EX", "10", "KEEPTTL"},
			{"SET", k("a"), "v", "KEEPTTL", "EX", "10"}, {"SET", k("a"), "v", "FOO"},
			{"SET", k("a"), "v", "EX", "0", "PX", "5"}, {"SET", k("a"), "v", "EX", "abc", "PX", "5"},
			{"SET", k("a"), "v", "EX", "9223372036854775807"}, {"SET", k("a"), "v", "EX", "9223372036854775"},
			{"SET", k("a"), "v", "PX", "9223372036854775807"}, {"SET", k("a"), "v", "EXAT", "9223372036854775807"},
			{"SETEX", k("a"), "abc", "v"}, {"SETEX", k("a"), "0", "v"}, {"SETEX", k("a"), "-1", "v"},
			{"SETEX", k("a"), "9223372036854775807", "v"}, {"PSETEX", k("a"), "0", "v"}, {"SETEX", k("a"), "10"},
			{"TTL"}, {"PTTL", k("a"), k("b")}, {"PERSIST"}, {"EXPIRETIME"},
			{"EXPIRE", k("a"), "+5"}, {"EXPIRE", k("a"), "010"}, {"EXPIRE", k("a"), "-0"}, {"EXPIRE", k("a"), " 5"},
			{"SET", k("a"), "v", "EX", "010"}, {"SETEX", k("a"), "+5", "v"}, {"PEXPIREAT", k("a"), "1e3"},
		} {
			p.same(c...)
		}
		p.same("TTL", k("a")) // none of the above gave it an expiry

		// The largest expiries Redis takes (seconds that pass int64 only
		// once the clock is added are refused, those just below are
		// not) are past year 9999, which cachecast refuses.
		p.differs(after9999, past9999, "+OK", "SET", k("big"), "v", "EX", "9222000000000000")
		p.same("SET", k("big"), "v", "EX", "100")
		p.differs(after9999, past9999, ":1", "EXPIRE", k("big"), "9222000000000001", "GT")
		p.same("PEXPIRE", k("big"), "-9223372036854775807")
		p.same("EXISTS", k("big"))
		p.same("SET", k("big"), "v")
		p.same("PEXPIREAT", k("big"), "-9223372036854775807")
		p.same("EXISTS", k("big"))

		// Two expiries of one kind: Redis takes the last.
		p.same("SET", k("h"), "v", "EX", "10", "EX", "100")
		p.near("TTL", k("h"))
		p.same("SET", k("h"), "v", "EX", "100000000000")
		p.near("TTL", k("h"))

		// The string commands beside them: a key named twice is
		// deleted once (DEL's count), integers are Redis's.
		p.same("SET", k("s1"), "hello world")
		for _, c := range [][]string{
			{"GETRANGE", k("s1"), "0", "4"}, {"GETRANGE", k("s1"), "-5", "-1"}, {"GETRANGE", k("s1"), "5", "2"},
			{"GETRANGE", k("s1"), "-100", "100"}, {"GETRANGE", k("missing"), "0", "1"}, {"GETRANGE", k("s1"), "+1", "2"},
			{"GETRANGE", k("s1"), "a", "2"}, {"GETRANGE", k("s1"), "9223372036854775807", "9223372036854775807"},
			// A negative end before the value is its first byte in Redis 7
			// (Redis 8 answers ""): cachecast answers as 7.
			{"GETRANGE", k("s1"), "0", "-100"}, {"GETRANGE", k("s1"), "-200", "-100"}, {"GETRANGE", k("s1"), "-100", "-200"},
			{"GETRANGE", k("s1"), "3", "-100"}, {"GETRANGE", k("s1"), "-9223372036854775808", "-9223372036854775808"},
			{"GETRANGE", k("s1"), "-1", "-9223372036854775808"}, {"GETRANGE", k("s1"), "-9223372036854775808", "9223372036854775807"},
			{"GETRANGE", k("s1"), "11", "-100"}, {"GETRANGE", k("s1"), "10", "10"}, {"GETRANGE", k("s1"), "-1", "0"},
			{"STRLEN", k("s1")}, {"STRLEN", k("missing")}, {"EXISTS", k("s1"), k("s1"), k("missing")},
			{"TYPE", k("s1")}, {"TYPE", k("missing")}, {"DEL", k("s1"), k("s1"), k("missing")}, {"DEL", k("s1")},
			{"MGET", k("s1")}, {"GET", k("s1"), "x"}, {"SET", k("s1")}, {"MSET"}, {"MSET", k("s1")},
			{"SETEX", k("s1"), "10", ""}, {"GET", k("s1")}, {"STRLEN", k("s1")}, {"GETRANGE", k("s1"), "0", "0"},
			{"UNLINK", k("s1"), k("missing"), k("s1")}, {"EXPIRE", k("s1"), "10"},
			{"SELECT", "0"}, {"SELECT", "x"}, {"SELECT", "01"}, {"SELECT", "2147483648"}, {"SELECT", "-2147483649"},
			{"SELECT", "9223372036854775808"}, {"SELECT", ""},
		} {
			p.same(c...)
		}
		// A hash is a topic here, a hash there: the replies agree.
		hash := "h" + proto
		for _, c := range [][]string{
			{"HSET", hash, "a", "1", "b", "2"}, {"HDEL", hash, "a", "a", "zz"}, {"HLEN", hash}, {"HGET", hash, "b"},
			{"HGET", hash, "a"}, {"TTL", hash}, {"PTTL", hash}, {"HMGET", hash, "a", "b"},
			// A string key is no hash: WRONGTYPE, a topic:key or a bare
			// default-topic key alike.
			{"SET", k("str"), "v"}, {"SET", "bare" + proto, "v"},
			{"HGET", k("str"), "f"}, {"HGET", "bare" + proto, "f"}, {"HMGET", k("str"), "f", "g"}, {"HEXISTS", k("str"), "f"},
			{"HSTRLEN", k("str"), "f"}, {"HLEN", k("str")}, {"HLEN", "bare" + proto}, {"HKEYS", k("str")}, {"HVALS", k("str")},
			{"HGETALL", k("str")}, {"HGETALL", "bare" + proto}, {"HSCAN", k("str"), "0"}, {"HSCAN", k("str"), "0", "COUNT", "0"},
			{"HSCAN", k("str"), "abc"}, {"HDEL", k("str"), "f"}, {"HDEL", "bare" + proto, "f"},
			{"HGET", k("missing"), "f"}, {"HLEN", k("missing")}, {"HGETALL", k("missing")}, {"HKEYS", "nohash"},
			{"HMGET", "nohash", "f"}, {"HEXISTS", "nohash", "f"}, {"HSTRLEN", "nohash", "f"}, {"HDEL", "nohash", "f"},
			{"OBJECT", "ENCODING", k("str")}, {"OBJECT", "ENCODING", hash}, {"SET", k("int"), "12345"},
			{"OBJECT", "ENCODING", k("int")}, {"SET", k("int"), "-9223372036854775808"}, {"OBJECT", "ENCODING", k("int")},
			{"SET", k("int"), "9223372036854775808"}, {"OBJECT", "ENCODING", k("int")}, {"SET", k("int"), "012"},
			{"OBJECT", "ENCODING", k("int")}, {"SET", k("int"), strings.Repeat("e", 44)}, {"OBJECT", "ENCODING", k("int")},
			{"SET", k("int"), strings.Repeat("r", 45)}, {"OBJECT", "ENCODING", k("int")}, {"SET", k("int"), ""},
			{"OBJECT", "ENCODING", k("int")}, {"SETEX", k("int"), "100", "7"}, {"OBJECT", "ENCODING", k("int")},
			{"MSET", k("int"), "8", k("int2"), strings.Repeat("m", 50)}, {"OBJECT", "ENCODING", k("int")}, {"OBJECT", "ENCODING", k("int2")},
			{"HSET", hash, "long", strings.Repeat("h", 65)}, {"OBJECT", "ENCODING", hash}, {"HDEL", hash, "long"},
			{"DEL", k("str"), "bare" + proto, k("int"), k("int2")},
		} {
			p.same(c...)
		}
		// The errors of SCAN's and HSCAN's options and cursors, WAIT's
		// arguments, and OBJECT's and CLIENT's subcommands (scripts
		// match on them). The keyspaces differ, so SCAN's cursor is
		// compared only where it is refused or the scan stops at once.
		for _, c := range [][]string{
			{"SCAN", "0", "COUNT", "0"}, {"SCAN", "0", "COUNT", "-1"}, {"SCAN", "0", "COUNT", "abc"},
			{"SCAN", "0", "COUNT", "+5"}, {"SCAN", "0", "COUNT"}, {"SCAN", "0", "MATCH"}, {"SCAN", "0", "FOO", "x"},
			{"SCAN", "abc"}, {"SCAN", "+"}, {"SCAN", " 1"}, {"SCAN", "18446744073709551616"}, {"SCAN", "0", "TYPE"},
			{"SCAN", "0", "COUNT", "1", "COUNT", "0"}, {"SCAN", "-1", "COUNT", "0"}, {"SCAN", "12345", "COUNT", "0"},
			{"SCAN", "-1", "MATCH", "nothing-matches-this*"}, {"SCAN", "18446744073709551615", "MATCH", "nothing-matches-this*"},
			{"SCAN", "-1", "TYPE", "hash", "MATCH", "nothing-matches-this*"},
			{"HSCAN", hash, "-1", "MATCH", "nothing-matches-this*"}, {"HSCAN", hash, "-1", "COUNT", "0"}, {"HSCAN", hash, "12345", "COUNT", "0"},
			{"HSCAN", "nohash", "0", "COUNT", "0"}, {"HSCAN", "nohash", "12345"}, {"HSCAN", "nohash", "-1", "FOO"}, {"HSCAN", "nohash", "abc"},
			{"HSCAN", k("missing"), "0", "MATCH"},
			{"KEYS", ""}, {"SCAN", "0", "MATCH", "", "COUNT", "100000"}, {"SCAN", "0", "MATCH", "", "TYPE", "hash", "COUNT", "100000"},
			{"HSCAN", hash, "0", "MATCH", ""},
			{"HSCAN", hash, "0", "COUNT", "0"}, {"HSCAN", hash, "0", "COUNT", "-1"}, {"HSCAN", hash, "abc"},
			{"HSCAN", hash, "+0"}, {"HSCAN", hash, "-0"}, {"HSCAN", hash, "0"}, {"HSCAN", hash, "0", "TYPE", "string"},
			{"WAIT"}, {"WAIT", "0"}, {"WAIT", "0", "0", "0"}, {"WAIT", "-1", "0"}, {"WAIT", "0", "0"},
			{"WAIT", "abc", "0"}, {"WAIT", "+1", "0"}, {"WAIT", "0", "abc"}, {"WAIT", "0", "+5"}, {"WAIT", "0", "05"},
			{"WAIT", "0", "1.5"}, {"WAIT", "0", "-1"}, {"WAIT", "-1", "-1"}, {"WAIT", "abc", "abc"}, {"WAIT", "5", "-1"},
			{"WAIT", "9223372036854775808", "0"}, {"WAIT", "0", "9223372036854775808"}, {"WAIT", "0", "9223372036854775807"},
			{"OBJECT"}, {"OBJECT", "FOO"}, {"OBJECT", "foo", k("a")}, {"OBJECT", "HELP", "x"},
			{"OBJECT", "ENCODING"}, {"OBJECT", "ENCODING", k("a"), k("b")}, {"OBJECT", "ENCODING", k("missing")},
			{"CLIENT"}, {"CLIENT", "FOO"}, {"CLIENT", "foo", "x"}, {"CLIENT", "ID", "x"}, {"CLIENT", "GETNAME", "x"},
			{"CLIENT", "INFO", "x"}, {"CLIENT", "GETREDIR", "x"}, {"CLIENT", "TRACKINGINFO", "x"}, {"CLIENT", "SETNAME"},
			{"CLIENT", "CACHING"}, {"CLIENT", "TRACKING"}, {"CLIENT", "HELP", "x"}, {"CLIENT", "NO-EVICT"},
			{"CLIENT", "NO-EVICT", "on", "x"}, {"CLIENT", "NO-EVICT", "maybe"}, {"CLIENT", "NO-EVICT", "off"},
			{"CLIENT", "LIST", "TYPE", "foo"}, {"CLIENT", "LIST", "type", "MASTER"}, {"CLIENT", "LIST", "TYPE", "replica"},
			{"CLIENT", "LIST", "TYPE", "slave"}, {"CLIENT", "LIST", "TYPE", "PubSub"}, {"CLIENT", "LIST", "TYPE"},
			{"CLIENT", "LIST", "TYPE", "normal", "x"}, {"CLIENT", "LIST", "ID"}, {"CLIENT", "LIST", "ID", "abc"},
			{"CLIENT", "LIST", "id", "999999"}, {"CLIENT", "LIST", "ID", "999999", "abc"}, {"CLIENT", "LIST", "ID", "+1"},
			{"CLIENT", "LIST", "ID", "0", "-1", "999999"}, {"CLIENT", "LIST", "FOO"}, {"CLIENT", "LIST", "FOO", "bar"},
			{"NOSUCH"}, {"NOSUCH", "a", "b", "c", "d", "e"}, {"nosuch", ""}, {"NOSUCH", strings.Repeat("x", 200)},
			{"NOSUCH", strings.Repeat("y", 100), strings.Repeat("z", 100), "w"}, {"NOSUCH", strings.Repeat("y", 126), "z"},
			{strings.Repeat("Q", 200), "a"}, {"NOSUCH", "a\x00b", "c\r\nd"}, {"NO\x00SUCH", "a"},
			{"CLIENT", strings.Repeat("s", 200)}, {"CLIENT", "a\x00b"}, {"OBJECT", "x\x00y", k("a")},
			{"EXPIRE", k("a"), "10", "N\x00X"}, {"EXPIRE", k("a"), "10", strings.Repeat("o", 300)},
			{"HELLO", "3", "f\x00oo"}, {"HELLO", "3", strings.Repeat("o", 300)},
			{"CLIENT", "CACHING", "YES"}, {"CLIENT", "CACHING", "no"}, {"CLIENT", "CACHING", "maybe"},
			{"CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"}, {"CLIENT", "TRACKING", "ON", "PREFIX", "a"},
			{"CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"}, {"CLIENT", "TRACKING", "ON", "OPTOUT", "BCAST", "PREFIX", "a"},
			{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"}, {"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab", "PREFIX", "a"},
			{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "", "PREFIX", "x"}, {"CLIENT", "TRACKING", "ON", "REDIRECT", "999999"},
			{"CLIENT", "TRACKING", "ON", "REDIRECT", "0"}, {"CLIENT", "TRACKING", "ON", "REDIRECT", "999999", "REDIRECT", "5"},
			{"CLIENT", "TRACKING", "ON", "REDIRECT"}, {"CLIENT", "TRACKING", "ON", "PREFIX"}, {"CLIENT", "TRACKING", "ON", "FOO"},
			{"CLIENT", "TRACKING", "OFF", "FOO"}, {"CLIENT", "TRACKING", "OFF", "REDIRECT", "abc"}, {"CLIENT", "TRACKING", "maybe", "BCAST"},
			{"CLIENT", "TRACKING", "maybe"}, {"CLIENT", "TRACKING", "OFF"}, {"CLIENT", "TRACKING", "off", "BCAST", "OPTIN", "OPTOUT"},
			{"CLIENT", "TRACKINGINFO"}, {"CLIENT", "GETREDIR"},
			{"COMMAND", "FOO"}, {"COMMAND", "COUNT", "x"}, {"COMMAND", "INFO", "nosuch"}, {"COMMAND", "INFO", "nosuch", "no2"},
			{"COMMAND", "DOCS", "nosuch"}, {"COMMAND", "LIST", "x"}, {"COMMAND", "LIST", "FILTERBY", "x", "y"},
			{"COMMAND", "LIST", "FILTERBY", "pattern"}, {"COMMAND", "LIST", "FILTERBY", "MODULE", "nosuch"},
			{"COMMAND", "LIST", "FILTERBY", "PATTERN", "nosuch*"}, {"COMMAND", "LIST", "FILTERBY", "PATTERN", "MGE?"},
			{"COMMAND", "LIST", "FILTERBY", "PATTERN", "hget"},
			{"CONFIG"}, {"CONFIG", "FOO"}, {"CONFIG", "GET"}, {"CONFIG", "SET", "a"}, {"CONFIG", "SET", "a", "b", "c"},
			{"CONFIG", "RESETSTAT", "x"}, {"CONFIG", "GET", "nosuch-parameter"}, {"CONFIG", "GET", "maxmemory"},
			{"CONFIG", "GET", "timeout"}, {"CONFIG", "GET", "appendonly"}, {"CONFIG", "GET", "maxmemory-policy"},
			{"CONFIG", "GET", "notify-keyspace-events"},
			{"UNSUBSCRIBE"}, {"PUNSUBSCRIBE"}, {"UNSUBSCRIBE", "nochannel"}, {"PUNSUBSCRIBE", "nopattern*"}, {"SUBSCRIBE"},
			{"PING", "a", "b"}, {"ECHO"}, {"ECHO", "a\x00\xff"}, {"EXEC"}, {"DISCARD"},
			{"HELLO", "+3"}, {"HELLO", "03"}, {"HELLO", "-3"}, {"HELLO", "3 "}, {"HELLO", "4"},
			{"CLIENT", "TRACKING", "ON", "REDIRECT", "+1"}, {"CLIENT", "TRACKING", "ON", "REDIRECT", "01"},
		} {
			p.same(c...)
		}
		// KEYS with Redis's pattern quirks (a ']' after '-' bounds the
		// range; the bounds are signed chars), compared as sets: the
		// servers list keys in their own orders.
		for _, v := range []string{"a", "]", "-", "é", "x"} {
			p.same("SET", k("glob-"+v), "v")
		}
		for _, pat := range []string{"[a-]", "[a-]x", "[]-a]", "[a-\xff]", "[a-\xff]?", "[\x80-\xff]?", "[^a-]", "[\\]]", "[a", "[-a]", "?"} {
			ours, theirs := p.do("KEYS", k("glob-")+pat)
			if sortedElems(ours) != sortedElems(theirs) {
				t.Errorf("KEYS %q: cachecast %q, redis-server %q", k("glob-")+pat, ours, theirs)
			}
		}
		// The reads of names no key has here: empty, invalid UTF-8, an
		// empty topic or key, a ':' alone.
		for _, name := range []string{"", "\xff", k("\xff\xfe"), k(""), ":", ":k", k(":k"), "t" + proto + "::", strings.Repeat("n", 2000)} {
			for _, c := range [][]string{
				{"GET", name}, {"EXISTS", name, name}, {"TYPE", name}, {"STRLEN", name}, {"TTL", name}, {"PTTL", name},
				{"EXPIRETIME", name}, {"PEXPIRETIME", name}, {"GETRANGE", name, "0", "1"}, {"MGET", name, name},
				{"HGET", name, "f"}, {"HGET", name, ""}, {"HMGET", name, "", "\xff"}, {"HEXISTS", name, ""}, {"HSTRLEN", name, "f"},
				{"HLEN", name}, {"HKEYS", name}, {"HVALS", name}, {"HGETALL", name}, {"HSCAN", name, "0"}, {"OBJECT", "ENCODING", name},
				{"DEL", name}, {"UNLINK", name, name}, {"PERSIST", name}, {"EXPIRE", name, "10"}, {"PEXPIREAT", name, "1"}, {"HDEL", name, ""},
			} {
				p.same(c...)
			}
		}
		// Binary and empty values, a field or key named twice in one write.
		for _, c := range [][]string{
			{"SET", k("bin"), "\x00\xff\r\n"}, {"GET", k("bin")}, {"STRLEN", k("bin")}, {"GETRANGE", k("bin"), "1", "2"},
			{"SET", k("bin"), ""}, {"GET", k("bin")}, {"STRLEN", k("bin")}, {"OBJECT", "ENCODING", k("bin")},
			{"MSET", k("bin"), "a", k("bin2"), "\x00", k("bin"), "b"}, {"MGET", k("bin"), k("bin2")},
			{"HSET", hash, "n1", "1", "n1", "2"}, {"HGET", hash, "n1"}, {"HSET", hash, "n1", "3", "n2", "", "n2", "x"},
			{"HMGET", hash, "n1", "n2"}, {"HSTRLEN", hash, "n2"}, {"HLEN", hash}, {"HMSET", hash, "n3", "1"},
			{"HDEL", hash, "n1", "n1", "n2", "n3", "zz"}, {"HLEN", hash}, {"DEL", k("bin"), k("bin2")},
			{"SET", k("o"), "v", "keepttl"}, {"SET", k("o"), "v", "px", "100000", "KEEPTTL"}, {"SET", k("o"), "v", "Ex", "100", "ex", "200"},
			{"SET", k("o"), "v", "EXAT", "1", "PXAT", "1"}, {"SET", k("o"), "v", "eXaT", "abc"}, {"PERSIST", k("o")}, {"TTL", k("o")},
			{"EXPIRE", k("o"), "100", "nx", "NX"}, {"EXPIRE", k("o"), "200", "gt", "xx"}, {"EXPIRE", k("o"), "50", "xx", "GT"}, {"DEL", k("o")},
		} {
			p.same(c...)
		}
		// Counters.
		for _, c := range [][]string{
			{"INCR", k("ci")}, {"INCR", k("ci")}, {"INCRBY", k("ci"), "10"}, {"DECR", k("ci")}, {"DECRBY", k("ci"), "5"},
			{"GET", k("ci")}, {"INCRBY", k("ci"), "x"}, {"INCRBY", k("ci"), "+1"}, {"INCRBY", k("ci"), "9223372036854775807"},
			{"DECRBY", k("ci"), "-9223372036854775808"}, {"INCRBY", k("ci"), "-3"}, {"GET", k("ci")}, {"INCRBYFLOAT", k("ci"), "0.5"},
			{"SET", k("cf"), "10.5"}, {"INCRBYFLOAT", k("cf"), "0.1"}, {"INCRBYFLOAT", k("cf"), "-0.6"}, {"INCRBYFLOAT", k("cf"), "x"},
			{"INCRBYFLOAT", k("cf"), " 1"}, {"INCR", k("cf")}, {"INCRBYFLOAT", k("cfn"), "3"}, {"GET", k("cfn")},
			{"SET", k("cs"), "abc"}, {"INCR", k("cs")}, {"INCRBYFLOAT", k("cs"), "1"}, {"SET", k("cs"), "01"}, {"INCR", k("cs")},
			{"HINCRBY", hash, "hc", "5"}, {"HINCRBY", hash, "hc", "-7"}, {"HINCRBY", hash, "hc", "x"}, {"HINCRBYFLOAT", hash, "hc", "1.5"},
			{"HGET", hash, "hc"}, {"HINCRBY", hash, "hc", "1"}, {"HSET", hash, "hs", "abc"}, {"HINCRBY", hash, "hs", "1"},
			{"HINCRBYFLOAT", hash, "hs", "1"}, {"HDEL", hash, "hc", "hs"},
			{"SET", k("ce"), "1", "EX", "100"}, {"INCR", k("ce")}, {"TTL", k("ce")},
			{"DEL", k("ci"), k("cf"), k("cfn"), k("cs"), k("ce")},
		} {
			p.same(c...)
		}
		for _, c := range [][]string{
			{"INFO", "nosuch"}, {"INFO", "nosuch", "nosuch2"}, {"CLIENT", "SETNAME", "a b"}, {"CLIENT", "SETNAME", "\xff"},
			{"CLIENT", "SETNAME", "n" + proto}, {"CLIENT", "GETNAME"}, {"CLIENT", "SETNAME", ""}, {"CLIENT", "GETNAME"},
			{"client", "getname"}, {"Client", "Setname", "x"}, {"CLIENT", "SETNAME", ""}, {"HELLO", proto, "SETNAME", "a b"},
			{"HELLO", proto, "AUTH", "default"}, {"HELLO", proto, "SETNAME"}, {"HELLO", "1"}, {"HELLO", "abc", "SETNAME", "x"},
			{"CLIENT", "GETNAME"}, {"ECHO", ""}, {"PING", ""}, {"TYPE", hash}, {"EXISTS", hash, hash}, {"GET", hash},
			{"STRLEN", hash}, {"GETRANGE", hash, "0", "1"}, {"GETRANGE", hash, "x", "1"}, {"MGET", hash}, {"TTL", hash},
			{"SCAN", "0", "TYPE", "nosuchtype", "COUNT", "100000"}, {"SCAN", "0", "TYPE", "STRING", "MATCH", "nothing*", "COUNT", "100000"},
			{"READONLY", "x"}, {"CLUSTER"}, {"DBSIZE", "x"}, {"TIME", "x"},
		} {
			p.same(c...)
		}
		p.same("KEYS", "\xff*")
		p.same("SCAN", "0", "MATCH", "\xff*", "COUNT", "9223372036854775807")
		p.same("HSCAN", hash, "0", "COUNT", "9223372036854775807")
		p.same("HSCAN", hash, "0", "COUNT", "9223372036854775808")
		p.same("HMGET", hash, "", "\xff", "b")
		// Every command's arity, in Redis's words, named in any case.
		for _, c := range []struct {
			name  string
			arity int
		}{
			{"client", -2}, {"select", 2}, {"echo", 2}, {"config", -2}, {"wait", 3}, {"get", 2}, {"mget", -2},
			{"exists", -2}, {"type", 2}, {"strlen", 2}, {"getrange", 4}, {"ttl", 2}, {"pttl", 2}, {"object", -2},
			{"scan", -2}, {"keys", 2}, {"hget", 3}, {"hmget", -3}, {"hexists", 3}, {"hstrlen", 3}, {"hlen", 2},
			{"hkeys", 2}, {"hvals", 2}, {"hgetall", 2}, {"hscan", -3}, {"set", -3}, {"mset", -3}, {"del", -2},
			{"unlink", -2}, {"hset", -4}, {"hmset", -4}, {"hdel", -3}, {"publish", 3}, {"subscribe", -2},
			{"psubscribe", -2}, {"setex", 4}, {"psetex", 4}, {"expire", -3}, {"pexpire", -3}, {"expireat", -3},
			{"pexpireat", -3}, {"persist", 2}, {"expiretime", 2}, {"pexpiretime", 2}, {"dbsize", 1}, {"time", 1},
			{"multi", 1}, {"discard", 1}, {"exec", 1}, {"reset", 1}, {"watch", -2}, {"unwatch", 1},
			{"incr", 2}, {"decr", 2}, {"incrby", 3}, {"decrby", 3}, {"incrbyfloat", 3}, {"hincrby", 4}, {"hincrbyfloat", 4},
		} {
			n := c.arity
			if n < 0 {
				n = -n
			}
			few := []string{c.name}
			for len(few) < n-1 {
				few = append(few, k("x"))
			}
			if n > 1 {
				p.same(few...)
				p.same(append([]string{strings.ToUpper(c.name)}, few[1:]...)...)
			}
			if c.arity > 0 {
				many := []string{strings.ToUpper(c.name[:1]) + c.name[1:]}
				for len(many) <= n {
					many = append(many, k("x"))
				}
				p.same(many...)
			}
		}
		// Inline commands, split as Redis splits them: quotes,
		// escapes, blanks. (A line with a NUL byte is not compared:
		// Redis looks for its end with strchr and never finds it.)
		for _, line := range []string{
			"PING\r\n", "ECHO \"a b\"\r\n", "ECHO 'a b'\n", "ECHO \"\\x41\\n\\x4g\\q\\\"\"\r\n", "ECHO a\"b c\"\r\n",
			"ECHO \"\"\r\n", "ECHO ''\r\n", "ECHO 'it\\'s \\n'\r\n", "  \x0b ECHO \t x \x0c\r\n", "ECHO a\x0bb\r\n",
			"ECHO a\rb\r\n", "SET " + k("inline") + " \"v w\"\r\n", "GET " + k("inline") + "\r\n",
			"ECHO a'b'\r\n", "ECHO \"\\\\\"\r\n", "EXISTS '' \"\" x\r\n",
		} {
			p.inline(line)
		}
		for _, line := range []string{"ECHO \"abc\r\n", "ECHO \"a\"b\r\n", "ECHO 'a\r\n", "ECHO 'a'b\r\n", "ECHO \"a\\\"\r\n"} {
			q := pair()
			q.inline(line) // the protocol error, then both close
		}
		// Transactions of reads.
		for _, pipe := range [][][]string{
			{{"MULTI"}, {"GET", k("a")}, {"TTL", k("a")}, {"EXISTS", k("a"), k("missing")}, {"EXEC"}},
			{{"MULTI"}, {"MULTI"}, {"EXEC"}},
			{{"MULTI"}, {"NOSUCH"}, {"GET", k("a")}, {"EXEC"}},
			{{"MULTI"}, {"GET"}, {"EXEC"}, {"EXEC"}},
			{{"MULTI"}, {"PING"}, {"ECHO", "x"}, {"HGET", k("missing"), "f"}, {"DISCARD"}, {"DISCARD"}},
			{{"MULTI"}, {"EXEC"}},
			{{"MULTI"}, {"GET", k("a")}, {"EXEC", "x"}, {"EXEC"}, {"DISCARD"}},
			// Transactions of writes: one batch, the reads see the
			// transaction's own writes.
			{{"MULTI"}, {"SET", k("ta"), "1"}, {"GET", k("ta")}, {"MSET", k("tb"), "2", k("tc"), "3"}, {"MGET", k("ta"), k("tb"), k("tc")},
				{"DEL", k("tc"), k("missing")}, {"EXISTS", k("tc")}, {"STRLEN", k("tb")}, {"EXEC"}, {"MGET", k("ta"), k("tb"), k("tc")}, {"DEL", k("ta"), k("tb")}},
			{{"MULTI"}, {"HSET", hash, "t1", "a", "t2", "b"}, {"HGET", hash, "t1"}, {"HDEL", hash, "t2", "t3"}, {"HEXISTS", hash, "t2"},
				{"HMGET", hash, "t1", "t2"}, {"EXEC"}, {"HDEL", hash, "t1"}},
			{{"MULTI"}, {"SET", k("te"), "v"}, {"EXPIRE", k("te"), "100"}, {"TTL", k("te")}, {"PERSIST", k("te")}, {"TTL", k("te")},
				{"SETEX", k("te"), "200", "w"}, {"TTL", k("te")}, {"EXEC"}, {"GET", k("te")}, {"DEL", k("te")}},
			{{"MULTI"}, {"SET", k("tf"), "1", "EX", "0"}, {"SET", k("tg"), "1"}, {"EXEC"}, {"GET", k("tg")}, {"DEL", k("tg")}},
			{{"MULTI"}, {"SET", k("th"), "1"}, {"SET", k("th")}, {"EXEC"}, {"GET", k("th")}},
			{{"SET", k("tn"), "5"}, {"MULTI"}, {"INCR", k("tn")}, {"INCRBY", k("tn"), "2"}, {"GET", k("tn")}, {"SET", k("to"), "1"},
				{"INCR", k("to")}, {"INCR", k("tp")}, {"EXEC"}, {"MGET", k("tn"), k("to"), k("tp")}, {"DEL", k("tn"), k("to"), k("tp")}},
			// Increments of the transaction's own SET and DEL: counted on
			// that write's version, or the absence after that delete.
			{{"SET", k("tq"), "7"}, {"MULTI"}, {"DEL", k("tq")}, {"INCR", k("tq")}, {"DECRBY", k("tq"), "3"}, {"SET", k("tr"), "1.5"},
				{"INCRBYFLOAT", k("tr"), "1"}, {"GET", k("tr")}, {"HSET", hash, "t5", "2"}, {"HINCRBY", hash, "t5", "3"}, {"EXEC"},
				{"MGET", k("tq"), k("tr")}, {"HGET", hash, "t5"}, {"DEL", k("tq"), k("tr")}, {"HDEL", hash, "t5"}},
			{{"MULTI"}, {"SET", k("ti"), "1"}, {"DISCARD"}, {"GET", k("ti")}, {"MULTI"}, {"DEL", k("ti")}, {"EXEC"}},
			{{"WATCH", k("tw")}, {"SET", k("tw"), "1"}, {"MULTI"}, {"SET", k("tw"), "2"}, {"EXEC"}, {"GET", k("tw")},
				{"WATCH", k("tw"), k("tx")}, {"MULTI"}, {"SET", k("tw"), "3"}, {"EXEC"}, {"GET", k("tw")},
				{"WATCH", k("tw")}, {"DEL", k("tw")}, {"UNWATCH"}, {"MULTI"}, {"WATCH", k("tw")}, {"GET", k("tw")}, {"EXEC"}, {"EXEC"}},
		} {
			got := p.pipeline(pipe)
			for i := range pipe {
				if got[0][i] != got[1][i] {
					t.Errorf("pipelined %q: cachecast %q, redis-server %q", pipe[i], got[0][i], got[1][i])
				}
			}
		}
		// Subscribed: what a RESP2 connection may run then (not HELLO,
		// which RESP3 runs: its reply is each server's own, not
		// compared), and the replies of SUBSCRIBE and UNSUBSCRIBE
		// (pushes in RESP3). No one publishes on these channels.
		for _, pipe := range [][][]string{
			{{"SUBSCRIBE", "nochan-" + proto}, {"PING"}, {"PING", "x"}, {"GET", k("a")}, {"CLIENT", "GETNAME"}, {"CLIENT", "NOSUCH"},
				{"CLIENT", "ID", "x"}, {"NOSUCH"}, {"GET"}, {"HELLO", proto}, {"SELECT", "0"}, {"PSUBSCRIBE", "nopat-" + proto + "*"},
				{"UNSUBSCRIBE", "nochan-" + proto}, {"PUNSUBSCRIBE", "nopat-" + proto + "*"}, {"PING"}},
		} {
			got := p.pipeline(pipe)
			for i := range pipe {
				if got[0][i] != got[1][i] && (proto == "2" || pipe[i][0] != "HELLO") {
					t.Errorf("pipelined %q: cachecast %q, redis-server %q", pipe[i], got[0][i], got[1][i])
				}
			}
		}
		// HELP's list is each server's own; its frame is Redis's.
		for _, cmd := range []string{"OBJECT", "CLIENT"} {
			first := "+" + cmd + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
			ours, theirs := p.do(cmd, "HELP")
			for i, r := range []string{ours, theirs} {
				if !strings.HasPrefix(r, "*") || !strings.Contains(r, first) || !strings.HasSuffix(r, "+HELP\r\n+    Prints this help.\r\n") {
					t.Errorf("%s HELP: %s answers %q, not a help list", cmd, p.name(i), r)
				}
			}
		}
		// INFO, CLIENT INFO and CLIENT LIST tell each server's own
		// state; their kind is Redis's: a verbatim string of txt in
		// RESP3 (=n then txt:), a bulk string in RESP2.
		for _, c := range [][]string{{"INFO", "server"}, {"CLIENT", "INFO"}, {"CLIENT", "LIST"}} {
			ours, theirs := p.do(c...)
			if kind(ours) != kind(theirs) {
				t.Errorf("%q: cachecast answers a %s, redis-server a %s", c, kind(ours), kind(theirs))
			}
		}
		// CLIENT INFO has redis-server's fields in its order (7.2's
		// lib-name and lib-ver may follow), and INFO the fields of
		// redis-server's that tools read.
		{
			ours, theirs := p.do("CLIENT", "INFO")
			o, th := clientFields(ours), clientFields(theirs)
			if len(o) < len(th) || !slices.Equal(o[:len(th)], th) {
				t.Errorf("CLIENT INFO fields: cachecast %q, redis-server %q", o, th)
			}
			ours, theirs = p.do("INFO")
			for _, f := range []string{"# Server", "redis_version:", "tcp_port:", "uptime_in_seconds:", "# Clients", "connected_clients:",
				"# Memory", "used_memory:", "used_memory_rss:", "used_memory_peak:", "maxmemory:", "# Stats", "total_commands_processed:",
				"# Replication", "role:master", "# CPU", "used_cpu_sys:", "# Keyspace", "db0:keys="} {
				if !strings.Contains(theirs, f) {
					t.Errorf("redis-server's INFO has no %q: %q", f, theirs)
				}
				if !strings.Contains(ours, f) {
					t.Errorf("INFO has no %q (redis-server's has): %q", f, ours)
				}
			}
		}
		// COMMAND INFO's fields up to its categories are the same for
		// GET (the rest are each server's own); its flags are a set in
		// RESP3, as its categories are.
		{
			ours, theirs := p.do("COMMAND", "INFO", "get")
			head := func(r string) string {
				lines := strings.SplitAfterN(r, "\r\n", 12)
				if len(lines) < 12 {
					return r
				}
				return strings.Join(lines[:11], "") + lines[11][:1]
			}
			if head(ours) != head(theirs) {
				t.Errorf("COMMAND INFO get: cachecast %q, redis-server %q", ours, theirs)
			}
		}
		p.same("SCAN", "+0", "MATCH", "nothing-matches-this*", "COUNT", "100000") // Redis reads +0 as 0
		p.same("SCAN", "-0", "MATCH", "nothing-matches-this*", "COUNT", "100000")
		p.differs("the subcommand is not served: a node's clients are not killed by another client",
			"-ERR unknown subcommand 'KILL'. Try CLIENT HELP.\r\n", "-ERR wrong number of arguments for 'client|kill' command", "CLIENT", "KILL")
		p.differs("not served: cachecast keeps no access frequencies, idle times or reference counts",
			"-ERR unknown subcommand 'FREQ'. Try OBJECT HELP.\r\n", "", "OBJECT", "FREQ", k("a"))
		p.differs("NOVALUES is Redis 7.4's HSCAN option, served here; Redis 7.0 refuses it",
			"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nb\r\n", "-ERR syntax error", "HSCAN", hash, "0", "NOVALUES")
		p.same("AUTH", "x") // no users: the user default has no password, as in this Redis
		p.same("AUTH", "default", "x")
		p.same("AUTH", "nosuchuser", "x")
		p.same("AUTH", "a", "b", "c")
		p.differs("a topic is not a key: it has no expiry of its own (its keys have theirs)", ":0\r\n", ":1", "EXPIRE", hash, "10")
		p.differs("a topic's keys are string keys topic:key too: KEYS and SCAN list them, not the topic (SCAN TYPE hash lists topics)",
			"*1\r\n$"+strconv.Itoa(len(hash)+2)+"\r\n"+hash+":b\r\n", "*1\r\n$2\r\nh"+proto, "KEYS", hash+"*")
		p.differs("a topic is not a key: DEL deletes a key, HDEL a topic's keys", ":0\r\n", ":1", "DEL", hash)
		p.differs("CLIENT SETINFO and NO-TOUCH are Redis 7.2's, served here; Redis 7.0 has no such subcommands",
			"+OK\r\n", "-ERR unknown subcommand 'SETINFO'", "CLIENT", "SETINFO", "LIB-NAME", "diff")
		p.differs("CLIENT SETINFO and NO-TOUCH are Redis 7.2's, served here; Redis 7.0 has no such subcommands",
			"+OK\r\n", "-ERR unknown subcommand 'NO-TOUCH'", "CLIENT", "NO-TOUCH", "OFF")

		// The strings commands that read before they write: the same
		// answers as redis-server on one node (decided on the node's
		// own view; docs/redis.md).
		p.same("SET", k("n"), "v", "NX")
		p.same("SET", k("n"), "w", "NX")
		p.same("SET", k("n"), "w", "XX", "EX", "10")
		p.near("TTL", k("n"))
		p.same("SET", k("n"), "x", "GET")
		p.same("SET", k("n"), "y", "NX", "GET")
		p.same("SET", k("n"), "y", "EX", "100")
		p.same("SET", k("n"), "y", "XX", "GET", "KEEPTTL")
		p.near("TTL", k("n"))
		p.same("SET", k("nx"), "y", "XX", "GET")
		p.same("SET", k("nx"), "y", "XX")
		p.same("GET", k("nx"))
		p.same("SET", k("nx"), "y", "NX", "XX")
		p.same("SET", k("nx"), "y", "NX", "GET", "EX", "0")
		p.same("SET", k("nx"), "z", "GET", "NX")
		p.same("SETNX", k("n"), "v")
		p.same("SETNX", k("n2"), "v")
		p.same("GETSET", k("n2"), "w")
		p.same("GETSET", k("n3"), "w")
		p.same("GETDEL", k("n3"))
		p.same("GETDEL", k("n3"))
		p.same("EXISTS", k("n3"))
		null := map[string]string{"2": "$-1", "3": "_"}[proto]
		p.differs("a topic is a hash: a string read of it is WRONGTYPE", "-"+wrongTypeErr+"\r\n", null, "GETDEL", hash)
		p.differs("a topic is a hash: a string read of it is WRONGTYPE", "-"+wrongTypeErr+"\r\n", null, "GETEX", hash, "PERSIST")
		p.differs("a topic is a hash: a string read of it is WRONGTYPE", "-"+wrongTypeErr+"\r\n", null, "SET", hash, "v", "NX", "GET")
		p.same("GETEX", k("n2"))
		p.same("GETEX", k("n2"), "EX", "100")
		p.near("TTL", k("n2"))
		p.same("GETEX", k("n2"), "PX", "200000")
		p.near("PTTL", k("n2"))
		p.same("GETEX", k("n2"), "EXAT", inS(time.Hour))
		p.same("EXPIRETIME", k("n2"))
		p.same("GETEX", k("n2"), "PXAT", atMs)
		p.same("PEXPIRETIME", k("n2"))
		p.same("GETEX", k("n2"), "PERSIST")
		p.same("TTL", k("n2"))
		p.same("GETEX", k("n2"), "PERSIST")
		p.same("GETEX", k("n2"), "PERSIST", "PERSIST")
		p.same("GETEX", k("n2"), "EX", "100", "EX", "200")
		p.near("TTL", k("n2"))
		p.same("GETEX", k("missing"), "EX", "10")
		p.same("GETEX", k("missing"), "EX", "0")
		for _, bad := range [][]string{{"EX"}, {"EX", "0"}, {"EX", "x"}, {"PX", "-1"}, {"EX", "10", "PX", "10"}, {"EX", "10", "PERSIST"},
			{"PERSIST", "EX", "10"}, {"EX", "10", "EX", "20", "PERSIST"}, {"FOO"}, {"NX"}, {"GET"}, {"KEEPTTL"}, {"EXAT", "9223372036854775807"}} {
			p.same(append([]string{"GETEX", k("n2")}, bad...)...)
		}
		p.same("GETEX", k("n2"), "PXAT", "1") // past: the key goes, its value answered
		p.same("EXISTS", k("n2"))
		for _, c := range [][]string{{"SETNX"}, {"SETNX", k("n")}, {"GETSET", k("n")}, {"GETDEL"}, {"GETEX"}, {"APPEND", k("n")}, {"SETRANGE", k("n"), "0"}} {
			p.same(c...)
		}

		// Where cachecast differs by design.
		p.differs("APPEND would write a value computed from this node's copy of the key, which may be older than another node's",
			"-ERR APPEND is not served: it would write a value computed from this node's copy of the key, which may be older than another node's newer one and would then replace it on every node; build the whole value in the client and SET it\r\n",
			":", "APPEND", k("n"), "more")
		p.differs("SETRANGE would write a value computed from this node's copy of the key, which may be older than another node's",
			"-ERR SETRANGE is not served: it would write a value computed from this node's copy of the key, which may be older than another node's newer one and would then replace it on every node; build the whole value in the client and SET it\r\n",
			":", "SETRANGE", k("n"), "1", "more")
		p.same("FLUSHDB", "NOW")
		p.same("FLUSHALL", "ASYNC", "x")
		p.same("DEL", k("n"))
		later := strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10)
		p.differs("EFFECTIVEAT is cachecast's own option (a scheduled value); Redis refuses it, so a client pointed at Redis fails loudly",
			"+OK\r\n", "-ERR syntax error", "SET", k("s"), "v", "EFFECTIVEAT", later)
		p.same("GET", k("s")) // not in force yet here, never set there
		p.differs("a Redis key is topic:key, and a topic is 1 to 128 bytes of A-Z a-z 0-9 . _ -",
			"-ERR invalid_name: topic \"bad topic\": ' ' at byte 3 is not one of A-Z a-z 0-9 . _ -\r\n", "+OK",
			"SET", "bad topic:k", "v", "EX", "10")
		p.differs("a topic is a hash whose fields are its keys: it exists, without an expiry", ":-1\r\n", ":-2", "TTL", "t"+proto)
		p.differs("a topic is a hash", ":-1\r\n", ":-2", "PEXPIRETIME", "t"+proto)
		p.differs("cachecast has one database", "-ERR DB index is out of range (cachecast has database 0 only)\r\n", "+OK", "SELECT", "1")
		p.same("SELECT", "0") // redis-server's connection back on database 0

		// Tracking turned on and off in one pipeline (the window is too
		// short for a key to change and push an invalidation): the
		// modes' checks against a client's own, and BCAST without
		// PREFIX as the prefix "". RESP2 tracking needs a REDIRECT here.
		if proto == "3" {
			pipe := [][]string{{"CLIENT", "TRACKING", "ON", "BCAST"}, {"CLIENT", "TRACKINGINFO"}, {"CLIENT", "GETREDIR"},
				{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "x"}, {"CLIENT", "TRACKING", "ON"}, {"CLIENT", "TRACKING", "ON", "BCAST", "NOLOOP"},
				{"CLIENT", "TRACKINGINFO"}, {"CLIENT", "TRACKING", "OFF"}, {"CLIENT", "TRACKINGINFO"},
				{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "b", "PREFIX", "a"}, {"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "c"},
				{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab"}, {"CLIENT", "TRACKINGINFO"}, {"CLIENT", "TRACKING", "OFF"},
				{"CLIENT", "TRACKING", "ON", "OPTIN"}, {"CLIENT", "CACHING", "YES"}, {"CLIENT", "TRACKINGINFO"}, {"CLIENT", "TRACKINGINFO"},
				{"CLIENT", "GETNAME"}, {"CLIENT", "TRACKINGINFO"}, {"PING"}, {"CLIENT", "TRACKINGINFO"}, {"CLIENT", "CACHING", "YES"},
				{"NOSUCH"}, {"CLIENT", "TRACKINGINFO"}, {"CLIENT", "CACHING", "YES"}, {"GET"}, {"CLIENT", "TRACKINGINFO"},
				{"CLIENT", "CACHING", "NO"}, {"CLIENT", "TRACKING", "ON", "OPTOUT"}, {"CLIENT", "TRACKING", "ON", "BCAST"},
				{"CLIENT", "TRACKING", "ON"}, {"CLIENT", "TRACKINGINFO"}, {"CLIENT", "TRACKING", "ON", "OPTOUT", "NOLOOP"},
				{"CLIENT", "CACHING", "NO"}, {"CLIENT", "TRACKINGINFO"}, {"CLIENT", "CACHING", "YES"}, {"CLIENT", "TRACKING", "OFF"}}
			got := p.pipeline(pipe)
			for i := range pipe {
				if got[0][i] != got[1][i] {
					t.Errorf("pipelined %q: cachecast %q, redis-server %q", pipe[i], got[0][i], got[1][i])
				}
			}
		}
	})
}
