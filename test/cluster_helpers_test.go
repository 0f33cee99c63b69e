package test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// A process cluster is N cachecastd processes on 127.0.0.1, each with its
// own gossip and data port, every one joining every other (its own address
// included: a seed that is the node itself counts as reached, so the first
// node up forms a cluster of one and a restarted node finds the others
// whichever of them is up).

// clusterJoinTimeout bounds a node's first join; Start waits for it.
const clusterJoinTimeout = "5s"

// clusterNode is one cachecastd process of a process cluster.
type clusterNode struct {
	*Node
	Name       string
	GossipAddr string // 127.0.0.1:port, UDP and TCP
	DataAddr   string // 127.0.0.1:port
	RedisAddr  string // 127.0.0.1:port of --redis-addr, with clusterSpec.RedisTCP
}

// clusterSpec says how to run one node of a cluster.
type clusterSpec struct {
	Name string
	// Args are flags after the cluster ones (--replication, --flush,
	// --cluster-key-file, ...).
	Args []string
	// Join picks the seeds from the gossip addresses of all the nodes
	// (default: all of them).
	Join func(gossip []string) []string
	// DataDir is the node's --data-dir (default: a new one).
	DataDir string
	// RedisTCP serves the Redis door on TCP too, on a port picked as
	// the others are (--redis-addr).
	RedisTCP bool
}

// startClusterNodes starts one node per spec and waits until each is
// ready. The ports are picked before the first node starts, so that every
// node can be given every node as a seed; a node whose port was taken in
// between is started again on new ports.
func startClusterNodes(t testing.TB, specs []clusterSpec) []*clusterNode {
	t.Helper()
	gossip := make([]string, len(specs))
	data := make([]string, len(specs))
	redis := make([]string, len(specs))
	pick := func(i int) {
		gossip[i], data[i] = freeGossipAddr(t), freeDataAddr(t)
		if specs[i].RedisTCP {
			redis[i] = freeDataAddr(t)
		}
	}
	for i := range specs {
		pick(i)
	}
	nodes := make([]*clusterNode, len(specs))
	for i, sp := range specs {
		for attempt := 1; ; attempt++ {
			join := gossip
			if sp.Join != nil {
				join = sp.Join(gossip)
			}
			n := newClusterNode(t, sp, gossip[i], data[i], redis[i], join)
			err := n.StartProcess()
			if err == nil {
				err = n.WaitReady(15 * time.Second)
			}
			if err == nil {
				nodes[i] = n
				break
			}
			if attempt < 5 && strings.Contains(n.Logs(), "address already in use") {
				t.Logf("%s: a port was taken (%v); new ports", sp.Name, err)
				n.Kill()
				pick(i)
				continue
			}
			t.Fatal(err)
		}
	}
	return nodes
}

func newClusterNode(t testing.TB, sp clusterSpec, gossipAddr, dataAddr, redisAddr string, join []string) *clusterNode {
	args := []string{
		"--gossip-addr", gossipAddr,
		"--data-addr", dataAddr,
		"--gossip-profile", "local",
		"--join", strings.Join(join, ","),
		"--join-timeout", clusterJoinTimeout,
		"--log-level", "info",
	}
	if redisAddr != "" {
		args = append(args, "--redis-addr", redisAddr)
	}
	args = append(args, sp.Args...)
	n := NewNode(t, bins, NodeOptions{Name: sp.Name, DataDir: sp.DataDir, Args: args})
	return &clusterNode{Node: n, Name: sp.Name, GossipAddr: gossipAddr, DataAddr: dataAddr, RedisAddr: redisAddr}
}

// freeGossipAddr is a 127.0.0.1 port free for both TCP and UDP, as
// memberlist binds both.
func freeGossipAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return addr
	}
	t.Fatal("no port free for both TCP and UDP on 127.0.0.1")
	return ""
}

