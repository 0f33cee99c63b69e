package daemon

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// goRedis is a go-redis client of td's Redis socket, speaking proto.
func goRedis(t *testing.T, td *testDaemon, proto int) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Network: "unix", Addr: td.d.RedisSocketPath(), Protocol: proto,
		DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// must returns v, or panics on err: the test fails with the stack of
// the call that failed.
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

// must2 is must for two values.
func must2[T, U any](v T, u U, err error) (T, U) {
	return v, must(u, err)
}

// noErr fails the test on err.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr checks that err is a Redis error holding every part.
func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one with %q", what, parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: error %q, want it to hold %q", what, err, p)
		}
	}
}

// TestRedisGoRedis runs the commands through go-redis, over RESP2 and RESP3.
func TestRedisGoRedis(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			rc := goRedis(t, td, proto)
			p := fmt.Sprintf("p%d", proto) // this run's topic
			if got := must(rc.Ping(ctx).Result()); got != "PONG" {
				t.Fatalf("PING: %q", got)
			}
			must(rc.Set(ctx, p+":sku-1", "12.50", 0).Result())
			// The same value through HTTP, GET and HGET.
			if r := td.do("GET", "/v1/topics/"+p+"/keys/sku-1", nil); r.status != 200 || string(r.body) != "12.50" {
				t.Fatalf("HTTP GET after SET: %d %s", r.status, r.body)
			}
			if got := must(rc.Get(ctx, p+":sku-1").Result()); got != "12.50" {
				t.Fatalf("GET: %q", got)
			}
			if got := must(rc.HGet(ctx, p, "sku-1").Result()); got != "12.50" {
				t.Fatalf("HGET: %q", got)
			}
			// A key without ':' is in the default topic.
			must(rc.Set(ctx, "plain"+p, "x", 0).Result())
			if got := must(rc.Get(ctx, "default:plain"+p).Result()); got != "x" {
				t.Fatalf("GET default:plain: %q", got)
			}
			if _, err := rc.Get(ctx, p+":missing").Result(); !errors.Is(err, goredis.Nil) {
				t.Fatalf("GET missing: %v, want redis.Nil", err)
			}
			// A hash read as a string is WRONGTYPE.
			wantErr(t, "GET of a topic", rc.Get(ctx, p).Err(), "WRONGTYPE")

			must(rc.MSet(ctx, p+":a", "1", p+":b", "2", p+":c", "3").Result())
			if got := must(rc.MGet(ctx, p+":a", p+":nope", p+":c").Result()); !slices.Equal(got, []any{"1", nil, "3"}) {
				t.Fatalf("MGET: %v", got)
			}
			if n := must(rc.Exists(ctx, p+":a", p+":nope", p).Result()); n != 2 {
				t.Fatalf("EXISTS: %d", n)
			}
			for name, want := range map[string]string{p + ":a": "string", p: "hash", p + ":nope": "none"} {
				if got := must(rc.Type(ctx, name).Result()); got != want {
					t.Fatalf("TYPE %s: %q, want %q", name, got, want)
				}
			}
			if n := must(rc.StrLen(ctx, p+":sku-1").Result()); n != 5 {
				t.Fatalf("STRLEN: %d", n)
			}
			if s := must(rc.GetRange(ctx, p+":sku-1", 0, 1).Result()); s != "12" {
				t.Fatalf("GETRANGE 0 1: %q", s)
			}
			if s := must(rc.GetRange(ctx, p+":sku-1", -2, -1).Result()); s != "50" {
				t.Fatalf("GETRANGE -2 -1: %q", s)
			}
			if d := must(rc.TTL(ctx, p+":a").Result()); d != -1 {
				t.Fatalf("TTL: %v", d)
			}
			if d := must(rc.PTTL(ctx, p+":nope").Result()); d != -2 {
				t.Fatalf("PTTL of a missing key: %v", d)
			}
			if e := must(rc.ObjectEncoding(ctx, p+":a").Result()); e != "int" {
				t.Fatalf("OBJECT ENCODING: %q", e)
			}

			// Hashes are topics.
			if n := must(rc.HSet(ctx, p, "h1", "v1", "h2", "v2", "a", "1b").Result()); n != 2 {
				t.Fatalf("HSET: %d new fields, want 2", n)
			}
			if got := must(rc.Get(ctx, p+":h1").Result()); got != "v1" {
				t.Fatalf("GET of an HSET field: %q", got)
			}
			all := must(rc.HGetAll(ctx, p).Result())
			if len(all) != 6 || all["h2"] != "v2" || all["a"] != "1b" {
				t.Fatalf("HGETALL: %v", all)
			}
			if n := must(rc.HLen(ctx, p).Result()); n != 6 {
				t.Fatalf("HLEN: %d", n)
			}
			if ks := must(rc.HKeys(ctx, p).Result()); len(ks) != 6 || ks[0] != "a" {
				t.Fatalf("HKEYS: %v", ks)
			}
			if got := must(rc.HMGet(ctx, p, "h1", "zz").Result()); !slices.Equal(got, []any{"v1", nil}) {
				t.Fatalf("HMGET: %v", got)
			}
			if !must(rc.HExists(ctx, p, "h2").Result()) {
				t.Fatal("HEXISTS h2: false")
			}
			if n := must(rc.HDel(ctx, p, "h2", "zz").Result()); n != 1 {
				t.Fatalf("HDEL: %d", n)
			}
			if n := must(rc.Del(ctx, p+":a", p+":nope").Result()); n != 1 {
				t.Fatalf("DEL: %d", n)
			}
			if r := td.do("GET", "/v1/topics/"+p+"/keys/a", nil); r.status != 404 {
				t.Fatalf("HTTP GET after DEL: %d", r.status)
			}
			var keys []string
			it := rc.Scan(ctx, 0, p+":*", 2).Iterator()
			for it.Next(ctx) {
				keys = append(keys, it.Val())
			}
			noErr(t, it.Err())
			slices.Sort(keys)
			if want := []string{p + ":b", p + ":c", p + ":h1", p + ":sku-1"}; !slices.Equal(keys, want) {
				t.Fatalf("SCAN MATCH %s:*: %v, want %v", p, keys, want)
			}
			var fields []string
			hit := rc.HScan(ctx, p, 0, "", 1).Iterator()
			for hit.Next(ctx) {
				fields = append(fields, hit.Val())
			}
			if len(fields) != 8 { // 4 keys, 4 values
				t.Fatalf("HSCAN: %v", fields)
			}
			if ks := must(rc.Keys(ctx, p+":[bc]").Result()); len(ks) != 2 {
				t.Fatalf("KEYS %s:[bc]: %v", p, ks)
			}
			if ks, _ := must2(rc.ScanType(ctx, 0, p, 100, "hash").Result()); !slices.Contains(ks, p) {
				t.Fatalf("SCAN TYPE hash: %v", ks)
			}
			if n := must(rc.DBSize(ctx).Result()); n < 5 {
				t.Fatalf("DBSIZE: %d", n)
			}
			if tm := must(rc.Time(ctx).Result()); time.Since(tm).Abs() > time.Minute {
				t.Fatalf("TIME: %v", tm)
			}
			info := must(rc.Info(ctx).Result())
			for _, w := range []string{"redis_version:", "loading:0", "role:master", "db0:keys=", "# Cachecast", "node:test-node"} {
				if !strings.Contains(info, w) {
					t.Fatalf("INFO lacks %q:\n%s", w, info)
				}
			}
			if got := must(rc.Echo(ctx, "hi").Result()); got != "hi" {
				t.Fatalf("ECHO: %q", got)
			}

			// Connection commands.
			conn := rc.Conn()
			defer conn.Close()
			must(conn.ClientSetName(ctx, "web-1").Result())
			if n := must(conn.ClientGetName(ctx).Result()); n != "web-1" {
				t.Fatalf("CLIENT GETNAME: %q", n)
			}
			id := must(conn.ClientID(ctx).Result())
			if l := must(conn.ClientList(ctx).Result()); !strings.Contains(l, fmt.Sprintf("id=%d ", id)) || !strings.Contains(l, "name=web-1") {
				t.Fatalf("CLIENT LIST: %s", l)
			}
			if ci := must(conn.ClientInfo(ctx).Result()); ci.ID != id || ci.Name != "web-1" {
				t.Fatalf("CLIENT INFO: %+v", ci)
			}
			must(conn.Select(ctx, 0).Result())
			wantErr(t, "SELECT 1", conn.Select(ctx, 1).Err(), "out of range")
			if n := must(rc.Do(ctx, "COMMAND", "COUNT").Int()); n < 40 {
				t.Fatalf("COMMAND COUNT: %d", n)
			}
			must(rc.Do(ctx, "COMMAND", "DOCS", "get").Result())
			must(rc.Do(ctx, "READONLY").Result())

			// Refusals name what is supported.
			wantErr(t, "APPEND", rc.Append(ctx, p+":t", "v").Err(), "APPEND is not served", "SET it")
			wantErr(t, "CLUSTER", rc.ClusterInfo(ctx).Err(), "cluster support disabled")
			wantErr(t, "unknown", rc.Do(ctx, "FROBNICATE", "x").Err(), "ERR unknown command 'FROBNICATE'")
			wantErr(t, "arity", rc.Do(ctx, "GET").Err(), "wrong number of arguments for 'get'")
			wantErr(t, "bad key", rc.Set(ctx, p+":", "v", 0).Err(), "invalid_name")
			wantErr(t, "bad topic", rc.Set(ctx, "bad topic:k", "v", 0).Err(), "invalid_name")
			if _, err := rc.Get(ctx, p+":t").Result(); !errors.Is(err, goredis.Nil) {
				t.Fatalf("a refused SET wrote something: %v", err)
			}
			// MSET is one batch: an invalid key refuses all of it.
			wantErr(t, "MSET with a bad key", rc.MSet(ctx, p+":m1", "1", p+":", "2").Err(), "invalid_name")
			if n := must(rc.Exists(ctx, p+":m1").Result()); n != 0 {
				t.Fatal("a refused MSET wrote its first key")
			}

			// Pipelining: 500 writes and reads in one round trip each.
			pipe := rc.Pipeline()
			for i := range 500 {
				pipe.Set(ctx, fmt.Sprintf("%s:pipe-%d", p, i), i, 0)
			}
			must(pipe.Exec(ctx))
			pipe = rc.Pipeline()
			gets := make([]*goredis.StringCmd, 500)
			for i := range gets {
				gets[i] = pipe.Get(ctx, fmt.Sprintf("%s:pipe-%d", p, i))
			}
			must(pipe.Exec(ctx))
			for i, g := range gets {
				if g.Val() != fmt.Sprint(i) {
					t.Fatalf("pipelined GET %d: %q", i, g.Val())
				}
			}

			// WAIT on a lone node: no replica.
			if n := must(rc.Wait(ctx, 1, 10*time.Millisecond).Result()); n != 0 {
				t.Fatalf("WAIT on a lone node: %d", n)
			}
		})
	}
}

