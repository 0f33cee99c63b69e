package resp

import (
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/resp/codec"
)

// inLoop reports whether the event loop serves the server's connection
// of CLIENT ID id (false: it has a goroutine of its own).
func inLoop(t *testing.T, s *Server, id int64) bool {
	t.Helper()
	c, _ := s.byID(id).(*conn)
	if c == nil {
		t.Fatalf("no connection %d", id)
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.lp != nil
}

// clientID asks a connection its CLIENT ID.
func clientID(t *testing.T, c *client) int64 {
	t.Helper()
	r := c.do("CLIENT", "ID")
	id, err := strconv.ParseInt(strings.TrimPrefix(r, ":"), 10, 64)
	if err != nil {
		t.Fatalf("CLIENT ID = %q", r)
	}
	return id
}

// TestLoopHandsOffMidPipeline: a pipeline of a SET, a GET, a SUBSCRIBE
// and a PING in one write is answered in order, the connection moving
// from the event loop to a goroutine at the SUBSCRIBE with the rest of
// the pipeline; it then gets the messages published to it.
func TestLoopHandsOffMidPipeline(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	c := dial(t, addr)
	id := clientID(t, c)
	if !inLoop(t, s, id) {
		t.Fatal("a plain connection is not served by the event loop")
	}
	var b []byte
	for _, cmd := range [][]string{{"SET", "k:1", "v1"}, {"GET", "k:1"}, {"SUBSCRIBE", "ch"}, {"PING"}} {
		b = codec.AppendArray(b, len(cmd))
		for _, a := range cmd {
			b = codec.AppendBulkString(b, a)
		}
	}
	if _, err := c.nc.Write(b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+OK", "v1", "*3 subscribe ch :1", "*2 pong "} {
		if r, err := c.reply(); err != nil || r != want {
			t.Fatalf("reply %q, %v; want %q", r, err, want)
		}
	}
	if inLoop(t, s, id) {
		t.Fatal("a subscribed connection is still served by the event loop")
	}
	pub := dial(t, addr)
	if r := pub.do("PUBLISH", "ch", "hello"); r != ":1" {
		t.Fatalf("PUBLISH = %q", r)
	}
	if r, err := c.reply(); err != nil || r != "*3 message ch hello" {
		t.Fatalf("message %q, %v", r, err)
	}
}

// TestLoopPushToLoopConnection: a tracking client redirects its
// invalidations to a connection the loop serves (which never
// subscribed): the push moves that connection to a goroutine, and it
// gets the invalidation.
func TestLoopPushToLoopConnection(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	target := dial(t, addr)
	tid := clientID(t, target)
	if !inLoop(t, s, tid) {
		t.Fatal("the target is not served by the event loop")
	}
	trk := dial(t, addr)
	if r := trk.do("CLIENT", "TRACKING", "ON", "REDIRECT", strconv.FormatInt(tid, 10)); r != "+OK" {
		t.Fatalf("CLIENT TRACKING = %q", r)
	}
	if r := trk.do("GET", "k:1"); r != "$-1" {
		t.Fatalf("GET = %q", r)
	}
	w := dial(t, addr)
	if r := w.do("SET", "k:1", "v"); r != "+OK" {
		t.Fatalf("SET = %q", r)
	}
	if r, err := target.reply(); err != nil || r != "*3 message __redis__:invalidate *1 k:1" {
		t.Fatalf("invalidation %q, %v", r, err)
	}
	if inLoop(t, s, tid) {
		t.Fatal("the target is still served by the event loop after a push")
	}
	if r := target.do("PING"); r != "+PONG" {
		t.Fatalf("PING after the hand-off = %q", r)
	}
}

// TestLoopSlowReader: a client that sends GETs of a large value and
// reads nothing leaves the loop when its socket is full and is closed
// after the write timeout; meanwhile the loop serves the others.
func TestLoopSlowReader(t *testing.T) {
	s, _ := limitServer(t, Config{WriteTimeout: 500 * time.Millisecond})
	addr := serveTCP(t, s)
	c := dial(t, addr)
	if r := c.do("SET", "k:big", strings.Repeat("x", 60<<10)); r != "+OK" {
		t.Fatalf("SET = %q", r)
	}
	id := clientID(t, c)
	var b []byte
	for range 200 {
		b = codec.AppendArray(b, 2)
		b = codec.AppendBulkString(b, "GET")
		b = codec.AppendBulkString(b, "k:big")
	}
	go func() {
		for {
			if _, err := c.nc.Write(b); err != nil {
				return
			}
		}
	}()
	testkit.Eventually(t, 10*time.Second, "the slow reader leaves the loop",
		func() bool { return s.byID(id) == nil || !inLoop(t, s, id) })
	other := dial(t, addr)
	for range 100 {
		if r := other.do("PING"); r != "+PONG" {
			t.Fatalf("PING = %q", r)
		}
	}
	testkit.Eventually(t, 20*time.Second, "the slow reader is disconnected",
		func() bool { return s.byID(id) == nil })
}

// TestLoopWaitingWrites: when the node's publish path waits (--flush
// sync, --replication=sync), a write moves its connection to a
// goroutine; reads stay on the loop.
func TestLoopWaitingWrites(t *testing.T) {
	s, n := limitServer(t, Config{})
	n.waits.Store(true)
	addr := serveTCP(t, s)
	r, w := dial(t, addr), dial(t, addr)
	rid, wid := clientID(t, r), clientID(t, w)
	if got := r.do("GET", "k:1"); got != "$-1" {
		t.Fatalf("GET = %q", got)
	}
	if got := w.do("SET", "k:1", "v"); got != "+OK" {
		t.Fatalf("SET = %q", got)
	}
	if !inLoop(t, s, rid) || inLoop(t, s, wid) {
		t.Fatalf("reader in the loop %v (want true), writer %v (want false)", inLoop(t, s, rid), inLoop(t, s, wid))
	}
	if got := r.do("GET", "k:1"); got != "v" {
		t.Fatalf("GET = %q", got)
	}
}

// TestLoopClose: closing the server closes the loop's connections.
func TestLoopClose(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	c := dial(t, addr)
	if r := c.do("PING"); r != "+PONG" {
		t.Fatalf("PING = %q", r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !c.closed() {
		t.Fatal("the connection is open after Close")
	}
	if st := s.Stats(); st.Connections != 0 {
		t.Fatalf("%d connections after Close", st.Connections)
	}
}

// FuzzLoop sends arbitrary bytes over a real socket to a connection the
// event loop serves, cut into writes of sizes drawn from seed, so that
// frames arrive in pieces across the loop's reads (and large inputs
// grow its buffer): the server never panics, everything it answers is
// whole RESP values, and it goes on answering new connections.
func FuzzLoop(f *testing.F) {
	for _, seed := range []string{
		cmd("PING"),
		cmd("SET", "p:k", "v") + cmd("GET", "p:k") + cmd("MGET", "p:k", "p:x", "p:k"),
		cmd("GET", "p:"+strings.Repeat("k", 300)) + cmd("SET", "p:big", strings.Repeat("v", 40<<10)) + cmd("GET", "p:big"),
		cmd("SUBSCRIBE", "c") + cmd("PING") + cmd("UNSUBSCRIBE"),
		cmd("MULTI") + cmd("GET", "a") + cmd("EXEC") + cmd("QUIT") + cmd("PING"),
		"*2\r\n$3\r\nGET\r\n$-5\r\n",
		"*99999999\r\n",
		"*1\r\n$99999999\r\n",
		"GET p:k\r\nPING\n",
	} {
		f.Add([]byte(seed), uint64(len(seed)))
	}
	s, _ := newTestServer(f)
	if s.lp == nil {
		f.Fatal("no event loop on this machine: the fuzz target would test the goroutines' path")
	}
	dir := f.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "redis.sock"))
	if err != nil {
		f.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		nc, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		got := make(chan []byte, 1)
		go func() {
			out, _ := io.ReadAll(nc)
			got <- out
		}()
		rng := rand.New(rand.NewPCG(seed, 0))
		for rest := in; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(1<<(1+rng.IntN(12))))
			if _, err := nc.Write(rest[:n]); err != nil {
				break // the server closed the connection (QUIT, a protocol error)
			}
			rest = rest[n:]
		}
		_ = nc.(*net.UnixConn).CloseWrite()
		replies(t, <-got)
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, cmd("PING")); err != nil {
			t.Fatal(err)
		}
		pong := make([]byte, 7)
		if _, err := io.ReadFull(c, pong); err != nil || string(pong) != "+PONG\r\n" {
			t.Fatalf("after the input, a new connection's PING = %q, %v", pong, err)
		}
	})
}

// TestSecondP: with one P and GOMAXPROCS not set by the user, the loop
// gives the runtime a second; a GOMAXPROCS the user set, or more than
// one P, is left as it is.
func TestSecondP(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	for _, tc := range []struct {
		name      string
		env       string
		procs     int
		wantProcs int
	}{
		{"one P", "", 1, 2},
		{"one P set by the user", "1", 1, 1},
		{"two Ps", "", 2, 2},
		{"three Ps", "", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.env)
			runtime.GOMAXPROCS(tc.procs)
			secondP()
			if got := runtime.GOMAXPROCS(0); got != tc.wantProcs {
				t.Fatalf("GOMAXPROCS = %d, want %d", got, tc.wantProcs)
			}
		})
	}
}
