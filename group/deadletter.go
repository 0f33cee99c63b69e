package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cachecast/cachecast/store/record"
)

// DeadLetter is a message a group gave up on, as its dead-letter topic
// keeps it.
type DeadLetter struct {
	// ID is the message's ID (of its last delivery, for a replayed one).
	ID string `json:"id"`
	// Topic and Group name the group.
	Topic string `json:"topic"`
	Group string `json:"group"`
	// Key, Tag, Value and Delete are the message's.
	Key    string `json:"key"`
	Tag    string `json:"tag"`
	Value  []byte `json:"value"`
	Delete bool   `json:"delete"`
	// HLC is the message's stamp.
	HLC uint64 `json:"hlc"`
	// Reason is why the last attempt failed: "nack" or "timeout".
	Reason string `json:"reason"`
	// Attempts is the number of deliveries made: 1 + the retries.
	Attempts int `json:"attempts"`
	// DeadAt is when the message was given up on.
	DeadAt time.Time `json:"dead_at"`
}

// ErrNotFound is returned for a dead letter or a group this node does not
// know.
var ErrNotFound = errors.New("group: not found")

func deadLetterFrom(topic, group string, f *flight, reason string, now time.Time) DeadLetter {
	r := f.rec
	return DeadLetter{
		ID: f.id.String(), Topic: topic, Group: group,
		Key: string(r.Key()), Tag: string(r.Tag()), Value: r.Value(),
		Delete: r.Kind() == record.KindTombstone, HLC: r.HLC(),
		Reason: reason, Attempts: f.attempt, DeadAt: now.UTC(),
	}
}

// DeadLetters lists a group's dead letters in ID order, from the one after
// after, at most limit; next is the ID to continue from ("" at the end).
func (m *Manager) DeadLetters(topic, group, after string, limit int) (dls []DeadLetter, next string, err error) {
	t := DeadLetterTopic(topic, group)
	keys := m.st.Keys(t, "", after, limit+1)
	if len(keys) > limit {
		keys, next = keys[:limit], keys[limit-1]
	}
	for _, k := range keys {
		dl, err := m.DeadLetter(topic, group, k)
		if errors.Is(err, ErrNotFound) {
			continue // deleted between Keys and Get
		}
		if err != nil {
			return nil, "", err
		}
		dls = append(dls, dl)
	}
	return dls, next, nil
}

// DeadLetter returns one dead letter of a group.
func (m *Manager) DeadLetter(topic, group, id string) (DeadLetter, error) {
	e, ok := m.st.Get(DeadLetterTopic(topic, group), id)
	if !ok {
		return DeadLetter{}, fmt.Errorf("dead letter %s of group %s on %s: %w", id, group, topic, ErrNotFound)
	}
	var dl DeadLetter
	if err := json.Unmarshal(e.Value, &dl); err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter %s: %w", id, err)
	}
	return dl, nil
}

// Replay hands dead letters back to their group: each goes into the
// group's retry topic, which only the group reads (a replayed price does
// not overwrite a newer one in the view), and leaves the dead-letter
// topic, both in one write. all replays every dead letter of the group.
func (m *Manager) Replay(ctx context.Context, topic, group string, ids []string, all bool) (int, error) {
	if all {
		ids = ids[:0]
		after := ""
		for {
			keys := m.st.Keys(DeadLetterTopic(topic, group), "", after, 10000)
			ids = append(ids, keys...)
			if len(keys) < 10000 {
				break
			}
			after = keys[len(keys)-1]
		}
	}
	const batch = 512
	n := 0
	for len(ids) > 0 {
		chunk := ids[:min(batch, len(ids))]
		ids = ids[len(chunk):]
		var msgs []record.Message
		for _, id := range chunk {
			dl, err := m.DeadLetter(topic, group, id)
			if err != nil {
				return n, err
			}
			msgs = append(msgs,
				record.Message{Topic: RetryTopic(topic, group), Key: dl.Key, Tag: dl.Tag, Value: dl.Value, Delete: dl.Delete},
				record.Message{Topic: DeadLetterTopic(topic, group), Key: id, Delete: true})
		}
		if err := m.write(ctx, msgs); err != nil {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}
