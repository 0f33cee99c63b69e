package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cachecast/cachecast/broadcast"
	"github.com/cachecast/cachecast/daemon/config"
	"github.com/cachecast/cachecast/daemon/httpapi"
	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/daemon/internal/cluster"
	"github.com/cachecast/cachecast/daemon/internal/mirror"
	"github.com/cachecast/cachecast/group"
	respsrv "github.com/cachecast/cachecast/resp"
	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/wire"
)

// Version is the daemon's version, set at build time by the Makefile:
//
//	go build -ldflags "-X github.com/cachecast/cachecast/daemon.Version=v1.2.3"
var Version = "dev"

// Sentinel errors of the daemon.
var (
	// ErrClosed is returned by Run on a daemon that was closed or already run.
	ErrClosed = errors.New("daemon: closed")

	// ErrSocketInUse means another process answers on the socket path.
	ErrSocketInUse = access.ErrSocketInUse
)

// statusInterval is how often the STATUS= line sent to systemd is refreshed.
const statusInterval = 10 * time.Second

// Daemon is one cachecast node: the store, the local API on a Unix socket
// and the metrics endpoint. New opens and binds everything; Run serves until
// its context ends or a SIGTERM/SIGINT arrives, then shuts down in order.
//
// Every goroutine the daemon starts is owned by d.wg (nsqd's WaitGroup
// wrapper, now sync.WaitGroup.Go) and stops before Run returns.
type Daemon struct {
	cfg   Config
	log   *zap.Logger
	level zap.AtomicLevel
	store *store.Store
	m     *metrics
	// cluster is nil for a lone node (--gossip-addr empty).
	cluster *cluster.Cluster
	// groups runs the consumer groups with members on this node.
	groups *group.Manager
	// view mirrors the store's view into --view-file; nil when off.
	view *mirror.Mirror

	ln   *access.Listener // the local API's socket
	api  *httpapi.Server
	srv  *http.Server
	lane *httpapi.Lane // srv's listener: d.ln with the fast lane in front
	mln  net.Listener  // metrics; nil when off

	redis *respsrv.Server // the Redis front door; nil when off
	// redisCert is the TLS certificate of --redis-addr, swapped by
	// Reload; nil without --redis-tls-cert.
	redisCert atomic.Pointer[tls.Certificate]
	// dataTLS is the data port's TLS (nil without one), read again by
	// Reload.
	dataTLS  *broadcast.TLSFiles
	redisLns []net.Listener
	msrv     *http.Server

	guard *access.Guard // the roles, swapped by Reload
	node  *node         // the node as the front doors see it
	// verifies paces GET /v1/verify (one at a time, see VerifyTurns).
	verifies *cluster.VerifyTurns

	// limits and bodies keep one local user from starving the node.
	limits *access.Limits
	bodies *access.Budget

	started time.Time
	// consoleAnswers are the console routes' last answers, shared by the
	// consoles that ask at once (console.go).
	consoleAnswers sharedAnswers
	// contact is the last contact with a peer (tombstoneLoop's, see
	// tombstones.go; zero until the first ready without a contact file);
	// away is set, with the reason, once the node stopped serving for
	// being out of contact too long.
	contact time.Time
	away    atomic.Pointer[string]
	// ready: recovered, joined and caught up (catch), until shutdown.
	ready atomic.Bool
	catch *cluster.CatchUp

	// subsCtx ends every subscription stream at shutdown: http.Server's
	// Shutdown waits for handlers, and a stream never ends on its own.
	subsCtx  context.Context
	stopSubs context.CancelFunc

	wg        sync.WaitGroup
	stopLoops chan struct{} // closed at shutdown: background loops return

	mu       sync.Mutex // guards state
	state    int        // stateNew, stateRunning, stateClosed
	exit     chan struct{}
	exitOnce sync.Once
	done     chan struct{} // closed once shutdown has finished
	closeErr error
}

const (
	stateNew = iota
	stateRunning
	stateClosed
)

