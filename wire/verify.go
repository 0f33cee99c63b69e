package wire

// ViewDigest is a node's view digest: a SHA-256 per topic (hex) over its
// entries, tombstones included, and the version vector (origin in hex ->
// highest seq) of exactly the records the view holds. Two nodes with the
// same vector and digests hold the same view.
type ViewDigest struct {
	Vector map[string]uint64 `json:"vector"`
	Topics map[string]string `json:"topics"`
	// At is when the node took it (TimeLayout, UTC): the view's digest
	// as at that moment. In GET /v1/status it may be older than the
	// status (a write came since and the node hashed its view too
	// recently to hash it again: see docs/http-api.md); absent from
	// builds before it.
	At string `json:"at,omitempty"`
}

// VerifyNode is one node's answer in GET /v1/verify.
type VerifyNode struct {
	Name string      `json:"name"`
	View *ViewDigest `json:"view,omitempty"`
	// Error says why the node gave no digest.
	Error string `json:"error,omitempty"`
}

// VerifyDiff names a node whose view differs from most nodes' on topics.
type VerifyDiff struct {
	Node   string   `json:"node"`
	Topics []string `json:"topics"`
}

// VerifyResult is the body of GET /v1/verify.
type VerifyResult struct {
	// Identical: every live node answered, at one common vector, with the
	// same digest for every topic.
	Identical bool `json:"identical"`
	// CommonVector: every answer covers the same vector (else writes were
	// in flight all the rounds long, and a difference may be lag).
	CommonVector bool         `json:"common_vector"`
	Nodes        []VerifyNode `json:"nodes"`
	Differ       []VerifyDiff `json:"differ,omitempty"`
	// Unreachable names the members the node asked has seen alive (or
	// remembers) and does not see alive now: a split or a stopped node,
	// whose view nobody could compare. Identical is false while any is.
	Unreachable []string `json:"unreachable,omitempty"`
}
