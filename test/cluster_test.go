package test

import (
	"encoding/binary"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// clusterSeed makes the randomized cluster tests reproducible: every one
// logs the seed it ran with.
var clusterSeed = flag.Uint64("cluster.seed", 0, "seed of the randomized cluster tests (0: from the clock)")

// testSeed is the seed of one test, logged.
func testSeed(t *testing.T) uint64 {
	s := *clusterSeed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -cluster.seed=%d)", s, s)
	return s
}

// valuesInFileArg is the --view-file-values a randomized test draws from
// its seed, logged: said either way, so that both settings stay tested
// whatever the daemon's default.
func valuesInFileArg(t *testing.T, seed uint64) string {
	t.Helper()
	on := mrand.New(mrand.NewPCG(seed, 0xf11e)).IntN(2) == 1
	t.Logf("values in the view file: %v", on)
	return "--view-file-values=" + strconv.FormatBool(on)
}

func threeNodes(args ...string) []clusterSpec {
	return []clusterSpec{{Name: "a", Args: args}, {Name: "b", Args: args}, {Name: "c", Args: args}}
}

// stopAll stops the nodes still running with SIGTERM; each must exit 0.
func stopAll(nodes []*clusterNode) {
	for _, n := range nodes {
		if n.Running() {
			n.Stop()
		}
	}
}

// write is one acknowledged publish.
type write struct {
	key    string
	value  string
	delete bool
	res    client.PutResult
}

