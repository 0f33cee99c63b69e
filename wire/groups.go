package wire

// AckAnswer is the answer of POST .../groups/{group}/ack.
type AckAnswer struct {
	Acked   int `json:"acked"`
	Nacked  int `json:"nacked"`
	Unknown int `json:"unknown"`
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

// GroupMember is one member on the node.
type GroupMember struct {
	ID       string `json:"id"`
	Queues   []int  `json:"queues"`
	Inflight int    `json:"inflight"`
}
