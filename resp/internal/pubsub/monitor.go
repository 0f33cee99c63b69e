package pubsub

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// monitors are the connections in MONITOR, which receive every command
// the server runs as Redis writes it.
type monitors struct {
	mu    sync.Mutex
	conns map[*Peer]struct{}
	n     atomic.Int32 // len(conns), read without the lock on every command
}

func (m *monitors) add(c *Peer) {
	m.mu.Lock()
	if m.conns == nil {
		m.conns = map[*Peer]struct{}{}
	}
	m.conns[c] = struct{}{}
	m.n.Store(int32(len(m.conns)))
	m.mu.Unlock()
}

func (m *monitors) drop(c *Peer) {
	if m.n.Load() == 0 {
		return
	}
	m.mu.Lock()
	delete(m.conns, c)
	m.n.Store(int32(len(m.conns)))
	m.mu.Unlock()
}

// has says whether c is a monitor.
func (m *monitors) has(c *Peer) bool {
	if m.n.Load() == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.conns[c]
	return ok
}

// feed sends the command a, which c runs, to every monitor, as Redis's
// replicationFeedMonitors writes it: +<unix seconds.micros> [0 <addr>]
// and each argument quoted. AUTH and HELLO, which may carry a password,
// and MONITOR are not sent, as Redis does not send them.
func (m *monitors) feed(c Client, cmd *session.Command, a [][]byte) {
	if cmd != nil && (cmd.Name == "auth" || cmd.Name == "hello" || cmd.Name == "monitor") {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.conns) == 0 {
		return
	}
	now := time.Now()
	b := make([]byte, 0, 64)
	b = append(b, '+')
	b = strconv.AppendInt(b, now.Unix(), 10)
	b = append(b, '.')
	us := strconv.Itoa(now.Nanosecond() / 1000)
	for range 6 - len(us) {
		b = append(b, '0')
	}
	b = append(b, us...)
	b = append(b, " [0 "...)
	b = append(b, c.MonitorAddr()...)
	b = append(b, ']')
	for _, arg := range a {
		b = append(b, ' ')
		b = appendRepr(b, arg)
	}
	b = append(b, '\r', '\n')
	for mc := range m.conns {
		mc.c.Push(b)
	}
}

// appendRepr quotes s as Redis's sdscatrepr does: in double quotes, with
// \\, \", \n, \r, \t, \a, \b and \xHH for the other unprintable bytes.
func appendRepr(b, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, ch := range s {
		switch ch {
		case '\\', '"':
			b = append(b, '\\', ch)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\a':
			b = append(b, '\\', 'a')
		case '\b':
			b = append(b, '\\', 'b')
		default:
			if ch >= 0x20 && ch < utf8.RuneSelf && ch != 0x7f {
				b = append(b, ch)
			} else {
				b = append(b, '\\', 'x', hex[ch>>4], hex[ch&0xf])
			}
		}
	}
	return append(b, '"')
}

// cmdMonitor makes c a monitor, for the admin role: it is answered OK,
// then sent every command the server runs. It is not closed for
// idleness, as it sends nothing.
func cmdMonitor(s *session.Session, _ [][]byte) {
	c := peerOf(s)
	if !c.c.AuthorizeAdmin("MONITOR") {
		return
	}
	c.sess.OK()
	c.pushed.Store(true)
	c.hub.monitors.add(c)
}
