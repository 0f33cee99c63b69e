package daemon

import (
	"context"
	"testing"
)

// TestHTTPCounter: POST .../counters/{key} adds by the counters' rule,
// the Redis door and HTTP alike: the value written first, increments
// after, Cachecast-Count the value after each, a float by=, and 409 on a
// value that is no number or a bad by=.
func TestHTTPCounter(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	for _, tc := range []struct {
		path   string
		status int
		count  string
	}{
		{"/v1/topics/stats/counters/hits", 200, "1"},
		{"/v1/topics/stats/counters/hits?by=10", 200, "11"},
		{"/v1/topics/stats/counters/hits?by=-2", 200, "9"},
		{"/v1/topics/stats/counters/hits?by=0.5", 200, "9.5"},
		{"/v1/topics/stats/counters/hits?by=1", 409, ""},
		{"/v1/topics/stats/counters/hits?by=x", 400, ""},
	} {
		r := td.do("POST", tc.path, nil)
		if r.status != tc.status || r.header.Get("Cachecast-Count") != tc.count {
			t.Fatalf("POST %s: %d, Cachecast-Count %q (%s); want %d and %q", tc.path, r.status, r.header.Get("Cachecast-Count"), r.body, tc.status, tc.count)
		}
	}
	if v := must(goRedis(t, td, 2).IncrByFloat(context.Background(), "stats:hits", 1).Result()); v != 10.5 {
		t.Fatalf("INCRBYFLOAT after the HTTP increments: %v, want 10.5", v)
	}
	td.put("stats", "name", "abc")
	if r := td.do("POST", "/v1/topics/stats/counters/name", nil); r.status != 409 {
		t.Fatalf("POST on a value that is no number: %d %s", r.status, r.body)
	}
}