// freeDataAddr is a free TCP port on 127.0.0.1.
func freeDataAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeKeyFile writes a cluster key file holding one fresh 16-byte key
// and returns its path and the key.
func writeKeyFile(t *testing.T, name string) (string, []byte) {
	t.Helper()
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, key
}

// clusterStatus reads GET /v1/cluster. Errors are returned, not fatal: the
// callers poll.
func (n *clusterNode) clusterStatus(ctx context.Context) (wire.ClusterStatus, error) {
	var st wire.ClusterStatus
	return st, n.getJSON(ctx, "/v1/cluster", &st)
}

// status reads GET /v1/status; errors are returned, as clusterStatus's.
func (n *clusterNode) status(ctx context.Context) (wire.Status, error) {
	var st wire.Status
	return st, n.getJSON(ctx, "/v1/status", &st)
}

// getJSON reads the JSON answer of GET path into into; an answer other
// than 200 is an error.
func (n *clusterNode) getJSON(ctx context.Context, path string, into any) error {
	hc := testkit.UnixClient(n.Socket, false, 5*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", "http://cachecast"+path, nil)
	if err != nil {
		return err
	}
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: GET %s: %w", n.Name, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s: GET %s: %w", n.Name, path, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: GET %s: %d %s", n.Name, path, res.StatusCode, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s: GET %s: %w: %s", n.Name, path, err, b)
	}
	return nil
}

// memberNames are the names of st's members in the given state ("" for
// any), sorted.
func memberNames(st wire.ClusterStatus, state string) []string {
	var out []string
	for _, m := range st.Members {
		if state == "" || m.State == state {
			out = append(out, m.Name)
		}
	}
	sort.Strings(out)
	return out
}

// fullyConnected says why st is not a view of exactly the members want,
// all alive and, but for the node itself, connected; "" when it is. With
// noLag, a member that lags behind the node on some origin is not yet
// right either.
func fullyConnected(st wire.ClusterStatus, want []string, noLag bool) string {
	got := memberNames(st, "")
	w := append([]string(nil), want...)
	sort.Strings(w)
	if strings.Join(got, ",") != strings.Join(w, ",") {
		return fmt.Sprintf("%s sees members %v, want %v", st.Node, got, w)
	}
	for _, m := range st.Members {
		switch {
		case m.State != "alive":
			return fmt.Sprintf("%s sees %s %s", st.Node, m.Name, m.State)
		case m.DataAddr == "":
			return fmt.Sprintf("%s sees %s without a data address", st.Node, m.Name)
		case m.Self != (m.Name == st.Node):
			return fmt.Sprintf("%s: member %s has self=%v", st.Node, m.Name, m.Self)
		case !m.Self && !m.Connected:
			return fmt.Sprintf("%s is not connected to %s", st.Node, m.Name)
		case noLag && len(m.Lag) > 0:
			return fmt.Sprintf("%s: %s lags %+v", st.Node, m.Name, m.Lag)
		}
	}
	return ""
}

// waitClusterUp waits until every node sees every node of want alive and
// connected (and, with noLag, caught up).
func waitClusterUp(t testing.TB, nodes []*clusterNode, want []string, noLag bool, timeout time.Duration) {
	t.Helper()
	var last []string
	why := testkit.Poll(t, timeout, func() string {
		last = last[:0]
		for _, n := range nodes {
			st, err := n.clusterStatus(t.Context())
			if err != nil {
				return err.Error()
			}
			b, _ := json.Marshal(st)
			last = append(last, string(b))
			if why := fullyConnected(st, want, noLag); why != "" {
				return why
			}
		}
		return ""
	})
	if why != "" {
		t.Fatalf("waited %v for the cluster to be %s: %s\nGET /v1/cluster:\n%s",
			timeout, strings.Join(want, ","), why, strings.Join(last, "\n"))
	}
}

// namesOf are the nodes' names.
func namesOf(nodes []*clusterNode) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}

// keyView is one key as a node serves it: the value and its stamp, or
// absent (never written, or deleted).
type keyView struct {
	Absent bool
	Value  string
	Origin uint64
	Seq    uint64
	HLC    uint64
}

