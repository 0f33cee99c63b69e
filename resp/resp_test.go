package resp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/store/record"
)

// cmd encodes a command as a client sends it.
func cmd(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.String()
}

// readReply reads one RESP2 or RESP3 value off b and returns its length;
// -1 if b does not start with a whole, well-formed value.
func readReply(b []byte) int {
	if len(b) < 3 {
		return -1
	}
	end := bytes.Index(b, []byte("\r\n"))
	if end < 1 {
		return -1
	}
	line := string(b[1:end])
	n := end + 2
	switch b[0] {
	case '+', '-', ':', ',', '#', '_', '(':
		if strings.ContainsAny(line, "\r\n") {
			return -1
		}
		return n
	case '$', '=', '!':
		size, err := strconv.Atoi(line)
		if err != nil || size < -1 {
			return -1
		}
		if size == -1 {
			return n
		}
		if len(b) < n+size+2 || string(b[n+size:n+size+2]) != "\r\n" {
			return -1
		}
		return n + size + 2
	case '*', '%', '~', '>', '|':
		count, err := strconv.Atoi(line)
		if err != nil || count < -1 {
			return -1
		}
		if b[0] == '%' || b[0] == '|' {
			count *= 2
		}
		for range max(count, 0) {
			m := readReply(b[n:])
			if m < 0 {
				return -1
			}
			n += m
		}
		return n
	}
	return -1
}

// replies splits a server's output into values; it fails the test on
// anything that is not a whole RESP value.
func replies(t testing.TB, out []byte) []string {
	t.Helper()
	var got []string
	for len(out) > 0 {
		n := readReply(out)
		if n < 0 {
			t.Fatalf("malformed reply at %q", out[:min(len(out), 80)])
		}
		got = append(got, string(out[:n]))
		out = out[n:]
	}
	return got
}

