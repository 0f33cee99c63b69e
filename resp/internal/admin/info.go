package admin

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cachecast/cachecast/resp/internal/session"
)

// Status is the node's state as INFO shows it.
type Status struct {
	Node        string
	Origin      string
	Version     string
	Flush       string
	Replication string
	Replica     string // the replica peer's name, if any
	Members     []Member
	Keys        int
}

// Member is one member of the cluster as this node sees it.
type Member struct {
	Name, State string
	Self        bool
	LagRecords  uint64
	LagSeconds  float64
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	// Connections is the number of open connections.
	Connections int64
	// Accepted counts the connections ever accepted.
	Accepted int64
	// Commands counts the commands run (unknown ones included).
	Commands int64
	// ByCommand counts the commands run, by lower-case name.
	ByCommand map[string]int64
	// Unknown counts unknown commands.
	Unknown int64
	// ProtocolErrors counts connections closed for a frame that could
	// not be parsed or was too large.
	ProtocolErrors int64
	// TrackingClients is the number of connections with CLIENT TRACKING on.
	TrackingClients int64
	// Invalidations counts the keys sent in invalidation messages.
	Invalidations int64
	// SlowDisconnects counts the clients disconnected because their
	// pushes went past --redis-push-buffer (or their redirect target
	// closed).
	SlowDisconnects int64
	// Subscriptions is the number of channel and pattern subscriptions.
	Subscriptions int64
	// Refused counts the connections refused at --max-connections or a
	// peer's share of it.
	Refused int64
	// IdleClosed counts the connections closed after --redis-idle-timeout.
	IdleClosed int64
	// TrackingEvicted counts the keys forgotten (and invalidated) for
	// tracking clients at --redis-tracking-max-keys.
	TrackingEvicted int64
}

// infoSections are INFO's sections in Redis's order; each says whether
// INFO without an argument (or default) prints it, as Redis's
// genRedisInfoString does (all and everything print every one).
var infoSections = []struct {
	name     string
	dflt     bool
	generate func(c *session.Session, st *infoState, line func(k string, v any))
}{
	{"server", true, infoServer},
	{"clients", true, infoClients},
	{"memory", true, infoMemory},
	{"persistence", true, infoPersistence},
	{"stats", true, infoStats},
	{"replication", true, infoReplication},
	{"cpu", true, infoCPU},
	{"commandstats", false, infoCommandStats},
	{"cluster", true, infoCluster},
	{"keyspace", true, infoKeyspace},
	{"cachecast", true, infoCachecast},
}

// infoState is what INFO's sections read, fetched once.
type infoState struct {
	node  Status
	stats Stats
	Info
}

// infoWanted is the sections INFO's arguments name, by Redis's rules:
// none or default the default ones, all and everything every one, any
// other a section by its name (an unknown name prints nothing).
func infoWanted(args [][]byte) map[string]bool {
	want := map[string]bool{}
	if len(args) == 0 {
		args = [][]byte{[]byte("default")}
	}
	for _, arg := range args {
		w := strings.ToLower(string(arg))
		for _, sec := range infoSections {
			if w == sec.name || w == "all" || w == "everything" || w == "default" && sec.dflt {
				want[sec.name] = true
			}
		}
	}
	return want
}

func cmdInfo(c *session.Session, a [][]byte) {
	want := infoWanted(a[1:])
	srv := serverOf(c)
	st := &infoState{node: srv.Status(), stats: srv.Stats(), Info: srv.Info()}
	var b strings.Builder
	line := func(k string, v any) {
		b.WriteString(k)
		b.WriteByte(':')
		switch x := v.(type) {
		case string:
			b.WriteString(x)
		case int:
			b.WriteString(strconv.Itoa(x))
		case int64:
			b.WriteString(strconv.FormatInt(x, 10))
		case uint64:
			b.WriteString(strconv.FormatUint(x, 10))
		case float64:
			b.WriteString(strconv.FormatFloat(x, 'f', 6, 64))
		}
		b.WriteString("\r\n")
	}
	for _, sec := range infoSections {
		if !want[sec.name] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		title := strings.ToUpper(sec.name[:1]) + sec.name[1:]
		if sec.name == "cpu" {
			title = "CPU" // Redis's spelling
		}
		b.WriteString("# " + title + "\r\n")
		sec.generate(c, st, line)
	}
	c.Verbatim(b.String())
}

func infoServer(c *session.Session, st *infoState, line func(string, any)) {
	up := time.Since(st.Started)
	line("redis_version", session.RedisVersion)
	line("redis_git_sha1", "00000000")
	line("redis_git_dirty", 0)
	line("redis_mode", "standalone")
	line("cachecast_version", st.node.Version)
	line("os", runtime.GOOS+" "+runtime.GOARCH)
	line("arch_bits", strconv.IntSize)
	line("multiplexing_api", "epoll")
	line("process_id", pid)
	line("run_id", st.RunID)
	line("tcp_port", st.TCPPort)
	line("server_time_usec", time.Now().UnixMicro())
	line("uptime_in_seconds", int64(up.Seconds()))
	line("uptime_in_days", int64(up.Hours()/24))
	line("hz", 10)
	line("configured_hz", 10)
	line("executable", executable)
	line("config_file", "")
}

func infoClients(c *session.Session, st *infoState, line func(string, any)) {
	line("connected_clients", st.stats.Connections)
	line("cluster_connections", 0)
	line("maxclients", st.MaxConnections)
	line("blocked_clients", 0)
	line("tracking_clients", st.stats.TrackingClients)
	line("pubsub_subscriptions", st.stats.Subscriptions)
}

