package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/wire"
)

// params are the wildcards of a matched route, unescaped.
type params struct {
	topic, key, name string
}

// route is one method and path of the local API, as a net/http ServeMux
// pattern. "{key...}" matches the rest of the path, slashes included (so
// a key may hold a slash, escaped as %2F or not).
type route struct {
	name    string // the metrics label
	pattern string
	handler func(w http.ResponseWriter, r *http.Request, p params)
	stream  bool        // a subscription: no latency metric
	role    access.Role // what the caller needs to be served
}

// routes is the API's route table; the role of each route is the table
// of the package doc.
func (a *Server) routes() []route {
	return []route{
		{name: "healthz", pattern: "GET /healthz", role: access.RoleNone, handler: a.healthz},
		{name: "readyz", pattern: "GET /readyz", role: access.RoleNone, handler: a.readyz},
		{name: "status", pattern: "GET /v1/status", role: access.RoleRead, handler: a.status},
		{name: "cluster", pattern: "GET /v1/cluster", role: access.RoleRead, handler: a.clusterStatus},
		{name: "verify", pattern: "GET /v1/verify", role: access.RoleRead, handler: a.verify},
		{name: "fleet", pattern: "GET /v1/fleet", role: access.RoleRead, handler: a.fleet},
		{name: "fleet_groups", pattern: "GET /v1/fleet/groups", role: access.RoleRead, handler: a.groupsAcross},
		{name: "key_nodes", pattern: "GET /v1/topics/{topic}/nodes/{key...}", role: access.RoleRead, handler: a.keyAcross},
		{name: "key_history", pattern: "GET /v1/topics/{topic}/history/{key...}", role: access.RoleRead, handler: a.keyHistory},
		{name: "repair_accept", pattern: "POST /v1/repair/accept", role: access.RoleAdmin, handler: a.repairAccept},
		{name: "cluster_forget", pattern: "POST /v1/cluster/forget/{name}", role: access.RoleAdmin, handler: a.clusterForget},
		{name: "backup", pattern: "GET /v1/backup", role: access.RoleAdmin, handler: a.backup, stream: true},
		{name: "topics", pattern: "GET /v1/topics", role: access.RoleRead, handler: a.topics},
		{name: "keys", pattern: "GET /v1/topics/{topic}/keys", role: access.RoleRead, handler: a.listKeys},
		{name: "get", pattern: "GET /v1/topics/{topic}/keys/{key...}", role: access.RoleRead, handler: a.getKey},
		{name: "put", pattern: "PUT /v1/topics/{topic}/keys/{key...}", role: access.RolePublish, handler: a.putKey},
		{name: "delete", pattern: "DELETE /v1/topics/{topic}/keys/{key...}", role: access.RolePublish, handler: a.deleteKey},
		{name: "incr", pattern: "POST /v1/topics/{topic}/counters/{key...}", role: access.RolePublish, handler: a.incrKey},
		{name: "messages", pattern: "POST /v1/topics/{topic}/messages", role: access.RolePublish, handler: a.postMessages},
		{name: "pending", pattern: "GET /v1/topics/{topic}/pending", role: access.RoleRead, handler: a.listPending},
		{name: "expiries", pattern: "GET /v1/topics/{topic}/expiries", role: access.RoleRead, handler: a.listExpiries},
		{name: "pending_cancel", pattern: "DELETE /v1/topics/{topic}/pending/{key...}", role: access.RolePublish, handler: a.cancelPending},
		// Read here; a subscription that moves a cursor or joins a group
		// needs consume, checked once the query is read.
		{name: "subscribe", pattern: "GET /v1/topics/{topic}/subscribe", role: access.RoleRead, handler: a.subscribe, stream: true},
		{name: "groups", pattern: "GET /v1/groups", role: access.RoleRead, handler: a.groups},
		{name: "group_ack", pattern: "POST /v1/topics/{topic}/groups/{name}/ack", role: access.RoleConsume, handler: a.groupAck},
		{name: "group_reset", pattern: "POST /v1/topics/{topic}/groups/{name}/reset", role: access.RoleAdmin, handler: a.groupReset},
		{name: "dlq_list", pattern: "GET /v1/topics/{topic}/groups/{name}/dlq", role: access.RoleConsume, handler: a.dlqList},
		{name: "dlq_replay", pattern: "POST /v1/topics/{topic}/groups/{name}/dlq/replay", role: access.RoleAdmin, handler: a.dlqReplay},
		{name: "dlq_get", pattern: "GET /v1/topics/{topic}/groups/{name}/dlq/{key...}", role: access.RoleConsume, handler: a.dlqGet},
		{name: "cursors", pattern: "GET /v1/cursors", role: access.RoleRead, handler: a.listCursors},
		{name: "cursor_get", pattern: "GET /v1/cursors/{name}", role: access.RoleRead, handler: a.getCursor},
		{name: "cursor_set", pattern: "POST /v1/cursors/{name}", role: access.RoleConsume, handler: a.setCursor},
		{name: "cursor_delete", pattern: "DELETE /v1/cursors/{name}", role: access.RoleConsume, handler: a.deleteCursor},
	}
}

