package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/daemon/console"
	"github.com/cachecast/cachecast/daemon/httpapi"
	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// The operator console's cross-node reads (GET /v1/fleet, GET
// /v1/topics/{topic}/nodes/{key}, GET /v1/fleet/groups; the page itself is package
// daemon/console, on the metrics listener).
//
// The node asked sends a small question to every live member over gossip
// (gossip.Ask, as `cachecast verify` does: memberlist's TCP user messages
// under the cluster key; no new port), each with a timeout of its own, and
// puts the answers beside its own. A member that does not answer in time
// is shown as such (Answered false, with why), never as holding the same.
// The questions share Ask's one answer function with verify's: a console
// question is JSON with a "console" field, which verify's has not, and a
// build that does not know it answers its digest instead, which the asker
// recognises as no console answer.

const (
	// consoleAskWait is how long a console question waits for each
	// member's answer by default; consoleAskMax bounds ?timeout=.
	consoleAskWait = 2 * time.Second
	consoleAskMax  = 10 * time.Second
	// consolePreview bounds the bytes of a value a console answer carries
	// (hex doubles them); the whole value's SHA-256 is compared.
	consolePreview = 4 << 10
)

// consoleQuestion is a console's question to a member: "fleet" (its
// summary), "key" (its entry and pending records of Topic/Key) or
// "groups" (its consumer groups, as its GET /v1/groups).
type consoleQuestion struct {
	Console string `json:"console"`
	Topic   string `json:"topic,omitempty"`
	Key     string `json:"key,omitempty"`
}

// answerConsole answers a member's console question over gossip, and
// reports false for a question of another kind (the cluster answers
// those: Cluster.SetAnswer).
func (d *Daemon) answerConsole(question []byte) ([]byte, bool) {
	var q consoleQuestion
	if json.Unmarshal(question, &q) == nil && q.Console != "" {
		var v any
		switch q.Console {
		case "fleet":
			v = d.summary()
		case "key":
			v = d.keyOnNode(q.Topic, q.Key)
		case "groups":
			v = d.groupsOnNode()
		default:
			v = wire.KeyOnMember{Name: d.cfg.NodeName, Error: "unknown console question " + strconv.Quote(q.Console)}
		}
		b, _ := json.Marshal(v)
		return b, true
	}
	return nil, false
}

// summary is this node's answer to a "fleet" question: cheap figures, no
// view digest.
func (d *Daemon) summary() wire.NodeSummary {
	s := d.store.Stats()
	out := wire.NodeSummary{Name: d.cfg.NodeName, Version: Version,
		UptimeSeconds: time.Since(d.started).Round(time.Millisecond).Seconds(),
		Time:          d.now().UTC().Format(wire.TimeLayout),
		Keys:          s.Keys, Records: s.Records,
		Degraded: d.degraded(), Away: d.awayReason(), CatchUp: d.node.CatchUp(),
		Healthy: d.healthy() == nil}
	for o, seq := range d.store.Vector() {
		if o == s.Origin {
			out.Published = seq
		} else {
			out.Applied += seq
		}
	}
	if d.cluster != nil {
		out.ClockBehind = d.cluster.ClockBehind()
		obs := d.cluster.Observer().Status(time.Now())
		obs.Peers, obs.Differences = nil, nil
		out.Observer = &obs
	}
	return out
}

// keyOnNode is this node's answer to a "key" question.
func (d *Daemon) keyOnNode(topic, key string) wire.KeyOnMember {
	out := wire.KeyOnMember{Name: d.cfg.NodeName, Answered: true}
	e := wire.CheckName("topic", topic)
	if e == nil {
		e = wire.CheckKey(key)
	}
	if e != nil {
		out.Error = e.Message
		return out
	}
	if v, ok := d.store.Get(topic, key); ok {
		ke := keyEntry(v)
		out.Found, out.Entry = true, &ke
	}
	for _, p := range d.store.PendingKey(topic, key) {
		ke := keyEntry(p.Entry)
		ke.Delete, ke.Cancel = p.Delete, p.Cancel
		out.Pending = append(out.Pending, ke)
	}
	return out
}

