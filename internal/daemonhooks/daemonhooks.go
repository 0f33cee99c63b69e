// Package daemonhooks holds the hooks tests put into a daemon
// (config.WithHooks): a skewed clock, a fault network, an older build's
// protocol. They are no settings (no flag, no environment variable), and
// being internal they are out of reach of the module's users.
package daemonhooks

import (
	"context"
	"net"
	"time"
)

// Hooks are a daemon's test hooks; the zero value is none.
type Hooks struct {
	// Clock, if set, is the node's wall clock (tests run a node whose
	// clock is skewed); nil: time.Now.
	Clock func() time.Time
	// DataDial, if set, dials the peers' data ports (tests put a fault
	// network there: internal/faultnet, daemontest.Cluster); nil: TCP.
	DataDial func(ctx context.Context, addr string) (net.Conn, error)
	// GossipUnreachable, if set, partitions the gossip (internal/faultnet's
	// Unreachable, daemontest.Cluster.PartitionAll):
	// gossip.Config.Unreachable.
	GossipUnreachable func(addr string) bool
	// DataProtocolMax, if set, lowers the highest data-port protocol the
	// node speaks (broadcast.Config.ProtoMax): tests run a node that acts
	// as an older build beside this one.
	DataProtocolMax uint8
	// ViewRetry, if set, is how long after a write error the shared
	// view's mirror starts over (mirror.Mirror.Retry); 0: its default.
	ViewRetry time.Duration
}