func (v keyView) String() string {
	if v.Absent {
		return "absent"
	}
	val := v.Value
	if len(val) > 40 {
		val = val[:40] + "..."
	}
	return fmt.Sprintf("%q origin=%016x seq=%d hlc=%d", val, v.Origin, v.Seq, v.HLC)
}

// nodeView reads every key of keys in topic on n, with a few GETs at a
// time.
func nodeView(ctx context.Context, n *clusterNode, topic string, keys []string) (map[string]keyView, error) {
	out := make(map[string]keyView, len(keys))
	var mu sync.Mutex
	var firstErr error
	next := make(chan string)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				v, err := n.Client.Get(ctx, topic, k)
				var kv keyView
				switch {
				case errors.Is(err, client.ErrNotFound):
					kv = keyView{Absent: true}
				case err != nil:
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: GET %s/%s: %w", n.Name, topic, k, err)
					}
					mu.Unlock()
					continue
				default:
					kv = keyView{Value: string(v.Bytes), Origin: v.Origin, Seq: v.Seq, HLC: v.HLC}
				}
				mu.Lock()
				out[k] = kv
				mu.Unlock()
			}
		}()
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	return out, firstErr
}

// topicMessages is how many messages of topic n holds, -1 on an error.
func topicMessages(ctx context.Context, n *clusterNode, topic string) int64 {
	ts, err := n.Client.Topics(ctx)
	if err != nil {
		return -1
	}
	for _, ti := range ts {
		if ti.Name == topic {
			return int64(ti.Messages)
		}
	}
	return 0
}

// viewDigestOf is n's view digest from GET /v1/status: the vector the
// view covers and a digest per topic.
func viewDigestOf(ctx context.Context, n *clusterNode) (*wire.ViewDigest, error) {
	st, err := n.Client.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: status: %w", n.Name, err)
	}
	var raw struct {
		View *wire.ViewDigest `json:"view"`
	}
	if err := json.Unmarshal(st.Raw, &raw); err != nil {
		return nil, fmt.Errorf("%s: status: %w", n.Name, err)
	}
	if raw.View == nil {
		return nil, fmt.Errorf("%s: status has no view digest", n.Name)
	}
	return raw.View, nil
}

// waitConverged waits until every node of nodes reports, in /v1/status,
// the same vector and the same digest of topic (the daemons' own proof of
// identical views, rather than a GET of every key on every node), and
// returns the view of keys read from nodes[0], for the caller to check
// the values against what was written: the digest proves the nodes
// agree, not that they agree on the right thing. With wantMessages >= 0
// it first waits until every node holds that many messages of topic,
// which is cheap to poll. nodes may be a subset of the cluster (a stopped
// node is left out), which `cachecast verify` cannot be.
func waitConverged(t *testing.T, nodes []*clusterNode, topic string, keys []string, wantMessages int64, timeout time.Duration) map[string]keyView {
	t.Helper()
	start := time.Now()
	if wantMessages >= 0 {
		testkit.Until(t, timeout, fmt.Sprintf("%d messages of %s on every node", wantMessages, topic), func() string {
			var counts []string
			ok := true
			for _, n := range nodes {
				c := topicMessages(t.Context(), n, topic)
				counts = append(counts, fmt.Sprintf("%s=%d", n.Name, c))
				ok = ok && c == wantMessages
			}
			if ok {
				return ""
			}
			return strings.Join(counts, " ")
		})
	}
	var digest string
	why := testkit.Poll(t, timeout-time.Since(start), func() string {
		var first *wire.ViewDigest
		for _, n := range nodes {
			d, err := viewDigestOf(t.Context(), n)
			switch {
			case err != nil:
				return err.Error()
			case d.Topics[topic] == "":
				return n.Name + " has no digest of " + topic
			case first == nil:
				first = d
			case d.Topics[topic] != first.Topics[topic] || !maps.Equal(d.Vector, first.Vector):
				return "the digests differ"
			}
		}
		digest = first.Topics[topic]
		return ""
	})
	if why != "" {
		// Name the keys that differ, to explain the failure.
		views := make([]map[string]keyView, len(nodes))
		digests := make([]string, len(nodes))
		for i, n := range nodes {
			views[i], _ = nodeView(t.Context(), n, topic, keys)
			if d, err := viewDigestOf(t.Context(), n); err == nil {
				digests[i] = fmt.Sprintf("%.16s at %v", d.Topics[topic], d.Vector)
			} else {
				digests[i] = err.Error()
			}
		}
		t.Fatalf("the views of %s did not converge within %v (%s): %s", topic, timeout, why, describeDiff(nodes, keys, views, digests))
	}
	t.Logf("%d nodes report the same digest of %s (%.16s) %v after the wait began",
		len(nodes), topic, digest, time.Since(start).Round(time.Millisecond))
	view, err := nodeView(t.Context(), nodes[0], topic, keys)
	if err != nil {
		t.Fatal(err)
	}
	return view
}