// keyEntry is e as the console shows it.
func keyEntry(e view.Entry) wire.KeyEntry {
	sum := sha256.Sum256(e.Value)
	v, st := e.Value, e.Stamp.Shown()
	out := wire.KeyEntry{Size: len(v), SHA256: hex.EncodeToString(sum[:]), Tag: e.Tag,
		Origin: wire.FormatOrigin(st.Origin), Seq: st.Seq, HLC: strconv.FormatUint(st.HLC, 10),
		Time: record.HLCTime(st.HLC).UTC().Format(wire.TimeLayout)}
	if len(v) > consolePreview {
		v, out.Truncated = v[:consolePreview], true
	}
	text := v
	for i := 0; out.Truncated && i < utf8.UTFMax-1 && len(text) > 0 && !utf8.Valid(text); i++ {
		text = text[:len(text)-1] // a rune cut by the preview
	}
	if utf8.Valid(text) {
		out.Value = string(text)
	} else {
		out.Value, out.Binary = hex.EncodeToString(v), true
	}
	if e.ExpiresAt != 0 {
		out.ExpiresAt = time.UnixMilli(e.ExpiresAt).UTC().Format(wire.TimeLayout)
	}
	if e.EffectiveAt != 0 {
		out.EffectiveAt = time.UnixMilli(e.EffectiveAt).UTC().Format(wire.TimeLayout)
	}
	return out
}

// askTimeout is a console route's ?timeout= (0: the default), bounded.
func askTimeout(t time.Duration) time.Duration {
	if t <= 0 {
		return consoleAskWait
	}
	return min(t, consoleAskMax)
}

// askEach asks q of every member but this node that is alive, at once,
// each within timeout, and returns the answers and why none came, by
// member name.
func (d *Daemon) askEach(ctx context.Context, q consoleQuestion, timeout time.Duration) (answers map[string]cluster.Answer, errs map[string]string) {
	answers, errs = map[string]cluster.Answer{}, map[string]string{}
	if d.cluster == nil {
		return answers, errs
	}
	question, _ := json.Marshal(q)
	for name, a := range d.cluster.AskAlive(ctx, question, timeout, d.now) {
		if a.Err != nil {
			errs[name] = fmt.Sprintf("no answer within %s: %v", timeout, a.Err)
			continue
		}
		answers[name] = a
	}
	return answers, errs
}

// sharedFresh is how long an answer of a console route (GET /v1/fleet,
// GET /v1/topics/{t}/nodes/{k}) serves the callers that ask the same after
// it: consoles polling every second share one round of questions to the
// members rather than asking a round each.
const sharedFresh = 500 * time.Millisecond

// sharedAnswers are the console routes' last answers, by question.
type sharedAnswers struct {
	mu      sync.Mutex
	answers map[string]*sharedAnswer
}

// sharedAnswer is one question's last answer; mu is held while a round
// is asked, so that the callers of that question at the same moment wait
// for that one (other questions do not wait).
type sharedAnswer struct {
	mu sync.Mutex
	at atomic.Int64 // Unix ns of the answer; 0: none yet
	v  any
}

// shared is ask's answer to the question named by key, asked at most once
// per sharedFresh. The round is not the caller's: a caller that leaves
// does not cut the others' answers short (each round's timeout bounds
// it).
func (d *Daemon) shared(key string, ask func(ctx context.Context) any) any {
	c := &d.consoleAnswers
	c.mu.Lock()
	if c.answers == nil {
		c.answers = map[string]*sharedAnswer{}
	}
	a := c.answers[key]
	if a == nil {
		a = &sharedAnswer{}
		c.answers[key] = a
	}
	for k, o := range c.answers {
		if at := o.at.Load(); at != 0 && time.Since(time.Unix(0, at)) > time.Minute {
			delete(c.answers, k) // a question nobody asks any more
		}
	}
	c.mu.Unlock()

	a.mu.Lock()
	defer a.mu.Unlock()
	if at := a.at.Load(); at != 0 && time.Since(time.Unix(0, at)) < sharedFresh {
		return a.v
	}
	a.v = ask(context.Background())
	a.at.Store(time.Now().UnixNano())
	return a.v
}

