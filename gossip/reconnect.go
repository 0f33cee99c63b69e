package gossip

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// failure is a member that failed, as the reconnect loop remembers it.
type failure struct {
	addr  string // its gossip address, ip:port
	id    uint64
	since time.Time
}

// failedLocked remembers a member that failed or left, to call it back:
// a member that left gracefully is tried like a failed one, as a node
// stopped with SIGTERM and started again without seeds (or with a seed
// that is down) finds its cluster only if someone calls it. Not called
// back: a member without an address, or one whose address an alive
// member holds now (a node restarted under another name). g.mu must be
// held.
func (g *Gossip) failedLocked(m Member) {
	delete(g.failed, m.Name)
	if (m.State != StateDead && m.State != StateLeft) || m.Addr == "" {
		return
	}
	for _, e := range g.members {
		if e.m.State == StateAlive && e.m.Addr == m.Addr {
			return
		}
	}
	g.failed[m.Name] = failure{addr: m.Addr, id: m.ID, since: time.Now()}
}

// rejoinedLocked forgets the failures of a member that joined, by name,
// by ID (a node back under another name) or by address (another node in
// its place), and logs a comeback. g.mu must be held.
func (g *Gossip) rejoinedLocked(m Member) {
	for name, f := range g.failed {
		if name != m.Name && f.id != m.ID && f.addr != m.Addr {
			continue
		}
		delete(g.failed, name)
		fields := []zap.Field{zap.String("member", m.Name), zap.String("addr", m.Addr),
			zap.Duration("failed-for", time.Since(f.since).Round(time.Millisecond))}
		if name != m.Name {
			fields = append(fields, zap.String("failed-as", name))
		}
		g.log.Info("failed member rejoined", fields...)
	}
}

// Forget stops calling back the member name, one removed for good: it is
// dropped from the members that failed or left (the remembered ones
// included). It reports whether it was there. A member that joins again
// later is a member as any other.
func (g *Gossip) Forget(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.failed[name]
	delete(g.failed, name)
	return ok
}

// Reconnects returns how many times the reconnect loop has tried to join
// a failed member or, alone, the seeds (tries), and how many of those
// tries merged this node with another member (merged). Safe for
// concurrent use.
func (g *Gossip) Reconnects() (tries, merged uint64) {
	return g.reconnectTries.Load(), g.reconnectsWon.Load()
}

// reconnectLoop is Serf's reconnect: every ReconnectInterval it tries to
// join one failed or departed member (Config.Remembered included), and
// the seeds when no other member is alive.
// memberlist gossips to a dead member only for its GossipToTheDeadTime,
// then forgets it, so without this loop the two sides of a partition
// that lasted longer would never merge again. It ends at Leave (a node
// that left must not join) or Shutdown.
func (g *Gossip) reconnectLoop() {
	defer g.loop.Done()
	t := time.NewTicker(g.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.leftCh:
			return
		case <-g.shutdownCh:
			return
		}
		if name, f, ok := g.pickFailed(time.Now()); ok {
			g.reconnect("failed-member", []string{f.addr},
				zap.String("member", name), zap.Duration("failed-for", time.Since(f.since).Round(time.Millisecond)))
		}
		if seeds := g.seeds.Load(); seeds != nil && g.aliveOthers() == 0 {
			g.reconnect("seeds", *seeds)
		}
	}
}

// pickFailed forgets the failures older than ReconnectTimeout and picks
// one of the others at random, as Serf does: with probability failed /
// alive (itself included), so that a large cluster with few failed
// members tries about as often as a small one, not once per node.
func (g *Gossip) pickFailed(now time.Time) (string, failure, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, f := range g.failed {
		if now.Sub(f.since) > g.cfg.ReconnectTimeout {
			delete(g.failed, name)
			g.log.Info("stopped reconnecting to a failed member", zap.String("member", name),
				zap.String("addr", f.addr), zap.Duration("reconnect-timeout", g.cfg.ReconnectTimeout))
		}
	}
	if len(g.failed) == 0 {
		return "", failure{}, false
	}
	if rand.Float64() > float64(len(g.failed))/float64(g.aliveOthersLocked()+1) {
		return "", failure{}, false
	}
	i := rand.N(len(g.failed))
	for name, f := range g.failed {
		if i == 0 {
			return name, f, true
		}
		i--
	}
	return "", failure{}, false // not reached
}

// aliveOthers counts the other members alive.
func (g *Gossip) aliveOthers() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.aliveOthersLocked()
}

// aliveOthersLocked is aliveOthers with g.mu held.
func (g *Gossip) aliveOthersLocked() int {
	n := 0
	for _, e := range g.members {
		if e.m.State == StateAlive {
			n++
		}
	}
	return n
}

// reconnect joins addrs as Join's rounds do (same timeouts, keys and
// checks), bounded by reconnectBound. A try that merged this node with another member
// is logged at info; a failed one at debug, as it fails every interval
// while the other side is down.
func (g *Gossip) reconnect(what string, addrs []string, fields ...zap.Field) {
	ctx, cancel := context.WithTimeout(context.Background(), g.reconnectBound)
	defer cancel()
	before := g.aliveOthers()
	g.reconnectTries.Add(1)
	n, errs, err := g.joinRound(ctx, addrs)
	fields = append(fields, zap.Strings("addrs", addrs))
	if err != nil || n == 0 {
		if err == nil {
			err = errors.New(seedErrors(addrs, errs))
		}
		g.log.Debug("reconnect failed", append(fields, zap.String("to", what), zap.Error(err))...)
		return
	}
	after := g.aliveOthers()
	if after <= before {
		// A seed that is this node itself, or a member already back.
		g.log.Debug("reconnect merged nobody new", append(fields, zap.String("to", what))...)
		return
	}
	g.reconnectsWon.Add(1)
	g.log.Info("reconnected to the cluster", append(fields, zap.String("to", what),
		zap.Int("alive-before", before), zap.Int("alive-after", after))...)
}

// errUnreachable is the error of a dial that Config.Unreachable refused.
var errUnreachable = errors.New("gossip: unreachable (Config.Unreachable)")

// cutTransport is memberlist's transport with Config.Unreachable applied
// to what this node sends: packets to an unreachable address are dropped
// (as a network drops them) and dials of it fail. Partitioning two nodes
// both ways takes both of them marking the other unreachable.
type cutTransport struct {
	*memberlist.NetTransport
	unreachable func(addr string) bool
}

var _ memberlist.NodeAwareTransport = (*cutTransport)(nil)

func (t *cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *cutTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.unreachable(a.Addr) {
		return time.Now(), nil // lost on the way
	}
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *cutTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.unreachable(a.Addr) {
		return nil, errUnreachable
	}
	return t.NetTransport.DialAddressTimeout(a, timeout)
}
