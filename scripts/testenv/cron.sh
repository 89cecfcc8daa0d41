# shellcheck shell=bash
# Debian's cron daemon for cmd/once's TestUnderDebianCron (sourced by scripts/with-servers).
#
# start_cron: as root, install the cron package when /usr/sbin/cron is missing (without an MTA: the
# test mails through a sendmail stub). Nothing is started here: the test runs its own daemon, in a
# private mount namespace that shows it only the test's crontab.

start_cron() {
  [ "$(id -u)" = 0 ] || return 0
  need_pkg /usr/sbin/cron --no-install-recommends cron || log "could not install cron; TestUnderDebianCron will say so"
}
