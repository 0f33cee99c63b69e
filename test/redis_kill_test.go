package test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/localview"
)

// The keys of TestRedisDoorKillRandomOps: the plain keys in rkTopic, each
// written by one actor only (so that what each holds follows from its
// acknowledged commands alone), the counters in a topic of their own
// (a topic with counters keeps its plain values on the heap), incremented
// by every actor.
const (
	rkTopic         = "rk"
	rkCounterTopic  = "rkc"
	rkActorsPerNode = 2
	rkKeysPerActor  = 3
	rkCounters      = 3
	rkOpsPerActor   = 120
	// rkMoveEvery: an actor moves its keys to another node once in so
	// many operations, on average.
	rkMoveEvery = 25
)

// rkState is what a key holds by the model: nothing, or a value whose
// expiry lies in [lo, hi] (Unix ms; 0: none).
type rkState struct {
	present bool
	value   string
	lo, hi  int64
}

// live says whether a key in state s is served at every instant of
// [from, to] (Unix ms; the nodes share the test's clock): 1 yes, 0 no,
// -1 it expires in between, or may have.
func (s rkState) live(from, to int64) int {
	switch {
	case !s.present:
		return 0
	case s.lo == 0 || to < s.lo:
		return 1
	case from > s.hi:
		return 0
	}
	return -1
}

// rkObs is a key as a node's Redis door served it: its value and its
// PEXPIRETIME (-1: none).
type rkObs struct {
	present bool
	value   string
	exp     int64
}

// allows says whether a node may serve o for a key in state s between
// from and to.
func (s rkState) allows(o rkObs, from, to int64) bool {
	live := s.live(from, to)
	if !o.present {
		return live != 1
	}
	if live == 0 || o.value != s.value {
		return false
	}
	if s.lo == 0 {
		return o.exp == -1
	}
	return o.exp >= s.lo && o.exp <= s.hi
}

// state is o as a model state.
func (o rkObs) state() rkState {
	if !o.present {
		return rkState{}
	}
	s := rkState{present: true, value: o.value}
	if o.exp != -1 {
		s.lo, s.hi = o.exp, o.exp
	}
	return s
}

// rkEffect is what a write does if it applied: the new states of keys
// (a reply-checked command's as its reply said) and counter increments.
type rkEffect struct {
	after map[string]rkState
	incs  map[string]int64
}

// rkMismatch is a door's answer the model forbids: the test fails on it,
// whatever else happened.
type rkMismatch struct{ msg string }

func (m rkMismatch) Error() string { return m.msg }

func mismatchf(format string, args ...any) error { return rkMismatch{fmt.Sprintf(format, args...)} }

// rkCounts are the counters' acknowledged increments, and those whose
// node was killed before it answered (each applied whole or not at all).
type rkCounts struct {
	mu      sync.Mutex
	acked   map[string]int64
	unknown map[string][]int64
}

func (c *rkCounts) add(incs map[string]int64, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range incs {
		if known {
			c.acked[k] += n
		} else {
			c.unknown[k] = append(c.unknown[k], n)
		}
	}
}

// allows says whether counter k may hold v: its acknowledged increments
// plus any of the unknown ones.
func (c *rkCounts) allows(k string, v int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.unknown[k]
	for mask := range 1 << len(u) {
		sum := c.acked[k]
		for i, n := range u {
			if mask&(1<<i) != 0 {
				sum += n
			}
		}
		if sum == v {
			return true
		}
	}
	return false
}

// rkFleet is the nodes of the test and their lives: gen[i] counts node
// i's kills, up[i] is closed once it serves again after the last one.
type rkFleet struct {
	nodes []*clusterNode
	acked atomic.Int64 // operations answered, of every actor
	moves atomic.Int64 // actors moved to another node
	// unanswered counts the operations a kill left unanswered, by how
	// resolve decided them: applied, not applied, cannot tell.
	unanswered [3]atomic.Int64
	mu         sync.Mutex
	gen        []int
	up         []chan struct{}
}

// life is node i's generation and the channel closed when it serves.
func (f *rkFleet) life(i int) (int, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen[i], f.up[i]
}