// TestRedisPubSub checks SUBSCRIBE on topics and keys, PSUBSCRIBE,
// PUBLISH and keyspace notifications, over both protocols.
func TestRedisPubSub(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			rc := goRedis(t, td, proto)
			topic := fmt.Sprintf("ps%d", proto)
			sub := rc.Subscribe(ctx, topic, topic+":k1")
			defer sub.Close()
			psub := rc.PSubscribe(ctx, topic+":*", "__keyevent@0__:*")
			defer psub.Close()
			for _, s := range []*goredis.PubSub{sub, psub} {
				if _, err := s.Receive(ctx); err != nil { // the subscribe confirmation
					t.Fatal(err)
				}
				if _, err := s.Receive(ctx); err != nil {
					t.Fatal(err)
				}
			}
			must(rc.ConfigSet(ctx, "notify-keyspace-events", "KEA").Result())
			if got := must(rc.ConfigGet(ctx, "notify-keyspace-events").Result()); got["notify-keyspace-events"] != "AKE" {
				t.Fatalf("CONFIG GET notify-keyspace-events: %v", got)
			}
			// A PUBLISH is a keyless message on the channel's topic.
			if n := must(rc.Publish(ctx, topic, "hello").Result()); n != 1 {
				t.Fatalf("PUBLISH reached %d local subscribers, want 1", n)
			}
			m := must(sub.ReceiveMessage(ctx))
			if m.Channel != topic || m.Payload != "hello" {
				t.Fatalf("message %+v", m)
			}
			// A keyed update arrives on topic:key, by pattern as well, and
			// as a keyspace event; an update through HTTP too.
			td.put(topic, "k1", "v1")
			m = must(sub.ReceiveMessage(ctx))
			if m.Channel != topic+":k1" || m.Payload != "v1" {
				t.Fatalf("keyed message %+v", m)
			}
			m = must(psub.ReceiveMessage(ctx))
			if m.Pattern != topic+":*" || m.Channel != topic+":k1" || m.Payload != "v1" {
				t.Fatalf("pattern message %+v", m)
			}
			m = must(psub.ReceiveMessage(ctx))
			if m.Channel != "__keyevent@0__:set" || m.Payload != topic+":k1" {
				t.Fatalf("keyevent %+v", m)
			}
			must(rc.Del(ctx, topic+":k1").Result())
			m = must(psub.ReceiveMessage(ctx))
			if m.Channel != "__keyevent@0__:del" || m.Payload != topic+":k1" {
				t.Fatalf("keyevent of DEL %+v", m)
			}
			must(rc.ConfigSet(ctx, "notify-keyspace-events", "").Result())
			noErr(t, sub.Unsubscribe(ctx, topic))
			noErr(t, psub.PUnsubscribe(ctx))
		})
	}
}

