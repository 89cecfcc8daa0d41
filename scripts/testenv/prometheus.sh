# shellcheck shell=bash
# Prometheus and promtool for internal/metrics' tests (sourced by scripts/with-servers).
#
# start_prometheus: as root, install the prometheus package when the prometheus binary is missing
# (it brings promtool). Nothing is started here: TestRealPrometheus runs its own server on a free
# loopback port, scraping the collector it serves, and TestRulesPromtool checks
# deploy/prometheus/once-rules.yml.

start_prometheus() {
  [ "$(id -u)" = 0 ] || return 0
  if need_pkg prometheus --no-install-recommends prometheus; then
    log "prometheus: $(prometheus --version 2>&1 | head -n 1)"
  else
    log "could not install prometheus; internal/metrics' Prometheus tests will say so"
  fi
}
