#!/usr/bin/env bash
# Runs `cachecast bench` against a local cachecastd and redis-benchmark against
# a local redis-server, both over Unix sockets, in one session, so that the
# figures can be set side by side (BENCHMARKS.md). Needs redis-server and
# redis-tools (Debian packages); run from the repository root:
#   make bench-daemon          (or: bash test/bench-vs-redis.sh)
# REDIS_ONLY=1 (make bench-redis) runs only the Redis front door's section;
# ROUNDS=n repeats it n times, alternating the servers.
set -euo pipefail
N=${N:-200000}
SIZE=${SIZE:-100}
work=$(mktemp -d /tmp/cc-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
	echo "install redis-server and redis-tools first (apt-get install redis-server redis-tools)" >&2
	exit 1
}
make -s build

./bin/cachecastd --data-dir "$work/data" --socket "$work/cc.sock" --gossip-addr= \
	--flush async --log-level warn --max-connections 4096 2>"$work/cachecastd.log" &
ccpid=$!
redis-server --unixsocket "$work/redis.sock" --port 0 --save "" --appendonly no \
	--daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
rspid=$!
for _ in $(seq 100); do [ -S "$work/cc.sock" ] && [ -S "$work/cc-redis.sock" ] && [ -S "$work/redis.sock" ] && break; sleep 0.1; done

cc() { ./bin/cachecast --socket "$work/cc.sock" bench --size "$SIZE" --keys 10000 "$@" 2>/dev/null; }
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
# rbs PID SOCKET OPTIONS... prints each test's requests per second and the
# server's CPU time per request (user + system, from /proc/PID/stat): on a
# shared machine the rate moves with the others' load, the CPU per request
# much less.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick=$(getconf CLK_TCK)
rb1() {
	pid=$1
	shift
	c0=$(cpu "$pid")
	out=$(redis-benchmark "$@" | tr "\r" "\n" | grep "per second")
	c1=$(cpu "$pid")
	echo "$out, server CPU $(((c1 - c0) * 1000000 / tick * 1000 / N)) ns/request"
}
rbs() {
	pid=$1 sock=$2
	shift 2
	for t in set get; do
		rb1 "$pid" -s "$sock" -d "$SIZE" -r 10000 -q "$@" -t $t
	done
	# shellcheck disable=SC2086
	rb1 "$pid" -s "$sock" -d "$SIZE" -r 10000 -q "$@" $MGET | sed 's/^MGET .*__: /MGET (10 keys): /'
}
redis-benchmark -s "$work/cc-redis.sock" -d "$SIZE" -r 10000 -n 100000 -q -t set >/dev/null
redis-benchmark -s "$work/redis.sock" -d "$SIZE" -r 10000 -n 100000 -q -t set >/dev/null
for round in $(seq "${ROUNDS:-1}"); do
	for opts in "-c 1" "-c 50" "-c 50 -P 16"; do
		# shellcheck disable=SC2086
		echo "== round $round, cachecast's Redis socket, $opts"; rbs "$ccpid" "$work/cc-redis.sock" -n "$N" $opts
		# shellcheck disable=SC2086
		echo "== round $round, redis-server, $opts";             rbs "$rspid" "$work/redis.sock" -n "$N" $opts
	done
done
