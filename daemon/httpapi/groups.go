package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/group"
	"github.com/cachecast/cachecast/wire"
)

// maxGroupBody bounds the body of the group routes (an ack of 10,000 ids
// is about 300 KB).
const maxGroupBody = 4 << 20

// groupOwner is the request's caller as a group's owner: a group is its
// creator's (on this node), and admins may act on any.
func (a *Server) groupOwner(r *http.Request) group.Owner {
	c := access.CallerFrom(r.Context())
	return group.Owner{Name: c.Who(), Admin: a.guard.Has(c, access.RoleAdmin)}
}

// groupNames checks the topic and group of a group route.
func groupNames(p params) *wire.Error {
	return firstError(wire.CheckName("topic", p.topic), wire.CheckName("group", p.name))
}

// subscribeGroup is subscribe with mode=clustering: the member gets the
// messages of the queues its node and it are given, and acknowledges
// them on the ack route.
func (a *Server) subscribeGroup(w http.ResponseWriter, r *http.Request, p params, q url.Values) {
	name := q.Get("group")
	if name == "" {
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "mode=clustering needs a group: group=<name>"))
		return
	}
	for _, k := range []string{"from", "ack", "name"} {
		if q.Has(k) {
			a.fail(w, r, wire.Errorf(wire.CodeBadRequest, "%s: not used in clustering mode (a group resumes at its committed position; move it with POST .../groups/%s/reset)", k, name))
			return
		}
	}
	if a.failed(w, r, firstError(wire.CheckName("topic", p.topic), wire.CheckName("group", name))) {
		return
	}
	tags, e := parseTags(q.Get("tags"))
	if a.failed(w, r, e) {
		return
	}
	maxInflight, e := boundedInt(q.Get("max_inflight"), "max_inflight", group.DefaultMaxInflight, group.MaxInflightLimit)
	if a.failed(w, r, e) {
		return
	}
	release, e := a.memberSlot(access.CallerFrom(r.Context()))
	if a.failed(w, r, e) {
		return
	}
	defer release()
	mb, err := a.cfg.Groups.JoinAs(r.Context(), a.groupOwner(r), p.topic, name, tags, maxInflight)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	defer mb.Close()
	w.Header().Set("Cachecast-Member", strconv.FormatUint(mb.ID, 10))
	st, ok := a.openStream(w, r)
	if !ok {
		return
	}
	defer st.close()
	a.log.Debug("group member joined", append(access.CallerFrom(r.Context()).Fields(),
		zap.String("topic", p.topic), zap.String("group", name), zap.Uint64("member", mb.ID))...)

	var buf []byte
	for {
		ds, err := mb.Next(st.ctx)
		if err != nil {
			if !errors.Is(err, group.ErrClosed) {
				a.endStream(w, st.rc, st.ctx, err, p.topic, st.sse)
			}
			return
		}
		buf = buf[:0]
		for _, d := range ds {
			wd := delivery(d.Offset, []byte(d.Topic), d.Record)
			id := d.ID.String()
			if st.sse {
				buf = append(buf, "id: "...)
				buf = append(buf, id...)
				buf = append(buf, "\ndata: "...)
				buf = append(wire.AppendGroupDelivery(buf, &wd, id, d.Attempt, d.Queue), "\n\n"...)
			} else {
				buf = append(wire.AppendGroupDelivery(buf, &wd, id, d.Attempt, d.Queue), '\n')
			}
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := st.rc.Flush(); err != nil {
			return
		}
	}
}

// Members is how many consumer-group members uid holds on this node (as
// --max-members-per-uid counts them).
func (a *Server) Members(uid uint32) int {
	a.members.mu.Lock()
	defer a.members.mu.Unlock()
	return a.members.byUID[uid]
}

