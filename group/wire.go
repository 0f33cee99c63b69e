package group

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Internal topics. Their names start with '$', which the local API refuses
// in a user's topic, so only the daemon writes them; they travel through
// the cluster like any other topic.
const (
	// HostsTopic holds which node hosts members of which group: key
	// "<topic>/<group>/<node>", value a JSON hosting (a tombstone when no
	// member is left).
	HostsTopic = "$groups"
	// OffsetsTopic holds each queue's committed position: key
	// "<topic>/<group>/<queue>", value a JSON position.
	OffsetsTopic = "$offsets"
	// OwnersTopic holds who owns each group on each node (owner.go): key
	// "<topic>/<group>/<node>", value a JSON ownership. Owners name local
	// users, whose uids are per machine, so each node reads its own keys
	// only.
	OwnersTopic = "$owners"
)

// RetryTopic is the topic a group's dead letters are replayed into; the
// group consumes it next to its own topic.
func RetryTopic(topic, group string) string { return "$retry/" + topic + "/" + group }

// DeadLetterTopic is a group's dead-letter topic: key the message ID,
// value a JSON DeadLetter.
func DeadLetterTopic(topic, group string) string { return "$dlq/" + topic + "/" + group }

// parseDeadLetterTopic splits a DeadLetterTopic name; names hold no '/'.
func parseDeadLetterTopic(name string) (topic, group string, ok bool) {
	rest, ok := strings.CutPrefix(name, "$dlq/")
	if !ok {
		return "", "", false
	}
	topic, group, ok = strings.Cut(rest, "/")
	if !ok || topic == "" || group == "" || strings.Contains(group, "/") {
		return "", "", false
	}
	return topic, group, true
}

// sources a group reads: its topic, then its retry topic.
const (
	srcMain = iota
	srcRetry
	nSources
)

// ID is a message's identity in the cluster: its origin and seq, the same
// on every node. It is written "<origin as 16 hex digits>-<seq>".
type ID struct {
	Origin, Seq uint64
}

// String writes the ID as ParseID reads it.
func (id ID) String() string {
	return fmt.Sprintf("%016x-%d", id.Origin, id.Seq)
}

// ParseID reads an ID written by String.
func ParseID(s string) (ID, error) {
	o, q, ok := strings.Cut(s, "-")
	if !ok || len(o) != 16 {
		return ID{}, fmt.Errorf("message id %q: want <16 hex digits>-<seq>", s)
	}
	origin, err := strconv.ParseUint(o, 16, 64)
	if err != nil {
		return ID{}, fmt.Errorf("message id %q: want <16 hex digits>-<seq>", s)
	}
	seq, err := strconv.ParseUint(q, 10, 64)
	if err != nil || seq == 0 {
		return ID{}, fmt.Errorf("message id %q: want <16 hex digits>-<seq>", s)
	}
	return ID{origin, seq}, nil
}

// vector is origin -> the highest seq handled. In JSON its keys are
// origins in hex.
type vector map[uint64]uint64

func (v vector) MarshalJSON() ([]byte, error) {
	m := make(map[string]uint64, len(v))
	for o, s := range v {
		if s > 0 {
			m[fmt.Sprintf("%016x", o)] = s
		}
	}
	return json.Marshal(m)
}

func (v *vector) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*v = make(vector, len(m))
	for k, s := range m {
		o, err := strconv.ParseUint(k, 16, 64)
		if err != nil || len(k) != 16 {
			return fmt.Errorf("origin %q: want 16 hex digits", k)
		}
		(*v)[o] = s
	}
	return nil
}

// position is a queue's committed position, the value of its key in
// OffsetsTopic. A message of origin o with seq s is handled when s <=
// Done[source][o] or its HLC is below From. A reset raises Epoch; a
// position of a lower epoch than one seen is stale. Owner is the node
// serving the queue, 0 once it handed the queue over: the next owner
// waits for that while Owner is alive.
type position struct {
	Epoch uint64           `json:"epoch"`
	From  uint64           `json:"from_hlc,omitempty"`
	Owner uint64           `json:"owner,omitempty"`
	Done  [nSources]vector `json:"done"`
	// Failed counts the failed attempts of messages not yet settled, so
	// that the next owner goes on counting toward MaxRetries instead of
	// starting over. A key is failedKey(source, ID).
	Failed map[string]int `json:"failed,omitempty"`
}

