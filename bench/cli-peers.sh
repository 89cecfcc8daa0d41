#!/usr/bin/env bash
# `once run` on a networked store against the whole-process lock wrapper its users know, on the same
# private servers, in the same hyperfine run (issue 16), ratios to the peer:
#   etcd:  once run --store etcd://… -- true    vs  etcdctl lock NAME true
#   Redis: once run --store redis://… -- true   vs  bench/redis-lock.sh (redis-cli SET NX PX + Lua release)
#
#   ./bench/cli-peers.sh [RUNS]      (default 100; installs hyperfine and etcd-client when root)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${ONCE_TEST_SERVERS_UP:-}" ]; then
  ONCE_TEST_SERVERS_UP=1 exec ./scripts/with-servers ./bench/cli-peers.sh "$@"
fi
runs=${1:-100}
for tool in hyperfine etcdctl redis-cli; do
  if ! command -v "$tool" >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq hyperfine etcd-client redis-tools >/dev/null
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# As the release builds them (make release): static, no cgo, stripped. Build ONCE_BENCH_BASE the same way.
build() { CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$@"; }
build "$work/once" ./cmd/once
build "$work/once-shim" ./cmd/once-shim # beside once, as the packages install it
export ONCE_HOME="$work/home"
etcd="http://${ONCE_TEST_ETCD#etcd://}"
rhost=$(echo "${ONCE_TEST_REDIS#redis://}" | cut -d/ -f1)
# A prefix of this run's own: every run of a task without a slot adds an attempt to the same slot,
# so rows measured on a server that earlier runs left history on would not compare.
prefixed() { case $1 in *\?*) echo "$1&prefix=$2" ;; *) echo "$1?prefix=$2" ;; esac; }
p=b$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
ONCE_TEST_ETCD=$(prefixed "$ONCE_TEST_ETCD" "$p") ONCE_TEST_REDIS=$(prefixed "$ONCE_TEST_REDIS" "$p")
"$work/once" run --store "$ONCE_TEST_ETCD" --task warm -- true # schema and clients warm, like a real host
"$work/once" run --store "$ONCE_TEST_REDIS" --task warm -- true
base=() # ONCE_BENCH_BASE=/path/to/older/once: its rows too, same run
if [ -n "${ONCE_BENCH_BASE:-}" ]; then
  base=(-n "once run (etcd, base)" "$ONCE_BENCH_BASE run --store $ONCE_TEST_ETCD --task bench-etcd-base -- true"
    -n "once run (Redis, base)" "$ONCE_BENCH_BASE run --store $ONCE_TEST_REDIS --task bench-redis-base -- true")
fi
hyperfine -N --warmup 10 --runs "$runs" --export-json "$work/h.json" "${base[@]}" \
  -n "etcdctl lock" "etcdctl --endpoints=$etcd lock bench-etcdctl true" \
  -n "once run (etcd)" "$work/once run --store $ONCE_TEST_ETCD --task bench-etcd -- true" \
  -n "redis-lock.sh" "./bench/redis-lock.sh ${rhost%:*} ${rhost#*:} bench-redis-cli 60000 true" \
  -n "once run (Redis)" "$work/once run --store $ONCE_TEST_REDIS --task bench-redis -- true" >&2
python3 - "$work/h.json" <<'PY'
import json, sys
res = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
peer = {"once run (etcd)": "etcdctl lock", "once run (Redis)": "redis-lock.sh",
        "once run (etcd, base)": "etcdctl lock", "once run (Redis, base)": "redis-lock.sh"}
print("| command | median | p95 | vs the peer |")
print("|---|---|---|---|")
for name, r in res.items():
    ts = sorted(r["times"])
    p95 = ts[int(0.95 * (len(ts) - 1))]
    ratio = f"{r['median'] / res[peer[name]]['median']:.2f}×" if name in peer else "1.00× (peer)"
    print(f"| `{name}` | {r['median']*1e3:.2f} ms | {p95*1e3:.2f} ms | {ratio} |")
PY
