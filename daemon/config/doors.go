package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/daemon/internal/access"
	respsrv "github.com/cachecast/cachecast/resp"
	"github.com/cachecast/cachecast/wire"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zapcore"
)

// TLS reads mutual TLS for the data port from --tls-cert, --tls-key and
// --tls-ca; nil when they are not set.
func (c Config) TLS() (*broadcast.TLSFiles, error) {
	if c.TLSCert == "" && c.TLSKey == "" && c.TLSCA == "" {
		return nil, nil
	}
	if c.TLSCert == "" || c.TLSKey == "" || c.TLSCA == "" {
		return nil, errors.New("--tls-cert, --tls-key and --tls-ca: set all three for mutual TLS on the data port, or none")
	}
	files, err := broadcast.LoadTLS(c.TLSCert, c.TLSKey, c.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
	}
	return files, nil
}

// NATSOptions turns the --nats-* flags into connection options.
func (c Config) NATSOptions() []nats.Option {
	var opts []nats.Option
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	if c.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(c.NATSTLSCA))
	}
	if c.NATSTLSCert != "" {
		opts = append(opts, nats.ClientCert(c.NATSTLSCert, c.NATSTLSKey))
	}
	return opts
}

// RedisSocketPath is --redis-socket with its default applied: empty is
// beside --socket (cachecast.sock: cachecast-redis.sock), "off" is none.
func (c Config) RedisSocketPath() string {
	switch c.RedisSocket {
	case "off":
		return ""
	case "":
		dir, base := filepath.Split(c.Socket)
		return dir + strings.TrimSuffix(base, ".sock") + "-redis.sock"
	}
	return c.RedisSocket
}

// validateRedis checks the --redis-* flags.
func (c Config) validateRedis() error {
	if p := c.RedisSocketPath(); p != "" {
		if err := socketPath(p); err != nil {
			return fmt.Errorf("--redis-socket: %w", err)
		}
	}
	if p := c.RedisSocketPath(); p != "" && p == c.Socket {
		return fmt.Errorf("--redis-socket: %s is already --socket", p)
	}
	if c.RedisAddr != "" {
		if err := checkAddr("--redis-addr", c.RedisAddr, false, false); err != nil {
			return err
		}
		if !c.RedisAllowRemote && !Loopback(c.RedisAddr) {
			return fmt.Errorf("--redis-addr: %s is not a loopback address; a TCP client has no uid to check, so listening beyond this machine needs --redis-allow-remote and --redis-users", c.RedisAddr)
		}
	}
	if err := c.validateRedisAuth(); err != nil {
		return err
	}
	if e := wire.CheckName("--redis-default-topic", c.RedisDefaultTopic); e != nil {
		return errors.New(e.Message)
	}
	if err := respsrv.CheckNotifyKeyspaceEvents(c.RedisNotifyKeyspaceEvents); err != nil {
		return fmt.Errorf("--redis-notify-keyspace-events: %q: want Redis's letters (K, E, g, $, h, A, ...)", c.RedisNotifyKeyspaceEvents)
	}
	return nil
}

// validateRedisAuth checks --redis-users, --redis-tls-cert and
// --redis-tls-key against --redis-addr.
func (c Config) validateRedisAuth() error {
	if (c.RedisTLSCert == "") != (c.RedisTLSKey == "") {
		return errors.New("--redis-tls-cert and --redis-tls-key: set both to serve --redis-addr under TLS, or neither")
	}
	if c.RedisTLSCert != "" && c.RedisAddr == "" {
		return errors.New("--redis-tls-cert: TLS is served on --redis-addr, which is not set")
	}
	if c.RedisAddr != "" && !Loopback(c.RedisAddr) && c.RedisUsers == "" {
		return fmt.Errorf("--redis-addr: %s is not a loopback address; beyond this machine its clients must authenticate: set --redis-users", c.RedisAddr)
	}
	return nil
}

// LoadRedisUsers reads --redis-users (none when it is not set); a remote
// --redis-addr needs at least one user.
func (c Config) LoadRedisUsers() (*access.Users, error) {
	if c.RedisUsers == "" {
		return &access.Users{}, nil
	}
	u, err := access.LoadUsers(c.RedisUsers)
	if err != nil {
		return nil, fmt.Errorf("--redis-users: %w", err)
	}
	if u.Len() == 0 && c.RedisAddr != "" && !Loopback(c.RedisAddr) {
		return nil, fmt.Errorf("--redis-users: %s has no user, and --redis-addr %s is not a loopback address", c.RedisUsers, c.RedisAddr)
	}
	return u, nil
}

// ConsoleToken reads --console-token-file's token ("" without the flag).
func (c Config) ConsoleToken() (string, error) {
	if c.ConsoleTokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.ConsoleTokenFile)
	if err != nil {
		return "", fmt.Errorf("--console-token-file: %w", err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); len(tok) < 16 {
		return "", fmt.Errorf("--console-token-file: the token on its first line must be at least 16 characters, got %d", len(tok))
	}
	return tok, nil
}

// ParseLevel reads --log-level. Only the four levels an operator sets are
// accepted; zap's panic levels are not a verbosity.
func ParseLevel(s string) (zapcore.Level, error) {
	switch s {
	case "debug":
		return zapcore.DebugLevel, nil
	case "info":
		return zapcore.InfoLevel, nil
	case "warn":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	return 0, fmt.Errorf("--log-level: must be debug, info, warn or error, got %q", s)
}
