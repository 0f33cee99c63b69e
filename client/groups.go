package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/cachecast/cachecast/internal/jsonstr"
)

// Reasons a message was dead-lettered (DeadLetter.Reason).
const (
	ReasonNack    = "nack"    // refused once too often
	ReasonTimeout = "timeout" // not acknowledged in time, once too often
)

// AckResult is the daemon's answer to Ack.
type AckResult struct {
	Acked  int `json:"acked"`  // acknowledged: the group's position moved past them
	Nacked int `json:"nacked"` // refused: redelivered after the back-off, or dead-lettered
	// Unknown counts the ids not in flight on this node: already
	// acknowledged, or owned by another node since a rebalance. Not an
	// error.
	Unknown int `json:"unknown"`
}

// Group is one consumer group as GET /v1/groups describes it. Origins and
// member ids are strings here, as on the wire. The figures are this
// node's.
type Group struct {
	Topic   string        `json:"topic"`
	Group   string        `json:"group"`
	Queues  int           `json:"queues"`  // the group's queues, Q
	Nodes   []GroupNode   `json:"nodes"`   // the queues' allocation over the hosting nodes
	Owned   []int         `json:"owned"`   // the queues this node serves now (follows Nodes within a moment)
	Members []GroupMember `json:"members"` // this node's members
	// Backlog is the messages of the group's topics this node has not
	// looked at yet plus those waiting for a retry: an upper bound of its
	// share.
	Backlog     uint64 `json:"backlog"`
	Inflight    uint64 `json:"inflight"` // delivered, not yet acknowledged
	Delivered   uint64 `json:"delivered"`
	Acked       uint64 `json:"acked"`
	Retries     uint64 `json:"retries"`      // redeliveries
	DeadLetters uint64 `json:"dead_letters"` // messages this node dead-lettered
	// DLQ is the number of dead letters the group holds now (what
	// DeadLetters lists), the same on every node.
	DLQ int `json:"dlq"`
}

// Live reports whether the group has a live member on some node; a group
// without one is still listed for its positions and dead letters.
func (g *Group) Live() bool { return len(g.Nodes) > 0 }

// GroupNode is one node hosting a group and the queues allocated to it.
type GroupNode struct {
	Node   string `json:"node"` // origin, 16 hex digits
	Queues []int  `json:"queues"`
}

// GroupMember is one subscriber of a group on this node.
type GroupMember struct {
	ID       string `json:"id"` // the Cachecast-Member header of its subscription
	Queues   []int  `json:"queues"`
	Inflight int    `json:"inflight"`
}

// DeadLetter is a message a group gave up on. It mirrors the wire object
// {"id":"..","topic":"t","group":"g","key":"k","tag":"","value":"..",
// "delete":false,"reason":"nack","attempts":5,"origin":"..","seq":42,
// "hlc":"..","time":"..","dead_at":".."} (or "value_base64", as for
// events).
type DeadLetter struct {
	ID       string // the message's id, "<origin>-<seq>"
	Topic    string
	Group    string
	Key      string
	Tag      string
	Value    []byte
	Delete   bool   // the message was a tombstone
	Reason   string // ReasonNack or ReasonTimeout
	Attempts int    // deliveries made
	Origin   uint64
	Seq      uint64
	HLC      uint64
	Time     time.Time // when the message was published
	DeadAt   time.Time // when it was dead-lettered

	// Raw is the object as the daemon sent it, when it was decoded from
	// an answer (DeadLetters, DeadLetter); MarshalJSON does not use it.
	Raw json.RawMessage
}

type deadLetterWire struct {
	ID          string      `json:"id"`
	Topic       string      `json:"topic"`
	Group       string      `json:"group"`
	Key         string      `json:"key"`
	Tag         string      `json:"tag"`
	Value       *string     `json:"value,omitempty"`
	ValueBase64 *string     `json:"value_base64,omitempty"`
	Delete      bool        `json:"delete"`
	Reason      string      `json:"reason"`
	Attempts    int         `json:"attempts"`
	Origin      string      `json:"origin"`
	Seq         uint64      `json:"seq"`
	HLC         json.Number `json:"hlc"`
	Time        string      `json:"time"`
	DeadAt      string      `json:"dead_at"`
}

