#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (go test allows one
# -fuzz target per run), FUZZJOBS at a time (default 2: on two cores a
# pair's coordinators, builds and corpus loading overlap the other's
# fuzzing, where one at a time leaves a core idle through them). The
# targets are the func FuzzX(f *testing.F) of each package's test files,
# found by reading them rather than by `go test -list`, which would build
# and link every package's test binary first.
#
# Go 1.26's fuzz coordinator can report a bare "context deadline exceeded"
# when -fuzztime ends while a worker is mid-input (go.dev/issue/75804,
# fixed in Go 1.27): no input failed, none was written. Such a run is
# retried once; any other failure, and any run that writes a failing
# input, fails the pass.
set -uo pipefail
FUZZTIME=${FUZZTIME:-5s}
FUZZJOBS=${FUZZJOBS:-2}
GO=${GO:-go}
export FUZZTIME GO

# fuzz_one PKG TARGET runs one target, retrying the deadline race once, and
# prints its output in one piece (the jobs run side by side).
fuzz_one() {
	local pkg=$1 t=$2 out rc try
	for try in 1 2; do
		out=$($GO test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s "$pkg" 2>&1)
		rc=$?
		if [ $rc -eq 0 ]; then
			printf 'fuzz %s %s\n%s\n' "$pkg" "$t" "$(echo "$out" | tail -3)"
			return 0
		fi
		if [ $try -eq 1 ] && echo "$out" | grep -q 'context deadline exceeded' &&
			! echo "$out" | grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:'; then
			printf 'fuzz %s %s: the Go 1.26 fuzztime deadline race (go.dev/issue/75804), no failing input; running it again\n' "$pkg" "$t"
			continue
		fi
		printf 'fuzz %s %s FAILED\n%s\n' "$pkg" "$t" "$out"
		return 1
	done
}
export -f fuzz_one

# One line per target: the package's import path and the target's name.
targets() {
	$GO list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./... |
		while read -r pkg dir files; do
			[ -n "$files" ] || continue
			(cd "$dir" && sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(f \*testing\.F\).*/\1/p' $files) |
				while read -r t; do echo "$pkg $t"; done
		done
}

list=$(targets) || exit 1
[ -n "$list" ] || { echo "run-fuzz: no fuzz targets found" >&2; exit 1; }
echo "$list" | xargs -P "$FUZZJOBS" -L 1 bash -c 'fuzz_one "$0" "$1"'
