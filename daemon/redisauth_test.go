package daemon

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/broadcast"
	bwire "github.com/cachecast/cachecast/broadcast/wire"
	"github.com/cachecast/cachecast/internal/testkit"
)

// testUsers is a users file: a writer, a reader, a user that is off.
const testUsers = `# the Redis door's users
user alice on >alice-pw ~* +@all
user reader on >reader-pw ~* +@read
user gone off >gone-pw ~* +@all
`

// writeUsers writes a users file and returns its path.
func writeUsers(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// redisCLIAs runs redis-cli as uid (setpriv, no groups; 0 runs it as the
// test's own user) with args, and returns its output, trimmed.
func redisCLIAs(t *testing.T, uid int, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli: %v (install redis-tools; .ci/run does)", err)
	}
	cmd := exec.Command(path, args...)
	if uid != 0 {
		id := strconv.Itoa(uid)
		cmd = exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", path}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v as uid %d: %v: %s", args, uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// tcpArgs are redis-cli's arguments for td's TCP door.
func tcpArgs(td *testDaemon) []string {
	host, port, _ := net.SplitHostPort(td.d.RedisAddr())
	return []string{"-h", host, "-p", port}
}

// TestRedisTCPWithoutUsers: without --redis-users, any local user reads
// over the TCP door and none writes (the SET k pwned as nobody).
func TestRedisTCPWithoutUsers(t *testing.T) {
	needRoot(t)
	cfg := roleConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	td := startDaemon(t, cfg)
	td.put("prices", "k", "v")
	const nobody = 65534
	tcp := tcpArgs(td)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "prices:k", "pwned"}, "NOPERM"},
		{[]string{"MSET", "prices:k", "pwned"}, "NOPERM"},
		{[]string{"DEL", "prices:k"}, "NOPERM"},
		{[]string{"PUBLISH", "prices", "m"}, "NOPERM"},
		{[]string{"GET", "prices:k"}, "v"},
		{[]string{"AUTH", "x"}, "ERR AUTH <password> called without any password configured"},
		{[]string{"AUTH", "default", "x"}, "OK"},
		{[]string{"AUTH", "alice", "x"}, "WRONGPASS invalid username-password pair or user is disabled."},
	} {
		out := redisCLIAs(t, nobody, append(tcp, c.args...)...)
		if !strings.HasPrefix(out, c.want) {
			t.Errorf("%v as nobody over TCP: %q, want %q", c.args, out, c.want)
		}
	}
	if out := redisCLIAs(t, nobody, append(tcp, "SET", "prices:k", "pwned")...); !strings.Contains(out, "unauthenticated TCP client may only read") {
		t.Errorf("the refusal should say what a TCP client may do: %q", out)
	}
	if e, _ := td.d.store.Get("prices", "k"); string(e.Value) != "v" {
		t.Fatalf("a refused write changed the key: %q", e.Value)
	}
}

// TestRedisAuthUsers: with --redis-users, a TCP client must AUTH (NOAUTH
// before), gets its user's roles, and a reload of the file applies to
// connections already open. redis-cli and go-redis (RESP2's AUTH and
// RESP3's HELLO AUTH) are the clients.
func TestRedisAuthUsers(t *testing.T) {
	needRoot(t)
	cfg := roleConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	reloadTo := cfg
	cfg.Reload = func() (Config, error) { return reloadTo, nil }
	td := startDaemon(t, cfg)
	const nobody = 65534
	tcp := tcpArgs(td)
	as := func(user, pass string, args ...string) string {
		t.Helper()
		return redisCLIAs(t, nobody, append(append(tcp, "--no-auth-warning", "--user", user, "--pass", pass), args...)...)
	}
	for _, c := range []struct {
		name string
		out  string
		want string
	}{
		{"GET unauthenticated", redisCLIAs(t, nobody, append(tcp, "GET", "a:k")...), "NOAUTH Authentication required."},
		{"PING unauthenticated", redisCLIAs(t, nobody, append(tcp, "PING")...), "NOAUTH Authentication required."},
		{"wrong password", as("alice", "nope", "GET", "a:k"), "AUTH failed: WRONGPASS"},
		{"user off", as("gone", "gone-pw", "GET", "a:k"), "AUTH failed: WRONGPASS"},
		{"alice writes", as("alice", "alice-pw", "SET", "a:k", "v1"), "OK"},
		{"reader reads", as("reader", "reader-pw", "GET", "a:k"), "v1"},
		{"reader does not write", as("reader", "reader-pw", "SET", "a:k", "v2"), "NOPERM"},
	} {
		if !strings.HasPrefix(c.out, c.want) {
			t.Errorf("%s: %q, want %q", c.name, c.out, c.want)
		}
	}
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rc := goredis.NewClient(&goredis.Options{Addr: td.d.RedisAddr(), Protocol: proto, Username: "alice", Password: "alice-pw"})
		noErr(t, rc.Set(ctx, "a:go"+strconv.Itoa(proto), "v", 0).Err())
		bad := goredis.NewClient(&goredis.Options{Addr: td.d.RedisAddr(), Protocol: proto, Username: "alice", Password: "x"})
		wantErr(t, "go-redis with a wrong password", bad.Get(ctx, "a:k").Err(), "WRONGPASS")
		_ = bad.Close()
		// A reload that takes alice's write role away applies to her
		// open connection at its next write.
		if proto == 3 {
			reloadTo.RedisUsers = writeUsers(t, strings.Replace(testUsers, "~* +@all", "~* +@read", 1))
			noErr(t, td.d.Reload())
			wantErr(t, "SET after alice lost +@write", rc.Set(ctx, "a:go", "v", 0).Err(), "NOPERM")
			if v := must(rc.Get(ctx, "a:go3").Result()); v != "v" {
				t.Errorf("GET after the reload: %q", v)
			}
		}
		_ = rc.Close()
	}
}

