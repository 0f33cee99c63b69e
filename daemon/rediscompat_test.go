package daemon

import (
	"io"
	"strings"
	"testing"
)

// exchange sends cmds to both servers in one write each and reads n
// replies off each (fewer or more than cmds: CLIENT REPLY drops
// answers, DEBUG PROTOCOL push and attrib answer two frames in RESP3),
// then compares them byte for byte.
func (p *redisPair) exchange(n int, cmds ...[]string) {
	p.t.Helper()
	wire := encodeCommands(cmds)
	var got [2][]string
	for i, c := range p.conns {
		if _, err := io.WriteString(c, wire); err != nil {
			p.t.Fatalf("%q to %s: %v", cmds, p.name(i), err)
		}
		for range n {
			v, err := rawReply(p.rs[i])
			if err != nil {
				p.t.Fatalf("%q: reading %s's reply: %v", cmds, p.name(i), err)
			}
			got[i] = append(got[i], v)
		}
	}
	if strings.Join(got[0], "") != strings.Join(got[1], "") {
		p.t.Errorf("%q: cachecast %q, redis-server %q", cmds, got[0], got[1])
	}
}

// TestRedisReplyDebugPubsubAgainstRedisServer sends CLIENT REPLY's
// modes, DEBUG PROTOCOL's types and DEBUG SLEEP, and PUBSUB's
// subcommands (with subscribers on another connection) to a daemon's
// Redis door (the Unix socket's root caller has the admin role) and to
// a real redis-server (--enable-debug-command yes), over RESP2 and RESP3,
// and compares the replies byte for byte.
func TestRedisReplyDebugPubsubAgainstRedisServer(t *testing.T) {
	t.Parallel()
	eachProtocol(t, []string{"--enable-debug-command", "yes"}, func(t *testing.T, proto string, p *redisPair, pair func() *redisPair) {
		k := "c" + proto + ":k"
		// CLIENT REPLY: the answers that arrive.
		p.exchange(2, []string{"CLIENT", "REPLY", "OFF"}, []string{"SET", k, "1"}, []string{"GET", k},
			[]string{"CLIENT", "REPLY", "SKIP"}, []string{"PING"}, []string{"CLIENT", "REPLY", "ON"}, []string{"GET", k})
		p.exchange(2, []string{"CLIENT", "REPLY", "SKIP"}, []string{"SET", k, "2"}, []string{"GET", k}, []string{"ECHO", "x"})
		p.exchange(2, []string{"CLIENT", "REPLY", "OFF"}, []string{"NOSUCH"}, []string{"MULTI"}, []string{"GET", k},
			[]string{"EXEC"}, []string{"CLIENT", "REPLY", "ON"}, []string{"CLIENT", "REPLY", "ON"})
		p.same("CLIENT", "REPLY", "MAYBE")
		p.same("CLIENT", "REPLY")
		p.same("CLIENT", "REPLY", "ON", "OFF")
		// DEBUG PROTOCOL and SLEEP.
		for _, typ := range []string{"string", "integer", "double", "bignum", "null", "array", "set", "map", "verbatim", "true", "false", "float", "PUSH"} {
			n := 1
			if proto == "3" && typ == "PUSH" {
				n = 2
			}
			p.exchange(n, []string{"DEBUG", "PROTOCOL", typ})
		}
		p.exchange(map[string]int{"2": 1, "3": 2}[proto], []string{"DEBUG", "PROTOCOL", "attrib"})
		for _, arg := range []string{"0", "0.001", "abc", "-1", ".002x"} {
			p.same("DEBUG", "SLEEP", arg)
		}
		p.same("DEBUG", "SLEEP")
		p.same("DEBUG", "NOSUCH", "x")
		p.same("DEBUG")
		p.exchange(5, []string{"MULTI"}, []string{"SET", k, "v", "PX", "1"}, []string{"DEBUG", "SLEEP", "0.01"}, []string{"GET", k}, []string{"EXEC"})
		// PUBSUB, with subscribers on another connection.
		sub := pair()
		ch := "news" + proto
		sub.same("SUBSCRIBE", ch)
		sub.same("PSUBSCRIBE", "news*")
		sub.same("PSUBSCRIBE", "x*")
		for _, args := range [][]string{{"NUMSUB", ch, "other"}, {"NUMSUB"}, {"NUMPAT"}, {"CHANNELS"}, {"CHANNELS", "news*"},
			{"CHANNELS", "y*"}, {"SHARDCHANNELS"}, {"SHARDNUMSUB", ch}, {"NOSUCH"}, {"CHANNELS", "a", "b"}, {"NUMPAT", "x"}} {
			p.same(append([]string{"PUBSUB"}, args...)...)
		}
		p.same("PUBLISH", ch, "hello")
		sub.exchange(2) // the message, by channel and by pattern
		sub.exchange(2, []string{"UNSUBSCRIBE"}, []string{"PUNSUBSCRIBE", "x*"})
		p.same("PUBSUB", "NUMSUB", ch)
		p.same("PUBSUB", "NUMPAT")
		sub.same("PUNSUBSCRIBE")
	})
}