// New validates cfg, opens the store (recovering it) and binds the Unix
// socket and the metrics listener, so that the caller knows the addresses
// before Run. A second daemon on the same data directory fails here with an
// error wrapping store.ErrLocked. log may be nil; the daemon filters it by
// cfg.LogLevel.
//
// Until Run, connections wait in the socket's backlog. Call Close if Run is
// never called.
func New(cfg Config, log *zap.Logger) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := newDaemon(cfg, log)
	// The socket's path is checked before the store (and the view beside
	// it) is opened: a recovery of minutes must not end in "no such
	// directory", and a daemon answering on the socket owns the view (say
	// so, ErrSocketInUse, rather than that the view is locked).
	if _, err := access.CheckSocket(cfg.Socket, "--socket"); err != nil {
		return nil, err
	}
	flushes := newFlushHistogram()
	if err := d.openStore(flushes); err != nil {
		return nil, err
	}
	// What each step holds, let go of last first when a later step fails.
	undo := []func() error{d.closeStore}
	fail := func(err error) (*Daemon, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			err = errors.Join(err, undo[i]())
		}
		return nil, err
	}
	if err := d.startCluster(); err != nil {
		return fail(err)
	}
	undo = append(undo, d.closeCluster)
	d.m = newMetrics(d, flushes)
	if err := d.startGroups(); err != nil {
		return fail(err)
	}
	undo = append(undo, d.groups.Close)
	if err := d.listenSocket(); err != nil {
		return fail(err)
	}
	undo = append(undo, func() error { _ = d.ln.Close(); return nil })
	users, err := cfg.LoadRedisUsers()
	if err != nil {
		return fail(err)
	}
	d.guard.SetUsers(users)
	if err := d.startRedis(); err != nil {
		return fail(err)
	}
	undo = append(undo, func() error { d.closeRedis(); return nil })
	if err := d.listenMetrics(); err != nil {
		return fail(err)
	}
	return d, nil
}

// newDaemon is the daemon before it opens anything: its logger at the
// configured level, its channels, its role guard.
func newDaemon(cfg Config, log *zap.Logger) *Daemon {
	lvl, _ := config.ParseLevel(cfg.LogLevel)
	if log == nil {
		log = zap.NewNop()
	}
	level := zap.NewAtomicLevelAt(lvl)
	log = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return levelCore{Core: c, level: level}
	}))
	d := &Daemon{
		cfg:       cfg,
		log:       log,
		level:     level,
		stopLoops: make(chan struct{}),
		exit:      make(chan struct{}),
		done:      make(chan struct{}),
		catch:     cluster.NewCatchUp(),
		verifies:  cluster.NewVerifyTurns(),
	}
	d.subsCtx, d.stopSubs = context.WithCancel(context.Background())
	d.guard = access.NewGuard(cfg.Roles(uint32(os.Getuid())), log)
	d.node = &node{d: d}
	return d
}

// openStore opens the shared view's file and recovers the store, the view
// following it; flushes observes the store's flushes. On an error nothing
// is left open.
func (d *Daemon) openStore(flushes prometheus.Histogram) error {
	cfg, log := d.cfg, d.log
	if cfg.ViewPath() != "" {
		vm, err := openViewMirror(cfg, log.Named("view"))
		if err != nil {
			return err
		}
		d.view = vm
	}
	closeView := func() {
		if d.view != nil {
			d.view.Close()
		}
	}
	if err := d.checkAway(); err != nil {
		closeView()
		return err
	}
	d.contact, _ = cluster.ReadContact(cfg.DataDir) // zero when none: see collectTombstones
	d.notify("STATUS=recovering the store in " + cfg.DataDir)
	t0 := time.Now()
	so := cfg.StoreOptions(log)
	so.OnFlush = func(took time.Duration) { flushes.Observe(took.Seconds()) }
	st, err := store.Open(so)
	if err != nil {
		closeView()
		if errors.Is(err, store.ErrLocked) {
			return fmt.Errorf("--data-dir: %s is in use by another cachecastd: %w", cfg.DataDir, err)
		}
		return fmt.Errorf("--data-dir: %w", err) // the store names the path
	}
	d.store = st
	if d.view != nil {
		d.view.Follow(st)
	}
	stats := st.Stats()
	log.Info("store recovered",
		zap.String("data-dir", cfg.DataDir),
		zap.String("origin", wire.FormatOrigin(st.Origin())),
		zap.Int("segments", stats.Segments),
		zap.Uint64("records", stats.Records),
		zap.Int("keys", stats.Keys),
		zap.Duration("took", time.Since(t0)))
	return nil
}

