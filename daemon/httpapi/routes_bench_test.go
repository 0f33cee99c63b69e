package httpapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/wire"
)

// linearRouter is the hand-written router the ServeMux patterns replaced
// (a scan of every route with strings.Split per request), kept here only
// as BenchmarkRouting's peer.
type linearRouter struct {
	routes []linearRoute
	serve  func(w http.ResponseWriter, r *http.Request, rt *route, p params)
	none   func(w http.ResponseWriter, r *http.Request, allow []string)
}

type linearRoute struct {
	rt     *route
	method string
	path   []string
}

func newLinearRouter(routes []route, serve func(http.ResponseWriter, *http.Request, *route, params),
	none func(http.ResponseWriter, *http.Request, []string)) *linearRouter {
	l := &linearRouter{serve: serve, none: none}
	for i := range routes {
		method, path, _ := strings.Cut(routes[i].pattern, " ")
		l.routes = append(l.routes, linearRoute{rt: &routes[i], method: method, path: strings.Split(strings.TrimPrefix(path, "/"), "/")})
	}
	return l
}

func (lr *linearRoute) match(segs []string) (p params, ok bool, err error) {
	for i, pat := range lr.path {
		if pat == "{key...}" {
			if i >= len(segs) {
				return p, false, nil
			}
			p.key, err = url.PathUnescape(strings.Join(segs[i:], "/"))
			return p, true, err
		}
		if i >= len(segs) {
			return p, false, nil
		}
		switch pat {
		case "{topic}":
			p.topic, err = url.PathUnescape(segs[i])
		case "{name}":
			p.name, err = url.PathUnescape(segs[i])
		default:
			if segs[i] != pat {
				return p, false, nil
			}
		}
		if err != nil {
			return p, true, err
		}
	}
	return p, len(segs) == len(lr.path), nil
}

func (l *linearRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	var allow []string
	for i := range l.routes {
		lr := &l.routes[i]
		p, ok, err := lr.match(segs)
		if !ok {
			continue
		}
		if lr.method != r.Method && (lr.method != http.MethodGet || r.Method != http.MethodHead) {
			allow = append(allow, lr.method)
			continue
		}
		if err != nil {
			l.none(w, r, nil)
			return
		}
		l.serve(w, r, lr.rt, p)
		return
	}
	l.none(w, r, allow)
}

// BenchmarkRouting routes the requests of a typical mix (a GET and a PUT
// of a key, a batch, a status, a group ack, a 404) through the ServeMux
// patterns and, beside them, through the hand-written router they
// replaced: the cost of finding the route and its wildcards, nothing else.
func BenchmarkRouting(b *testing.B) {
	reqs := []*http.Request{
		httptest.NewRequest("GET", "/v1/topics/prices/keys/sku-12345", nil),
		httptest.NewRequest("PUT", "/v1/topics/prices/keys/eu%2Fsku-12345", nil),
		httptest.NewRequest("POST", "/v1/topics/prices/messages", nil),
		httptest.NewRequest("GET", "/v1/status", nil),
		httptest.NewRequest("POST", "/v1/topics/orders/groups/billing/ack", nil),
		httptest.NewRequest("GET", "/v1/nope", nil),
	}
	var n int
	serve := func(w http.ResponseWriter, r *http.Request, rt *route, p params) { n += len(p.key) + len(rt.name) }
	none := func(w http.ResponseWriter, r *http.Request, allow []string) { n++ }
	fail := func(w http.ResponseWriter, r *http.Request, e *wire.Error) { n++ }
	a := &Server{}
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"router=servemux", newMux(a.routes(), serve, fail)},
		{"router=linear", newLinearRouter(a.routes(), serve, none)},
	} {
		b.Run(tc.name+"/req=mix", func(b *testing.B) {
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tc.h.ServeHTTP(w, reqs[i%len(reqs)])
			}
		})
		b.Run(tc.name+"/req=get", func(b *testing.B) {
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				tc.h.ServeHTTP(w, reqs[0])
			}
		})
	}
	if n == 0 {
		b.Fatal("nothing routed")
	}
}
