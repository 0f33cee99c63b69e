package resp

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/resp/internal/admin"
)

// adminStoreNode is storeNode with an admin role: granted, or refused
// with deny.
type adminStoreNode struct {
	*storeNode
	deny error
}

func (n *adminStoreNode) AuthorizeAdmin(net.Conn) error { return n.deny }

// adminServer is limitServer's server over a node that grants the admin
// role (deny nil) or refuses it with deny.
func adminServer(t *testing.T, deny error) (*Server, string) {
	t.Helper()
	s, n := limitServer(t, Config{})
	s.node = &adminStoreNode{storeNode: n, deny: deny} // before it serves anyone
	return s, serveTCP(t, s)
}

// TestClientReply: CLIENT REPLY OFF drops every answer until ON (a
// pipelined run of SETs' too), SKIP the next one's only, and neither
// drops the confirmations of the subscription commands nor the effect
// of a command whose answer it drops; RESET turns answers on again. A
// dropped answer shows as the next answer read being a later command's.
func TestClientReply(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	for _, tc := range []struct {
		name string
		cmds [][]string
		want []string // the answers that arrive, in order
	}{
		{"off then on", [][]string{{"CLIENT", "REPLY", "OFF"}, {"SET", "k:1", "a"}, {"GET", "k:1"}, {"PING"}, {"CLIENT", "REPLY", "ON"}, {"GET", "k:1"}},
			[]string{"+OK", "a"}},
		{"skip drops the next answer only", [][]string{{"CLIENT", "REPLY", "SKIP"}, {"SET", "k:2", "b"}, {"GET", "k:2"}, {"PING"}},
			[]string{"b", "+PONG"}},
		{"skip after off does nothing", [][]string{{"CLIENT", "REPLY", "OFF"}, {"CLIENT", "REPLY", "SKIP"}, {"PING"}, {"CLIENT", "REPLY", "ON"}, {"ECHO", "x"}},
			[]string{"+OK", "x"}},
		{"pipelined sets while off", [][]string{{"CLIENT", "REPLY", "OFF"}, {"SET", "k:3", "1"}, {"SET", "k:4", "2"}, {"SET", "k:5", "3"}, {"CLIENT", "REPLY", "ON"}, {"MGET", "k:3", "k:4", "k:5"}},
			[]string{"+OK", "*3 1 2 3"}},
		{"errors and MULTI while off", [][]string{{"CLIENT", "REPLY", "OFF"}, {"NOSUCH"}, {"MULTI"}, {"GET", "k:1"}, {"EXEC"}, {"CLIENT", "REPLY", "ON"}, {"PING"}},
			[]string{"+OK", "+PONG"}},
		{"a wrong mode", [][]string{{"CLIENT", "REPLY", "MAYBE"}, {"CLIENT", "REPLY"}},
			[]string{"-ERR syntax error", "-ERR wrong number of arguments for 'client|reply' command"}},
		{"reset turns answers on", [][]string{{"CLIENT", "REPLY", "OFF"}, {"RESET"}, {"PING"}},
			[]string{"+RESET", "+PONG"}},
		{"subscription confirmations stay", [][]string{{"CLIENT", "REPLY", "OFF"}, {"SUBSCRIBE", "news"}, {"PSUBSCRIBE", "n*"}, {"UNSUBSCRIBE", "news"}, {"PUNSUBSCRIBE", "n*"}, {"PING"}, {"CLIENT", "REPLY", "ON"}},
			[]string{"*3 subscribe news :1", "*3 psubscribe n* :2", "*3 unsubscribe news :1", "*3 punsubscribe n* :0", "+OK"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			for _, cmd := range tc.cmds {
				c.send(cmd...)
			}
			for i, want := range tc.want {
				if got, err := c.reply(); err != nil || got != want {
					t.Fatalf("answer %d = %q, %v; want %q", i, got, err, want)
				}
			}
			if got := c.do("ECHO", "end"); got != "end" {
				t.Fatalf("an answer more than %q: %q", tc.want, got)
			}
		})
	}
}