func (w *deadLetterWire) deadLetter() (DeadLetter, error) {
	d := DeadLetter{ID: w.ID, Topic: w.Topic, Group: w.Group, Key: w.Key, Tag: w.Tag,
		Delete: w.Delete, Reason: w.Reason, Attempts: w.Attempts, Seq: w.Seq}
	var err error
	if d.Value, err = decodeValue(w.Value, w.ValueBase64); err != nil {
		return DeadLetter{}, err
	}
	if d.Origin, err = parseOrigin(w.Origin); err != nil {
		return DeadLetter{}, err
	}
	if d.HLC, err = parseHLC(string(w.HLC)); err != nil {
		return DeadLetter{}, err
	}
	if d.Time, err = parseTime(w.Time); err != nil {
		return DeadLetter{}, err
	}
	if d.DeadAt, err = parseTime(w.DeadAt); err != nil {
		return DeadLetter{}, err
	}
	return d, nil
}

// MarshalJSON renders the dead letter in its wire form.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	type out struct {
		deadLetterWire
		HLC json.Number `json:"hlc,string"`
	}
	w := deadLetterWire{ID: d.ID, Topic: d.Topic, Group: d.Group, Key: d.Key, Tag: d.Tag,
		Delete: d.Delete, Reason: d.Reason, Attempts: d.Attempts, Origin: FormatOrigin(d.Origin), Seq: d.Seq,
		Time: formatTime(d.Time), DeadAt: formatTime(d.DeadAt)}
	w.Value, w.ValueBase64 = encodeValue(d.Value)
	return json.Marshal(out{deadLetterWire: w, HLC: hlcString(d.HLC)})
}

// UnmarshalJSON parses the wire form.
func (d *DeadLetter) UnmarshalJSON(b []byte) error {
	var w deadLetterWire
	if err := jsonstr.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: dead letter: %v", ErrBadResponse, err)
	}
	v, err := w.deadLetter()
	if err != nil {
		return err
	}
	v.Raw = bytes.Clone(b)
	*d = v
	return nil
}

// groupURL is /v1/topics/{topic}/groups/{group} followed by the literal
// and escaped parts in rest, as apiURL takes them.
func groupURL(topic, group string, query url.Values, rest ...string) *url.URL {
	return apiURL(append([]string{"/v1/topics/", topic, "/groups/", group}, rest...), query)
}

func checkGroup(topic, group string) error {
	if err := checkName("topic", topic); err != nil {
		return err
	}
	return checkName("group", group)
}

// postJSON sends body as JSON and decodes the answer into out.
func (c *Client) postJSON(ctx context.Context, u *url.URL, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.call(ctx, request{method: http.MethodPost, url: u, body: b, ctype: "application/json"}, out)
}

// Ack acknowledges the messages ack (handled: the group's committed
// position advances, in the cluster, before Ack returns) and refuses the
// messages nack (redelivered after the back-off, or dead-lettered) of
// group on topic, by id (Event.ID). Ids not in flight on this node are
// counted as Unknown, not refused. It needs a member of the group on this
// node: without one the daemon answers 404 not_found. With no id at all
// it sends nothing.
func (c *Client) Ack(ctx context.Context, topic, group string, ack, nack []string) (AckResult, error) {
	if err := checkGroup(topic, group); err != nil {
		return AckResult{}, err
	}
	if len(ack) == 0 && len(nack) == 0 {
		return AckResult{}, nil
	}
	body := struct {
		Ack  []string `json:"ack,omitempty"`
		Nack []string `json:"nack,omitempty"`
	}{ack, nack}
	var res AckResult
	if err := c.postJSON(ctx, groupURL(topic, group, nil, "/ack"), body, &res); err != nil {
		return AckResult{}, err
	}
	return res, nil
}

