#!/usr/bin/env bash
# once run --retain on a task with many slot documents: what each run costs, with and without it.
# A key-value store (Redis, etcd, ZooKeeper) prunes the whole task at most once per a 24th of the age
# (store.Retainer); the SQL stores prune the window since the task's previous launch.
#
#   ./bench/retain.sh DSN [SLOTS]    DSN of a fresh prefix (redis://127.0.0.1:6379/0?prefix=rt1, …);
#                                    SLOTS: slot documents seeded first (default 10000)
#   ONCE_BENCH_BASE=/path/to/older/once ./bench/retain.sh DSN   adds that binary's runs with --retain
#
# Prints one line per run: the binary, --retain or not, wall seconds and peak RSS (GNU time).
set -euo pipefail
cd "$(dirname "$0")/.."
dsn=${1:?usage: ./bench/retain.sh DSN [SLOTS]}
slots=${2:-10000}
command -v /usr/bin/time >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq time >/dev/null; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build() { CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$@"; }
build "$work/once" ./cmd/once
build "$work/once-shim" ./cmd/once-shim
go run ./bench/history seed -store "$dsn" -shape minute -n "$slots"
i=0
run() { # $1: label, $2: binary, then once run's extra flags; each run a new slot, so each runs the command
  local label=$1 bin=$2
  shift 2
  i=$((i + 1))
  /usr/bin/time -f "$label %e s %M KiB" "$bin" run --store "$dsn" --task every-minute --slot "bench-$i" "$@" -- true
}
for _ in 1 2 3; do run "once, no --retain:" "$work/once"; done
for _ in 1 2 3 4 5; do run "once, --retain 7d:" "$work/once" --retain 7d; done
if [ -n "${ONCE_BENCH_BASE:-}" ]; then
  for _ in 1 2 3; do run "base, --retain 7d:" "$ONCE_BENCH_BASE" --retain 7d; done
fi