// TestClientReplyKeepsPushes: a subscriber whose answers are off still
// gets its messages, and a RESP3 tracking client its invalidations.
func TestClientReplyKeepsPushes(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	sub, trk, pub := dial(t, addr), dial(t, addr), dial(t, addr)
	sub.send("CLIENT", "REPLY", "OFF")
	if got := sub.do("SUBSCRIBE", "news"); got != "*3 subscribe news :1" {
		t.Fatalf("SUBSCRIBE = %q", got)
	}
	for _, cmd := range [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}, {"GET", "k:9"}, {"CLIENT", "REPLY", "OFF"}} {
		trk.send(cmd...)
	}
	for range 3 {
		if _, err := trk.reply(); err != nil {
			t.Fatal(err)
		}
	}
	trk.send("PING") // answered nothing: its GET is tracked before the SET below
	if got := pub.do("PUBLISH", "news", "hello"); got != ":1" {
		t.Fatalf("PUBLISH = %q", got)
	}
	if got, err := sub.reply(); err != nil || got != "*3 message news hello" {
		t.Fatalf("message %q, %v", got, err)
	}
	if got := pub.do("SET", "k:9", "v"); got != "+OK" {
		t.Fatalf("SET = %q", got)
	}
	if got, err := trk.reply(); err != nil || got != ">2 invalidate *1 k:9" {
		t.Fatalf("invalidation %q, %v", got, err)
	}
}

// TestDebug: DEBUG for the admin role: PROTOCOL's values in both
// protocols, SLEEP (alone, and queued in MULTI), the bound, the
// subcommands not served, and the refusals without the role.
func TestDebug(t *testing.T) {
	_, addr := adminServer(t, nil)
	for _, tc := range []struct {
		name string
		cmds [][]string
		want []string
	}{
		{"protocol, RESP2", [][]string{{"DEBUG", "PROTOCOL", "double"}, {"DEBUG", "PROTOCOL", "bignum"}, {"DEBUG", "PROTOCOL", "true"}, {"DEBUG", "PROTOCOL", "map"}, {"DEBUG", "PROTOCOL", "attrib"}, {"DEBUG", "PROTOCOL", "push"}},
			[]string{"3.141", "1234567999999999999999999999999999999", ":1", "*6 :0 :0 :1 :1 :2 :0", "Some real reply following the attribute", "-ERR RESP2 is not supported by this command"}},
		{"protocol, RESP3", [][]string{{"HELLO", "3"}, {"DEBUG", "PROTOCOL", "double"}, {"DEBUG", "PROTOCOL", "bignum"}, {"DEBUG", "PROTOCOL", "false"}, {"DEBUG", "PROTOCOL", "set"}, {"DEBUG", "PROTOCOL", "null"}, {"DEBUG", "PROTOCOL", "push"}},
			[]string{"", ",3.141", "(1234567999999999999999999999999999999", "#f", "~3", ":0", ":1", ":2", "_", ">2 server-cpu-usage :42", "Some real reply following the push reply"}},
		{"sleep", [][]string{{"DEBUG", "SLEEP", "0.01"}, {"DEBUG", "SLEEP", "nonsense"}, {"DEBUG", "SLEEP", "-3"}, {"DEBUG", "SLEEP", "11"}},
			[]string{"+OK", "+OK", "+OK", "-ERR DEBUG SLEEP is at most 10s here: it holds a connection of a shared node"}},
		{"sleep in MULTI", [][]string{{"MULTI"}, {"SET", "k:1", "v", "PX", "1"}, {"DEBUG", "SLEEP", "0.01"}, {"GET", "k:1"}, {"EXEC"}},
			[]string{"+OK", "+QUEUED", "+QUEUED", "+QUEUED", "*3 +OK +OK v"}},
		{"not served", [][]string{{"DEBUG", "RELOAD"}, {"DEBUG", "SLEEP"}, {"DEBUG", "PROTOCOL", "float"}},
			[]string{"-ERR unknown subcommand or wrong number of arguments for 'RELOAD'. Try DEBUG HELP.",
				"-ERR unknown subcommand or wrong number of arguments for 'SLEEP'. Try DEBUG HELP.",
				"-ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			for _, cmd := range tc.cmds {
				c.send(cmd...)
			}
			for i, want := range tc.want {
				got, err := c.reply()
				if err != nil || want != "" && got != want {
					t.Fatalf("answer %d = %q, %v; want %q", i, got, err, want)
				}
			}
		})
	}
	t.Run("without the admin role", func(t *testing.T) {
		_, addr := adminServer(t, errors.New("NOPERM test: no admin role"))
		c := dial(t, addr)
		if got := c.do("DEBUG", "SLEEP", "0"); !strings.HasPrefix(got, "-ERR NOPERM test") && !strings.HasPrefix(got, "-NOPERM test") {
			t.Fatalf("DEBUG as a non-admin = %q", got)
		}
		s, _ := limitServer(t, Config{})
		c = dial(t, serveTCP(t, s))
		if got := c.do("DEBUG", "PROTOCOL", "string"); got != "-NOPERM this node grants no admin role, which DEBUG needs" {
			t.Fatalf("DEBUG on a node without admins = %q", got)
		}
	})
}

