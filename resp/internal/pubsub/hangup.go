package pubsub

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// hangups lets PUBLISH leave out a subscriber whose client has closed
// its connection but whose goroutine has not read the close yet (and so
// not dropped its subscriptions): Redis, which reads the close in the
// same event loop as the next command, does not count one. Each
// subscribing connection's socket is in an epoll set of its own, for
// the peer's hang-up only (EPOLLRDHUP, one-shot); before it counts
// receivers, PUBLISH asks that set without waiting (one epoll_wait) and
// marks the connections it names hung up, which no count includes
// since. Nothing else changes for them: their goroutine still runs the
// commands the client sent before it closed, then reads the close and
// drops the subscriptions. A socket leaves the set when it is closed; a
// connection without a descriptor (TLS) is not watched, and is left out
// once its goroutine reads the close. All under subscriptions.mu.
type hangups struct {
	epfd   int             // -1: not made yet
	failed bool            // epoll_create failed: nothing is watched
	conns  map[int64]*Peer // the watched connections, by id
}

// watch puts c's socket in the set, once; called when c subscribes.
func (h *hangups) watch(c *Peer) {
	if h.epfd < 0 && !h.failed {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			h.failed = true
			return
		}
		h.epfd, h.conns = fd, map[int64]*Peer{}
	}
	if h.epfd < 0 {
		return
	}
	h.conns[c.c.ID()] = c
	if c.hupWatched.Load() {
		return
	}
	sc, ok := c.c.Socket().(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(c.c.ID()), Pad: int32(c.c.ID() >> 32)}
	_ = rc.Control(func(fd uintptr) {
		c.hupWatched.Store(unix.EpollCtl(h.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev) == nil)
	})
}

// hungUp is the watched connections whose peer has closed since the
// last call (a socket's hang-up is reported once); it forgets them.
func (h *hangups) hungUp() []*Peer {
	if h.epfd < 0 {
		return nil
	}
	var evs [16]unix.EpollEvent
	var out []*Peer
	for {
		n, err := unix.EpollWait(h.epfd, evs[:], 0)
		if err != nil || n <= 0 {
			return out
		}
		for _, ev := range evs[:n] {
			id := int64(uint32(ev.Fd)) | int64(ev.Pad)<<32
			if c := h.conns[id]; c != nil {
				out = append(out, c)
				delete(h.conns, id)
			}
		}
		if n < len(evs) {
			return out
		}
	}
}

// close closes the set (Server.Close).
func (h *hangups) close() {
	if h.epfd >= 0 {
		_ = unix.Close(h.epfd)
	}
	h.epfd, h.failed = -1, true
}

// reapHungUp marks the subscribers whose clients have closed, before
// PUBLISH or PUBSUB counts receivers (live).
func (p *subscriptions) reapHungUp() {
	if p.count.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.hup.hungUp() {
		c.hungUp.Store(true)
	}
}

// closeHangups closes the hang-up set (Server.Close).
func (p *subscriptions) closeHangups() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hup.close()
}