// rkActor is one client of one node writing its own keys through the
// node's three doors (Redis on the Unix socket, Redis on TCP with AUTH,
// HTTP), and incrementing the shared counters.
type rkActor struct {
	id, node int
	f        *rkFleet
	redis    [2]*goredis.Client // Unix socket, TCP
	hc       *client.Client
	gen      int // the node's generation the clients were opened in
	rng      *mrand.Rand
	keys     []string // Redis names, rk:a3k1
	model    map[string]rkState
	counts   *rkCounts
	n        int
}

// connect opens a's clients of its node in its generation gen.
func (a *rkActor) connect(gen int) {
	n := a.f.nodes[a.node]
	a.gen = gen
	opts := goredis.Options{Network: "unix", Addr: n.RedisSocket(), Protocol: 2, MaxRetries: -1,
		DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	a.redis[0] = goredis.NewClient(&opts)
	opts.Network, opts.Addr, opts.Username, opts.Password = "tcp", n.RedisAddr, "rk", "rk-pw"
	a.redis[1] = goredis.NewClient(&opts)
	a.hc = client.New(n.Socket, client.WithTimeout(10*time.Second))
}

func (a *rkActor) close() {
	a.redis[0].Close()
	a.redis[1].Close()
	a.hc.Close()
}

// rc is one of the Redis doors, drawn.
func (a *rkActor) rc() *goredis.Client { return a.redis[a.rng.IntN(2)] }

func (a *rkActor) key() string { return a.keys[a.rng.IntN(len(a.keys))] }

func (a *rkActor) value() string {
	a.n++
	return fmt.Sprintf("a%d-%d-%x", a.id, a.n, a.rng.Uint32())
}

func (a *rkActor) counter() string {
	return rkCounterTopic + ":c" + strconv.Itoa(a.rng.IntN(rkCounters))
}

// nameOf is the key name of Redis key k in its topic, as HTTP names it.
func nameOf(k string) string { return k[strings.IndexByte(k, ':')+1:] }

// rkOp is one kind of operation: run sends it and returns its effect
// were it applied (for a reply-checked command, as the reply says when
// there is one), a read checks what it read against the model.
type rkOp struct {
	name   string
	weight int
	run    func(ctx context.Context, a *rkActor) (rkEffect, error)
}

// ms is t in Unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// set sends a SET of a fresh value with args after it (an expiry) and
// says its state: an expiry d ms after it was taken (d > 0) or at (at > 0).
func (a *rkActor) set(ctx context.Context, d, at int64, args ...any) (rkEffect, error) {
	k, v := a.key(), a.value()
	start := time.Now()
	err := a.rc().Do(ctx, append([]any{"SET", k, v}, args...)...).Err()
	s := rkState{present: true, value: v, lo: at, hi: at}
	if d > 0 {
		s.lo, s.hi = ms(start)+d, ms(time.Now())+d
	}
	return rkEffect{after: map[string]rkState{k: s}}, err
}

// expire sends an expiry change of d ms (PEXPIRE) and checks its reply.
func (a *rkActor) expire(ctx context.Context, d int64) (rkEffect, error) {
	k := a.key()
	s := a.model[k]
	start := time.Now()
	r, err := a.rc().PExpire(ctx, k, time.Duration(d)*time.Millisecond).Result()
	end := time.Now()
	applied := rkState{}
	if s.present {
		applied = rkState{present: true, value: s.value, lo: ms(start) + d, hi: ms(end) + d}
	}
	if err != nil {
		return rkEffect{after: map[string]rkState{k: applied}}, err
	}
	return a.replied("PEXPIRE", k, s, r, s.live(ms(start), ms(end)), applied)
}

// replied checks the reply r of a command on key k in state s that
// answers whether k was live (PEXPIRE, DEL), and is the command's effect:
// after when it answered so, else none (k had expired).
func (a *rkActor) replied(what, k string, s rkState, r bool, live int, after rkState) (rkEffect, error) {
	if r && live == 0 || !r && live == 1 {
		return rkEffect{}, mismatchf("actor %d: %s %s answered %v; the model's state %+v (live %d)", a.id, what, k, r, s, live)
	}
	if !r {
		after = rkState{}
	}
	return rkEffect{after: map[string]rkState{k: after}}, nil
}

// persist sends a PERSIST and checks its reply: 1 for a live key with an
// expiry, 0 for one without (which stays as it is) or none.
func (a *rkActor) persist(ctx context.Context) (rkEffect, error) {
	k := a.key()
	s := a.model[k]
	start := time.Now()
	r, err := a.rc().Persist(ctx, k).Result()
	end := time.Now()
	applied := rkState{present: s.present, value: s.value}
	if err != nil {
		return rkEffect{after: map[string]rkState{k: applied}}, err
	}
	live := s.live(ms(start), ms(end))
	if s.lo == 0 && live == 1 {
		if r {
			return rkEffect{}, mismatchf("actor %d: PERSIST %s answered true; the model's state %+v has no expiry", a.id, k, s)
		}
		return rkEffect{}, nil
	}
	return a.replied("PERSIST", k, s, r, live, applied)
}

// del sends a DEL and checks its reply.
func (a *rkActor) del(ctx context.Context) (rkEffect, error) {
	k := a.key()
	s := a.model[k]
	start := time.Now()
	n, err := a.rc().Del(ctx, k).Result()
	if err != nil {
		return rkEffect{after: map[string]rkState{k: {}}}, err
	}
	return a.replied("DEL", k, s, n == 1, s.live(ms(start), ms(time.Now())), rkState{})
}

// get reads a key through a Redis door (GET and PEXPIRETIME) or the HTTP
// API (the value only) and checks it against the model.
func (a *rkActor) get(ctx context.Context, redis bool) (rkEffect, error) {
	k := a.key()
	s := a.model[k]
	start := time.Now()
	var o rkObs
	var err error
	door := "Redis door"
	if redis {
		o, err = readRedis(ctx, a.rc(), k)
	} else {
		door = "HTTP API"
		var hv client.Value
		hv, err = a.hc.Get(ctx, rkTopic, nameOf(k))
		o = rkObs{present: err == nil, value: string(hv.Bytes), exp: -1}
		if o.present && s.lo != 0 {
			o.exp = s.lo // HTTP says no expiry: the value alone is checked
		}
		if errors.Is(err, client.ErrNotFound) {
			err = nil
		}
	}
	if err == nil && !s.allows(o, ms(start), ms(time.Now())) {
		err = mismatchf("actor %d: node%d's %s serves %s as %+v; the model's state %+v", a.id, a.node, door, k, o, s)
	}
	return rkEffect{}, err
}

// pipelined reads a's keys through a Redis door in one pipeline: GETs of
// them in an order drawn (a key twice at times), then an MGET of all,
// each checked against the model (the value: a pipeline's GETs are
// loaded ahead together).
func (a *rkActor) pipelined(ctx context.Context) (rkEffect, error) {
	var ks []string
	for range 2 + a.rng.IntN(4) {
		ks = append(ks, a.key())
	}
	var gets []*goredis.StringCmd
	var mget *goredis.SliceCmd
	start := time.Now()
	cmds, _ := a.rc().Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, k := range ks {
			gets = append(gets, p.Get(ctx, k))
		}
		mget = p.MGet(ctx, a.keys...)
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); err != nil && err != goredis.Nil {
			return rkEffect{}, err
		}
	}
	from, to := ms(start), ms(time.Now())
	check := func(how, k string, v any) error {
		o := rkObs{exp: -1}
		if s, ok := v.(string); ok {
			o.present, o.value = true, s
		}
		if s := a.model[k]; o.present && s.lo != 0 {
			o.exp = s.lo // the value alone is checked
		}
		if !a.model[k].allows(o, from, to) {
			return mismatchf("actor %d: node%d's pipelined %s serves %s as %+v; the model's state %+v", a.id, a.node, how, k, o, a.model[k])
		}
		return nil
	}
	for i, g := range gets {
		var v any
		if g.Err() == nil {
			v = g.Val()
		}
		if err := check("GET", ks[i], v); err != nil {
			return rkEffect{}, err
		}
	}
	for i, v := range mget.Val() {
		if err := check("MGET", a.keys[i], v); err != nil {
			return rkEffect{}, err
		}
	}
	return rkEffect{}, nil
}