// memberSlot takes one of c's --max-members-per-uid (admins are not
// counted): 429 too_many when c holds them all. release gives it back.
func (a *Server) memberSlot(c access.Caller) (release func(), e *wire.Error) {
	limit := a.cfg.MaxMembersPerUID
	if limit == 0 || a.guard.Has(c, access.RoleAdmin) {
		return func() {}, nil
	}
	mc := &a.members
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.byUID[c.UID] >= limit {
		return nil, wire.Errorf(wire.CodeTooMany, "uid %d already holds %d consumer-group members on this node, at most %d (--max-members-per-uid)",
			c.UID, mc.byUID[c.UID], limit)
	}
	if mc.byUID == nil {
		mc.byUID = map[uint32]int{}
	}
	mc.byUID[c.UID]++
	return func() {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		if mc.byUID[c.UID]--; mc.byUID[c.UID] == 0 {
			delete(mc.byUID, c.UID)
		}
	}, nil
}

// decodeBody reads a JSON object body strictly into v.
func (a *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) *wire.Error {
	body, e := a.readBody(w, r, maxGroupBody, wire.CodeBodyTooLarge, "body", "")
	if e != nil {
		return e
	}
	return decodeStrict(body, v, "object")
}

// ackRequest is the body of POST .../groups/{name}/ack.
type ackRequest struct {
	Ack  []string `json:"ack"`
	Nack []string `json:"nack"`
}

func parseIDs(ss []string) ([]group.ID, *wire.Error) {
	ids := make([]group.ID, len(ss))
	for i, s := range ss {
		id, err := group.ParseID(s)
		if err != nil {
			return nil, wire.Errorf(wire.CodeBadRequest, "%v", err)
		}
		ids[i] = id
	}
	return ids, nil
}

func (a *Server) groupAck(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, groupNames(p)) {
		return
	}
	var req ackRequest
	if a.failed(w, r, a.decodeBody(w, r, &req)) {
		return
	}
	ack, e1 := parseIDs(req.Ack)
	nack, e2 := parseIDs(req.Nack)
	if a.failed(w, r, firstError(e1, e2)) {
		return
	}
	var ans wire.AckAnswer
	var err error
	ans.Acked, ans.Nacked, ans.Unknown, err = a.cfg.Groups.AckAs(r.Context(), a.groupOwner(r), p.topic, p.name, ack, nack)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	a.writeJSON(w, r, ans)
}

// resetRequest is the body of POST .../groups/{name}/reset.
type resetRequest struct {
	To string `json:"to"`
}

func (a *Server) groupReset(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, groupNames(p)) {
		return
	}
	var req resetRequest
	if a.failed(w, r, a.decodeBody(w, r, &req)) {
		return
	}
	epoch, err := a.cfg.Groups.Reset(r.Context(), p.topic, p.name, req.To)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	a.log.Info("group reset", append(access.CallerFrom(r.Context()).Fields(),
		zap.String("topic", p.topic), zap.String("group", p.name), zap.String("to", req.To), zap.Uint64("epoch", epoch))...)
	a.writeJSON(w, r, struct {
		Epoch uint64 `json:"epoch"`
	}{epoch})
}

// GroupStatuses is the groups of GET /v1/groups as the API answers them;
// the daemon answers its peers' console question with them too.
func GroupStatuses(ss []group.Status) []wire.GroupStatus {
	out := make([]wire.GroupStatus, 0, len(ss))
	for _, s := range ss {
		g := wire.GroupStatus{Topic: s.Topic, Group: s.Group, Queues: s.Queues, Nodes: []wire.GroupNode{}, Owned: nonNil(s.Owned), Members: []wire.GroupMember{},
			Backlog: s.Backlog, Inflight: s.Inflight, Delivered: s.Delivered, Acked: s.Acked, Retries: s.Retries, DeadLetters: s.DeadLetters, DLQ: s.DLQ}
		for _, n := range s.Nodes {
			g.Nodes = append(g.Nodes, wire.GroupNode{Node: wire.FormatOrigin(n.Node), Queues: nonNil(n.Queues)})
		}
		for _, m := range s.Members {
			g.Members = append(g.Members, wire.GroupMember{ID: strconv.FormatUint(m.ID, 10), Queues: nonNil(m.Queues), Inflight: m.Inflight})
		}
		out = append(out, g)
	}
	return out
}

func nonNil(qs []int) []int {
	if qs == nil {
		return []int{}
	}
	return qs
}

