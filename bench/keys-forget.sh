#!/usr/bin/env bash
# `once keys forget` of a large scope while runs go on: how long the forget takes, and how long the
# runs on the same store wait meanwhile (a forget in one transaction held SQLite's write lock for
# seconds, and every run waited that long).
#
#   ./bench/keys-forget.sh [N]                      (default 2,000,000 keys, half of them in the scope forgotten; SQLite)
#   ONCE_BENCH_STORE=postgres://…/db?sslmode=disable ./bench/keys-forget.sh 1000000
#   ONCE_BENCH_BASE=/path/to/older/once ./bench/keys-forget.sh   (adds that binary, e.g. main's, side by side)
#
# For each binary: seeds N keys into a fresh ledger (SQLite: a new file; PostgreSQL: a new table
# prefix) with `go run ./bench/history seed-keys` (half in the scope "big"), then forgets "big"
# (--include-done) while a loop starts `once run -- true` on the same store every 0.1 s until the
# forget ends. Prints a Markdown table: the forget's wall time, and the runs' count, exit codes and
# p50 / max time (spawn to exit).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -trimpath -o "$work/once" ./cmd/once
go build -trimpath -o "$work/once-shim" ./cmd/once-shim
bins=("new:$work/once")
if [ -n "${ONCE_BENCH_BASE:-}" ]; then bins=("base:$ONCE_BENCH_BASE" "${bins[@]}"); fi
tag=k$(date +%s)
echo "| $n keys, forget $((n / 2)) | forget wall | runs meanwhile | run exit codes | run p50 | run max |"
echo "|---|---|---|---|---|---|"
for b in "${bins[@]}"; do
  name=${b%%:*} bin=${b#*:}
  if [ -n "${ONCE_BENCH_STORE:-}" ]; then
    sep='?'; case $ONCE_BENCH_STORE in *\?*) sep='&' ;; esac
    dsn="$ONCE_BENCH_STORE${sep}prefix=${tag}_$name"
  else
    mkdir -m 700 "$work/$name"
    dsn="sqlite://$work/$name/once.db"
  fi
  go run ./bench/history seed-keys -store "$dsn" -n "$n" >/dev/null
  export ONCE_STORE=$dsn ONCE_HOME="$work/home-$name"
  "$bin" run --task warm -- true
  sleep 2 # the keys are older than the cutoff below
  : >"$work/$name.runs"
  (
    i=0
    while [ ! -e "$work/$name.done" ]; do
      i=$((i + 1)) s=$(date +%s%N) rc=0
      "$bin" run --task "r$i" -- true >/dev/null 2>&1 || rc=$?
      echo "$rc $((($(date +%s%N) - s) / 1000000))" >>"$work/$name.runs"
      sleep 0.1
    done
  ) &
  sleep 0.5
  s=$(date +%s%N)
  "$bin" keys forget --scope big --older-than 0h0m1s --include-done -q
  f=$((($(date +%s%N) - s) / 1000000))
  touch "$work/$name.done"
  wait
  python3 - "$name" "$f" "$work/$name.runs" <<'PY'
import sys, collections
name, f, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [l.split() for l in open(path) if l.strip()]
ms = sorted(int(r[1]) for r in rows)
codes = collections.Counter(r[0] for r in rows)
print(f"| {name} | {f} ms | {len(rows)} | {', '.join(f'{c}: {k}' for c, k in sorted(codes.items()))} | {ms[len(ms)//2]} ms | {ms[-1]} ms |")
PY
done