// TestRedisRueidis runs rueidis (RESP3, client-side caching on by
// default) against the daemon: the handshake, commands, a cached read and
// its invalidation by a write through HTTP.
func TestRedisRueidis(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	ctx := context.Background()
	opt := rueidis.ClientOption{InitAddress: []string{td.d.RedisSocketPath()},
		DialCtxFn: func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}}
	c := must(rueidis.NewClient(opt))
	defer c.Close()
	td.put("prices", "sku-1", "10")
	get := func() rueidis.RedisResult {
		return c.DoCache(ctx, c.B().Get().Key("prices:sku-1").Cache(), time.Minute)
	}
	if v := must(get().ToString()); v != "10" {
		t.Fatalf("first cached GET: %q", v)
	}
	r := get()
	if v := must(r.ToString()); v != "10" || !r.IsCacheHit() {
		t.Fatalf("second cached GET: %q, cache hit %v", v, r.IsCacheHit())
	}
	td.put("prices", "sku-1", "11")
	testkit.Eventually(t, 5*time.Second, "the cached read sees the update", func() bool {
		v, err := get().ToString()
		return err == nil && v == "11"
	})
	// HGET is cached under the hash: a write to one of its keys
	// invalidates it.
	hget := func() rueidis.RedisResult {
		return c.DoCache(ctx, c.B().Hget().Key("prices").Field("sku-1").Cache(), time.Minute)
	}
	must(hget().ToString())
	if r := hget(); !r.IsCacheHit() {
		t.Fatal("second cached HGET missed the cache")
	}
	noErr(t, c.Do(ctx, c.B().Set().Key("prices:sku-1").Value("12").Build()).Error())
	testkit.Eventually(t, 5*time.Second, "the cached HGET sees the update", func() bool {
		v, err := hget().ToString()
		return err == nil && v == "12"
	})
	if err := c.Do(ctx, c.B().Mset().KeyValue().KeyValue("a:1", "x").KeyValue("a:2", "y").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	vs := must(c.Do(ctx, c.B().Mget().Key("a:1", "a:2", "a:3").Build()).ToArray())
	if s, _ := vs[1].ToString(); len(vs) != 3 || s != "y" || !vs[2].IsNil() {
		t.Fatalf("MGET: %v", vs)
	}
	st := td.d.redis.Stats()
	if st.TrackingClients < 1 || st.Invalidations < 2 {
		t.Fatalf("stats after invalidations: %+v", st)
	}
}

