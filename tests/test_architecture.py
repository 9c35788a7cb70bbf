"""The house rules (docs/ARCHITECTURE.md), checked: rooms in layers with no import circles, a sans-IO
engine and fleet core, files of one concept (< 600 lines), and an architecture document that names every
room."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600


def _contracts() -> dict:
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]


def test_import_contracts_hold():
    """import-linter's contracts from pyproject.toml: layers, forbidden imports, acyclic packages. In a child
    process: the linter reconfigures logging, which would silence other tests' loggers."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache", "pyproject.toml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_every_room_is_in_a_layer():
    """A new top-level package must be placed in the layer order (else nothing checks its imports)."""
    config = _contracts()
    layered = {room.strip() for layer in config["contracts"][0]["layers"] for room in layer.split("|")}
    packages = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py") if p.parent.name != "tests"}
    assert packages == layered == set(config["root_packages"])


def test_no_python_file_is_over_the_limit():
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.split()
    too_long = {
        f: n
        for f in tracked
        if (REPO_ROOT / f).exists() and (n := len((REPO_ROOT / f).read_text().splitlines())) > MAX_LINES
    }
    assert not too_long, f"split these by concept (> {MAX_LINES} lines): {too_long}"


@pytest.mark.parametrize(
    "room", sorted({room.strip() for layer in _contracts()["contracts"][0]["layers"] for room in layer.split("|")})
)
def test_the_architecture_document_describes_every_room(room):
    text = (REPO_ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert f"`{room}/`" in text


@pytest.mark.parametrize(
    ("importer", "imported", "why"),
    [
        ("agent.engine_thread", "agent.node_core", "the agent's engine thread drives the node core"),
        ("sim.des", "agent.node_core", "the simulator drives the same node core"),
        ("sim.des", "controlplane.request_intake", "the simulator places requests through the control plane's intake"),
        ("sim.des", "controlplane.admission", "the simulator admits as the control plane does (429s included)"),
        ("controlplane.server", "controlplane.request_path", "the control plane's requests take the request path"),
        ("controlplane.request_path", "controlplane.request_intake", "the request path places requests there"),
        ("transport.messages", "engine.sampling_params", "the wire carries the validated SamplingParams itself"),
    ],
)
def test_one_path_per_request(importer, imported, why):
    import grimp

    graph = grimp.build_graph(importer.split(".")[0], imported.split(".")[0], cache_dir=None)  # never stale
    assert graph.direct_import_exists(importer=importer, imported=imported), why