// TestClusterConverges writes on every node of three at once, the same
// keys from different nodes included, and checks that all views become
// identical (value and stamp of every key) and that each key holds the
// write the (HLC, origin) rule picks among all acknowledged writes. The
// seed draws --view-file-values too (valuesInFileArg).
func TestClusterConverges(t *testing.T) {
	t.Parallel()
	const (
		topic      = "conv"
		shared     = 40  // keys every node writes
		own        = 20  // keys only one node writes, per node
		writers    = 2   // per node
		opsPerW    = 120 // publishes per writer
		deleteEach = 9   // one write in deleteEach is a delete
	)
	seed := testSeed(t)
	nodes := startClusterNodes(t, threeNodes(valuesInFileArg(t, seed)))
	waitClusterUp(t, nodes, namesOf(nodes), false, 15*time.Second)

	var keys []string
	for i := range shared {
		keys = append(keys, fmt.Sprintf("shared-%02d", i))
	}
	for _, n := range nodes {
		for i := range own {
			keys = append(keys, fmt.Sprintf("own-%s-%02d", n.Name, i))
		}
	}

	var (
		mu     sync.Mutex
		acked  []write
		wg     sync.WaitGroup
		failed atomic.Value
	)
	c := ctx(t)
	for ni, n := range nodes {
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := mrand.New(mrand.NewPCG(seed, uint64(ni*writers+w)))
				for op := range opsPerW {
					var key string
					if rng.IntN(2) == 0 {
						key = fmt.Sprintf("shared-%02d", rng.IntN(shared))
					} else {
						key = fmt.Sprintf("own-%s-%02d", n.Name, rng.IntN(own))
					}
					wr := write{key: key}
					var err error
					if rng.IntN(deleteEach) == 0 {
						wr.delete = true
						wr.res, err = n.Client.Delete(c, topic, key)
					} else {
						wr.value = fmt.Sprintf("%s from %s/%d op %d", key, n.Name, w, op)
						wr.res, err = n.Client.Publish(c, topic, key, []byte(wr.value), "")
					}
					if err != nil {
						failed.CompareAndSwap(nil, fmt.Errorf("%s: publish %s: %w", n.Name, key, err))
						return
					}
					mu.Lock()
					acked = append(acked, wr)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	writesDone := time.Now()

	view := waitConverged(t, nodes, topic, keys, int64(len(acked)), 15*time.Second)
	t.Logf("%d writes; converged %v after the last one", len(acked), time.Since(writesDone).Round(time.Millisecond))

	// Each key holds the write with the greatest (HLC, origin) of all
	// those acknowledged for it, everywhere.
	winner := map[string]write{}
	for _, wr := range acked {
		if wr.res.Status != client.StatusOK {
			t.Errorf("%s: status %q with --replication=async", wr.key, wr.res.Status)
		}
		cur, ok := winner[wr.key]
		if !ok || wr.res.HLC > cur.res.HLC || (wr.res.HLC == cur.res.HLC && wr.res.Origin > cur.res.Origin) {
			winner[wr.key] = wr
		}
	}
	for _, k := range keys {
		got := view[k]
		w, ok := winner[k]
		var want keyView
		switch {
		case !ok || w.delete:
			want = keyView{Absent: true}
		default:
			want = keyView{Value: w.value, Origin: w.res.Origin, Seq: w.res.Seq, HLC: w.res.HLC}
		}
		if got != want {
			t.Errorf("key %s: every node holds %v; the (HLC, origin) rule picks %v", k, got, want)
		}
	}

	waitClusterUp(t, nodes, namesOf(nodes), true, 10*time.Second)
	checkRing(t, nodes)
	stopAll(nodes)
}

// checkRing checks that each node names as its replica its successor on
// the ring of node IDs (origins), the default without --replica.
func checkRing(t *testing.T, nodes []*clusterNode) {
	t.Helper()
	sts := make([]wire.ClusterStatus, len(nodes))
	for i, n := range nodes {
		var err error
		if sts[i], err = n.clusterStatus(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	ring := append([]wire.ClusterStatus(nil), sts...)
	sort.Slice(ring, func(i, j int) bool { return ring[i].Origin < ring[j].Origin }) // fixed-width hex
	for i, st := range ring {
		if want := ring[(i+1)%len(ring)].Node; st.Replica != want {
			t.Errorf("%s (origin %s) names replica %q; its successor on the ring is %s", st.Node, st.Origin, st.Replica, want)
		}
	}
}

// TestClusterSIGKILLSyncReplication publishes to node a of three under
// --replication=sync --flush sync and SIGKILLs it at a random moment.
// Every write acknowledged "ok" must then be on a's replica (the third
// node is frozen with SIGSTOP across the kill and the check, so the
// replica cannot have it from anyone but a). The replica is itself frozen
// for a while before, so that some writes answer replica_timeout (or
// replica_unavailable, if gossip declares it dead meanwhile): those are
// stored on a. After a restarts, every acknowledged write, whatever its
// status, is on every node, and the views converge. The seed draws
// --view-file-values too (valuesInFileArg).
func TestClusterSIGKILLSyncReplication(t *testing.T) {
	t.Parallel()
	const (
		topic   = "sync"
		writers = 4
		keysPer = 8
	)
	seed := testSeed(t)
	rng := mrand.New(mrand.NewPCG(seed, 0))
	// a's replica is pinned, so that it stays b while b is frozen (the
	// ring's choice is checked by TestClusterConverges).
	args := []string{"--replication=sync", "--flush", "sync", "--replica-timeout", "500ms", valuesInFileArg(t, seed)}
	nodes := startClusterNodes(t, []clusterSpec{
		{Name: "a", Args: append(args[:len(args):len(args)], "--replica", "b")},
		{Name: "b", Args: args},
		{Name: "c", Args: args},
	})
	waitClusterUp(t, nodes, namesOf(nodes), false, 15*time.Second)
	a := nodes[0]

	var st wire.ClusterStatus
	testkit.Until(t, 10*time.Second, "a to name its replica", func() string {
		var err error
		if st, err = a.clusterStatus(t.Context()); err != nil {
			return err.Error()
		}
		if st.Replica == "" {
			return "no replica yet"
		}
		return ""
	})
	origin, err := strconv.ParseUint(st.Origin, 16, 64)
	if err != nil {
		t.Fatalf("a's origin %q: %v", st.Origin, err)
	}
	var replica, third *clusterNode
	for _, n := range nodes[1:] {
		if n.Name == st.Replica {
			replica = n
		} else {
			third = n
		}
	}
	if replica == nil {
		t.Fatalf("a names replica %q, not one of b, c", st.Replica)
	}
	t.Logf("a is %s, its replica %s", st.Origin, replica.Name)

	// Each writer owns its keys and writes them in turn, so a key's
	// counter grows with every write of it.
	type keyLog struct {
		sent    int // highest counter sent; -1 none
		acked   int // highest counter acknowledged with any status
		ackedOK int // highest counter acknowledged ok
	}
	var (
		mu       sync.Mutex
		keyState = map[string]*keyLog{}
		acks     []write
		killed   atomic.Bool
		failed   atomic.Value
		wg       sync.WaitGroup
	)
	var keys []string
	for w := range writers {
		for i := range keysPer {
			k := fmt.Sprintf("w%d-k%d", w, i)
			keys = append(keys, k)
			keyState[k] = &keyLog{sent: -1, acked: -1, ackedOK: -1}
		}
	}
	c := ctx(t)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counter := map[string]int{}
			for i := 0; ; i++ {
				key := fmt.Sprintf("w%d-k%d", w, i%keysPer)
				cnt := counter[key]
				counter[key]++
				mu.Lock()
				keyState[key].sent = cnt
				mu.Unlock()
				v := clusterValue(key, cnt)
				res, err := a.Client.Publish(c, topic, key, v, "")
				if err != nil {
					if !killed.Load() {
						failed.CompareAndSwap(nil, fmt.Errorf("publish %s before the kill: %w", key, err))
					}
					return
				}
				if res.Origin != origin {
					failed.CompareAndSwap(nil, fmt.Errorf("publish %s: origin %016x, want a's %016x", key, res.Origin, origin))
					return
				}
				mu.Lock()
				ks := keyState[key]
				ks.acked = cnt
				if res.Status == client.StatusOK {
					ks.ackedOK = cnt
				}
				acks = append(acks, write{key: key, value: string(v), res: res})
				mu.Unlock()
			}
		}()
	}
	pauseAt := 200*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))
	pause := 700 * time.Millisecond
	killAt := pauseAt + pause + 100*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
	t.Logf("replica frozen from %v for %v; SIGKILL of a at %v", pauseAt, pause, killAt)
	time.Sleep(pauseAt)
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if err := replica.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(killAt - pauseAt - pause)

	// Freeze the third node first: from now on the replica can only hold
	// what it got from a before the kill.
	if err := third.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	a.Kill()
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		_ = third.Signal(syscall.SIGCONT)
		t.Fatal(err)
	}

	mu.Lock()
	okSeqs, allSeqs := map[uint64]bool{}, map[uint64]bool{}
	var maxSeq uint64
	statuses := map[string]int{}
	for _, w := range acks {
		statuses[w.res.Status]++
		allSeqs[w.res.Seq] = true
		maxSeq = max(maxSeq, w.res.Seq)
		if w.res.Status == client.StatusOK {
			okSeqs[w.res.Seq] = true
		}
	}
	mu.Unlock()
	t.Logf("%d acknowledged writes before the kill: %v; highest seq %d", len(acks), statuses, maxSeq)
	if statuses[client.StatusOK] == 0 || len(statuses) < 2 {
		_ = third.Signal(syscall.SIGCONT)
		t.Fatalf("want writes acknowledged ok and others before the kill, got %v", statuses)
	}
	for s := range statuses {
		switch s {
		case client.StatusOK, wire.StatusReplicaTimeout, wire.StatusReplicaUnavailable:
		default:
			t.Errorf("status %q: not a publish status", s)
		}
	}

	// checkKeys says which keys on n do not hold a write of theirs in
	// [lowest(ks), sent]: a later write than the last acknowledged one
	// may be there (it was stored but its answer was lost in the kill).
	checkKeys := func(n *clusterNode, lowest func(*keyLog) int) {
		t.Helper()
		view, err := nodeView(t.Context(), n, topic, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			ks := keyState[k]
			lo := lowest(ks)
			if lo < 0 {
				continue
			}
			v := view[k]
			got := clusterCounter(k, v.Value)
			if v.Absent || got < lo || got > ks.sent || v.Origin != origin {
				t.Errorf("%s: key %s holds %v (write %d); want a write of a in [%d, %d]", n.Name, k, v, got, lo, ks.sent)
			}
		}
	}

	missing, _ := originSeqs(t, replica, topic, origin, okSeqs, 5*time.Second)
	if len(missing) > 0 {
		t.Errorf("the replica %s lacks %d writes a acknowledged ok: seqs %v", replica.Name, len(missing), head(missing))
	}
	checkKeys(replica, func(ks *keyLog) int { return ks.ackedOK })
	if err := third.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// a comes back on the same data and ports, and catches up; everything
	// it acknowledged, with any status, reaches every node.
	a.Start()
	// Data first: what a quick restart leaves of the links' state is
	// TestClusterQuickRestartRelinks's business.
	waitClusterUp(t, nodes, namesOf(nodes), false, 20*time.Second)
	for _, n := range nodes {
		missing, highest := originSeqs(t, n, topic, origin, allSeqs, 10*time.Second)
		if len(missing) > 0 {
			t.Errorf("%s lacks %d writes a acknowledged: seqs %v", n.Name, len(missing), head(missing))
		}
		maxSeq = max(maxSeq, highest)
		checkKeys(n, func(ks *keyLog) int { return ks.acked })
	}
	if t.Failed() {
		t.FailNow()
	}

	// a's sequence goes on after everything it stored before the kill,
	// and the new writes reach every node too.
	for i := range 5 {
		key := fmt.Sprintf("after-%d", i)
		res, err := a.Client.Publish(c, topic, key, clusterValue(key, 0), "")
		if err != nil {
			t.Fatal(err)
		}
		if res.Origin != origin || res.Seq <= maxSeq {
			t.Fatalf("publish after the restart: origin %016x seq %d; want origin %016x and seq > %d",
				res.Origin, res.Seq, origin, maxSeq)
		}
		if res.Status != client.StatusOK {
			t.Errorf("publish after the restart: status %q", res.Status)
		}
		maxSeq = res.Seq
		keys = append(keys, key)
	}
	waitConverged(t, nodes, topic, keys, -1, 15*time.Second)
	stopAll(nodes)
}

