#!/usr/bin/env bash
# What does guarding a job with once cost, next to flock(1)? Same run, same machine, ratios.
#
#   ./bench/run-overhead.sh [RUNS]      (default 200 runs per command; needs hyperfine and GNU time)
#     once is measured with once-shim beside it (what the packages install), and once alone too
#   ONCE_BENCH_BASE=/path/to/older/once ./bench/run-overhead.sh   (adds that binary's two rows, same run;
#     build it as the release does, CGO_ENABLED=0 -ldflags "-s -w", with its once-shim beside it)
#   ONCE_BENCH_OTEL=1 ./bench/run-overhead.sh   (adds a row with tracing on, to a live OTLP/HTTP receiver on loopback)
#   ONCE_BENCH_STEADY=1 ./bench/run-overhead.sh   (first fills each ledger with 300 skips and 100 runs, as on a
#     machine that has run for a while: every open reads the WAL written since its last restart)
#
# Prints a Markdown table for docs/benchmarks.md: medians from hyperfine, the ratio to flock -n, and the
# peak RSS of once (max over 20 runs, GNU time %M).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
for tool in hyperfine /usr/bin/time flock; do
  command -v "$tool" >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq hyperfine time util-linux >/dev/null; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# As the release builds them (make release): static, no cgo (no dynamic loader to run before main), stripped.
build() { CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$@"; }
build "$work/once" ./cmd/once
build "$work/once-shim" ./cmd/once-shim # beside once, as the packages install it
mkdir "$work/solo" && cp "$work/once" "$work/solo/once"  # once alone: it re-executes itself as the shim
export ONCE_HOME="$work/home"
"$work/once" run --task warm -- true # create the store and its schema once, like a real machine
# The rows mean what they say only if once starts the dedicated shim (it is not used when untrusted).
shim=$("$work/once" run --task which-shim -- sh -c 'tr "\0" " " < /proc/$PPID/cmdline')
case $shim in "$work/once-shim "*) ;; *) echo "once did not start $work/once-shim but: $shim" >&2; exit 1 ;; esac

base=()
if [ -n "${ONCE_BENCH_BASE:-}" ]; then # a store file of its own: an older once may refuse a newer schema
  bs="sqlite://$work/home/base.db"
  "$ONCE_BENCH_BASE" run --store "$bs" --task warm -- true
  base=(-n "once run (base)" "$ONCE_BENCH_BASE run --store $bs --task bench-base -- true"
    -n "once run --per day (skip) (base)" "$ONCE_BENCH_BASE run --store $bs --task bench-day-base --per day --on-unknown rerun -- true")
fi

if [ -n "${ONCE_BENCH_STEADY:-}" ]; then
  steady() { # $1: the once binary, then its --store arguments, if any
    local bin=$1; shift
    for _ in $(seq 300); do "$bin" run "$@" --task bench-day --per day --on-unknown rerun -- true; done
    for _ in $(seq 100); do "$bin" run "$@" --task bench -- true; done
  }
  steady "$work/once"
  [ -n "${ONCE_BENCH_BASE:-}" ] && steady "$ONCE_BENCH_BASE" --store "$bs"
fi

otel=()
if [ -n "${ONCE_BENCH_OTEL:-}" ]; then # a receiver that answers every POST with 200, as a collector does
  python3 - "$work/otel.port" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Type", "application/x-protobuf"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
  receiver=$!
  trap 'kill $receiver; rm -rf "$work"' EXIT
  until [ -s "$work/otel.port" ]; do sleep 0.1; done
  otel=(-n "once run (OTLP on)" "env OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$(cat "$work/otel.port") $work/once run --task bench-otel -- true")
fi

hyperfine -N --warmup 10 --runs "$runs" --export-json "$work/h.json" \
  -n true "true" \
  -n "flock -n" "flock -n $work/flock.lock true" \
  "${base[@]}" \
  "${otel[@]}" \
  -n "once run" "$work/once run --task bench -- true" \
  -n "once run (without once-shim)" "$work/solo/once run --task bench-solo -- true" \
  -n "once run --per day (skip)" "$work/once run --task bench-day --per day --on-unknown rerun -- true" >&2

maxrss() { # the peak RSS in KiB of 20 runs of the command "$@"
  local m=0 r
  for _ in $(seq 20); do
    r=$(/usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1)
    [ "$r" -gt "$m" ] && m=$r
  done
  echo "$m"
}
rss="once run=$(maxrss "$work/once" run --task rss -- true)"
[ -n "${ONCE_BENCH_BASE:-}" ] && rss="$rss;once run (base)=$(maxrss "$ONCE_BENCH_BASE" run --store "$bs" --task rss-base -- true)"
[ -n "${ONCE_BENCH_OTEL:-}" ] && rss="$rss;once run (OTLP on)=$(maxrss env OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$(cat "$work/otel.port")" "$work/once" run --task rss-otel -- true)"

python3 - "$work/h.json" "$rss" <<'PY'
import json, sys
res = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
flock = res["flock -n"]["median"]
print("| command | median | p95 | vs flock -n |")
print("|---|---|---|---|")
for name, r in res.items():
    ts = sorted(r["times"])
    p95 = ts[int(0.95 * (len(ts) - 1))]
    print(f"| `{name}` | {r['median']*1e3:.2f} ms | {p95*1e3:.2f} ms | {r['median']/flock:.2f}× |")
print()
for kv in sys.argv[2].split(";"):
    name, kib = kv.split("=")
    print(f"peak RSS of `{name}` (max of 20 runs): {int(kib)/1024:.1f} MiB")
PY
