package resp

import (
	"fmt"
	"strings"
	"testing"
)

// While the node catches up with its peers, the reads of the view answer
// -LOADING (before MULTI queues them, as Redis does), INFO says loading:1
// with the lag, and what is not a read (PING, SET, INFO) is served; once
// it has caught up the reads are served again.
func TestLoadingWhileCatchingUp(t *testing.T) {
	s, _ := newTestServer(t)
	node := s.node.(*storeNode)
	runSession(s, []byte(cmd("SET", "p:k", "v")))
	node.loading.Store(true)
	const loading = "-LOADING this node is catching up with the cluster: 7 records behind what its peers held when it joined; it serves reads once it holds it too\r\n"
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"get", cmd("GET", "p:k"), []string{loading}},
		{"mget", cmd("MGET", "p:k", "p:x"), []string{loading}},
		{"hget", cmd("HGET", "p", "k"), []string{loading}},
		{"scan", cmd("SCAN", "0"), []string{loading}},
		{"ping and set", cmd("PING") + cmd("SET", "p:k", "w"), []string{"+PONG\r\n", "+OK\r\n"}},
		{"multi", cmd("MULTI") + cmd("GET", "p:k") + cmd("EXEC"),
			[]string{"+OK\r\n", loading, "-EXECABORT Transaction discarded because of previous errors.\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := replies(t, runSession(s, []byte(tc.in)))
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("replies\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	info := string(runSession(s, []byte(cmd("INFO", "persistence"))))
	if !strings.Contains(info, "loading:1\r\n") || !strings.Contains(info, "cachecast_catch_up_lag_records:7\r\n") {
		t.Fatalf("INFO while catching up:\n%s", info)
	}

	node.loading.Store(false)
	if got := replies(t, runSession(s, []byte(cmd("GET", "p:k")))); len(got) != 1 || got[0] != "$1\r\nw\r\n" {
		t.Fatalf("GET after the catch-up: %q", got)
	}
	if info := string(runSession(s, []byte(cmd("INFO", "persistence")))); !strings.Contains(info, "loading:0\r\n") || strings.Contains(info, "lag_records") {
		t.Fatalf("INFO after the catch-up:\n%s", info)
	}
}

// A node that left its cluster (away) answers every read and write
// -CLUSTERDOWN with the reason, pipelined SETs and MULTI included, before
// it would catch up; PING and INFO are served.
func TestClusterDownWhenAway(t *testing.T) {
	s, _ := newTestServer(t)
	node := s.node.(*storeNode)
	runSession(s, []byte(cmd("SET", "p:k", "v")))
	why := "out of contact with the fleet for 1m0s; restart it with --start-over"
	node.away.Store(&why)
	node.loading.Store(true) // away wins over catching up
	down := "-CLUSTERDOWN " + why + "\r\n"
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"get", cmd("GET", "p:k"), []string{down}},
		{"mget", cmd("MGET", "p:k", "p:x"), []string{down}},
		{"hget", cmd("HGET", "p", "k"), []string{down}},
		{"set", cmd("SET", "p:k", "w"), []string{down}},
		{"pipelined sets", cmd("SET", "p:a", "1") + cmd("SET", "p:b", "2"), []string{down, down}},
		{"del", cmd("DEL", "p:k"), []string{down}},
		{"ping", cmd("PING"), []string{"+PONG\r\n"}},
		{"multi", cmd("MULTI") + cmd("GET", "p:k") + cmd("EXEC"),
			[]string{"+OK\r\n", down, "-EXECABORT Transaction discarded because of previous errors.\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := replies(t, runSession(s, []byte(tc.in)))
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("replies\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	node.away.Store(nil)
	node.loading.Store(false)
	if got := replies(t, runSession(s, []byte(cmd("GET", "p:k")))); len(got) != 1 || got[0] != "$1\r\nv\r\n" {
		t.Fatalf("GET once serving again: %q (the refused writes changed it?)", got)
	}
}
