#!/usr/bin/env bash
# once daemon at scale (docs/benchmarks.md, "once daemon"):
#
#   fleet:  3 daemons × N jobs (default 1000) due every minute, on PostgreSQL, for M minutes
#           (default 2): every slot ran once; fire lag (attempt start − slot start, store clock) p50/p99;
#           store transactions per slot per node (pg_stat_database: commits + rollbacks).
#   idle:   one daemon with N jobs due once a day: its CPU (% of a core) and RSS over 60 s, on
#           SQLite and on PostgreSQL.
#
#   ./bench/daemon.sh [JOBS] [MINUTES]
#
# Servers: ONCE_TEST_POSTGRES when set, else a private one (scripts/with-servers).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${ONCE_TEST_POSTGRES:-}" ]; then
  exec ./scripts/with-servers "$0" "$@"
fi
jobs=${1:-1000}
minutes=${2:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/once-bench-daemon.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT # set -e holds in the trap: kill with no job left exits 2
go build -o "$work/once" ./cmd/once
go build -o "$work/once-shim" ./cmd/once-shim # beside once, as the packages install it
once="$work/once"
dsn="${ONCE_TEST_POSTGRES}&prefix=benchd$$"
case "$ONCE_TEST_POSTGRES" in *\?*) ;; *) dsn="${ONCE_TEST_POSTGRES}?prefix=benchd$$" ;; esac

jobsfile() { # NAME SCHEDULE
  python3 - "$jobs" "$2" >"$work/$1.toml" <<'PY'
import sys
n, sched = int(sys.argv[1]), sys.argv[2]
for i in range(n):
    print(f'[[job]]\nname = "job-{i:04d}"\nschedule = "{sched}"\ntz = "UTC"\ncommand = ["true"]\n')
PY
}

cpu_rss() { # PID SECONDS → "cpu% rssMiB"
  python3 - "$1" "$2" <<'PY'
import os, sys, time
pid, secs = sys.argv[1], float(sys.argv[2])
tck = os.sysconf("SC_CLK_TCK")
def ticks():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
t0, c0 = time.monotonic(), ticks()
time.sleep(secs)
t1, c1 = time.monotonic(), ticks()
rss = [l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:")][0].split()[1]
print(f"{100.0 * (c1 - c0) / tck / (t1 - t0):.2f} {int(rss) / 1024:.1f}")
PY
}

cputicks() { # PID… → "own children system": the daemons' own CPU ticks, their reaped children's
  # (each run's shim and command), and the whole machine's busy ticks (/proc/stat)
  python3 - "$@" <<'PY'
import sys
own = kids = 0
for pid in sys.argv[1:]:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    own += int(f[11]) + int(f[12])
    kids += int(f[13]) + int(f[14])
c = [int(x) for x in open("/proc/stat").readline().split()[1:]]
print(own, kids, sum(c) - c[3] - c[4])
PY
}

pgtx() { # the database's transactions so far
  psql "${ONCE_TEST_POSTGRES%%\?*}" -Atc "SELECT pg_stat_force_next_flush(); SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()" 2>/dev/null | tail -1
}

echo "== idle: one daemon, $jobs jobs due daily, 60 s"
jobsfile idle "17 3 * * *"
for store in sqlite postgres; do
  home="$work/idle-$store"
  mkdir -p "$home"
  if [ "$store" = sqlite ]; then s="sqlite://$home/once.db"; else s="$dsn"_idle; fi
  ONCE_HOME="$home" "$once" daemon --jobs "$work/idle.toml" --store "$s" --log-level warn &
  pid=$!
  sleep 10 # start-up (the first accounting reads each job's history) is not idle
  read -r cpu rss < <(cpu_rss "$pid" 60)
  kill -TERM "$pid"; wait "$pid" || true
  echo "idle $store: cpu ${cpu}% of a core, rss ${rss} MiB"
done

echo "== fleet: 3 daemons × $jobs jobs every minute on PostgreSQL, $minutes minutes"
jobsfile fleet "* * * * *"
pids=()
for n in a b c; do
  mkdir -p "$work/home-$n"
  ONCE_HOME="$work/home-$n" "$once" daemon --jobs "$work/fleet.toml" --store "$dsn" --node "node-$n" --log-level warn \
    >"$work/node-$n.log" 2>&1 &
  pids+=($!)
done
# From the next minute boundary, for $minutes whole minutes.
now=$(date +%s); start=$(( (now / 60 + 1) * 60 )); end=$(( start + minutes * 60 ))
sleep $(( start - now - 1 ))
tx0=$(pgtx)
read -r own0 kids0 sys0 < <(cputicks "${pids[@]}")
sleep $(( end - $(date +%s) + 30 )) # the last minute's runs end
read -r own1 kids1 sys1 < <(cputicks "${pids[@]}")
tx1=$(pgtx)
for pid in "${pids[@]}"; do kill -TERM "$pid"; done
wait "${pids[@]}" || true
"$once" history --store "$dsn" --limit 0 --jsonl >"$work/history.jsonl"
python3 - "$work/history.jsonl" "$start" "$end" "$jobs" "$tx0" "$tx1" <<'PY'
import json, sys, datetime, statistics
path, start, end, jobs, tx0, tx1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5] or 0), int(sys.argv[6] or 0)
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
runs, lags, other = {}, [], {}
for line in open(path):
    e = json.loads(line)
    sl = ts(e["slot"]) if e["slot"][:2] == "20" else None
    if sl is None or not (start <= sl < end):
        continue
    if e["state"] in ("succeeded", "failed", "unknown", "running"):
        runs[(e["task"], sl)] = runs.get((e["task"], sl), 0) + 1
        lags.append(ts(e["started_at"]) - sl)
    else:
        other[e["state"]] = other.get(e["state"], 0) + 1
slots = jobs * ((end - start) // 60)
twice = sum(1 for v in runs.values() if v > 1)
lags.sort()
q = lambda p: lags[min(len(lags) - 1, int(p * len(lags)))] if lags else float("nan")
print(f"slots due {slots}, ran {len(runs)}, ran twice {twice}, other events {other}")
print(f"fire lag (attempt start - slot start): p50 {q(0.50)*1000:.0f} ms, p99 {q(0.99)*1000:.0f} ms, max {lags[-1]*1000 if lags else 0:.0f} ms")
if tx1 > tx0:
    print(f"store transactions per slot per node: {(tx1 - tx0) / slots / 3:.1f} ({tx1 - tx0} in all)")
PY
tck=$(getconf CLK_TCK)
python3 - "$tck" "$((own1 - own0))" "$((kids1 - kids0))" "$((sys1 - sys0))" "$((jobs * minutes))" <<'PY'
import sys
tck, own, kids, total, slots = (int(x) for x in sys.argv[1:])
ms = lambda t: 1000.0 * t / tck / slots
rest = total - own - kids
print(f"CPU per slot (all nodes): {ms(total):.1f} ms: the daemons {ms(own):.1f}, the runs' shims and commands {ms(kids):.1f}, "
      f"the rest (the store, the kernel's own work) {ms(rest):.1f}")
PY
for n in a b c; do
  echo "node-$n error lines: $(grep -c "level=ERROR" "$work/node-$n.log" || true)"
done