// mux routes on net/http's ServeMux patterns. It never redirects: where
// ServeMux would send a path that is not clean ("a//b", "a/./b") to its
// cleaned form, a key's rest of the path is taken as it is (the slashes
// escaped, so that the mux sees one clean segment), and any other such
// path has no route. A path without a route, or without one for its
// method, goes to noRoute with the methods it has (sorted; HEAD with GET).
type mux struct {
	m      *http.ServeMux
	guards map[string]bool // patterns that only stop a redirect (see newMux)
	serve  func(w http.ResponseWriter, r *http.Request, rt *route, p params)
	fail   func(w http.ResponseWriter, r *http.Request, e *wire.Error)
}

// catchAll is the pattern of every request no route takes.
const catchAll = "/"

func newMux(routes []route, serve func(http.ResponseWriter, *http.Request, *route, params),
	fail func(http.ResponseWriter, *http.Request, *wire.Error)) *mux {
	m := &mux{m: http.NewServeMux(), serve: serve, fail: fail}
	for i := range routes {
		rt := &routes[i]
		m.m.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, rt, params{topic: r.PathValue("topic"), key: r.PathValue("key"), name: r.PathValue("name")})
		})
	}
	noRouteHere := func(w http.ResponseWriter, r *http.Request) { m.noRoute(w, r, m.allowed(r)) }
	m.m.HandleFunc(catchAll, noRouteHere)
	// ServeMux answers a path P that no pattern of the method matches, but
	// P + "/" does, with a redirect to P/ (PUT .../keys to .../keys/, an
	// empty key); each such P gets a pattern of its own that has no route.
	m.guards = map[string]bool{}
	for _, rt := range routes {
		prefix, ok := strings.CutSuffix(rt.pattern, "/{key...}")
		if !ok || slices.ContainsFunc(routes, func(o route) bool { return o.pattern == prefix }) {
			continue
		}
		m.guards[prefix] = true
		m.m.HandleFunc(prefix, noRouteHere)
	}
	return m
}

func (m *mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.EscapedPath(); !cleanPath(p) {
		esc, ok := keyRest(p)
		if !ok {
			if e := emptyName(p); e != nil {
				m.fail(w, r, e)
				return
			}
			m.noRoute(w, r, nil)
			return
		}
		u := *r.URL
		u.RawPath = esc // Path, its unescaped form, is the same
		r2 := *r
		r2.URL = &u
		r = &r2
	}
	m.m.ServeHTTP(w, r)
}

// noRoute answers a request no route takes: 405 with the methods the path
// has, 404 when it has none.
func (m *mux) noRoute(w http.ResponseWriter, r *http.Request, allow []string) {
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		m.fail(w, r, wire.Errorf(wire.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	m.fail(w, r, wire.Errorf(wire.CodeRouteNotFound, "no route %s %s (see the cachecast API documentation)", r.Method, r.URL.Path))
}

// emptyName is the refusal of a path that leaves a route's topic, group
// or cursor name empty (PUT /v1/topics//keys/k): invalid_name, as for any
// other bad name, rather than no route. nil for any other path.
func emptyName(p string) *wire.Error {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	switch {
	case len(segs) > 3 && segs[0] == "v1" && segs[1] == "topics" && segs[2] == "":
		return wire.CheckName("topic", "")
	case len(segs) > 5 && segs[0] == "v1" && segs[1] == "topics" && segs[3] == "groups" && segs[4] == "":
		return wire.CheckName("group", "")
	case len(segs) == 3 && segs[0] == "v1" && segs[1] == "cursors" && segs[2] == "":
		return wire.CheckName("cursor name", "")
	}
	return nil
}

// allowed lists the methods a route takes the request's path with.
func (m *mux) allowed(r *http.Request) []string {
	var allow []string
	for _, method := range []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut} {
		r2 := *r
		r2.Method = method
		if _, pattern := m.m.Handler(&r2); pattern != "" && pattern != catchAll && !m.guards[pattern] {
			allow = append(allow, method)
		}
	}
	slices.Sort(allow)
	return allow
}

// cleanPath reports whether ServeMux would take p as it is: no empty,
// "." or ".." segment but a final empty one. (It scans rather than
// splits: every request passes here.)
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		seg := p[i+1:]
		if j := strings.IndexByte(seg, '/'); j >= 0 {
			seg = seg[:j]
			if seg == "" {
				return false
			}
		}
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// keyRest escapes the slashes (and the dots of "." and ".." segments) of
// the key in a key route's path (.../keys/{key...}, .../nodes/{key...},
// .../history/{key...}, .../dlq/{key...}), so
// that a key holding "//" or a "." segment is one clean segment; ok is false when the path is no such
// route's or its other segments are not clean.
func keyRest(p string) (string, bool) {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	k := 0
	switch {
	case len(segs) > 4 && segs[0] == "v1" && segs[1] == "topics" && (segs[3] == "keys" || segs[3] == "nodes" || segs[3] == "history"):
		k = 4
	case len(segs) > 6 && segs[0] == "v1" && segs[1] == "topics" && segs[3] == "groups" && segs[5] == "dlq":
		k = 6
	default:
		return "", false
	}
	rest := slices.Clone(segs[k:])
	for i, s := range rest {
		if s == "." || s == ".." {
			rest[i] = strings.ReplaceAll(s, ".", "%2E")
		}
	}
	esc := "/" + strings.Join(segs[:k], "/") + "/" + strings.Join(rest, "%2F")
	return esc, cleanPath(esc)
}
