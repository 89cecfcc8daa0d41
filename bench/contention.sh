#!/usr/bin/env bash
# The contended launch: N launches of one task at the same moment; one runs, the others find it busy.
# How long do the losers take to give up, next to flock(1)'s losers in the same run? And are their
# busy events all in history?
#
#   ./bench/contention.sh [N] [ROUNDS]          (default 100 launches, 3 rounds; embedded store)
#   ONCE_BENCH_STORE=postgres://… ./bench/contention.sh
#   ONCE_BENCH_BASE=/path/to/older/once ./bench/contention.sh   (adds that binary side by side)
#
# The winner runs `sleep 3`, long enough for every loser to arrive while it holds the task. A
# loser's time runs from its spawn to its exit. `once version` launched N at once is the floor of
# any answer from a Go binary of once's size (start-up only, no lock, no store). Prints a Markdown
# table: losers' p50/p99 (every loser of every round), the ratio of p99s to flock's, and how many
# busy events history shows against how many losers there were.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
rounds=${2:-3}
hold=3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -trimpath -o "$work/once" ./cmd/once
go build -trimpath -o "$work/once-shim" ./cmd/once-shim # beside once, as the packages install it
bins=("new:$work/once")
if [ -n "${ONCE_BENCH_BASE:-}" ]; then bins=("base:$ONCE_BENCH_BASE" "${bins[@]}"); fi
if [ -n "${ONCE_BENCH_STORE:-}" ]; then export ONCE_STORE=$ONCE_BENCH_STORE; fi
tag=$(date +%s)

for b in "${bins[@]}"; do
  name=${b%%:*} bin=${b#*:}
  ONCE_HOME="$work/home-$name" "$bin" run --task "warm-$tag" -- true 2>/dev/null
done
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
  python3 bench/launch.py "$n" -- flock -n "$work/flock.lock" sleep "$hold" >"$work/flock-$r.json"
  python3 bench/launch.py "$n" -- "$work/once" version >"$work/version-$r.json"
  for b in "${bins[@]}"; do
    name=${b%%:*} bin=${b#*:}
    export ONCE_HOME="$work/home-$name"
    python3 bench/launch.py "$n" --stderr "$work/$name.err" -- "$bin" run --task "c$tag-$name-$r" -- sleep "$hold" >"$work/$name-$r.json"
    "$bin" history --task "c$tag-$name-$r" --json --limit 0 | grep -c '"state": "busy"' >"$work/$name-$r.busy" || true
  done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

names=()
for b in "${bins[@]}"; do names+=("${b%%:*}"); done
python3 - "$work" "$rounds" "$n" "${names[@]}" <<'PY'
import json, sys
work, rounds, n, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
def losers(kind):
    out, winners, codes = [], 0, {}
    for r in range(1, rounds + 1):
        runs = json.load(open(f"{work}/{kind}-{r}.json"))["runs"]
        if kind != "version":
            # the winner held the task for the whole sleep; everyone else lost
            w = max(runs, key=lambda x: x["elapsed"])
            winners += w["code"] == 0
            runs = [x for x in runs if x is not w]
        for x in runs:
            codes[x["code"]] = codes.get(x["code"], 0) + 1
        out += [x["elapsed"] for x in runs]
    return out, winners, codes
fl, _, _ = losers("flock")
f99 = pct(fl, 99)
print(f"| {n} launches of one task | losers p50 | losers p99 | p99 vs flock's losers | losers' exit codes | busy events in history |")
print("|---|---|---|---|---|---|")
print(f"| `flock -n F sleep 3` | {pct(fl,50)*1e3:.0f} ms | {f99*1e3:.0f} ms | 1.00× | 1: {len(fl)} | — |")
for name in names:
    el, winners, codes = losers(name)
    busy = sum(int(open(f"{work}/{name}-{r}.busy").read() or 0) for r in range(1, rounds + 1))
    cs = ", ".join(f"{c}: {k}" for c, k in sorted(codes.items()))
    print(f"| `once run` ({name}) | {pct(el,50)*1e3:.0f} ms | {pct(el,99)*1e3:.0f} ms | {pct(el,99)/f99:.2f}× | {cs} | {busy} of {len(el)} |")
v, _, _ = losers("version")
print(f"| `once version` (start-up only, the floor) | {pct(v,50)*1e3:.0f} ms | {pct(v,99)*1e3:.0f} ms | {pct(v,99)/f99:.2f}× | — | — |")
PY
echo
echo "rounds: $rounds; load average before: $load0, after: $load1"
if [ -n "${ONCE_BENCH_STORE:-}" ]; then echo "store: $(printf '%s' "$ONCE_BENCH_STORE" | sed -E 's#//([^:/@]*):[^@]*@#//\1:***@#')"; else echo "store: embedded (SQLite, default settings)"; fi
