#!/usr/bin/env bash
# Install what BCC needs on this machine kind (Debian 12, root). Idempotent: a second run does nothing.
#
#   1. Debian's python3-bpfcc (BCC 0.26; PyPI's `bcc` is an unrelated package).
#   2. Kernel headers, downloaded and unpacked (never installed: installing pulls a kernel image and
#      upgrades systemd) into .cache/kernel-headers/<version>/, merged common + arch folders.
#      BCC_KERNEL_SOURCE is pointed there by observe/ebpf/env.py.
#   3. Only BCC's `bcc` folder exposed to the venv: .venv/bcc-site/bcc -> /usr/lib/python3/dist-packages/bcc,
#      and a .pth line naming .venv/bcc-site.
#   4. tracefs mounted at /sys/kernel/tracing (not mounted at boot; tracepoints and uprobe detach need it).
#
# Usage: scripts/install_ebpf.sh [VENV]   (default .venv, relative to the repository root)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"
HEADERS_ROOT="$ROOT/.cache/kernel-headers"
BCC_DIST=/usr/lib/python3/dist-packages/bcc
TRACEFS=/sys/kernel/tracing

if [ "$(id -u)" -ne 0 ]; then
    echo "install_ebpf: not root, nothing done (eBPF needs root)" >&2
    exit 0
fi

log() { echo "install_ebpf: $*"; }

apt_updated=0
apt_update_once() {
    if [ "$apt_updated" -eq 0 ]; then
        apt-get update -qq
        apt_updated=1
    fi
}

# ---------------------------------------------------------------- 1. BCC
if [ ! -f "$BCC_DIST/__init__.py" ]; then
    log "installing python3-bpfcc"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends python3-bpfcc >/dev/null 2>&1; then
        apt_update_once
        apt-get install -y -qq --no-install-recommends python3-bpfcc >/dev/null
    fi
fi

# ---------------------------------------------------------------- 2. kernel headers
# The running kernel (6.18, Firecracker) has no Debian headers package; 6.1 headers work for uprobes and
# tracepoints (the programs read no kernel structs). Prefer an exact match when Debian has one.
pick_headers_version() {
    local kver exact
    kver="$(uname -r)"
    exact="$(apt-cache --names-only search "^linux-headers-${kver}\$" 2>/dev/null | awk '{print $1}' | head -1)"
    if [ -n "$exact" ]; then
        echo "$kver"
        return
    fi
    apt-cache --names-only search '^linux-headers-[0-9.]+-[0-9]+-amd64$' 2>/dev/null \
        | awk '{print $1}' | sed -e 's/^linux-headers-//' -e 's/-amd64$//' | sort -V | tail -1
}

existing="$(find "$HEADERS_ROOT" -mindepth 2 -maxdepth 2 -name .complete 2>/dev/null | head -1 || true)"
if [ -z "$existing" ]; then
    ver="$(pick_headers_version)"
    if [ -z "$ver" ]; then
        apt_update_once
        ver="$(pick_headers_version)"
    fi
    [ -n "$ver" ] || { echo "install_ebpf: no linux-headers package found by apt-cache" >&2; exit 1; }
    log "downloading linux-headers-${ver}-amd64 and linux-headers-${ver}-common"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    (
        cd "$tmp"
        # apt-get download runs as the _apt user when it can; a root-owned mktemp dir would refuse it
        chmod 755 "$tmp"
        if ! apt-get download -qq "linux-headers-${ver}-amd64" "linux-headers-${ver}-common" 2>/dev/null; then
            apt_update_once
            apt-get download -qq "linux-headers-${ver}-amd64" "linux-headers-${ver}-common"
        fi
        mkdir x
        for deb in ./*.deb; do dpkg -x "$deb" x; done
    )
    dest="$HEADERS_ROOT/$ver"
    rm -rf "$dest"
    mkdir -p "$dest"
    # common first, then arch on top (the arch folder holds generated headers, .config and symlinks into common)
    cp -a "$tmp/x/usr/src/linux-headers-${ver}-common/." "$dest/"
    cp -a --remove-destination "$tmp/x/usr/src/linux-headers-${ver}-amd64/." "$dest/"
    # the arch folder's symlinks point at ../linux-headers-*-common/...; the files are now here, drop dangling links
    find "$dest" -xtype l -delete
    # only x86's headers are ever opened; the other architectures and Module.symvers are 20 MB of nothing
    find "$dest/arch" -mindepth 1 -maxdepth 1 ! -name x86 -exec rm -rf {} +
    rm -f "$dest/Module.symvers"
    touch "$dest/.complete"
    log "headers in $dest"
fi

# ---------------------------------------------------------------- 3. bcc in the venv
if [ -x "$VENV/bin/python" ]; then
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    mkdir -p "$VENV/bcc-site"
    ln -sfn "$BCC_DIST" "$VENV/bcc-site/bcc"
    echo "$VENV/bcc-site" >"$site/zoo_bcc.pth"
else
    log "no venv at $VENV yet; observe/ebpf/env.py will load bcc from $BCC_DIST directly"
fi

# ---------------------------------------------------------------- 4. tracefs
if [ ! -e "$TRACEFS/available_events" ]; then
    mount -t tracefs tracefs "$TRACEFS"
    log "mounted tracefs at $TRACEFS"
fi

log "ok"