// waitVerified waits until `cachecast verify`, run against n, exits 0:
// every live node of the cluster holds the same view at a common vector.
func waitVerified(t *testing.T, n *clusterNode, timeout time.Duration) {
	t.Helper()
	var r cliResult
	if testkit.Poll(t, timeout, func() string {
		if r = cli(t, n.Node, "", "verify"); r.code != 0 {
			return "exit status not 0"
		}
		return ""
	}) != "" {
		t.Fatalf("cachecast verify did not pass within %v: exit %d\n%s%s", timeout, r.code, r.stdout, r.stderr)
	}
	t.Logf("cachecast verify:\n%s", r.stdout)
}

// describeDiff names the digests and the first keys on which the views
// differ.
func describeDiff(nodes []*clusterNode, keys []string, views []map[string]keyView, digests []string) string {
	var b strings.Builder
	for i, n := range nodes {
		fmt.Fprintf(&b, "%s: %s; ", n.Name, digests[i])
	}
	shown := 0
	for _, k := range keys {
		diff := false
		for i := range views {
			if views[i][k] != views[0][k] {
				diff = true
			}
		}
		if !diff {
			continue
		}
		if shown++; shown > 5 {
			b.WriteString("...")
			break
		}
		fmt.Fprintf(&b, "key %q:", k)
		for i, n := range nodes {
			fmt.Fprintf(&b, " %s=%v", n.Name, views[i][k])
		}
		b.WriteString("; ")
	}
	return b.String()
}

// clusterValue is the value of the counter-th write of key: it names both,
// so a reader knows which write it sees.
func clusterValue(key string, counter int) []byte {
	return []byte(key + "#" + strconv.Itoa(counter) + "#" + strings.Repeat("v", counter%17))
}

// clusterCounter is the counter of a value made by clusterValue for key,
// -1 if it is not one.
func clusterCounter(key, v string) int {
	rest, ok := strings.CutPrefix(v, key+"#")
	if !ok {
		return -1
	}
	i := strings.IndexByte(rest, '#')
	if i < 0 {
		return -1
	}
	c, err := strconv.Atoi(rest[:i])
	if err != nil || v != string(clusterValue(key, c)) {
		return -1
	}
	return c
}

