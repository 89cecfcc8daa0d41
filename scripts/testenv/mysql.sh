# shellcheck shell=bash
# Private throwaway MariaDB for the test command (sourced by scripts/test).
#
# start_mysql: unless ONCE_TEST_MYSQL is set, mariadb-install-db a data dir under $ONCE_TEST_TMP/mysql,
# run mariadbd as an unprivileged user on a free 127.0.0.1 port with its own socket (never the system
# server's), create the user "once" with a random password and ALL on once.* only, and export
#   ONCE_TEST_MYSQL      mysql://once:PASSWORD@127.0.0.1:PORT/once
#   ONCE_TEST_MYSQL_CTL  a script: ctl stop|start|restart (keeps the data), for restart tests
# It registers stop_mysql in the `stops` array. testenv_user and testenv_as come from postgres.sh.
# The buffer pool is 256 MB (MariaDB's default is 128 MB; production servers have more): with 64 MB
# the 1M-key claim benchmark's keys table did not fit and it measured page reads, not claims.

start_mysql() {
  if [ -n "${ONCE_TEST_MYSQL:-}" ]; then return 0; fi
  local user dir port pw t0 i
  t0=$SECONDS
  need_pkg mariadbd mariadb-server || return 1
  need_pkg mariadb-install-db mariadb-server || return 1
  user=$(testenv_user) || { log "mysql: cannot create user once-test"; return 1; }
  dir=$ONCE_TEST_TMP/mysql
  mkdir -p "$dir/data"
  chown -R "$user" "$dir" 2>/dev/null || true
  port=$(free_port)
  pw=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  local userflag=()
  [ "$(id -u)" = 0 ] && userflag=(--user="$user")
  mariadb-install-db --no-defaults --datadir="$dir/data" "${userflag[@]}" --auth-root-authentication-method=normal \
    --skip-test-db >"$dir/install.log" 2>&1 || { log "mysql: mariadb-install-db failed:"; tail -n 20 "$dir/install.log" >&2; return 1; }
  local mariadbd
  mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
  write_ctl mariadbd "$dir" <<CTL
start() {
  setsid "$mariadbd" --no-defaults --datadir="$dir/data" ${userflag[*]} --socket="$dir/mysqld.sock" --port=$port \\
    --bind-address=127.0.0.1 --skip-name-resolve --pid-file="\$pidf" --log-error="$dir/server.log" \\
    --max-connections=300 --innodb-flush-log-at-trx-commit=1 --sync-binlog=1 --innodb-buffer-pool-size=256M \\
    </dev/null >>"$dir/server.out" 2>&1 &
  i=0; until mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -u root ping >/dev/null 2>&1; do
    i=\$((i + 1)); [ \$i -lt 300 ] || { echo "mariadbd did not start; see $dir/server.log" >&2; exit 1; }
    sleep 0.1
  done
}
CTL
  "$dir/ctl" start || { log "mysql: server did not start:"; tail -n 20 "$dir/server.log" >&2; return 1; }
  stops+=(stop_mysql)
  mariadb --no-defaults --socket="$dir/mysqld.sock" -u root >"$dir/setup.log" 2>&1 <<SQL || { log "mysql: setup failed:"; cat "$dir/setup.log" >&2; return 1; }
CREATE DATABASE once;
CREATE USER 'once'@'%' IDENTIFIED BY '$pw';
GRANT ALL PRIVILEGES ON once.* TO 'once'@'%';
SQL
  export ONCE_TEST_MYSQL="mysql://once:$pw@127.0.0.1:$port/once"
  export ONCE_TEST_MYSQL_CTL="$dir/ctl"
  log "mysql: private MariaDB on 127.0.0.1:$port ($((SECONDS - t0))s)"
}

stop_mysql() {
  "$ONCE_TEST_TMP/mysql/ctl" stop || true
}
