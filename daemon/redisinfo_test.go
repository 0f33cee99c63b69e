package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oliver006/redis_exporter/exporter"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestRedisExporterScrapes runs oliver006/redis_exporter's exporter
// package in-process against a daemon's Redis door over TCP, as a
// Prometheus scrape would: its redis_up is 1, and its
// redis_memory_used_bytes, redis_db_keys and redis_connected_clients
// hold the daemon's figures (INFO's # Memory, # Keyspace, # Clients).
func TestRedisExporterScrapes(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	td := startDaemon(t, cfg)
	rc := goRedis(t, td, 2)
	ctx := context.Background()
	for i := range 7 {
		if err := rc.Set(ctx, "exp:k"+strconv.Itoa(i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e, err := exporter.NewRedisExporter("redis://"+td.d.RedisAddr(), exporter.Options{Namespace: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]*dto.Metric{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()
	}
	value := func(name string, labels ...string) (float64, bool) {
	metrics:
		for _, m := range got[name] {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
		return 0, false
	}
	for _, tc := range []struct {
		metric string
		labels []string
		ok     func(float64) bool
		want   string
	}{
		{"redis_up", nil, func(v float64) bool { return v == 1 }, "1"},
		{"redis_memory_used_bytes", nil, func(v float64) bool { return v > 1<<20 }, "over 1 MiB (the Go runtime's memory in use)"},
		{"redis_memory_used_rss_bytes", nil, func(v float64) bool { return v > 1<<20 }, "over 1 MiB"},
		{"redis_db_keys", []string{"db", "db0"}, func(v float64) bool { return v == 7 }, "7"},
		// The go-redis client and the exporter's own connection.
		{"redis_connected_clients", nil, func(v float64) bool { return v >= 2 }, "at least 2"},
	} {
		v, ok := value(tc.metric, tc.labels...)
		if !ok || !tc.ok(v) {
			t.Errorf("%s%v: %v (found %v), want %s", tc.metric, tc.labels, v, ok, tc.want)
		}
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestRedisInfoAndClientList checks INFO's and CLIENT LIST's fields over
// the Unix socket and TCP: INFO's tcp_port is the TCP listener's, its
// # Memory and # Keyspace are there; CLIENT LIST names a TCP client by
// its ip:port and a Unix one by the socket's path and :0, as Redis does,
// with the flags (x in MULTI, U on a Unix socket, N for none), multi
// and cmd of each connection's state; to an admin (a client without the
// role sees its own user's connections only).
func TestRedisInfoAndClientList(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	td := startDaemon(t, cfg)
	tcp, err := net.Dial("tcp", td.d.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	unix, err := net.Dial("unix", td.d.RedisSocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	tc, uc := newRawClient(t, tcp), newRawClient(t, unix)

	_, port, _ := net.SplitHostPort(td.d.RedisAddr())
	// Both connections served once: a dial returns before the server has
	// accepted, so INFO could count one connection otherwise.
	uc.do("PING")
	tc.do("PING")
	info := tc.do("INFO")
	for _, want := range []string{"\r\ntcp_port:" + port + "\r\n", "# Memory\r\nused_memory:", "\r\nused_memory_rss:", "\r\nused_memory_peak:",
		"\r\nmaxmemory:", "# Clients\r\nconnected_clients:2\r\n", "# Stats\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO has no %q:\n%s", want, info)
		}
	}
	if strings.Contains(info, "# Commandstats") {
		t.Errorf("INFO without an argument has # Commandstats, which Redis prints for INFO all only")
	}
	if all := tc.do("INFO", "all"); !strings.Contains(all, "# Commandstats\r\ncmdstat_") {
		t.Errorf("INFO all has no # Commandstats:\n%s", all)
	}
	uc.do("SET", "k1", "v")
	if ks := tc.do("INFO", "keyspace"); !strings.Contains(ks, "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n") {
		t.Errorf("INFO keyspace: %q", ks)
	}

	uc.do("MULTI")
	uc.do("GET", "k1")
	// Listed by the daemon's own user on a third connection: an admin,
	// who sees every connection (the TCP client sees its own only).
	admin, err := net.Dial("unix", td.d.RedisSocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if own := tc.do("CLIENT", "LIST"); strings.Count(own, "\n") != 1 || !strings.Contains(own, "addr="+tcp.LocalAddr().String()+" ") {
		t.Errorf("CLIENT LIST of the unauthenticated TCP client should be its own connection alone: %q", own)
	}
	list := newRawClient(t, admin).do("CLIENT", "LIST")
	sock := td.d.RedisSocketPath()
	fields := `id=\d+ addr=%s laddr=%s fd=\d+ name= age=\d+ idle=\d+ flags=%s db=0 sub=0 psub=0 ssub=0 multi=%s ` +
		`qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=default redir=-1 resp=2 lib-name= lib-ver=\n`
	for _, want := range []string{
		fmt.Sprintf(fields, regexp.QuoteMeta(tcp.LocalAddr().String()), regexp.QuoteMeta(td.d.RedisAddr()), "N", "-1", `client\|list`),
		fmt.Sprintf(fields, regexp.QuoteMeta(sock+":0"), regexp.QuoteMeta(sock+":0"), "xU", "1", "get"),
	} {
		if !regexp.MustCompile(want).MatchString(list) {
			t.Errorf("CLIENT LIST has no line matching %s:\n%s", want, list)
		}
	}
	uc.do("DISCARD")
	if info := uc.do("CLIENT", "INFO"); !strings.Contains(info, " flags=U ") || !strings.Contains(info, " multi=-1 ") || !strings.Contains(info, " cmd=client|info ") {
		t.Errorf("CLIENT INFO after DISCARD: %q", info)
	}
}

// rawClient sends commands on one connection and reads their replies
// (rawReply).
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func newRawClient(t *testing.T, c net.Conn) *rawClient {
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

// do sends args and returns the reply: a bulk string's bytes, any
// other reply as it came.
func (r *rawClient) do(args ...string) string {
	r.t.Helper()
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := r.c.Write([]byte(b.String())); err != nil {
		r.t.Fatalf("%q: %v", args, err)
	}
	reply, err := rawReply(r.br)
	if err != nil {
		r.t.Fatalf("%q: %v", args, err)
	}
	if reply[0] == '$' {
		_, body, _ := strings.Cut(reply, "\r\n")
		return strings.TrimSuffix(body, "\r\n")
	}
	return reply
}

// TestRedisFlush checks FLUSHDB and FLUSHALL: refused without
// --redis-allow-flush; with it, refused NOPERM to a publisher that is no
// admin (a uid of --allow-uids, through setpriv), and for an admin one
// batch that deletes every key of every topic, which the HTTP API's
// reads see gone too.
func TestRedisFlush(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	rc := newRawClient(t, must(net.Dial("unix", td.d.RedisSocketPath())))
	rc.do("SET", "a", "1")
	if got := rc.do("FLUSHDB"); !strings.HasPrefix(got, "-ERR FLUSHDB is disabled: it deletes every key on every node of the fleet; start the daemon with --redis-allow-flush") {
		t.Fatalf("FLUSHDB without --redis-allow-flush: %q", got)
	}
	if got := rc.do("GET", "a"); got != "1" {
		t.Fatalf("GET after a refused FLUSHDB: %q", got)
	}

	t.Run("allowed", func(t *testing.T) {
		needRoot(t)
		const publisher = 61210
		cfg := roleConfig(t)
		cfg.RedisAllowFlush = true
		cfg.AllowUIDs = []uint32{publisher}
		td := startDaemon(t, cfg)
		root := newRawClient(t, must(net.Dial("unix", td.d.RedisSocketPath())))
		for _, k := range []string{"a", "b", "prices:x", "prices:y", "other:z"} {
			if got := root.do("SET", k, "v"); got != "+OK\r\n" {
				t.Fatalf("SET %s: %q", k, got)
			}
		}
		out, err := exec.Command("setpriv", "--reuid="+strconv.Itoa(publisher), "--regid="+strconv.Itoa(publisher), "--clear-groups",
			"redis-cli", "-s", td.d.RedisSocketPath(), "FLUSHALL").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "NOPERM") {
			t.Fatalf("FLUSHALL as a publisher: %q, %v; want NOPERM", out, err)
		}
		if got := root.do("DBSIZE"); got != ":5\r\n" {
			t.Fatalf("DBSIZE after a refused FLUSHALL: %q", got)
		}
		if got := root.do("FLUSHALL", "SYNC"); got != "+OK\r\n" {
			t.Fatalf("FLUSHALL as root (admin): %q", got)
		}
		if got := root.do("DBSIZE"); got != ":0\r\n" {
			t.Fatalf("DBSIZE after FLUSHALL: %q", got)
		}
		if r := td.do("GET", "/v1/topics/prices/keys/x", nil); r.status != 404 {
			t.Fatalf("HTTP GET of a flushed key: %d %s", r.status, r.body)
		}
		if got := root.do("FLUSHDB"); got != "+OK\r\n" {
			t.Fatalf("FLUSHDB of nothing: %q", got)
		}
	})
}

// TestRedisMonitorAgainstRedisServer runs MONITOR on the daemon's door
// and on a real redis-server, sends both the same commands from another
// connection, and compares the lines the monitors receive but their
// times and addresses: Redis's format, quoting included. A caller
// without the admin role is refused (NOPERM).
func TestRedisMonitorAgainstRedisServer(t *testing.T) {
	theirs := startRedisServer(t)
	td := startDaemon(t, testConfig(t))
	cmds := [][]string{{"SET", "mon:k", "a b\"c\\d\n\x01\xff"}, {"GET", "mon:k"}, {"PING"}, {"MGET", "mon:k", "mon:nope"}, {"DEL", "mon:k"}}
	var lines [2][]string
	for i, sock := range []string{td.d.RedisSocketPath(), theirs} {
		mon := newRawClient(t, must(net.Dial("unix", sock)))
		if got := mon.do("MONITOR"); got != "+OK\r\n" {
			t.Fatalf("MONITOR: %q", got)
		}
		cl := newRawClient(t, must(net.Dial("unix", sock)))
		for _, c := range cmds {
			cl.do(c...)
		}
		for range cmds {
			line, err := mon.br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			// +1700000000.123456 [0 unix:/path] "SET" ...: the time and
			// the address are each server's own.
			m := regexp.MustCompile(`^\+\d+\.\d{6} \[0 unix:` + regexp.QuoteMeta(sock) + `\] (.*)\r\n$`).FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("monitor line %q: not +<time> [0 unix:%s] <args>", line, sock)
			}
			lines[i] = append(lines[i], m[1])
		}
	}
	if !slices.Equal(lines[0], lines[1]) {
		t.Errorf("monitor lines: cachecast %q, redis-server %q", lines[0], lines[1])
	}
}
