#!/usr/bin/env bash
# How soon does a waiter get in (once run --wait)? Peers side by side, same run:
#   lease:      b.N tasks whose holder died; from the expiry the busy answer named to the waiter
#               holding the lease: once's wait against a blind backoff (50 ms doubling to 1 s, with
#               jitter: once's wait before issue 12, and the usual lock client's retry loop), on
#               SQLite and every networked store
#   local lock: b.N locks their holders release; from the release to the waiter holding it: once's
#               flock wait against the kernel's blocking flock(2), as `flock -w` waits
# p50/p99 are reported as custom benchmark metrics (ms for the lease, µs for the local lock).
#
#   ./bench/wait-wakeup.sh [WAITERS]   (default 100 waiters per row)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
exec ./scripts/with-servers bash -c "go test -run '^\$' -bench '^BenchmarkWakeUp\$' -benchtime ${n}x -timeout 10m ./lease/ &&
  go test -run '^\$' -bench '^BenchmarkWaitWake\$' -benchtime ${n}x ./flock/"