// TestRedisWritersAreChecked: with --allow-uids naming someone else, Redis
// writes of a real other uid (redis-cli under setpriv) are refused with
// NOPERM naming the publish role and change nothing; its reads work. A
// user without the read role (--read-uids names others) is refused as it
// connects.
func TestRedisWritersAreChecked(t *testing.T) {
	needRoot(t)
	const user, outsider = 61060, 61061
	cfg := roleConfig(t)
	cfg.ReadUIDs = []uint32{user}
	cfg.AllowUIDs = []uint32{user + 2}
	td := startDaemon(t, cfg)
	ctx := context.Background()
	cliAs := func(uid int, args ...string) string {
		t.Helper()
		id := strconv.Itoa(uid)
		out, err := exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups",
			"redis-cli", "-s", td.d.RedisSocketPath()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v as uid %d: %v: %s", args, uid, err, out)
		}
		return string(out)
	}
	td.put("prices", "k0", "v0")
	for _, args := range [][]string{{"GET", "prices:k0"}, {"KEYS", "*"}} {
		if out := cliAs(outsider, args...); !strings.HasPrefix(out, "NOPERM") || !strings.Contains(out, "read role") || strings.Contains(out, "v0") {
			t.Errorf("%s as uid %d, not a reader: %q; want NOPERM naming the read role", args[0], outsider, out)
		}
	}
	if out := cliAs(user, "GET", "prices:k0"); strings.TrimSpace(out) != "v0" {
		t.Fatalf("GET as the reader uid %d: %q", user, out)
	}
	td.do("DELETE", "/v1/topics/prices/keys/k0", nil)
	cli := func(args ...string) string {
		t.Helper()
		id := strconv.Itoa(user)
		out, err := exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups",
			"redis-cli", "-s", td.d.RedisSocketPath()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v as uid %d: %v: %s", args, user, err, out)
		}
		return string(out)
	}
	for _, args := range [][]string{
		{"SET", "prices:k", "v"},
		{"MSET", "prices:k", "v"},
		{"DEL", "prices:k"},
		{"HSET", "prices", "k", "v"},
		{"PUBLISH", "prices", "m"},
		{"CONFIG", "SET", "notify-keyspace-events", "KEA"},
		// Refused before they read the key (one check of every write, as
		// Redis checks its ACL), not answered 0 or nil for a missing one.
		{"EXPIRE", "prices:missing", "10"},
		{"PERSIST", "prices:missing"},
		{"GETEX", "prices:missing", "EX", "10"},
		{"INCR", "prices:n"},
		{"HDEL", "prices", "missing"},
		{"CACHECAST.CANCEL", "prices:k", "99999999999999"},
	} {
		if out := cli(args...); !strings.HasPrefix(out, "NOPERM") || !strings.Contains(out, "publish role") || !strings.Contains(out, "--allow-uids") {
			t.Errorf("%s as uid %d: %q; want NOPERM naming the publish role", args[0], user, out)
		}
	}
	rc := goRedis(t, td, 3)
	if n := must(rc.DBSize(ctx).Result()); n != 0 {
		t.Fatalf("refused writes left %d keys", n)
	}
	if out := cli("GET", "prices:k"); strings.TrimSpace(out) != "" {
		t.Fatalf("GET as uid %d: %q", user, out)
	}
}

