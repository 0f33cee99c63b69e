package daemon

import (
	"go.uber.org/zap"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/daemon/internal/cluster"
)

// The daemon's wiring of its cluster (package daemon/internal/cluster:
// gossip, the data port, catch-up, verify, forget, the contact rule):
// the settings it takes, and the rule a node away too long meets at
// start.

// clusterSettings is the cluster's part of c.
func clusterSettings(c Config, log *zap.Logger) (cluster.Config, error) {
	tlsConf, err := c.TLS()
	if err != nil {
		return cluster.Config{}, err
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
	}, nil
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
