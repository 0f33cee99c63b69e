package resp

import (
	"container/list"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/resp/codec"
)

// Connections that must authenticate (Authenticator.MustAuthenticate at
// accept: the daemon's TCP clients while it has users) are strangers:
// they share one small pool, Config.MaxUnauthenticated, and each has
// Config.AuthTimeout to authenticate before it is closed. When the pool
// is full a new stranger closes the one that came first, so that idle
// strangers, however many one user opens, never keep out a client that
// authenticates at once; a connection leaves the pool when it
// authenticates, and then counts against its user's share
// (Node.Peer). Subscribed and tracking connections count against their
// owner's share like any other: they are never closed for room.

// Defaults of the strangers' pool (Config.MaxUnauthenticated,
// Config.AuthTimeout).
const (
	DefaultMaxUnauthenticated = 64
	DefaultAuthTimeout        = 10 * time.Second
)

// strangerLimits bound a command of a connection that must still
// authenticate, as Redis bounds an unauthenticated client's (10
// arguments, bulk strings of 16 KiB), and, cachecast's own, the whole
// command to the read buffer a connection starts with: enough for AUTH
// and HELLO, and a stranger never grows its buffer.
var strangerLimits = codec.Limits{MaxBulk: 16 << 10, MaxFrame: readBufSize, MaxArgs: 10, MaxLine: readBufSize, Unauth: true}

// stranger is a connection's place in the strangers' pool, under the
// server's mu.
type stranger struct {
	elem  *list.Element // in Server.strangers; nil once it left
	timer *time.Timer   // closes it at its AuthTimeout
}

// admitStrangerLocked counts c, which must authenticate, in the pool,
// closing the oldest stranger when the pool is full; the caller closes
// the evicted one outside the lock.
func (s *Server) admitStrangerLocked(c *conn) (evicted *conn) {
	if s.strangers.Len() >= s.cfg.MaxUnauthenticated {
		evicted = s.strangers.Front().Value.(*conn)
		s.leavePoolLocked(evicted)
		s.stats.refused.Add(1)
	}
	c.stranger.elem = s.strangers.PushBack(c)
	c.stranger.timer = time.AfterFunc(s.cfg.AuthTimeout, func() {
		s.mu.Lock()
		still := c.stranger.elem != nil
		s.mu.Unlock()
		if still {
			s.log.Debug("redis connection did not authenticate in time; closing it",
				zap.Int64("client-id", c.id), zap.Duration("auth-timeout", s.cfg.AuthTimeout))
			c.Close()
		}
	})
	return evicted
}

// leavePoolLocked takes c out of the strangers' pool (it authenticated,
// closed or was evicted).
func (s *Server) leavePoolLocked(c *conn) {
	if c.stranger.elem == nil {
		return
	}
	s.strangers.Remove(c.stranger.elem)
	c.stranger.elem = nil
	c.stranger.timer.Stop()
}

// repeer moves c's count to the share of the peer it is now (Node.Peer,
// after AUTH) and out of the strangers' pool; an error text when that
// share is full (then c is to be closed).
func (s *Server) repeer(c *conn) string {
	peer := s.peerOf(c.nc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if peer != c.peer {
		if share := s.cfg.MaxConnectionsPerPeer; share > 0 && s.peers[peer] >= share {
			return "ERR max number of clients reached for " + peer + " (--max-connections-per-uid " + strconv.Itoa(share) + ")"
		}
		s.uncountPeerLocked(c.peer)
		s.peers[peer]++
		c.peer = peer
	}
	s.leavePoolLocked(c)
	return ""
}

// restrange moves c, which must authenticate again (RESET), to the
// count of strangers and into their pool, closing the oldest stranger
// when the pool is full.
func (s *Server) restrange(c *conn) {
	peer := s.peerOf(c.nc)
	s.mu.Lock()
	s.uncountPeerLocked(c.peer)
	s.peers[peer]++
	c.peer = peer
	var evicted *conn
	if c.stranger.elem == nil {
		evicted = s.admitStrangerLocked(c)
	}
	s.mu.Unlock()
	if evicted != nil {
		evicted.Close()
	}
}

// uncountPeerLocked takes one connection off peer's count.
func (s *Server) uncountPeerLocked(peer string) {
	if s.peers[peer]--; s.peers[peer] <= 0 {
		delete(s.peers, peer)
	}
}
