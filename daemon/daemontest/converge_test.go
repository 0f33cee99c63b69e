package daemontest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// convergeSeedEnv names the variable that replays a run of
// TestConvergeRandomOps: the seed draws every actor's operations and
// every delay of the links (the goroutines' interleaving is the
// machine's, so a replay is the same workload, not the same schedule).
const convergeSeedEnv = "CACHECAST_CONVERGE_SEED"

// convergeTopic is the topic the plain keys of the test live in: the
// Redis key "cv:k3" is (cv, k3). The counters live there too, or in
// counterOwnTopic (convergeSettings).
const convergeTopic = "cv"

// counterOwnTopic is the counters' topic when they have one of their
// own: the plain values of a topic with counters stay on the heap, so
// only then do the values go into the view file with --view-file-values.
const counterOwnTopic = "cn"

// writeOp is a write a client sent and the node acknowledged: a value
// (unique in the run) or a delete.
type writeOp struct {
	key, value string // value "" for a DEL
	expiresAt  int64  // the value's own expiry (Unix ms), 0: none
	start      time.Time
}

// expiryOp is an acknowledged expiry command that answered 1: the expiry
// it set lies in [lo, hi] (Unix ms; 0 for PERSIST), and it was sent to
// its node between start and end.
type expiryOp struct {
	key        string
	lo, hi     int64
	start, end time.Time
}

// history is what the actors' clients were told.
type history struct {
	mu       sync.Mutex
	values   map[string]writeOp // by value
	expiries []expiryOp
	// counts is the sum of the acknowledged increments of each counter
	// key (cv:c0...) since the phase began (keys no node holds a value
	// of then: never written, deleted or expired); incremented says
	// which ones had an increment acknowledged.
	counts      map[string]int64
	incremented map[string]bool
	// counterTopic is the counters' topic: convergeTopic or
	// counterOwnTopic.
	counterTopic string
	// answers are the counter commands of the phase and what they
	// answered, for a failure's log.
	answers []string
}

// actor is one client of one node, drawing its operations from rng: rc
// speaks Redis (on the Unix socket or on TCP with AUTH), hc the local
// HTTP API, to the same keys.
type actor struct {
	node int
	tcp  bool // rc is on TCP with AUTH, not on the Unix socket
	rc   *goredis.Client
	hc   *client.Client
	rng  *rand.Rand
	h    *history
	n    int // values written, for unique values
}

// connect opens a's clients of node nd.
func (a *actor) connect(nd *daemontest.Node) {
	opts := &goredis.Options{Network: "unix", Addr: nd.D.RedisSocketPath(), Protocol: 2,
		MaxRetries: -1, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second}
	if a.tcp {
		opts.Network, opts.Addr, opts.Username, opts.Password = "tcp", nd.D.RedisAddr(), "cv", "cv-pw"
	}
	a.rc, a.hc = goredis.NewClient(opts), client.New(nd.Socket)
}

// close closes a's clients.
func (a *actor) close() {
	a.rc.Close()
	a.hc.Close()
}

// convergeOp is one kind of operation of the randomized test: weight is
// its share of the draws, run sends it and records what was
// acknowledged. New kinds (counters, MULTI) add a row to convergeOps
// and, if they need one, a check to checkConverged.
type convergeOp struct {
	name   string
	weight int
	run    func(ctx context.Context, a *actor) error
}

