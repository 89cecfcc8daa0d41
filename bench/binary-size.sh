#!/usr/bin/env bash
# The size of the once binary per platform: the release build (make release: CGO_ENABLED=0, -trimpath,
# -buildvcs=false, -ldflags "-s -w"), the same unstripped (without -s -w), and, for this machine's
# platform, a plain `go build ./cmd/once` (cgo as the toolchain defaults, symbols and DWARF kept).
#
#   ./bench/binary-size.sh [GOOS/GOARCH ...]   (default linux/amd64 linux/arm64 darwin/arm64)
#
# Prints a Markdown table for docs/benchmarks.md. A platform not built before compiles every package
# (minutes on two cores); after that each build only links.
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=(linux/amd64 linux/arm64 darwin/arm64)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB (%d bytes)", b / 1048576, b }'; }
size() { stat -c %s "$1"; }

echo "| platform | release (stripped) | unstripped | plain go build |"
echo "|---|---|---|---|"
for p in "${platforms[@]}"; do
  os=${p%/*} arch=${p#*/}
  b() { CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOFLAGS= go build -trimpath -buildvcs=false "$@" ./cmd/once; }
  b -ldflags "-s -w" -o "$work/stripped"
  b -o "$work/unstripped"
  plain="—"
  if [ "$p" = "$(go env GOOS)/$(go env GOARCH)" ]; then
    GOFLAGS= go build -o "$work/plain" ./cmd/once
    plain=$(mib "$(size "$work/plain")")
  fi
  echo "| $p | $(mib "$(size "$work/stripped")") | $(mib "$(size "$work/unstripped")") | $plain |"
done
