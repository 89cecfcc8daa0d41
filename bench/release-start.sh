#!/usr/bin/env bash
# Start cost of the release build (make release: static, stripped, -trimpath) against a plain
# `go build ./cmd/once` of the same commit (cgo as the toolchain defaults: dynamically linked).
#
#   ./bench/release-start.sh [RUNS]     (default 150 runs per copy; needs hyperfine and GNU time)
#
# Three fresh copies of each binary (cp), so that where each file's pages sit in the page cache
# averages out (docs/benchmarks.md, "After issue 12"). Prints the median of the copies' medians and
# the peak RSS of `once run -- true` (max and mean of 20, GNU time %M).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-150}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
GOFLAGS= go build -o "$work/plain" ./cmd/once
(cd release && go run . -out "$work" -platforms "linux/$(go env GOARCH)" binaries >/dev/null)
rel="$work/once-linux-$(go env GOARCH)"
for i in 1 2 3; do cp "$work/plain" "$work/plain$i"; cp "$rel" "$work/release$i"; done
export ONCE_HOME="$work/home"
"$work/plain1" run --task day --per day -- true
for what in version skip; do
  args=()
  for i in 1 2 3; do
    for b in plain release; do
      cmd="$work/$b$i version"
      [ "$what" = skip ] && cmd="$work/$b$i run --task day --per day -- true"
      args+=(-n "$b$i" "$cmd")
    done
  done
  hyperfine -N --warmup 10 --runs "$runs" --export-json "$work/$what.json" "${args[@]}" >/dev/null 2>&1
  python3 - "$work/$what.json" "$what" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
m = {}
for r in d["results"]:
    m.setdefault(r["command"].rstrip("123"), []).append(statistics.median(r["times"]) * 1000)
p, r = statistics.median(m["plain"]), statistics.median(m["release"])
print(f"{sys.argv[2]}: plain {p:.2f} ms, release {r:.2f} ms ({(r / p - 1) * 100:+.0f} %)")
PY
done
for b in plain1 release1; do
  max=0 sum=0
  for _ in $(seq 20); do
    k=$(/usr/bin/time -f %M "$work/$b" run --task rss -- true 2>&1 >/dev/null | tail -1)
    sum=$((sum + k)); [ "$k" -gt "$max" ] && max=$k
  done
  echo "peak RSS ${b%1}: max $max KiB, mean $((sum / 20)) KiB"
done
