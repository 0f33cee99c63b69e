#!/usr/bin/env bash
# Resident memory of cachecastd against redis-server holding the same keys
# (issue 34; BENCHMARKS.md, "Memory per key"). The two servers run one after
# the other, each alone: cachecastd with its default flags (but no cluster:
# --gossip-addr=, and its own temp data dir, socket and shared view file),
# then redis-server --save "" --appendonly no. Each is measured idle, then
# loaded with N keys prices:sku-NNNNNNN of SIZE-byte values through its Redis
# socket with redis-cli --pipe (one RESP stream, generated once), then
# measured again once its resident set has settled: VmRSS and its RssAnon /
# RssFile / RssShmem parts (/proc/PID/status), Pss_Anon / Pss_File from
# smaps_rollup, the file-backed part by file (smaps), INFO's used_memory,
# bytes per key, and the ratios; then once more after REST seconds without
# writes (at rest: cachecastd hands its free heap back once quiet, see
# internal/gctune's Quiet; REST=0 skips it). From the load's start until
# it settled it samples each server's RssAnon every 0.2 s (the peak), and
# reads cachecastd's runtime through its Prometheus endpoint
# (--metrics-addr on a free loopback port): the bytes allocated a SET and
# the collections the load took.
# Needs redis-server and redis-tools (Debian packages); from the repository root:
#   make bench-memory                 (N=1000000)
#   N=10000000 make bench-memory      (the stream is ~1.5 GB in the temp dir)
set -euo pipefail
N=${N:-1000000}
SIZE=${SIZE:-100}
SETTLE=${SETTLE:-60} # at most this many seconds waiting for RSS to settle
REST=${REST:-20}     # seconds without writes before the figures at rest
work=$(mktemp -d /tmp/cc-mem.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
	echo "install redis-server and redis-tools first (apt-get install redis-server redis-tools)" >&2
	exit 1
}
[ -x ./bin/cachecastd ] && [ -n "${NOBUILD:-}" ] || make -s build

# The RESP stream: SET prices:sku-NNNNNNN <SIZE bytes>, N times.
awk -v n="$N" -v size="$SIZE" 'BEGIN {
	v = sprintf("%" size "s", ""); gsub(/ /, "v", v)
	for (i = 0; i < n; i++) {
		k = sprintf("prices:sku-%07d", i)
		printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, size, v
	}
}' >"$work/load.resp"

kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
rollup() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/smaps_rollup"; }
info() { redis-cli -s "$1" info memory | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'; }
# sample PID FILE: keeps the highest RssAnon of PID (KiB) in FILE, looking
# every 0.2 s until killed.
sample() {
	local a peak=0
	while a=$(kib "$1" RssAnon); do
		if ((a > peak)); then
			peak=$a
			echo "$peak" >"$2"
		fi
		sleep 0.2
	done
}
# metric NAME: cachecastd's Prometheus sample NAME (0 without the endpoint).
metric() { { curl -fs "http://127.0.0.1:$mport/metrics" || true; } | awk -v f="$1" '$1 == f { printf "%d\n", $2; n++ } END { if (!n) print 0 }'; }
# settle PID: waits until VmRSS moved less than 1% over 3 s (at most SETTLE s).
settle() {
	local prev cur i
	prev=$(kib "$1" VmRSS)
	for ((i = 0; i < SETTLE; i += 3)); do
		sleep 3
		cur=$(kib "$1" VmRSS)
		awk -v a="$prev" -v b="$cur" 'BEGIN { d = b - a; if (d < 0) d = -d; exit !(d * 100 < a) }' && return
		prev=$cur
	done
	echo "  (not settled after ${SETTLE}s)"
}
# measure NAME PID SOCKET STATE: one line of figures (KiB), kept for the summary.
measure() {
	local rss anon file shm panon pfile used
	rss=$(kib "$2" VmRSS) anon=$(kib "$2" RssAnon) file=$(kib "$2" RssFile) shm=$(kib "$2" RssShmem)
	panon=$(rollup "$2" Pss_Anon) pfile=$(rollup "$2" Pss_File)
	used=$(($(info "$3" used_memory) / 1024))
	echo "$1 $4: rss $((rss / 1024)) MiB = anon $((anon / 1024)) + file $((file / 1024)) + shmem $((shm / 1024)); pss anon $((panon / 1024)), file $((pfile / 1024)); used_memory $((used / 1024)) MiB"
	echo "$1|$4|$rss|$anon|$file|$shm|$used" >>"$work/results"
	files "$2"
}
# files PID: the file-backed resident set by file (/proc/PID/smaps): the
# work dir's files (log segments and indexes, the shared view file) and the rest.
files() {
	awk -v w="$work/" '
		/^[0-9a-f]+-[0-9a-f]+ / { f = $6; if (f == "" || f ~ /^\[/) f = ""; else if (index(f, w) == 1) { f = substr(f, length(w) + 1); if (split(f, p, "/") > 2) f = p[1] "/" p[2] "/" } else f = "(other files)" }
		$1 == "Rss:" && f != "" { kb[f] += $2 }
		END { for (f in kb) if (kb[f] >= 1024) printf "  file-backed resident: %s %d MiB\n", f, kb[f] / 1024 }' "/proc/$1/smaps" | sort
}
# run NAME PID SOCKET: idle figures, the load, loaded figures.
run() {
	local keys
	for _ in $(seq 300); do
		redis-cli -s "$3" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	sleep 2
	measure "$1" "$2" "$3" idle
	local sp alloc0=0 gc0=0
	if [ "$1" = cachecastd ]; then
		alloc0=$(metric go_memstats_alloc_bytes_total) gc0=$(metric go_gc_duration_seconds_count)
	fi
	echo 0 >"$work/peak"
	sample "$2" "$work/peak" &
	sp=$!
	start=$(date +%s.%N)
	redis-cli -s "$3" --pipe <"$work/load.resp" | tail -1
	keys=$(redis-cli -s "$3" dbsize)
	echo "$1: $keys keys loaded in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
	[ "$keys" = "$N" ] || { echo "$1: DBSIZE $keys, want $N" >&2; exit 1; }
	settle "$2"
	kill "$sp"
	wait "$sp" 2>/dev/null || true
	echo "$1|$(cat "$work/peak")" >>"$work/peaks"
	if [ "$1" = cachecastd ]; then
		echo "$1: allocated $((($(metric go_memstats_alloc_bytes_total) - alloc0) / N)) B a SET, $(($(metric go_gc_duration_seconds_count) - gc0)) collections from the load's start to settled"
	fi
	measure "$1" "$2" "$3" loaded
	if [ "$REST" -gt 0 ]; then
		sleep "$REST"
		measure "$1" "$2" "$3" rested
	fi
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $N keys prices:sku-NNNNNNN, $SIZE-byte values, stream $(($(stat -c %s "$work/load.resp") / 1048576)) MiB"
: >"$work/results"
: >"$work/peaks"

mport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./bin/cachecastd --data-dir "$work/data" --socket "$work/cc.sock" --gossip-addr= \
	--metrics-addr "127.0.0.1:$mport" --log-level warn 2>"$work/cachecastd.log" &
ccpid=$!
run cachecastd "$ccpid" "$work/cc-redis.sock"
echo "cachecastd: data dir $(du -sm "$work/data" | cut -f1) MiB, view file $(du -m "$work/cc.view" | cut -f1) MiB on disk"
kill "$ccpid"
wait "$ccpid" || true

redis-server --unixsocket "$work/redis.sock" --port 0 --save "" --appendonly no \
	--daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
rspid=$!
run redis-server "$rspid" "$work/redis.sock"
kill "$rspid"
wait "$rspid" || true

echo "== summary (MB = 10^6 bytes; per key = loaded minus idle, over N; peak: the highest RssAnon sampled from the load's start until settled)"
awk -F'|' -v n="$N" '
	FILENAME == ARGV[1] { peak[$1] = $2 * 1024; next }
	{ k = $1 "|" $2; rss[k] = $3 * 1024; anon[k] = $4 * 1024; file[k] = ($5 + $6) * 1024; used[k] = $7 * 1024 }
	END {
		printf "%-12s %-7s %9s %9s %9s %12s\n", "server", "state", "rss MB", "anon MB", "file MB", "used_mem MB"
		split("cachecastd redis-server", s, " ")
		split("idle loaded rested", st, " ")
		for (i = 1; i <= 2; i++) for (j = 1; j <= 3; j++) {
			k = s[i] "|" st[j]
			if (k in rss)
				printf "%-12s %-7s %9.1f %9.1f %9.1f %12.1f\n", s[i], st[j], rss[k] / 1e6, anon[k] / 1e6, file[k] / 1e6, used[k] / 1e6
		}
		for (j = 2; j <= 3; j++) {
			if (!(("cachecastd|" st[j]) in rss)) continue
			for (i = 1; i <= 2; i++) {
				l = s[i] "|" st[j]; d = s[i] "|idle"
				printf "%s bytes per key, %s: rss %.0f, anon %.0f, file %.0f, used_memory %.0f\n", s[i], st[j],
					(rss[l] - rss[d]) / n, (anon[l] - anon[d]) / n, (file[l] - file[d]) / n, (used[l] - used[d]) / n
			}
			c = "cachecastd|" st[j]; r = "redis-server|" st[j]
			printf "ratio cachecastd / redis-server, %s: rss %.2fx, anon %.2fx (anon / redis rss %.2fx), used_memory %.2fx\n",
				st[j], rss[c] / rss[r], anon[c] / anon[r], anon[c] / rss[r], used[c] / used[r]
		}
		for (i = 1; i <= 2; i++)
			if (s[i] in peak)
				printf "%s anonymous peak, loading: %.1f MB, %.0f B a key\n", s[i], peak[s[i]] / 1e6, (peak[s[i]] - anon[s[i] "|idle"]) / n
		if (("cachecastd" in peak) && ("redis-server|loaded" in rss))
			printf "ratio cachecastd anonymous peak, loading / redis-server rss loaded: %.2fx\n", peak["cachecastd"] / rss["redis-server|loaded"]
	}' "$work/peaks" "$work/results"