// multi sends a transaction of a SET of one key, a PEXPIRE of another, a
// DEL of the third and an increment of a counter: all of it applies, or
// none.
func (a *rkActor) multi(ctx context.Context) (rkEffect, error) {
	perm := a.rng.Perm(len(a.keys))
	ks, ke, kd := a.keys[perm[0]], a.keys[perm[1]], a.keys[perm[2]]
	v, d, c, n := a.value(), 3_600_000+a.rng.Int64N(3_600_000), a.counter(), a.rng.Int64N(9)
	se, sd := a.model[ke], a.model[kd]
	var expired *goredis.BoolCmd
	var deleted *goredis.IntCmd
	start := time.Now()
	_, err := a.rc().TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, ks, v, 0)
		expired = p.PExpire(ctx, ke, time.Duration(d)*time.Millisecond)
		deleted = p.Del(ctx, kd)
		p.IncrBy(ctx, c, n)
		return nil
	})
	end := time.Now()
	withExpiry := rkState{}
	if se.present {
		withExpiry = rkState{present: true, value: se.value, lo: ms(start) + d, hi: ms(end) + d}
	}
	eff := rkEffect{after: map[string]rkState{ks: {present: true, value: v}, ke: withExpiry, kd: {}}, incs: map[string]int64{c: n}}
	if err != nil {
		return eff, err
	}
	e, err := a.replied("MULTI: PEXPIRE", ke, se, expired.Val(), se.live(ms(start), ms(end)), withExpiry)
	if err != nil {
		return eff, err
	}
	eff.after[ke] = e.after[ke]
	_, err = a.replied("MULTI: DEL", kd, sd, deleted.Val() == 1, sd.live(ms(start), ms(end)), rkState{})
	return eff, err
}

