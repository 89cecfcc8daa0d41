#!/usr/bin/env bash
# The midnight burst: N different tasks launched in the same second on one host, against the same N
# run one after another, and flock(1) doing the same, in one run. Default settings throughout.
#
#   ./bench/burst.sh [N] [ROUNDS]          (default 500 launches, 3 rounds; embedded store)
#   ONCE_BENCH_STORE=postgres://… ./bench/burst.sh 200
#   ONCE_BENCH_BASE=/path/to/older/once ./bench/burst.sh    (adds that binary, e.g. main's, side by side)
#
# Each round starts the N launches of every binary and of flock in turn (burst, then one after
# another), with fresh task names, so that the machine's load falls on all of them alike. The command
# is `true`: what is measured is the guard. Prints a Markdown table: wall time of the burst and of
# the sequence (median of the rounds) and their ratio, the exit codes of every burst launch (69:
# store unavailable, i.e. a job that did not run), and p50/p99 of one launch's time in the burst and
# in the sequence (spawn to exit: once's own overhead, including its wait for the store).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-500}
rounds=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -trimpath -o "$work/once" ./cmd/once
go build -trimpath -o "$work/once-shim" ./cmd/once-shim # beside once, as the packages install it
bins=("new:$work/once")
if [ -n "${ONCE_BENCH_BASE:-}" ]; then bins=("base:$ONCE_BENCH_BASE" "${bins[@]}"); fi
if [ -n "${ONCE_BENCH_STORE:-}" ]; then export ONCE_STORE=$ONCE_BENCH_STORE; fi
tag=$(date +%s)

for b in "${bins[@]}"; do # a warm store, as on a real machine
  name=${b%%:*} bin=${b#*:}
  ONCE_HOME="$work/home-$name" "$bin" run --task "warm-$tag" -- true 2>/dev/null
done
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
  for b in "${bins[@]}"; do
    name=${b%%:*} bin=${b#*:}
    export ONCE_HOME="$work/home-$name"
    python3 bench/launch.py "$n" --stderr "$work/$name.err" -- "$bin" run --task "b$tag-$name-$r-{i}" -- true >"$work/$name-burst-$r.json"
    python3 bench/launch.py "$n" --seq --stderr "$work/$name.err" -- "$bin" run --task "s$tag-$name-$r-{i}" -- true >"$work/$name-seq-$r.json"
  done
  mkdir -p "$work/flock-$r"
  python3 bench/launch.py "$n" -- flock -n "$work/flock-$r/b{i}" true >"$work/flock-burst-$r.json"
  python3 bench/launch.py "$n" --seq -- flock -n "$work/flock-$r/s{i}" true >"$work/flock-seq-$r.json"
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

names=()
for b in "${bins[@]}"; do names+=("${b%%:*}"); done
python3 - "$work" "$rounds" "$n" "${names[@]}" flock <<'PY'
import json, statistics, sys
work, rounds, n, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
print(f"| {n} launches | burst wall | one after another | burst / sequence | burst exit codes | launch p50 / p99 in the burst | launch p50 / p99 in sequence |")
print("|---|---|---|---|---|---|---|")
for name in names:
    bw, sw, codes, bel, sel = [], [], {}, [], []
    for r in range(1, rounds + 1):
        b = json.load(open(f"{work}/{name}-burst-{r}.json")); s = json.load(open(f"{work}/{name}-seq-{r}.json"))
        bw.append(b["wall"]); sw.append(s["wall"])
        for x in b["runs"]:
            codes[x["code"]] = codes.get(x["code"], 0) + 1
        bel += [x["elapsed"] for x in b["runs"]]; sel += [x["elapsed"] for x in s["runs"]]
    label = "`flock -n F true`" if name == "flock" else f"`once run` ({name})"
    cs = ", ".join(f"{c}: {k}" for c, k in sorted(codes.items()))
    print(f"| {label} | {statistics.median(bw):.2f} s | {statistics.median(sw):.2f} s | {statistics.median(bw)/statistics.median(sw):.2f}× "
          f"| {cs} | {pct(bel,50)*1e3:.0f} / {pct(bel,99)*1e3:.0f} ms | {pct(sel,50)*1e3:.1f} / {pct(sel,99)*1e3:.1f} ms |")
PY
echo
echo "rounds: $rounds (medians of the walls; percentiles over every launch); load average before: $load0, after: $load1"
if [ -n "${ONCE_BENCH_STORE:-}" ]; then echo "store: $(printf '%s' "$ONCE_BENCH_STORE" | sed -E 's#//([^:/@]*):[^@]*@#//\1:***@#')"; else echo "store: embedded (SQLite, default settings)"; fi
