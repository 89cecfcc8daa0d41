#!/usr/bin/env bash
# History at scale: once status, once doctor, once history --task and once history (first page) on a
# ledger of N attempts, on SQLite and (when ONCE_TEST_POSTGRES is set) PostgreSQL. Each read is timed
# as the store calls alone, in-process ("server-side"), and as the whole once process; medians of 7.
# Then once prune --older-than 30d on the same ledger, timed whole.
#
#   ./bench/history.sh [N] [SHAPES]     (default 1000000 attempts, shapes "minute daily")
#
# Shapes (bench/history/main.go): minute = one task run every minute (a slot per minute); daily =
# 10,000 tasks run daily. Seeding writes the rows straight into the store's tables (one SQLite
# transaction of multi-row INSERTs; PostgreSQL COPY): about 15 s per million rows on SQLite.
# For a "before" column, run the same tool from a checkout of the older commit: it writes only the
# columns every schema version has.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
shapes=${2:-"minute daily"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 700 "$work"
go build -trimpath -o "$work/once" ./cmd/once
go build -o "$work/hb" ./bench/history

prune() { # DSN: time once prune --older-than 30d, whole process
  local t0 t1
  t0=$(date +%s.%N)
  "$work/once" --store "$1" prune --older-than 30d
  t1=$(date +%s.%N)
  echo "prune --older-than 30d: $(echo "$t1 - $t0" | bc) s"
}

for shape in $shapes; do
  echo "### SQLite, $shape, $n attempts (load $(cut -d' ' -f1-3 /proc/loadavg))"
  dsn="sqlite://$work/$shape.db"
  "$work/hb" seed -store "$dsn" -shape "$shape" -n "$n"
  "$work/hb" time -store "$dsn" -bin "$work/once"
  prune "$dsn"
  rm -f "$work/$shape.db"* "$work/.$shape.db.ledger"
  if [ -n "${ONCE_TEST_POSTGRES:-}" ]; then
    sep='?'; case "$ONCE_TEST_POSTGRES" in *\?*) sep='&' ;; esac
    dsn="$ONCE_TEST_POSTGRES${sep}prefix=bench_${shape}_$$"
    echo "### PostgreSQL, $shape, $n attempts (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$work/hb" seed -store "$dsn" -shape "$shape" -n "$n"
    "$work/hb" time -store "$dsn" -bin "$work/once"
    prune "$dsn"
    "$work/hb" drop -store "$dsn"
  fi
done
