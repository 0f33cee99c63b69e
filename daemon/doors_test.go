package daemon

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDoorsAgree: the same operation refused through the HTTP API and
// through the Redis door is refused by the same rule (package command),
// with the same code and, where the door adds nothing of its own, the
// same message: the HTTP error object's, and the Redis error "ERR code:
// message". Where Redis has its own words (a counter's value that is no
// number) or its own answer (a cancel of nothing: 0), the door gives
// those for the same refusal.
func TestDoorsAgree(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	rc := goRedis(t, td, 2)
	ctx := context.Background()
	ms := func(d time.Duration) string { return strconv.FormatInt(time.Now().Add(d).UnixMilli(), 10) }
	long := strings.Repeat("k", 1025)
	ahead, past := ms(time.Hour), ms(-time.Hour)
	if err := rc.Set(ctx, "d:n", "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		http  func() resp
		redis []any
		code  string
		// upTo cuts both messages where they name the clock ("": whole).
		upTo string
		// redisSays is the Redis door's own answer ("": ERR code: the
		// HTTP message).
		redisSays string
	}{
		{name: "key too long", code: "invalid_name",
			http:  func() resp { return td.do("PUT", "/v1/topics/d/keys/"+long, strings.NewReader("v")) },
			redis: []any{"SET", "d:" + long, "v"}},
		{name: "expiry not after the effective time", code: "bad_request",
			http: func() resp {
				return td.do("PUT", "/v1/topics/d/keys/k", strings.NewReader("v"), "Cachecast-Expires", ahead, "Cachecast-Effective-At", ahead)
			},
			redis: []any{"SET", "d:k", "v", "EFFECTIVEAT", ahead, "PXAT", ahead}},
		{name: "effective time past", code: "bad_request", upTo: " is not ahead",
			http: func() resp {
				return td.do("PUT", "/v1/topics/d/keys/k", strings.NewReader("v"), "Cachecast-Effective-At", past)
			},
			redis: []any{"SET", "d:k", "v", "EFFECTIVEAT", past}},
		{name: "cancel of nothing pending", code: "not_pending", redisSays: "0",
			http:  func() resp { return td.do("DELETE", "/v1/topics/d/pending/k?effective_at="+ahead, nil) },
			redis: []any{"CACHECAST.CANCEL", "d:k", ahead}},
		{name: "counter of no number", code: "conflict", redisSays: "ERR value is not an integer or out of range",
			http:  func() resp { return td.do("POST", "/v1/topics/d/counters/n", nil) },
			redis: []any{"INCR", "d:n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.http()
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Code != tt.code {
				t.Fatalf("HTTP: %d %s; want the code %s", r.status, r.body, tt.code)
			}
			res, err := rc.Do(ctx, tt.redis...).Result()
			got := ""
			switch {
			case err != nil:
				got = err.Error()
			default:
				got = strconv.FormatInt(res.(int64), 10)
			}
			want := tt.redisSays
			if want == "" {
				want = "ERR " + tt.code + ": " + e.Error.Message
			}
			if tt.upTo != "" {
				got, _, _ = strings.Cut(got, tt.upTo)
				want, _, _ = strings.Cut(want, tt.upTo)
			}
			if got != want {
				t.Fatalf("Redis %q: %q\nwant       %q (the HTTP API's refusal: %s)", tt.redis[0], got, want, r.body)
			}
		})
	}
}
