"""The CPU half of bench/gpu_check.py, in a fresh interpreter where msgspec, pyzmq, gguf and anyio cannot be
imported (the H200 it is made for has none of them): it must run, check, and print one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# a None entry in sys.modules makes `import name` raise ImportError: the closure is checked, not assumed
RUN = """
import sys
for name in ("msgspec", "zmq", "gguf", "anyio", "tokenizers", "prometheus_client", "transformers"):
    sys.modules[name] = None
from bench.gpu_check import main
code = main(sys.argv[1:])
loaded = sorted({m.split(".")[0] for m in sys.modules if sys.modules[m] is not None})
print("LOADED", " ".join(loaded), file=sys.stderr)
sys.exit(code)
"""


def _run(*args: str) -> tuple[dict, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", RUN, "--device", "cpu", "--quick", "--steps", "2", *args],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = set(proc.stderr.rsplit("LOADED", 1)[1].split())
    return json.loads(proc.stdout), loaded


def _interpreter_runs_dynamic_loops() -> bool:
    """Triton before 3.9 interprets every scalar as a 1-element array, and NumPy 2 refuses those as a loop's
    bounds, so no kernel with a data-dependent loop runs under its interpreter (seen on the lent GPU host:
    triton 3.6, NumPy 2.5; its CUDA half runs instead). `make test` installs triton 3.9."""
    triton = pytest.importorskip("triton")
    return tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (3, 9)


@pytest.mark.skipif(not _interpreter_runs_dynamic_loops(), reason="this triton's interpreter cannot run the kernels")
def test_cpu_half_runs_without_the_projects_other_dependencies():
    report, loaded = _run("--attention-backend", "triton_paged", "--bandwidth-gbps", "30")
    assert not loaded & {"msgspec", "zmq", "gguf", "anyio", "agent", "controlplane", "transport", "observe"}
    assert report["ok"] is True
    assert report["kernels"].startswith("triton_paged")  # forced: the Triton kernel vs the CPU gather path
    logits = report["logits_vs_cpu"]
    assert logits["kernel"] == "triton_paged" and logits["argmax_agree_steps"] == "6/6"
    assert logits["max_abs_diff"] < 1e-4
    assert report["triton_vs_sdpa"]["float32"]["ok"] is True
    assert report["triton_lora"]["float32"]["ok"] is True
    decode = {d["batch"]: d for d in report["decode"]}
    assert set(decode) == {1, 32}
    for d in decode.values():
        assert d["eager_tok_per_s"] > 0 and d["eager_roofline_fraction"] > 0
        assert "graph_tok_per_s" not in d  # no CUDA here: no graphs
    profiler = report["profiler"]  # the node profiler's torch session, without msgspec (its config duck-typed)
    assert profiler["ok"] is True and profiler["steps_in_trace"] == ["zoo_step_1", "zoo_step_2", "zoo_step_3"]
    assert profiler["op_table"] is True and profiler["kernel_events"] == 0  # no CUDA here: no kernels