// rueidisClient is a rueidis client of td's Redis socket; opt may set
// more options.
func rueidisClient(t *testing.T, td *testDaemon, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.InitAddress = []string{td.d.RedisSocketPath()}
	opt.DialCtxFn = func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", addr)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestRedisClientCacheAcrossCluster: a rueidis client with client-side
// caching reads keys on node 0 while they are updated on node 2. Its reads
// come from its own memory between updates, and each update shows in
// them soon after it reaches node 0's view: the test measures both and
// asserts the cache lags the view by less than the fan-out itself took
// (plus a margin for a busy machine).
func TestRedisClientCacheAcrossCluster(t *testing.T) {
	t.Parallel()
	ds := startCluster(t, 3, nil)
	a, c := ds[0], ds[2]
	ctx := context.Background()
	reader := rueidisClient(t, a, rueidis.ClientOption{})
	writer := goRedis(t, c, 3)
	const keys, rounds = 5, 20
	name := func(k int) string { return fmt.Sprintf("prices:sku-%d", k) }
	for k := range keys {
		noErr(t, writer.Set(ctx, name(k), "v0", 0).Err())
	}
	read := func(k int) (string, bool) {
		r := reader.DoCache(ctx, reader.B().Get().Key(name(k)).Cache(), time.Hour)
		v, err := r.ToString()
		if err != nil {
			return "", false
		}
		return v, r.IsCacheHit()
	}
	for k := range keys {
		testkit.Eventually(t, 5*time.Second, "node 0 has "+name(k), func() bool { v, _ := read(k); return v == "v0" })
	}
	var hits, reads int
	var worstLag, worstFanout time.Duration
	for round := 1; round <= rounds; round++ {
		k := round % keys
		want := fmt.Sprintf("v%d", round)
		// Reads between updates come from the client's cache.
		for range 10 {
			_, hit := read(k)
			reads++
			if hit {
				hits++
			}
		}
		start := time.Now()
		noErr(t, writer.Set(ctx, name(k), want, 0).Err())
		var inView, inCache time.Duration
		deadline := start.Add(10 * time.Second)
		viewHas := func() bool {
			e, ok := a.d.store.Get("prices", fmt.Sprintf("sku-%d", k))
			return ok && string(e.Value) == want
		}
		for inView == 0 || inCache == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s=%s not seen on node 0 within 10s (view after %v, cache after %v)", round, name(k), want, inView, inCache)
			}
			if inView == 0 && viewHas() {
				inView = time.Since(start)
			}
			if inCache == 0 {
				v, hit := read(k)
				reads++
				if hit {
					hits++
				}
				if v == want {
					inCache = time.Since(start)
					if inView == 0 {
						// The view got it between the two looks.
						if !viewHas() {
							t.Fatalf("round %d: the client read %s that node 0's view does not hold", round, want)
						}
						inView = inCache
					}
				}
			}
		}
		worstFanout = max(worstFanout, inView)
		worstLag = max(worstLag, inCache-inView)
		// The margin is for a loaded machine (-race, packages side by
		// side: 362ms was seen); a lost invalidation fails by the
		// 10s deadline above, as the client's cache lives an hour.
		if lag := inCache - inView; lag > inView+time.Second {
			t.Fatalf("round %d: the cache showed the update %v after the view (the fan-out took %v)", round, lag, inView)
		}
	}
	t.Logf("%d rounds: worst fan-out %v, worst lag of the client cache behind the view %v; %d of %d reads from the client cache",
		rounds, worstFanout, worstLag, hits, reads)
	if hits < rounds*10/2 {
		t.Fatalf("only %d of %d reads came from the client cache", hits, reads)
	}
	if st := a.d.redis.Stats(); st.Invalidations < rounds {
		t.Fatalf("node 0 sent %d invalidations for %d updates", st.Invalidations, rounds)
	}
}

