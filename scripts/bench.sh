#!/usr/bin/env bash
# Runs the whole benchmark the way `make bench` does: builds bin/magnetar,
# then `bin/magnetar perf all` measures the machine's limits (fsync'd
# writes, fsync latency, loopback TCP), Magnetar standalone (a child
# process, fsync on) under Kafka and Pulsar loads, and franz-go's kfake
# under the same Kafka loads; prints one table and writes it, with the
# machine and the date, into docs/BENCHMARKS.md. About 20 minutes on 2 cores.
#
#   scripts/bench.sh                          # data in a temp dir, removed at the end
#   BENCH_DIR=/mnt/disk scripts/bench.sh      # data under this dir (the disk measured)
#   PROFILE=1 scripts/bench.sh                # also profiles of each load in bench-profiles/
#   scripts/bench.sh --perf-duration 3s       # more arguments go to magnetar perf all
#   scripts/bench.sh --perf-standalone-flags --entry-log-direct-io=false   # the standalone with a setting
#
# The output is also kept in bench-all.out. The Go benchmarks are
# `make bench-go` (scripts/test.sh bench).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "bench.sh: $*" >&2; }

"${MAKE:-make}" --no-print-directory build

dir=${BENCH_DIR:-}
if [[ -z $dir ]]; then
	dir=$(mktemp -d "${TMPDIR:-/tmp}/magnetar-bench.XXXXXX")
	trap 'rm -rf "$dir"' EXIT
fi
args=(perf all --data-dir "$dir" --perf-write-doc docs/BENCHMARKS.md --log-level warn)
if [[ ${PROFILE:-} == 1 ]]; then
	args+=(--perf-profile-dir bench-profiles)
fi
# The clients in perf all's own process give freed memory back with
# MADV_FREE: with Go's default their page faults, on a virtual machine
# whose host backs memory lazily, pace every consume (design note 0010).
# perf all starts the standalone and the no-op brokers with Go's default.
export GODEBUG="${GODEBUG:+$GODEBUG,}madvdontneed=0"
log "GODEBUG=$GODEBUG bin/magnetar ${args[*]} $*"
bin/magnetar "${args[@]}" "$@" 2>&1 | tee bench-all.out
