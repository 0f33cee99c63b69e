package daemon

import (
	"crypto/tls"
	"fmt"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/daemon/internal/cluster"
)

// The daemon's wiring of its cluster (package daemon/internal/cluster:
// gossip, the data port, catch-up, verify, forget, the contact rule):
// the settings it takes, and the rule a node away too long meets at
// start.

// clusterSettings is the cluster's part of c, with the data port's TLS
// files read (nil without TLS).
func clusterSettings(c Config, files *broadcast.TLSFiles, log *zap.Logger) cluster.Config {
	var tlsConf *tls.Config
	if files != nil {
		tlsConf = files.Config()
	}
	var natsConf *broadcast.NATSConfig
	if c.Transport == "nats" {
		natsConf = &broadcast.NATSConfig{URL: c.NATSURL, SubjectPrefix: c.NATSSubjectPrefix, Options: c.NATSOptions()}
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
		LoopbackOnly:       config.Loopback(c.GossipAddr) && config.Loopback(c.DataAddr),
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
		Hooks:              c.Hooks(),
		Logger:             log,
	}
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

// reloadDataTLS reads the data port's TLS files again for a reload (a
// renewed certificate or CA at the same paths): nothing when the port has
// no TLS or nc names other files (that needs a restart; Changed names
// them); the files in force are kept when the new ones do not load.
func (d *Daemon) reloadDataTLS(nc Config) error {
	if d.dataTLS == nil || nc.TLSCert != d.cfg.TLSCert || nc.TLSKey != d.cfg.TLSKey || nc.TLSCA != d.cfg.TLSCA {
		return nil
	}
	if err := d.dataTLS.Reload(); err != nil {
		return fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w (the certificate and CA in force are kept)", err)
	}
	leaf := d.dataTLS.Leaf()
	d.log.Info("data port TLS certificate and CA reloaded", zap.String("serial", leaf.SerialNumber.String()),
		zap.Time("not-after", leaf.NotAfter))
	return nil
}
