package resp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// TestTransactions runs MULTI/EXEC sessions: the writes are one batch,
// the reads see the transaction's own earlier writes, the answers come
// in order, and a queueing error, DISCARD and WATCH behave as in Redis.
func TestTransactions(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"writes and own reads",
			cmd("MULTI") + cmd("SET", "t:a", "1") + cmd("GET", "t:a") + cmd("MSET", "t:b", "2", "t:c", "3") +
				cmd("MGET", "t:a", "t:b", "t:x") + cmd("DEL", "t:c", "t:x") + cmd("EXISTS", "t:c") + cmd("EXEC") + cmd("MGET", "t:a", "t:b", "t:c"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n",
				"*6\r\n+OK\r\n$1\r\n1\r\n+OK\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n:1\r\n:0\r\n",
				"*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n"}},
		{"hash writes and reads",
			cmd("MULTI") + cmd("HSET", "h", "f1", "a", "f2", "b") + cmd("HSET", "h", "f1", "c") + cmd("HGET", "h", "f1") +
				cmd("HLEN", "h") + cmd("HDEL", "h", "f2", "f3") + cmd("HKEYS", "h") + cmd("EXEC"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n",
				"*6\r\n:2\r\n:0\r\n$1\r\nc\r\n:2\r\n:1\r\n*1\r\n$2\r\nf1\r\n"}},
		{"expiry in the batch",
			cmd("MULTI") + cmd("SET", "t:e", "v") + cmd("EXPIRE", "t:e", "100") + cmd("TTL", "t:e") + cmd("EXEC") + cmd("TTL", "t:e"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*3\r\n+OK\r\n:1\r\n:100\r\n", ":100\r\n"}},
		{"a command's own error does not stop the others",
			cmd("MULTI") + cmd("SET", "t:f", "1", "EX", "0") + cmd("SET", "t:g", "1") + cmd("EXEC") + cmd("GET", "t:g"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n-ERR invalid expire time in 'set' command\r\n+OK\r\n", "$1\r\n1\r\n"}},
		{"queueing error aborts",
			cmd("MULTI") + cmd("SET", "t:h", "1") + cmd("SET", "t:h") + cmd("EXEC") + cmd("GET", "t:h"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "-ERR wrong number of arguments for 'set' command\r\n",
				"-EXECABORT Transaction discarded because of previous errors.\r\n", "$-1\r\n"}},
		{"discard",
			cmd("MULTI") + cmd("SET", "t:i", "1") + cmd("DISCARD") + cmd("GET", "t:i") + cmd("DISCARD"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "+OK\r\n", "$-1\r\n", "-ERR DISCARD without MULTI\r\n"}},
		{"nested multi",
			cmd("MULTI") + cmd("MULTI") + cmd("SET", "t:j", "1") + cmd("EXEC"),
			[]string{"+OK\r\n", "-ERR MULTI calls can not be nested\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"}},
		{"watch unchanged",
			cmd("SET", "t:w", "1") + cmd("WATCH", "t:w", "t:nope") + cmd("MULTI") + cmd("SET", "t:w", "2") + cmd("EXEC") + cmd("GET", "t:w"),
			[]string{"+OK\r\n", "+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n", "$1\r\n2\r\n"}},
		{"watch changed",
			cmd("WATCH", "t:v") + cmd("SET", "t:v", "1") + cmd("MULTI") + cmd("SET", "t:v", "2") + cmd("EXEC") + cmd("GET", "t:v") +
				cmd("MULTI") + cmd("SET", "t:v", "3") + cmd("EXEC"), // EXEC forgot the watched keys
			[]string{"+OK\r\n", "+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*-1\r\n", "$1\r\n1\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"}},
		{"unwatch and watch inside multi",
			cmd("WATCH", "t:u") + cmd("SET", "t:u", "1") + cmd("UNWATCH") + cmd("MULTI") + cmd("WATCH", "t:u") + cmd("GET", "t:u") + cmd("EXEC"),
			[]string{"+OK\r\n", "+OK\r\n", "+OK\r\n", "+OK\r\n", "-ERR WATCH inside MULTI is not allowed\r\n", "+QUEUED\r\n", "*1\r\n$1\r\n1\r\n"}},
		{"resp3 null array",
			cmd("HELLO", "3") + cmd("WATCH", "t:r") + cmd("SET", "t:r", "1") + cmd("MULTI") + cmd("GET", "t:r") + cmd("EXEC"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			got := replies(t, runSession(s, []byte(tc.in)))
			if tc.want == nil {
				if got[len(got)-1] != "_\r\n" {
					t.Fatalf("EXEC answered %q, want RESP3's null", got[len(got)-1])
				}
				return
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("replies\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestTransactionIsOneBatch: EXEC's writes are one publish whose records
// say they are one batch (batch follow), in the order of the commands.
func TestTransactionIsOneBatch(t *testing.T) {
	s, st := newTestServer(t)
	in := cmd("MULTI") + cmd("SET", "b:a", "1") + cmd("HSET", "b", "c", "3") + cmd("SET", "b:d", "4") + cmd("EXEC")
	if got := replies(t, runSession(s, []byte(in))); got[len(got)-1] != "*3\r\n+OK\r\n:1\r\n+OK\r\n" {
		t.Fatalf("EXEC answered %q", got[len(got)-1])
	}
	var keys []string
	var follow []uint32
	if _, err := st.ReadOrigin(st.Origin(), 1, 10, func(r record.Record) error {
		keys = append(keys, string(r.Key()))
		follow = append(follow, r.BatchFollow())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "a,c,d" || fmt.Sprint(follow) != "[2 1 0]" {
		t.Fatalf("records %v with batch follow %v, want a,c,d with [2 1 0]", keys, follow)
	}
}
