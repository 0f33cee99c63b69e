package resp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/cachecast/cachecast/command"
	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
	storeview "github.com/cachecast/cachecast/store/view"
	"github.com/cachecast/cachecast/wire"
)

// storeNode is a Node over a real store, for the package's own tests; the
// daemon's node (daemon/redis.go) adds the checks, the cluster and the
// allow-lists.
type storeNode struct {
	st      *store.Store
	noReads atomic.Bool            // AuthorizeRead refuses everyone
	loading atomic.Bool            // CatchingUp says so (lag 7)
	away    atomic.Pointer[string] // Away's reason when set
	waits   atomic.Bool            // PublishWaits says so
}

func (n *storeNode) Get(topic, key string) ([]byte, bool) {
	e, ok := n.st.Get(topic, key)
	return e.Value, ok
}

func (n *storeNode) Entry(topic, key string) (storeview.Entry, bool) { return n.st.Get(topic, key) }
func (n *storeNode) Counting(topic, key string) (storeview.Entry, bool) {
	return n.st.Counting(topic, key)
}

func (n *storeNode) GetInto(buf []byte, topic, key string) ([]byte, []byte, bool) {
	e, buf, ok := n.st.GetInto(buf, topic, key)
	return e.Value, buf, ok
}

func (n *storeNode) GetMany(topics, keys []string, entries []storeview.Entry, found []bool, buf []byte) []byte {
	return n.st.GetMany(topics, keys, entries, found, buf)
}

func (n *storeNode) PendingKey(topic, key string) []storeview.PendingRecord {
	return n.st.PendingKey(topic, key)
}

func (n *storeNode) Keys(topic, prefix, after string, limit int) []string {
	return n.st.Keys(topic, prefix, after, limit)
}

func (n *storeNode) Topics() []storeview.TopicInfo  { return n.st.Topics() }
func (n *storeNode) Authorize(net.Conn) error       { return nil }
func (n *storeNode) Peer(net.Conn) string           { return "" }
func (n *storeNode) HoldMemory(net.Conn, int) error { return nil }
func (n *storeNode) ReleaseMemory(net.Conn, int)    {}

func (n *storeNode) AuthorizeRead(net.Conn) error {
	if n.noReads.Load() {
		return errNoReads
	}
	return nil
}

// errNoReads is storeNode's refusal of a reader.
var errNoReads = errors.New("test: the read role is gone")

func (n *storeNode) Publish(_ context.Context, _ net.Conn, msgs []record.Message) (Written, error) {
	res, err := n.st.PublishBatch(msgs)
	if err != nil {
		return Written{}, err
	}
	return Written{Seq: res[len(res)-1].Seq, Origin: n.st.Origin()}, nil
}

func (n *storeNode) WaitReplicas(context.Context, uint64, time.Duration) int { return 0 }

func (n *storeNode) Follow(ctx context.Context, fn func(Change), end func()) <-chan struct{} {
	return n.st.Follow(ctx, store.FollowOptions{Records: true, Events: true}, func(f store.Followed) {
		if f.Event != nil {
			fn(EventChange(f.Event))
			return
		}
		fn(RecordChange(f.Record))
	}, end)
}

func (n *storeNode) WarmReads(topics, keys []string) { n.st.WarmReads(topics, keys) }

func (n *storeNode) PublishWaits() bool { return n.waits.Load() }

func (n *storeNode) State() core.State {
	var st core.State
	if n.loading.Load() {
		st.CatchUp = &wire.CatchUpStatus{Phase: "pulling", LagRecords: 7}
	}
	if p := n.away.Load(); p != nil {
		st.Away = *p
	}
	return st
}

func (n *storeNode) Status() Status {
	return Status{Node: "test", Members: []Member{{Name: "test", State: "alive", Self: true}}}
}

// newTestServer is a server over a fresh store.
func newTestServer(tb testing.TB) (*Server, *store.Store) {
	tb.Helper()
	opts := store.DefaultOptions(tb.TempDir())
	opts.SegmentSize = 1 << 20
	opts.Flush = store.FlushAsync
	st, err := store.Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Config{Node: &storeNode{st: st}, MaxValueSize: 64 << 10, MaxFrameSize: 1 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = s.Close()
		_ = st.Close()
	})
	return s, st
}

// pipeConn is a net.Conn that reads a fixed input and keeps what is
// written: the whole client side of a connection, for the fuzz target.
type pipeConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (p *pipeConn) Read(b []byte) (int, error) {
	n, err := p.in.Read(b)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}
func (p *pipeConn) Write(b []byte) (int, error)      { return p.out.Write(b) }
func (p *pipeConn) Close() error                     { return nil }
func (p *pipeConn) LocalAddr() net.Addr              { return &net.UnixAddr{Name: "test", Net: "unix"} }
func (p *pipeConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Name: "", Net: "unix"} }
func (p *pipeConn) SetDeadline(time.Time) error      { return nil }
func (p *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (p *pipeConn) SetWriteDeadline(time.Time) error { return nil }

// session runs a whole connection over input and returns what the server
// wrote.
func runSession(s *Server, input []byte) []byte { return runChunks(s, input, 0) }

// chunkConn is a pipeConn whose reads return at most size bytes.
type chunkConn struct {
	*pipeConn
	size int
}

func (c *chunkConn) Read(b []byte) (int, error) { return c.pipeConn.Read(b[:min(len(b), c.size)]) }

// runChunks is runSession with the input read size bytes at a time (0:
// as much as a read takes).
func runChunks(s *Server, input []byte, size int) []byte {
	pc := &pipeConn{in: bytes.NewReader(input)}
	var nc net.Conn = pc
	if size > 0 {
		nc = &chunkConn{pc, size}
	}
	c := newConn(s, nc)
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.stats.connections.Add(1)
	c.serve()
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(pc.out.Bytes())
}
