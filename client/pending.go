package client

import (
	"context"
	"net/http"
	"time"
)

// Pending is a record not in force yet (GET /v1/topics/{topic}/pending):
// a scheduled value or delete, or a cancel of the key's records scheduled
// for EffectiveAt.
type Pending struct {
	Key         string    `json:"key"`
	EffectiveAt time.Time `json:"effective_at"`
	Tag         string    `json:"tag"`
	Value       string    `json:"value"`
	ValueBase64 string    `json:"value_base64"`
	Delete      bool      `json:"delete"`
	Cancel      bool      `json:"cancel"`
	// ExpiresAt is zero when the value does not expire.
	ExpiresAt time.Time `json:"expires_at"`
	Origin    string    `json:"origin"`
	Seq       uint64    `json:"seq"`
	HLC       string    `json:"hlc"`
}

// Pending lists the records of topic not in force yet, by key then
// instant, for keys greater than after, at most limit keys (0: the
// daemon's default, 1000). next is the after of the following page, ""
// when there is none.
func (c *Client) Pending(ctx context.Context, topic, after string, limit int) (recs []Pending, next string, err error) {
	if err := checkName("topic", topic); err != nil {
		return nil, "", err
	}
	q := pageQuery(after, limit)
	var out struct {
		Pending []Pending `json:"pending"`
		Next    string    `json:"next"`
	}
	rq := request{method: http.MethodGet, url: apiURL([]string{"/v1/topics/", topic, "/pending"}, q)}
	if err := c.call(ctx, rq, &out); err != nil {
		return nil, "", err
	}
	return out.Pending, out.Next, nil
}