// TestRedisAuthNarrowsUnix: on the Redis socket a uid keeps its roles;
// AUTH narrows them to the user's, and never widens them.
func TestRedisAuthNarrowsUnix(t *testing.T) {
	needRoot(t)
	const reader, writer = 61070, 61071
	cfg := roleConfig(t)
	cfg.ReadUIDs = []uint32{reader}
	cfg.AllowUIDs = []uint32{writer}
	cfg.RedisUsers = writeUsers(t, testUsers)
	td := startDaemon(t, cfg)
	sock := []string{"-s", td.d.RedisSocketPath(), "--no-auth-warning"}
	for _, c := range []struct {
		name string
		uid  int
		args []string
		want string
	}{
		{"the writer uid writes", writer, []string{"SET", "a:k", "v"}, "OK"},
		{"the writer uid as reader does not", writer, []string{"--user", "reader", "--pass", "reader-pw", "SET", "a:k", "v"}, "NOPERM"},
		{"the writer uid as reader reads", writer, []string{"--user", "reader", "--pass", "reader-pw", "GET", "a:k"}, "v"},
		{"the reader uid as alice does not write", reader, []string{"--user", "alice", "--pass", "alice-pw", "SET", "a:k", "x"}, "NOPERM"},
		{"a wrong password on the socket", writer, []string{"--user", "alice", "--pass", "x", "GET", "a:k"}, "AUTH failed: WRONGPASS"},
	} {
		if out := redisCLIAs(t, c.uid, append(sock, c.args...)...); !strings.HasPrefix(out, c.want) {
			t.Errorf("%s: %q, want %q", c.name, out, c.want)
		}
	}
	if out := redisCLIAs(t, reader, append(sock, "--user", "alice", "--pass", "alice-pw", "SET", "a:k", "x")...); !strings.Contains(out, "never widens") {
		t.Errorf("the refusal should say AUTH does not widen: %q", out)
	}
}