var convergeOps = []convergeOp{
	{"SET", 30, func(ctx context.Context, a *actor) error {
		k, v := a.key(), a.value()
		var exp int64
		args := []any{"SET", k, v}
		if a.rng.IntN(3) == 0 {
			exp = a.farExpiry()
			args = append(args, "PXAT", exp)
		}
		return a.write(ctx, args, []writeOp{{key: k, value: v, expiresAt: exp}})
	}},
	{"MSET", 10, func(ctx context.Context, a *actor) error {
		keys := a.distinctKeys(2 + a.rng.IntN(2))
		args := []any{"MSET"}
		var ws []writeOp
		for _, k := range keys {
			v := a.value()
			args = append(args, k, v)
			ws = append(ws, writeOp{key: k, value: v})
		}
		return a.write(ctx, args, ws)
	}},
	{"DEL", 8, func(ctx context.Context, a *actor) error {
		k := a.key()
		return a.write(ctx, []any{"DEL", k}, []writeOp{{key: k}})
	}},
	{"HTTP PUT", 8, func(ctx context.Context, a *actor) error {
		// The same keys through the other door: a PUT is a value
		// without an expiry, as a SET without one.
		name, v := a.keyName(), a.value()
		start := time.Now()
		if _, err := a.hc.Publish(ctx, convergeTopic, name, []byte(v), ""); err != nil {
			return err
		}
		a.h.mu.Lock()
		defer a.h.mu.Unlock()
		a.h.values[v] = writeOp{key: convergeTopic + ":" + name, value: v, start: start}
		return nil
	}},
	{"HTTP BATCH", 5, func(ctx context.Context, a *actor) error {
		// An NDJSON batch of 2 or 3 keys, one of them deleted at times:
		// one publish, as an MSET.
		var msgs []client.Message
		var ws []writeOp
		for _, k := range a.distinctKeys(2 + a.rng.IntN(2)) {
			name := k[len(convergeTopic)+1:]
			if a.rng.IntN(4) == 0 {
				msgs = append(msgs, client.Message{Key: name, Delete: true})
				continue
			}
			v := a.value()
			msgs = append(msgs, client.Message{Key: name, Value: []byte(v)})
			ws = append(ws, writeOp{key: k, value: v})
		}
		start := time.Now()
		if _, err := a.hc.PublishBatch(ctx, convergeTopic, msgs); err != nil {
			return err
		}
		a.h.mu.Lock()
		defer a.h.mu.Unlock()
		for _, w := range ws {
			w.start = start
			a.h.values[w.value] = w
		}
		return nil
	}},
	{"HTTP DELETE", 3, func(ctx context.Context, a *actor) error {
		_, err := a.hc.Delete(ctx, convergeTopic, a.keyName())
		return err
	}},
	{"EXPIRE", 12, func(ctx context.Context, a *actor) error {
		s := 3600 + a.rng.Int64N(3600)
		return a.expire(ctx, "EXPIRE", s, func(sent int64) int64 { return sent + s*1000 })
	}},
	{"PEXPIRE", 12, func(ctx context.Context, a *actor) error {
		ms := 3_600_000 + a.rng.Int64N(3_600_000)
		return a.expire(ctx, "PEXPIRE", ms, func(sent int64) int64 { return sent + ms })
	}},
	{"EXPIREAT", 8, func(ctx context.Context, a *actor) error {
		at := a.farExpiry() / 1000
		return a.expire(ctx, "EXPIREAT", at, func(int64) int64 { return at * 1000 })
	}},
	{"PEXPIREAT", 8, func(ctx context.Context, a *actor) error {
		at := a.farExpiry()
		return a.expire(ctx, "PEXPIREAT", at, func(int64) int64 { return at })
	}},
	{"MULTI", 8, func(ctx context.Context, a *actor) error {
		// Two SETs and an expiry change of a third key, one batch: the
		// EXPIRE names the version this node holds, not one the
		// transaction wrote.
		keys := a.distinctKeys(3)
		v0, v1 := a.value(), a.value()
		ms := 3_600_000 + a.rng.Int64N(3_600_000)
		start := time.Now()
		var expire *goredis.Cmd
		if _, err := a.rc.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, keys[0], v0, 0)
			p.Set(ctx, keys[1], v1, 0)
			expire = p.Do(ctx, "PEXPIRE", keys[2], ms)
			return nil
		}); err != nil {
			return err
		}
		end := time.Now()
		a.h.mu.Lock()
		a.h.values[v0] = writeOp{key: keys[0], value: v0, start: start}
		a.h.values[v1] = writeOp{key: keys[1], value: v1, start: start}
		a.h.mu.Unlock()
		if n, _ := expire.Int(); n == 1 {
			a.h.addExpiry(expiryOp{key: keys[2], lo: start.UnixMilli() + ms, hi: end.UnixMilli() + ms, start: start, end: end})
		}
		return nil
	}},
	{"INCRBY", 12, func(ctx context.Context, a *actor) error {
		k, d := a.counterKey(), a.rng.Int64N(16)-5
		n, err := a.rc.IncrBy(ctx, k, d).Result()
		if err != nil {
			return err
		}
		a.h.counted(fmt.Sprintf("node%d INCRBY %s %d: %d", a.node, k, d, n), keyInc{k, d})
		return nil
	}},
	{"MULTI INCRBY", 5, func(ctx context.Context, a *actor) error {
		// Two increments and a DECR in one batch, of any counters (the
		// same one twice, too).
		k0, k1, k2, d0, d1 := a.counterKey(), a.counterKey(), a.counterKey(), a.rng.Int64N(9), a.rng.Int64N(9)
		var r0, r1, r2 *goredis.IntCmd
		if _, err := a.rc.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			r0, r1, r2 = p.IncrBy(ctx, k0, d0), p.IncrBy(ctx, k1, d1), p.Decr(ctx, k2)
			return nil
		}); err != nil {
			return err
		}
		a.h.counted(fmt.Sprintf("node%d MULTI: INCRBY %s %d: %d, INCRBY %s %d: %d, DECR %s: %d",
			a.node, k0, d0, r0.Val(), k1, d1, r1.Val(), k2, r2.Val()), keyInc{k0, d0}, keyInc{k1, d1}, keyInc{k2, -1})
		return nil
	}},
	{"PEXPIRE counter", 3, func(ctx context.Context, a *actor) error {
		// An expiry change of a counted version: the count stays.
		k := a.counterKey()
		set, err := a.rc.PExpire(ctx, k, time.Hour+time.Duration(a.rng.IntN(3600))*time.Second).Result()
		if err != nil {
			return err
		}
		a.h.counted(fmt.Sprintf("node%d PEXPIRE %s: %v", a.node, k, set))
		return nil
	}},
	{"PERSIST", 12, func(ctx context.Context, a *actor) error {
		k := a.key()
		start := time.Now()
		n, err := a.rc.Do(ctx, "PERSIST", k).Int()
		if err != nil || n == 0 {
			return err
		}
		a.h.addExpiry(expiryOp{key: k, start: start, end: time.Now()})
		return nil
	}},
}

