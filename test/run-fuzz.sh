#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (go test allows one
# -fuzz target per run). Go 1.26's fuzz coordinator can report a bare
# "context deadline exceeded" when -fuzztime ends while a worker is mid-input
# (go.dev/issue/75804, fixed in Go 1.27): no input failed, none was written.
# Such a run is retried once; any other failure, and any run that writes a
# failing input, fails at once.
set -uo pipefail
FUZZTIME=${FUZZTIME:-8s}
GO=${GO:-go}
status=0
for pkg in $($GO list ./...); do
	for t in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		for try in 1 2; do
			echo "fuzz $pkg $t"
			out=$($GO test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s "$pkg" 2>&1)
			rc=$?
			echo "$out" | tail -3
			if [ $rc -eq 0 ]; then
				break
			fi
			if [ $try -eq 1 ] && echo "$out" | grep -q 'context deadline exceeded' &&
				! echo "$out" | grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:'; then
				echo "fuzz $t: the Go 1.26 fuzztime deadline race (go.dev/issue/75804), no failing input; running it again"
				continue
			fi
			echo "$out"
			status=1
			break
		done
	done
done
exit $status
