# shellcheck shell=bash
# Private throwaway Redis for the test command (sourced by scripts/test).
#
# start_redis: unless ONCE_TEST_REDIS is set, start redis-server on a free 127.0.0.1 port with its data
# (append-only file, fsync always, so restart tests keep data) under $ONCE_TEST_TMP/redis, and export
#   ONCE_TEST_REDIS      redis://127.0.0.1:PORT/0
#   ONCE_TEST_REDIS_CTL  a script: ctl stop|start|restart (keeps the data), for restart tests
# It registers stop_redis in the `stops` array.

start_redis() {
  if [ -n "${ONCE_TEST_REDIS:-}" ]; then return 0; fi
  local dir port t0 rs
  t0=$SECONDS
  need_pkg redis-server redis-server || return 1
  rs=$(command -v redis-server)
  dir=$ONCE_TEST_TMP/redis
  mkdir -p "$dir/data"
  port=$(free_port)
  write_ctl redis "$dir" <<CTL
start() {
  "$rs" --port $port --bind 127.0.0.1 --save "" --appendonly yes --appendfsync always --dir "$dir/data" \\
    --daemonize yes --pidfile "\$pidf" --logfile "$dir/server.log" </dev/null >/dev/null 2>&1
  i=0; until [ "\$(redis-cli -h 127.0.0.1 -p $port ping 2>/dev/null)" = PONG ]; do
    i=\$((i + 1)); [ \$i -lt 300 ] || { echo "redis did not start; see $dir/server.log" >&2; exit 1; }
    sleep 0.1
  done
}
CTL
  "$dir/ctl" start || { log "redis: server did not start:"; tail -n 20 "$dir/server.log" >&2; return 1; }
  stops+=(stop_redis)
  export ONCE_TEST_REDIS="redis://127.0.0.1:$port/0"
  export ONCE_TEST_REDIS_CTL="$dir/ctl"
  log "redis: private server on 127.0.0.1:$port ($((SECONDS - t0))s)"
}

stop_redis() {
  "$ONCE_TEST_TMP/redis/ctl" stop || true
}
