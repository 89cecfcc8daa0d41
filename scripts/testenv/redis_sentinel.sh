# shellcheck shell=bash
# Private throwaway Redis Sentinel set for the test command (sourced by scripts/with-servers).
#
# start_redis_sentinel: unless ONCE_TEST_REDIS_SENTINEL is set, start a redis-server master, one replica
# and three sentinels (redis-server --sentinel, the same Debian package) monitoring it as "mymaster"
# with quorum 2, on free 127.0.0.1 ports under $ONCE_TEST_TMP/redis-sentinel; wait until every sentinel
# knows the replica and the other two sentinels (so a failover can be started), and export
#   ONCE_TEST_REDIS_SENTINEL  redis+sentinel://:PASSWORD@127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/0?master=mymaster&sentinel_password=SPW
# The master and the replica require a password (requirepass, masterauth; the sentinels know it as
# auth-pass); the sentinels require another (requirepass, and sentinel-pass between themselves), so
# the suite runs through ?sentinel_password.
# It registers stop_redis_sentinel in the `stops` array.

start_redis_sentinel() {
  if [ -n "${ONCE_TEST_REDIS_SENTINEL:-}" ]; then return 0; fi
  local dir t0 rs p i n m r used=" " sports=() saddrs=() pw=sentinel-data-pw spw=sentinel-own-pw
  t0=$SECONDS
  need_pkg redis-server redis-server || return 1
  rs=$(command -v redis-server)
  dir=$ONCE_TEST_TMP/redis-sentinel
  mkdir -p "$dir/master" "$dir/replica"
  pick() { p=$(free_port); while [[ "$used" == *" $p "* ]]; do p=$(free_port); done; used="$used$p "; }
  pick; m=$p
  pick; r=$p
  stops+=(stop_redis_sentinel)
  "$rs" --port "$m" --bind 127.0.0.1 --requirepass "$pw" --masterauth "$pw" --save "" --appendonly yes --appendfsync always --dir "$dir/master" \
    --daemonize yes --pidfile "$dir/master/redis.pid" --logfile "$dir/master/server.log" </dev/null >/dev/null 2>&1 ||
    { log "redis-sentinel: master did not start"; return 1; }
  "$rs" --port "$r" --bind 127.0.0.1 --requirepass "$pw" --masterauth "$pw" --save "" --appendonly yes --appendfsync always --dir "$dir/replica" \
    --replicaof 127.0.0.1 "$m" \
    --daemonize yes --pidfile "$dir/replica/redis.pid" --logfile "$dir/replica/server.log" </dev/null >/dev/null 2>&1 ||
    { log "redis-sentinel: replica did not start"; return 1; }
  for n in 1 2 3; do
    pick
    sports+=("$p")
    saddrs+=("127.0.0.1:$p")
    mkdir -p "$dir/s$n"
    # Sentinel rewrites its config file with what it learns: each needs its own, writable.
    cat >"$dir/s$n/sentinel.conf" <<CONF
port $p
bind 127.0.0.1
dir $dir/s$n
sentinel monitor mymaster 127.0.0.1 $m 2
sentinel auth-pass mymaster $pw
sentinel down-after-milliseconds mymaster 2000
sentinel failover-timeout mymaster 10000
sentinel parallel-syncs mymaster 1
requirepass $spw
sentinel sentinel-pass $spw
CONF
    "$rs" "$dir/s$n/sentinel.conf" --sentinel --daemonize yes --pidfile "$dir/s$n/redis.pid" \
      --logfile "$dir/s$n/server.log" </dev/null >/dev/null 2>&1 ||
      { log "redis-sentinel: sentinel $n did not start"; return 1; }
  done
  # Ready: the replica is in sync, and every sentinel sees the replica and both other sentinels.
  for ((i = 0; i < 600; i++)); do
    redis-cli -a "$pw" --no-auth-warning -h 127.0.0.1 -p "$r" info replication 2>/dev/null | grep -q '^master_link_status:up' && break
    sleep 0.1
  done
  for p in "${sports[@]}"; do
    for ((i = 0; i < 600; i++)); do
      if [ "$(redis-cli -a "$spw" --no-auth-warning -h 127.0.0.1 -p "$p" sentinel master mymaster 2>/dev/null |
        awk 'prev=="num-slaves"{s=$0} prev=="num-other-sentinels"{o=$0} {prev=$0} END{print s "/" o}')" = 1/2 ]; then
        break
      fi
      sleep 0.1
    done
    [ "$i" -lt 600 ] || { log "redis-sentinel: sentinel on $p does not see the replica and the other sentinels after 60s"; return 1; }
  done
  export ONCE_TEST_REDIS_SENTINEL
  ONCE_TEST_REDIS_SENTINEL="redis+sentinel://:$pw@$(IFS=,; echo "${saddrs[*]}")/0?master=mymaster&sentinel_password=$spw"
  log "redis-sentinel: master 127.0.0.1:$m, replica 127.0.0.1:$r, sentinels ${saddrs[*]} ($((SECONDS - t0))s)"
}

stop_redis_sentinel() {
  local f pid
  for f in "$ONCE_TEST_TMP"/redis-sentinel/*/redis.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
  done
}