// ResetGroup moves every queue of group on topic to to: FromEarliest,
// FromLatest, FromOffset(n) (an offset in the topic on this node) or
// FromTime(t). The group's members in flight learn of it by a rebalance.
// It returns the group's new epoch.
func (c *Client) ResetGroup(ctx context.Context, topic, group, to string) (epoch uint64, err error) {
	if err := checkGroup(topic, group); err != nil {
		return 0, err
	}
	if to == "" {
		return 0, fmt.Errorf("%w: empty reset position", ErrInvalidArgument)
	}
	var out struct {
		Epoch uint64 `json:"epoch"`
	}
	body := struct {
		To string `json:"to"`
	}{to}
	if err := c.postJSON(ctx, groupURL(topic, group, nil, "/reset"), body, &out); err != nil {
		return 0, err
	}
	return out.Epoch, nil
}

// Groups lists the consumer groups the daemon knows, with this node's
// figures.
func (c *Client) Groups(ctx context.Context) ([]Group, error) {
	var out struct {
		Groups []Group `json:"groups"`
	}
	if err := c.call(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/groups"}, nil)}, &out); err != nil {
		return nil, err
	}
	return out.Groups, nil
}

// DeadLetters lists up to limit dead letters of group on topic, those
// after the id after ("" from the first). limit 0 takes the daemon's
// default. next is the after to pass for the following page, "" when
// there is none.
func (c *Client) DeadLetters(ctx context.Context, topic, group, after string, limit int) ([]DeadLetter, string, error) {
	if err := checkGroup(topic, group); err != nil {
		return nil, "", err
	}
	q := pageQuery(after, limit)
	var out struct {
		DeadLetters []DeadLetter `json:"dead_letters"`
		Next        string       `json:"next"`
	}
	if err := c.call(ctx, request{method: http.MethodGet, url: groupURL(topic, group, q, "/dlq")}, &out); err != nil {
		return nil, "", err
	}
	return out.DeadLetters, out.Next, nil
}

// DeadLetter returns the dead letter id of group on topic; an unknown id
// is an *APIError that matches ErrNotFound.
func (c *Client) DeadLetter(ctx context.Context, topic, group, id string) (DeadLetter, error) {
	if err := checkGroup(topic, group); err != nil {
		return DeadLetter{}, err
	}
	if err := checkName("dead letter id", id); err != nil {
		return DeadLetter{}, err
	}
	var d DeadLetter
	if err := c.call(ctx, request{method: http.MethodGet, url: groupURL(topic, group, nil, "/dlq/", id)}, &d); err != nil {
		return DeadLetter{}, err
	}
	return d, nil
}

// Replay delivers the dead letters ids (or, with all, every one) of group
// on topic to the group again, and takes them off the dead-letter list.
// Broadcasting subscribers do not see them again and the keys' values do
// not change. It returns how many were replayed. ids and all exclude each
// other; no ids without all sends nothing.
func (c *Client) Replay(ctx context.Context, topic, group string, ids []string, all bool) (int, error) {
	if err := checkGroup(topic, group); err != nil {
		return 0, err
	}
	if all && len(ids) > 0 {
		return 0, fmt.Errorf("%w: replay of both ids and all", ErrInvalidArgument)
	}
	if !all && len(ids) == 0 {
		return 0, nil
	}
	body := struct {
		IDs []string `json:"ids,omitempty"`
		All bool     `json:"all,omitempty"`
	}{ids, all}
	var out struct {
		Replayed int `json:"replayed"`
	}
	if err := c.postJSON(ctx, groupURL(topic, group, nil, "/dlq/replay"), body, &out); err != nil {
		return 0, err
	}
	return out.Replayed, nil
}