// TestDebugSleepHoldsItsConnectionOnly: while one connection sleeps in
// DEBUG SLEEP (handed from the event loop to a goroutine of its own
// first), the others are served; the server's Close ends the sleep.
func TestDebugSleepHoldsItsConnectionOnly(t *testing.T) {
	s, addr := adminServer(t, nil)
	sleeper, other := dial(t, addr), dial(t, addr)
	id := clientID(t, sleeper)
	start := time.Now()
	sleeper.send("DEBUG", "SLEEP", "10")
	for i := range 20 {
		if got := other.do("SET", "k:"+strconv.Itoa(i), "v"); got != "+OK" {
			t.Fatalf("SET while another connection sleeps = %q", got)
		}
	}
	if got := other.do("PING"); got != "+PONG" {
		t.Fatalf("PING while another connection sleeps = %q", got)
	}
	_ = sleeper.nc.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := sleeper.r.ReadByte(); err == nil {
		t.Fatalf("the sleeper answered after %v, before its 10 s", time.Since(start))
	}
	if inLoop(t, s, id) {
		t.Fatal("the event loop serves a sleeping connection")
	}
	closed := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(closed); d >= admin.MaxDebugSleep {
		t.Fatalf("Close waited %v for the sleep", d)
	}
}

// TestPublishLeavesOutClosedSubscriber: a subscriber that closes its
// connection is not counted by the next PUBLISH, even when the
// subscriber's goroutine has not read the close yet (reapHungUp); each
// round publishes right after the close.
func TestPublishLeavesOutClosedSubscriber(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	pub := dial(t, addr)
	for i := range 50 {
		sub := dial(t, addr)
		if got := sub.do("SUBSCRIBE", "news"); got != "*3 subscribe news :1" {
			t.Fatalf("SUBSCRIBE = %q", got)
		}
		if got := pub.do("PUBLISH", "news", "before"); got != ":1" {
			t.Fatalf("round %d: PUBLISH to a subscriber = %q", i, got)
		}
		_ = sub.nc.Close()
		if got := pub.do("PUBLISH", "news", "after"); got != ":0" {
			t.Fatalf("round %d: PUBLISH right after the subscriber closed = %q", i, got)
		}
	}
	if got := pub.do("PUBSUB", "NUMSUB", "news"); got != "*2 news :0" {
		t.Fatalf("PUBSUB NUMSUB = %q", got)
	}
}

// TestNoloopExpiredOnArrival: a NOLOOP client is told of its own write
// of a value that has expired by the time it is applied (SET PX 1 in a
// transaction that then sleeps, as Redis's tracking unit does), as Redis
// tells it of the lazy expiry; its own write of a live value is still
// held back.
func TestNoloopExpiredOnArrival(t *testing.T) {
	_, addr := adminServer(t, nil)
	c := dial(t, addr)
	for _, cmd := range [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON", "BCAST", "NOLOOP"}, {"SET", "k:2", "live"},
		{"MULTI"}, {"SET", "k:1", "v", "PX", "1"}, {"DEBUG", "SLEEP", "0.01"}, {"EXEC"}} {
		c.send(cmd...)
	}
	// The invalidation may come before EXEC's answer: EXEC's publish
	// lets go of the connection while it waits, and the push is written
	// then.
	answers := []string{"", "+OK", "+OK", "+OK", "+QUEUED", "+QUEUED", "*2 +OK +OK"}
	invalidation := ""
	for len(answers) > 0 || invalidation == "" {
		got, err := c.reply()
		switch {
		case err != nil:
			t.Fatalf("%d answers and the invalidation %q to come: %v", len(answers), invalidation, err)
		case strings.HasPrefix(got, ">2 invalidate "):
			if invalidation != "" || !strings.Contains(got, " k:1") || strings.Contains(got, "k:2") {
				t.Fatalf("invalidation %q after %q; want one, naming k:1 and not k:2", got, invalidation)
			}
			invalidation = got
		case len(answers) == 0 || answers[0] != "" && got != answers[0]:
			t.Fatalf("answer %q; want %q", got, answers)
		default:
			answers = answers[1:]
		}
	}
}

