"""One rank's view of a tensor-parallel group: its rank, the all-reduce the model calls, and the control
channel the leader drives the followers with.

Two process groups, as vLLM keeps them (``vllm/distributed/parallel_state.py``, ``GroupCoordinator``'s
``device_group`` / ``cpu_group``)::

    device group   NCCL on CUDA, gloo on CPU     the activations' all-reduce (the model's hot path); times out
    cpu group      always gloo, no timeout       pickled commands from rank 0 (tp_runner.py): a follower waits
                                                 there for as long as the engine has nothing to do

The all-reduce is selectable: "flat" is the library's own (``dist.all_reduce``: NCCL's ring/tree, gloo's
ring); "hierarchical" (leader-based) and "sharded" (reduce-scatter / per-rank exchange / all-gather) are
allreduce.py's two-level schemes with ``domain_size`` ranks per fast domain and the slow link optionally
compressed (bf16 / int8). ``link`` (a LinkModel) paces every transfer of the
hierarchical path, for emulated topologies only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from backends.link_model import LinkModel
from backends.torch.allreduce import COMPRESSIONS, PacedP2P, TorchP2P, hierarchical_all_reduce, sharded_all_reduce

COMMAND_WAIT = timedelta(days=3650)  # "forever" for a follower waiting for a command (an idle engine)
ALLREDUCE_KINDS = ("flat", "hierarchical", "sharded")


@dataclass(frozen=True, slots=True)
class TPConfig:
    """size: ranks (1 = no TP). allreduce: "flat" | "hierarchical" | "sharded". domain_size: ranks per fast
    domain (two-level kinds; 0 = all ranks of one host, i.e. ``size``). compression: the slow link's "none" |
    "bf16" | "int8" (two-level kinds only)."""

    size: int = 1
    allreduce: str = "flat"
    domain_size: int = 0
    compression: str = "none"

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"tp size must be a positive int, got {self.size!r}")
        if self.allreduce not in ALLREDUCE_KINDS:
            raise ValueError(f"allreduce must be one of {ALLREDUCE_KINDS}, got {self.allreduce!r}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {self.compression!r}")
        if self.compression != "none" and self.allreduce == "flat":
            raise ValueError("compression applies to the slow link of a hierarchical or sharded all-reduce only")
        if self.domain_size < 0 or (self.domain_size and self.size % self.domain_size):
            raise ValueError(f"domain_size {self.domain_size} must divide tp size {self.size}")

    @property
    def fast_domain(self) -> int:
        return self.domain_size or self.size


class TPGroup:
    """Built in each rank after ``dist.init_process_group`` (see ``init_tp``)."""

    def __init__(self, config: TPConfig, link: LinkModel | None = None, device: str = "cpu") -> None:
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized (call init_tp)")
        self.config = config
        self.device = device  # this rank's device
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        if self.size != config.size:
            raise ValueError(f"world size {self.size} != tp size {config.size}")
        self.device_group = dist.group.WORLD
        # the followers wait on this group for rank 0's next command as long as the engine is idle: no timeout
        self.cpu_group = dist.new_group(backend="gloo", timeout=COMMAND_WAIT)
        if dist.get_backend() == "nccl":  # create the communicator with every rank, before any partial batch
            dist.all_reduce(torch.zeros(1, device=device), group=self.device_group)  # of point-to-point ops
        p2p = TorchP2P()
        self.p2p = PacedP2P(p2p, link) if link is not None else p2p

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over the group, in place; returns x."""
        if self.config.allreduce == "flat":
            dist.all_reduce(x, group=self.device_group)
            return x
        if self.config.allreduce == "sharded":
            return sharded_all_reduce(self.p2p, x, self.config.fast_domain, self.config.compression)
        return hierarchical_all_reduce(self.p2p, x, self.config.fast_domain, self.config.compression)

    def broadcast_object(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank (pickled, over the cpu group)."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.cpu_group)
        return box[0]

    def barrier(self) -> None:
        dist.barrier(group=self.cpu_group)


def init_tp(
    rank: int,
    config: TPConfig,
    init_method: str,
    device: str = "cpu",
    link: LinkModel | None = None,
    timeout_s: float = 120.0,
) -> TPGroup:
    """Join the group (NCCL when ``device`` is CUDA, gloo otherwise) and return this rank's TPGroup.

    A collective that waits ``timeout_s`` (a rank died) raises instead of hanging.
    init_method: a torch.distributed URL every rank shares, e.g. ``tcp://10.0.0.1:29500`` or ``file:///tmp/x``.
    """
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=config.size, timeout=timedelta(seconds=timeout_s)
    )
    return TPGroup(config, link, device)


def close_tp() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
