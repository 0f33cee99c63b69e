package resp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/store/record"
)

// TestCounters runs the counter commands: their answers and errors are
// Redis's, an increment of a key this node holds is a counter increment
// bound to that version, and the first of a key without a value writes
// the value.
func TestCounters(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"incr family",
			cmd("INCR", "c:a") + cmd("INCR", "c:a") + cmd("INCRBY", "c:a", "10") + cmd("DECR", "c:a") + cmd("DECRBY", "c:a", "5") + cmd("GET", "c:a"),
			[]string{":1\r\n", ":2\r\n", ":12\r\n", ":11\r\n", ":6\r\n", "$1\r\n6\r\n"}},
		{"floats",
			cmd("SET", "c:f", "10.5") + cmd("INCRBYFLOAT", "c:f", "0.1") + cmd("INCRBYFLOAT", "c:f", "-5") + cmd("INCR", "c:f") + cmd("INCRBYFLOAT", "c:g", "3"),
			[]string{"+OK\r\n", "$4\r\n10.6\r\n", "$3\r\n5.6\r\n", "-ERR value is not an integer or out of range\r\n", "$1\r\n3\r\n"}},
		{"errors",
			cmd("SET", "c:s", "abc") + cmd("INCR", "c:s") + cmd("INCRBYFLOAT", "c:s", "1") + cmd("INCRBY", "c:s", "x") + cmd("INCRBYFLOAT", "c:s", "nan") +
				cmd("SET", "c:m", "9223372036854775807") + cmd("INCR", "c:m") + cmd("DECRBY", "c:m", "-9223372036854775808") + cmd("SET", "c:z", " 1") + cmd("INCR", "c:z"),
			[]string{"+OK\r\n", "-ERR value is not an integer or out of range\r\n", "-ERR value is not a valid float\r\n",
				"-ERR value is not an integer or out of range\r\n", "-ERR value is not a valid float\r\n", "+OK\r\n",
				"-ERR increment or decrement would overflow\r\n", "-ERR decrement would overflow\r\n", "+OK\r\n", "-ERR value is not an integer or out of range\r\n"}},
		{"hincrby",
			cmd("HINCRBY", "hc", "f", "5") + cmd("HINCRBY", "hc", "f", "-2") + cmd("HGET", "hc", "f") + cmd("HINCRBYFLOAT", "hc", "f", "0.5"),
			[]string{":5\r\n", ":3\r\n", "$1\r\n3\r\n", "$3\r\n3.5\r\n"}},
		{"incr keeps the expiry",
			cmd("SET", "c:e", "1", "EX", "100") + cmd("INCR", "c:e") + cmd("TTL", "c:e"),
			[]string{"+OK\r\n", ":2\r\n", ":100\r\n"}},
		{"in a transaction",
			cmd("SET", "c:t", "5") + cmd("MULTI") + cmd("INCR", "c:t") + cmd("INCRBY", "c:t", "3") + cmd("GET", "c:t") + cmd("SET", "c:u", "1") + cmd("INCR", "c:u") + cmd("EXEC") + cmd("MGET", "c:t", "c:u"),
			[]string{"+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n",
				"*5\r\n:6\r\n:9\r\n$1\r\n9\r\n+OK\r\n:2\r\n", "*2\r\n$1\r\n9\r\n$1\r\n2\r\n"}},
		{"from nothing in a transaction, with an expiry (a rate limiter)",
			cmd("MULTI") + cmd("INCR", "c:r") + cmd("EXPIRE", "c:r", "100") + cmd("INCR", "c:r") + cmd("EXEC") + cmd("GET", "c:r") + cmd("TTL", "c:r") + cmd("INCR", "c:r"),
			[]string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*3\r\n:1\r\n:1\r\n:2\r\n", "$1\r\n2\r\n", ":100\r\n", ":3\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			got := replies(t, runSession(s, []byte(tc.in)))
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("replies\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestCounterRecords: INCR of a key never written, and the next ones of
// what it made, write increments of the key's absence (record version 5,
// without a target version: the genesis); after a DEL, of the absence
// after the tombstone; after a SET, increments bound to that version
// (version 4). The value is never written.
func TestCounterRecords(t *testing.T) {
	s, st := newTestServer(t)
	in := cmd("INCR", "r:k") + cmd("INCR", "r:k") + cmd("INCRBY", "r:k", "5") + cmd("DEL", "r:k") + cmd("INCR", "r:k") + cmd("INCR", "r:k") +
		cmd("SET", "r:k", "10") + cmd("INCR", "r:k")
	if got := replies(t, runSession(s, []byte(in))); fmt.Sprint(got) != fmt.Sprint([]string{":1\r\n", ":2\r\n", ":7\r\n", ":1\r\n", ":1\r\n", ":2\r\n", "+OK\r\n", ":11\r\n"}) {
		t.Fatalf("answers %q", got)
	}
	var recs []record.Record
	if _, err := st.ReadOrigin(st.Origin(), 1, 20, func(r record.Record) error {
		recs = append(recs, r.Clone())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s/v%d/%s", r.Kind(), r.Version(), r.Value()))
	}
	if want := "[counter/v5/1 counter/v5/1 counter/v5/5 tombstone/v1/ counter/v5/1 counter/v5/1 value/v1/10 counter/v4/1]"; fmt.Sprint(got) != want {
		t.Fatalf("records %v, want %s", got, want)
	}
	for i, want := range []record.Stamp{{}, {}, {}, {}, recs[3].Stamp(), recs[3].Stamp(), {}, recs[6].Stamp()} {
		if tg := recs[i].Target(); tg.Origin != want.Origin || tg.Seq != want.Seq || want.Origin != 0 && tg != want {
			t.Errorf("record %d names %+v, want %+v", i, tg, want)
		}
	}
}

// TestCounterExpiryInTransaction: MULTI INCR, EXPIRE of a key without a
// value writes an increment of its absence and an expiry change of its
// revival (record.Genesis), which names that absence (record version 6),
// never the value: increments of other nodes still count.
func TestCounterExpiryInTransaction(t *testing.T) {
	s, st := newTestServer(t)
	in := cmd("MULTI") + cmd("INCR", "x:r") + cmd("EXPIRE", "x:r", "100") + cmd("EXEC")
	if got := replies(t, runSession(s, []byte(in))); fmt.Sprint(got) != fmt.Sprint([]string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n:1\r\n:1\r\n"}) {
		t.Fatalf("answers %q", got)
	}
	var got []string
	if _, err := st.ReadOrigin(st.Origin(), 1, 20, func(r record.Record) error {
		got = append(got, fmt.Sprintf("%s/v%d/%v", r.Kind(), r.Version(), r.Target() == record.Genesis))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := "[counter/v5/false expiry/v6/true]"; fmt.Sprint(got) != want {
		t.Fatalf("records %v, want %s", got, want)
	}
}

// TestCounterOnTransactionsWrite: an increment in MULTI of a key the same
// transaction SET (HSET) or DEL'd counts on that write's version (record
// version 4), or on the absence after that delete (version 5), which the
// store stamps first in the batch: the counters' rule, never a write of
// the sum. Each case writes its key once before the transaction.
func TestCounterOnTransactionsWrite(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		tx        [][]string
		exec      string
		records   string // the transaction's (version 2: a batch): kind/version/value>target (the index of the record it names, - none)
		value     string
	}{
		{"SET then INCR", "a:k", [][]string{{"SET", "a:k", "5"}, {"INCR", "a:k"}, {"INCRBY", "a:k", "2"}, {"GET", "a:k"}},
			"*4\r\n+OK\r\n:6\r\n:8\r\n$1\r\n8\r\n", "[value/v2/5>- counter/v4/1>0 counter/v4/2>0]", "8"},
		{"SET EX then INCRBYFLOAT", "b:k", [][]string{{"SET", "b:k", "1", "EX", "100"}, {"INCRBYFLOAT", "b:k", "0.5"}},
			"*2\r\n+OK\r\n$3\r\n1.5\r\n", "[value/v2/1>- counter/v4/0.5>0]", "1.5"},
		{"DEL then INCR", "c:k", [][]string{{"DEL", "c:k"}, {"INCR", "c:k"}, {"DECR", "c:k"}, {"DECR", "c:k"}},
			"*4\r\n:1\r\n:1\r\n:0\r\n:-1\r\n", "[tombstone/v2/>- counter/v5/1>0 counter/v5/-1>0 counter/v5/-1>0]", "-1"},
		{"HSET then HINCRBY", "d:f", [][]string{{"HSET", "d", "f", "2"}, {"HINCRBY", "d", "f", "3"}},
			"*2\r\n:0\r\n:5\r\n", "[value/v2/2>- counter/v4/3>0]", "5"},
		{"SET, INCR, SET, INCR", "e:k", [][]string{{"SET", "e:k", "1"}, {"INCR", "e:k"}, {"SET", "e:k", "10"}, {"INCR", "e:k"}},
			"*4\r\n+OK\r\n:2\r\n+OK\r\n:11\r\n", "[value/v2/1>- counter/v4/1>0 value/v2/10>- counter/v4/1>2]", "11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st := newTestServer(t)
			in := cmd("SET", tc.key, "100") + cmd("MULTI")
			for _, c := range tc.tx {
				in += cmd(c...)
			}
			got := replies(t, runSession(s, []byte(in+cmd("EXEC"))))
			if len(got) != len(tc.tx)+3 || got[len(got)-1] != tc.exec {
				t.Fatalf("answers %q; want EXEC's %q", got, tc.exec)
			}
			var recs []record.Record
			if _, err := st.ReadOrigin(st.Origin(), 2, 20, func(r record.Record) error {
				recs = append(recs, r.Clone())
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var desc []string
			for _, r := range recs {
				target := "-"
				for j, w := range recs {
					if r.Target() == w.Stamp() {
						target = fmt.Sprint(j)
					}
				}
				desc = append(desc, fmt.Sprintf("%s/v%d/%s>%s", r.Kind(), r.Version(), r.Value(), target))
			}
			if fmt.Sprint(desc) != tc.records {
				t.Errorf("records %v, want %s", desc, tc.records)
			}
			topic, key, _ := strings.Cut(tc.key, ":")
			if e, ok := st.Get(topic, key); !ok || string(e.Value) != tc.value {
				t.Errorf("the store holds %q (%t), want %s", e.Value, ok, tc.value)
			}
		})
	}
}
