#!/usr/bin/env bash
# Runs SkyWalking Satellite's mmap-queue benchmarks (BenchmarkEnqueue and
# BenchmarkEnqueueAndDequeue, plugins/queue/mmap) alternately with the store's
# BenchmarkAppend and BenchmarkAppendRead in the same five configurations, on
# the same file systems (the disk and a tmpfs), ROUNDS rounds, and prints the
# ratio table of BENCHMARKS.md (test/benchsatellite parses the output); and
# the default-segment 8 KB append beside BenchmarkMapCopyProbe, a plain copy
# into fresh mappings with the async flusher's msync cadence.
# Satellite is a local copy of its public repository, outside this module and
# never vendored into it; it is built in its own directory with its own go.mod.
# Run from the repository root (not in CI):
#   make bench-satellite SATELLITE_DIR=/path/to/skywalking-satellite
set -euo pipefail
GO=${GO:-go}
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-1s}
SATELLITE_DIR=${SATELLITE_DIR:-}
DISK_DIR=${DISK_DIR:-${TMPDIR:-/tmp}} # a directory on the disk's file system
TMPFS_DIR=${TMPFS_DIR:-/dev/shm}      # a directory on a tmpfs

if [ -z "$SATELLITE_DIR" ] || [ ! -f "$SATELLITE_DIR/go.mod" ] || [ ! -d "$SATELLITE_DIR/plugins/queue/mmap" ]; then
	cat >&2 <<MSG
bench-satellite: SATELLITE_DIR=${SATELLITE_DIR:-(unset)} is not a copy of SkyWalking Satellite's repository
(it needs go.mod and plugins/queue/mmap). Get one outside this module and point at it:
  git clone https://github.com/apache/skywalking-satellite /tmp/skywalking-satellite
  make bench-satellite SATELLITE_DIR=/tmp/skywalking-satellite
MSG
	exit 2
fi
for d in "$DISK_DIR" "$TMPFS_DIR"; do
	[ -d "$d" ] && [ -w "$d" ] || { echo "bench-satellite: $d is not a writable directory" >&2; exit 2; }
done
[ "$(stat -f -c %T "$TMPFS_DIR")" = tmpfs ] || { echo "bench-satellite: TMPFS_DIR=$TMPFS_DIR is not on a tmpfs" >&2; exit 2; }
disk_fs=$(stat -f -c %T "$DISK_DIR")
[ "$disk_fs" != tmpfs ] || { echo "bench-satellite: DISK_DIR=$DISK_DIR is on a tmpfs; name a directory on the disk" >&2; exit 2; }
[ "$disk_fs" != ext2/ext3 ] || disk_fs=ext4 # stat names ext4 by its magic number, shared with ext2/3

root=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-satellite.XXXXXX")
raw=${RAW:-$work/raw.txt}
trap 'rm -rf "$work/bin"' EXIT
mkdir -p "$work/bin"

echo "== building the store's and Satellite's benchmark binaries" >&2
"$GO" test -c -o "$work/bin/store.test" ./store/
(cd "$SATELLITE_DIR" && GOFLAGS=-mod=mod "$GO" test -c -o "$work/bin/satellite.test" ./plugins/queue/mmap)
satellite_rev=$(git -C "$SATELLITE_DIR" log -1 --format='%h %cs' 2>/dev/null || echo unknown)

# The five configurations of Satellite's table (its sixth, queueCapacity
# 100000, only changes a bound that none of these runs reach).
sat_bench='/queueCapacity:10000$'
# `go test -bench` matches each level of a sub-benchmark's name on its own:
# of the store's cases these levels select exactly the same five.
our_bench='/^size=(8|16)KB$/^segment=(128|256|512)KB$/^mapped=(18|10|6|20)$'

# create WHEN: the cost of one file creation in the run's directory now
# (200 of them), which the small-segment cells of both queues pay every
# 15-16 records; printed after the tables.
create() {
	echo "# create=$1"
	CACHECAST_BENCH_DIR=$dir "$work/bin/store.test" -test.run '^$' -test.bench '^BenchmarkCreateFile$' -test.benchtime 200x | grep '^Benchmark'
}

# run FS DIR: one alternated pass of the four benchmarks in a fresh
# directory on DIR. Satellite's queue lives in the working directory.
run() {
	local fs=$1 dir
	dir=$(mktemp -d "$2/bench-satellite-run.XXXXXX")
	create before-satellite
	(cd "$dir" && "$work/bin/satellite.test" -test.run '^$' -test.bench "^BenchmarkEnqueue\$$sat_bench" -test.benchtime "$BENCHTIME" -test.benchmem 2>/dev/null) | grep '^Benchmark' || true
	create before-ours
	CACHECAST_BENCH_DIR=$dir "$work/bin/store.test" -test.run '^$' -test.bench "^BenchmarkAppend\$$our_bench" -test.benchtime "$BENCHTIME" -test.benchmem | grep '^Benchmark'
	(cd "$dir" && "$work/bin/satellite.test" -test.run '^$' -test.bench "^BenchmarkEnqueueAndDequeue\$$sat_bench" -test.benchtime "$BENCHTIME" -test.benchmem 2>/dev/null) | grep '^Benchmark' || true
	CACHECAST_BENCH_DIR=$dir "$work/bin/store.test" -test.run '^$' -test.bench "^BenchmarkAppendRead\$$our_bench" -test.benchtime "$BENCHTIME" -test.benchmem | grep '^Benchmark'
	# Default segments, 8 KB: the store against a plain copy into fresh mappings.
	CACHECAST_BENCH_DIR=$dir "$work/bin/store.test" -test.run '^$' -test.bench '^BenchmarkMapCopyProbe$' -test.benchtime "$BENCHTIME" -test.benchmem | grep '^Benchmark'
	CACHECAST_BENCH_DIR=$dir "$work/bin/store.test" -test.run '^$' -test.bench '^BenchmarkAppend$/^size=8KB$/^segment=64MB$' -test.benchtime "$BENCHTIME" -test.benchmem | grep '^Benchmark'
	rm -rf "$dir"
}

{
	echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r), $("$GO" version | cut -d' ' -f3), $(date -u +%FT%TZ)"
	echo "# satellite: $satellite_rev; disk: $DISK_DIR ($disk_fs); tmpfs: $TMPFS_DIR; benchtime $BENCHTIME"
	for round in $(seq "$ROUNDS"); do
		for fs in disk tmpfs; do
			if [ $fs = disk ]; then name=$disk_fs dir=$DISK_DIR; else name=tmpfs dir=$TMPFS_DIR; fi
			echo "== round $round/$ROUNDS, $name" >&2
			echo "# fs=$name round=$round"
			run "$name" "$dir"
		done
	done
} >"$raw"

cd "$root"
grep '^# [ms]' "$raw"
"$GO" run ./test/benchsatellite <"$raw"
echo
echo "file creation (BenchmarkCreateFile, 200 creates), µs each, by round: before Satellite's enqueue cells / before ours' append cells"
awk '/^# fs=/ {split($2, a, "="); fs = a[2]} /^# create=/ {split($2, a, "="); at = a[2]}
	/^BenchmarkCreateFile/ {v[fs] = v[fs] sprintf(" %s %.0f", (at == "before-ours" ? "/" : (v[fs] == "" ? "" : ",")), $3 / 1000)}
	END {for (f in v) printf "  %s:%s\n", f, v[f]}' "$raw"
echo
echo "raw output: $raw"
