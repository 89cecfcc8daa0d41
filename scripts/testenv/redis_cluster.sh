# shellcheck shell=bash
# Private throwaway Redis Cluster for the test command (sourced by scripts/with-servers).
#
# start_redis_cluster: unless ONCE_TEST_REDIS_CLUSTER is set, start three cluster-enabled redis-server
# masters (no replicas) on free 127.0.0.1 ports with their data under $ONCE_TEST_TMP/redis-cluster,
# join them with redis-cli --cluster create, wait for cluster_state:ok on every node, and export
#   ONCE_TEST_REDIS_CLUSTER  redis+cluster://:PASSWORD@127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
# The nodes require a password (requirepass), so the tests cover AUTH on every node.
# It registers stop_redis_cluster in the `stops` array.

start_redis_cluster() {
  if [ -n "${ONCE_TEST_REDIS_CLUSTER:-}" ]; then return 0; fi
  local dir t0 rs p b i n ports=() addrs=() used=" " pw=cluster-pw cli
  t0=$SECONDS
  need_pkg redis-server redis-server || return 1
  rs=$(command -v redis-server)
  dir=$ONCE_TEST_TMP/redis-cluster
  for n in 1 2 3; do
    p=$(free_port); while [[ "$used" == *" $p "* ]]; do p=$(free_port); done; used="$used$p "
    b=$(free_port); while [[ "$used" == *" $b "* ]]; do b=$(free_port); done; used="$used$b "
    ports+=("$p")
    addrs+=("127.0.0.1:$p")
    mkdir -p "$dir/$n"
    # The cluster bus gets a free port of its own (the default, port + 10000, may be taken or past 65535).
    "$rs" --port "$p" --cluster-port "$b" --bind 127.0.0.1 --requirepass "$pw" --masterauth "$pw" --cluster-enabled yes --cluster-config-file "$dir/$n/nodes.conf" \
      --cluster-node-timeout 5000 --save "" --appendonly yes --appendfsync always --dir "$dir/$n" \
      --daemonize yes --pidfile "$dir/$n/redis.pid" --logfile "$dir/$n/server.log" </dev/null >/dev/null 2>&1 ||
      { log "redis-cluster: node $n did not start"; return 1; }
  done
  stops+=(stop_redis_cluster)
  cli=(redis-cli -a "$pw" --no-auth-warning)
  for p in "${ports[@]}"; do
    for ((i = 0; i < 300; i++)); do
      [ "$("${cli[@]}" -h 127.0.0.1 -p "$p" ping 2>/dev/null)" = PONG ] && break
      sleep 0.1
    done
  done
  "${cli[@]}" --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
    { log "redis-cluster: cluster create failed:"; tail -n 20 "$dir/create.log" >&2; return 1; }
  for p in "${ports[@]}"; do
    for ((i = 0; i < 600; i++)); do
      "${cli[@]}" -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
      sleep 0.1
    done
    "${cli[@]}" -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' ||
      { log "redis-cluster: node 127.0.0.1:$p is not cluster_state:ok after 60s"; return 1; }
  done
  export ONCE_TEST_REDIS_CLUSTER
  ONCE_TEST_REDIS_CLUSTER="redis+cluster://:$pw@$(IFS=,; echo "${addrs[*]}")"
  log "redis-cluster: 3 masters on ${addrs[*]} ($((SECONDS - t0))s)"
}

stop_redis_cluster() {
  local f pid
  for f in "$ONCE_TEST_TMP"/redis-cluster/*/redis.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
  done
}