// openViewMirror puts a new, not ready generation of the shared view's
// file in place (--view-file; see mirror.Open).
func openViewMirror(cfg Config, log *zap.Logger) (*mirror.Mirror, error) {
	vm, err := mirror.Open(cfg.ViewPath(), log)
	if err != nil && cfg.ViewFile == config.ViewFileAuto {
		return nil, fmt.Errorf("beside --socket %s: %w", cfg.Socket, err)
	}
	if err == nil && cfg.Hooks().ViewRetry > 0 {
		vm.Retry = cfg.Hooks().ViewRetry
	}
	if err == nil {
		vm.ValuesInFile = cfg.ViewFileValues
	}
	return vm, err
}

// startCluster starts gossip and the fan-out when the node has a gossip
// address; a lone node has nobody to catch up with.
func (d *Daemon) startCluster() error {
	if d.cfg.GossipAddr == "" {
		d.catch.Finish()
		return nil
	}
	files, err := d.cfg.TLS()
	if err != nil {
		return err
	}
	d.dataTLS = files
	c, err := cluster.New(clusterSettings(d.cfg, files, d.log), d.store)
	if err != nil {
		return err
	}
	d.cluster = c
	c.SetAnswer(d.answerConsole)
	return nil
}

// startGroups starts the consumer groups, told of the cluster's members.
func (d *Daemon) startGroups() error {
	cfg := d.cfg
	gcfg := group.Config{
		Store:      group.StoreOf(d.store),
		Write:      d.writeInternal,
		Queues:     cfg.QueuesPerTopic,
		AckTimeout: cfg.AckTimeout,
		MaxRetries: cfg.MaxRetries,
		Backoff:    cfg.RetryBackoff,
		Logger:     d.log.Named("groups"),
	}
	if d.cluster != nil {
		gcfg.Nodes = d.cluster.Nodes
	}
	g, err := group.New(gcfg)
	if err != nil {
		return err
	}
	d.groups = g
	if d.cluster != nil {
		d.cluster.OnMembers(d.groups.Kick)
	}
	return nil
}

// listenSocket binds the local API's socket with its limits and budgets,
// and gives the shared view the socket's group.
func (d *Daemon) listenSocket() error {
	cfg := d.cfg
	d.limits = access.NewLimits(access.LimitsConfig{
		MaxConnections: cfg.MaxConnections, MaxConnectionsPerUID: cfg.MaxConnectionsPerUID,
		MaxStreams: cfg.MaxStreams, MaxStreamsPerUID: cfg.MaxStreamsPerUID,
	}, d.m.connections, d.m.evicted)
	d.bodies = access.NewBudget(cfg.MaxBodyMemory, cfg.MaxBodyMemoryPerUID)
	ln, err := access.ListenUnix(cfg.Socket, cfg.SocketMode, d.limits, "--socket")
	if err != nil {
		return err
	}
	d.ln = ln
	d.srv = d.newServer()
	if d.view == nil {
		return nil
	}
	if err := d.view.UseSocketGroup(cfg.Socket); err != nil {
		_ = d.ln.Close()
		return err
	}
	if d.cluster != nil {
		d.view.Members = d.viewMembers
		d.view.CaughtUp = func() bool { return d.catch.CaughtUp() && d.awayReason() == "" }
	}
	d.view.RegisterMetrics(d.m.reg)
	return nil
}

