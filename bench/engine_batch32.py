"""The torch engine's batch-1 and uniform batch-32 decode alone (fp32), the two parts of `zoo bench engine`
that issue 14's "32 uniform requests >= 8x the engine's batch-1 decode rate" compares, in one process.

The same functions as `zoo bench engine` (bench/engine.py: the engine it builds, ``_zoo_batch1``; and
bench/engine_jax.py's ``uniform_concurrent``: 32 requests of 64 prompt tokens, 64 greedy tokens each, all
arriving at t=0), without the HF, JAX and bf16 parts, so before/after runs can alternate within minutes on a
shared machine. Each part runs once unmeasured first (warm caches, the thread chooser's first samples). Also
reported: process CPU seconds of each measured part and the 1-minute load average when it started.

Run as a file so that the code under test comes from PYTHONPATH (another checkout for a baseline)::

    PYTHONPATH=/path/to/checkout python bench/engine_batch32.py --json [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def run(model: str | None, threads: int, n_out: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    from bench.engine import _build, _zoo_batch1
    from bench.engine_jax import _cpu_s, uniform_concurrent

    engine = _build(model, "float32", num_device_blocks=2048, num_host_blocks=0)
    _zoo_batch1(engine, 8)
    uniform_concurrent(engine, 8, seed_base=5000)
    load, cpu0 = os.getloadavg()[0], _cpu_s()
    batch1 = _zoo_batch1(engine, n_out)
    batch1["cpu_s"], batch1["loadavg_1m"] = _cpu_s() - cpu0, load
    uniform = uniform_concurrent(engine, n_out, seed_base=1000)
    return {
        "threads": threads,
        "kernels": getattr(engine.runner, "kernels", ""),
        "batch1": batch1,
        "uniform32": uniform,
        "uniform32_vs_own_batch1": uniform["decode_tok_per_s"] / batch1["decode_tok_per_s"],
        "time_utc": time.strftime("%H:%M:%S", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    r = run(args.model, args.threads, args.output_tokens)
    if args.json:
        print(json.dumps(r))
        return
    b1, u = r["batch1"], r["uniform32"]
    print(
        f"batch 1: {b1['decode_tok_per_s']:.1f} tok/s; 32 uniform: {u['decode_tok_per_s']:.1f} tok/s "
        f"= {r['uniform32_vs_own_batch1']:.2f}x (threads {r['threads']}, load {u['loadavg_1m']:.1f})"
    )


if __name__ == "__main__":
    sys.path[:] = [x for x in sys.path if not x.endswith("/bench")]  # run as a file: bench/ is not a root
    main()