// TestRedisMetricsAndStatus: the Redis counters show in /metrics and in
// GET /v1/status.
func TestRedisMetricsAndStatus(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	td := startDaemon(t, cfg)
	ctx := context.Background()
	rc := goRedis(t, td, 3)
	noErr(t, rc.Set(ctx, "m:k", "v", 0).Err())
	must(rc.Get(ctx, "m:k").Result())
	must(rc.Get(ctx, "m:k").Result())
	tracker := rueidisClient(t, td, rueidis.ClientOption{})
	must(tracker.DoCache(ctx, tracker.B().Get().Key("m:k").Cache(), time.Minute).ToString())
	noErr(t, rc.Set(ctx, "m:k", "w", 0).Err())
	testkit.Eventually(t, 5*time.Second, "an invalidation", func() bool { return td.d.redis.Stats().Invalidations > 0 })

	res, err := http.Get("http://" + td.d.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`cachecast_redis_commands_total{command="get"} 3`, // two from go-redis, one in rueidis's MULTI
		`cachecast_redis_commands_total{command="set"} 2`,
		"cachecast_redis_connections ",
		"cachecast_redis_tracking_clients ",
		"cachecast_redis_invalidations_total 1",
		"cachecast_redis_slow_clients_disconnected_total 0",
		"cachecast_redis_protocol_errors_total 0",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	r := td.do("GET", "/v1/status", nil)
	var st struct{ Redis *wire.RedisStatus }
	if err := json.Unmarshal(r.body, &st); err != nil || st.Redis == nil {
		t.Fatalf("status %s: %v", r.body, err)
	}
	if st.Redis.Socket != td.d.RedisSocketPath() || st.Redis.TrackingClients < 1 || st.Redis.Invalidations != 1 || st.Redis.Connections < 2 {
		t.Fatalf("status redis: %+v", *st.Redis)
	}
}

// invalidations collects the keys a rueidis client is told about.
type invalidations struct {
	mu   sync.Mutex
	keys []string
}

func (iv *invalidations) add(ms []rueidis.RedisMessage) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	for _, m := range ms {
		s, _ := m.ToString()
		iv.keys = append(iv.keys, s)
	}
}

func (iv *invalidations) has(key string) bool {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	return slices.Contains(iv.keys, key)
}