// listenMetrics binds --metrics-addr, if set, for the metrics, the
// read-only health routes and the console.
func (d *Daemon) listenMetrics() error {
	if d.cfg.MetricsAddr == "" {
		return nil
	}
	mln, err := net.Listen("tcp", d.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	d.mln = mln
	d.msrv = d.m.newServer(d.log, d.api.ReadOnly())
	if d.msrv.Handler, err = d.withConsole(d.msrv.Handler); err != nil {
		_ = d.mln.Close()
		return err
	}
	return nil
}

// GossipAddr is the gossip address bound (with the port the system chose
// for ":0"); "" for a lone node.
func (d *Daemon) GossipAddr() string {
	if d.cluster == nil {
		return ""
	}
	return d.cluster.Gossip().Addr()
}

// ClusterStatus is what GET /v1/cluster answers: the members as this
// node sees them.
func (d *Daemon) ClusterStatus() wire.ClusterStatus { return d.node.Cluster() }

// DataAddr is the data port's address bound (with the port the system
// chose for ":0"); "" for a lone node.
func (d *Daemon) DataAddr() string {
	if d.cluster == nil {
		return ""
	}
	return d.cluster.Broadcast().Addr()
}

// SocketPath is the path of the local API's Unix socket.
func (d *Daemon) SocketPath() string { return d.cfg.Socket }

// MetricsAddr is the address the metrics endpoint listens on (with the port
// the system chose for ":0"), or "" when metrics are off.
func (d *Daemon) MetricsAddr() string {
	if d.mln == nil {
		return ""
	}
	return d.mln.Addr().String()
}

// Store is the daemon's store. The cluster layer and tests use it; callers
// must not close it.
func (d *Daemon) Store() *store.Store { return d.store }

// Run serves the local API (and metrics) until ctx ends, Close is called or
// a SIGTERM or SIGINT arrives; a SIGHUP reloads (see Reload). It then shuts
// down: STOPPING=1 to systemd, stop accepting, end subscriptions, drain
// in-flight requests (at most cfg.ShutdownTimeout), close the store (flush
// and snapshot), remove the socket. Run returns nil after a requested
// shutdown, or the error that made it stop. Run may be called once.
func (d *Daemon) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.state != stateNew {
		d.mu.Unlock()
		return ErrClosed
	}
	d.state = stateRunning
	d.mu.Unlock()
	defer close(d.done)

	d.started = time.Now()
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigc)

	// The first fatal error of a server loop ends Run (nsqd's exitFunc).
	errc := make(chan error, 2+len(d.redisLns))
	d.wg.Go(func() {
		if err := d.srv.Serve(d.lane); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("local api on %s: %w", d.cfg.Socket, err)
		}
	})
	if d.msrv != nil {
		d.wg.Go(func() {
			if err := d.msrv.Serve(d.mln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics on %s: %w", d.MetricsAddr(), err)
			}
		})
	}
	d.serveRedis(errc)
	d.wg.Go(d.notifyLoop)
	d.wg.Go(d.tombstoneLoop)
	if d.view != nil {
		d.wg.Go(func() { d.view.Run(d.stopLoops) })
	}

	// The first join and the catch-up with the peers it finds are waited
	// for (READY=1 follows them; see the cluster package's catchup.go), but a stop is heard
	// meanwhile: a SIGTERM or Close during the join timeout or a long
	// catch-up shuts down at once.
	if d.cluster != nil {
		d.notify("STATUS=joining the cluster")
		d.cluster.Start()
		d.wg.Go(func() { d.cluster.Observer().Run(d.cfg.ObserveInterval, d.ready.Load, d.stopLoops) })
		d.wg.Go(func() {
			d.cluster.CatchUp(d.catch, d.stopLoops, cluster.Reporter{Notify: d.notify, StatusLine: d.statusLine, Every: statusInterval})
		})
	}
	stop, runErr := d.waitForStop(ctx, sigc, errc, d.catch.Done())
	if !stop {
		d.ready.Store(true)
		d.notifyReady()
		d.log.Info("serving",
			zap.String("socket", d.cfg.Socket),
			zap.String("redis-socket", d.RedisSocketPath()),
			zap.String("redis-addr", d.RedisAddr()),
			zap.String("metrics-addr", d.MetricsAddr()),
			zap.String("node", d.cfg.NodeName),
			zap.String("flush", d.cfg.Flush),
			zap.String("version", Version))
		_, runErr = d.waitForStop(ctx, sigc, errc, nil)
	}
	d.closeErr = d.shutdown()
	return errors.Join(runErr, d.closeErr)
}

