package command

import (
	"strconv"

	"github.com/cachecast/cachecast/wire"
)

// State is whether the node serves its view: the zero State serves it.
type State struct {
	// Away is why the node left its cluster, out of contact with its
	// fleet too long: it serves neither reads of its view nor writes.
	Away string
	// CatchUp is the node's progress while it catches up with its peers
	// before its first ready (nil once it has): reads of its view wait.
	CatchUp *wire.CatchUpStatus
}

// Read is the refusal of a read of the view: unavailable while away,
// catching_up (with the progress) while catching up; nil when served.
func (s State) Read() *wire.Error {
	if e := s.Write(); e != nil {
		return e
	}
	cs := s.CatchUp
	if cs == nil {
		return nil
	}
	msg := "this node is catching up with the cluster: " + strconv.FormatUint(cs.LagRecords, 10) +
		" records behind what its peers held when it joined; it serves reads once it holds it too"
	switch cs.Phase {
	case "joining":
		msg = "this node is joining the cluster; it serves reads once it holds what its peers hold"
	case "asking":
		msg = "this node is asking its peers what they hold; it serves reads once it holds it too"
	case "snapshot":
		msg = "this node lost its view at the start (a damaged or missing snapshot) and waits for a peer's; it serves reads once it has it"
	}
	return &wire.Error{Code: wire.CodeCatchingUp, Message: msg, CatchUp: cs}
}

// Write is the refusal of a write: unavailable while away (its writes
// would reach no peer); nil otherwise (a node catching up takes writes).
func (s State) Write() *wire.Error {
	if s.Away != "" {
		return wire.Errorf(wire.CodeUnavailable, "%s", s.Away)
	}
	return nil
}