// TestSessionReplies runs whole connections and compares the answers.
func TestSessionReplies(t *testing.T) {
	s, _ := newTestServer(t)
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"ping", cmd("PING") + cmd("ping", "hi") + "PING\r\n", []string{"+PONG\r\n", "$2\r\nhi\r\n", "+PONG\r\n"}},
		{"set get hget", cmd("SET", "p:k", "v") + cmd("GET", "p:k") + cmd("HGET", "p", "k") + cmd("GET", "p:nope"),
			[]string{"+OK\r\n", "$1\r\nv\r\n", "$1\r\nv\r\n", "$-1\r\n"}},
		{"resp3 null", cmd("HELLO", "3") + cmd("GET", "p:nope"), nil},
		{"mget", cmd("MSET", "m:a", "1", "m:b", "2") + cmd("MGET", "m:a", "m:x", "m:b"),
			[]string{"+OK\r\n", "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n"}},
		{"default topic", cmd("SET", "plain", "x") + cmd("GET", "default:plain") + cmd("EXISTS", "plain", "nope"),
			[]string{"+OK\r\n", "$1\r\nx\r\n", ":1\r\n"}},
		{"multi reads", cmd("MULTI") + cmd("GET", "p:k") + cmd("PTTL", "p:k") + cmd("EXEC"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n$1\r\nv\r\n:-1\r\n"}},
		{"multi refuses what is not a key's read or write", cmd("MULTI") + cmd("SUBSCRIBE", "c") + cmd("EXEC") + cmd("GET", "p:k"),
			[]string{"+OK\r\n", "-ERR SUBSCRIBE cannot be queued: MULTI here holds the reads and writes of keys\r\n",
				"-EXECABORT Transaction discarded because of previous errors.\r\n", "$1\r\nv\r\n"}},
		{"subscribed resp2 refuses get", cmd("SUBSCRIBE", "c") + cmd("GET", "p:k") + cmd("PING"),
			[]string{"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n",
				"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
				"*2\r\n$4\r\npong\r\n$0\r\n\r\n"}},
		{"reset", cmd("HELLO", "3") + cmd("RESET") + cmd("GET", "p:nope"), nil},
		{"quit", cmd("QUIT") + cmd("PING"), []string{"+OK\r\n"}},
		{"tracking resp2 needs redirect", cmd("CLIENT", "TRACKING", "ON"),
			[]string{"-ERR tracking over RESP2 needs REDIRECT <client-id> of a connection subscribed to __redis__:invalidate (or HELLO 3 for pushes)\r\n"}},
		{"caching needs optin", cmd("HELLO", "3") + cmd("CLIENT", "TRACKING", "ON") + cmd("CLIENT", "CACHING", "YES"), nil},
		{"wait", cmd("WAIT", "1", "0"), []string{":0\r\n"}},
		{"monitor needs the admin role", cmd("MONITOR") + cmd("PING"),
			[]string{"-NOPERM this node grants no admin role, which MONITOR needs\r\n", "+PONG\r\n"}},
		{"flush needs AllowFlush", cmd("FLUSHALL"),
			[]string{"-ERR FLUSHALL is disabled: it deletes every key on every node of the fleet; start the daemon with --redis-allow-flush to allow it (for the admin role)\r\n"}},
		{"conditional writes", cmd("SETNX", "c:k", "1") + cmd("SETNX", "c:k", "2") + cmd("SET", "c:k", "3", "XX", "GET") + cmd("GETDEL", "c:k") + cmd("GETSET", "c:k", "4"),
			[]string{":1\r\n", ":0\r\n", "$1\r\n1\r\n", "$1\r\n3\r\n", "$-1\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := replies(t, runSession(s, []byte(tc.in)))
			if tc.want != nil && fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("replies\n%q\nwant\n%q", got, tc.want)
			}
			if tc.want == nil && len(got) == 0 {
				t.Fatal("no reply")
			}
			if tc.name == "resp3 null" && got[1] != "_\r\n" {
				t.Fatalf("RESP3 null: %q", got[1])
			}
			if tc.name == "reset" && (got[1] != "+RESET\r\n" || got[2] != "$-1\r\n") {
				t.Fatalf("after RESET: %q", got)
			}
			if tc.name == "caching needs optin" && !strings.HasPrefix(got[2], "-ERR CLIENT CACHING YES is only valid") {
				t.Fatalf("CLIENT CACHING: %q", got[2])
			}
		})
	}
}

// TestGetAllocatesNothing: a GET hit, parsed, run and answered, makes no
// heap allocation on the server's command path.
func TestGetAllocatesNothing(t *testing.T) {
	s, st := newTestServer(t)
	value := bytes.Repeat([]byte("x"), 100)
	if _, err := st.Publish(&record.Message{Topic: "key", Key: "k-1", Value: value}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"GET", "key:k-1"},
		{"MGET", "key:k-1", "key:k-2", "key:k-1", "key:k-1", "key:k-1", "key:k-1", "key:k-1", "key:k-1", "key:k-1", "key:k-1"},
	} {
		c := newConn(s, &pipeConn{})
		frame := []byte(cmd(args...))
		run := func() {
			args, n, _, err := codec.Parse(frame, c.args, &s.lim)
			if err != nil || n != len(frame) {
				t.Fatalf("parse: %v", err)
			}
			c.args = args
			c.exec(lookup(args[0]), args)
			c.Out = c.Out[:0]
		}
		run()
		if n := testing.AllocsPerRun(1000, run); n != 0 {
			t.Fatalf("%v allocations per %s, want 0", n, args[0])
		}
	}
}

