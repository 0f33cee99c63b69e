#!/usr/bin/env bash
# The Go collector under pipelined SETs over a large view (issue 34;
# BENCHMARKS.md, "The collector's headroom"): how much the heap may hold
# beyond its live bytes, how often the collector runs, and the daemon's CPU
# a SET. Needs redis-tools; run from the repository root:
#   make bench-gc              (or: bash test/bench-gc.sh)
# BINS="dir1 dir2" measures the cachecastd of each directory (default: ./bin,
# built first); GOGCS="- 100 50" runs each once per value, "-" with no GOGC
# in the environment (the daemon's own rule), a number with GOGC set (which
# the daemon leaves to the runtime); ROUNDS repeats the whole, builds taking
# turns. Each run starts a daemon (--gossip-addr=, async flush, GODEBUG=
# gctrace=1), loads KEYS keys with LOADN pipelined SETs (redis-benchmark -c 50
# -P 16 -d 100 -r KEYS: key:NNNNNNNNNNNN, most keys of the range written),
# then measures MEASN more SETs over the same keys: the collections that
# ran during them a million SETs, the live heap and heap goal of the last
# one, the daemon's CPU a SET (/proc/PID/task/*/schedstat), and its
# anonymous resident memory after them (RssAnon) a key.
set -euo pipefail
KEYS=${KEYS:-1000000}
LOADN=${LOADN:-3000000}
MEASN=${MEASN:-6000000}
GOGCS=${GOGCS:--}
. "$(dirname "$0")/benchlib.sh"
bench_workdir gc
command -v redis-benchmark >/dev/null || {
	echo "install redis-tools first" >&2
	exit 1
}
bench_bins
anon() { awk '$1 == "RssAnon:" { print $2 }' "/proc/$1/status"; }
sets() { redis-benchmark -s "$work/d/cc-redis.sock" -t set -n "$1" -r "$KEYS" -d 100 -P 16 -c 50 -q 2>/dev/null | tr '\r' '\n' | grep 'per second' | tail -1 | awk '{ print $2 }'; }
# run DIR GOGC: one daemon, loaded, then measured; one line.
run() {
	local envs=(GODEBUG=gctrace=1) pid keys l0 c0 c1 rate
	[ "$2" = - ] || envs+=(GOGC="$2")
	rm -rf "$work/d"
	mkdir -p "$work/d"
	env "${envs[@]}" "$1/cachecastd" --data-dir "$work/d/data" --socket "$work/d/cc.sock" --gossip-addr= \
		--flush async --log-level warn 2>"$work/d/log" &
	pid=$!
	for _ in $(seq 300); do
		[ -S "$work/d/cc-redis.sock" ] && break
		sleep 0.1
	done
	sets "$LOADN" >/dev/null
	keys=$(redis-cli -s "$work/d/cc-redis.sock" dbsize)
	l0=$(grep -c '^gc ' "$work/d/log" || true)
	c0=$(cpu "$pid")
	rate=$(sets "$MEASN")
	c1=$(cpu "$pid")
	# gc N @t s P%: clock, cpu, A->B->C MB (C: marked live), G MB goal, ...
	grep '^gc ' "$work/d/log" | tail -n +$((l0 + 1)) | awk -v what="$1 GOGC=$2" -v n="$MEASN" -v keys="$keys" \
		-v cpu=$((c1 - c0)) -v anon="$(anon "$pid")" -v rate="$rate" '
		{ for (i = 1; i <= NF; i++) { if ($i == "MB," && $(i - 1) ~ /->/) { split($(i - 1), h, "->"); live = h[3] } if ($i == "goal,") goal = $(i - 2) } cycles++ }
		END { printf "%-24s %7d keys  %8.0f SET/s  %4.1f collections a million SETs  live %4d MB  goal %4d MB  daemon %5.0f ns a SET  anon %4.0f MB (%3.0f B a key)\n",
			what, keys, rate, cycles * 1e6 / n, live, goal, cpu / n, anon / 1024, anon * 1024 / keys }'
	kill "$pid"
	wait "$pid" || true
}
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "${ROUNDS:-1}"); do
	echo "== round $round"
	for b in $BINS; do
		for g in $GOGCS; do
			run "$b" "$g"
		done
	done
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
