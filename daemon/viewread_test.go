package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
)

// TestViewValuesThroughTheDoors: with --view-file-values, a GET and an
// MGET through the Redis door and a GET through the HTTP fast lane
// answer the values the view keeps in the file only, on one connection
// each that reads them into one buffer it reuses (long values and short
// ones in turn, one past what a connection keeps between reads, and one
// with an expiry), mixed with a value kept on the heap (an empty one).
func TestViewValuesThroughTheDoors(t *testing.T) {
	cfg := testConfig(t)
	cfg.ViewFileValues = true
	td := startDaemon(t, cfg)
	st := td.d.Store()
	lens := []int{100, 1, 70_000, 2_000, 0, 30}
	const keys = 24
	names, values := make([]string, keys+1), make([]string, keys+1)
	msgs := make([]record.Message, 0, keys+1)
	filed := 0
	for i := range keys {
		names[i] = fmt.Sprintf("k%02d", i)
		n := lens[i%len(lens)]
		values[i] = fmt.Sprintf("%02d%s", i, strings.Repeat(string(rune('a'+i)), max(n-2, 0)))[:n]
		if n > 0 {
			filed++ // an empty value stays on the heap
		}
		msgs = append(msgs, record.Message{Topic: "t", Key: names[i], Value: []byte(values[i])})
	}
	names[keys], values[keys] = "timed", "in the file too: it has an expiry"
	msgs = append(msgs, record.Message{Topic: "t", Key: names[keys], Value: []byte(values[keys]),
		ExpiresAt: time.Now().Add(time.Hour).UnixMilli()})
	filed++
	if _, err := st.PublishBatch(msgs); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the values in the file", func() bool { return st.ViewValuesInFile() == filed })

	ctx := context.Background()
	rc := goredis.NewClient(&goredis.Options{Network: "unix", Addr: td.d.RedisSocketPath(), PoolSize: 1,
		DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { rc.Close() })
	lane := dialLane(t, td.d.cfg.Socket)
	served := td.d.lane.Served()
	order := make([]int, 0, 2*(keys+1))
	for round := range 2 {
		for i := range keys + 1 {
			order = append(order, (i*7+round)%(keys+1))
		}
	}
	for _, i := range order {
		if got, err := rc.Get(ctx, "t:"+names[i]).Result(); err != nil || got != values[i] {
			t.Fatalf("Redis GET t:%s = %.20q %v, want %.20q (%d bytes)", names[i], got, err, values[i], len(values[i]))
		}
		lane.send("GET /v1/topics/t/keys/" + names[i] + " HTTP/1.1\r\nHost: cachecast\r\n\r\n")
		if got := lane.answer(); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(got, "\r\n\r\n"+values[i]) {
			t.Fatalf("HTTP GET t/%s = %.60q, want the value %.20q (%d bytes)", names[i], got, values[i], len(values[i]))
		}
	}
	if n := td.d.lane.Served() - served; n != uint64(len(order)) {
		t.Errorf("the fast lane answered %d of the %d HTTP GETs", n, len(order))
	}
	for _, span := range []int{3, keys + 1} { // fewer keys than GetMany's scratch holds first, and more
		for from := 0; from+span <= len(order); from += span {
			args, want := make([]string, span), make([]any, span)
			for j, i := range order[from : from+span] {
				args[j], want[j] = "t:"+names[i], values[i]
			}
			got, err := rc.MGet(ctx, args...).Result()
			if err != nil {
				t.Fatalf("MGET %v: %v", args, err)
			}
			for j := range got {
				if got[j] != want[j] {
					t.Fatalf("MGET of %d keys: %s = %.20q, want %.20q", span, args[j], got[j], want[j])
				}
			}
		}
	}
}