// actorsPerNode is how many actors each node has: one on its Unix
// socket, one on TCP.
const actorsPerNode = 2

// convergeKeys is how many keys the actors share: few, so that they
// write the same keys at the same moments.
const convergeKeys = 6

// key is a Redis key of the test, keyName the key in its topic, as the
// HTTP API names it: "cv:k3" is the topic cv's key k3.
func (a *actor) key() string { return convergeTopic + ":" + a.keyName() }

func (a *actor) keyName() string { return "k" + strconv.Itoa(a.rng.IntN(convergeKeys)) }

// convergeCounters is how many counter keys (cv:c0...) the actors
// increment: keys no other operation writes, which no node holds a value
// of when a phase begins (never written, deleted, expired), so each
// one's value is known: 0 plus every increment acknowledged since.
const convergeCounters = 3

func (a *actor) counterKey() string {
	return a.h.counterTopic + ":c" + strconv.Itoa(a.rng.IntN(convergeCounters))
}

// keyInc is an acknowledged increment n of counter key.
type keyInc struct {
	key string
	n   int64
}

// counted notes a counter command and its answer, and adds its
// acknowledged increments.
func (h *history) counted(answer string, incs ...keyInc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers = append(h.answers, time.Now().Format("15:04:05.000 ")+answer)
	for _, inc := range incs {
		h.counts[inc.key] += inc.n
		h.incremented[inc.key] = true
	}
}

func (a *actor) distinctKeys(n int) []string {
	var ks []string
	for len(ks) < n {
		if k := a.key(); !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	return ks
}

func (a *actor) value() string {
	a.n++
	return fmt.Sprintf("n%d-%d-%d", a.node, a.rng.Int64(), a.n)
}

// farExpiry is an instant 1 to 3 hours ahead: nothing expires during
// the run, so each key's expiry says which command set it.
func (a *actor) farExpiry() int64 {
	return time.Now().Add(time.Hour).UnixMilli() + a.rng.Int64N(2*3_600_000)
}

func (a *actor) write(ctx context.Context, args []any, ws []writeOp) error {
	start := time.Now()
	if err := a.rc.Do(ctx, args...).Err(); err != nil {
		return err
	}
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	for _, w := range ws {
		w.start = start
		if w.value != "" {
			a.h.values[w.value] = w
		}
	}
	return nil
}

// expire sends name key n and records the expiry at(t) for a t between
// the sending and the answer (Unix ms).
func (a *actor) expire(ctx context.Context, name string, n int64, at func(int64) int64) error {
	k := a.key()
	start := time.Now()
	r, err := a.rc.Do(ctx, name, k, n).Int()
	end := time.Now()
	if err != nil || r == 0 {
		return err
	}
	a.h.addExpiry(expiryOp{key: k, lo: at(start.UnixMilli()), hi: at(end.UnixMilli()), start: start, end: end})
	return nil
}

func (h *history) addExpiry(e expiryOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expiries = append(h.expiries, e)
}

// convergeSeed is the seed of the run: the environment's, or a new one.
func convergeSeed(t *testing.T) uint64 {
	if s := os.Getenv(convergeSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", convergeSeedEnv, s, err)
		}
		return seed
	}
	return rand.Uint64()
}

