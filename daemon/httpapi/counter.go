package httpapi

import (
	"errors"
	"net/http"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// incrKey is POST /v1/topics/{topic}/counters/{key}?by=N: the Redis
// door's INCRBY (INCRBYFLOAT when N is not an integer) by the same rule
// (view.Count): an increment bound to the version of the key this node
// holds, which every node counts once; a key without a value gets N
// written. by defaults to 1. The answer is the write's result, and the
// key's value after it on this node in the Cachecast-Count header.
func (a *Server) incrKey(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckKey(p.key))) {
		return
	}
	inc := view.Increment{N: 1}
	if by := r.URL.Query().Get("by"); by != "" {
		var ok bool
		if inc.N, ok = view.ParseInt([]byte(by)); !ok {
			inc.N = 0
			if inc.F, ok = view.ParseFloat([]byte(by)); !ok {
				a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "by=%q: an integer or a finite float", by))
				return
			}
			inc.Float = true
		}
	}
	e, found := a.node.Entry(p.topic, p.key)
	m, value, err := view.Count(p.topic, p.key, e, found, inc)
	if errors.Is(err, view.ErrNotInteger) || errors.Is(err, view.ErrNotFloat) || errors.Is(err, view.ErrOverflow) {
		a.fail(w, r, wire.Errorf(wire.CodeConflict, "key %q of topic %q: %v", p.key, p.topic, err))
		return
	}
	w.Header().Set("Cachecast-Count", string(value))
	a.publish(w, r, []record.Message{m}, false)
}
