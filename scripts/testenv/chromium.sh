# shellcheck shell=bash
# Debian's Chromium for cmd/once's TestServeDashboardInChromium (sourced by scripts/with-servers).
#
# start_chromium: as root, install the chromium package when /usr/bin/chromium is missing (without
# its desktop recommends; with a Latin and a small CJK font, for the screenshots of the English and
# 简体中文 pages), and say in one line which browser the test drives. Nothing is started here: the
# test runs its own headless browser (chromedp) with a private profile.

start_chromium() {
  local t0=$SECONDS
  if [ "$(id -u)" = 0 ]; then
    need_pkg /usr/bin/chromium --no-install-recommends chromium fonts-liberation fonts-wqy-microhei ||
      log "chromium: could not install chromium"
    [ -n "$(fc-list :lang=zh 2>/dev/null)" ] || need_pkg /nonexistent --no-install-recommends fonts-wqy-microhei ||
      log "chromium: could not install a CJK font; the 简体中文 screenshots will show boxes"
  fi
  if [ -x /usr/bin/chromium ]; then
    log "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -n 1) for TestServeDashboardInChromium ($((SECONDS - t0))s)"
  else
    log "chromium: /usr/bin/chromium is missing (install the chromium package); TestServeDashboardInChromium will say so"
  fi
}