// TestRedisTLS: --redis-tls-cert serves the TCP door under TLS, to
// redis-cli --tls and go-redis with a TLS configuration.
func TestRedisTLS(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	certPEM := writeSelfSigned(t, &cfg)
	td := startDaemon(t, cfg)
	tcp := tcpArgs(td)
	out := redisCLIAs(t, 0, append(tcp, "--tls", "--insecure", "--no-auth-warning", "--user", "alice", "--pass", "alice-pw", "SET", "tls:k", "v")...)
	if out != "OK" {
		t.Fatalf("redis-cli --tls SET: %q", out)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	rc := goredis.NewClient(&goredis.Options{Addr: td.d.RedisAddr(), Username: "reader", Password: "reader-pw",
		TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	defer rc.Close()
	ctx := context.Background()
	if v := must(rc.Get(ctx, "tls:k").Result()); v != "v" {
		t.Fatalf("go-redis over TLS: %q", v)
	}
	// A client that does not speak TLS gets no answer it can read.
	plain := goredis.NewClient(&goredis.Options{Addr: td.d.RedisAddr(), Username: "reader", Password: "reader-pw",
		DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer plain.Close()
	if err := plain.Get(ctx, "tls:k").Err(); err == nil {
		t.Fatal("a plain client was answered by the TLS door")
	}
}

// writeSelfSigned makes a self-signed certificate for 127.0.0.1, sets
// cfg's --redis-tls-cert and --redis-tls-key to its files and returns the
// certificate's PEM.
func writeSelfSigned(t *testing.T, cfg *Config) []byte {
	t.Helper()
	dir := t.TempDir()
	cfg.RedisTLSCert, cfg.RedisTLSKey = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	return writeCert(t, cfg.RedisTLSCert, cfg.RedisTLSKey, 1)
}

// writeCert writes a self-signed certificate for 127.0.0.1 of serial
// number serial and its key to the files certFile and keyFile, and
// returns the certificate's PEM.
func writeCert(t *testing.T, certFile, keyFile string, serial int64) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "cachecast redis test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPEM
}

// TestRedisTLSReload: a reload (SIGHUP) reads --redis-tls-cert and
// --redis-tls-key again: a TLS client that connects afterwards gets the
// renewed certificate, one already connected is still served, and files
// that do not load fail the reload and keep the certificate in force.
func TestRedisTLSReload(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	writeSelfSigned(t, &cfg)
	reloadTo := cfg
	cfg.Reload = func() (Config, error) { return reloadTo, nil }
	td := startDaemon(t, cfg)
	// serial dials the door and answers the serial number of the
	// certificate it was served, and the connection.
	serial := func() (int64, *tls.Conn) {
		t.Helper()
		c, err := tls.Dial("tcp", td.d.RedisAddr(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), c
	}
	first, old := serial()
	if first != 1 {
		t.Fatalf("the certificate at start has serial %d, want 1", first)
	}
	writeCert(t, cfg.RedisTLSCert, cfg.RedisTLSKey, 2)
	noErr(t, td.d.Reload())
	if got, _ := serial(); got != 2 {
		t.Fatalf("after the reload a new connection got serial %d, want 2", got)
	}
	if _, err := old.Write([]byte("AUTH alice alice-pw\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(old).ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("the connection opened before the reload: %q, %v", line, err)
	}
	for _, broken := range []struct{ name, cert string }{
		{"not PEM", "garbage"},
		{"another key's certificate", string(writeCert(t, filepath.Join(t.TempDir(), "c"), filepath.Join(t.TempDir(), "k"), 3))},
	} {
		if err := os.WriteFile(cfg.RedisTLSCert, []byte(broken.cert), 0o600); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "a reload with a certificate "+broken.name, td.d.Reload(), "--redis-tls-cert", "kept")
		if got, _ := serial(); got != 2 {
			t.Fatalf("after a reload with a certificate %s a new connection got serial %d, want 2 (the one in force)", broken.name, got)
		}
	}
}

// TestRedisFairConnections: nobody holds 5,000 idle connections to the
// TCP door (the 512 locked root out: every local client was
// 127.0.0.1's share); they are strangers that never authenticate, so
// they share one small pool and the oldest make room, and root is still
// served over TCP, as a user of --redis-users, and on the socket.
func TestRedisFairConnections(t *testing.T) {
	needRoot(t)
	const idle = 5000
	needFiles(t, 3*idle)
	cfg := roleConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	td := startDaemon(t, cfg)
	_, port, _ := net.SplitHostPort(td.d.RedisAddr())
	script := `n=0; for i in $(seq ` + strconv.Itoa(idle) + `); do exec {fd}<>/dev/tcp/127.0.0.1/` + port +
		` && n=$((n+1)); done 2>/dev/null; echo "opened $n"; exec sleep 120`
	hog := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", script)
	out, err := hog.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hog.Process.Kill(); _ = hog.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the idle connections' holder: %v", err)
	}
	opened, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "opened ")))
	if opened < idle*9/10 {
		t.Fatalf("nobody opened %d of %d connections", opened, idle)
	}
	// The pool of strangers holds at most 64 of them (and those being
	// closed); the rest were closed for room.
	testkit.Eventually(t, 10*time.Second, "the strangers' pool to settle", func() bool {
		return td.d.redis.Stats().Connections <= 64
	})
	tcp := tcpArgs(td)
	if got := redisCLIAs(t, 0, append(tcp, "--no-auth-warning", "--user", "alice", "--pass", "alice-pw", "PING")...); got != "PONG" {
		t.Fatalf("root over TCP as alice beside %d idle connections of nobody: %q", opened, got)
	}
	if got := redisCLIAs(t, 0, "-s", td.d.RedisSocketPath(), "PING"); got != "PONG" {
		t.Fatalf("root on the socket: %q", got)
	}
	if refused := td.d.redis.Stats().Refused; refused < int64(opened-64) {
		t.Errorf("%d connections closed or refused for room; want at least %d", refused, opened-64)
	}
}

// TestRedisUnauthenticatedFrames: with --redis-users, a TCP client that
// has not authenticated may send a command of 16 KiB at most, of 10
// arguments of 16 KiB at most (Redis's own bounds for such clients): a
// larger one is refused in Redis's words once its header announces it,
// before its bytes are sent, and the connection is closed. After AUTH,
// in the same pipeline, the node's limits apply. A raw TCP client sends
// the frames.
func TestRedisUnauthenticatedFrames(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	td := startDaemon(t, cfg)
	big := strings.Repeat("v", 60<<10) // under testConfig's --max-value-size
	for _, c := range []struct {
		name, send, want string
		closed           bool
	}{
		{"a bulk of 1 MiB announced", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048576\r\n",
			"-ERR Protocol error: unauthenticated bulk length\r\n", true},
		{"11 arguments announced", "*11\r\n",
			"-ERR Protocol error: unauthenticated multibulk length\r\n", true},
		{"two bulks of 9,000 bytes", "*3\r\n$4\r\nAUTH\r\n$9000\r\n" + strings.Repeat("a", 9000) + "\r\n$9000\r\n",
			"-ERR Protocol error: unauthenticated command of more than 16384 bytes (AUTH first)\r\n", true},
		{"an inline line of 16 KiB", strings.Repeat("a", 16<<10),
			"-ERR Protocol error: unauthenticated command of more than 16384 bytes (AUTH first)\r\n", true},
		{"a wrong AUTH lifts nothing", "AUTH alice nope\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048576\r\n",
			"-WRONGPASS invalid username-password pair or user is disabled.\r\n-ERR Protocol error: unauthenticated bulk length\r\n", true},
		{"AUTH then 60 KiB in the same write", "AUTH alice alice-pw\r\n*3\r\n$3\r\nSET\r\n$3\r\nr:k\r\n$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n",
			"+OK\r\n+OK\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, closed := rawRedis(t, td.d.RedisAddr(), c.send, len(c.want))
			if got != c.want || closed != c.closed {
				t.Errorf("answered %q (closed %v); want %q (closed %v)", got, closed, c.want, c.closed)
			}
		})
	}
	if e, ok := td.d.store.Get("r", "k"); !ok || string(e.Value) != big {
		t.Errorf("the authenticated SET: %d bytes stored", len(e.Value))
	}
}