// originSeqs subscribes to topic on n from the earliest message and
// collects the seqs of origin it holds, until every seq in want was seen or
// timeout passes. It returns the seqs of want it did not see, and the
// highest seq of origin it saw.
func originSeqs(t *testing.T, n *clusterNode, topic string, origin uint64, want map[uint64]bool, timeout time.Duration) (missing []uint64, highest uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	left := make(map[uint64]bool, len(want))
	for s := range want {
		left[s] = true
	}
	// Read at least the messages the topic holds now, to see the highest
	// seq too; the callers write nothing meanwhile.
	total := topicMessages(ctx, n, topic)
	sub, err := n.Client.Subscribe(ctx, topic, client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatalf("%s: subscribe: %v", n.Name, err)
	}
	defer sub.Close()
	for read := int64(0); len(left) > 0 || read < total; read++ {
		ev, err := sub.Next()
		if err != nil {
			break // the deadline: report what is missing
		}
		if ev.Origin == origin {
			delete(left, ev.Seq)
			highest = max(highest, ev.Seq)
		}
	}
	for s := range left {
		missing = append(missing, s)
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
	return missing, highest
}

// The data port's handshake and frames (protocol 2), written out here from
// broadcast/wire/handshake.go and broadcast/wire/frame.go so that a test can reach
// the frame decoder behind them as a peer would (and fail it on purpose).
const (
	dataHelloMagic = "CCDATA1"
	dataProtocol   = 2
	dataHelloSize  = 7 + 1 + 8 + 8 + 32 // magic, protocol, flags, node ID, nonce
	dataMACSize    = sha256.Size
)

// dataMAC is HMAC-SHA256(key, role | dialer hello | listener hello), or
// zeros without a key.
func dataMAC(key []byte, role string, dialer, listener []byte) []byte {
	if len(key) == 0 {
		return make([]byte, dataMACSize)
	}
	return hmacOf(key, []byte(role), dialer, listener)
}

func hmacOf(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// dataConn is a dialed data-port connection after the handshake: it seals
// the frames it is asked for with the session key, numbered from 0.
type dataConn struct {
	net.Conn
	key []byte // dialer->listener session key
	seq uint64
}

// frame is a sealed frame: length (type and payload), type, payload, and
// HMAC-SHA256(key, frame number | length | type | payload).
func (c *dataConn) frame(typ byte, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(1+len(payload)))
	b = append(b, typ)
	b = append(b, payload...)
	sum := hmacOf(c.key, binary.LittleEndian.AppendUint64(nil, c.seq), b)
	c.seq++
	return append(b, sum...)
}

// dataDial connects to a data port and runs the dialer's side of the
// handshake as node, proving key (nil: no key). It sends its MAC whatever
// the listener proved; listenerOK says whether the listener's MAC was
// made with key.
func dataDial(addr string, key []byte, node uint64) (conn *dataConn, listenerOK bool, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, false, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	dh := make([]byte, dataHelloSize)
	copy(dh, dataHelloMagic)
	dh[7] = dataProtocol
	binary.LittleEndian.PutUint64(dh[16:], node)
	if _, err := rand.Read(dh[24:]); err != nil {
		c.Close()
		return nil, false, err
	}
	if _, err := c.Write(dh); err != nil {
		c.Close()
		return nil, false, err
	}
	buf := make([]byte, dataHelloSize+dataMACSize)
	if _, err := io.ReadFull(c, buf); err != nil {
		c.Close()
		return nil, false, fmt.Errorf("reading the listener's hello: %w", err)
	}
	lh := buf[:dataHelloSize]
	if string(lh[:7]) != dataHelloMagic {
		c.Close()
		return nil, false, fmt.Errorf("listener hello %x", lh)
	}
	listenerOK = hmac.Equal(buf[dataHelloSize:], dataMAC(key, "listener", dh, lh))
	if _, err := c.Write(dataMAC(key, "dialer", dh, lh)); err != nil {
		c.Close()
		return nil, false, err
	}
	_ = c.SetDeadline(time.Time{})
	// Both sides proved key: it is the listener's and the dialer's.
	secret := hmacOf(key, []byte("cachecast session"), binary.LittleEndian.AppendUint32(nil, uint32(len(key))), key, dh, lh)
	return &dataConn{Conn: c, key: hmacOf(secret, []byte("dialer->listener"))}, listenerOK, nil
}

// closedByPeer reads from c (discarding what the peer sends) until the
// peer closes it, and reports whether that happened within timeout.
func closedByPeer(c net.Conn, timeout time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true // EOF (io.Copy's nil) or a reset
}
