# What the daemon benchmark scripts share (bench-gc.sh, bench-status.sh,
# bench-time.sh source it); not run by itself.

# cpu PID: the CPU time the process's threads have run, in ns
# (/proc/PID/task/*/schedstat, first field).
cpu() { cat /proc/"$1"/task/*/schedstat | awk '{ns += $1} END {printf "%.0f", ns}'; }

# bench_workdir NAME: makes the scripts' work directory (/tmp/cc-NAME.*) in
# $work, and an EXIT trap that kills the jobs left and removes it.
bench_workdir() {
	work=$(mktemp -d "/tmp/cc-$1.XXXXXX")
	trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
}

# bench_bins: BINS, the directories whose cachecastd to measure; ./bin,
# built first, when it is not set.
bench_bins() {
	if [ -z "${BINS:-}" ]; then
		make -s build
		BINS=./bin
	fi
}
