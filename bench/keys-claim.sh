#!/usr/bin/env bash
# Throughput and memory of `once keys claim` on the embedded SQLite store.
#
#   ./bench/keys-claim.sh [N] [BIG]     (defaults: N=100000 keys, BIG=10000000 keys streamed; needs GNU time)
#
# Measures, each in a fresh store: N new keys (0% duplicates), the same N again (100% duplicates),
# N with half of them old (50%), and BIG keys streamed through a pipe (peak RSS must stay bounded).
# Prints a Markdown table: wall time, keys/s, peak RSS (GNU time %M, KiB).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
big=${2:-10000000}
command -v /usr/bin/time >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq time >/dev/null; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -trimpath -o "$work/once" ./cmd/once
export ONCE_HOME="$work/home"
"$work/once" keys claim --scope warm warm >/dev/null # create the store and its schema

seq -f 'order-%.0f' 1 "$n" > "$work/keys"
seq -f 'order-%.0f' $((n / 2 + 1)) $((n + n / 2)) > "$work/half"

# measure NAME SCOPE INPUT-COMMAND: runs once keys claim on the command's output.
measure() {
  local name=$1 scope=$2 count=$3; shift 3
  local start end rss
  start=$(date +%s.%N)
  rss=$( { "$@" | /usr/bin/time -f %M "$work/once" keys claim --scope "$scope" > "$work/out"; } 2>&1 | tail -1)
  end=$(date +%s.%N)
  awk -v name="$name" -v c="$count" -v s="$start" -v e="$end" -v rss="$rss" -v printed="$(wc -l < "$work/out")" \
    'BEGIN { d = e - s; printf "| %s | %d | %d | %.2f s | %.0f | %.1f MB |\n", name, c, printed, d, c / d, rss / 1024 }'
}

echo "| case | keys in | keys printed | wall | keys/s | peak RSS |"
echo "|---|---:|---:|---:|---:|---:|"
measure "new keys (0% duplicates)" bench "$n" cat "$work/keys"
measure "same keys again (100% duplicates)" bench "$n" cat "$work/keys"
measure "half old (50% duplicates)" bench "$n" cat "$work/half"
measure "streamed from a pipe" big "$big" seq -f 'flow-%.0f' 1 "$big"
