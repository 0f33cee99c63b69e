// Package natsfan is the NATS fan-out of package broadcast (see "NATS"
// in its doc): a node publishes each batch of its own records once, on
// <prefix>.<origin in hex>, and subscribes to <prefix>.> for everyone's,
// which it hands to the node's receive path. NATS core is at most once:
// what it drops is found missing by its seq and pulled on the data port.
package natsfan

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast/internal/batch"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
)

// Source is what the fan-out reads of the node's store.
type Source interface {
	batch.Reader
	// LogLast is the highest seq of origin in the log.
	LogLast(origin uint64) uint64
	// Changed is closed at the next write to the store.
	Changed() <-chan struct{}
}

// Params is what a FanOut needs of its node.
type Params struct {
	URL     string        // the NATS servers, comma-separated
	Options []nats.Option // extra connection options (credentials, TLS)
	Prefix  string        // starts every subject (empty: "cachecast")
	Self    uint64        // the node's origin: the records it publishes
	Source  Source
	// Deliver takes a message of another node's records into the node's
	// receive path; an error drops the message (logged).
	Deliver func(data []byte) error
	// MaxVersion is the newest record version every peer reads: a newer
	// record is not published (the peers that read it pull it).
	MaxVersion func() byte
	// Sent counts the bytes of records published.
	Sent *atomic.Uint64
	Log  *zap.Logger
}

// FanOut is a node's connection to NATS and its publisher.
type FanOut struct {
	p      Params
	nc     *nats.Conn
	prefix string
	stop   chan struct{}
	wg     sync.WaitGroup

	disconnects, errors atomic.Uint64
	// drop, set only by tests, discards deliveries (a fault-injecting
	// wrapper around the real transport).
	drop atomic.Pointer[func(origin uint64) bool]
}

// Start connects to NATS, subscribes, and publishes the records written
// from now on until Close.
func Start(p Params) (*FanOut, error) {
	prefix := p.Prefix
	if prefix == "" {
		prefix = "cachecast"
	}
	if strings.ContainsAny(prefix, " *>") || strings.HasSuffix(prefix, ".") || strings.HasPrefix(prefix, ".") {
		return nil, fmt.Errorf("broadcast: bad NATS subject prefix %q", prefix)
	}
	f := &FanOut{p: p, prefix: prefix, stop: make(chan struct{})}
	nc, err := nats.Connect(p.URL, append(f.options(p.Log.Named("nats")), p.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("broadcast: NATS %s: %w", p.URL, err)
	}
	f.nc = nc
	sub, err := nc.Subscribe(prefix+".>", f.receive)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("broadcast: NATS subscribe %s.>: %w", prefix, err)
	}
	// Generous pending limits: a receiver that falls behind is cut off by
	// the server (and repairs), it does not stall the cluster.
	sub.SetPendingLimits(1<<20, 1<<30)
	f.wg.Add(1)
	go f.publishLoop(p.Source.LogLast(p.Self) + 1) // from Start on: the loop may start after the first publishes
	return f, nil
}

// options are the connection's options: reconnect for good, and log and
// count what is lost meanwhile (the data port repairs it).
func (f *FanOut) options(log *zap.Logger) []nats.Option {
	return []nats.Option{
		nats.Name(fmt.Sprintf("cachecast %016x", f.p.Self)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("disconnected from NATS; records are repaired from peers", zap.Error(err))
			f.disconnects.Add(1)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("reconnected to NATS", zap.String("server", c.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// A slow consumer loses messages: anti-entropy pulls them.
			log.Warn("NATS error; missing records are repaired from peers", zap.Error(err))
			f.errors.Add(1)
		}),
	}
}

// receive feeds a batch of someone's records into the receive path.
func (f *FanOut) receive(m *nats.Msg) {
	if d := f.drop.Load(); d != nil {
		if r, err := record.Decode(m.Data); err == nil && r != nil && (*d)(r.Origin()) {
			return
		}
	}
	if err := f.p.Deliver(m.Data); err != nil {
		f.p.Log.Warn("dropped a bad NATS message", zap.String("subject", m.Subject), zap.Error(err))
	}
}

// publishLoop publishes this node's records as they are written, in
// batches of up to batch.NATSBytes, from seq next, the first one written
// after Start (older ones reach peers by their pulls). A record newer
// than every peer reads (MaxVersion) is left out: the peers that read it
// pull it; the older ones cannot take it at all.
func (f *FanOut) publishLoop(next uint64) {
	defer f.wg.Done()
	self, st := f.p.Self, f.p.Source
	subject := fmt.Sprintf("%s.%016x", f.prefix, self)
	var buf []byte
	var recs [][]byte
	for {
		changed := st.Changed()
		for next <= st.LogLast(self) {
			var end uint64
			var err error
			buf, recs, end, err = batch.Read(st, self, next, batch.Records, batch.NATSBytes, f.p.MaxVersion(), buf[:0], recs[:0])
			lost, tooNew := errors.Is(err, store.ErrLost), errors.Is(err, batch.ErrTooNew)
			if !lost && !tooNew && (err != nil || len(buf) == 0) {
				break
			}
			if len(buf) > 0 {
				if err := f.nc.Publish(subject, buf); err != nil {
					// Closed or out of reconnect buffer: peers pull what
					// they miss; carry on with what comes next.
					f.p.Log.Debug("NATS publish failed", zap.Error(err))
				}
				f.p.Sent.Add(uint64(len(buf)))
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
		case <-f.stop:
			return
		}
	}
}

// Close stops the publisher, closes the connection and waits for the
// publisher to end.
func (f *FanOut) Close() {
	close(f.stop)
	f.nc.Close()
	f.wg.Wait()
}

// Disconnects counts the disconnections from NATS.
func (f *FanOut) Disconnects() uint64 { return f.disconnects.Load() }

// Errors counts NATS errors (slow consumer and the like).
func (f *FanOut) Errors() uint64 { return f.errors.Load() }

// Conn is the connection to NATS, for tests that look at which server it
// reached.
func (f *FanOut) Conn() *nats.Conn { return f.nc }

// SetDrop makes the fan-out discard the deliveries of the origins drop
// says yes to: tests cut NATS as they cut the data port.
func (f *FanOut) SetDrop(drop func(origin uint64) bool) { f.drop.Store(&drop) }
