package daemon

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/group"
)

// maxGroupBody bounds the body of the group routes (an ack of 10,000 ids
// is about 300 KB).
const maxGroupBody = 4 << 20

// groupError maps an error of the group manager onto the API's codes.
func groupError(err error) *apiError {
	switch {
	case errors.Is(err, group.ErrNotFound):
		return errorf(CodeNotFound, "%v", err)
	case errors.Is(err, group.ErrConflict):
		return errorf(CodeConflict, "%v", err)
	case errors.Is(err, group.ErrInvalid):
		return errorf(CodeBadRequest, "%v", err)
	case errors.Is(err, group.ErrClosed):
		return errorf(CodeUnavailable, "the daemon is shutting down")
	}
	return storeError(err)
}

// groupNames checks the topic and group of a group route.
func groupNames(p params) *apiError {
	return firstError(validTopic("topic", p.topic), validTopic("group", p.name))
}

// subscribeGroup is subscribe with mode=clustering: the member gets the
// messages of the queues its node and it are given, and acknowledges
// them on the ack route.
func (a *api) subscribeGroup(w http.ResponseWriter, r *http.Request, p params, q url.Values) {
	name := q.Get("group")
	if name == "" {
		a.fail(w, r, errorf(CodeBadRequest, "mode=clustering needs a group: group=<name>"))
		return
	}
	for _, k := range []string{"from", "ack", "name"} {
		if q.Has(k) {
			a.fail(w, r, errorf(CodeBadRequest, "%s: not used in clustering mode (a group resumes at its committed position; move it with POST .../groups/%s/reset)", k, name))
			return
		}
	}
	if e := firstError(validTopic("topic", p.topic), validTopic("group", name)); e != nil {
		a.fail(w, r, e)
		return
	}
	tags, e := parseTags(q.Get("tags"))
	if e != nil {
		a.fail(w, r, e)
		return
	}
	maxInflight := group.DefaultMaxInflight
	if s := q.Get("max_inflight"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > group.MaxInflightLimit {
			a.fail(w, r, errorf(CodeBadRequest, "max_inflight: want 1 to %d, got %q", group.MaxInflightLimit, s))
			return
		}
		maxInflight = n
	}
	release, e := a.d.memberSlot(callerFrom(r.Context()))
	if e != nil {
		a.fail(w, r, e)
		return
	}
	defer release()
	mb, err := a.d.groups.Join(p.topic, name, tags, maxInflight)
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
	a.d.log.Debug("group member joined", append(callerFrom(r.Context()).fields(),
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
			if st.sse {
				buf = append(buf, "id: "...)
				buf = append(buf, d.ID.String()...)
				buf = append(buf, "\ndata: "...)
				buf = append(appendGroupDelivery(buf, d), "\n\n"...)
			} else {
				buf = append(appendGroupDelivery(buf, d), '\n')
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

// memberCounts counts the group members each user holds on this node,
// for --max-members-per-uid.
type memberCounts struct {
	mu    sync.Mutex
	byUID map[uint32]int
}

// memberSlot takes one of c's --max-members-per-uid (admins are not
// counted): 429 too_many when c holds them all. release gives it back.
func (d *Daemon) memberSlot(c Caller) (release func(), e *apiError) {
	limit := d.cfg.MaxMembersPerUID
	if limit == 0 || d.roles.Load().has(c, RoleAdmin) {
		return func() {}, nil
	}
	mc := &d.members
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.byUID[c.UID] >= limit {
		return nil, errorf(CodeTooMany, "uid %d already holds %d consumer-group members on this node, at most %d (--max-members-per-uid)",
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
func (a *api) decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body, e := a.readBody(w, r, maxGroupBody, CodeBodyTooLarge, "body")
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

// AckAnswer is the answer of the ack route.
type AckAnswer struct {
	Acked   int `json:"acked"`
	Nacked  int `json:"nacked"`
	Unknown int `json:"unknown"`
}

func parseIDs(ss []string) ([]group.ID, *apiError) {
	ids := make([]group.ID, len(ss))
	for i, s := range ss {
		id, err := group.ParseID(s)
		if err != nil {
			return nil, errorf(CodeBadRequest, "%v", err)
		}
		ids[i] = id
	}
	return ids, nil
}

func (a *api) groupAck(w http.ResponseWriter, r *http.Request, p params) {
	if e := groupNames(p); e != nil {
		a.fail(w, r, e)
		return
	}
	var req ackRequest
	if e := a.decodeBody(w, r, &req); e != nil {
		a.fail(w, r, e)
		return
	}
	ack, e1 := parseIDs(req.Ack)
	nack, e2 := parseIDs(req.Nack)
	if e := firstError(e1, e2); e != nil {
		a.fail(w, r, e)
		return
	}
	var ans AckAnswer
	var err error
	ans.Acked, ans.Nacked, ans.Unknown, err = a.d.groups.Ack(r.Context(), p.topic, p.name, ack, nack)
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

func (a *api) groupReset(w http.ResponseWriter, r *http.Request, p params) {
	if e := groupNames(p); e != nil {
		a.fail(w, r, e)
		return
	}
	var req resetRequest
	if e := a.decodeBody(w, r, &req); e != nil {
		a.fail(w, r, e)
		return
	}
	epoch, err := a.d.groups.Reset(r.Context(), p.topic, p.name, req.To)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	a.d.log.Info("group reset", append(callerFrom(r.Context()).fields(),
		zap.String("topic", p.topic), zap.String("group", p.name), zap.String("to", req.To), zap.Uint64("epoch", epoch))...)
	a.writeJSON(w, r, struct {
		Epoch uint64 `json:"epoch"`
	}{epoch})
}

// GroupStatus is one group in the answer of GET /v1/groups.
type GroupStatus struct {
	Topic       string        `json:"topic"`
	Group       string        `json:"group"`
	Queues      int           `json:"queues"`
	Nodes       []GroupNode   `json:"nodes"`
	Owned       []int         `json:"owned"`
	Members     []GroupMember `json:"members"`
	Backlog     uint64        `json:"backlog"`
	Inflight    int           `json:"inflight"`
	Delivered   uint64        `json:"delivered"`
	Acked       uint64        `json:"acked"`
	Retries     uint64        `json:"retries"`
	DeadLetters uint64        `json:"dead_letters"`
	DLQ         int           `json:"dlq"`
}

// GroupNode is one hosting node's share of a group.
type GroupNode struct {
	Node   string `json:"node"`
	Queues []int  `json:"queues"`
}

// GroupMember is one member on this node.
type GroupMember struct {
	ID       string `json:"id"`
	Queues   []int  `json:"queues"`
	Inflight int    `json:"inflight"`
}

func groupStatuses(ss []group.Status) []GroupStatus {
	out := make([]GroupStatus, 0, len(ss))
	for _, s := range ss {
		g := GroupStatus{Topic: s.Topic, Group: s.Group, Queues: s.Queues, Nodes: []GroupNode{}, Owned: nonNil(s.Owned), Members: []GroupMember{},
			Backlog: s.Backlog, Inflight: s.Inflight, Delivered: s.Delivered, Acked: s.Acked, Retries: s.Retries, DeadLetters: s.DeadLetters, DLQ: s.DLQ}
		for _, n := range s.Nodes {
			g.Nodes = append(g.Nodes, GroupNode{Node: formatOrigin(n.Node), Queues: nonNil(n.Queues)})
		}
		for _, m := range s.Members {
			g.Members = append(g.Members, GroupMember{ID: strconv.FormatUint(m.ID, 10), Queues: nonNil(m.Queues), Inflight: m.Inflight})
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

func (a *api) groups(w http.ResponseWriter, r *http.Request, _ params) {
	a.writeJSON(w, r, struct {
		Groups []GroupStatus `json:"groups"`
	}{groupStatuses(a.d.groups.Status())})
}

// appendDeadLetter appends a dead letter's JSON object, the value as
// "value" or "value_base64" as in a subscription.
func appendDeadLetter(b []byte, dl group.DeadLetter) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, dl.ID)
	b = append(b, `,"topic":`...)
	b = appendJSONString(b, dl.Topic)
	b = append(b, `,"group":`...)
	b = appendJSONString(b, dl.Group)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, dl.Key)
	b = append(b, `,"tag":`...)
	b = appendJSONString(b, dl.Tag)
	if utf8.Valid(dl.Value) {
		b = append(b, `,"value":`...)
		b = appendJSONBytes(b, dl.Value)
	} else {
		b = append(b, `,"value_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, dl.Value)
		b = append(b, '"')
	}
	b = append(b, `,"delete":`...)
	b = strconv.AppendBool(b, dl.Delete)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, dl.Reason)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(dl.Attempts), 10)
	if id, err := group.ParseID(dl.ID); err == nil {
		b = append(b, `,"origin":"`...)
		b = append(b, formatOrigin(id.Origin)...)
		b = append(b, `","seq":`...)
		b = strconv.AppendUint(b, id.Seq, 10)
	}
	b = append(b, `,"hlc":"`...)
	b = strconv.AppendUint(b, dl.HLC, 10)
	b = append(b, `","time":"`...)
	b = append(b, hlcTime(dl.HLC)...)
	b = append(b, `","dead_at":"`...)
	b = dl.DeadAt.UTC().AppendFormat(b, timeLayout)
	return append(b, `"}`...)
}

func (a *api) dlqList(w http.ResponseWriter, r *http.Request, p params) {
	if e := groupNames(p); e != nil {
		a.fail(w, r, e)
		return
	}
	q, limit, e := listQuery(r)
	if e != nil {
		a.fail(w, r, e)
		return
	}
	dls, next, err := a.d.groups.DeadLetters(p.topic, p.name, q.Get("after"), limit)
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
	b = appendJSONString(b, next)
	writeJSONBytes(w, http.StatusOK, append(b, "}\n"...))
}

func (a *api) dlqGet(w http.ResponseWriter, r *http.Request, p params) {
	if e := groupNames(p); e != nil {
		a.fail(w, r, e)
		return
	}
	dl, err := a.d.groups.DeadLetter(p.topic, p.name, p.key)
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

func (a *api) dlqReplay(w http.ResponseWriter, r *http.Request, p params) {
	if e := groupNames(p); e != nil {
		a.fail(w, r, e)
		return
	}
	var req replayRequest
	if e := a.decodeBody(w, r, &req); e != nil {
		a.fail(w, r, e)
		return
	}
	if req.All == (len(req.IDs) > 0) {
		a.fail(w, r, errorf(CodeBadRequest, `give "ids" or "all": true, not both`))
		return
	}
	if _, e := parseIDs(req.IDs); e != nil {
		a.fail(w, r, e)
		return
	}
	n, err := a.d.groups.Replay(r.Context(), p.topic, p.name, req.IDs, req.All)
	if err != nil {
		a.fail(w, r, groupError(err))
		return
	}
	a.d.log.Info("dead letters replayed", append(callerFrom(r.Context()).fields(),
		zap.String("topic", p.topic), zap.String("group", p.name), zap.Int("messages", n))...)
	a.writeJSON(w, r, struct {
		Replayed int `json:"replayed"`
	}{n})
}
