// Package faultnet is a fault-injecting layer over real TCP for tests of
// nodes that dial each other's data ports (package broadcast, and
// daemons through their test hook daemonhooks.Hooks.DataDial): it refuses
// the dials of a node cut off from an address, closes their open
// connections, can tamper with the bytes a node writes, and can delay its
// writes (a slow link). Nothing is simulated: the connections are
// the kernel's. The same cuts partition gossip too (Unreachable, for
// gossip.Config.Unreachable): one Net can cut a node off from its peers'
// data and gossip addresses alike.
package faultnet

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// ErrCut is the error of a dial between nodes that are cut off.
var ErrCut = errors.New("faultnet: cut")

// Net is the fault network. Its methods may be called from any goroutine.
type Net struct {
	mu    sync.RWMutex       // read by every write (tamper) and dial
	cut   map[[2]string]bool // (from node, to addr)
	conns map[[2]string][]net.Conn
	// tamper, when set, may change the bytes a node writes on the
	// connections it dialed, in place, before they reach the wire.
	tamper func(from string, b []byte)
	// delay, when set, is how long a write of node from to addr waits
	// before it goes: a slow link, in one direction.
	delay func(from, addr string) time.Duration
}

// New makes a network with nothing cut.
func New() *Net {
	return &Net{cut: map[[2]string]bool{}, conns: map[[2]string][]net.Conn{}}
}

// Dialer is the dial function of the node named from: TCP, refused while
// from is cut off from the address.
func (f *Net) Dialer(from string) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		k := [2]string{from, addr}
		if f.IsCut(from, addr) {
			return nil, ErrCut
		}
		// Not under the lock: with connections opened on demand, dials
		// are many, and every write on the network reads the lock.
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cut[k] { // cut while dialing
			c.Close()
			return nil, ErrCut
		}
		f.conns[k] = append(f.conns[k], c)
		return &tamperConn{Conn: c, f: f, from: from, addr: addr}, nil
	}
}

// Cut stops traffic from node from to the data port at addr (one way:
// from can no longer push to it, nor pull from it), closing what is open.
func (f *Net) Cut(from, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]string{from, addr}
	f.cut[k] = true
	for _, c := range f.conns[k] {
		c.Close()
	}
	f.conns[k] = nil
}

// IsCut reports whether from is cut off from addr.
func (f *Net) IsCut(from, addr string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cut[[2]string{from, addr}]
}

// Unreachable is the gossip hook of the node named from
// (gossip.Config.Unreachable): true for an address from is cut off from,
// whose packets memberlist's transport then drops and whose dials fail.
// Cutting gossip both ways takes both Cut calls, as for data ports.
func (f *Net) Unreachable(from string) func(addr string) bool {
	return func(addr string) bool { return f.IsCut(from, addr) }
}

// Drop closes the connections from node from to addr, without refusing
// the next dial: the connection broke, the peer is still there.
func (f *Net) Drop(from, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]string{from, addr}
	for _, c := range f.conns[k] {
		c.Close()
	}
	f.conns[k] = nil
}

// Dials is how many connections from has dialed to addr since they were
// last cut or dropped.
func (f *Net) Dials(from, addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns[[2]string{from, addr}])
}

// Uncut lifts the cut from node from to addr alone (the nodes dial
// again as they retry); the other cuts stay.
func (f *Net) Uncut(from, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cut, [2]string{from, addr})
}

// Heal lifts every cut (connections are dialed again as the nodes retry).
func (f *Net) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
}

// SetTamper sets (nil: clears) the function that may change, in place,
// the bytes a node writes on the connections it dialed.
func (f *Net) SetTamper(tamper func(from string, b []byte)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tamper = tamper
}

// tamperConn hands what is written on it to the tamper function first: a
// man in the middle on the data port.
type tamperConn struct {
	net.Conn
	f    *Net
	from string
	addr string
}

// SetDelay sets (nil: clears) the function that says how long each write
// of node from on a connection it dialed to addr waits before it goes:
// a slow link, in that direction. The wait holds the writer, as a full
// socket buffer would, so what it writes next goes after it.
func (f *Net) SetDelay(delay func(from, addr string) time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = delay
}

func (c *tamperConn) Write(b []byte) (int, error) {
	c.f.mu.RLock()
	tamper, delay := c.f.tamper, c.f.delay
	c.f.mu.RUnlock()
	if delay != nil {
		if d := delay(c.from, c.addr); d > 0 {
			time.Sleep(d) // the link's latency, not a wait for a condition
		}
	}
	if tamper != nil {
		b = bytes.Clone(b)
		tamper(c.from, b)
	}
	return c.Conn.Write(b)
}