// rawRedis sends send to addr over a new TCP connection and reads the
// answer: want bytes, then whether the server closed the connection
// (within 5 s).
func rawRedis(t *testing.T, addr, send string, want int) (string, bool) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte(send)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, want)
	n, err := io.ReadFull(nc, got)
	if err != nil {
		return string(got[:n]), !errors.Is(err, os.ErrDeadlineExceeded)
	}
	_ = nc.SetReadDeadline(time.Now().Add(time.Second))
	var more [1]byte
	_, err = nc.Read(more[:])
	return string(got), err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestRedisStrangerFlags: --redis-max-unauthenticated and
// --redis-auth-timeout reach the Redis door: with a pool of 2, a third
// connection that has not authenticated closes the first, and one that
// does not authenticate is closed after the timeout (here 1s, well
// within the test's 5s; the default is 10s).
func TestRedisStrangerFlags(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	cfg.RedisMaxUnauthenticated = 2
	cfg.RedisAuthTimeout = time.Second
	td := startDaemon(t, cfg)
	var conns []net.Conn
	for range 3 {
		nc, err := net.Dial("tcp", td.d.RedisAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns = append(conns, nc)
	}
	testkit.Eventually(t, 5*time.Second, "the first stranger to be closed for room", func() bool {
		return td.d.redis.Stats().Refused >= 1
	})
	start := time.Now()
	for i, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [64]byte
		if n, err := nc.Read(b[:]); !errors.Is(err, io.EOF) {
			t.Errorf("connection %d that never authenticated: read %q, %v; want it closed", i, b[:n], err)
		}
	}
	t.Logf("the strangers were closed within %v", time.Since(start).Round(time.Millisecond))
}

