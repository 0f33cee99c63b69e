#!/usr/bin/env bash
# What GET /v1/status costs a node of KEYS keys (default 300,000 of 100 B)
# and what callers looping on it do to a writer on the Redis door. Needs
# redis-tools and curl; run from the repository root:
#   make bench-status          (or: bash test/bench-status.sh)
# BINS="dir1 dir2" measures the cachecastd of each directory in turn, one
# daemon at a time, on the same load (default: ./bin, built first), so that
# a change can be set beside its main. For each: CALLERS loops of curl on
# /v1/status for SECS s with no writes (calls/s, the daemon's CPU a call),
# then a writer alone (redis-benchmark SET -c 1, WRITES requests over the
# loaded keys: p50/p99 ms) and the same writer beside the status loops
# (its p50/p99, their calls/s, the daemon's CPU a call over the writer's
# and the loops' requests both). CALL=/v1/verify loops on GET /v1/verify
# instead (a lone node: its own digest alone).
set -euo pipefail
KEYS=${KEYS:-300000}
SECS=${SECS:-10}
CALLERS=${CALLERS:-2}
WRITES=${WRITES:-20000}
CALL=${CALL:-/v1/status}
. "$(dirname "$0")/benchlib.sh"
bench_workdir status
command -v redis-benchmark >/dev/null && command -v curl >/dev/null || {
	echo "install redis-tools and curl first" >&2
	exit 1
}
bench_bins
# start SECONDS: CALLERS curls, each calling $CALL on one connection
# until SECONDS pass or it is killed, its answers into calls.N; their
# pids in $callers.
start() {
	callers=()
	for i in $(seq "$CALLERS"); do
		timeout "$1" curl -s --unix-socket "$work/cc.sock" "http://x$CALL?[1-100000000]" >"$work/calls.$i" &
		callers+=($!)
	done
}
calls() { cat "$work"/calls.* | grep -o '"uptime_seconds"\|"identical"' | wc -l; }
writer() { # prints "p50 p99" of WRITES SETs, one at a time
	redis-benchmark -s "$work/cc-redis.sock" -t set -n "$WRITES" -c 1 -r "$KEYS" -d 100 2>/dev/null | tr '\r' '\n' |
		awk '/latency summary/ {getline; getline; print $3, $5; exit}'
}
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for bin in $BINS; do
	rm -rf "$work/data" "$work"/calls.*
	"$bin/cachecastd" --data-dir "$work/data" --socket "$work/cc.sock" --gossip-addr= \
		--flush async --log-level warn 2>"$work/cachecastd.log" &
	pid=$!
	for _ in $(seq 100); do [ -S "$work/cc-redis.sock" ] && break; sleep 0.1; done
	awk -v n="$KEYS" 'BEGIN { v = sprintf("%0100d", 7); for (i = 0; i < n; i++) { k = sprintf("prices:sku-%07d", i); printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n", length(k), k, v } }' |
		redis-cli -s "$work/cc-redis.sock" --pipe >/dev/null
	c0=$(cpu "$pid")
	start "$SECS"
	wait "${callers[@]}" || true
	c1=$(cpu "$pid")
	n=$(calls)
	echo "$bin: $KEYS keys, $CALLERS $CALL loops, no writes: $((n / SECS)) calls/s, daemon CPU $(((c1 - c0) / (n + 1) / 1000)) µs a call"
	read -r p50 p99 <<<"$(writer)"
	echo "$bin: writer alone: SET p50 $p50 ms, p99 $p99 ms"
	rm -f "$work"/calls.*
	c0=$(cpu "$pid")
	t0=$(date +%s.%N)
	start 600
	read -r p50 p99 <<<"$(writer)"
	t1=$(date +%s.%N)
	c1=$(cpu "$pid")
	kill "${callers[@]}"
	wait "${callers[@]}" 2>/dev/null || true
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
	echo "$bin: writer beside $CALLERS $CALL loops: SET p50 $p50 ms, p99 $p99 ms; $(calls) calls in $secs s; daemon CPU $(((c1 - c0) / 1000000)) ms for the $WRITES SETs and the calls"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
