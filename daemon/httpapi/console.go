package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/wire"
)

// maxAskTimeout bounds ?timeout= of the routes that ask every member.
const maxAskTimeout = 10 * time.Second

// askTimeout reads ?timeout= (a Go duration, 1ms to maxAskTimeout); 0
// when absent.
func askTimeout(r *http.Request) (time.Duration, *wire.Error) {
	q, e := query(r)
	if e != nil {
		return 0, e
	}
	s := q.Get("timeout")
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Millisecond || d > maxAskTimeout {
		return 0, wire.Errorf(wire.CodeBadRequest, "timeout: want a duration from 1ms to %s, got %q", maxAskTimeout, s)
	}
	return d, nil
}

// fleet answers GET /v1/fleet: every member, with the figures each
// answered about itself, or why it did not.
func (a *Server) fleet(w http.ResponseWriter, r *http.Request, _ params) {
	t, e := askTimeout(r)
	if a.failed(w, r, e) {
		return
	}
	f := a.node.Fleet(r.Context(), t)
	a.writeJSON(w, r, &f)
}

// groupsAcross answers GET /v1/fleet/groups: every member's consumer
// groups, or why it did not answer.
func (a *Server) groupsAcross(w http.ResponseWriter, r *http.Request, _ params) {
	t, e := askTimeout(r)
	if a.failed(w, r, e) {
		return
	}
	g := a.node.GroupsAcross(r.Context(), t)
	a.writeJSON(w, r, &g)
}

// keyAcross answers GET /v1/topics/{topic}/nodes/{key}: the key as every
// member holds it, side by side.
func (a *Server) keyAcross(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckKey(p.key))) {
		return
	}
	t, e := askTimeout(r)
	if a.failed(w, r, e) {
		return
	}
	if a.failed(w, r, a.catchingUp()) {
		return
	}
	k := a.node.KeyAcross(r.Context(), p.topic, p.key, t)
	a.writeJSON(w, r, &k)
}

// ReadOnly is the API's GET routes that need no more than the read role,
// and only those, for the operator console (package daemon/console),
// which serves them on the metrics listener to the callers it admits.
// Any other method or route is answered as one without a route.
func (a *Server) ReadOnly() http.Handler {
	var ro []route
	for _, rt := range a.routes() {
		if strings.HasPrefix(rt.pattern, "GET ") && rt.role <= access.RoleRead {
			ro = append(ro, rt)
		}
	}
	m := newMux(ro, a.serve, a.fail)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.handlers.enter() {
			a.fail(w, r, wire.Errorf(wire.CodeUnavailable, "the daemon is shutting down"))
			return
		}
		defer a.handlers.leave()
		m.ServeHTTP(w, r)
	})
}

// historyBounds of GET /v1/topics/{topic}/history/{key}: ?limit= records
// of the key, ?scan= messages of the topic looked at.
var historyBounds = walkBounds{limit: 20, maxLimit: 1000, scan: 10_000, maxScan: 1_000_000}

// keyHistory answers GET /v1/topics/{topic}/history/{key}: the key's
// records in its topic's log on this node, newest first.
func (a *Server) keyHistory(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckKey(p.key))) {
		return
	}
	limit, scan, e := historyBounds.read(r)
	if a.failed(w, r, e) {
		return
	}
	h, err := a.node.KeyHistory(p.topic, p.key, limit, uint64(scan))
	if err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	a.writeJSON(w, r, &h)
}
