package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/store"
	"github.com/cachecast/cachecast/wire"
	"github.com/spf13/pflag"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"64MiB", 64 << 20, ""},
		{"64mib", 64 << 20, ""},
		{"64M", 64 << 20, ""},
		{"64 MiB", 64 << 20, ""},
		{"1GB", 1e9, ""},
		{"1gb", 1e9, ""},
		{"512KiB", 512 << 10, ""},
		{"512KB", 512e3, ""},
		{"2G", 2 << 30, ""},
		{"1TiB", 1 << 40, ""},
		{"1.5MiB", 3 << 19, ""},
		{"10B", 10, ""},
		{"", 0, "no number"},
		{"MiB", 0, "no number"},
		{"12XB", 0, "unknown unit"},
		{"1.3B", 0, "not a whole number"},
		{"99999999999TiB", 0, "too large"},
		{"-1", 0, "must not be negative"},
		{"-1MiB", 0, "must not be negative"},
		{"1e3", 0, "invalid syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			// What formatSize prints, ParseSize reads back.
			if back, err := ParseSize(wire.FormatSize(got)); err != nil || back != got {
				t.Fatalf("round trip of %d via %q: %d, %v", got, wire.FormatSize(got), back, err)
			}
		})
	}
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.DataDir != "./data" || c.Socket != "./cachecast.sock" || c.Flush != "async" || c.SocketMode != 0o660 ||
		c.MaxValueSize != 1<<20 || c.WhenFull != "recycle" || c.MetricsAddr != "" || c.NodeName == "" {
		t.Fatalf("Default() = %+v; not the documented defaults", c)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mut     func(*Config)
		wantErr string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"flush sync", func(c *Config) { c.Flush = "sync" }, ""},
		{"flush bad", func(c *Config) { c.Flush = "x" }, `--flush: must be "sync" or "async", got "x"`},
		{"when-full refuse", func(c *Config) { c.WhenFull = "refuse" }, ""},
		{"when-full bad", func(c *Config) { c.WhenFull = "drop" }, `--when-full: must be "recycle" or "refuse", got "drop"`},
		{"data-dir empty", func(c *Config) { c.DataDir = "" }, "--data-dir: must not be empty"},
		{"socket empty", func(c *Config) { c.Socket = "" }, "--socket: must not be empty"},
		{"socket too long", func(c *Config) { c.Socket = "/" + strings.Repeat("s", 107) }, "--socket: path of 108 bytes"},
		{"socket 107 bytes", func(c *Config) { c.Socket = "/" + strings.Repeat("s", 106); c.RedisSocket = "off" }, ""},
		{"redis socket beside a long socket", func(c *Config) { c.Socket = "/" + strings.Repeat("s", 106) }, "--redis-socket: path of 118 bytes"},
		{"redis socket is the socket", func(c *Config) { c.RedisSocket = c.Socket }, "--redis-socket: ./cachecast.sock is already --socket"},
		{"redis-addr not loopback", func(c *Config) { c.RedisAddr = "0.0.0.0:6380" }, "--redis-addr: 0.0.0.0:6380 is not a loopback address"},
		{"redis-addr remote without users", func(c *Config) { c.RedisAddr = "0.0.0.0:6380"; c.RedisAllowRemote = true },
			"--redis-addr: 0.0.0.0:6380 is not a loopback address; beyond this machine its clients must authenticate: set --redis-users"},
		{"redis-addr remote allowed", func(c *Config) {
			c.RedisAddr = "0.0.0.0:6380"
			c.RedisAllowRemote = true
			c.RedisUsers = "/etc/users.acl"
		}, ""},
		{"redis-tls half", func(c *Config) { c.RedisAddr = "127.0.0.1:6380"; c.RedisTLSCert = "c.pem" }, "--redis-tls-cert and --redis-tls-key: set both"},
		{"redis-tls without addr", func(c *Config) { c.RedisTLSCert, c.RedisTLSKey = "c.pem", "k.pem" }, "--redis-tls-cert: TLS is served on --redis-addr, which is not set"},
		{"redis-addr loopback", func(c *Config) { c.RedisAddr = "127.0.0.1:6380" }, ""},
		{"redis-addr port", func(c *Config) { c.RedisAddr = "127.0.0.1:99999" }, `--redis-addr: the port of "127.0.0.1:99999" must be a number from 0 to 65535`},
		{"redis default topic", func(c *Config) { c.RedisDefaultTopic = "a:b" }, "--redis-default-topic \"a:b\": ':' at byte 1"},
		{"redis push buffer", func(c *Config) { c.RedisPushBuffer = 100 }, "--redis-push-buffer: must be at least 64KiB"},
		{"redis keyspace events", func(c *Config) { c.RedisNotifyKeyspaceEvents = "KEQ" }, "--redis-notify-keyspace-events: \"KEQ\": want Redis's letters"},
		{"redis keyspace events ok", func(c *Config) { c.RedisNotifyKeyspaceEvents = "KEA" }, ""},
		{"redis max unauthenticated 0", func(c *Config) { c.RedisMaxUnauthenticated = 0 }, "--redis-max-unauthenticated: must be at least 1, got 0"},
		{"redis max unauthenticated over the connections (capped)", func(c *Config) { c.MaxConnections, c.MaxConnectionsPerUID, c.RedisMaxUnauthenticated = 10, 10, 11 }, ""},
		{"redis max unauthenticated 1", func(c *Config) { c.RedisMaxUnauthenticated = 1 }, ""},
		{"redis auth timeout 0", func(c *Config) { c.RedisAuthTimeout = 0 }, "--redis-auth-timeout: must be 100ms to 1h, got 0s"},
		{"redis auth timeout 2h", func(c *Config) { c.RedisAuthTimeout = 2 * time.Hour }, "--redis-auth-timeout: must be 100ms to 1h, got 2h"},
		{"redis auth timeout 1s", func(c *Config) { c.RedisAuthTimeout = time.Second }, ""},
		{"socket-mode owner", func(c *Config) { c.SocketMode = 0o060 }, "--socket-mode: the owner needs read and write"},
		{"socket-mode bits", func(c *Config) { c.SocketMode = os.ModeSetuid | 0o660 }, "--socket-mode: must be permission bits"},
		{"node-name empty", func(c *Config) { c.NodeName = "" }, "--node-name: must not be empty"},
		{"flush-interval zero", func(c *Config) { c.FlushInterval = 0 }, "--flush-interval: must be positive"},
		{"flush-bytes zero", func(c *Config) { c.FlushBytes = 0 }, ""},
		{"flush-bytes negative", func(c *Config) { c.FlushBytes = -1 }, "--flush-bytes: must not be negative"},
		{"max-cursors negative", func(c *Config) { c.MaxCursors = -1 }, "--max-cursors: must not be negative"},
		{"max-cursors-per-uid negative", func(c *Config) { c.MaxCursorsPerUID = -1 }, "--max-cursors-per-uid: must not be negative"},
		{"segment-size small", func(c *Config) { c.SegmentSize = 4096 }, "--segment-size: must be at least 64KiB"},
		{"segment-size large", func(c *Config) { c.SegmentSize = 4 << 30 }, "--segment-size: must be at most 2GiB"},
		{"segment-size unaligned", func(c *Config) { c.SegmentSize = 64<<20 + 1 }, "--segment-size: must be a multiple of the page size"},
		{"max-mapped-segments", func(c *Config) { c.MaxMappedSegments = 1 }, "--max-mapped-segments: must be at least 2"},
		{"retention-bytes negative", func(c *Config) { c.RetentionBytes = -1 }, "--retention-bytes: must not be negative"},
		{"retention-bytes one segment", func(c *Config) { c.RetentionBytes = c.SegmentSize }, "--retention-bytes: must be 0 (no bound) or at least two segments"},
		{"retention-bytes ok", func(c *Config) { c.RetentionBytes = 10 * c.SegmentSize }, ""},
		{"retention-age negative", func(c *Config) { c.RetentionAge = -time.Second }, "--retention-age: must not be negative"},
		{"snapshot-interval", func(c *Config) { c.SnapshotInterval = 0 }, "--snapshot-interval: must be positive"},
		{"max-value-size negative", func(c *Config) { c.MaxValueSize = -1 }, "--max-value-size: must be at least 1 byte, got -1"},
		{"max-value-size beyond segment", func(c *Config) { c.SegmentSize = 1 << 20; c.MaxValueSize = 1 << 20 }, "--max-value-size: a value of 1MiB does not fit a segment of 1MiB"},
		{"max-body-size below value", func(c *Config) { c.MaxBodySize = c.MaxValueSize - 1 }, "--max-body-size: must be at least --max-value-size"},
		{"max-connections", func(c *Config) { c.MaxConnections = 0 }, "--max-connections: must be at least 1"},
		{"read-header-timeout", func(c *Config) { c.ReadHeaderTimeout = 0 }, "--read-header-timeout: must be positive"},
		{"read-timeout", func(c *Config) { c.ReadTimeout = 0 }, "--read-timeout: must be positive"},
		{"write-timeout", func(c *Config) { c.WriteTimeout = 0 }, "--write-timeout: must be positive"},
		{"idle-timeout", func(c *Config) { c.IdleTimeout = 0 }, "--idle-timeout: must be positive"},
		{"shutdown-timeout", func(c *Config) { c.ShutdownTimeout = 0 }, "--shutdown-timeout: must be positive"},
		{"log-level bad", func(c *Config) { c.LogLevel = "verbose" }, `--log-level: must be debug, info, warn or error, got "verbose"`},
		{"log-level panic", func(c *Config) { c.LogLevel = "panic" }, "--log-level"},
		{"log-format bad", func(c *Config) { c.LogFormat = "xml" }, `--log-format: must be "json" or "console", got "xml"`},
		{"log-format json", func(c *Config) { c.LogFormat = "json" }, ""},
		{"metrics-addr bad", func(c *Config) { c.MetricsAddr = "localhost" }, "--metrics-addr:"},
		{"metrics-addr ok", func(c *Config) { c.MetricsAddr = "127.0.0.1:0" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mut(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v; want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil; want %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %q; want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestBadSettingsNameTheFlag: every setting is checked whatever else is
// set (with no cluster too), and the error names the flag.
func TestBadSettingsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	notAKey := filepath.Join(dir, "not-a-key")
	if err := os.WriteFile(notAKey, []byte("not base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noCluster := []string{"--gossip-addr="}
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--max-value-size", "0"}, "--max-value-size: must be at least 1 byte, got 0"},
		{[]string{"--redis-max-unauthenticated", "-1"}, "--redis-max-unauthenticated: must be at least 1"},
		{[]string{"--redis-auth-timeout", "10ms"}, "--redis-auth-timeout: must be 100ms to 1h, got 10ms"},
		{[]string{"--ack-timeout", "0"}, "--ack-timeout: must be positive, got 0s"},
		{append(noCluster, "--ack-timeout", "0"), "--ack-timeout: must be positive, got 0s"},
		{append(noCluster, "--queues-per-topic", "0"), "--queues-per-topic: must be 1 to 1024, got 0"},
		{append(noCluster, "--max-retries", "-1"), "--max-retries: must not be negative, got -1"},
		{append(noCluster, "--retry-backoff", "-1s"), "--retry-backoff: must not be negative, got -1s"},
		{append(noCluster, "--transport", "udp"), `--transport: must be "tcp" or "nats", got "udp"`},
		{append(noCluster, "--transport", "nats"), "--nats-url: needed with --transport=nats"},
		{append(noCluster, "--tcp-fanout", "mesh"), `--tcp-fanout: must be "auto", "direct" or "tree", got "mesh"`},
		{[]string{"--transport", "nats", "--nats-url", "nats://127.0.0.1:4222", "--tcp-fanout", "tree"}, "--tcp-fanout: tree is a fan-out over the data port, not with --transport=nats"},
		{[]string{"--transport", "nats", "--nats-url", "nats://127.0.0.1:4222", "--nats-creds", missing}, "--nats-creds: open " + missing},
		{append(noCluster, "--gossip-profile", "fast"), `--gossip-profile: must be "lan", "wan" or "local", got "fast"`},
		{append(noCluster, "--replication", "always"), `--replication: must be "none", "async" or "sync", got "always"`},
		{append(noCluster, "--join-timeout", "0"), "--join-timeout: must be positive"},
		{append(noCluster, "--replica-timeout", "0"), "--replica-timeout: must be positive"},
		{append(noCluster, "--max-clock-offset", "0"), "--max-clock-offset: must be 1ms to 1h, got 0s"},
		{append(noCluster, "--max-clock-offset", "-1s"), "--max-clock-offset: must be 1ms to 1h, got -1s"},
		{append(noCluster, "--max-clock-offset", "2h"), "--max-clock-offset: must be 1ms to 1h, got 2h"},
		{[]string{"--data-addr", "127.0.0.1:99999"}, `--data-addr: the port of "127.0.0.1:99999" must be a number from 0 to 65535`},
		{append(noCluster, "--data-addr", "127.0.0.1:99999"), `--data-addr: the port of "127.0.0.1:99999"`},
		{[]string{"--data-addr", "127.0.0.1"}, `--data-addr: want host:port, got "127.0.0.1"`},
		{[]string{"--data-addr="}, "--data-addr: must not be empty"},
		{[]string{"--gossip-addr", "127.0.0.1:http"}, `--gossip-addr: the port of "127.0.0.1:http" must be a number`},
		{[]string{"--gossip-addr", "localhost:7946"}, `--gossip-addr: the host of "localhost:7946" must be an IP address`},
		{[]string{"--advertise-addr", "10.0.0.1:70000"}, `--advertise-addr: the port of "10.0.0.1:70000"`},
		{[]string{"--join", "10.0.0.1:0x10"}, `--join: the port of "10.0.0.1:0x10"`},
		{append(noCluster, "--join", "10.0.0.1:7946"), "--join: needs --gossip-addr"},
		{[]string{"--metrics-addr", "127.0.0.1:99999"}, `--metrics-addr: the port of "127.0.0.1:99999"`},
		{[]string{"--cluster-key-file", missing}, "--cluster-key-file: "},
		{append(noCluster, "--cluster-key-file", missing), "--cluster-key-file: "},
		{append(noCluster, "--cluster-key-file", notAKey), "--cluster-key-file: "},
		{append(noCluster, "--tls-cert", missing), "--tls-cert, --tls-key and --tls-ca: set all three"},
		{append(noCluster, "--tls-cert", missing, "--tls-key", missing, "--tls-ca", missing), "--tls-cert/--tls-key/--tls-ca: open " + missing},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			c, err := parseForTest(tt.args, nil)
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("%q: %v; want an error containing %q", tt.args, err, tt.wantErr)
			}
		})
	}
}