// TestRedisPushConnectionsCountAgainstTheirUser (issue 31): subscribed
// and tracking connections, which wait for the server and are never
// closed as idle, count against their user's share of
// --max-connections-per-uid like any other: alice holding two
// subscribers and a tracking connection with a share of 3 is refused a
// fourth at AUTH (and it is closed), while another user is served; once
// one of hers closes, she is served again.
func TestRedisPushConnectionsCountAgainstTheirUser(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	cfg.MaxConnectionsPerUID = 3
	td := startDaemon(t, cfg)
	addr := td.d.RedisAddr()
	var held []net.Conn
	for _, c := range []struct{ send, until string }{
		{"AUTH alice alice-pw\r\nSUBSCRIBE news\r\n", ":1"},
		{"AUTH alice alice-pw\r\nSUBSCRIBE sports\r\n", ":1"},
		{"HELLO 3 AUTH alice alice-pw\r\nCLIENT TRACKING ON\r\n", "+OK"},
	} {
		nc, lines := dialRedis(t, addr, c.send)
		if !readUntil(lines, c.until) {
			t.Fatalf("%q: no %q in its answers", c.send, c.until)
		}
		held = append(held, nc)
	}
	const full = "-ERR max number of clients reached for user alice (--max-connections-per-uid 3)\r\n"
	got, closed := rawRedis(t, addr, "AUTH alice alice-pw\r\n", len(full))
	if got != full || !closed {
		t.Fatalf("a fourth connection of alice's: %q (closed %v); want her share refused, and closed", got, closed)
	}
	if got, _ := rawRedis(t, addr, "AUTH reader reader-pw\r\n", 5); got != "+OK\r\n" {
		t.Fatalf("another user beside alice's full share: %q", got)
	}
	held[0].Close()
	testkit.Eventually(t, 5*time.Second, "alice's closed subscriber to give its place back", func() bool {
		got, _ := rawRedis(t, addr, "AUTH alice alice-pw\r\n", 5)
		return got == "+OK\r\n"
	})
}