var rkOps = []rkOp{
	{"SET", 20, func(ctx context.Context, a *rkActor) (rkEffect, error) { return a.set(ctx, 0, 0) }},
	{"SET EX", 8, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		s := 3600 + a.rng.Int64N(3600)
		return a.set(ctx, s*1000, 0, "EX", s)
	}},
	{"SET PX short", 6, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		d := 200 + a.rng.Int64N(1300)
		return a.set(ctx, d, 0, "PX", d)
	}},
	{"SET PXAT", 4, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		at := ms(time.Now().Add(time.Hour)) + a.rng.Int64N(3_600_000)
		return a.set(ctx, 0, at, "PXAT", at)
	}},
	{"PEXPIRE", 8, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		return a.expire(ctx, 3_600_000+a.rng.Int64N(3_600_000))
	}},
	{"PEXPIRE short", 3, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		return a.expire(ctx, 300+a.rng.Int64N(1200))
	}},
	{"PERSIST", 6, func(ctx context.Context, a *rkActor) (rkEffect, error) { return a.persist(ctx) }},
	{"DEL", 6, func(ctx context.Context, a *rkActor) (rkEffect, error) { return a.del(ctx) }},
	{"HTTP PUT", 10, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		k, v := a.key(), a.value()
		_, err := a.hc.Publish(ctx, rkTopic, nameOf(k), []byte(v), "")
		return rkEffect{after: map[string]rkState{k: {present: true, value: v}}}, err
	}},
	{"HTTP DELETE", 4, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		k := a.key()
		_, err := a.hc.Delete(ctx, rkTopic, nameOf(k))
		return rkEffect{after: map[string]rkState{k: {}}}, err
	}},
	{"GET", 12, func(ctx context.Context, a *rkActor) (rkEffect, error) { return a.get(ctx, true) }},
	{"pipelined GETs", 6, func(ctx context.Context, a *rkActor) (rkEffect, error) { return a.pipelined(ctx) }},
	{"HTTP GET", 6, func(ctx context.Context, a *rkActor) (rkEffect, error) { return a.get(ctx, false) }},
	{"INCRBY", 10, func(ctx context.Context, a *rkActor) (rkEffect, error) {
		c, d := a.counter(), a.rng.Int64N(20)-5
		err := a.rc().IncrBy(ctx, c, d).Err()
		return rkEffect{incs: map[string]int64{c: d}}, err
	}},
	{"MULTI", 6, func(ctx context.Context, a *rkActor) (rkEffect, error) { return a.multi(ctx) }},
}

