"""Starting a tensor-parallel group of local processes (one per rank), for tests, benchmarks and one node.

``run_ranks(fn, config)`` spawns ``config.size`` processes (``multiprocessing`` spawn context, so no
forked torch state), each joins the group through a file rendezvous in a private temp directory (no port
to race for), runs ``fn(group, *args)`` and sends its result back; the parent gets the results in rank
order, or a RuntimeError carrying the first failing rank's traceback. Every child is ended (terminate,
then kill) before it returns, whatever happened.

``tp_generate`` is the whole leader/follower life (tp_runner.py) driven greedily by
backends/runner_driver.py: rank 0 returns the generated ids and step times, followers the steps they ran.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends.link_model import LinkModel
from backends.torch.tp_group import TPConfig, TPGroup


def _rank_main(
    rank: int,
    config: TPConfig,
    init_method: str,
    fn: Callable[..., Any],
    args: tuple,
    link: LinkModel | None,
    num_threads: int,
    device: str,
    collective_timeout_s: float,
    results: Any,
) -> None:
    import torch

    from backends.torch.tp_group import close_tp, init_tp

    torch.set_num_threads(num_threads)
    try:
        group = init_tp(rank, config, init_method, device=device, link=link, timeout_s=collective_timeout_s)
        # pickled here, by value: the queue's own pickler would share tensors by file descriptor, which the
        # parent can only fetch while this process lives (a "connection reset" once it has exited)
        results.put((rank, True, pickle.dumps(fn(group, *args))))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
    finally:
        close_tp()


def run_ranks(
    fn: Callable[..., Any],
    config: TPConfig,
    args: tuple = (),
    *,
    link: LinkModel | None = None,
    num_threads: int = 1,
    device: str = "cpu",
    timeout_s: float = 300.0,
    collective_timeout_s: float = 120.0,
) -> list[Any]:
    """``fn(group, *args)`` on every rank of a fresh local group; the results by rank. ``fn`` and ``args``
    must pickle (a module-level function). timeout_s: for the whole run; collective_timeout_s: for one
    all-reduce (init_tp)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="zoo-tp-") as tmp:
        init_method = (Path(tmp) / "rendezvous").as_uri()
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(
                    r,
                    config,
                    init_method,
                    fn,
                    args,
                    link,
                    num_threads,
                    _rank_device(device, r),
                    collective_timeout_s,
                    results,
                ),
                daemon=True,
            )
            for r in range(config.size)
        ]
        for p in procs:
            p.start()
        try:
            return _collect(results, procs, config.size, timeout_s)
        finally:
            for p in procs:
                p.join(timeout=5.0)
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=5.0)
                if p.is_alive():
                    p.kill()
                    p.join()


def _rank_device(device: str, rank: int) -> str:
    return f"cuda:{rank}" if device == "cuda" else device


def _collect(results: Any, procs: list, size: int, timeout_s: float) -> list[Any]:
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    while len(out) < size:
        try:
            rank, ok, value = results.get(timeout=0.5)
        except queue.Empty:
            if time.monotonic() > deadline:
                raise TimeoutError(f"TP group: {size - len(out)} ranks did not finish in {timeout_s} s") from None
            dead = [i for i, p in enumerate(procs) if i not in out and not p.is_alive() and p.exitcode != 0]
            if dead and results.empty():
                raise RuntimeError(f"TP rank {dead[0]} died (exit code {procs[dead[0]].exitcode})") from None
            continue
        if not ok:
            raise RuntimeError(f"TP rank {rank} failed:\n{value}")
        out[rank] = pickle.loads(value)
    return [out[r] for r in range(size)]


def tp_generate(
    group: TPGroup,
    source: Any,
    prompts: list[list[int]],
    num_new: int,
    state_dict: dict | None = None,
    dtype: str = "float32",
    block_size: int = 4,
    pause_s: float = 0.0,
) -> Any:
    """One rank of a greedy TP generation. source: a ModelConfig (weights from ``state_dict``: HF-named
    tensors, or the path of a ``torch.save``d dict, memory-mapped) or a checkpoint path (every rank loads
    it and keeps its shard). pause_s: rank 0 idles this long before it starts (the followers wait)."""
    from backends.runner_driver import drive_greedy
    from backends.torch.runner import TorchModelRunner
    from backends.torch.tp_runner import TPLeaderRunner, follow

    if isinstance(source, str):
        from backends.checkpoint import load_checkpoint

        source = load_checkpoint(source)
    if isinstance(state_dict, str):
        import torch

        state_dict = torch.load(state_dict, mmap=True, weights_only=True)
    runner = TorchModelRunner(source, dtype, group.device, state_dict=state_dict, progress=False, tp=group)
    if group.rank != 0:
        return follow(runner, group)
    leader = TPLeaderRunner(runner, group)
    time.sleep(pause_s)
    try:
        return drive_greedy(leader, prompts, num_new, block_size=block_size)
    finally:
        leader.close()


def tp_embed(group: TPGroup, config: Any, prompts: list[list[int]], state_dict: dict) -> Any:
    """One rank of a TP step that embeds ``prompts`` (engine/embeddings.py): rank 0 returns the vectors."""
    from backends.runner_driver import drive_embed
    from backends.torch.runner import TorchModelRunner
    from backends.torch.tp_runner import TPLeaderRunner, follow

    runner = TorchModelRunner(config, "float32", group.device, state_dict=state_dict, progress=False, tp=group)
    if group.rank != 0:
        return follow(runner, group)
    leader = TPLeaderRunner(runner, group)
    try:
        return drive_embed(leader, prompts)
    finally:
        leader.close()


def run_sequence(group: TPGroup, calls: list[tuple[Callable[..., Any], tuple]]) -> list[Any]:
    """Several ``fn(group, *args)`` one after the other on the same group (one process start for all)."""
    return [fn(group, *args) for fn, args in calls]


def allreduce_variants(group: TPGroup, numel: int, domain_size: int, seed: int = 0) -> dict[str, Any]:
    """Every all-reduce on the same per-rank input (``randn`` seeded by seed + rank): {"input", "library"
    (dist.all_reduce), "ring", "hierarchical_*", "sharded_*" (* = none|bf16|int8)}, to check they agree."""
    import torch
    import torch.distributed as dist

    from backends.torch.allreduce import COMPRESSIONS, hierarchical_all_reduce, ring_all_reduce, sharded_all_reduce

    x = torch.randn(numel, generator=torch.Generator().manual_seed(seed + group.rank))
    out = {"input": x.clone(), "library": x.clone(), "ring": ring_all_reduce(group.p2p, x.clone())}
    dist.all_reduce(out["library"])
    for c in COMPRESSIONS:
        out[f"hierarchical_{c}"] = hierarchical_all_reduce(group.p2p, x.clone(), domain_size, c)
        out[f"sharded_{c}"] = sharded_all_reduce(group.p2p, x.clone(), domain_size, c)
    return out
