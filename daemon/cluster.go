package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/daemon/internal/cluster"
)

// The daemon's wiring of its cluster (package daemon/internal/cluster:
// gossip, the data port, catch-up, verify, forget, the contact rule):
// the settings it takes, and the rule a node away too long meets at
// start.

// clusterConfig is the cluster's part of the configuration.
func (c Config) clusterConfig(log *zap.Logger) (cluster.Config, error) {
	tlsConf, err := c.tlsConfig()
	if err != nil {
		return cluster.Config{}, err
	}
	var natsConf *broadcast.NATSConfig
	if c.Transport == "nats" {
		natsConf = &broadcast.NATSConfig{URL: c.NATSURL, SubjectPrefix: c.NATSSubjectPrefix, Options: c.natsOptions()}
	}
	return cluster.Config{
		NodeName:           c.NodeName,
		DataDir:            c.DataDir,
		GossipAddr:         c.GossipAddr,
		AdvertiseAddr:      c.AdvertiseAddr,
		DataAddr:           c.DataAddr,
		Join:               c.Join,
		JoinTimeout:        c.JoinTimeout,
		GossipProfile:      c.GossipProfile,
		KeyFile:            c.ClusterKeyFile,
		LoopbackOnly:       loopbackAddr(c.GossipAddr) && loopbackAddr(c.DataAddr),
		TLS:                tlsConf,
		NATS:               natsConf,
		TCPFanout:          c.TCPFanout,
		AntiEntropyFanout:  c.AntiEntropyFanout,
		RetireOriginsAfter: c.RetireOriginsAfter,
		TombstoneGrace:     c.TombstoneGrace,
		MaxClockOffset:     c.MaxClockOffset,
		Replica:            c.Replica,
		ReplicaTimeout:     c.ReplicaTimeout,
		ShutdownTimeout:    c.ShutdownTimeout,
		Hooks:              c.hooks,
		Logger:             log,
	}, nil
}

// tlsConfig builds mutual TLS for the data port from --tls-cert,
// --tls-key and --tls-ca; nil when they are not set.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCert == "" && c.TLSKey == "" && c.TLSCA == "" {
		return nil, nil
	}
	if c.TLSCert == "" || c.TLSKey == "" || c.TLSCA == "" {
		return nil, errors.New("--tls-cert, --tls-key and --tls-ca: set all three for mutual TLS on the data port, or none")
	}
	conf, err := broadcast.LoadTLS(c.TLSCert, c.TLSKey, c.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
	}
	return conf, nil
}

// natsOptions turns the --nats-* flags into connection options.
func (c Config) natsOptions() []nats.Option {
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

// checkAway is cluster.CheckAway for a node told to join with a
// --tombstone-grace, before its store opens.
func (d *Daemon) checkAway() error {
	cfg := d.cfg
	if cfg.TombstoneGrace == 0 || cfg.GossipAddr == "" || len(cfg.Join) == 0 {
		return nil
	}
	return cluster.CheckAway(cfg.DataDir, cfg.TombstoneGrace, cfg.StartOver, d.now(), d.log)
}
