package broadcast

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
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

// natsFanOut is the NATS side of a Node.
type natsFanOut struct {
	n      *Node
	nc     *nats.Conn
	sub    *nats.Subscription
	prefix string
	// drop, set only by tests, discards deliveries (a fault-injecting
	// wrapper around the real transport).
	drop atomic.Pointer[func(origin uint64) bool]
}

func (n *Node) startNATS(cfg *NATSConfig) error {
	prefix := cfg.SubjectPrefix
	if prefix == "" {
		prefix = "cachecast"
	}
	if strings.ContainsAny(prefix, " *>") || strings.HasSuffix(prefix, ".") || strings.HasPrefix(prefix, ".") {
		return fmt.Errorf("broadcast: bad NATS subject prefix %q", prefix)
	}
	f := &natsFanOut{n: n, prefix: prefix}
	log := n.log.Named("nats")
	opts := append([]nats.Option{
		nats.Name(fmt.Sprintf("cachecast %016x", n.self)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("disconnected from NATS; records are repaired from peers", zap.Error(err))
			n.natsDisconnects.Add(1)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("reconnected to NATS", zap.String("server", c.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// A slow consumer loses messages: anti-entropy pulls them.
			log.Warn("NATS error; missing records are repaired from peers", zap.Error(err))
			n.natsErrors.Add(1)
		}),
	}, cfg.Options...)
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return fmt.Errorf("broadcast: NATS %s: %w", cfg.URL, err)
	}
	f.nc = nc
	sub, err := nc.Subscribe(prefix+".>", f.receive)
	if err != nil {
		nc.Close()
		return fmt.Errorf("broadcast: NATS subscribe %s.>: %w", prefix, err)
	}
	// Generous pending limits: a receiver that falls behind is cut off by
	// the server (and repairs), it does not stall the cluster.
	sub.SetPendingLimits(1<<20, 1<<30)
	f.sub = sub
	n.nats = f
	n.wg.Add(1)
	go f.publishLoop(n.st.LogLast(n.self) + 1) // from New on: the loop may start after the first publishes
	return nil
}

// receive feeds a batch of someone's records into the receive path.
func (f *natsFanOut) receive(m *nats.Msg) {
	if d := f.drop.Load(); d != nil {
		if r, err := record.Decode(m.Data); err == nil && r != nil && (*d)(r.Origin()) {
			return
		}
	}
	if err := f.n.appendAll(m.Data, map[uint64]uint64{}, false, wire.MaxRecordVersion(f.n.protos.Max), nil); err != nil {
		f.n.badFrames.Add(1)
		f.n.log.Warn("dropped a bad NATS message", zap.String("subject", m.Subject), zap.Error(err))
	}
}

// publishLoop publishes this node's records as they are written, in
// batches of up to 64 KiB, from seq next, the first one written after
// New (older ones reach peers by their pulls). While a peer speaks a protocol
// below ProtocolTimed, records with time fields are left out (the peers
// that read them pull them; the older ones cannot take them at all).
func (f *natsFanOut) publishLoop(next uint64) {
	defer f.n.wg.Done()
	self := f.n.self
	subject := fmt.Sprintf("%s.%016x", f.prefix, self)
	var buf []byte
	var recs [][]byte
	for {
		changed := f.n.st.Changed()
		for next <= f.n.st.LogLast(self) {
			var end uint64
			var err error
			buf, recs, end, err = readBatch(f.n.st, self, next, batchRecords, natsBytes, byte(f.n.fleetRecords.Load()), buf[:0], recs[:0])
			lost, tooNew := errors.Is(err, store.ErrLost), errors.Is(err, errTooNew)
			if !lost && !tooNew && (err != nil || len(buf) == 0) {
				break
			}
			if len(buf) > 0 {
				if err := f.nc.Publish(subject, buf); err != nil {
					// Closed or out of reconnect buffer: peers pull what
					// they miss; carry on with what comes next.
					f.n.log.Debug("NATS publish failed", zap.Error(err))
				}
				f.n.bytesSent.Add(uint64(len(buf)))
			}
			next = end
			if lost || tooNew {
				// An own record set aside as damaged, or one that a peer
				// of an older protocol cannot read: published past, as one
				// the broker dropped (peers pull it, from a peer that
				// holds it), so that the new ones are not held back.
				next++
			}
		}
		select {
		case <-changed:
		case <-f.n.ctx.Done():
			return
		}
	}
}

func (f *natsFanOut) close() {
	f.nc.Close()
}