func (a *Server) groups(w http.ResponseWriter, r *http.Request, _ params) {
	a.writeJSON(w, r, struct {
		Groups []wire.GroupStatus `json:"groups"`
	}{GroupStatuses(a.cfg.Groups.Status())})
}

// appendDeadLetter appends a dead letter's JSON object, the value as
// "value" or "value_base64" as in a subscription.
func appendDeadLetter(b []byte, dl group.DeadLetter) []byte {
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, dl.ID)
	b = append(b, `,"topic":`...)
	b = wire.AppendString(b, dl.Topic)
	b = append(b, `,"group":`...)
	b = wire.AppendString(b, dl.Group)
	b = append(b, `,"key":`...)
	b = wire.AppendString(b, dl.Key)
	b = append(b, `,"tag":`...)
	b = wire.AppendString(b, dl.Tag)
	b = wire.AppendValue(b, dl.Value)
	b = append(b, `,"delete":`...)
	b = strconv.AppendBool(b, dl.Delete)
	b = append(b, `,"reason":`...)
	b = wire.AppendString(b, dl.Reason)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(dl.Attempts), 10)
	if id, err := group.ParseID(dl.ID); err == nil {
		b = append(b, `,"origin":"`...)
		b = append(b, wire.FormatOrigin(id.Origin)...)
		b = append(b, `","seq":`...)
		b = strconv.AppendUint(b, id.Seq, 10)
	}
	b = append(b, `,"hlc":"`...)
	b = strconv.AppendUint(b, dl.HLC, 10)
	b = append(b, `","time":"`...)
	b = append(b, hlcTime(dl.HLC)...)
	b = append(b, `","dead_at":"`...)
	b = dl.DeadAt.UTC().AppendFormat(b, wire.TimeLayout)
	return append(b, `"}`...)
}

func (a *Server) dlqList(w http.ResponseWriter, r *http.Request, p params) {
	q, limit, ok := a.listing(w, r, groupNames(p))
	if !ok {
		return
	}
	if err := a.cfg.Groups.CheckOwner(a.groupOwner(r), p.topic, p.name); err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	dls, next, err := a.cfg.Groups.DeadLetters(p.topic, p.name, q.Get("after"), limit)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	b := []byte(`{"dead_letters":[`)
	for i, dl := range dls {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDeadLetter(b, dl)
	}
	b = append(b, `],"next":`...)
	b = wire.AppendString(b, next)
	writeJSONBytes(w, http.StatusOK, append(b, "}\n"...))
}

func (a *Server) dlqGet(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, groupNames(p)) {
		return
	}
	if err := a.cfg.Groups.CheckOwner(a.groupOwner(r), p.topic, p.name); err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	dl, err := a.cfg.Groups.DeadLetter(p.topic, p.name, p.key)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	writeJSONBytes(w, http.StatusOK, append(appendDeadLetter(nil, dl), '\n'))
}

// replayRequest is the body of POST .../dlq/replay.
type replayRequest struct {
	IDs []string `json:"ids"`
	All bool     `json:"all"`
}

func (a *Server) dlqReplay(w http.ResponseWriter, r *http.Request, p params) {
	if a.failed(w, r, groupNames(p)) {
		return
	}
	var req replayRequest
	if a.failed(w, r, a.decodeBody(w, r, &req)) {
		return
	}
	if req.All == (len(req.IDs) > 0) {
		a.fail(w, r, wire.Errorf(wire.CodeBadRequest, `give "ids" or "all": true, not both`))
		return
	}
	if _, e := parseIDs(req.IDs); e != nil {
		a.fail(w, r, e)
		return
	}
	n, err := a.cfg.Groups.Replay(r.Context(), p.topic, p.name, req.IDs, req.All)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	a.log.Info("dead letters replayed", append(access.CallerFrom(r.Context()).Fields(),
		zap.String("topic", p.topic), zap.String("group", p.name), zap.Int("messages", n))...)
	a.writeJSON(w, r, struct {
		Replayed int `json:"replayed"`
	}{n})
}