// waitForStop serves signals (SIGHUP reloads) until a stop comes (ctx
// done, Close, SIGTERM or SIGINT, a server loop's error: stop is true,
// with that error) or until is closed (stop is false). A nil until waits
// for the stop alone.
func (d *Daemon) waitForStop(ctx context.Context, sigc <-chan os.Signal, errc <-chan error, until <-chan struct{}) (stop bool, err error) {
	for {
		select {
		case <-until:
			return false, nil
		case <-ctx.Done():
			d.log.Info("shutting down", zap.String("reason", "context done"))
			return true, nil
		case <-d.exit:
			d.log.Info("shutting down", zap.String("reason", "close"))
			return true, nil
		case err := <-errc:
			d.log.Error("shutting down", zap.Error(err))
			return true, err
		case s := <-sigc:
			if s == syscall.SIGHUP {
				if err := d.Reload(); err != nil {
					d.log.Error("reload failed; the running configuration stays", zap.Error(err))
				}
				continue
			}
			d.log.Info("shutting down", zap.String("reason", s.String()))
			return true, nil
		}
	}
}

// Close shuts the daemon down: it ends Run and waits for it, or, if Run was
// never called, releases the listeners and the store. It is safe to call
// more than once and from any goroutine.
func (d *Daemon) Close() error {
	d.mu.Lock()
	st := d.state
	if st == stateNew {
		d.state = stateClosed
	}
	d.mu.Unlock()
	switch st {
	case stateNew:
		d.closeErr = d.shutdown()
		close(d.done)
	case stateRunning:
		d.exitOnce.Do(func() { close(d.exit) })
	}
	<-d.done
	return d.closeErr
}

// shutdown stops everything in order. Each step is bounded.
func (d *Daemon) shutdown() error {
	d.ready.Store(false)
	d.notify(sd.SdNotifyStopping + "\nSTATUS=stopping: draining requests")
	d.stopSubs()

	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	// Shutdown closes the listener (which removes the socket file) and
	// waits for in-flight requests; past the deadline Close cuts them off.
	if err := d.srv.Shutdown(ctx); err != nil {
		d.log.Warn("requests still in flight at the shutdown timeout; closing their connections",
			zap.Duration("shutdown-timeout", d.cfg.ShutdownTimeout), zap.Error(err))
		_ = d.srv.Close()
	}
	d.lane.Shutdown(ctx) // its connections, which the http.Server does not see
	_ = d.ln.Close()     // when Serve never ran
	d.closeRedis()
	if d.msrv != nil {
		if err := d.msrv.Shutdown(ctx); err != nil {
			_ = d.msrv.Close()
		}
		_ = d.mln.Close()
	}
	close(d.stopLoops)
	d.wg.Wait()

	// A handler cut off by Close may still be returning; the store must
	// outlive it. Bounded: a handler stuck in the store is logged, not
	// waited for forever.
	select {
	case <-d.api.Drain():
	case <-time.After(d.cfg.ShutdownTimeout):
		d.log.Error("handlers still running after the shutdown timeout; closing the store under them",
			zap.Int("handlers", d.api.Handlers()))
	}

	// The groups write their positions and this node's departure while
	// the cluster can still carry them.
	_ = d.groups.Close()
	if cerr := d.closeCluster(); cerr != nil {
		d.log.Warn("leaving the cluster", zap.Error(cerr))
	}
	d.notify("STATUS=stopping: flushing and writing the snapshot")
	err := d.closeStore()
	if err != nil {
		d.log.Error("store close", zap.Error(err))
	} else {
		d.log.Info("stopped")
	}
	return err
}

// closeCluster leaves the cluster gracefully (before the store closes, so
// that peers stop sending) and stops the gossip and data ports.
func (d *Daemon) closeCluster() error {
	if d.cluster == nil {
		return nil
	}
	return d.cluster.Close()
}

// writeInternal appends the daemon's own records (consumer-group
// positions, hosts and dead letters) as one batch and, under
// --replication=sync, waits for the replica as a publish does. A replica
// that does not confirm is counted, not an error: the write stands.
func (d *Daemon) writeInternal(ctx context.Context, msgs []record.Message) error {
	results, err := d.store.PublishBatch(msgs)
	if err != nil {
		return err
	}
	if d.cluster != nil && d.cfg.Replication == "sync" {
		if status := d.cluster.WaitReplica(ctx, results[len(results)-1].Seq); status != wire.StatusOK {
			d.m.replicaMisses.WithLabelValues(status).Inc()
		}
	}
	return nil
}

