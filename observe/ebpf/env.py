"""Where BCC, the kernel headers and tracefs are on this host, and whether eBPF can run at all.

The one module of observe/ebpf that reads or sets environment variables. What it expects is what
scripts/install_ebpf.sh (``make ebpf``) sets up, as root::

    /usr/lib/python3/dist-packages/bcc      Debian's python3-bpfcc (PyPI's `bcc` is an unrelated package)
    <repo>/.cache/kernel-headers/<ver>/     linux-headers-<ver>-{common,amd64} unpacked and merged
                                            → BCC_KERNEL_SOURCE (no headers live under /lib/modules here)
    /sys/kernel/tracing                     tracefs (not mounted at boot; mounted here when root)

``load_bcc()`` is the only way the probes import bcc: it points BCC_KERNEL_SOURCE at the headers first
(BCC reads it when it compiles a program, not when it is imported, but setting it first costs nothing).
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADERS_ROOT = REPO_ROOT / ".cache" / "kernel-headers"
DEBIAN_BCC_DIR = Path("/usr/lib/python3/dist-packages/bcc")
TRACEFS = Path("/sys/kernel/tracing")
INSTALL_HINT = "run `make ebpf` (scripts/install_ebpf.sh) as root"


def is_root() -> bool:
    return os.geteuid() == 0


def find_kernel_headers() -> Path | None:
    """BCC_KERNEL_SOURCE if already set to a folder, else the newest complete folder the install script made."""
    preset = os.environ.get("BCC_KERNEL_SOURCE")
    if preset and Path(preset, "include").is_dir():
        return Path(preset)
    uname = os.uname().release
    if Path(f"/lib/modules/{uname}/build/include").is_dir():
        return Path(f"/lib/modules/{uname}/build")
    done = sorted(HEADERS_ROOT.glob("*/.complete"), key=lambda p: p.stat().st_mtime, reverse=True)
    return done[0].parent if done else None


def tracefs_mounted() -> bool:
    return (TRACEFS / "available_events").exists()


def mount_tracefs() -> bool:
    """Mount tracefs when it is not (root only). True when it is mounted afterwards."""
    if tracefs_mounted():
        return True
    if not is_root():
        return False
    subprocess.run(["mount", "-t", "tracefs", "tracefs", str(TRACEFS)], check=False, capture_output=True)
    return tracefs_mounted()


def _import_bcc() -> ModuleType | None:
    try:
        return importlib.import_module("bcc")
    except ImportError:
        pass
    # The venv lacks the .pth link: load Debian's `bcc` folder alone (not all of dist-packages).
    init = DEBIAN_BCC_DIR / "__init__.py"
    if not init.exists():
        return None
    spec = importlib.util.spec_from_file_location("bcc", init, submodule_search_locations=[str(DEBIAN_BCC_DIR)])
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bcc"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules["bcc"]
        return None
    return module


def ebpf_status() -> tuple[bool, str]:
    """(available, reason). The reason says exactly what is missing; "ok: ..." when available.

    Side effects, as root only: tracefs is mounted when it is not, and BCC_KERNEL_SOURCE is set.
    """
    if not is_root():
        return False, f"not root (euid {os.geteuid()}); eBPF needs root"
    headers = find_kernel_headers()
    if _import_bcc() is None:
        return False, f"no BCC: python3-bpfcc's bcc package not importable (looked in {DEBIAN_BCC_DIR}); {INSTALL_HINT}"
    if headers is None:
        return False, f"no kernel headers under /lib/modules or {HEADERS_ROOT}; {INSTALL_HINT}"
    if not mount_tracefs():
        return False, f"no tracefs at {TRACEFS} and mounting it failed"
    os.environ["BCC_KERNEL_SOURCE"] = str(headers)
    return True, f"ok: BCC, headers {headers}, tracefs {TRACEFS}"


def load_bcc() -> ModuleType:
    """The bcc module, ready to compile. Raises RuntimeError with the reason when eBPF is unavailable."""
    available, reason = ebpf_status()
    if not available:
        raise RuntimeError(f"eBPF unavailable: {reason}")
    return sys.modules["bcc"]


def libzmq_paths_of(pid: int) -> list[str]:
    """Absolute paths of every libzmq mapped into process ``pid`` (pyzmq bundles its own copy)."""
    paths: set[str] = set()
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and "/libzmq" in parts[5]:
                    paths.add(parts[5].strip())
    except OSError:
        return []
    return sorted(p for p in paths if not p.endswith("(deleted)"))


def bundled_libzmq() -> str:
    """The libzmq this interpreter's pyzmq loads (absolute path)."""
    import zmq

    libs_dir = Path(zmq.__file__).resolve().parent.parent / "pyzmq.libs"
    found = sorted(glob.glob(str(libs_dir / "libzmq*.so*")))
    if found:
        return found[0]
    mine = libzmq_paths_of(os.getpid())
    if mine:
        return mine[0]
    raise FileNotFoundError(f"no libzmq found in {libs_dir} nor in this process's mappings")
