package broadcast

import "github.com/cachecast/cachecast/broadcast/wire"

// The data port's protocol versions, as package wire defines them (see
// "Protocol versions" there and in the package doc): the range this build
// speaks, and the first version of each feature a connection's version
// turns on.
const (
	ProtocolMin     = wire.ProtocolMin
	ProtocolMax     = wire.ProtocolMax
	ProtocolTimed   = wire.ProtocolTimed
	ProtocolDigest  = wire.ProtocolDigest
	ProtocolCut     = wire.ProtocolCut
	ProtocolExpiry  = wire.ProtocolExpiry
	ProtocolCounter = wire.ProtocolCounter
	ProtocolAbsent  = wire.ProtocolAbsent
	ProtocolRevival = wire.ProtocolRevival
)

// protocols is the range a new Node speaks. Only tests change it, to act
// as another build (a [2,3] node beside a [2,2] one).
var protocols = wire.Range{Min: ProtocolMin, Max: ProtocolMax}

// Protocols returns the lowest and highest protocol versions a Node made
// now speaks; membership carries them (gossip.Config.ProtoMin, ProtoMax).
func Protocols() (lowest, highest uint8) { return protocols.Min, protocols.Max }