// closeStore closes the view file (it mirrors the store) and the store.
func (d *Daemon) closeStore() error {
	if d.view != nil {
		d.view.Close()
	}
	if err := d.store.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// Reload applies a new configuration from cfg.Reload (cmd/cachecastd reads
// the command line, the environment and --env-file again): the settings
// the table marks reload (ReloadFlags: the log level, the role lists, the
// Redis users) change at once, and the files of --cluster-key-file, of
// the data port's TLS (--tls-cert, --tls-key, --tls-ca) and of the Redis
// door's (--redis-tls-cert, --redis-tls-key) are read again from the same
// paths; other settings that differ are logged as needing a restart. SIGHUP calls it, between RELOADING=1 and READY=1.
func (d *Daemon) Reload() error {
	d.notify(sd.SdNotifyReloading + "\n" + sd.SdNotifyMonotonicUsec() + "\nSTATUS=reloading")
	defer func() {
		if d.ready.Load() {
			d.notifyReady()
		}
	}()
	if d.cfg.Reload == nil {
		d.log.Info("reload: no configuration source; nothing changed")
		return nil
	}
	nc, err := d.cfg.Reload()
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if err := nc.Validate(); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if d.cluster != nil && nc.ClusterKeyFile != "" && nc.ClusterKeyFile == d.cfg.ClusterKeyFile {
		// The key file's contents may change on a running node (rotation).
		if err := d.cluster.ReloadKeys(); err != nil {
			return fmt.Errorf("reload: --cluster-key-file: %w", err)
		}
	}
	users, err := nc.LoadRedisUsers()
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	cert, err := d.loadRedisCert(nc)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if err := d.reloadDataTLS(nc); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	lvl, _ := config.ParseLevel(nc.LogLevel)
	d.level.SetLevel(lvl)
	d.guard.Set(nc.Roles(uint32(os.Getuid())))
	d.guard.SetUsers(users)
	d.swapRedisCert(cert)
	if d.redis != nil {
		d.redis.RolesChanged()
	}
	fields := append(config.ReloadFields(nc), zap.Int("redis-users-count", users.Len()))
	if static := config.Changed(d.cfg, nc, false); len(static) > 0 {
		// Not "reloaded": these changed and are not in force.
		d.log.Warn("reload applied "+strings.Join(config.ReloadFlags(), ", ")+"; these changed settings need a restart and were not applied",
			append(fields, zap.Strings("not-applied", static))...)
		return nil
	}
	d.log.Info("reloaded", fields...)
	return nil
}

// notifyLoop sends WATCHDOG=1 at half the watchdog interval while the store
// is healthy (a wedged store stops the pings and systemd restarts us),
// refreshes the STATUS= line and samples the flush duration.
func (d *Daemon) notifyLoop() {
	var watchdog <-chan time.Time
	if every, err := sd.SdWatchdogEnabled(false); err != nil {
		d.log.Warn("systemd watchdog settings unreadable; not pinging it", zap.Error(err))
	} else if every > 0 {
		t := time.NewTicker(every / 2)
		defer t.Stop()
		watchdog = t.C
		d.log.Info("systemd watchdog on", zap.Duration("interval", every))
	}
	status := time.NewTicker(statusInterval)
	defer status.Stop()
	unhealthy, full := false, false
	unavailable := 0 // lost records no live peer holds, as last logged
	// checkDisk logs a full disk once, and the end of it; the STATUS line
	// says it meanwhile. The watchdog pings go on: a restart frees no space,
	// and reads still work.
	checkDisk := func() {
		err := d.store.DiskFull()
		switch {
		case err != nil && !full:
			d.log.Error("the disk is full: writes are refused with disk_full until space is freed", zap.Error(err))
		case err == nil && full:
			d.log.Info("the disk has room again; writes resume")
		}
		full = err != nil
	}
	for {
		select {
		case <-d.stopLoops:
			return
		case <-watchdog:
			checkDisk()
			if err := d.healthy(); err != nil {
				if !unhealthy {
					d.log.Error("node unhealthy; watchdog pings stop", zap.Error(err))
					d.notify("STATUS=unhealthy: " + err.Error())
				}
				unhealthy = true
				continue
			}
			if unhealthy {
				d.log.Info("store healthy again; watchdog pings resume")
				unhealthy = false
			}
			d.notify(sd.SdNotifyWatchdog)
		case <-status.C:
			checkDisk()
			unavailable = d.checkRepair(unavailable)
			if !unhealthy {
				d.notify("STATUS=" + d.statusLine())
			}
		}
	}
}

// statusLine is the human summary systemctl status shows.
func (d *Daemon) statusLine() string {
	s := d.store.Stats()
	line := "serving on " + d.cfg.Socket + "; " + strconv.Itoa(s.Keys) + " keys, " +
		strconv.FormatUint(s.Records, 10) + " records, " + strconv.Itoa(s.Segments) + " segments"
	if n := len(d.store.Lost()); n > 0 {
		line = "REPAIRING, " + strconv.Itoa(n) + " records lost to a damaged log; " + line
	}
	if cs := d.catch.Status(); cs.Phase != "done" {
		line = "CATCHING UP (" + cs.Phase + ", " + strconv.FormatUint(cs.LagRecords, 10) + " records behind); " + line
	}
	if why := d.degraded(); why != "" {
		line = "DEGRADED, " + why + "; " + line
	}
	if d.store.DiskFull() != nil {
		line = "DISK FULL, writes refused; " + line
	}
	if d.awayReason() != "" {
		line = "AWAY TOO LONG, left the cluster, reads and writes refused (restart with --start-over); " + line
	}
	return line
}

// degraded says why the node runs short of its cluster, "" when it does
// not: see degradation.
func (d *Daemon) degraded() string {
	_, _, why := d.degradation()
	return why
}

// degradation is the cluster's Degradation (nothing for a lone node):
// why the node runs short of its cluster, past --join-timeout.
func (d *Daemon) degradation() (kind string, missing []string, why string) {
	if d.cluster == nil {
		return "", nil, ""
	}
	var served time.Duration
	if !d.started.IsZero() {
		served = time.Since(d.started)
	}
	return d.cluster.Degradation(served)
}

// notifyReady tells systemd the daemon is ready (READY=1), with its
// status line.
func (d *Daemon) notifyReady() {
	d.notify(sd.SdNotifyReady + "\nSTATUS=" + d.statusLine())
}

// notify sends a state to systemd when NOTIFY_SOCKET is set. A failure is
// logged, never fatal: the daemon also runs without systemd.
func (d *Daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.Debug("sd_notify failed", zap.Error(err))
	}
}

