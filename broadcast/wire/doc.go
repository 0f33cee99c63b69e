// Package wire is the data port's protocol between cachecast nodes, as
// bytes: the handshake that proves the cluster key both ways, agrees on a
// protocol version and derives the session keys (handshake.go), the
// frames that follow it, each sealed with an HMAC under its direction's
// session key and its number in the stream (frame.go), and the payloads
// of the frames that carry records, acks, vectors and pulls. The digest
// exchanges' payloads (sums and entries frames) are package digest's.
// It holds no state beyond one connection's reader and writer and knows
// nothing of the store or of peers: package broadcast drives it.
//
// # Protocol versions
//
// A node speaks the protocol versions [ProtocolMin, ProtocolMax] ([2,10]
// in this build: 1 had no frame MAC and is not spoken; 3 adds the
// exchanges; 4 carries records of version 2, with time fields, which
// older builds refuse as corrupt; 5 exchanges digests of the vectors
// instead of whole vectors; 6 compares them at a cut; 7 carries records
// of version 3, expiry changes, which builds of 6 refuse; 8 carries
// records of version 4, counter increments, which builds of 7 refuse; 9
// carries records of version 5, increments of a key without a value,
// which builds of 8 refuse; 10 carries records of version 6, expiry
// changes of a counter's revival, which builds of 9 refuse).
// Both hellos of the handshake carry the sender's range; each side takes
// the highest version in both (Session.Proto) or, with none in common,
// refuses the connection with ErrHandshake naming both ranges (the
// listener answers its hello first, so that the dialer can say so too).
// A build that adds a version keeps the previous one in its range until
// the whole fleet runs it; then the next build may raise ProtocolMin.
// The record version a connection carries follows its protocol
// (MaxRecordVersion).
package wire
