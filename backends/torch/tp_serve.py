"""A tensor-parallel engine on one host: this process is rank 0 (the engine core), ranks 1..N-1 are child
processes that follow it (tp_runner.py).

``start_tp_runner`` starts the followers as ``python -m backends.torch.tp_serve --rank r ...`` (subprocesses,
not multiprocessing: the parent may be any entry point), joins the group itself as rank 0 through a file
rendezvous in a private temp directory, builds its shard, and returns a ``TPLeaderRunner`` for LLMEngine.
Each follower loads the same checkpoint, keeps its shard and runs rank 0's commands until "stop".
``TPLeaderRunner.close`` (also registered at exit) stops the followers; ``stop_processes`` ends any that
outlive it; a follower whose parent died exits by itself. On CUDA, rank r uses ``cuda:r``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from backends.torch.tp_group import TPConfig, close_tp, init_tp
from backends.torch.tp_runner import TPLeaderRunner, follow
from backends.torch.tp_shard import check_tp_size


def _rank_device(device: str, rank: int) -> str:
    if device == "cuda":
        return f"cuda:{rank}"
    if device.startswith("cuda:"):
        return f"cuda:{int(device.split(':', 1)[1]) + rank}"
    return device


def _config_args(tp: TPConfig) -> list[str]:
    return [
        "--tp",
        str(tp.size),
        "--allreduce",
        tp.allreduce,
        "--domain-size",
        str(tp.domain_size),
        "--compression",
        tp.compression,
    ]


def start_tp_runner(
    checkpoint: Any,
    tp: TPConfig,
    dtype: str = "float32",
    device: str = "cpu",
    num_threads: int | None = None,
    progress: bool = True,
    *,
    seed: int = 0,
) -> TPLeaderRunner:
    """Rank 0's runner of a ``tp.size``-way model; the followers run in child processes."""
    import torch

    from backends.torch.runner import TorchModelRunner
    from transport.process import stop_processes

    check_tp_size(checkpoint.config, tp.size)  # refuse before starting anything
    tmp = Path(tempfile.mkdtemp(prefix="zoo-tp-"))
    init_method = (tmp / "rendezvous").as_uri()
    common = ["--init", init_method, "--model", str(checkpoint.path), "--dtype", dtype, "--device", device]
    if num_threads is not None:
        common += ["--num-threads", str(num_threads)]
    follower = [sys.executable, "-m", "backends.torch.tp_serve"]
    procs = [subprocess.Popen([*follower, "--rank", str(r), *common, *_config_args(tp)]) for r in range(1, tp.size)]

    def cleanup() -> None:
        deadline = time.monotonic() + 10.0  # followers told "stop" leave by themselves; the rest are ended
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        stop_processes(procs)
        shutil.rmtree(tmp, ignore_errors=True)

    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        group = init_tp(0, tp, init_method, device=_rank_device(device, 0))
        runner = TorchModelRunner(
            checkpoint, dtype, _rank_device(device, 0), progress=progress, num_threads=num_threads, tp=group, seed=seed
        )
    except BaseException:
        cleanup()
        raise
    leader = TPLeaderRunner(runner, group)
    leader.processes = procs
    leader.on_close += [cleanup, close_tp]
    atexit.register(leader.close)
    return leader


def _exit_with_parent(period_s: float = 1.0) -> None:
    """A follower waits for commands without a timeout; if rank 0's process dies, nothing would tell it."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period_s)
        os._exit(1)

    threading.Thread(target=watch, name="tp-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one follower rank of a tensor-parallel engine (started by rank 0)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--init", required=True, help="the torch.distributed rendezvous URL")
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--tp", type=int, required=True)
    p.add_argument("--allreduce", default="flat")
    p.add_argument("--domain-size", type=int, default=0)
    p.add_argument("--compression", default="none")
    args = p.parse_args(argv)

    import torch

    from backends.checkpoint import load_checkpoint
    from backends.torch.runner import TorchModelRunner

    _exit_with_parent()
    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    tp = TPConfig(size=args.tp, allreduce=args.allreduce, domain_size=args.domain_size, compression=args.compression)
    device = _rank_device(args.device, args.rank)
    group = init_tp(args.rank, tp, args.init, device=device)
    try:
        runner = TorchModelRunner(
            load_checkpoint(args.model), args.dtype, device, progress=False, num_threads=args.num_threads, tp=group
        )
        follow(runner, group)
    finally:
        close_tp()
    return 0


if __name__ == "__main__":
    sys.exit(main())