// newServer makes the local API's HTTP server: httpapi's handler, under
// the limits and the timeouts of the flags.
func (d *Daemon) newServer() *http.Server {
	d.api = httpapi.New(httpapi.Config{
		Node:             d.node,
		Groups:           d.groups,
		Guard:            d.guard,
		Limits:           d.limits,
		Bodies:           d.bodies,
		MaxValueSize:     d.cfg.MaxValueSize,
		MaxBodySize:      d.cfg.MaxBodySize,
		MaxMembersPerUID: d.cfg.MaxMembersPerUID,
		ReadTimeout:      d.cfg.ReadTimeout,
		Stop:             d.subsCtx,
		Registry:         d.m.reg,
		Logger:           d.log,
		Clock:            d.cfg.Hooks().Clock,
	})
	d.lane = httpapi.NewLane(d.api, d.ln, httpapi.LaneConfig{ReadHeaderTimeout: d.cfg.ReadHeaderTimeout,
		ReadTimeout: d.cfg.ReadTimeout, WriteTimeout: d.cfg.WriteTimeout, IdleTimeout: d.cfg.IdleTimeout})
	return &http.Server{
		Handler:           d.api,
		ReadHeaderTimeout: d.cfg.ReadHeaderTimeout,
		ReadTimeout:       d.cfg.ReadTimeout,
		WriteTimeout:      d.cfg.WriteTimeout,
		IdleTimeout:       d.cfg.IdleTimeout,
		MaxHeaderBytes:    httpapi.MaxHeaderBytes,
		ConnContext:       access.ConnContext,
		ConnState:         d.limits.ConnState,
		ErrorLog:          zap.NewStdLog(d.log.Named("http")),
	}
}

// Config is everything a daemon is started with: package daemon/config
// has its settings, defaults and rules.
type Config = config.Config
