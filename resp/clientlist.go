package resp

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// shownState is what CLIENT LIST and CLIENT INFO show of a connection
// that only its own goroutine changes: copied there after each command
// (show), read by any connection.
type shownState struct {
	idleSince atomic.Int64           // UnixNano of the last read before the last command
	cmd       atomic.Pointer[string] // the last command's full name (client|list)
	multi     atomic.Int32           // the commands queued after MULTI, -1 outside one
	flags     atomic.Pointer[string] // Redis's flag letters but P and U
	redir     atomic.Int64           // CLIENT TRACKING's REDIRECT, 0 without, -1 when off
}

// Redis's flag letters of the states show copies.
var (
	flagsNone     = ""
	flagsMulti    = "x"
	flagsTrack    = "t"
	flagsTrackB   = "tB"
	flagsMultiTr  = "xt"
	flagsMultiTrB = "xtB"
)

// showCmd records cmd (nil: unknown), run with the arguments a, as the
// connection's last command, before it runs, as Redis's lastcmd.
func (c *conn) showCmd(cmd *session.Command, a [][]byte) {
	switch {
	case cmd == nil:
	case cmd.Subcommands != nil && len(a) > 1:
		name := cmd.Name + "|" + strings.ToLower(string(a[1]))
		c.shown.cmd.Store(&name)
	case c.shown.cmd.Load() != &cmd.Name:
		c.shown.cmd.Store(&cmd.Name)
	}
}

// show copies the connection's state for CLIENT LIST; called under mu
// by the connection's goroutine after each command.
func (c *conn) show() {
	c.shown.idleSince.Store(c.readAt.UnixNano())
	multi := int32(-1)
	if c.inMulti {
		multi = int32(len(c.queued))
	}
	c.shown.multi.Store(multi)
	on, bcast, redirect := c.ps.Tracking()
	f := &flagsNone
	switch {
	case c.inMulti && on && bcast:
		f = &flagsMultiTrB
	case c.inMulti && on:
		f = &flagsMultiTr
	case c.inMulti:
		f = &flagsMulti
	case on && bcast:
		f = &flagsTrackB
	case on:
		f = &flagsTrack
	}
	if c.shown.flags.Load() != f {
		c.shown.flags.Store(f)
	}
	redir := int64(-1)
	if on {
		redir = redirect
	}
	c.shown.redir.Store(redir)
}

// connAddrs are a connection's CLIENT LIST addr and laddr, as Redis
// writes them (ip:port; a Unix socket's path and ":0"), and its socket's
// file descriptor (-1 when the connection has none).
func connAddrs(nc net.Conn) (addr, laddr string, fd int) {
	laddr = nc.LocalAddr().String()
	addr = nc.RemoteAddr().String()
	if _, unix := nc.LocalAddr().(*net.UnixAddr); unix {
		laddr += ":0"
		addr = laddr // Redis names a Unix client by the socket it came through
	}
	fd = -1
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			_ = raw.Control(func(u uintptr) { fd = int(u) })
		}
	}
	return addr, laddr, fd
}

// infoLine is the connection's line of CLIENT LIST and CLIENT INFO, with
// Redis 7.2's fields in its order. The buffer fields Redis reports of
// its own allocator (qbuf, qbuf-free, argv-mem, multi-mem, rbs, rbp,
// obl, oll, omem, tot-mem) are written 0, and events empty: the server
// does not keep them per connection.
func (c *conn) infoLine() string {
	m := c.meta()
	now := time.Now()
	subs, psubs := c.s.hub.Counts(&c.ps)
	flags := ""
	if f := c.shown.flags.Load(); f != nil {
		flags = *f
	}
	if subs+psubs > 0 {
		flags = "P" + flags
	}
	if c.s.hub.Monitors(&c.ps) {
		flags = "O" + flags
	}
	if c.unix {
		flags += "U"
	}
	if flags == "" {
		flags = "N"
	}
	cmd := "NULL"
	if p := c.shown.cmd.Load(); p != nil {
		cmd = *p
	}
	var b strings.Builder
	field := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	field("id", itoa(c.id))
	field("addr", c.addr)
	field("laddr", c.laddr)
	field("fd", strconv.Itoa(c.sockFD))
	field("name", m.name)
	field("age", itoa(int64(now.Sub(c.created).Seconds())))
	field("idle", itoa(int64(now.Sub(time.Unix(0, c.shown.idleSince.Load())).Seconds())))
	field("flags", flags)
	field("db", "0")
	field("sub", strconv.Itoa(subs))
	field("psub", strconv.Itoa(psubs))
	field("ssub", "0")
	field("multi", itoa(int64(c.shown.multi.Load())))
	for _, k := range []string{"qbuf", "qbuf-free", "argv-mem", "multi-mem", "rbs", "rbp", "obl", "oll", "omem", "tot-mem"} {
		field(k, "0")
	}
	field("events", "r")
	field("cmd", cmd)
	field("user", "default")
	field("redir", itoa(c.shown.redir.Load()))
	field("resp", strconv.Itoa(m.proto))
	field("lib-name", m.libName)
	field("lib-ver", m.libVer)
	b.WriteByte('\n')
	return b.String()
}

// Connection metadata, read by other connections (CLIENT LIST) under its
// own small lock.

type connMeta struct {
	name, libName, libVer string
	proto                 int
}

var metaMu sync.Mutex

func (c *conn) meta() connMeta {
	metaMu.Lock()
	defer metaMu.Unlock()
	m := connMeta{name: c.name, libName: c.libName, libVer: c.libVer, proto: c.protoShared}
	return m
}

func (c *conn) setName(n string) {
	metaMu.Lock()
	c.name = n
	metaMu.Unlock()
}

func (c *conn) setLib(name, ver string) {
	metaMu.Lock()
	if name != "" {
		c.libName = name
	}
	if ver != "" {
		c.libVer = ver
	}
	metaMu.Unlock()
}

// setProto sets the protocol (HELLO); protoShared is the copy the
// follower reads when it builds a push.
func (c *conn) setProto(p int) {
	c.Proto = p
	metaMu.Lock()
	c.protoShared = p
	metaMu.Unlock()
}

// ProtoNow is its protocol, read from any goroutine (pubsub.Client).
func (c *conn) ProtoNow() int {
	metaMu.Lock()
	defer metaMu.Unlock()
	return c.protoShared
}
