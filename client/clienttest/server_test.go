package clienttest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestTimeRefused: a request that asks for an expiry, a schedule or a
// cancel, by a POSTed message's field or by a header, is refused with
// 400 bad_request saying the double does not serve time, and nothing is
// stored (it is never taken as a plain value).
func TestTimeRefused(t *testing.T) {
	s := NewServer(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.Socket)
	}}}
	tests := []struct {
		name, method, path, body, header, want string
	}{
		{"ttl_ms", "POST", "/v1/topics/t/messages", `{"key":"k","value":"v","ttl_ms":1000}`, "", `"ttl_ms"`},
		{"expires_at", "POST", "/v1/topics/t/messages", `{"key":"k","value":"v","expires_at":"2030-01-01T00:00:00Z"}`, "", `"expires_at"`},
		{"effective_at", "POST", "/v1/topics/t/messages", `{"key":"k","value":"v","effective_at":1893456000000}`, "", `"effective_at"`},
		{"cancel", "POST", "/v1/topics/t/messages", `{"key":"k","cancel":true,"effective_at":1893456000000}`, "", `"effective_at"`},
		{"cancel alone", "POST", "/v1/topics/t/messages", `{"key":"k","value":"v","cancel":false}`, "", `"cancel"`},
		{"POST Cachecast-Expires", "POST", "/v1/topics/t/messages", `{"key":"k","value":"v"}`, "Cachecast-Expires", "Cachecast-Expires"},
		{"PUT Cachecast-Expires", "PUT", "/v1/topics/t/keys/k", "v", "Cachecast-Expires", "Cachecast-Expires"},
		{"PUT Cachecast-Effective-At", "PUT", "/v1/topics/t/keys/k", "v", "Cachecast-Effective-At", "Cachecast-Effective-At"},
		{"DELETE Cachecast-Effective-At", "DELETE", "/v1/topics/t/keys/k", "", "Cachecast-Effective-At", "Cachecast-Effective-At"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://x"+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set(tt.header, "2030-01-01T00:00:00Z")
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != 400 || e.Error.Code != "bad_request" ||
				!strings.Contains(e.Error.Message, tt.want) || !strings.Contains(e.Error.Message, "does not serve expiries or schedules") {
				t.Fatalf("%d %s; want 400 bad_request naming %s", resp.StatusCode, body, tt.want)
			}
			if n := s.Messages("t"); n != 0 {
				t.Fatalf("topic t holds %d messages after a refused request", n)
			}
		})
	}
	// The pending routes are not served.
	resp, err := hc.Get("http://x/v1/topics/t/pending")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("GET pending: %d, want 404", resp.StatusCode)
	}
}
