package gossip

import "errors"

// Sentinel errors of the gossip package. Callers test for them with
// errors.Is; the package wraps them with the context (option, seed, file,
// line) where one helps.
var (
	// ErrInvalidConfig means a Config field is missing or malformed. The
	// message names the field.
	ErrInvalidConfig = errors.New("gossip: invalid config")

	// ErrJoin means Join contacted no seed before its deadline (JoinTimeout
	// or the caller's context). The message lists the last error per seed.
	ErrJoin = errors.New("gossip: join failed")

	// ErrShutdown is returned by calls made after Shutdown.
	ErrShutdown = errors.New("gossip: shut down")

	// ErrMetaTooLarge means encoded node metadata would exceed MetaMaxSize,
	// memberlist's limit.
	ErrMetaTooLarge = errors.New("gossip: node metadata too large")

	// ErrBadMeta means node metadata received from a peer is malformed or
	// of an unknown format.
	ErrBadMeta = errors.New("gossip: malformed node metadata")

	// ErrNoCommonProtocol means a member's data-port protocol range has no
	// version in common with this node's: it is refused (see Meta).
	ErrNoCommonProtocol = errors.New("gossip: no protocol version in common")

	// ErrBadKey means a cluster key is malformed (not base64, not 16, 24 or
	// 32 bytes), a key file holds no key, or a key change is not allowed on
	// a running node (turning encryption on or off).
	ErrBadKey = errors.New("gossip: bad cluster key")
)
