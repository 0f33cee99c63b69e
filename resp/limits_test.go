package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/resp/codec"
	"github.com/cachecast/cachecast/store"
)

// serveTCP serves s on a free port of 127.0.0.1 until the test ends.
func serveTCP(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	return ln.Addr().String()
}

// limitServer is a server over a fresh store with cfg's limits.
func limitServer(t *testing.T, cfg Config) (*Server, *storeNode) {
	t.Helper()
	opts := store.DefaultOptions(t.TempDir())
	opts.SegmentSize = 1 << 20
	opts.Flush = store.FlushAsync
	st, err := store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	n := &storeNode{st: st}
	cfg.Node, cfg.MaxValueSize, cfg.MaxFrameSize = n, 64<<10, 1<<20
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = st.Close()
	})
	return s, n
}

// client is a raw connection that sends commands and reads the answers.
type client struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// send writes one command as a RESP array.
func (c *client) send(args ...string) {
	c.t.Helper()
	b := codec.AppendArray(nil, len(args))
	for _, a := range args {
		b = codec.AppendBulkString(b, a)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("send %v: %v", args, err)
	}
}

// reply reads one whole answer and returns it flattened to one line
// ("+OK", "-ERR ...", "*2 $1 a $1 b", ">2 ...").
func (c *client) reply() (string, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	var n int
	switch line[0] {
	case '$':
		if _, err := fmt.Sscan(line[1:], &n); err != nil || n < 0 {
			return line, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	case '*', '>', '%':
		if _, err := fmt.Sscan(line[1:], &n); err != nil || n < 0 {
			return line, nil
		}
		if line[0] == '%' {
			n *= 2
		}
		parts := []string{line[:1] + line[1:]}
		for range n {
			p, err := c.reply()
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, " "), nil
	}
	return line, nil
}

func (c *client) do(args ...string) string {
	c.t.Helper()
	c.send(args...)
	r, err := c.reply()
	if err != nil {
		c.t.Fatalf("%v: %v", args, err)
	}
	return r
}

// closed reports whether the server closed the connection (it reads
// whatever comes first, in at most 20 seconds).
func (c *client) closed() bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := c.r.ReadByte()
	return err == io.EOF
}

// TestConnectionLimits: past --max-connections, or past one peer's
// share of it (all of 127.0.0.1's connections are one peer's), a new
// connection's command is answered Redis's "max number of clients
// reached" and it is closed; the admitted ones are served, and a closed
// one makes room.
func TestConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max, peer int
		want      string
	}{
		{"node", 3, 0, "ERR max number of clients reached (--max-connections 3)"},
		{"peer", 10, 3, "ERR max number of clients reached for address 127.0.0.1 (--max-connections-per-uid 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := limitServer(t, Config{MaxConnections: tc.max, MaxConnectionsPerPeer: tc.peer})
			addr := serveTCP(t, s)
			var open []*client
			for range 3 {
				c := dial(t, addr)
				if r := c.do("PING"); r != "+PONG" {
					t.Fatalf("PING = %q", r)
				}
				open = append(open, c)
			}
			c := dial(t, addr)
			if r := c.do("PING"); r != "-"+tc.want {
				t.Fatalf("PING past the limit = %q, want %q", r, "-"+tc.want)
			}
			if !c.closed() {
				t.Fatal("the refused connection is still open")
			}
			for _, o := range open {
				if r := o.do("PING"); r != "+PONG" {
					t.Fatalf("an admitted connection after the refusal: PING = %q", r)
				}
			}
			open[0].nc.Close()
			testkit.Eventually(t, 10*time.Second, "the closed connection is forgotten", func() bool {
				return s.Stats().Connections == 2
			})
			if r := dial(t, addr).do("PING"); r != "+PONG" {
				t.Fatalf("PING once there is room = %q", r)
			}
			if st := s.Stats(); st.Refused != 1 {
				t.Fatalf("Refused = %d, want 1", st.Refused)
			}
		})
	}
}

// TestIdleTimeout: a connection that sends nothing for IdleTimeout is
// closed; a subscribed one and a tracking one, idle for longer, are not.
func TestIdleTimeout(t *testing.T) {
	s, _ := limitServer(t, Config{IdleTimeout: 300 * time.Millisecond})
	addr := serveTCP(t, s)
	sub := dial(t, addr)
	if r := sub.do("SUBSCRIBE", "prices"); r != "*3 subscribe prices :1" {
		t.Fatalf("SUBSCRIBE = %q", r)
	}
	trk := dial(t, addr)
	if r := trk.do("HELLO", "3"); !strings.HasPrefix(r, "%") {
		t.Fatalf("HELLO 3 = %q", r)
	}
	if r := trk.do("CLIENT", "TRACKING", "ON"); r != "+OK" {
		t.Fatalf("CLIENT TRACKING ON = %q", r)
	}
	idle := dial(t, addr)
	// Its idle time starts when the server reads the PING, after this
	// (taken after the answer, a slow read of it made the wait look short).
	began := time.Now()
	if r := idle.do("PING"); r != "+PONG" {
		t.Fatalf("PING = %q", r)
	}
	if !idle.closed() {
		t.Fatal("the idle connection was not closed")
	}
	if d := time.Since(began); d < 300*time.Millisecond {
		t.Fatalf("the idle connection was closed after %s, before the timeout", d)
	}
	if r := sub.do("PING"); r != "*2 pong " {
		t.Fatalf("the subscribed connection, idle longer: PING = %q", r)
	}
	if r := trk.do("PING"); r != "+PONG" {
		t.Fatalf("the tracking connection, idle longer: PING = %q", r)
	}
	if st := s.Stats(); st.IdleClosed != 1 {
		t.Fatalf("IdleClosed = %d, want 1", st.IdleClosed)
	}
}

