# shellcheck shell=bash
# systemd-analyze for deploy/'s test of the unit files (sourced by scripts/with-servers).
#
# start_systemd: as root, install the systemd package when systemd-analyze is missing. Nothing is
# started: the test only runs `systemd-analyze verify` on the units, under a private --root.

start_systemd() {
  [ "$(id -u)" = 0 ] || return 0
  need_pkg systemd-analyze --no-install-recommends systemd || log "could not install systemd; deploy's unit test will say so"
}
