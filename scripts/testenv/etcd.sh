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
  cat >"$dir/ctl" <<CTL
#!/bin/sh
# Stop or start the private etcd of this test run, keeping its data.
set -e
pidf="$dir/etcd.pid"
stop() {
  [ -f "\$pidf" ] || return 0
  pid=\$(cat "\$pidf" 2>/dev/null) || return 0
  kill -TERM "\$pid" 2>/dev/null || { rm -f "\$pidf"; return 0; }
  i=0; while kill -0 "\$pid" 2>/dev/null; do
    i=\$((i + 1)); [ \$i -lt 300 ] || { kill -KILL "\$pid" 2>/dev/null || true; }
    sleep 0.1
  done
  rm -f "\$pidf"
}
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
case "\$1" in
  stop) stop ;;
  start) start ;;
  restart) stop; start ;;
  *) echo "usage: \$0 stop|start|restart" >&2; exit 2 ;;
esac
CTL
  chmod 755 "$dir/ctl"
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
