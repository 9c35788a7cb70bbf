#!/usr/bin/env bash
# Prometheus and promtool from Debian's `prometheus` package (2.42), for the alerting rules' tests: the package is
# downloaded and unpacked (never installed: installing adds a system user and a service) into
# .cache/prometheus/, its two binaries at .cache/prometheus/usr/bin/{prometheus,promtool}. Both are static Go
# binaries; the package's dependencies are the web UI's JavaScript, which the tests do not use. Idempotent: a second
# run does nothing. Needs Debian's apt (root or not); without it, says so and fails.
#
# Usage: scripts/install_prometheus.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.cache/prometheus"
BIN="$DEST/usr/bin"

if [ -x "$BIN/promtool" ] && [ -x "$BIN/prometheus" ]; then
    exit 0
fi
command -v apt-get >/dev/null || { echo "install_prometheus: no apt-get here: cannot fetch Debian's prometheus" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"  # apt's download user (_apt) writes there when run as root
if ! (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1); then
    [ "$(id -u)" -eq 0 ] && apt-get update -qq
    (cd "$work" && apt-get download -qq prometheus >/dev/null)
fi
rm -rf "$DEST"
dpkg-deb -x "$work"/prometheus_*.deb "$DEST"
"$BIN/promtool" --version | head -1 | sed 's/^/install_prometheus: /'