// TestConvergeRandomOps is the fleet's write semantics under concurrent
// clients: 3 daemons whose links delay every write at random, and on
// every node actors sending SET, MSET, DEL, the expiry commands,
// counter increments and MULTI batches on the Unix socket or on TCP with
// AUTH, and PUTs and DELETEs on the HTTP API (convergeOps), to the same
// few keys at once. Once the nodes converged,
// every node holds the same entry for every key, that entry is the
// last-writer-wins winner of the writes clients sent (never a value a
// later command wrote again: no command may revert a newer value), and
// its expiry is the value's own or one an expiry command set while that
// value was there; and every counter is 0 plus the sum of its
// acknowledged increments on every node. The run has three phases, at
// whose start no node holds a value of a counter (never written, then
// deleted, then expired): every counter is created from nothing by
// increments on several nodes at once, and each phase's check is 0 plus
// the increments acknowledged in it (the reset before it converged
// first). In the second phase a node restarts on its data while the
// others take writes; in the third a node is cut off from the others'
// data ports while all take writes, then healed. The seed draws the
// settings too (convergeSettings): the fan-out, whether the values live in
// the view file, whether the counters have a topic of their own. The seed is
// logged; CACHECAST_CONVERGE_SEED=<seed> replays the workload.
func TestConvergeRandomOps(t *testing.T) {
	seed := convergeSeed(t)
	t.Logf("seed %d (replay: %s=%d)", seed, convergeSeedEnv, seed)
	set := convergeSettings(seed)
	t.Logf("settings: %+v", set)
	c := convergeCluster(t, set)
	// drng draws the links' delays, on their writers' goroutines (a
	// write may still draw after SetDelay(nil): it read the function
	// before); prng draws the phases' choices, on the test's.
	var dmu sync.Mutex
	drng, prng := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 0))
	delay := func(string, string) time.Duration {
		dmu.Lock()
		defer dmu.Unlock()
		return time.Duration(drng.IntN(30)) * time.Millisecond
	}
	h := &history{values: map[string]writeOp{}, counts: map[string]int64{}, incremented: map[string]bool{}, counterTopic: set.counterTopic()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var actors []*actor
	for i := range c.Nodes {
		for j := range actorsPerNode {
			a := &actor{node: i, tcp: j == 1, rng: rand.New(rand.NewPCG(seed, uint64(2+i*actorsPerNode+j))), h: h}
			a.connect(c.Nodes[i])
			t.Cleanup(a.close)
			actors = append(actors, a)
		}
	}
	// Three phases; the counters are created from nothing, concurrently
	// on every node, in each: they begin never written, then deleted,
	// then expired (resetCounters). In the second, node 1 or 2 restarts
	// on its data while the others' actors write.
	for phase := range 3 {
		if phase > 0 {
			resetCounters(ctx, t, c, actors[prng.IntN(len(actors))], phase)
		}
		c.Net.SetDelay(delay)
		switch phase {
		case 1:
			restartDuringWrites(ctx, t, c, actors, 1+prng.IntN(len(c.Nodes)-1))
		case 2:
			cutOff(t, c, prng.IntN(len(c.Nodes)))
		}
		if err := runActors(ctx, actors, 40); err != nil {
			t.Fatal(err)
		}
		c.Heal()
		c.Net.SetDelay(nil)
		c.WaitConverged(20 * time.Second)
		checkConverged(t, c, h)
		checkCounters(t, c, h, phase)
		checkDoors(ctx, t, c, actors)
		t.Logf("phase %d: counters at %v; values in the view files only: %d", phase, h.counts, valuesInFile(c))
	}
	// The run tested something: values written and expiries changed,
	// and with the values in the file, some of them read from there.
	if len(h.values) < 100 || len(h.expiries) < 20 {
		t.Fatalf("only %d values written and %d expiry commands applied", len(h.values), len(h.expiries))
	}
	if set.fileReached() {
		checkFiled(ctx, t, c, actors)
	}
	t.Logf("%d values written, %d expiry commands applied", len(h.values), len(h.expiries))
}