// BenchmarkCommandGet is the server's path for one GET hit of a 100-byte
// value: parse, dispatch, read the view, write the answer.
func BenchmarkCommandGet(b *testing.B) {
	s, st := newTestServer(b)
	for i := range 10000 {
		if _, err := st.Publish(&record.Message{Topic: "key", Key: "k-" + strconv.Itoa(i), Value: bytes.Repeat([]byte("x"), 100)}); err != nil {
			b.Fatal(err)
		}
	}
	c := newConn(s, &pipeConn{})
	frames := make([][]byte, 10000)
	for i := range frames {
		frames[i] = []byte(cmd("GET", "key:k-"+strconv.Itoa(i)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		f := frames[i%len(frames)]
		args, _, _, _ := codec.Parse(f, c.args, &s.lim)
		c.args = args
		c.exec(lookup(args[0]), args)
		c.Out = c.Out[:0]
	}
}

// BenchmarkPipelinedGets is a pipeline of 16 GETs of 100-byte values,
// random keys among 10,000 (redis-benchmark -P 16 -r 10000), as the
// event loop runs what one read of a connection brought: each command
// parsed, run and answered (a run of GETs loaded ahead first, warmGets).
// An op is the pipeline; cpu-ns/op is the thread's CPU time a GET.
func BenchmarkPipelinedGets(b *testing.B) {
	const keys, depth = 10000, 16
	s, st := newTestServer(b)
	for i := range keys {
		if _, err := st.Publish(&record.Message{Topic: "key", Key: "k-" + strconv.Itoa(i), Value: bytes.Repeat([]byte("x"), 100)}); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pipelines := make([][]byte, 1024)
	for i := range pipelines {
		for range depth {
			pipelines[i] = append(pipelines[i], cmd("GET", "key:k-"+strconv.Itoa(rng.IntN(keys)))...)
		}
	}
	c := newConn(s, &pipeConn{})
	want := depth * len("$100\r\n"+strings.Repeat("x", 100)+"\r\n")
	b.ReportAllocs()
	cpu := testkit.StartThreadCPU()
	n := 0
	for ; b.Loop(); n++ {
		c.start, c.end = 0, copy(c.rbuf, pipelines[n%len(pipelines)])
		if c.process(true) != stepRead || len(c.Out) != want {
			b.Fatalf("%d bytes of answers, want %d: %q", len(c.Out), want, c.Out[:min(len(c.Out), 80)])
		}
		c.Out = c.Out[:0]
	}
	cpu.Report(b, n*depth)
}

// BenchmarkCommandSet is SET through the publish path of the test node
// (the store's Publish; the daemon adds its checks).
func BenchmarkCommandSet(b *testing.B) {
	s, _ := newTestServer(b)
	c := newConn(s, &pipeConn{})
	value := strings.Repeat("x", 100)
	frames := make([][]byte, 10000)
	for i := range frames {
		frames[i] = []byte(cmd("SET", "key:k-"+strconv.Itoa(i), value))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		args, _, _, _ := codec.Parse(frames[i%len(frames)], c.args, &s.lim)
		c.args = args
		c.exec(lookup(args[0]), args)
		c.Out = c.Out[:0]
	}
}

// FuzzSession feeds arbitrary bytes to a connection: the server never
// panics, and everything it writes is whole RESP values.
func FuzzSession(f *testing.F) {
	for _, seed := range []string{
		cmd("PING"),
		cmd("SET", "p:k", "v") + cmd("GET", "p:k") + cmd("HGETALL", "p"),
		cmd("HELLO", "3") + cmd("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "p:") + cmd("SET", "p:k", "w"),
		cmd("SUBSCRIBE", "c") + cmd("PSUBSCRIBE", "p:*") + cmd("UNSUBSCRIBE"),
		cmd("MULTI") + cmd("GET", "a") + cmd("EXEC"),
		cmd("SCAN", "0", "MATCH", "p:*", "COUNT", "1") + cmd("HSCAN", "p", "0"),
		cmd("GETRANGE", "p:k", "-100", "100") + cmd("INFO") + cmd("COMMAND", "DOCS"),
		"*2\r\n$3\r\nGET\r\n$-5\r\n",
		"*99999999\r\n",
		"GET p:k\r\nPING\n",
		"SET p:q \"a \\x41\\\" b\" 'c\\'d'\r\nGET p:q\nECHO a\"b\x00\"\n",
		"\x00\xff*1\r\n$1\r\n",
	} {
		f.Add([]byte(seed))
	}
	s, _ := newTestServer(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		replies(t, runSession(s, in))
	})
}