// readRedis reads key k through rc: GET, then PEXPIRETIME (a key that
// expired in between is none).
func readRedis(ctx context.Context, rc *goredis.Client, k string) (rkObs, error) {
	v, err := rc.Get(ctx, k).Result()
	if err != nil && err != goredis.Nil {
		return rkObs{}, err
	}
	found := err == nil
	exp, err := rc.Do(ctx, "PEXPIRETIME", k).Int64()
	switch {
	case err != nil:
		return rkObs{}, err
	case !found && exp != -2:
		return rkObs{}, mismatchf("%s: GET found none, then PEXPIRETIME %d", k, exp)
	case exp == -2:
		return rkObs{}, nil
	}
	return rkObs{present: true, value: v, exp: exp}, nil
}

// run sends ops operations drawn from rkOps, checks each answer and
// follows it in the model. An operation its node was killed under is
// decided once the node serves again (resolve).
func (a *rkActor) run(ctx context.Context, ops int) error {
	total := 0
	for _, op := range rkOps {
		total += op.weight
	}
	for range ops {
		w := a.rng.IntN(total)
		op := rkOps[0]
		for _, op = range rkOps {
			if w -= op.weight; w < 0 {
				break
			}
		}
		if a.rng.IntN(rkMoveEvery) == 0 {
			if err := a.move(ctx); err != nil {
				return err
			}
		}
		eff, err := op.run(ctx, a)
		if err == nil {
			for k, s := range eff.after {
				a.model[k] = s
			}
			a.counts.add(eff.incs, true)
			a.f.acked.Add(1)
			continue
		}
		if err := a.afterKill(ctx, op.name, eff, err); err != nil {
			return err
		}
	}
	return nil
}

// afterKill takes an operation's error err: unless the model forbade its
// answer, and if its node was killed since a's clients were opened, it
// waits for the node to serve again and resolves the operation (again,
// if the node is killed once more meanwhile).
func (a *rkActor) afterKill(ctx context.Context, what string, eff rkEffect, err error) error {
	for err != nil {
		gen, up := a.f.life(a.node)
		if errors.As(err, new(rkMismatch)) || gen == a.gen {
			return fmt.Errorf("actor %d on node%d: %s: %w", a.id, a.node, what, err)
		}
		select {
		case <-up:
		case <-ctx.Done():
			return ctx.Err()
		}
		a.close()
		a.connect(gen)
		err = a.resolve(ctx, what, eff)
	}
	return nil
}

