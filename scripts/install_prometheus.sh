#!/usr/bin/env bash
# Prometheus, promtool, Alertmanager and amtool from Debian's `prometheus` (2.42) and `prometheus-alertmanager` (0.25)
# packages, for the alerting rules' and routes' tests: the packages are downloaded and unpacked (never installed:
# installing adds system users and services) into .cache/prometheus/, their binaries at
# .cache/prometheus/usr/bin/{prometheus,promtool,prometheus-alertmanager,amtool}. All are static Go binaries; the
# packages' dependencies are web UIs' JavaScript, which the tests do not use. Idempotent: a second run does nothing.
# Needs Debian's apt (root or not); without it, says so and fails.
#
# Usage: scripts/install_prometheus.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.cache/prometheus"
BIN="$DEST/usr/bin"
PACKAGES=(prometheus prometheus-alertmanager)

# Debian's alertmanager reads its notification templates from this path, compiled in: as root, Debian's two template
# files are put there (the package would put them there too); not root, the Alertmanager tests say so and skip.
TEMPLATES=/usr/share/prometheus/alertmanager
place_templates() {
    if [ ! -f "$TEMPLATES/default.tmpl" ] && [ "$(id -u)" -eq 0 ]; then
        mkdir -p "$TEMPLATES"
        cp "$DEST/usr/share/prometheus/alertmanager/"*.tmpl "$TEMPLATES/"
    fi
}

if [ -x "$BIN/promtool" ] && [ -x "$BIN/prometheus" ] && [ -x "$BIN/amtool" ] && [ -x "$BIN/prometheus-alertmanager" ]; then
    place_templates
    exit 0
fi
command -v apt-get >/dev/null || { echo "install_prometheus: no apt-get here: cannot fetch Debian's prometheus" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"  # apt's download user (_apt) writes there when run as root
if ! (cd "$work" && apt-get download -qq "${PACKAGES[@]}" >/dev/null 2>&1); then
    [ "$(id -u)" -eq 0 ] && apt-get update -qq
    (cd "$work" && apt-get download -qq "${PACKAGES[@]}" >/dev/null)
fi
rm -rf "$DEST"
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$DEST"
done
place_templates
"$BIN/promtool" --version | head -1 | sed 's/^/install_prometheus: /'
"$BIN/amtool" --version 2>&1 | head -1 | sed 's/^/install_prometheus: /'
