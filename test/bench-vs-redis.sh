#!/usr/bin/env bash
# Runs `cachecast bench` against a local cachecastd and redis-benchmark against
# a local redis-server, both over Unix sockets, in one session, so that the
# figures can be set side by side (BENCHMARKS.md). Needs redis-server and
# redis-tools (Debian packages); run from the repository root:
#   make bench-daemon          (or: bash test/bench-vs-redis.sh)
# REDIS_ONLY=1 (make bench-redis) runs only the Redis front door's section;
# ROUNDS=n repeats it n times, alternating the servers. PIN=1 runs that section
# a second time on a second pair of servers, both pinned (taskset) to CPU 0 and
# redis-benchmark to CPU 1, so that each server has exactly one core, as
# redis-server uses one; the summary prints the pinned ratios beside the
# unpinned ones. TESTS (default "GET SET MGET") and OPTS (default "1 50 50P16":
# -c 1, -c 50, -c 50 -P 16) restrict that section, e.g.
#   env REDIS_ONLY=1 TESTS=GET OPTS="1 50" ROUNDS=5 PIN=1 bash test/bench-vs-redis.sh
# NOBUILD=1 runs the binaries in BIN (default ./bin) as they are, so that
# builds can take turns (each built into a directory of its own).
set -euo pipefail
N=${N:-200000}
SIZE=${SIZE:-100}
work=$(mktemp -d /tmp/cc-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
	echo "install redis-server and redis-tools first (apt-get install redis-server redis-tools)" >&2
	exit 1
}
BIN=${BIN:-./bin}
[ -x "$BIN/cachecastd" ] && [ -n "${NOBUILD:-}" ] || make -s build BIN="$BIN"

"$BIN"/cachecastd --data-dir "$work/data" --socket "$work/cc.sock" --gossip-addr= \
	--flush async --log-level warn --max-connections 4096 2>"$work/cachecastd.log" &
ccpid=$!
redis-server --unixsocket "$work/redis.sock" --port 0 --save "" --appendonly no \
	--daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
rspid=$!
if [ -n "${PIN:-}" ]; then
	[ "$(nproc)" -ge 2 ] || { echo "PIN=1 needs 2 CPUs" >&2; exit 1; }
	taskset -c 0 "$BIN"/cachecastd --data-dir "$work/pdata" --socket "$work/pcc.sock" --gossip-addr= \
		--flush async --log-level warn --max-connections 4096 2>"$work/pcachecastd.log" &
	pccpid=$!
	taskset -c 0 redis-server --unixsocket "$work/predis.sock" --port 0 --save "" --appendonly no \
		--daemonize no --loglevel warning >"$work/predis.log" 2>&1 &
	prspid=$!
fi
for _ in $(seq 100); do
	[ -S "$work/cc.sock" ] && [ -S "$work/cc-redis.sock" ] && [ -S "$work/redis.sock" ] &&
		{ [ -z "${PIN:-}" ] || { [ -S "$work/pcc-redis.sock" ] && [ -S "$work/predis.sock" ]; }; } && break
	sleep 0.1
done

