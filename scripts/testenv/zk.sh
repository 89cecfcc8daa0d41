# shellcheck shell=bash
# Private throwaway ZooKeeper for the test command (sourced by scripts/test).
#
# start_zk: unless ONCE_TEST_ZK is set, start a standalone ZooKeeper (Debian package "zookeeper") with its
# data under $ONCE_TEST_TMP/zk on a free 127.0.0.1 port, and export
#   ONCE_TEST_ZK      zk://127.0.0.1:PORT
#   ONCE_TEST_ZK_CTL  a script: ctl stop|start|restart (keeps the data), for restart tests
#   ONCE_TEST_ZK_AUTH zk://once:PASSWORD@127.0.0.1:PORT/apps/once-test: the same server with digest
#                     authentication (built into ZooKeeper: no server setting) and a chroot
# It registers stop_zk in the `stops` array.

start_zk() {
  if [ -n "${ONCE_TEST_ZK:-}" ]; then
    # A server of your own: digest authentication needs no server setting, so it serves both.
    case $ONCE_TEST_ZK in
      zk://*[/?@]*) ;;
      zk://*) export ONCE_TEST_ZK_AUTH=${ONCE_TEST_ZK_AUTH:-zk://once:once-pw@${ONCE_TEST_ZK#zk://}/apps/once-test} ;;
    esac
    return 0
  fi
  local dir port t0 java cp
  t0=$SECONDS
  need_pkg /usr/share/java/zookeeper.jar zookeeper || return 1
  need_pkg java default-jre-headless || return 1
  java=$(command -v java)
  dir=$ONCE_TEST_TMP/zk
  mkdir -p "$dir/conf" "$dir/data"
  port=$(free_port)
  cat >"$dir/conf/zoo.cfg" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
  cp="$dir/conf:/usr/share/java/zookeeper.jar"
  [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
  write_ctl zk "$dir" <<CTL
ruok() {
  local r=""
  exec 3<>/dev/tcp/127.0.0.1/$port || return 1
  printf ruok >&3
  read -r -t 2 r <&3 || true
  exec 3<&- 3>&-
  [ "\$r" = imok ]
}
start() {
  setsid "$java" -Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \\
    -Dzookeeper.log.dir="$dir" -Dzookeeper.root.logger=INFO,CONSOLE -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \\
    -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/conf/zoo.cfg" \\
    </dev/null >>"$dir/server.log" 2>&1 &
  echo \$! >"\$pidf"
  i=0; until ruok 2>/dev/null; do
    i=\$((i + 1)); [ \$i -lt 300 ] || { echo "zookeeper did not start; see $dir/server.log" >&2; exit 1; }
    kill -0 "\$(cat "\$pidf")" 2>/dev/null || { echo "zookeeper exited; see $dir/server.log" >&2; exit 1; }
    sleep 0.1
  done
}
CTL
  "$dir/ctl" start || { log "zk: server did not start:"; tail -n 20 "$dir/server.log" >&2; return 1; }
  stops+=(stop_zk)
  export ONCE_TEST_ZK="zk://127.0.0.1:$port"
  export ONCE_TEST_ZK_CTL="$dir/ctl"
  export ONCE_TEST_ZK_AUTH="zk://once:once-pw@127.0.0.1:$port/apps/once-test"
  log "zk: private server on 127.0.0.1:$port ($((SECONDS - t0))s)"
}

stop_zk() {
  "$ONCE_TEST_TMP/zk/ctl" stop || true
}
