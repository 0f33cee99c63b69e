package broadcast

import (
	"github.com/nats-io/nats.go"

	"github.com/cachecast/cachecast/broadcast/internal/natsfan"
	"github.com/cachecast/cachecast/broadcast/wire"
)

// NATSConfig makes a Node carry its fan-out through NATS instead of
// pushing to every peer: the node publishes each batch of its own records
// once, on the subject <SubjectPrefix>.<origin in hex>, and subscribes to
// <SubjectPrefix>.> for everyone's. The NATS cluster does the fan-out, so
// the origin's cost does not grow with the fleet.
//
// Everything else stays on the data port: anti-entropy (NATS core is at
// most once; a record NATS dropped, during a reconnect or to a slow
// consumer, is found missing by its seq and pulled from a peer), snapshot
// bootstraps, and the push to the replica peer, whose acks
// --replication=sync waits for (a direct TCP push keeps that wait at one
// round trip; NATS request/reply would add the NATS hop both ways).
type NATSConfig struct {
	// URL lists the NATS servers, comma-separated.
	URL string
	// Options are extra connection options (credentials, TLS).
	Options []nats.Option
	// SubjectPrefix starts every subject (default "cachecast").
	SubjectPrefix string
}

// startNATS starts the fan-out through NATS (internal/natsfan): what
// arrives takes the same path as a pushed frame (appendAll).
func (n *Node) startNATS(cfg *NATSConfig) error {
	f, err := natsfan.Start(natsfan.Params{
		URL: cfg.URL, Options: cfg.Options, Prefix: cfg.SubjectPrefix,
		Self: n.self, Source: n.st, Sent: &n.bytesSent, Log: n.log,
		Deliver: func(data []byte) error {
			err := n.appendAll(data, map[uint64]uint64{}, false, wire.MaxRecordVersion(n.protos.Max), nil)
			if err != nil {
				n.badFrames.Add(1)
			}
			return err
		},
		// While a peer speaks a protocol below ProtocolTimed, records
		// with time fields are left out (SetPeers).
		MaxVersion: func() byte { return byte(n.fleetRecords.Load()) },
	})
	n.nats = f
	return err
}
