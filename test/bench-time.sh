#!/usr/bin/env bash
# The publish rate with time fields against without, through the doors users
# use (issue 15; BENCHMARKS.md, "Time: expiry, schedules, the flip"), 100-byte
# values over 10,000 keys, each kind on a topic of its own:
#   redis  redis-benchmark on cachecastd's Redis door: SET key val (plain),
#          SET key val PX 3600000 (ttl), SET key val EFFECTIVEAT <one instant
#          six hours ahead> (sale);
#   http   cachecast bench (PUT over the HTTP socket): plain, --expires-in 1h
#          (ttl), --effective-at <the same instant> (sale).
# Every key is written once, plain, before the rounds, so each run writes keys
# again; a sale's key has its value in force and each scheduled write replaces
# its pending value for the one instant: a price feed's steady state. Each
# round runs every case once, the kinds in a turned order each round; each run
# prints requests/s and cachecastd's CPU a request (its threads' run time from
# /proc/PID/task/*/schedstat, as bench-vs-redis.sh measures it), and the
# results go to $OUT in benchstat's format, so that
#   benchstat -col /kind -filter '.unit:cpu-ns/op' "$OUT"
# gives each kind against plain with its p-value (-col /view for VIEW_DIRS).
# Needs redis-tools (redis-benchmark); from the repository root:
#   bash test/bench-time.sh
# N (200000) requests a Redis run, HTTP_N (N/4: a PUT costs ~10 SETs), ROUNDS (6), DOORS ("redis http"), OPTS ("1 16":
# redis-benchmark -P 1 and -P 16 with its 50 connections; cachecast bench
# --conns 1 and 16), KINDS ("plain ttl sale"), OUT (bench-time.txt).
# VIEW_DIRS (/dev/shm, a tmpfs as the systemd unit's /run) is where the shared
# view file lies; with two or more, one cachecastd each, taking turns, e.g. the
# A/B of tmpfs against ext4:
#   env VIEW_DIRS="/tmp /dev/shm" DOORS=redis OPTS=16 KINDS=plain bash test/bench-time.sh
# BINS (bin/cachecastd) likewise runs one cachecastd a binary (named by its
# directory: build=bin, build=base...), for old against new (-col /build).
set -euo pipefail
N=${N:-200000}
HTTP_N=${HTTP_N:-$((N / 4))}
OUT=${OUT:-bench-time.txt}
work=$(mktemp -d /tmp/cc-time.XXXXXX)
views=()
cleanup() {
	kill $(jobs -p) 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work" "${views[@]}"
}
trap cleanup EXIT
command -v redis-benchmark >/dev/null || {
	echo "install redis-tools first (apt-get install redis-tools)" >&2
	exit 1
}
make -s build

# One cachecastd a binary and view directory: sockets $work/N.sock and
# $work/N-redis.sock.
dirs=() bins=() pids=()
for b in ${BINS:-bin/cachecastd}; do
	for d in ${VIEW_DIRS:-/dev/shm}; do
		dirs+=("$d") bins+=("$b")
	done
done
for i in "${!dirs[@]}"; do
	views+=("$(mktemp -d "${dirs[$i]}/cc-time-view.XXXXXX")")
	"${bins[$i]}" --data-dir "$work/data$i" --socket "$work/$i.sock" --view-file "${views[$i]}/cc.view" \
		--gossip-addr= --flush async --log-level warn --max-connections 4096 2>"$work/cachecastd$i.log" &
	pids+=($!)
	for _ in $(seq 100); do
		[ -S "$work/$i.sock" ] && [ -S "$work/$i-redis.sock" ] && break
		sleep 0.1
	done
done

value=$(printf 'v%.0s' $(seq 100))
at=$(($(date +%s%3N) + 6 * 3600 * 1000)) # one instant for every scheduled write
. "$(dirname "$0")/benchlib.sh" # cpu

# run I DOOR OPT KIND: one run on cachecastd I; prints the figures and adds
# the benchstat line.
run() {
	i=$1 door=$2 opt=$3 kind=$4 n=$N
	[ "$door" = redis ] || n=$HTTP_N
	c0=$(cpu "${pids[$i]}")
	if [ "$door" = redis ]; then
		args=(SET "$kind:__rand_int__" "$value")
		[ "$kind" = ttl ] && args+=(PX 3600000)
		[ "$kind" = sale ] && args+=(EFFECTIVEAT "$at")
		rate=$(redis-benchmark -s "$work/$i-redis.sock" -r 10000 -n "$N" -P "$opt" -q "${args[@]}" |
			tr "\r" "\n" | grep "per second" | sed 's/.*: \([0-9.]*\) requests per second.*/\1/')
	else
		args=(--topic "h$kind")
		[ "$kind" = ttl ] && args+=(--expires-in 1h)
		[ "$kind" = sale ] && args+=(--effective-at "$at")
		rate=$(./bin/cachecast --socket "$work/$i.sock" bench --size 100 --keys 10000 --count "$n" --conns "$opt" \
			--json "${args[@]}" 2>/dev/null | sed 's/.*"msgs_per_sec":\([0-9.]*\).*/\1/')
	fi
	ns=$((($(cpu "${pids[$i]}") - c0) / n))
	view=$(basename "${dirs[$i]}") build=$(basename "$(dirname "${bins[$i]}")")
	echo "build=$build view=${dirs[$i]} $door opts=$opt $kind: $rate requests/s, cachecastd CPU $ns ns/request"
	echo "BenchmarkDoor/door=$door/opts=$opt/build=$build/view=$view/kind=$kind 1 $ns cpu-ns/op $rate req/s" >>"$OUT"
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in "${!dirs[@]}"; do
	for kind in ${KINDS:-plain ttl sale}; do
		redis-benchmark -s "$work/$i-redis.sock" -r 10000 -n 100000 -q SET "$kind:__rand_int__" "$value" >/dev/null
		./bin/cachecast --socket "$work/$i.sock" bench --size 100 --keys 10000 --count 10000 --batch 1000 --topic "h$kind" >/dev/null
	done
done
: >"$OUT"
kinds=(${KINDS:-plain ttl sale})
for round in $(seq "${ROUNDS:-6}"); do
	echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
	for door in ${DOORS:-redis http}; do
		for opt in ${OPTS:-1 16}; do
			for k in "${!kinds[@]}"; do
				kind=${kinds[$(((k + round) % ${#kinds[@]}))]}
				for j in "${!dirs[@]}"; do
					i=$(((j + round) % ${#dirs[@]}))
					run "$i" "$door" "$opt" "$kind"
				done
			done
		done
	done
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"
