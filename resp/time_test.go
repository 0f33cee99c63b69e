package resp

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/store"
)

// newTimeServer is a server over a fresh store, both on the clock ms (Unix
// milliseconds), which the test moves.
func newTimeServer(tb testing.TB, ms *atomic.Int64) *Server {
	tb.Helper()
	clock := func() time.Time { return time.UnixMilli(ms.Load()) }
	opts := store.DefaultOptions(tb.TempDir())
	opts.SegmentSize = 1 << 20
	opts.Flush = store.FlushAsync
	opts.Now = clock
	st, err := store.Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Config{Node: &storeNode{st: st}, MaxValueSize: 64 << 10, MaxFrameSize: 1 << 20, Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = s.Close()
		_ = st.Close()
	})
	return s
}

// TestTimeCommands runs the expiry and schedule commands against an
// injected clock: each step sends commands at a moment and checks the
// answers.
func TestTimeCommands(t *testing.T) {
	const t0 = 1_700_000_000_000
	ms := func(d int64) string { return strconv.FormatInt(t0+d, 10) }
	wireTime := func(d int64) string { return core.FormatMs(t0 + d) }
	type step struct {
		at   int64 // ms after t0
		in   string
		want []string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"SET EX, TTL, PTTL, expiry", []step{
			{0, cmd("SET", "p:k", "v", "EX", "10") + cmd("TTL", "p:k") + cmd("PTTL", "p:k") + cmd("EXPIRETIME", "p:k") + cmd("PEXPIRETIME", "p:k"),
				[]string{"+OK\r\n", ":10\r\n", ":10000\r\n", ":" + strconv.Itoa((t0+10000)/1000) + "\r\n", ":" + ms(10000) + "\r\n"}},
			{9999, cmd("GET", "p:k") + cmd("PTTL", "p:k"), []string{"$1\r\nv\r\n", ":1\r\n"}},
			{10000, cmd("GET", "p:k") + cmd("TTL", "p:k") + cmd("EXISTS", "p:k"), []string{"$-1\r\n", ":-2\r\n", ":0\r\n"}},
		}},
		{"SET PX, PXAT, EXAT, SETEX, PSETEX", []step{
			{0, cmd("SET", "p:a", "1", "PX", "50") + cmd("SET", "p:b", "2", "PXAT", ms(60)) + cmd("SET", "p:c", "3", "EXAT", strconv.Itoa(t0/1000+1)) +
				cmd("SETEX", "p:d", "1", "4") + cmd("PSETEX", "p:e", "70", "5"),
				[]string{"+OK\r\n", "+OK\r\n", "+OK\r\n", "+OK\r\n", "+OK\r\n"}},
			{50, cmd("MGET", "p:a", "p:b", "p:e"), []string{"*3\r\n$-1\r\n$1\r\n2\r\n$1\r\n5\r\n"}},
			{70, cmd("MGET", "p:b", "p:e", "p:c", "p:d"), []string{"*4\r\n$-1\r\n$-1\r\n$1\r\n3\r\n$1\r\n4\r\n"}},
			{1000, cmd("MGET", "p:c", "p:d"), []string{"*2\r\n$-1\r\n$-1\r\n"}},
		}},
		{"bad expiries", []step{
			{0, cmd("SET", "p:k", "v", "EX", "0") + cmd("SET", "p:k", "v", "PX", "-5") + cmd("SET", "p:k", "v", "EX", "x") +
				cmd("SET", "p:k", "v", "EX", "1", "PX", "5") + cmd("SETEX", "p:k", "0", "v") + cmd("SET", "p:k", "v", "NX", "XX") + cmd("GET", "p:k"),
				[]string{"-ERR invalid expire time in 'set' command\r\n", "-ERR invalid expire time in 'set' command\r\n",
					"-ERR value is not an integer or out of range\r\n", "-ERR syntax error\r\n", "-ERR invalid expire time in 'setex' command\r\n",
					"-ERR syntax error\r\n",
					"$-1\r\n"}},
		}},
		{"EXPIRE family, PERSIST, KEEPTTL", []step{
			{0, cmd("SET", "p:k", "v") + cmd("TTL", "p:k") + cmd("EXPIRE", "p:k", "100") + cmd("TTL", "p:k") +
				cmd("EXPIRE", "p:k", "200", "NX") + cmd("EXPIRE", "p:k", "50", "GT") + cmd("PEXPIRE", "p:k", "50000", "LT") + cmd("PTTL", "p:k") +
				cmd("SET", "p:k", "w", "KEEPTTL") + cmd("PTTL", "p:k") + cmd("GET", "p:k") + cmd("EXPIRE", "p:nope", "5"),
				[]string{"+OK\r\n", ":-1\r\n", ":1\r\n", ":100\r\n", ":0\r\n", ":0\r\n", ":1\r\n", ":50000\r\n", "+OK\r\n", ":50000\r\n", "$1\r\nw\r\n", ":0\r\n"}},
			{10000, cmd("PERSIST", "p:k") + cmd("TTL", "p:k") + cmd("PERSIST", "p:k") + cmd("PEXPIREAT", "p:k", ms(20000)) + cmd("PTTL", "p:k"),
				[]string{":1\r\n", ":-1\r\n", ":0\r\n", ":1\r\n", ":10000\r\n"}},
			{20000, cmd("GET", "p:k"), []string{"$-1\r\n"}},
			{20001, cmd("SET", "p:j", "v") + cmd("EXPIREAT", "p:j", "1") + cmd("GET", "p:j") + cmd("EXPIRE", "p:j", "5"),
				[]string{"+OK\r\n", ":1\r\n", "$-1\r\n", ":0\r\n"}},
			{20002, cmd("SET", "p:o", "v") + cmd("EXPIRE", "p:o", "5", "NX", "GT") + cmd("EXPIRE", "p:o", "5", "GT", "LT") +
				cmd("PEXPIRE", "p:o", "5", "XX", "NX") + cmd("EXPIRE", "p:o", "5", "KEEP") + cmd("TTL", "p:o"),
				[]string{"+OK\r\n", "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
					"-ERR GT and LT options at the same time are not compatible\r\n",
					"-ERR NX and XX, GT or LT options at the same time are not compatible\r\n", "-ERR Unsupported option KEEP\r\n", ":-1\r\n"}},
		}},
		{"EFFECTIVEAT, CACHECAST.PENDING, CACHECAST.CANCEL", []step{
			{0, cmd("SET", "p:sku", "regular") + cmd("SET", "p:sku", "sale", "EFFECTIVEAT", ms(1000), "PXAT", ms(3000)) +
				cmd("SET", "p:sku", "later", "EFFECTIVEAT", ms(5000)) + cmd("GET", "p:sku") + cmd("CACHECAST.PENDING", "p:sku"),
				[]string{"+OK\r\n", "+OK\r\n", "+OK\r\n", "$7\r\nregular\r\n",
					"*2\r\n*2\r\n:" + ms(1000) + "\r\n$4\r\nsale\r\n*2\r\n:" + ms(5000) + "\r\n$5\r\nlater\r\n"}},
			{500, cmd("SET", "p:sku", "published-later-for-now") + cmd("CACHECAST.CANCEL", "p:sku", "+"+ms(1000)) + cmd("CACHECAST.CANCEL", "p:sku", "0"+ms(1000)) +
				cmd("CACHECAST.CANCEL", "p:sku", ms(5000)) + cmd("CACHECAST.CANCEL", "p:sku", ms(4000)) + cmd("CACHECAST.PENDING", "p:sku"),
				[]string{"+OK\r\n", "-ERR value is not an integer or out of range\r\n", "-ERR value is not an integer or out of range\r\n",
					":1\r\n", ":0\r\n", "*1\r\n*2\r\n:" + ms(1000) + "\r\n$4\r\nsale\r\n"}},
			{1000, cmd("GET", "p:sku") + cmd("PTTL", "p:sku"), []string{"$4\r\nsale\r\n", ":2000\r\n"}},
			{3000, cmd("GET", "p:sku"), []string{"$-1\r\n"}},
			{5000, cmd("GET", "p:sku") + cmd("CACHECAST.CANCEL", "p:sku", ms(1000)), []string{"$-1\r\n", ":0\r\n"}},
			{5001, cmd("SET", "p:x", "v", "EFFECTIVEAT", ms(6000), "PXAT", ms(6000)) + cmd("SET", "p:x", "v", "EFFECTIVEAT", "0") +
				cmd("SET", "p:x", "v", "EFFECTIVEAT", ms(5001)),
				[]string{"-ERR bad_request: the expiry " + wireTime(6000) + " is not after effective_at " + wireTime(6000) + "\r\n",
					"-ERR syntax error: EFFECTIVEAT takes one Unix time in milliseconds, after 1970\r\n",
					"-ERR bad_request: effective_at " + wireTime(5001) + " is not ahead of this node's clock (" + wireTime(5001) + "); write without it for now\r\n"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var clock atomic.Int64
			s := newTimeServer(t, &clock)
			for i, st := range tc.steps {
				clock.Store(t0 + st.at)
				got := replies(t, runSession(s, []byte(st.in)))
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", st.want) {
					t.Fatalf("step %d (+%dms): replies\n%q\nwant\n%q", i, st.at, got, st.want)
				}
			}
		})
	}
}
