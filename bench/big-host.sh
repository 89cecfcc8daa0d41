#!/usr/bin/env bash
# Does `once run` cost more on a host with thousands of processes? Issue 12's goal: flat (≤ 1.1×) from
# 100 to 8,000 processes. Same run, same machine: flock -n and once at each size, as ratios.
#
#   ./bench/big-host.sh [RUNS] [SIZES]      (default 100 runs per command; sizes "100 2000 8000")
#   OLD_ONCE=/path/to/older/once ./bench/big-host.sh    also measures an older build side by side
#
# The host is filled with idle `sleep` processes up to each size (counted in /proc), then hyperfine
# times each command. Prints a Markdown table for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100}
sizes=${2:-"100 2000 8000"}
command -v hyperfine >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq hyperfine >/dev/null; }
work=$(mktemp -d)
fillers=()
cleanup() {
  [ ${#fillers[@]} -gt 0 ] && kill "${fillers[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
go build -trimpath -o "$work/once" ./cmd/once
go build -trimpath -o "$work/once-shim" ./cmd/once-shim # beside once, as the packages install it
export ONCE_HOME="$work/home"
"$work/once" run --task warm -- true
old=()
if [ -n "${OLD_ONCE:-}" ]; then
  ONCE_HOME="$work/home-old" "$OLD_ONCE" run --task warm -- true
  old=(-n "once run (old)" "env ONCE_HOME=$work/home-old $OLD_ONCE run --task bench -- true")
fi
procs() { ls -d /proc/[0-9]* 2>/dev/null | wc -l; }
for size in $sizes; do
  have=$(procs)
  while [ "$have" -lt "$size" ]; do
    sleep 3600 &
    fillers+=($!)
    have=$((have + 1))
  done
  sleep 1
  hyperfine -N --warmup 5 --runs "$runs" --export-json "$work/h-$size.json" \
    -n "flock -n" "flock -n $work/flock.lock true" \
    -n "once run" "$work/once run --task bench -- true" "${old[@]}" >&2
  echo "$size $(procs)" >>"$work/sizes"
done
python3 - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
rows = [l.split() for l in open(os.path.join(work, "sizes"))]
base = {}
print("| processes on the host | command | median | vs flock -n | vs itself at the smallest size |")
print("|---|---|---|---|---|")
for size, actual in rows:
    res = {r["command"]: r["median"] for r in json.load(open(os.path.join(work, f"h-{size}.json")))["results"]}
    for name, m in res.items():
        base.setdefault(name, m)
        print(f"| {actual} | `{name}` | {m*1e3:.2f} ms | {m/res['flock -n']:.2f}× | {m/base[name]:.2f}× |")
PY
