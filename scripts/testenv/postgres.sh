# shellcheck shell=bash
# Private throwaway PostgreSQL for the test command (sourced by scripts/test).
#
# start_postgres: unless ONCE_TEST_POSTGRES is set, initdb a cluster under $ONCE_TEST_TMP/postgres as an
# unprivileged user, start it on a free 127.0.0.1 port (never the system server's port or socket), create
# the non-superuser role "once" with a random password and its database "once", and export
#   ONCE_TEST_POSTGRES      postgres://once:PASSWORD@127.0.0.1:PORT/once?sslmode=disable
#   ONCE_TEST_POSTGRES_CTL  a script: ctl stop|start|restart (keeps the data), for restart tests
# It registers stop_postgres in the `stops` array.

# testenv_user prints the user private servers run as: "once-test" (created on first use) when we are
# root, because initdb and mariadbd refuse to run as root; the current user otherwise.
testenv_user() {
  if [ "$(id -u)" != 0 ]; then id -un; return 0; fi
  if ! id once-test >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin once-test >/dev/null 2>&1 ||
      id once-test >/dev/null 2>&1 || return 1
  fi
  echo once-test
}

# testenv_as USER CMD...: run CMD as USER (runuser when we are root and USER is someone else).
testenv_as() {
  local u=$1; shift
  # from /: the user may not be allowed into the current directory
  if [ "$(id -u)" = 0 ] && [ "$u" != root ]; then (cd / && runuser -u "$u" -- "$@"); else "$@"; fi
}

postgres_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

start_postgres() {
  if [ -n "${ONCE_TEST_POSTGRES:-}" ]; then return 0; fi
  local bin user dir port pw t0
  t0=$SECONDS
  bin=$(postgres_bin) || true
  if [ -z "$bin" ]; then
    need_pkg /usr/lib/postgresql/initdb postgresql || return 1
    bin=$(postgres_bin) || { log "postgres: no /usr/lib/postgresql/*/bin/initdb after install"; return 1; }
  fi
  user=$(testenv_user) || { log "postgres: cannot create user once-test"; return 1; }
  dir=$ONCE_TEST_TMP/postgres
  mkdir -p "$dir/data" "$dir/sock"
  chown -R "$user" "$dir" 2>/dev/null || true
  chmod 700 "$dir/data"
  port=$(free_port)
  pw=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  # Local socket: trust (setup only, socket dir private); TCP: passwords, so auth failures are testable.
  testenv_as "$user" "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || { log "postgres: initdb failed:"; tail -n 20 "$dir/initdb.log" >&2; return 1; }
  local opts="-k $dir/sock -p $port -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=300 -c shared_buffers=32MB"
  cat >"$dir/ctl" <<CTL
#!/bin/sh
# Stop or start the private PostgreSQL of this test run, keeping its data.
set -e
as() { if [ "\$(id -u)" = 0 ] && [ "$user" != root ]; then (cd / && runuser -u "$user" -- "\$@"); else "\$@"; fi; }
case "\$1" in
  stop) as "$bin/pg_ctl" stop -D "$dir/data" -m fast -w -t 30 >/dev/null ;;
  start) as "$bin/pg_ctl" start -D "$dir/data" -l "$dir/server.log" -w -t 30 -o "$opts" </dev/null >/dev/null 2>&1 ;;
  restart) "\$0" stop; "\$0" start ;;
  *) echo "usage: \$0 stop|start|restart" >&2; exit 2 ;;
esac
CTL
  chmod 755 "$dir/ctl"
  "$dir/ctl" start || { log "postgres: server did not start:"; tail -n 20 "$dir/server.log" >&2; return 1; }
  stops+=(stop_postgres)
  "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/sock" -p "$port" -U postgres -d postgres >"$dir/setup.log" 2>&1 <<SQL || { log "postgres: setup failed:"; cat "$dir/setup.log" >&2; return 1; }
CREATE ROLE once LOGIN PASSWORD '$pw' NOSUPERUSER NOCREATEDB NOCREATEROLE;
CREATE DATABASE once OWNER once;
SQL
  export ONCE_TEST_POSTGRES="postgres://once:$pw@127.0.0.1:$port/once?sslmode=disable"
  export ONCE_TEST_POSTGRES_CTL="$dir/ctl"
  log "postgres: private server on 127.0.0.1:$port ($((SECONDS - t0))s)"
}

stop_postgres() {
  local dir=$ONCE_TEST_TMP/postgres
  [ -f "$dir/data/postmaster.pid" ] || return 0
  "$dir/ctl" stop || true
}