cc() { "$BIN"/cachecast --socket "$work/cc.sock" bench --size "$SIZE" --keys 10000 "$@" 2>/dev/null; }
rb() { redis-benchmark -s "$work/redis.sock" -d "$SIZE" -r 10000 -q "$@" | tr "\r" "\n" | grep "per second"; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${REDIS_ONLY:-}" ]; then
echo "== cachecast, unbatched PUT, 1 connection";   cc --count "$N" --conns 1
echo "== cachecast, unbatched PUT, 16 connections"; cc --count "$N" --conns 16
echo "== cachecast, batches of 1000, 4 connections"; cc --count $((N * 10)) --conns 4 --batch 1000
echo "== cachecast, GET, 1 connection";   cc --count "$N" --conns 1 --mode get
echo "== cachecast, GET, 16 connections"; cc --count "$N" --conns 16 --mode get
echo "== redis, SET and GET, 1 connection, no pipelining";   rb -t set,get -n "$N" -c 1
echo "== redis, SET and GET, 16 connections, no pipelining"; rb -t set,get -n "$N" -c 16
echo "== redis, SET, pipelined 1000, 4 connections";        rb -t set -n $((N * 10)) -c 4 -P 1000
fi

# The Redis front door against redis-server, redis-benchmark on both sockets in
# turn: GET, SET and MGET (10 keys) of 100-byte values over 10,000 keys
# (key:__rand_int__ is topic "key" here), 1 connection, 50, and 50 pipelining 16.
# The keys are written first so that GET and MGET hit.
MGET="MGET$(printf ' key:__rand_int__%.0s' $(seq 10))"
# rb1 VARIANT SERVER PID TEST OPTS redis-benchmark-ARGS... prints the test's
# requests per second, the server's CPU time per request (the time its
# threads ran, in ns, from /proc/PID/task/*/schedstat) and its threads'
# switches onto a CPU per request (the same file's third field): on a shared
# machine the rate moves with the others' load, the two counts much less.
# Each result is kept for the summary.
cpu() { cat /proc/"$1"/task/*/schedstat | awk '{ns += $1; sw += $3} END {printf "%.0f %.0f", ns, sw}'; }
bench=(redis-benchmark)
rb1() {
	variant=$1 server=$2 pid=$3 test=$4 opts=$5
	shift 5
	read -r c0 s0 <<<"$(cpu "$pid")"
	out=$("${bench[@]}" "$@" | tr "\r" "\n" | grep "per second" | sed 's/^MGET .*__: /MGET (10 keys): /')
	read -r c1 s1 <<<"$(cpu "$pid")"
	ns=$(((c1 - c0) / N))
	sw=$(awk -v a="$s0" -v b="$s1" -v n="$N" 'BEGIN {printf "%.2f", (b - a) / n}')
	echo "$server $out, server CPU $ns ns/request, $sw switches/request"
	rate=$(echo "$out" | sed 's/.*: \([0-9.]*\) requests per second.*/\1/')
	echo "$variant|$test|$opts|$server|$rate|$ns|$sw" >>"$work/results"
}
# rounds VARIANT CC_PID CC_SOCKET REDIS_PID REDIS_SOCKET: each test runs on
# the two servers back to back, cachecast first in odd rounds and
# redis-server first in even ones, so that a change of the machine's load
# between the two runs of a pair does not always favour the same server.
rounds() {
	variant=$1
	redis-benchmark -s "$3" -d "$SIZE" -r 10000 -n 100000 -q -t set >/dev/null
	redis-benchmark -s "$5" -d "$SIZE" -r 10000 -n 100000 -q -t set >/dev/null
	for round in $(seq "${ROUNDS:-1}"); do
		for o in ${OPTS:-1 50 50P16}; do
			opts="-c ${o%%P*}"
			[ "$o" = "${o#*P}" ] || opts="$opts -P ${o#*P}"
			echo "== $variant, round $round, $opts"
			for t in ${TESTS:-GET SET MGET}; do
				[ "$t" = MGET ] && t="MGET (10 keys)"
				args=(-t "${t,,}")
				# shellcheck disable=SC2206
				[ "$t" = GET ] || [ "$t" = SET ] || args=($MGET)
				pair=("cachecast $2 $3" "redis $4 $5")
				[ $((round % 2)) = 1 ] || pair=("${pair[1]}" "${pair[0]}")
				for p in "${pair[@]}"; do
					read -r server pid sock <<<"$p"
					# shellcheck disable=SC2086
					rb1 "$variant" "$server" "$pid" "$t" "$opts" -s "$sock" -d "$SIZE" -r 10000 -q -n "$N" $opts "${args[@]}"
				done
			done
		done
	done
}
: >"$work/results"
rounds unpinned "$ccpid" "$work/cc-redis.sock" "$rspid" "$work/redis.sock"
if [ -n "${PIN:-}" ]; then
	bench=(taskset -c 1 redis-benchmark)
	rounds pinned "$pccpid" "$work/pcc-redis.sock" "$prspid" "$work/predis.sock"
fi
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The summary: per command and options, the median over the rounds of
# cachecast / redis-server (requests per second of the same round), and
# each server's median CPU time per request in µs and its median switches
# onto a CPU per request.
echo "== summary: cachecast / redis-server, median of ${ROUNDS:-1} round(s); CPU µs and switches per request cachecast / redis-server"
awk -F'|' -v pin="${PIN:-}" '
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	k = $1 SUBSEP $2 SUBSEP $3
	n[k, $4]++
	rate[k, $4, n[k, $4]] = $5
	cpu[k, $4] = cpu[k, $4] " " $6 / 1000
	sw[k, $4] = sw[k, $4] " " $7
	if (!(($2 SUBSEP $3) in seen)) { seen[$2 SUBSEP $3] = 1; order[++rows] = $2 SUBSEP $3 }
}
END {
	head = "| command | options | unpinned: ratio | CPU µs | switches"
	if (pin) head = head " | pinned, one core each: ratio | CPU µs | switches"
	print head " |"
	print pin ? "|---|---|---|---|---|---|---|---|" : "|---|---|---|---|---|"
	for (r = 1; r <= rows; r++) {
		split(order[r], p, SUBSEP)
		line = "| " p[1] " | " p[2]
		nv = pin ? 2 : 1
		for (v = 1; v <= nv; v++) {
			variant = v == 1 ? "unpinned" : "pinned"
			k = variant SUBSEP order[r]
			ratios = ""
			for (i = 1; i <= n[k, "cachecast"]; i++) ratios = ratios " " rate[k, "cachecast", i] / rate[k, "redis", i]
			line = line sprintf(" | %.2f | %.1f / %.1f | %.2f / %.2f", median(ratios), median(cpu[k, "cachecast"]), median(cpu[k, "redis"]), median(sw[k, "cachecast"]), median(sw[k, "redis"]))
		}
		print line " |"
	}
}' "$work/results"