// infoMemory reports the Go runtime's memory as Redis's fields:
// used_memory is what the runtime holds in use (its heap objects,
// stacks and own structures, not the pages it freed or returned),
// used_memory_rss the process's resident set (/proc/self/statm), which
// includes the store's mapped log pages in memory, used_memory_peak the
// highest used_memory INFO has seen, maxmemory the runtime's soft limit
// (GOMEMLIMIT; 0 when none, as Redis's no limit).
func infoMemory(_ *session.Session, st *infoState, line func(string, any)) {
	used := usedMemory()
	peak := st.MemPeak.Load()
	for used > peak && !st.MemPeak.CompareAndSwap(peak, used) {
		peak = st.MemPeak.Load()
	}
	peak = max(peak, used)
	rss := rssBytes()
	limit := debug.SetMemoryLimit(-1)
	if limit == math.MaxInt64 {
		limit = 0
	}
	line("used_memory", used)
	line("used_memory_human", humanBytes(used))
	line("used_memory_rss", rss)
	line("used_memory_rss_human", humanBytes(rss))
	line("used_memory_peak", peak)
	line("used_memory_peak_human", humanBytes(peak))
	line("maxmemory", limit)
	line("maxmemory_human", humanBytes(uint64(limit)))
	line("maxmemory_policy", "noeviction")
	if used > 0 {
		line("mem_fragmentation_ratio", float64(rss)/float64(used))
	}
	line("mem_allocator", "go-"+runtime.Version())
}

// memSamples are the runtime/metrics usedMemory reads.
var memSamples = []metrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
}

var memMu sync.Mutex // guards memSamples

// usedMemory is the memory the Go runtime holds in use: all it mapped
// but the free and released heap pages.
func usedMemory() uint64 {
	memMu.Lock()
	defer memMu.Unlock()
	metrics.Read(memSamples)
	return memSamples[0].Value.Uint64() - memSamples[1].Value.Uint64() - memSamples[2].Value.Uint64()
}

// rssBytes is the process's resident set size: statm's second field, in
// pages; 0 where /proc is not there.
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// humanBytes is a byte count as Redis's bytesToHuman writes it (1.50M).
func humanBytes(n uint64) string {
	f := float64(n)
	for _, u := range []string{"B", "K", "M", "G", "T", "P"} {
		if f < 1024 || u == "P" {
			if u == "B" {
				return strconv.FormatUint(n, 10) + "B"
			}
			return strconv.FormatFloat(f, 'f', 2, 64) + u
		}
		f /= 1024
	}
	return ""
}

func infoPersistence(c *session.Session, st *infoState, line func(string, any)) {
	if cs := st.State.CatchUp; cs != nil {
		line("loading", 1)
		line("cachecast_catch_up_lag_records", cs.LagRecords)
	} else {
		line("loading", 0)
	}
	line("rdb_bgsave_in_progress", 0)
	line("aof_enabled", 0)
	line("flush", st.node.Flush)
}

func infoStats(c *session.Session, st *infoState, line func(string, any)) {
	line("total_connections_received", st.stats.Accepted)
	line("total_commands_processed", st.stats.Commands)
	line("rejected_connections", st.stats.Refused)
	line("unknown_commands", st.stats.Unknown)
	line("protocol_errors", st.stats.ProtocolErrors)
	line("tracking_invalidations_sent", st.stats.Invalidations)
	line("slow_clients_disconnected", st.stats.SlowDisconnects)
	line("evicted_keys", 0)
	line("pubsub_channels", st.Channels)
	line("pubsub_patterns", st.Patterns)
}

func infoReplication(_ *session.Session, st *infoState, line func(string, any)) {
	line("role", "master")
	n := 0
	if st.node.Replica != "" {
		n = 1
	}
	line("connected_slaves", n)
	line("cachecast_replication", st.node.Replication)
	line("cachecast_replica", st.node.Replica)
}

// infoCPU is the process's CPU time (getrusage), as Redis's used_cpu_*.
func infoCPU(_ *session.Session, _ *infoState, line func(string, any)) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return
	}
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	line("used_cpu_sys", sec(ru.Stime))
	line("used_cpu_user", sec(ru.Utime))
}

// infoCommandStats lists the commands run, as Redis's cmdstat_ lines
// (the server counts calls only: usec stays 0).
func infoCommandStats(c *session.Session, st *infoState, line func(string, any)) {
	for _, cmd := range serverOf(c).Table() {
		if n := st.stats.ByCommand[cmd.Name]; n > 0 {
			line("cmdstat_"+cmd.Name, "calls="+strconv.FormatInt(n, 10)+",usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0")
		}
	}
}

func infoCluster(_ *session.Session, _ *infoState, line func(string, any)) {
	line("cluster_enabled", 0)
}

// infoKeyspace is db0's line, left out when it has no key, as Redis
// does. expires stays 0: the view does not count the keys with an
// expiry.
func infoKeyspace(c *session.Session, _ *infoState, line func(string, any)) {
	if n := liveKeys(c.Env.Node); n > 0 {
		line("db0", "keys="+strconv.Itoa(n)+",expires=0,avg_ttl=0")
	}
}

func infoCachecast(c *session.Session, st *infoState, line func(string, any)) {
	line("node", st.node.Node)
	line("origin", st.node.Origin)
	line("default_topic", c.Env.DefaultTopic)
	line("members", len(st.node.Members))
	for i, m := range st.node.Members {
		line("member"+strconv.Itoa(i), "name="+m.Name+",state="+m.State+",self="+strconv.FormatBool(m.Self)+
			",lag_records="+strconv.FormatUint(m.LagRecords, 10)+",lag_seconds="+strconv.FormatFloat(m.LagSeconds, 'f', 3, 64))
	}
}

// executable is the daemon's path, as INFO's executable.
var executable, _ = os.Executable()
