#!/usr/bin/env bash
# Resident memory of a cachecastd (default flags, no cluster) before, at the
# peak of, and 10 s after eight concurrent 60 MB NDJSON batches that are all
# refused (the last line is not JSON), as in issue 13 (BENCHMARKS.md). Needs
# curl; run as root (resetting the peak, /proc/PID/clear_refs, needs to own
# the process) from the repository root:
#   bash test/bench-body-memory.sh [path/to/cachecastd]
set -euo pipefail
bin=${1:-./bin/cachecastd}
[ "$#" -gt 0 ] || make -s build
work=$(mktemp -d /tmp/cc-bodymem.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
sock=$work/cc.sock

python3 -c '
import sys
line = "{\"key\":\"k\",\"value\":\"" + "v" * 1000 + "\"}\n"
sys.stdout.write(line * (60_000_000 // len(line)) + "{\"key\":\n")' >"$work/batch.ndjson"

"$bin" --data-dir "$work/data" --socket "$sock" --gossip-addr= --log-level warn 2>"$work/log" &
pid=$!
until curl -sf --unix-socket "$sock" http://x/readyz >/dev/null; do
	kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; exit 1; }
	sleep 0.1
done
curl -sf --unix-socket "$sock" -X PUT --data-binary warm http://x/v1/topics/t/keys/k >/dev/null
sleep 1
kib() { awk -v f="$1:" '$1 == f { print int($2 / 1024) " MiB" }' "/proc/$pid/status"; }
before=$(kib VmRSS)
echo 5 >"/proc/$pid/clear_refs" # VmHWM from here on
answers=$(for i in $(seq 8); do
	curl -s -o /dev/null -w '%{http_code}\n' --unix-socket "$sock" -H 'Content-Type: application/x-ndjson' \
		--data-binary @"$work/batch.ndjson" http://x/v1/topics/mem/messages &
done | sort | uniq -c | xargs)
peak=$(kib VmHWM)
sleep 10
echo "answers: $answers; resident: before $before, peak $peak, 10 s after $(kib VmRSS)"