// TestRedisTrackingModes: BCAST with PREFIX, NOLOOP, and the RESP2
// redirect to __redis__:invalidate.
func TestRedisTrackingModes(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	ctx := context.Background()
	writer := goRedis(t, td, 3)

	t.Run("BCAST PREFIX", func(t *testing.T) {
		var iv invalidations
		rueidisClient(t, td, rueidis.ClientOption{ClientTrackingOptions: []string{"BCAST", "PREFIX", "bc:"},
			OnInvalidations: iv.add, DisableAutoPipelining: true})
		testkit.Eventually(t, 5*time.Second, "the BCAST client tracks", func() bool { return td.d.redis.Stats().TrackingClients >= 1 })
		noErr(t, writer.Set(ctx, "other:y", "1", 0).Err())
		noErr(t, writer.Set(ctx, "bc:x", "1", 0).Err())
		testkit.Eventually(t, 5*time.Second, "bc:x invalidated", func() bool { return iv.has("bc:x") })
		if iv.has("other:y") {
			t.Fatal("a key outside the prefix was invalidated")
		}
	})

	t.Run("NOLOOP", func(t *testing.T) {
		// A raw RESP3 connection: a library may send its writes on
		// another connection than its cached reads.
		nc, err := net.Dial("unix", td.d.RedisSocketPath())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(nc)
		send := func(args ...string) any {
			t.Helper()
			var b strings.Builder
			fmt.Fprintf(&b, "*%d\r\n", len(args))
			for _, a := range args {
				fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
			}
			if _, err := io.WriteString(nc, b.String()); err != nil {
				t.Fatal(err)
			}
			v := must(readRESP(r))
			if p, ok := v.(push); ok {
				t.Fatalf("push %v before the answer to %v", p, args)
			}
			return v
		}
		// Keys nobody wrote yet (a missing key is tracked too), so that no
		// earlier write's invalidation can arrive late.
		send("HELLO", "3")
		send("CLIENT", "TRACKING", "ON", "NOLOOP")
		send("GET", "nl:own")
		send("GET", "nl:other")
		// Its own write is not sent back to it; another client's is.
		if v := send("SET", "nl:own", "1"); v != "OK" {
			t.Fatalf("SET: %v", v)
		}
		noErr(t, writer.Set(ctx, "nl:other", "1", 0).Err())
		v := must(readRESP(r))
		if p, ok := v.(push); !ok || fmt.Sprint(p) != "[invalidate [nl:other]]" {
			t.Fatalf("after its own write and another's: %v, want the invalidation of nl:other only", v)
		}
		// In BCAST mode, its own key expiring is nobody's write: it is
		// invalidated, as Redis invalidates it (its tracking unit's
		// "Tracking gets notification of expired keys").
		send("CLIENT", "TRACKING", "OFF")
		send("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "nl:", "NOLOOP")
		if v := send("SET", "nl:exp", "2", "PX", "50"); v != "OK" {
			t.Fatalf("SET PX: %v", v)
		}
		v = must(readRESP(r))
		if p, ok := v.(push); !ok || fmt.Sprint(p) != "[invalidate [nl:exp]]" {
			t.Fatalf("after its own key expired: %v, want the invalidation of nl:exp", v)
		}
	})

	t.Run("RESP2 redirect", func(t *testing.T) {
		rc := goRedis(t, td, 2)
		sub := rc.Subscribe(ctx, "__redis__:invalidate")
		defer sub.Close()
		must(sub.Receive(ctx))
		// The subscriber's id: the connection that is subscribed.
		var subID int64
		for _, line := range strings.Split(must(writer.ClientList(ctx).Result()), "\n") {
			if strings.Contains(line, " sub=1 ") {
				subID = must(strconv.ParseInt(strings.TrimPrefix(strings.Fields(line)[0], "id="), 10, 64))
			}
		}
		if subID == 0 {
			t.Fatal("no subscribed connection in CLIENT LIST")
		}
		tracked := rc.Conn()
		defer tracked.Close()
		wantErr(t, "tracking without REDIRECT", tracked.Do(ctx, "CLIENT", "TRACKING", "ON").Err(), "needs REDIRECT")
		noErr(t, tracked.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", subID).Err())
		noErr(t, writer.Set(ctx, "r2:k", "0", 0).Err())
		must(tracked.Get(ctx, "r2:k").Result())
		noErr(t, writer.Set(ctx, "r2:k", "1", 0).Err())
		m := must(sub.ReceiveMessage(ctx))
		if m.Channel != "__redis__:invalidate" || !slices.Equal(m.PayloadSlice, []string{"r2:k"}) {
			t.Fatalf("invalidation %+v", m)
		}
		// Without its redirect target the tracking client could go stale:
		// it is disconnected.
		before := td.d.redis.Stats().SlowDisconnects
		sub.Close()
		testkit.Eventually(t, 5*time.Second, "the orphaned tracking client is disconnected", func() bool { return td.d.redis.Stats().SlowDisconnects > before })
	})
}

// TestRedisWaitAndSyncReplication: WAIT answers 1 once the replica holds
// the connection's last write; under --replication=sync without a replica
// a write answers NOREPLICAS and still stands.
func TestRedisWaitAndSyncReplication(t *testing.T) {
	ds := startCluster(t, 2, nil)
	ctx := context.Background()
	rc := goRedis(t, ds[0], 3)
	noErr(t, rc.Set(ctx, "w:k", "v", 0).Err())
	if n := must(rc.Wait(ctx, 1, 5*time.Second).Result()); n != 1 {
		t.Fatalf("WAIT 1 5000 after a write in a 2-node cluster: %d", n)
	}
	if n := must(rc.Wait(ctx, 0, 0).Result()); n != 1 {
		t.Fatalf("WAIT 0 0: %d", n)
	}

	c := clusterConfig(t, "alone", nil)
	c.Replication = "sync"
	alone := startDaemon(t, c)
	ac := goRedis(t, alone, 3)
	wantErr(t, "sync write without a replica", ac.Set(ctx, "s:k", "v", 0).Err(), "NOREPLICAS", "stored on this node", "replica_unavailable")
	if v := must(ac.Get(ctx, "s:k").Result()); v != "v" {
		t.Fatalf("the unconfirmed write does not stand: %q", v)
	}
	if n := must(ac.Wait(ctx, 1, 10*time.Millisecond).Result()); n != 0 {
		t.Fatalf("WAIT without a replica: %d", n)
	}
}

// TestRedisTCP: --redis-addr serves the same commands over loopback TCP,
// writes to a user of --redis-users that may write.
func TestRedisTCP(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	td := startDaemon(t, cfg)
	rc := goredis.NewClient(&goredis.Options{Addr: td.d.RedisAddr(), Username: "alice", Password: "alice-pw"})
	defer rc.Close()
	ctx := context.Background()
	noErr(t, rc.Set(ctx, "tcp:k", "v", 0).Err())
	if v := must(rc.Get(ctx, "tcp:k").Result()); v != "v" {
		t.Fatalf("GET over TCP: %q", v)
	}
}

// push is a RESP3 push as readRESP returns it.
type push []any

// readRESP reads one RESP2 or RESP3 value: strings, errors (as error),
// integers, nil, arrays and maps (as []any), pushes (as push).
func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("bad line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, errors.New(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '_':
		return nil, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*', '%', '>':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if line[0] == '%' {
			n *= 2
		}
		out := make([]any, 0, max(n, 0))
		for range n {
			v, err := readRESP(r)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if line[0] == '>' {
			return push(out), nil
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown type %q", line[0])
}

// BenchmarkRedisClientCache is GETs of 1,000 hot keys through rueidis,
// from its client-side cache (DoCache) and without it (Do), against a real
// daemon: the rate an application reads at when cachecast invalidates its
// cache.
func BenchmarkRedisClientCache(b *testing.B) {
	for _, cached := range []bool{false, true} {
		b.Run(map[bool]string{false: "without", true: "cached"}[cached], func(b *testing.B) {
			td := startRedisBenchDaemon(b)
			ctx := context.Background()
			opt := rueidis.ClientOption{InitAddress: []string{td.RedisSocketPath()},
				DialCtxFn: func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "unix", addr)
				}}
			c, err := rueidis.NewClient(opt)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			const keys = 1000
			for i := range keys {
				if err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("bench:k-%d", i)).Value(strings.Repeat("x", 100)).Build()).Error(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprintf("bench:k-%d", i%keys)
				var err error
				if cached {
					_, err = c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Hour).ToString()
				} else {
					_, err = c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// startRedisBenchDaemon runs a lone daemon for a benchmark until it ends.
func startRedisBenchDaemon(b *testing.B) *Daemon {
	b.Helper()
	sockDir, err := os.MkdirTemp("", "cc")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(sockDir) })
	cfg := config.Default()
	cfg.DataDir = filepath.Join(b.TempDir(), "data")
	cfg.Socket = filepath.Join(sockDir, "s.sock")
	cfg.GossipAddr = ""
	cfg.LogLevel = "warn"
	d, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	b.Cleanup(func() {
		_ = d.Close()
		<-done
	})
	testkit.Eventually(b, 5*time.Second, "the daemon is ready", d.ready.Load)
	return d
}

// TestRedisPipelinedSets: a go-redis pipeline of 1,000 SETs, some on the
// same key, one with a value over --max-value-size and one with a name
// the API refuses, with a GET among them. The daemon publishes the SETs
// in batches; every command answers what it answers alone, in order, the
// GET sees the SET before it, and the view holds each key's last value.
func TestRedisPipelinedSets(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxValueSize = 4096
	td := startDaemon(t, cfg)
	ctx := context.Background()
	rc := goRedis(t, td, 3)
	long := strings.Repeat("x", 5000)
	badName := "bad topic!:k"

	pipe := rc.Pipeline()
	sets := make([]*goredis.StatusCmd, 1000)
	var get *goredis.StringCmd
	last := map[string]string{}
	for i := range sets {
		key := fmt.Sprintf("pipe:k-%d", i%250)
		val := fmt.Sprintf("v-%d", i)
		switch i {
		case 400:
			sets[i] = pipe.Set(ctx, key, long, 0)
		case 700:
			sets[i] = pipe.Set(ctx, badName, val, 0)
		default:
			sets[i] = pipe.Set(ctx, key, val, 0)
			last[key] = val
		}
		if i == 500 {
			get = pipe.Get(ctx, key)
		}
	}
	_, _ = pipe.Exec(ctx) // the refused SETs make Exec return the first error
	for i, c := range sets {
		switch i {
		case 400, 700:
			arg := long
			name := fmt.Sprintf("pipe:k-%d", i%250)
			if i == 700 {
				name, arg = badName, fmt.Sprintf("v-%d", i)
			}
			alone := rc.Set(ctx, name, arg, 0).Err()
			if c.Err() == nil || alone == nil || c.Err().Error() != alone.Error() {
				t.Fatalf("SET %d in the pipeline: %v; alone: %v", i, c.Err(), alone)
			}
		default:
			if c.Err() != nil || c.Val() != "OK" {
				t.Fatalf("SET %d: %q %v", i, c.Val(), c.Err())
			}
		}
	}
	wantErr(t, "SET over --max-value-size", sets[400].Err(), "value_too_large")
	wantErr(t, "SET of a bad name", sets[700].Err(), "invalid_name")
	if got := must(get.Result()); got != "v-500" {
		t.Fatalf("GET in the pipeline after SET v-500: %q", got)
	}
	for key, val := range last {
		if got := must(rc.Get(ctx, key).Result()); got != val {
			t.Fatalf("%s: %q, want the last write %q", key, got, val)
		}
	}
	// The batches went through the daemon's publish path: HTTP sees them.
	if r := td.do("GET", "/v1/topics/pipe/keys/k-249", nil); r.status != 200 || string(r.body) != "v-999" {
		t.Fatalf("HTTP GET of the last SET: %d %s", r.status, r.body)
	}
}
