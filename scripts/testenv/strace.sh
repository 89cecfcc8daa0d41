# shellcheck shell=bash
# strace(1) for cmd/once's TestFsyncsPerRun, which counts the fsyncs of a whole once run on the
# embedded store (sourced by scripts/with-servers).
#
# start_strace: as root, install the strace package when it is missing. Nothing is started.

start_strace() {
  [ "$(id -u)" = 0 ] || return 0
  need_pkg strace --no-install-recommends strace || log "could not install strace; TestFsyncsPerRun will say so"
}