// TestPublishHalfClosedSubscriber: a subscriber that sends a command and
// then closes its side of the connection is not counted by PUBLISH, and
// its command still runs and is answered, as Redis runs what it read
// before the close.
func TestPublishHalfClosedSubscriber(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	sub, pub := dial(t, addr), dial(t, addr)
	sub.do("HELLO", "3")
	if got := sub.do("SUBSCRIBE", "news"); got != ">3 subscribe news :1" {
		t.Fatalf("SUBSCRIBE = %q", got)
	}
	sub.send("SET", "k:h", "v")
	if err := sub.nc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := pub.do("PUBLISH", "news", "x"); got != ":0" {
		t.Fatalf("PUBLISH after the subscriber closed its side = %q", got)
	}
	for {
		got, err := sub.reply()
		if err != nil {
			t.Fatalf("the SET sent before the close was not answered: %v", err)
		}
		if got == "+OK" {
			break
		}
		if got != ">3 message news x" {
			t.Fatalf("unexpected answer %q", got)
		}
	}
	if got := pub.do("GET", "k:h"); got != "v" {
		t.Fatalf("GET of the half-closed subscriber's SET = %q", got)
	}
}

// TestWritesTrackNothing: a tracking client's write commands register
// none of the keys they read (INCR, the GETSET family, SETNX, EXPIRE),
// as Redis remembers the keys of read-only commands only: another
// client's write of such a key sends no invalidation, and neither does
// the command's own write. A GET, and a write queued in MULTI, are the
// controls. A sentinel key read after each tells the first invalidation
// that arrives.
func TestWritesTrackNothing(t *testing.T) {
	s, _ := limitServer(t, Config{})
	addr := serveTCP(t, s)
	for i, tc := range []struct {
		cmds    [][]string // on the tracking client; "w" is the key
		want    []string
		tracked bool
	}{
		{[][]string{{"GET", "w"}}, []string{"_"}, true},
		{[][]string{{"INCR", "w"}}, []string{":1"}, false},
		{[][]string{{"INCRBYFLOAT", "w", "1.5"}}, []string{"1.5"}, false},
		{[][]string{{"HINCRBY", "t", "w", "2"}}, []string{":2"}, false},
		{[][]string{{"GETSET", "w", "v"}}, []string{"_"}, false},
		{[][]string{{"SET", "w", "v", "GET"}}, []string{"_"}, false},
		{[][]string{{"SETNX", "w", "v"}}, []string{":1"}, false},
		{[][]string{{"SET", "w", "v"}, {"GETDEL", "w"}}, []string{"+OK", "v"}, false},
		{[][]string{{"SET", "w", "v"}, {"GETEX", "w"}}, []string{"+OK", "v"}, false},
		{[][]string{{"SET", "w", "v"}, {"EXPIRE", "w", "100"}}, []string{"+OK", ":1"}, false},
		{[][]string{{"MULTI"}, {"INCR", "w"}, {"GET", "x"}, {"EXEC"}}, []string{"+OK", "+QUEUED", "+QUEUED", "*2 :1 _"}, false},
	} {
		t.Run(strings.Join(tc.cmds[len(tc.cmds)-1], " "), func(t *testing.T) {
			trk, pub := dial(t, addr), dial(t, addr)
			key, sentinel := fmt.Sprintf("t:w%d", i), fmt.Sprintf("t:s%d", i)
			for _, cmd := range [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}} {
				trk.send(cmd...)
				if _, err := trk.reply(); err != nil {
					t.Fatal(err)
				}
			}
			for j, cmd := range tc.cmds {
				cmd = slices.Clone(cmd)
				for k, a := range cmd {
					switch {
					case a == "w" && cmd[0] == "HINCRBY":
						cmd[k] = key[2:]
					case a == "w":
						cmd[k] = key
					}
				}
				if got := trk.do(cmd...); got != tc.want[j] {
					t.Fatalf("%q = %q, want %q", cmd, got, tc.want[j])
				}
			}
			if got := trk.do("GET", sentinel); got != "_" {
				t.Fatalf("GET %s = %q", sentinel, got)
			}
			for _, k := range []string{key, sentinel} {
				if got := pub.do("SET", k, "z"); got != "+OK" {
					t.Fatalf("SET %s = %q", k, got)
				}
			}
			// The two SETs' invalidations may come as one message
			// when the second arrives before the first is written.
			want := []string{">2 invalidate *1 " + sentinel}
			if tc.tracked {
				want = []string{">2 invalidate *1 " + key, ">2 invalidate *2 " + key + " " + sentinel}
			}
			if got, err := trk.reply(); err != nil || !slices.Contains(want, got) {
				t.Fatalf("first invalidation %q, %v; want one of %q", got, err, want)
			}
		})
	}
}
