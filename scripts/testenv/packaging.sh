# shellcheck shell=bash
# What release/'s tests use (sourced by scripts/with-servers): lintian for the Debian package,
# podman with runc to run the container image, ca-certificates for the image's CA bundle.
#
# start_packaging: as root, install what is missing. Nothing is started: podman runs each container
# of the test from a storage directory of the test's own.

start_packaging() {
  [ "$(id -u)" = 0 ] || return 0
  need_pkg lintian --no-install-recommends lintian || log "could not install lintian; release's deb test will say so"
  need_pkg update-ca-certificates --no-install-recommends ca-certificates || log "could not install ca-certificates"
  # runc, not crun: crun refuses the hybrid cgroup layout of the machines the tests run on.
  need_pkg podman --no-install-recommends podman runc || log "could not install podman; release's image test will say so"
  need_pkg runc --no-install-recommends runc || true
}
