"""The package as a user installs it: a wheel built from the repository, installed into a fresh venv, runs
`zoo sim --trace conv` from a folder outside the repository (the traces are package data, sim/traces/).

Nothing is downloaded: the wheel is built without build isolation (this environment's setuptools) and the
fresh venv sees this environment's installed dependencies through a ``.pth`` line (not the editable install
of the repository itself: a path line in a ``.pth`` file adds the folder, whose own ``.pth`` files are not run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACE_DATA = {"sim/traces/azure_conv_2023.csv.gz", "sim/traces/azure_code_2023.csv.gz"}
TRACE_DATA |= {"sim/traces/mooncake_synthetic.jsonl.gz", "sim/traces/README.md", "sim/traces/LICENSE-Apache-2.0.txt"}


def _run(argv: list[str], cwd: Path, timeout_s: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert result.returncode == 0, (
        f"{argv} exited with {result.returncode}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    )
    return result


def _copy_sources(dest: Path) -> None:
    """The repository's tracked and untracked-but-not-ignored files (no build leftovers, no caches)."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    archive = dest.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for name in files:
            if name and (REPO_ROOT / name).is_file():
                tar.add(REPO_ROOT / name, arcname=name)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_runs_zoo_sim_on_a_packaged_trace(tmp_path):
    pytest.importorskip("setuptools")
    src, wheels, venv, outside = (tmp_path / n for n in ("src", "wheels", "venv", "outside"))
    _copy_sources(src)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."], src)
    (wheel,) = wheels.glob("silicon_zoo-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert names >= TRACE_DATA, f"package data missing from the wheel: {TRACE_DATA - names}"
    assert not any(n.startswith(("tests/", "deploy/")) for n in names)

    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    purelib = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip()
    )
    (purelib / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # no --no-deps: pip checks that the wheel's declared dependencies are all installed (offline: --no-index)
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "-q", str(wheel)], tmp_path)

    outside.mkdir()
    where = _run([str(python), "-c", "import sim.workload as w; print(w.__file__)"], outside).stdout.strip()
    assert Path(where).is_relative_to(venv), f"sim imported from {where}, not from the installed wheel"
    # one policy keeps it cheap; the trace is read from the installed package
    out = _run(
        [str(venv / "bin" / "zoo"), "sim", "--trace", "conv", "--duration", "5", "--policy", "round_robin", "--json"],
        outside,
    )
    report = json.loads(out.stdout)
    assert report["info"]["trace"] == "conv" and report["info"]["num_requests"] > 100
    (run,) = report["policies"]
    assert run["policy"] == "round_robin" and run["num_requests"] == report["info"]["num_requests"]
    assert run["num_unserved"] == 0