// TestClusterQuickRestartRelinks SIGKILLs a node while it publishes and
// restarts it at once, before the failure detector declares it dead (as
// systemd's Restart= does): membership never changes, so the others must
// notice by themselves that their data links to it broke. Within a bound
// every node then sees it connected and caught up, and a sync publish on
// the nodes whose replica it is (pinned with --replica) answers ok.
func TestClusterQuickRestartRelinks(t *testing.T) {
	t.Parallel()
	const topic = "relink"
	args := func(replica string) []string {
		return []string{"--replication=sync", "--replica-timeout", "2s", "--replica", replica}
	}
	nodes := startClusterNodes(t, []clusterSpec{
		{Name: "a", Args: args("b")},
		{Name: "b", Args: args("a")},
		{Name: "c", Args: args("a")},
	})
	waitClusterUp(t, nodes, namesOf(nodes), false, 15*time.Second)
	a := nodes[0]
	c := ctx(t)

	// a writes without pause up to the kill, so that what the others
	// last heard of a's vector is behind what a holds.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("k%d", i%50)
			if _, err := a.Client.Publish(c, topic, k, clusterValue(k, i), ""); err != nil {
				return
			}
		}
	}()
	time.Sleep(700 * time.Millisecond)
	a.Kill()
	close(stop)
	wg.Wait()
	a.Start()

	// Both checks run, so that a failure shows both symptoms.
	if why := testkit.Poll(t, 10*time.Second, func() string {
		for _, n := range nodes {
			st, err := n.clusterStatus(t.Context())
			if err != nil {
				return err.Error()
			}
			if why := fullyConnected(st, namesOf(nodes), true); why != "" {
				return why
			}
		}
		return ""
	}); why != "" {
		t.Errorf("10s after a's restart: %s (a link to a that is still on the killed process's connection?)", why)
	}
	for _, n := range nodes[1:] {
		key := "after-" + n.Name
		res, err := n.Client.Publish(c, topic, key, clusterValue(key, 0), "")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != client.StatusOK {
			t.Errorf("%s: sync publish to its replica a after a's restart: status %q, want ok", n.Name, res.Status)
		}
	}
	stopAll(nodes)
}

