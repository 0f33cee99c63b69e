package httpapi

import (
	"net/http"

	"github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// incrKey is POST /v1/topics/{topic}/counters/{key}?by=N: the Redis
// door's INCRBY (INCRBYFLOAT when N is not an integer) by the same rule
// (command.Incr): an increment bound to the version of the key this node
// holds, or to the absence a key without a value counts after, which
// every node counts once. by defaults to 1. The answer is the write's result, and the
// key's value after it on this node in the Cachecast-Count header.
func (a *Server) incrKey(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckKey(p.key))) {
		return
	}
	inc := view.Increment{N: 1}
	if by := r.URL.Query().Get("by"); by != "" {
		var e *wire.Error
		if inc, e = command.ParseIncrement(by); a.failed(w, r, e) {
			return
		}
	}
	res, err := command.Incr(a.node, p.topic, p.key, inc)
	if err != nil {
		a.fail(w, r, command.StoreError(err))
		return
	}
	w.Header().Set("Cachecast-Count", string(res.Value))
	a.publish(w, r, []record.Message{res.Message}, false)
}