// move takes a's keys to another node b: a PUT of one of them on its
// node, then, once b holds every record its node held with that PUT, a
// talks to b. What a sends b then comes after everything a wrote before
// (b's stamps are past theirs), and b's answers follow from it.
func (a *rkActor) move(ctx context.Context) error {
	k, v := a.keys[0], a.value()
	res, err := a.hc.Publish(ctx, rkTopic, nameOf(k), []byte(v), "")
	eff := rkEffect{after: map[string]rkState{k: {present: true, value: v}}}
	if err != nil {
		return a.afterKill(ctx, "PUT before a move", eff, err) // no move
	}
	a.model[k] = eff.after[k]
	var held map[uint64]uint64
	if _, err := a.f.waitVector(ctx, a.node, func(vec map[uint64]uint64) bool {
		held = vec
		return vec[res.Origin] >= res.Seq
	}); err != nil {
		return fmt.Errorf("actor %d: %w", a.id, err)
	}
	b := (a.node + 1 + a.rng.IntN(len(a.f.nodes)-1)) % len(a.f.nodes)
	gen, err := a.f.waitVector(ctx, b, func(vec map[uint64]uint64) bool {
		for o, seq := range held {
			if vec[o] < seq {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("actor %d: %w", a.id, err)
	}
	a.close()
	a.node = b
	a.connect(gen)
	a.f.moves.Add(1)
	return nil
}

// waitVector waits until node i's view covers a vector cond takes (its
// GET /v1/status's, origin -> highest seq), through its kills, and says
// the node's generation that answered.
func (f *rkFleet) waitVector(ctx context.Context, i int, cond func(map[uint64]uint64) bool) (int, error) {
	deadline, last := time.Now().Add(30*time.Second), ""
	for ; time.Now().Before(deadline); time.Sleep(testkit.Step) {
		gen, up := f.life(i)
		select {
		case <-up:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		d, err := viewDigestOf(ctx, f.nodes[i])
		if err != nil {
			last = err.Error()
			continue
		}
		vec := map[uint64]uint64{}
		for o, seq := range d.Vector {
			origin, err := strconv.ParseUint(o, 16, 64)
			if err != nil {
				return 0, fmt.Errorf("node%d: vector %v: %w", i, d.Vector, err)
			}
			vec[origin] = seq
		}
		if cond(vec) {
			return gen, nil
		}
		last = fmt.Sprintf("vector %v", d.Vector)
	}
	return 0, fmt.Errorf("node%d did not cover the vector in 30s: %s", i, last)
}

// resolve decides, from what its node serves after it came back, whether
// the write its node was killed under applied, and follows that in the
// model: its keys all hold what it wrote or all what they held before
// (a MULTI applies whole or not at all). An increment alone cannot be
// read apart from the others': it counts as unknown.
func (a *rkActor) resolve(ctx context.Context, what string, eff rkEffect) error {
	if len(eff.after) == 0 {
		a.counts.add(eff.incs, false)
		a.f.unanswered[2].Add(1)
		return nil
	}
	from := ms(time.Now())
	obs := map[string]rkObs{}
	for k := range eff.after {
		o, err := readRedis(ctx, a.redis[0], k)
		if err != nil {
			return err
		}
		obs[k] = o
	}
	to := ms(time.Now())
	applied, not := true, true
	for k, s := range eff.after {
		applied = applied && s.allows(obs[k], from, to)
		not = not && a.model[k].allows(obs[k], from, to)
	}
	if !applied && !not {
		return mismatchf("actor %d: after node%d came back, its keys hold %+v: neither what they held before the %s it was killed under (%+v) nor after it (%+v)",
			a.id, a.node, obs, what, a.model, eff.after)
	}
	switch {
	case applied && not:
		a.counts.add(eff.incs, false)
		a.f.unanswered[2].Add(1)
	case applied:
		a.counts.add(eff.incs, true)
		a.f.unanswered[0].Add(1)
	default:
		a.f.unanswered[1].Add(1)
	}
	for k, o := range obs {
		a.model[k] = o.state()
	}
	return nil
}

// rkKill is a kill of the plan: node, once the actors had at operations
// answered, with SIGTERM (term) or SIGKILL.
type rkKill struct {
	node, at int
	term     bool
}

// killDuring kills the nodes of plan in turn, each at its moment, and
// starts each again at once on its data; done is closed when the actors
// are, which ends the waits.
func killDuring(t *testing.T, f *rkFleet, plan []rkKill, done <-chan struct{}) {
	t.Helper()
	for _, k := range plan {
		testkit.Until(t, 2*time.Minute, fmt.Sprintf("%d operations answered", k.at), func() string {
			select {
			case <-done:
				return ""
			default:
			}
			if f.acked.Load() < int64(k.at) {
				return fmt.Sprintf("%d answered", f.acked.Load())
			}
			return ""
		})
		f.mu.Lock()
		f.gen[k.node]++
		up := make(chan struct{})
		f.up[k.node] = up
		f.mu.Unlock()
		n := f.nodes[k.node]
		if k.term {
			n.Stop()
		} else {
			n.Kill()
		}
		t.Logf("node%d stopped (SIGTERM %v) after %d operations answered", k.node, k.term, f.acked.Load())
		n.Start()
		close(up)
	}
}

// rkPlan draws the kills: one or two, of any node, mostly SIGKILL, at a
// moment between a fifth and four fifths of the operations.
func rkPlan(rng *mrand.Rand, nodes, ops int) []rkKill {
	plan := []rkKill{{node: rng.IntN(nodes), at: ops/5 + rng.IntN(ops/3), term: rng.IntN(3) == 0}}
	if rng.IntN(2) == 0 {
		plan = append(plan, rkKill{node: rng.IntN(nodes), at: plan[0].at + ops/10 + rng.IntN(ops/4), term: rng.IntN(3) == 0})
	}
	return plan
}

// rkDiffers says how the nodes' doors differ from each other or from the
// model, or "": each key as every node's Redis door (GET, PEXPIRETIME),
// HTTP API and shared view file (value, stamp) serve it, each counter as
// every Redis door does.
func rkDiffers(ctx context.Context, f *rkFleet, rcs []*goredis.Client, actors []*rkActor, counts *rkCounts) string {
	from := ms(time.Now())
	type seen struct {
		o     rkObs
		stamp [3]uint64 // HLC, origin, seq
	}
	got := make([]map[string]seen, len(f.nodes))
	for i, n := range f.nodes {
		r, err := localview.Open(config.Config{Socket: n.Socket, ViewFile: config.ViewFileAuto}.ViewPath())
		if err != nil {
			return err.Error()
		}
		defer r.Close()
		got[i] = map[string]seen{}
		for _, a := range actors {
			for _, k := range a.keys {
				o, err := readRedis(ctx, rcs[i], k)
				if err != nil {
					return fmt.Sprintf("node%d: %v", i, err)
				}
				hv, herr := n.Client.Get(ctx, rkTopic, nameOf(k))
				fv, _, fst, ferr := r.Get(rkTopic, nameOf(k))
				switch {
				case herr != nil && !errors.Is(herr, client.ErrNotFound), ferr != nil && !errors.Is(ferr, localview.ErrNotFound):
					return fmt.Sprintf("node%d: %s: HTTP %v, view file %v", i, k, herr, ferr)
				case (herr == nil) != o.present || (ferr == nil) != o.present || o.present && (string(hv.Bytes) != o.value || string(fv) != o.value):
					return fmt.Sprintf("node%d: %s: Redis %+v, HTTP %q (%v), view file %q (%v)", i, k, o, hv.Bytes, herr, fv, ferr)
				case o.present && [3]uint64{hv.HLC, hv.Origin, hv.Seq} != [3]uint64{fst.HLC, fst.Origin, fst.Seq}:
					return fmt.Sprintf("node%d: %s: stamp %d/%d/%d on HTTP, %+v in the view file", i, k, hv.HLC, hv.Origin, hv.Seq, fst)
				}
				got[i][k] = seen{o, [3]uint64{hv.HLC, hv.Origin, hv.Seq}}
			}
		}
	}
	to := ms(time.Now())
	for _, a := range actors {
		for _, k := range a.keys {
			for i := range f.nodes {
				if got[i][k] != got[0][k] {
					return fmt.Sprintf("%s: node%d serves %+v, node0 %+v", k, i, got[i][k], got[0][k])
				}
			}
			if !a.model[k].allows(got[0][k].o, from, to) {
				return fmt.Sprintf("%s: every node serves %+v; the model's state %+v", k, got[0][k].o, a.model[k])
			}
		}
	}
	return countersDiffer(ctx, rcs, counts)
}

// countersDiffer says how the nodes' counters differ from each other or
// from the increments acknowledged, or "".
func countersDiffer(ctx context.Context, rcs []*goredis.Client, counts *rkCounts) string {
	for c := range rkCounters {
		k := rkCounterTopic + ":c" + strconv.Itoa(c)
		var first int64
		for i, rc := range rcs {
			v, err := rc.Get(ctx, k).Int64()
			if err == goredis.Nil {
				v, err = 0, nil
			}
			if err != nil {
				return fmt.Sprintf("node%d: GET %s: %v", i, k, err)
			}
			if i == 0 {
				first = v
			} else if v != first {
				return fmt.Sprintf("%s: node%d holds %d, node0 %d", k, i, v, first)
			}
		}
		if !counts.allows(k, first) {
			counts.mu.Lock()
			defer counts.mu.Unlock()
			return fmt.Sprintf("%s: every node holds %d; the acknowledged increments sum to %d, unknown ones %v", k, first, counts.acked[k], counts.unknown[k])
		}
	}
	return ""
}

// TestRedisDoorKillRandomOps writes through every door of three nodes at
// once while nodes are killed: on each node, actors send SET (plain, EX,
// PX of a second or so, PXAT), PEXPIRE (far and near), PERSIST, DEL,
// MULTI/EXEC (a SET, a PEXPIRE, a DEL and an INCRBY) through the Redis
// door on the Unix socket and on TCP with AUTH, PUT and DELETE through
// the HTTP API, to keys of their own, and INCRBY to counters every actor
// increments; they read their keys back (GET, pipelined GETs and MGET,
// HTTP GET) and check every answer against a model of what was
// acknowledged. Now and then an actor moves to another node, once that
// node holds what its own held after the actor's last write there. One or two nodes are killed (SIGKILL, or
// SIGTERM) and restarted at once on their data at moments the seed
// draws, while the other nodes' actors go on; a write
// its node was killed under counts as applied or not as the node serves
// it once back (a MULTI whole or not at all). Then every node's Redis
// door, HTTP API and shared view file serve the same value, stamp and
// expiry for every key, as the model says, and every counter is the sum
// of the increments acknowledged (plus any of those killed unanswered).
// The seed (-cluster.seed) draws the workload, the kills, --flush,
// --view-file-values and the fan-out (TCP or NATS).
func TestRedisDoorKillRandomOps(t *testing.T) {
	t.Parallel()
	seed := testSeed(t)
	rng := mrand.New(mrand.NewPCG(seed, 0x4b11))
	users := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(users, []byte("user rk on >rk-pw ~* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{valuesInFileArg(t, seed), "--flush", []string{"async", "sync"}[rng.IntN(2)], "--redis-users", users}
	if rng.IntN(2) == 1 {
		args = append(args, "--transport", "nats", "--nats-url", testkit.NATS(t, nil).ClientURL())
	}
	t.Logf("flags: %v", args)
	specs := threeNodes(args...)
	for i := range specs {
		specs[i].RedisTCP = true
	}
	nodes := startClusterNodes(t, specs)
	waitClusterUp(t, nodes, namesOf(nodes), false, 15*time.Second)
	f := &rkFleet{nodes: nodes, gen: make([]int, 3)}
	for range nodes {
		up := make(chan struct{})
		close(up)
		f.up = append(f.up, up)
	}
	counts := &rkCounts{acked: map[string]int64{}, unknown: map[string][]int64{}}
	var actors []*rkActor
	for i := range len(nodes) * rkActorsPerNode {
		a := &rkActor{id: i, node: i / rkActorsPerNode, f: f, rng: mrand.New(mrand.NewPCG(seed, uint64(1+i))),
			model: map[string]rkState{}, counts: counts}
		for j := range rkKeysPerActor {
			a.keys = append(a.keys, fmt.Sprintf("%s:a%dk%d", rkTopic, i, j))
		}
		a.connect(0)
		t.Cleanup(func() { a.close() })
		actors = append(actors, a)
	}
	plan := rkPlan(rng, len(nodes), len(actors)*rkOpsPerActor)
	t.Logf("kills: %+v", plan)

	c := ctx(t)
	errs := make(chan error, len(actors))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range actors {
		wg.Go(func() { errs <- a.run(c, rkOpsPerActor) })
	}
	go func() { wg.Wait(); close(done) }()
	killDuring(t, f, plan, done)
	<-done
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	counts.mu.Lock()
	t.Logf("%d operations answered, %d moves; left unanswered by a kill: %d applied, %d not, %d either; counters %v, unknown increments %v",
		f.acked.Load(), f.moves.Load(), f.unanswered[0].Load(), f.unanswered[1].Load(), f.unanswered[2].Load(), counts.acked, counts.unknown)
	counts.mu.Unlock()

	rcs := make([]*goredis.Client, len(nodes))
	for i, n := range nodes {
		rcs[i] = goredis.NewClient(&goredis.Options{Network: "unix", Addr: n.RedisSocket(), Protocol: 2})
		defer rcs[i].Close()
	}
	testkit.Until(t, 30*time.Second, "every node's doors serving the model", func() string {
		return rkDiffers(c, f, rcs, actors, counts)
	})
	stopAll(nodes)
}
