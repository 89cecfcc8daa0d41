# shellcheck shell=bash
# Private throwaway etcd for the test command (sourced by scripts/test).
#
# start_etcd: unless ONCE_TEST_ETCD is set, start a one-member etcd with its data under
# $ONCE_TEST_TMP/etcd, client and peer URLs on free 127.0.0.1 ports, and export
#   ONCE_TEST_ETCD      etcd://127.0.0.1:PORT
#   ONCE_TEST_ETCD_CTL  a script: ctl stop|start|restart (keeps the data), for restart tests
# It registers stop_etcd in the `stops` array.

start_etcd() {
  if [ -n "${ONCE_TEST_ETCD:-}" ]; then return 0; fi
  local dir port peer t0 bin
  t0=$SECONDS
  need_pkg etcd etcd-server || return 1
  bin=$(command -v etcd)
  dir=$ONCE_TEST_TMP/etcd
  mkdir -p "$dir"
  port=$(free_port)
  peer=$(free_port)
  while [ "$peer" = "$port" ]; do peer=$(free_port); done
  write_ctl etcd "$dir" <<CTL
start() {
  setsid "$bin" --name default --data-dir "$dir/data" \\
    --listen-client-urls http://127.0.0.1:$port --advertise-client-urls http://127.0.0.1:$port \\
    --listen-peer-urls http://127.0.0.1:$peer --initial-advertise-peer-urls http://127.0.0.1:$peer \\
    --initial-cluster default=http://127.0.0.1:$peer --initial-cluster-state new \\
    </dev/null >>"$dir/server.log" 2>&1 &
  echo \$! >"\$pidf"
  i=0; until curl -fsS --max-time 1 http://127.0.0.1:$port/health 2>/dev/null | grep -q '"health":"true"'; do
    i=\$((i + 1)); [ \$i -lt 300 ] || { echo "etcd did not start; see $dir/server.log" >&2; exit 1; }
    kill -0 "\$(cat "\$pidf")" 2>/dev/null || { echo "etcd exited; see $dir/server.log" >&2; exit 1; }
    sleep 0.1
  done
}
CTL
  need_pkg curl curl || return 1
  "$dir/ctl" start || { log "etcd: server did not start:"; tail -n 20 "$dir/server.log" >&2; return 1; }
  stops+=(stop_etcd)
  export ONCE_TEST_ETCD="etcd://127.0.0.1:$port"
  export ONCE_TEST_ETCD_CTL="$dir/ctl"
  log "etcd: private server on 127.0.0.1:$port ($((SECONDS - t0))s)"
}

stop_etcd() {
  "$ONCE_TEST_TMP/etcd/ctl" stop || true
}
