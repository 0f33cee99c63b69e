package daemon

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// TestTopicsHideInternal: GET /v1/topics lists the users' topics; the
// daemon's internal ones ('$') only with internal=1.
func TestTopicsHideInternal(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	td.put("prices", "sku-1", "12.50")
	for _, topic := range []string{"$groups", "$offsets", "$dlq/orders/billing"} {
		if _, err := td.d.store.Publish(&record.Message{Topic: topic, Key: "k", Value: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(query string) []string {
		t.Helper()
		r := td.do("GET", "/v1/topics"+query, nil)
		var out struct{ Topics []struct{ Name string } }
		if err := json.Unmarshal(r.body, &out); r.status != 200 || err != nil {
			t.Fatalf("GET /v1/topics%s: %d %s", query, r.status, r.body)
		}
		var ns []string
		for _, tp := range out.Topics {
			ns = append(ns, tp.Name)
		}
		return ns
	}
	all := []string{"$dlq/orders/billing", "$groups", "$offsets", "prices"}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"prices"}},
		{"?internal=0", []string{"prices"}},
		{"?internal=1", all},
		{"?internal=true", all},
	} {
		if got := names(tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("GET /v1/topics%s: %q, want %q", tc.query, got, tc.want)
		}
	}
	if r := td.do("GET", "/v1/topics?internal=yes", nil); r.status != 400 || r.errCode() != wire.CodeBadRequest {
		t.Errorf("internal=yes: %d %s, want 400 bad_request", r.status, r.body)
	}
}