// TestTrackingMaxKeys: a tracking client reads 1,000 keys with room for
// 20: the server remembers at most 20 for it, and every key it read is
// either still tracked or was sent to it as invalidated, so nothing it
// may cache goes untold.
func TestTrackingMaxKeys(t *testing.T) {
	const limit, reads = 20, 1000
	s, _ := limitServer(t, Config{TrackingMaxKeys: limit})
	addr := serveTCP(t, s)
	c := dial(t, addr)
	c.do("HELLO", "3")
	if r := c.do("CLIENT", "TRACKING", "ON"); r != "+OK" {
		t.Fatalf("CLIENT TRACKING ON = %q", r)
	}
	told := map[string]bool{}
	for i := range reads {
		c.send("GET", fmt.Sprintf("k:%d", i))
		for {
			r, err := c.reply()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(r, ">2 invalidate ") {
				break // the answer to the GET
			}
			for _, k := range strings.Fields(r)[3:] {
				told[k] = true
			}
		}
	}
	tracked := s.hub.TrackedKeys()
	if len(tracked) > limit {
		t.Fatalf("%d keys tracked for the client, more than its %d", len(tracked), limit)
	}
	for _, k := range tracked {
		told[k] = true
	}
	// The last evictions may still be on their way.
	for len(told) < reads {
		r, err := c.reply()
		if err != nil {
			t.Fatalf("%d of %d keys accounted for: %v", len(told), reads, err)
		}
		for _, k := range strings.Fields(r)[3:] {
			told[k] = true
		}
	}
	if ev := s.Stats().TrackingEvicted; ev < reads-limit {
		t.Fatalf("TrackingEvicted = %d, want at least %d", ev, reads-limit)
	}
}

// TestReadRoleAtCommandTime: after RolesChanged, a connection that may no
// longer read is answered NOPERM-style at its next command and closed,
// and a subscribed one is closed at once.
func TestReadRoleAtCommandTime(t *testing.T) {
	s, n := limitServer(t, Config{})
	addr := serveTCP(t, s)
	reader := dial(t, addr)
	if r := reader.do("GET", "k"); r != "$-1" {
		t.Fatalf("GET = %q", r)
	}
	sub := dial(t, addr)
	sub.do("SUBSCRIBE", "prices")
	n.noReads.Store(true)
	s.RolesChanged()
	if !sub.closed() {
		t.Fatal("the subscribed connection stayed open without the read role")
	}
	if r := reader.do("GET", "k"); r != "-ERR "+errNoReads.Error() {
		t.Fatalf("GET without the read role = %q", r)
	}
	if !reader.closed() {
		t.Fatal("the refused connection stayed open")
	}
	if r := dial(t, addr).do("PING"); r != "-ERR "+errNoReads.Error() {
		t.Fatalf("a new connection's PING = %q", r)
	}
	n.noReads.Store(false)
	s.RolesChanged()
	if r := dial(t, addr).do("PING"); r != "+PONG" {
		t.Fatalf("PING with the role back = %q", r)
	}
}

// TestMultiQueueBound: the commands a MULTI queues are held until EXEC,
// and EXEC publishes their writes as one batch, which --max-body-size
// (MaxFrameSize) bounds: past it the queueing is refused, the queue
// dropped and EXEC aborts, so that one connection cannot hold memory
// without bound (300,000 queued SETs of 1 KB took a daemon from 117 MB
// to 466 MB). The connection goes on serving.
func TestMultiQueueBound(t *testing.T) {
	s, _ := limitServer(t, Config{})
	c := dial(t, serveTCP(t, s))
	if r := c.do("MULTI"); r != "+OK" {
		t.Fatalf("MULTI = %q", r)
	}
	val := strings.Repeat("v", 60<<10)
	refused := ""
	for i := range 40 {
		if r := c.do("SET", "m:k"+strconv.Itoa(i), val); r != "+QUEUED" {
			refused = r
			break
		}
	}
	if !strings.HasPrefix(refused, "-ERR") || !strings.Contains(refused, "--max-body-size") {
		t.Fatalf("queueing past --max-body-size answered %q, want an ERR naming --max-body-size", refused)
	}
	if r := c.do("SET", "m:after", "v"); r != "+QUEUED" {
		t.Fatalf("a small SET after the refusal = %q, want +QUEUED (EXEC aborts anyway, as in Redis)", r)
	}
	if r := c.do("EXEC"); r != "-EXECABORT Transaction discarded because of previous errors." {
		t.Fatalf("EXEC = %q", r)
	}
	if r := c.do("EXISTS", "m:k0", "m:after"); r != ":0" {
		t.Fatalf("EXISTS after the aborted EXEC = %q, want :0", r)
	}
	if r := c.do("PING"); r != "+PONG" {
		t.Fatalf("PING = %q", r)
	}
}