// fleet is GET /v1/fleet: every member as this node sees it, with its own
// summary where it answered within timeout.
func (d *Daemon) fleet(ctx context.Context, timeout time.Duration) wire.Fleet {
	cs := d.node.Cluster()
	out := wire.Fleet{Node: cs.Node, Time: d.now().UTC().Format(wire.TimeLayout), ClockBehind: cs.ClockBehind}
	answers, errs := d.askEach(ctx, consoleQuestion{Console: "fleet"}, askTimeout(timeout))
	for _, m := range cs.Members {
		fm := wire.FleetMember{Name: m.Name, Origin: m.Origin, State: m.State, Addr: m.Addr, Self: m.Self,
			Connected: m.Connected, Protocol: m.Protocol, TooOld: m.TooOld, Lag: m.Lag,
			ClockAhead: m.ClockAhead, ClockAheadSeconds: m.ClockAheadSeconds, HeldRecords: m.HeldRecords}
		switch {
		case m.Self:
			s := d.summary()
			fm.Summary = &s
		case answers[m.Name].B != nil:
			a := answers[m.Name]
			var s wire.NodeSummary
			if err := json.Unmarshal(a.B, &s); err != nil || s.Time == "" {
				fm.Error = "no summary in its answer (a build without the console?)"
				break
			}
			fm.Summary = &s
			fm.RoundTripSeconds = a.Came.Sub(a.Sent).Seconds()
			if t, err := time.Parse(time.RFC3339Nano, s.Time); err == nil {
				// Its clock against this node's at the middle of the round trip.
				fm.ClockOffsetSeconds = t.Sub(a.Sent.Add(a.Came.Sub(a.Sent) / 2)).Seconds()
			}
		case errs[m.Name] != "":
			fm.Error = errs[m.Name]
		default:
			fm.Error = "not asked: the member is " + m.State
		}
		out.Members = append(out.Members, fm)
	}
	slices.SortFunc(out.Members, func(a, b wire.FleetMember) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// keyAcross is GET /v1/topics/{topic}/nodes/{key}: the key on every
// member, side by side.
func (d *Daemon) keyAcross(ctx context.Context, topic, key string, timeout time.Duration) wire.KeyAcross {
	out := wire.KeyAcross{Topic: topic, Key: key}
	answers, errs := d.askEach(ctx, consoleQuestion{Console: "key", Topic: topic, Key: key}, askTimeout(timeout))
	for _, m := range d.node.Cluster().Members {
		var k wire.KeyOnMember
		switch {
		case m.Self:
			k = d.keyOnNode(topic, key)
			k.Self = true
		case answers[m.Name].B != nil:
			if err := json.Unmarshal(answers[m.Name].B, &k); err != nil || !k.Answered {
				k = wire.KeyOnMember{Error: "no key in its answer (a build without the console?)"}
			}
		case errs[m.Name] != "":
			k.Error = errs[m.Name]
		default:
			k.Error = "not asked: the member is " + m.State
		}
		k.Name = m.Name
		out.Nodes = append(out.Nodes, k)
	}
	slices.SortFunc(out.Nodes, func(a, b wire.KeyOnMember) int { return strings.Compare(a.Name, b.Name) })
	out.Same = compareKeys(out.Nodes)
	return out
}

// groupsOnNode is this node's answer to a "groups" question: its
// consumer groups as its GET /v1/groups lists them; none before it serves
// (the groups start before it is ready) or once it is shutting down.
func (d *Daemon) groupsOnNode() wire.GroupsOnMember {
	out := wire.GroupsOnMember{Name: d.cfg.NodeName, Answered: true, Groups: []wire.GroupStatus{}}
	if !d.ready.Load() {
		out.Error = "not serving (starting, catching up or shutting down)"
		return out
	}
	out.Groups = httpapi.GroupStatuses(d.groups.Status())
	return out
}

// groupsAcross is GET /v1/fleet/groups: every member's consumer groups,
// side by side.
func (d *Daemon) groupsAcross(ctx context.Context, timeout time.Duration) wire.GroupsAcross {
	out := wire.GroupsAcross{Node: d.cfg.NodeName}
	answers, errs := d.askEach(ctx, consoleQuestion{Console: "groups"}, askTimeout(timeout))
	for _, m := range d.node.Cluster().Members {
		var g wire.GroupsOnMember
		switch {
		case m.Self:
			g = d.groupsOnNode()
			g.Self = true
		case answers[m.Name].B != nil:
			if err := json.Unmarshal(answers[m.Name].B, &g); err != nil || !g.Answered {
				g = wire.GroupsOnMember{Error: "no groups in its answer (a build without them?)"}
			}
		case errs[m.Name] != "":
			g.Error = errs[m.Name]
		default:
			g.Error = "not asked: the member is " + m.State
		}
		g.Name = m.Name
		if g.Groups == nil {
			g.Groups = []wire.GroupStatus{}
		}
		out.Nodes = append(out.Nodes, g)
	}
	slices.SortFunc(out.Nodes, func(a, b wire.GroupsOnMember) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// compareKeys marks the answering members whose entry differs from the
// one most answering members hold (ties: the first in order) and reports
// whether every member answered with the same one.
func compareKeys(nodes []wire.KeyOnMember) bool {
	sigs := make([]string, len(nodes))
	count := map[string]int{}
	ref, best := "", 0
	for i, n := range nodes {
		if !n.Answered || n.Error != "" {
			continue
		}
		sigs[i] = keySignature(n)
		if count[sigs[i]]++; count[sigs[i]] > best {
			ref, best = sigs[i], count[sigs[i]]
		}
	}
	same := len(nodes) > 0
	for i := range nodes {
		answered := nodes[i].Answered && nodes[i].Error == ""
		nodes[i].Differs = answered && sigs[i] != ref
		same = same && answered && sigs[i] == ref
	}
	return same
}

// keySignature is what two members must share to hold the same key: the
// entry (value's digest, tag, stamp, times) and the pending records.
func keySignature(n wire.KeyOnMember) string {
	var b strings.Builder
	sig := func(e *wire.KeyEntry) {
		fmt.Fprintf(&b, "%s|%s|%s|%d|%s|%s|%s|%t|%t;", e.SHA256, e.Tag, e.Origin, e.Seq, e.HLC, e.ExpiresAt, e.EffectiveAt, e.Delete, e.Cancel)
	}
	if n.Found && n.Entry != nil {
		sig(n.Entry)
	} else {
		b.WriteString("absent;")
	}
	for i := range n.Pending {
		sig(&n.Pending[i])
	}
	return b.String()
}

// withConsole puts the operator console (package console) in front of
// the metrics listener's handler.
func (d *Daemon) withConsole(next http.Handler) (http.Handler, error) {
	tok, err := d.cfg.ConsoleToken()
	if err != nil {
		return nil, err
	}
	return console.New(console.Config{API: d.api.ReadOnly(), Token: tok,
		Loopback: config.Loopback(d.cfg.MetricsAddr), Next: next}), nil
}

// historyBytes bounds the bytes of the messages a key's history looks at
// (GET /v1/topics/{topic}/history/{key}), whatever its ?scan=: each is
// read from the log.
const historyBytes = 64 << 20

// keyHistory is GET /v1/topics/{topic}/history/{key}: the key's records
// in its topic's log on this node, newest first.
func (d *Daemon) keyHistory(topic, key string, limit int, scan uint64) (wire.KeyHistory, error) {
	h, err := d.store.KeyHistory(topic, key, limit, scan, historyBytes)
	if err != nil {
		return wire.KeyHistory{}, err
	}
	out := wire.KeyHistory{Topic: topic, Key: key, Records: []wire.HistoryRecord{}, Scanned: h.Scanned, Truncated: !h.Complete}
	for _, dl := range h.Records {
		r := dl.Record
		hr := wire.HistoryRecord{Offset: dl.Offset, Kind: historyKind(r.Kind()),
			KeyEntry: keyEntry(view.Entry{Value: r.Value(), Tag: string(r.Tag()), Stamp: r.Stamp(),
				ExpiresAt: int64(r.ExpiresAt()), EffectiveAt: int64(r.EffectiveAt())})}
		t, absent := r.AppliesTo()
		hr.Absent = absent
		if t.Origin != 0 {
			hr.Target = &wire.Version{HLC: strconv.FormatUint(t.HLC, 10), Origin: wire.FormatOrigin(t.Origin), Seq: t.Seq}
		}
		out.Records = append(out.Records, hr)
	}
	return out, nil
}

// historyKind is a record's kind as a key's history names it.
func historyKind(k record.Kind) string {
	switch k {
	case record.KindValue:
		return "write"
	case record.KindTombstone:
		return "delete"
	}
	return k.String() // cancel, expiry, counter
}