// TestUnknownEnv: CACHECAST_ names that no flag reads are reported, from
// the environment and from the env file, and nothing else is.
func TestUnknownEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(file, []byte("CACHECAST_MAX_VALU_SIZE=1KiB\nCACHECAST_LOG_LEVEL=debug\nCACHECAST_BOTH=1\nPATH=/bin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c := Default()
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--env-file", file}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyEnv(fs, nil); err != nil {
		t.Fatal(err)
	}
	environ := []string{"CACHECAST_DATA_DIR=/x", "CACHECAST_GOSIP_ADDR=", "CACHECAST_BOTH=1", "HOME=/root", "cachecast_lower=1"}
	got := UnknownEnv(fs, environ)
	want := []string{"CACHECAST_BOTH (in " + file + ")", "CACHECAST_GOSIP_ADDR", "CACHECAST_MAX_VALU_SIZE (in " + file + ")"}
	if !slices.Equal(got, want) {
		t.Fatalf("UnknownEnv = %q; want %q", got, want)
	}
}

// parseForTest is what cmd/cachecastd does: flags, then the environment.
func parseForTest(args []string, env map[string]string) (Config, error) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c := Default()
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	err := ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return c, err
}

func TestFlagsAndEnv(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "cachecastd.env")
	if err := os.WriteFile(envFile, []byte(`# comment
; another comment

CACHECAST_LOG_LEVEL=debug
export CACHECAST_NODE_NAME="from-file"
CACHECAST_FLUSH='sync'
OTHER_VAR=ignored
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{
			name: "flags",
			args: []string{"--data-dir=/var/lib/cc", "--socket", "/run/cc.sock", "--flush=sync", "--flush-interval=5ms",
				"--segment-size=128MiB", "--max-value-size", "2MB", "--retention-bytes=1GB", "--retention-age=24h",
				"--socket-mode=0600", "--allow-uids=1,2", "--allow-uids=3", "--allow-gids=100", "--metrics-addr=:9464",
				"--max-connections=7", "--when-full=refuse", "--log-format=json", "--node-name=n1", "--max-body-size=1GiB"},
			check: func(t *testing.T, c Config) {
				want := Default()
				want.DataDir, want.Socket, want.Flush, want.FlushInterval = "/var/lib/cc", "/run/cc.sock", "sync", 5*time.Millisecond
				want.SegmentSize, want.MaxValueSize, want.RetentionBytes, want.RetentionAge = 128<<20, 2e6, 1e9, 24*time.Hour
				want.SocketMode, want.AllowUIDs, want.AllowGIDs, want.MetricsAddr = 0o600, []uint32{1, 2, 3}, []uint32{100}, ":9464"
				want.MaxConnections, want.WhenFull, want.LogFormat, want.NodeName, want.MaxBodySize = 7, "refuse", "json", "n1", 1<<30
				if diff := append(Changed(want, c, false), Changed(want, c, true)...); len(diff) > 0 || !slices.Equal(c.AllowUIDs, want.AllowUIDs) || !slices.Equal(c.AllowGIDs, want.AllowGIDs) {
					t.Fatalf("fields differ: %v\n got %+v\nwant %+v", diff, c, want)
				}
			},
		},
		{
			name: "env fills what the command line left out",
			args: []string{"--flush=async"},
			env: map[string]string{"CACHECAST_FLUSH": "sync", "CACHECAST_DATA_DIR": "/srv/cc", "CACHECAST_SEGMENT_SIZE": "32MiB",
				"CACHECAST_ALLOW_GIDS": "10,20", "CACHECAST_SOCKET_MODE": "660", "CACHECAST_RETENTION_AGE": "1h"},
			check: func(t *testing.T, c Config) {
				if c.Flush != "async" || c.DataDir != "/srv/cc" || c.SegmentSize != 32<<20 ||
					!slices.Equal(c.AllowGIDs, []uint32{10, 20}) || c.SocketMode != 0o660 || c.RetentionAge != time.Hour {
					t.Fatalf("got %+v", c)
				}
			},
		},
		{
			name: "env file under the command line, over the environment",
			args: []string{"--env-file", envFile, "--log-level=warn"},
			env:  map[string]string{"CACHECAST_NODE_NAME": "from-env", "CACHECAST_SOCKET": "/env.sock"},
			check: func(t *testing.T, c Config) {
				if c.LogLevel != "warn" || c.NodeName != "from-file" || c.Flush != "sync" || c.Socket != "/env.sock" || c.EnvFile != envFile {
					t.Fatalf("got %+v", c)
				}
			},
		},
		{
			name: "env file named by the environment",
			env:  map[string]string{"CACHECAST_ENV_FILE": envFile},
			check: func(t *testing.T, c Config) {
				if c.LogLevel != "debug" || c.EnvFile != envFile {
					t.Fatalf("got %+v", c)
				}
			},
		},
		{name: "bad size flag", args: []string{"--segment-size=lots"}, wantErr: `invalid argument "lots" for "--segment-size"`},
		{name: "bad size env", env: map[string]string{"CACHECAST_MAX_VALUE_SIZE": "1QB"}, wantErr: "CACHECAST_MAX_VALUE_SIZE: invalid value"},
		{name: "bad duration env", env: map[string]string{"CACHECAST_FLUSH_INTERVAL": "soon"}, wantErr: "CACHECAST_FLUSH_INTERVAL"},
		{name: "bad uid", args: []string{"--allow-uids=root"}, wantErr: "want a number"},
		{name: "bad mode", args: []string{"--socket-mode=rw"}, wantErr: "octal"},
		{name: "mode too wide", args: []string{"--socket-mode=1777"}, wantErr: "0000..0777"},
		{name: "missing env file", args: []string{"--env-file=/nonexistent/env"}, wantErr: "--env-file:"},
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: "unknown flag: --bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseForTest(tt.args, tt.env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"data-dir": "CACHECAST_DATA_DIR", "flush": "CACHECAST_FLUSH", "max-mapped-segments": "CACHECAST_MAX_MAPPED_SEGMENTS",
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q; want %q", flag, got, want)
		}
	}
}

// TestSettingsTable checks the table of settings against Config and
// store.Options: every field of Config but Reload and the hooks is one
// setting, flags are distinct, and a setting's store option is a field of
// store.Options whose default Default carries.
func TestSettingsTable(t *testing.T) {
	fields, flags := map[string]bool{}, map[string]bool{}
	def, so := Default(), store.DefaultOptions("./data")
	for _, s := range settings {
		if fields[s.field] || flags[s.flag] {
			t.Errorf("setting %s (--%s) declared twice", s.field, s.flag)
		}
		fields[s.field], flags[s.flag] = true, true
		if _, ok := reflect.TypeOf(Config{}).FieldByName(s.field); !ok {
			t.Errorf("setting --%s: Config has no field %s", s.flag, s.field)
			continue
		}
		if s.store == "" {
			continue
		}
		opt := reflect.ValueOf(so).FieldByName(s.store)
		if !opt.IsValid() {
			t.Errorf("setting --%s: store.Options has no field %s", s.flag, s.store)
			continue
		}
		if got := fmt.Sprint(s.value(def)); !opt.IsZero() && got != fmt.Sprint(opt.Interface()) {
			t.Errorf("--%s defaults to %s, store.Options.%s to %v", s.flag, got, s.store, opt.Interface())
		}
	}
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		if f := ct.Field(i); f.IsExported() && f.Name != "Reload" && !fields[f.Name] {
			t.Errorf("field %s has no setting", f.Name)
		}
	}
}

// TestStoreRulesUnderTheirFlags: a setting the store owns is refused by
// the store's rule (store.Options.Validate), under the setting's flag.
func TestStoreRulesUnderTheirFlags(t *testing.T) {
	for _, s := range settings {
		if s.store == "" || s.store == "Flush" || s.store == "WhenFull" {
			continue // parsed, so never out of range
		}
		c := Default()
		switch p := s.ptr(&c).(type) {
		case *string:
			*p = ""
		case *int:
			*p = -1
		case *int64:
			*p = -1
		case *time.Duration:
			*p = -1
		default:
			t.Fatalf("--%s: no bad value for %T", s.flag, p)
		}
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "--"+s.flag+": ") {
			t.Errorf("--%s out of range: %v; want an error under --%s", s.flag, err, s.flag)
		}
	}
}

// TestMessagesNameRealFlags: every --name in a string of the daemon's
// non-test Go files is a flag of the table (or of cachecastd itself), so
// that a message names the flag an operator can set.
func TestMessagesNameRealFlags(t *testing.T) {
	known := map[string]bool{"help": true, "version": true}
	for _, s := range settings {
		known[s.flag] = true
	}
	files, _ := filepath.Glob("*.go")
	re := regexp.MustCompile(`--([a-z][a-z0-9-]*[a-z0-9])`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") || !strings.ContainsAny(line, "\"`") {
				continue
			}
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				if !known[m[1]] {
					t.Errorf("%s: %q names --%s, which is no flag", f, strings.TrimSpace(line), m[1])
				}
			}
		}
	}
}

func TestReadEnvFileErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(p, []byte("CACHECAST_FLUSH sync\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadEnvFile(p); err == nil || !strings.Contains(err.Error(), "env:1: not KEY=value") {
		t.Fatalf("err = %v", err)
	}
}