// head is the first few of s, for messages.
func head(s []uint64) []uint64 {
	if len(s) > 20 {
		return s[:20]
	}
	return s
}

// TestClusterNodeDownCatchesUp stops one node of three, writes 2,000 keys
// on the others, and restarts it: it catches up and converges.
func TestClusterNodeDownCatchesUp(t *testing.T) {
	t.Parallel()
	const (
		topic  = "down"
		before = 100  // keys written while all three run
		during = 2000 // keys written while c is down
		batch  = 100
	)
	nodes := startClusterNodes(t, threeNodes())
	waitClusterUp(t, nodes, namesOf(nodes), false, 15*time.Second)
	a, b, cn := nodes[0], nodes[1], nodes[2]
	c := ctx(t)

	var keys []string
	publish := func(n *clusterNode, prefix string, count int) {
		t.Helper()
		for i := 0; i < count; i += batch {
			var msgs []client.Message
			for j := i; j < min(i+batch, count); j++ {
				k := fmt.Sprintf("%s-%04d", prefix, j)
				msgs = append(msgs, client.Message{Key: k, Value: clusterValue(k, 0)})
				keys = append(keys, k)
			}
			if _, err := n.Client.PublishBatch(c, topic, msgs); err != nil {
				t.Fatalf("%s: publish: %v", n.Name, err)
			}
		}
	}
	publish(a, "before", before)
	waitConverged(t, nodes, topic, keys, before, 10*time.Second)

	cn.Stop()
	testkit.Until(t, 10*time.Second, "a and b to see c gone", func() string {
		for _, n := range nodes[:2] {
			st, err := n.clusterStatus(t.Context())
			if err != nil {
				return err.Error()
			}
			for _, m := range st.Members {
				if m.Name == "c" && m.State == "alive" {
					return n.Name + " sees c alive"
				}
			}
		}
		return ""
	})
	publish(a, "from-a", during/2)
	publish(b, "from-b", during/2)

	start := time.Now()
	cn.Start()
	view := waitConverged(t, nodes, topic, keys, before+during, 20*time.Second)
	t.Logf("c caught up on %d records in %v (restart included)", during, time.Since(start).Round(time.Millisecond))
	for _, k := range keys {
		if v := view[k]; v.Absent || v.Value != string(clusterValue(k, 0)) {
			t.Errorf("key %s: %v", k, v)
		}
	}
	waitClusterUp(t, nodes, namesOf(nodes), true, 10*time.Second)
	stopAll(nodes)
}

