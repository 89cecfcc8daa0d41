#!/usr/bin/env bash
# The history of one slot on a key-value store whose task has many slots: `once history --task T
# --slot S`, which the dashboard's slot and review pages also read. Seeds SLOTS minutely slots of task
# every-minute through the API (bench/history seed -shape minute), then times the slot waiting for
# review, whole process, 7 runs; with ONCE_BENCH_BASE, an older binary's runs in the same loop.
#
#   ./bench/history-slot.sh DSN [SLOTS]    DSN of a fresh prefix (redis://127.0.0.1:6379/0?prefix=hs1, …);
#                                          SLOTS default 10000
#   ONCE_BENCH_BASE=/path/to/older/once ./bench/history-slot.sh DSN
#
# Prints one line per run: the binary, wall seconds and peak RSS (GNU time).
set -euo pipefail
cd "$(dirname "$0")/.."
dsn=${1:?usage: ./bench/history-slot.sh DSN [SLOTS]}
slots=${2:-10000}
if ! command -v /usr/bin/time >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "history-slot.sh: needs GNU time (apt-get install time)" >&2; exit 1; }
  apt-get update -qq && apt-get install -y -qq time >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$work/once" ./cmd/once
go run ./bench/history seed -store "$dsn" -shape minute -n "$slots"
one() { # $1 label, $2 binary
  /usr/bin/time -f "$1 %e s %M KiB" "$2" --store "$dsn" history --task every-minute --slot waiting-review >/dev/null
}
for _ in 1 2 3 4 5 6 7; do
  one "once:" "$work/once"
  if [ -n "${ONCE_BENCH_BASE:-}" ]; then one "base:" "$ONCE_BENCH_BASE"; fi
done
