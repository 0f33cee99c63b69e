package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cachecast/cachecast/wire"
)

// routed is what the mux did with a request: the route and its
// wildcards, or its refusal and the Allow header.
type routed struct {
	name  string
	p     params
	code  string
	allow string
}

func route1(t testing.TB, m *mux, method, target string) routed {
	t.Helper()
	var got routed
	m.serve = func(w http.ResponseWriter, r *http.Request, rt *route, p params) { got = routed{name: rt.name, p: p} }
	m.fail = func(w http.ResponseWriter, r *http.Request, e *wire.Error) {
		got = routed{code: e.Code, allow: w.Header().Get("Allow")}
	}
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	if rec.Code == http.StatusMovedPermanently || rec.Code == http.StatusTemporaryRedirect || rec.Code == http.StatusPermanentRedirect {
		t.Fatalf("%s %s: redirected (%d) to %s", method, target, rec.Code, rec.Header().Get("Location"))
	}
	return got
}

func testMux() *mux {
	a := &Server{}
	return newMux(a.routes(), nil, nil)
}

// TestRouting is the route table through the mux: each route with its
// wildcards unescaped, keys holding slashes (escaped or not, doubled, or
// "." segments: never a redirect), and the 404 and 405 answers.
func TestRouting(t *testing.T) {
	m := testMux()
	for _, tc := range []struct {
		method, target string
		want           routed
	}{
		{"GET", "/healthz", routed{name: "healthz"}},
		{"HEAD", "/healthz", routed{name: "healthz"}},
		{"GET", "/v1/status", routed{name: "status"}},
		{"POST", "/v1/repair/accept", routed{name: "repair_accept"}},
		{"GET", "/v1/backup", routed{name: "backup"}},
		{"GET", "/v1/topics/prices/keys/sku-1", routed{name: "get", p: params{topic: "prices", key: "sku-1"}}},
		{"HEAD", "/v1/topics/prices/keys/sku-1", routed{name: "get", p: params{topic: "prices", key: "sku-1"}}},
		{"PUT", "/v1/topics/prices/keys/a/b", routed{name: "put", p: params{topic: "prices", key: "a/b"}}},
		{"PUT", "/v1/topics/prices/keys/a%2Fb", routed{name: "put", p: params{topic: "prices", key: "a/b"}}},
		{"PUT", "/v1/topics/prices/keys/a//b", routed{name: "put", p: params{topic: "prices", key: "a//b"}}},
		{"PUT", "/v1/topics/prices/keys/a/./b/../c", routed{name: "put", p: params{topic: "prices", key: "a/./b/../c"}}},
		{"GET", "/v1/topics/prices/keys/%2E%2E", routed{name: "get", p: params{topic: "prices", key: ".."}}},
		{"GET", "/v1/topics/prices/keys/..", routed{name: "get", p: params{topic: "prices", key: ".."}}},
		{"GET", "/v1/topics/pr%20ices/keys/k%20y", routed{name: "get", p: params{topic: "pr ices", key: "k y"}}},
		{"DELETE", "/v1/topics/t/keys/k", routed{name: "delete", p: params{topic: "t", key: "k"}}},
		{"GET", "/v1/topics/t/keys/", routed{name: "get", p: params{topic: "t"}}},
		{"GET", "/v1/topics/t/keys", routed{name: "keys", p: params{topic: "t"}}},
		{"POST", "/v1/topics/t/messages", routed{name: "messages", p: params{topic: "t"}}},
		{"GET", "/v1/topics/t/subscribe", routed{name: "subscribe", p: params{topic: "t"}}},
		{"POST", "/v1/topics/t/groups/g/ack", routed{name: "group_ack", p: params{topic: "t", name: "g"}}},
		{"POST", "/v1/topics/t/groups/g/dlq/replay", routed{name: "dlq_replay", p: params{topic: "t", name: "g"}}},
		{"GET", "/v1/topics/t/groups/g/dlq/replay", routed{name: "dlq_get", p: params{topic: "t", name: "g", key: "replay"}}},
		{"GET", "/v1/topics/t/groups/g/dlq/00ab-7", routed{name: "dlq_get", p: params{topic: "t", name: "g", key: "00ab-7"}}},
		{"GET", "/v1/cursors", routed{name: "cursors"}},
		{"POST", "/v1/cursors/c1", routed{name: "cursor_set", p: params{name: "c1"}}},
		{"GET", "/nope", routed{code: wire.CodeRouteNotFound}},
		{"GET", "/v1/status/", routed{code: wire.CodeRouteNotFound}},
		{"GET", "/v1//status", routed{code: wire.CodeRouteNotFound}},
		{"GET", "/v1/topics/t/../status", routed{code: wire.CodeRouteNotFound}},
		{"PUT", "/v1/topics//keys/k", routed{code: wire.CodeInvalidName}},
		{"POST", "/v1/topics/t/groups//ack", routed{code: wire.CodeInvalidName}},
		{"GET", "/v1/cursors/", routed{code: wire.CodeRouteNotFound}},
		{"POST", "/v1/status", routed{code: wire.CodeMethodNotAllowed, allow: "GET, HEAD"}},
		{"POST", "/v1/topics/t/keys/k", routed{code: wire.CodeMethodNotAllowed, allow: "DELETE, GET, HEAD, PUT"}},
		{"PUT", "/v1/topics/t/keys", routed{code: wire.CodeMethodNotAllowed, allow: "GET, HEAD"}},
		{"PUT", "/v1/cursors/c1", routed{code: wire.CodeMethodNotAllowed, allow: "DELETE, GET, HEAD, POST"}},
		{"PATCH", "/v1/topics/t/keys/a//b", routed{code: wire.CodeMethodNotAllowed, allow: "DELETE, GET, HEAD, PUT"}},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			if got := route1(t, m, tc.method, tc.target); got != tc.want {
				t.Errorf("got %+v; want %+v", got, tc.want)
			}
		})
	}
}