// TestClusterWrongKey runs two nodes with one cluster key and a third with
// another: the third never joins (its log says so), nothing it writes
// reaches the others, nothing they write reaches it, and the data port
// refuses a peer that proves the wrong key, or none.
func TestClusterWrongKey(t *testing.T) {
	t.Parallel()
	const topic = "keys"
	good, goodKey := writeKeyFile(t, "good.key")
	bad, badKey := writeKeyFile(t, "bad.key")
	onlyAB := func(g []string) []string { return g[:2] }
	nodes := startClusterNodes(t, []clusterSpec{
		{Name: "a", Args: []string{"--cluster-key-file", good}, Join: onlyAB},
		{Name: "b", Args: []string{"--cluster-key-file", good}, Join: onlyAB},
		// Not itself as a seed: a seed that is the node itself counts as
		// reached, and the join would succeed on its own.
		{Name: "intruder", Args: []string{"--cluster-key-file", bad, "--join-timeout", "1s"}, Join: onlyAB},
	})
	a, b, x := nodes[0], nodes[1], nodes[2]
	waitClusterUp(t, nodes[:2], []string{"a", "b"}, false, 15*time.Second)
	if err := x.WaitLog("joining the cluster failed", 10*time.Second); err != nil {
		t.Fatal(err)
	}

	c := ctx(t)
	for _, n := range nodes {
		key := "from-" + n.Name
		if _, err := n.Client.Publish(c, topic, key, clusterValue(key, 0), ""); err != nil {
			t.Fatal(err)
		}
	}
	waitConverged(t, nodes[:2], topic, []string{"from-a", "from-b"}, 2, 10*time.Second)

	// The data port: a dialer with the wrong key, or with none, is refused
	// (and learns that this listener does not hold its key).
	for _, k := range [][]byte{badKey, nil} {
		conn, listenerOK, err := dataDial(a.DataAddr, k, 0x1badc0ffee)
		if err != nil {
			t.Fatalf("data handshake with a: %v", err)
		}
		if listenerOK {
			t.Errorf("a's data port proved a key it does not hold (%x)", k)
		}
		if !closedByPeer(conn, 10*time.Second) {
			t.Errorf("a's data port kept a connection whose dialer proved the wrong key (%x)", k)
		}
		conn.Close()
	}
	if err := a.WaitLog("does not hold the cluster key", 5*time.Second); err != nil {
		t.Error(err)
	}
	// With the right key, the same handshake passes (so the refusals above
	// were for the key).
	conn, listenerOK, err := dataDial(a.DataAddr, goodKey, 0x1badc0ffee)
	if err != nil || !listenerOK {
		t.Fatalf("data handshake with the cluster key: listener proved it: %v, %v", listenerOK, err)
	}
	if closedByPeer(conn, 500*time.Millisecond) {
		t.Error("a closed a data connection that proved the cluster key")
	}
	conn.Close()

	// Let gossip and anti-entropy run several rounds (push/pull every
	// 300ms, vectors every 1s), then check that nothing crossed.
	time.Sleep(3 * time.Second)
	for _, n := range []*clusterNode{a, b} {
		st, err := n.clusterStatus(c)
		if err != nil {
			t.Fatal(err)
		}
		if why := fullyConnected(st, []string{"a", "b"}, false); why != "" {
			t.Errorf("%s: %s", n.Name, why)
		}
		if _, err := n.Client.Get(c, topic, "from-intruder"); apiCode(err) != client.CodeNotFound {
			t.Errorf("%s holds the intruder's write (get: %v)", n.Name, err)
		}
	}
	st, err := x.clusterStatus(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberNames(st, ""); len(got) != 1 || got[0] != "intruder" {
		t.Errorf("the intruder sees members %v", got)
	}
	for _, k := range []string{"from-a", "from-b"} {
		if _, err := x.Client.Get(c, topic, k); apiCode(err) != client.CodeNotFound {
			t.Errorf("the intruder holds %s (get: %v)", k, err)
		}
	}
	// The intruder, told to join and alone past its --join-timeout, is
	// degraded and says why; "cachecast status" exits 1 with it.
	res := cli(t, x.Node, "", "status")
	if res.code != 1 || !strings.Contains(res.stdout, "degraded: alone: no other member answered") || !strings.Contains(res.stderr, "degraded") {
		t.Errorf("cachecast status on the intruder: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if res := cli(t, a.Node, "", "status"); res.code != 0 {
		t.Errorf("cachecast status on a: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	// Both sides say why: the seeds' answers do not decrypt.
	if n := x.CountLog("joining the cluster failed"); n < 1 || x.CountLog("could decrypt") < 1 {
		t.Errorf("the intruder logged %d join failures, %d decryption failures", n, x.CountLog("could decrypt"))
	}
	if a.CountLog("could decrypt")+b.CountLog("could decrypt") < 1 {
		t.Error("neither a nor b logged the intruder's undecryptable gossip")
	}
	stopAll(nodes)
}

// TestClusterGarbageDataPort sends a node's data port random bytes, an
// HTTP request, a stalled half handshake, and, after a proper handshake
// with the cluster key, malformed frames. Each bad connection is closed
// with a logged reason; the node keeps serving, its links stay up, and
// writes made afterwards reach every node.
func TestClusterGarbageDataPort(t *testing.T) {
	t.Parallel()
	const topic = "garbage"
	seed := testSeed(t)
	rng := mrand.New(mrand.NewPCG(seed, 0))
	keyFile, key := writeKeyFile(t, "cluster.key")
	nodes := startClusterNodes(t, threeNodes("--cluster-key-file", keyFile))
	waitClusterUp(t, nodes, namesOf(nodes), false, 15*time.Second)
	a := nodes[0]
	c := ctx(t)

	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	raw := []struct {
		name string
		data []byte
	}{
		{"one byte", randBytes(1)},
		{"random bytes", randBytes(4096)},
		{"an HTTP request", []byte("GET /v1/topics HTTP/1.1\r\nHost: cachecast\r\n\r\n")},
		{"a hello with a bad protocol", append([]byte(dataHelloMagic+"\x09"), randBytes(dataHelloSize-8)...)},
		{"a hello with node ID 0", append([]byte(dataHelloMagic+"\x02"), make([]byte, dataHelloSize-8)...)},
		{"a hello of protocol 1 (frames without a MAC)", append([]byte(dataHelloMagic+"\x01"), randBytes(dataHelloSize-8)...)},
	}
	for _, r := range raw {
		refused := a.CountLog("refused a data connection")
		conn, err := net.DialTimeout("tcp", a.DataAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(r.data); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		// A short message waits in the handshake for the rest until its
		// timeout; half-closing says there is no rest.
		_ = conn.(*net.TCPConn).CloseWrite()
		if !closedByPeer(conn, 10*time.Second) {
			t.Errorf("%s: a kept the connection", r.name)
		}
		conn.Close()
		if !logGrows(t, a, "refused a data connection", refused) {
			t.Errorf("%s: a did not log the refusal", r.name)
		}
	}

	// A connection that stalls in the handshake stays open through the
	// rest of the test: it must not hold anything up.
	stalled, err := net.DialTimeout("tcp", a.DataAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := stalled.Write([]byte(dataHelloMagic)); err != nil {
		t.Fatal(err)
	}

	var bigRecords [8]byte
	binary.LittleEndian.PutUint32(bigRecords[:], 1<<30)
	frames := []struct {
		name  string
		data  func(c *dataConn) []byte
		close bool // a must close the connection
	}{
		{"a zero length", func(c *dataConn) []byte { return []byte{0, 0, 0, 0} }, true},
		{"a length over the limit", func(c *dataConn) []byte { return []byte{0xff, 0xff, 0xff, 0xff, 1} }, true},
		{"an unknown type", func(c *dataConn) []byte { return c.frame(0x63, randBytes(100)) }, true},
		{"type 0", func(c *dataConn) []byte { return c.frame(0, nil) }, true},
		{"an ack (the listener takes none)", func(c *dataConn) []byte { return c.frame(2, make([]byte, 4)) }, true},
		{"records of random bytes", func(c *dataConn) []byte { return c.frame(1, randBytes(1000)) }, true},
		{"records claiming a huge size", func(c *dataConn) []byte { return c.frame(1, append(bigRecords[:], randBytes(100)...)) }, true},
		{"empty records", func(c *dataConn) []byte { return c.frame(1, nil) }, true},
		{"a short pull", func(c *dataConn) []byte { return c.frame(3, randBytes(5)) }, true},
		{"a pull from 0", func(c *dataConn) []byte { return c.frame(3, make([]byte, 24)) }, true},
		{"a pull ending before it starts", func(c *dataConn) []byte { return c.frame(3, pullPayload(1, 10, 5)) }, true},
		{"a pull of everything of an unknown origin", func(c *dataConn) []byte { return c.frame(3, pullPayload(0xdeadbeef, 1, 1<<63)) }, false},
		{"a good frame, then a bad one", func(c *dataConn) []byte {
			return append(c.frame(3, pullPayload(0xdeadbeef, 1, 2)), c.frame(0x77, randBytes(64))...)
		}, true},
		{"a pull whose MAC fails", func(c *dataConn) []byte {
			f := c.frame(3, pullPayload(0xdeadbeef, 1, 2))
			f[len(f)-1] ^= 1
			return f
		}, true},
		{"a good frame replayed", func(c *dataConn) []byte {
			f := c.frame(3, pullPayload(0xdeadbeef, 1, 2))
			return append(f, f...)
		}, true},
	}
	for i, f := range frames {
		bad := a.CountLog("closing a data connection on")
		conn, listenerOK, err := dataDial(a.DataAddr, key, 0xbad0000+uint64(i))
		if err != nil || !listenerOK {
			t.Fatalf("%s: handshake: %v (listener proved the key: %v)", f.name, err, listenerOK)
		}
		if _, err := conn.Write(f.data(conn)); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		wait := 5 * time.Second
		if !f.close {
			wait = time.Second
		}
		if got := closedByPeer(conn, wait); got != f.close {
			t.Errorf("%s: a closed the connection: %v, want %v", f.name, got, f.close)
		}
		conn.Close()
		if f.close && !logGrows(t, a, "closing a data connection on", bad) {
			t.Errorf("%s: a did not log why it closed the connection", f.name)
		}
	}

	// a still serves, its links are up, and writes on it and on the others
	// after all that reach every node.
	if err := a.Client.Healthz(c); err != nil {
		t.Fatalf("a after the garbage: %v", err)
	}
	waitClusterUp(t, nodes, namesOf(nodes), false, 10*time.Second)
	var keys []string
	for _, n := range nodes {
		for i := range 20 {
			k := fmt.Sprintf("%s-%d", n.Name, i)
			if _, err := n.Client.Publish(c, topic, k, clusterValue(k, i), ""); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
	}
	view := waitConverged(t, nodes, topic, keys, int64(len(keys)), 10*time.Second)
	for _, k := range keys {
		if view[k].Absent {
			t.Errorf("key %s absent everywhere", k)
		}
	}
	// The stalled connection is still open (or timed out): a stops cleanly
	// all the same.
	stopAll(nodes)
}

// logGrows reports whether n's log holds substr more than before times,
// waiting a little for the log to come through its pipe.
func logGrows(t *testing.T, n *clusterNode, substr string, before int) bool {
	return testkit.Poll(t, 2*time.Second, func() string {
		if n.CountLog(substr) <= before {
			return "not yet"
		}
		return ""
	}) == ""
}

// pullPayload is a pull frame's payload: origin, from, to.
func pullPayload(origin, from, to uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, origin)
	b = binary.LittleEndian.AppendUint64(b, from)
	return binary.LittleEndian.AppendUint64(b, to)
}