func (p *position) setFailed(k string, n int) {
	if p.Failed == nil {
		p.Failed = map[string]int{}
	}
	p.Failed[k] = n
}

// failedKey is the key of position.Failed: the source (0, the topic; 1,
// the retry topic) and the message ID, "1:<origin>-<seq>".
func failedKey(src int, id ID) string { return strconv.Itoa(src) + ":" + id.String() }

// parseFailedKey reads a failedKey.
func parseFailedKey(k string) (src int, id ID, ok bool) {
	s, rest, found := strings.Cut(k, ":")
	if !found || (s != "0" && s != "1") {
		return 0, ID{}, false
	}
	id, err := ParseID(rest)
	if err != nil {
		return 0, ID{}, false
	}
	return int(s[0] - '0'), id, true
}

func decodePosition(b []byte) (position, error) {
	var p position
	if err := json.Unmarshal(b, &p); err != nil {
		return position{}, fmt.Errorf("group position: %w", err)
	}
	for i := range p.Done {
		if p.Done[i] == nil {
			p.Done[i] = vector{}
		}
	}
	return p, nil
}

// hosting is the value of a HostsTopic key: the node's member count, and
// its queues per topic and the group's tags there, which every node must
// agree on.
type hosting struct {
	Members int      `json:"members"`
	Queues  int      `json:"queues"`
	Tags    []string `json:"tags,omitempty"`
}

func decodeHosting(b []byte) (hosting, error) {
	var h hosting
	if err := json.Unmarshal(b, &h); err != nil {
		return hosting{}, fmt.Errorf("group hosting: %w", err)
	}
	return h, nil
}

func offsetsKey(topic, group string, q int) string {
	return topic + "/" + group + "/" + strconv.Itoa(q)
}

// parseOffsetsKey splits an OffsetsTopic key.
func parseOffsetsKey(k string) (topic, group string, q int, ok bool) {
	parts := strings.Split(k, "/")
	if len(parts) != 3 {
		return "", "", 0, false
	}
	q, err := strconv.Atoi(parts[2])
	if err != nil || q < 0 {
		return "", "", 0, false
	}
	return parts[0], parts[1], q, true
}

// nodeKey is the key of a group's entry of one node in HostsTopic or
// OwnersTopic.
func nodeKey(topic, group string, node uint64) string {
	return fmt.Sprintf("%s/%s/%016x", topic, group, node)
}

// parseNodeKey splits a nodeKey; names hold no '/'.
func parseNodeKey(k string) (topic, group string, node uint64, ok bool) {
	parts := strings.Split(k, "/")
	if len(parts) != 3 || len(parts[2]) != 16 {
		return "", "", 0, false
	}
	n, err := strconv.ParseUint(parts[2], 16, 64)
	if err != nil {
		return "", "", 0, false
	}
	return parts[0], parts[1], n, true
}

// allocate returns the queues of the index-th of n consumers, out of
// queues in all, as RocketMQ's AllocateMessageQueueAveragely does: each
// gets a contiguous run, the first queues%n one more than the rest.
func allocate(queues, n, index int) []int {
	if n <= 0 || index < 0 || index >= n {
		return nil
	}
	mod := queues % n
	size := queues / n
	if queues <= n {
		size = 1
	} else if mod > 0 && index < mod {
		size++
	}
	start := index*size + mod
	if mod > 0 && index < mod {
		start = index * size
	}
	var qs []int
	for i := 0; i < min(size, queues-start); i++ {
		qs = append(qs, start+i)
	}
	return qs
}

func encodePosition(p position) ([]byte, error) {
	return json.Marshal(p)
}

func encodeDeadLetter(dl DeadLetter) ([]byte, error) {
	return json.Marshal(dl)
}