// restartDuringWrites restarts node r (Cluster.Restart: it leaves, then
// starts again on its data) while the actors of the other nodes send 20
// operations each, and connects r's actors to the new node.
func restartDuringWrites(ctx context.Context, t *testing.T, c *daemontest.Cluster, actors []*actor, r int) {
	t.Helper()
	var others, own []*actor
	for _, a := range actors {
		if a.node == r {
			own = append(own, a)
		} else {
			others = append(others, a)
		}
	}
	done := make(chan error, 1)
	go func() { done <- runActors(ctx, others, 20) }()
	for _, a := range own {
		a.close()
	}
	c.Restart(r)
	t.Logf("restarted node%d", r)
	for _, a := range own {
		a.connect(c.Nodes[r])
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// cutOff cuts node p off from the other nodes' data ports, both ways
// (Heal lifts it): their records reach it only through NATS, when the
// run fans out through NATS, and neither side can pull from the other.
func cutOff(t *testing.T, c *daemontest.Cluster, p int) {
	t.Helper()
	var others []int
	for i := range c.Nodes {
		if i != p {
			others = append(others, i)
		}
	}
	t.Logf("node%d cut off from the others' data ports while they all write", p)
	c.Partition([]int{p}, others)
}

// convergeSetting is what a seed of TestConvergeRandomOps draws besides
// the workload, each from a bit of its own: every combination comes up.
type convergeSetting struct {
	// NATS fans the writes out through a NATS server (bit 0), else TCP.
	NATS bool
	// ValuesInFile runs the daemons with --view-file-values (bit 1),
	// whatever the daemon's default.
	ValuesInFile bool
	// CountersApart puts the counters in a topic of their own (bit 2),
	// else beside the plain keys, whose values then stay on the heap.
	CountersApart bool
}

func convergeSettings(seed uint64) convergeSetting {
	return convergeSetting{NATS: seed&1 == 1, ValuesInFile: seed&2 != 0, CountersApart: seed&4 != 0}
}

func (s convergeSetting) counterTopic() string {
	if s.CountersApart {
		return counterOwnTopic
	}
	return convergeTopic
}

// fileReached says the plain keys' values may go into the view file.
func (s convergeSetting) fileReached() bool { return s.ValuesInFile && s.CountersApart }

// checkFiled checks that the setting reached the daemons: a value of no
// expiry each node takes (a key of its own, of no other operation) goes
// into its view file only. The phases' keys may all have been given an
// expiry, which keeps a value on the heap.
func checkFiled(ctx context.Context, t *testing.T, c *daemontest.Cluster, actors []*actor) {
	t.Helper()
	for i := range c.Nodes {
		if err := actors[i*actorsPerNode].rc.Set(ctx, fmt.Sprintf("%s:filed%d", convergeTopic, i), "f", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Until(t, 10*time.Second, "a value in every node's view file only", func() string {
		for _, nd := range c.Nodes {
			if nd.D.Store().ViewValuesInFile() == 0 {
				return nd.Config.NodeName + " keeps no value in its view file only"
			}
		}
		return ""
	})
}

// valuesInFile is how many values the nodes keep in their view files
// only, summed.
func valuesInFile(c *daemontest.Cluster) int {
	n := 0
	for _, nd := range c.Nodes {
		n += nd.D.Store().ViewValuesInFile()
	}
	return n
}

// convergeCluster starts the 3 nodes of TestConvergeRandomOps, each
// with a Redis door on TCP that takes AUTH as the user cv, with set's
// fan-out and --view-file-values.
func convergeCluster(t *testing.T, set convergeSetting) *daemontest.Cluster {
	t.Helper()
	users := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(users, []byte("user cv on >cv-pw ~* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsURL := ""
	if set.NATS {
		natsURL = testkit.NATS(t, nil).ClientURL()
	}
	return daemontest.NewCluster(t, 3, func(_ int, cfg *daemon.Config) {
		cfg.RedisAddr, cfg.RedisUsers = "127.0.0.1:0", users
		cfg.ViewFileValues = set.ValuesInFile
		if natsURL != "" {
			cfg.Transport, cfg.NATSURL = "nats", natsURL
		}
	})
}

// runActors has every actor send ops operations drawn from convergeOps,
// all at once, and returns the first error.
func runActors(ctx context.Context, actors []*actor, ops int) error {
	total := 0
	for _, op := range convergeOps {
		total += op.weight
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(actors))
	for _, a := range actors {
		wg.Go(func() {
			for range ops {
				w := a.rng.IntN(total)
				for _, op := range convergeOps {
					if w -= op.weight; w < 0 {
						if err := op.run(ctx, a); err != nil {
							errs <- fmt.Errorf("node%d %s: %w", a.node, op.name, err)
							return
						}
						break
					}
				}
				if a.rng.IntN(4) == 0 {
					time.Sleep(time.Duration(a.rng.IntN(3)) * time.Millisecond) // pacing: the clients' think time
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// resetCounters ends a phase of the converged fleet: a's node deletes
// every counter (an odd phase) or gives each an expiry 100 ms ahead (an
// even one), and, once no node serves any, the next phase counts from 0.
func resetCounters(ctx context.Context, t *testing.T, c *daemontest.Cluster, a *actor, phase int) {
	t.Helper()
	for i := range convergeCounters {
		k := a.h.counterTopic + ":c" + strconv.Itoa(i)
		var err error
		if phase%2 == 1 {
			err = a.rc.Del(ctx, k).Err()
		} else {
			err = a.rc.PExpire(ctx, k, 100*time.Millisecond).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	testkit.Until(t, 20*time.Second, "no node serves a counter", func() string {
		for i := range convergeCounters {
			for _, nd := range c.Nodes {
				if e, found := nd.D.Store().Get(a.h.counterTopic, "c"+strconv.Itoa(i)); found {
					return fmt.Sprintf("%s serves c%d = %q", nd.Config.NodeName, i, e.Value)
				}
			}
		}
		return ""
	})
	c.WaitConverged(20 * time.Second)
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	clear(a.h.counts)
	clear(a.h.incremented)
	a.h.answers = nil
}

// checkConverged checks the converged nodes against what the clients
// were told (see TestConvergeRandomOps).
func checkConverged(t *testing.T, c *daemontest.Cluster, h *history) {
	t.Helper()
	st := c.Nodes[0].D.Store()
	winners, changes := lwwWinners(t, st, h)
	for k := range convergeKeys {
		key := "k" + strconv.Itoa(k)
		want, wantFound := st.Get(convergeTopic, key)
		for _, nd := range c.Nodes[1:] {
			if got, found := nd.D.Store().Get(convergeTopic, key); found != wantFound ||
				found && (string(got.Value) != string(want.Value) || got.Stamp != want.Stamp || got.ExpiresAt != want.ExpiresAt) {
				// "same digest" true: the entry a Get reads differs while
				// the digests WaitConverged compared still agree.
				t.Errorf("%s: %s holds %q %+v expiring at %d (found %v), node0 %q %+v expiring at %d (found %v); same digest: %v",
					key, nd.Config.NodeName, got.Value, got.Stamp, got.ExpiresAt, found, want.Value, want.Stamp, want.ExpiresAt, wantFound,
					nd.D.Store().Digest() == st.Digest())
			}
		}
		w, ok := winners[key]
		switch {
		case !ok && wantFound:
			t.Errorf("%s: no client wrote it, the fleet holds %q", key, want.Value)
			continue
		case !ok:
			continue
		case w.Kind() == record.KindTombstone:
			if wantFound {
				t.Errorf("%s: the last write was a DEL (stamp %d/%d), the fleet holds %q stamped %+v", key, w.HLC(), w.Origin(), want.Value, want.Stamp)
			}
			continue
		case !wantFound:
			t.Errorf("%s: the last write set %q (stamp %d/%d), the fleet holds nothing", key, w.Value(), w.HLC(), w.Origin())
			continue
		case string(want.Value) != string(w.Value()) || want.Stamp != w.Stamp():
			t.Errorf("%s: the fleet holds %q stamped %+v, the last write a client sent set %q stamped %+v (a reverted value)",
				key, want.Value, want.Stamp, w.Value(), w.Stamp())
			continue
		}
		if !expiryAllowed(h, key, string(w.Value()), int64(w.ExpiresAt()), want.ExpiresAt) {
			t.Errorf("%s: %q expires at %d, which neither its write nor an expiry command sent while it was there set", key, want.Value, want.ExpiresAt)
		}
		// The rule: the expiry change of this version with the greatest
		// stamp, else the version's own expiry; a change of another
		// version counts for nothing.
		wantExp, by := int64(w.ExpiresAt()), record.Record(nil)
		for _, x := range changes[key] {
			if x.Target() == w.Stamp() && (by == nil || stampAfter(x, by)) {
				wantExp, by = int64(x.ExpiresAt()), x
			}
		}
		if want.ExpiresAt != wantExp {
			t.Errorf("%s: %q expires at %d, the rule says %d", key, want.Value, want.ExpiresAt, wantExp)
		}
	}
}

// checkDoors checks that each node's doors serve what its store holds,
// for every key of the test: a Redis GET and PEXPIRETIME on the Unix
// socket and on TCP, an HTTP GET (value and stamp), and a read of its
// shared view file (value and stamp; the file follows the store a moment
// later, so the check waits for it, bounded).
func checkDoors(ctx context.Context, t *testing.T, c *daemontest.Cluster, actors []*actor) {
	t.Helper()
	var keys [][2]string // topic, name
	for i := range convergeKeys {
		keys = append(keys, [2]string{convergeTopic, "k" + strconv.Itoa(i)})
	}
	for i := range convergeCounters {
		keys = append(keys, [2]string{actors[0].h.counterTopic, "c" + strconv.Itoa(i)})
	}
	for i, nd := range c.Nodes {
		r, err := localview.Open(nd.Config.ViewPath())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		testkit.Until(t, 10*time.Second, nd.Config.NodeName+"'s doors serve its store", func() string {
			for _, k := range keys {
				e, found := nd.D.Store().Get(k[0], k[1])
				if d := doorsDiffer(ctx, actors, i, r, k[0], k[1], e, found); d != "" {
					return fmt.Sprintf("%s: %s:%s: %s", nd.Config.NodeName, k[0], k[1], d)
				}
			}
			return ""
		})
	}
}

// doorsDiffer says how node i's doors (its actors' clients, its view
// file r) serve key name of topic other than its store's entry e
// (found), or "".
func doorsDiffer(ctx context.Context, actors []*actor, i int, r *localview.Reader, topic, name string, e view.Entry, found bool) string {
	stamp := e.Stamp
	if stamp == record.Genesis {
		// A counter made on a key no node held has no version of its
		// own: the doors show stamp 0 (docs/http-api.md).
		stamp = record.Stamp{}
	}
	wantExp := int64(-2) // PEXPIRETIME: -2 no key, -1 no expiry
	switch {
	case found && e.ExpiresAt == 0:
		wantExp = -1
	case found:
		wantExp = e.ExpiresAt
	}
	for _, a := range actors {
		if a.node != i {
			continue
		}
		v, err := a.rc.Get(ctx, topic+":"+name).Result()
		if (err == goredis.Nil) == found || err != nil && err != goredis.Nil || found && v != string(e.Value) {
			return fmt.Sprintf("Redis (tcp %v) GET: %q %v, the store %q (found %v)", a.tcp, v, err, e.Value, found)
		}
		if exp, err := a.rc.Do(ctx, "PEXPIRETIME", topic+":"+name).Int64(); err != nil || exp != wantExp {
			return fmt.Sprintf("Redis (tcp %v) PEXPIRETIME: %v %v, the store's expiry %d", a.tcp, exp, err, wantExp)
		}
		hv, err := a.hc.Get(ctx, topic, name)
		if errors.Is(err, client.ErrNotFound) == found || err != nil && !errors.Is(err, client.ErrNotFound) ||
			found && (string(hv.Bytes) != string(e.Value) || record.Stamp{Origin: hv.Origin, Seq: hv.Seq, HLC: hv.HLC} != stamp) {
			return fmt.Sprintf("HTTP GET: %q %+v %v, the store %q %+v (found %v)", hv.Bytes, hv, err, e.Value, stamp, found)
		}
	}
	v, _, st, err := r.Get(topic, name)
	if errors.Is(err, localview.ErrNotFound) == found || err != nil && !errors.Is(err, localview.ErrNotFound) ||
		found && (string(v) != string(e.Value) || record.Stamp{Origin: st.Origin, Seq: st.Seq, HLC: st.HLC} != stamp) {
		return fmt.Sprintf("view file: %q %+v %v, the store %q %+v (found %v)", v, st, err, e.Value, stamp, found)
	}
	return ""
}

// checkCounters checks that every node holds each counter at 0 plus
// the sum of the increments its clients were told were made in the
// phase, with the same stamp and expiry: none lost, none counted twice
// (and none served when none was made).
func checkCounters(t *testing.T, c *daemontest.Cluster, h *history, phase int) {
	t.Helper()
	for i := range convergeCounters {
		key := "c" + strconv.Itoa(i)
		want, made := strconv.FormatInt(h.counts[h.counterTopic+":"+key], 10), h.incremented[h.counterTopic+":"+key]
		first, _ := c.Nodes[0].D.Store().Get(h.counterTopic, key)
		for _, nd := range c.Nodes {
			got, found := nd.D.Store().Get(h.counterTopic, key)
			if found != made || found && (string(got.Value) != want || got.Stamp != first.Stamp || got.ExpiresAt != first.ExpiresAt) {
				t.Errorf("phase %d, counter %s: %s holds %q %+v expiring at %d (found %v); the acknowledged increments (made: %v) sum to %s, node0's stamp %+v expiry %d",
					phase, key, nd.Config.NodeName, got.Value, got.Stamp, got.ExpiresAt, found, made, want, first.Stamp, first.ExpiresAt)
				logCounter(t, c.Nodes[0].D.Store(), h, key)
				return
			}
		}
	}
}

// logCounter logs, for a failed check of counter key, the counter
// commands of the phase with their answers and the key's records in
// st's log (each increment's version or absence, each expiry change's
// target), from which the count can be redone.
func logCounter(t *testing.T, st *store.Store, h *history, key string) {
	t.Helper()
	h.mu.Lock()
	for _, a := range h.answers {
		t.Log(a)
	}
	h.mu.Unlock()
	for origin, last := range st.LogVector() {
		if _, err := st.ReadOrigin(origin, 1, last, func(r record.Record) error {
			if string(r.Topic()) == h.counterTopic && string(r.Key()) == key {
				t.Logf("record %d/%d hlc %d: %v version %d of %+v, expires %d, gone %d, value %q, batch follow %d",
					r.Origin(), r.Seq(), r.HLC(), r.Kind(), r.Version(), r.Target(), r.ExpiresAt(), r.Gone(), r.Value(), r.BatchFollow())
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// lwwWinners reads node st's log: for each key, the record that wins by
// (HLC, origin) among the values and deletes clients sent (a value's
// first record: a later record of the same value is a command's copy of
// it, not a write), and the key's expiry changes. The records are
// copied.
func lwwWinners(t *testing.T, st *store.Store, h *history) (winners map[string]record.Record, changes map[string][]record.Record) {
	t.Helper()
	first := map[string]record.Record{} // by value
	dels := map[string][]record.Record{}
	changes = map[string][]record.Record{}
	for origin, last := range st.LogVector() {
		if _, err := st.ReadOrigin(origin, 1, last, func(r record.Record) error {
			if string(r.Topic()) != convergeTopic {
				return nil
			}
			switch r.Kind() {
			case record.KindExpiry:
				changes[string(r.Key())] = append(changes[string(r.Key())], slices.Clone(r))
			case record.KindTombstone:
				dels[string(r.Key())] = append(dels[string(r.Key())], slices.Clone(r))
			case record.KindValue:
				v := string(r.Value())
				if _, sent := h.values[v]; sent {
					if f, ok := first[v]; !ok || stampAfter(f, r) {
						first[v] = slices.Clone(r)
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	winners = map[string]record.Record{}
	consider := func(r record.Record) {
		k := string(r.Key())
		if w, ok := winners[k]; !ok || stampAfter(r, w) {
			winners[k] = r
		}
	}
	for _, r := range first {
		consider(r)
	}
	for _, rs := range dels {
		for _, r := range rs {
			consider(r)
		}
	}
	return winners, changes
}

// stampAfter reports whether a's (HLC, origin) is greater than b's.
func stampAfter(a, b record.Record) bool {
	if a.HLC() != b.HLC() {
		return a.HLC() > b.HLC()
	}
	return a.Origin() > b.Origin()
}

// expiryAllowed reports whether the fleet's expiry got for key, whose
// value is value (own expiry own), is own or one an expiry command that
// answered 1 after that value was sent set.
func expiryAllowed(h *history, key, value string, own, got int64) bool {
	if got == own {
		return true
	}
	sent := h.values[value].start
	for _, e := range h.expiries {
		if e.key == convergeTopic+":"+key && e.end.After(sent) && got >= e.lo && got <= e.hi {
			return true
		}
	}
	return false
}