// dialRedis opens a TCP connection to addr that the test's end closes,
// sends send, and returns it with a reader of its answers' lines.
func dialRedis(t *testing.T, addr, send string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write([]byte(send)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	return nc, bufio.NewReader(nc)
}

// readUntil reads lines until one is line (true) or the connection ends.
func readUntil(r *bufio.Reader, line string) bool {
	for {
		l, err := r.ReadString('\n')
		if strings.TrimSuffix(l, "\r\n") == line {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// TestRedisResetLogsOut: RESET returns a connection to no user, as Redis
// returns it to the user default: a TCP client that must authenticate
// is answered NOAUTH again until it does; on the Redis socket a caller
// narrowed by AUTH gets its uid's roles back.
func TestRedisResetLogsOut(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, testUsers)
	td := startDaemon(t, cfg)
	ctx := context.Background()
	for _, c := range []struct {
		name, network, addr string
		steps               [][2]string // a command, the start of its answer
	}{
		{"TCP", "tcp", td.d.RedisAddr(), [][2]string{
			{"AUTH alice alice-pw", "OK"}, {"SET r:k v", "OK"}, {"RESET", "RESET"},
			{"GET r:k", "NOAUTH"}, {"SET r:k w", "NOAUTH"},
			{"AUTH reader reader-pw", "OK"}, {"GET r:k", "v"}, {"SET r:k w", "NOPERM"},
		}},
		{"the Redis socket", "unix", td.d.RedisSocketPath(), [][2]string{
			{"AUTH reader reader-pw", "OK"}, {"SET r:u v", "NOPERM"}, {"RESET", "RESET"},
			{"SET r:u v", "OK"}, {"GET r:u", "v"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := goredis.NewClient(&goredis.Options{Network: c.network, Addr: c.addr, PoolSize: 1})
			defer rc.Close()
			cn := rc.Conn()
			defer cn.Close()
			for _, s := range c.steps {
				var args []any
				for _, a := range strings.Fields(s[0]) {
					args = append(args, a)
				}
				v, err := cn.Do(ctx, args...).Result()
				got := fmtAnswer(v, err)
				if !strings.HasPrefix(got, s[1]) {
					t.Fatalf("%s: %q, want %q", s[0], got, s[1])
				}
			}
		})
	}
}

// fmtAnswer is a command's answer or its error, as text.
func fmtAnswer(v any, err error) string {
	if err != nil {
		return err.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return "unexpected answer"
}

// TestDataTLSReload: a reload reads --tls-cert, --tls-key and --tls-ca
// again: a peer whose certificate the CA file did not hold is refused on
// the data port before and admitted after, and a CA file that does not
// load fails the reload and keeps the files in force.
func TestDataTLSReload(t *testing.T) {
	cfg := clusterConfig(t, "a", nil)
	dir := t.TempDir()
	cfg.TLSCert, cfg.TLSKey, cfg.TLSCA = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	nodePEM := writeCert(t, cfg.TLSCert, cfg.TLSKey, 1)
	noErr(t, os.WriteFile(cfg.TLSCA, nodePEM, 0o600)) // self-signed: its own CA
	peerCert, peerKey := filepath.Join(dir, "peer.pem"), filepath.Join(dir, "peer.key")
	peerPEM := writeCert(t, peerCert, peerKey, 2)
	reloadTo := cfg
	cfg.Reload = func() (Config, error) { return reloadTo, nil }
	td := startDaemon(t, cfg)

	pair, err := tls.LoadX509KeyPair(peerCert, peerKey)
	noErr(t, err)
	trust := x509.NewCertPool()
	trust.AppendCertsFromPEM(nodePEM)
	peer := broadcast.NewTLS(pair, trust)
	// dial is a peer's connection to the node's data port: TLS, then the
	// data port's own handshake, which a node only answers past TLS.
	dial := func() error {
		c, err := tls.Dial("tcp", td.d.DataAddr(), peer)
		if err != nil {
			return err
		}
		defer c.Close()
		_, _, err = bwire.DialHandshake(c, 42, nil, bwire.Range{Min: bwire.ProtocolMin, Max: bwire.ProtocolMax}, 10*time.Second)
		return err
	}
	if err := dial(); err == nil {
		t.Fatal("a peer the CA file does not hold was admitted")
	}
	noErr(t, os.WriteFile(cfg.TLSCA, append(nodePEM, peerPEM...), 0o600))
	noErr(t, td.d.Reload())
	noErr(t, dial())
	noErr(t, os.WriteFile(cfg.TLSCA, []byte("not PEM"), 0o600))
	wantErr(t, "a reload with a CA file that is not PEM", td.d.Reload(), "--tls-ca", "no certificate")
	noErr(t, dial())
}

// TestRedisClientListOwnConnections: CLIENT LIST (and CLIENT LIST ID)
// shows a caller without the admin role only its own user's connections:
// another user's names, addresses and last commands are not its to read,
// as Redis keeps CLIENT LIST for @admin. An admin sees every one.
func TestRedisClientListOwnConnections(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisAddr = "127.0.0.1:0"
	cfg.RedisUsers = writeUsers(t, "user boss on >boss-pw ~* +@all\nuser r1 on >r1-pw ~* +@read\nuser r2 on >r2-pw ~* +@read\n")
	td := startDaemon(t, cfg)
	ctx := context.Background()
	client := func(user string) *goredis.Client {
		rc := goredis.NewClient(&goredis.Options{Addr: td.d.RedisAddr(), Username: user, Password: user + "-pw",
			ClientName: user + "-conn", PoolSize: 1})
		t.Cleanup(func() { _ = rc.Close() })
		return rc
	}
	boss, r1, r2 := client("boss"), client("r1"), client("r2")
	r1ID := must(r1.ClientID(ctx).Result())
	for _, tc := range []struct {
		name     string
		rc       *goredis.Client
		args     []any
		has, not []string
	}{
		{"a reader's list", r2, []any{"CLIENT", "LIST"}, []string{"name=r2-conn"}, []string{"r1-conn", "boss-conn"}},
		{"a reader asks another's id", r2, []any{"CLIENT", "LIST", "ID", r1ID}, nil, []string{"r1-conn"}},
		{"the admin's list", boss, []any{"CLIENT", "LIST"}, []string{"name=r1-conn", "name=r2-conn", "name=boss-conn"}, nil},
		{"the admin asks r1's id", boss, []any{"CLIENT", "LIST", "ID", r1ID}, []string{"name=r1-conn"}, nil},
	} {
		out := must(tc.rc.Do(ctx, tc.args...).Text())
		for _, s := range tc.has {
			if !strings.Contains(out, s) {
				t.Errorf("%s: no %q in %q", tc.name, s, out)
			}
		}
		for _, s := range tc.not {
			if strings.Contains(out, s) {
				t.Errorf("%s: %q is there: %q", tc.name, s, out)
			}
		}
	}
}
