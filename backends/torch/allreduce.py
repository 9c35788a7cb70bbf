"""All-reduce (sum) algorithms written over point-to-point exchanges, so one implementation runs on NCCL,
on gloo, and on emulated links (``PacedP2P``: gloo paced by a LinkModel).

``ring_all_reduce`` (flat): the bandwidth-optimal ring of Patarasuk & Yuan (2009), as NCCL's ring
(``src/device/all_reduce.h``) runs it: reduce-scatter then all-gather, 2(N-1) steps of nbytes/N each::

    step s of reduce-scatter: rank r sends chunk (r - s) mod N to r+1, adds chunk (r - s - 1) mod N from r-1
    step s of all-gather:     rank r sends chunk (r + 1 - s) mod N to r+1, takes chunk (r - s) mod N from r-1

``hierarchical_all_reduce``: leader-based two-level, as the issue describes it (and as Horovod's
``NCCLHierarchicalAllreduce``, horovod/common/ops/nccl_operations.cc v0.28, treats the elements left over
after its reduce-scatter: ncclReduce to a root, MPI all-reduce between roots, ncclBcast)::

    1. reduce in the fast domain:     members send x to the domain's leader, which sums in rank order
    2. leaders over the slow link:    every leader sends its (compressed) partial to every other leader and
                                      sums all partials, decompressed, in leader order (fp32), so every
                                      leader ends with the same bits
    3. broadcast in the fast domain:  the leader sends the sum back to its members

``sharded_all_reduce``: Horovod's main hierarchical path (ncclReduceScatter in the node, MPI all-reduce of
each rank's shard between nodes, ncclAllGather), written over the same exchanges::

    1. ring reduce-scatter in the domain:   local rank j ends owning the domain sum of chunk (j + 1) mod k
    2. peers over the slow link:            ranks with the same j in every domain exchange that chunk
                                            (compressed) and sum it in domain order: 1/k of the bytes per rank
    3. ring all-gather in the domain

Compression on the slow link only (step 2): "none"; "bf16" (relative error <= 2^-8 per partial); "int8"
(symmetric, one fp32 scale per ``INT8_BLOCK`` elements: absolute error <= absmax(block) / 254 per partial).
``compression_tolerance`` states the bound the tests check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist

from backends.link_model import INT8_BLOCK, LinkModel

COMPRESSIONS = ("none", "bf16", "int8")


class P2P(Protocol):
    """Point-to-point exchanges between the ranks of one group (ranks are group ranks)."""

    rank: int
    size: int

    def exchange(self, sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]]) -> None:
        """Post every send and receive at once; return when all are done (recv buffers are filled)."""


class TorchP2P:
    """P2P over torch.distributed (NCCL or gloo) within ``group`` (None = the default group)."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._global = [dist.get_global_rank(group, r) for r in range(self.size)] if group is not None else None

    def _peer(self, r: int) -> int:
        return r if self._global is None else self._global[r]

    def exchange(self, sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]]) -> None:
        ops = [dist.P2POp(dist.isend, t, self._peer(p), self.group) for p, t in sends]
        ops += [dist.P2POp(dist.irecv, t, self._peer(p), self.group) for p, t in recvs]
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()


class PacedP2P:
    """Emulated links: each exchange lasts at least as long as its slowest transfer under ``link``.

    The bytes really move (over ``inner``); then the rank sleeps until ``t0 + max(link.seconds(...))`` over
    the exchange's sends and receives, so a receiver cannot use data before the modelled link would have
    delivered it. This is a software rate limiter on every link (fast and slow alike), not a kernel shaper.
    """

    def __init__(
        self,
        inner: P2P,
        link: LinkModel,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner = inner
        self.link = link
        self.rank = inner.rank
        self.size = inner.size
        self._clock = clock
        self._sleep = sleep

    def exchange(self, sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]]) -> None:
        t0 = self._clock()
        self.inner.exchange(sends, recvs)
        out: dict[int, int] = {}
        into: dict[int, int] = {}
        for p, t in sends:  # tensors to one peer share its link: one message of their summed bytes
            out[p] = out.get(p, 0) + _nbytes(t)
        for p, t in recvs:
            into[p] = into.get(p, 0) + _nbytes(t)
        cost = max(
            [self.link.seconds(self.rank, p, b) for p, b in out.items()]
            + [self.link.seconds(p, self.rank, b) for p, b in into.items()]
            + [0.0]
        )
        left = t0 + cost - self._clock()
        if left > 0:
            self._sleep(left)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _ring_reduce_scatter(p2p: P2P, chunks: list[torch.Tensor], members: list[int], j: int) -> None:
    """Ring over ``members`` (this rank is members[j]); afterwards chunk (j + 1) mod k holds their sum."""
    k = len(members)
    buf = torch.empty_like(chunks[0])
    nxt, prv = members[(j + 1) % k], members[(j - 1) % k]
    for s in range(k - 1):
        send, recv = chunks[(j - s) % k], chunks[(j - s - 1) % k]
        p2p.exchange([(nxt, send)], [(prv, buf[: recv.numel()])])
        recv.add_(buf[: recv.numel()])


def _ring_all_gather(p2p: P2P, chunks: list[torch.Tensor], members: list[int], j: int) -> None:
    """Ring over ``members``: members[j] starts owning chunk (j + 1) mod k; afterwards all own all."""
    k = len(members)
    nxt, prv = members[(j + 1) % k], members[(j - 1) % k]
    for s in range(k - 1):
        send, recv = chunks[(j + 1 - s) % k], chunks[(j - s) % k]
        p2p.exchange([(nxt, send)], [(prv, recv)])


def ring_all_reduce(p2p: P2P, x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over all ranks, in place (x must be contiguous); returns x."""
    n, r = p2p.size, p2p.rank
    if n == 1:
        return x
    chunks = list(x.view(-1).tensor_split(n))
    members = list(range(n))
    _ring_reduce_scatter(p2p, chunks, members, r)
    _ring_all_gather(p2p, chunks, members, r)
    return x


def _exchange_sum(p2p: P2P, flat: torch.Tensor, peers: list[int], compression: str) -> None:
    """All-reduce ``flat`` among ``peers`` (this rank included) by one direct exchange of compressed copies;
    every peer sums the decompressed copies in peer order (fp32), so all end with the same bits."""
    r = p2p.rank
    mine = compress(flat, compression)
    theirs = {q: empty_compressed(flat.numel(), flat.dtype, flat.device, compression) for q in peers if q != r}
    sends = [(q, t) for q in theirs for t in mine.tensors()]
    recvs = [(q, t) for q, c in theirs.items() for t in c.tensors()]
    p2p.exchange(sends, recvs)
    total = torch.zeros(flat.numel(), dtype=torch.float32, device=flat.device)
    for q in peers:
        total += decompress(mine if q == r else theirs[q], flat.numel())
    flat.copy_(total)


def _check(p2p: P2P, domain_size: int, compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
    if domain_size < 1 or p2p.size % domain_size:
        raise ValueError(f"world size {p2p.size} is not a multiple of domain size {domain_size}")


def sharded_all_reduce(p2p: P2P, x: torch.Tensor, domain_size: int, compression: str = "none") -> torch.Tensor:
    """Sum ``x`` over all ranks, in place: reduce-scatter in each fast domain, each rank's shard all-reduced
    with its peers of the other domains over the slow link (compressed), all-gather; returns x."""
    _check(p2p, domain_size, compression)
    n, r, k = p2p.size, p2p.rank, domain_size
    if n == 1:
        return x
    chunks = list(x.view(-1).tensor_split(k))
    base, j = r - r % k, r % k
    members = list(range(base, base + k))
    _ring_reduce_scatter(p2p, chunks, members, j)
    if n > k:
        _exchange_sum(p2p, chunks[(j + 1) % k], list(range(j, n, k)), compression)
    _ring_all_gather(p2p, chunks, members, j)
    return x


@dataclass(slots=True)
class Compressed:
    payload: torch.Tensor
    scales: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor]:
        return [self.payload] if self.scales is None else [self.payload, self.scales]


def compress(x: torch.Tensor, kind: str) -> Compressed:
    """x: flat fp32/bf16/fp16. The slow-link form of x."""
    if kind == "none":
        return Compressed(x.contiguous())
    if kind == "bf16":
        return Compressed(x.to(torch.bfloat16))
    if kind == "int8":
        flat = x.float()
        pad = (-flat.numel()) % INT8_BLOCK
        blocks = torch.nn.functional.pad(flat, (0, pad)).view(-1, INT8_BLOCK)
        scales = blocks.abs().amax(dim=1).clamp_min(1e-30) / 127.0
        q = torch.round(blocks / scales[:, None]).clamp_(-127, 127).to(torch.int8)
        return Compressed(q.view(-1), scales)
    raise ValueError(f"compression must be one of {COMPRESSIONS}, got {kind!r}")


def empty_compressed(numel: int, dtype: torch.dtype, device: torch.device, kind: str) -> Compressed:
    if kind == "none":
        return Compressed(torch.empty(numel, dtype=dtype, device=device))
    if kind == "bf16":
        return Compressed(torch.empty(numel, dtype=torch.bfloat16, device=device))
    nblocks = -(-numel // INT8_BLOCK)
    return Compressed(
        torch.empty(nblocks * INT8_BLOCK, dtype=torch.int8, device=device),
        torch.empty(nblocks, dtype=torch.float32, device=device),
    )


def decompress(c: Compressed, numel: int) -> torch.Tensor:
    """fp32 [numel]."""
    if c.scales is None:
        return c.payload.float()
    return (c.payload.view(-1, INT8_BLOCK).float() * c.scales[:, None]).view(-1)[:numel]


def compression_tolerance(partials: list[torch.Tensor], kind: str, shards: int = 1) -> torch.Tensor:
    """Elementwise bound on |result - exact| when the slow link carries ``partials`` (the domains' sums,
    flat): the compression's error only (add fp32 rounding on top). ``shards``: the partials cross in that
    many pieces, each compressed on its own (``sharded_all_reduce`` with that domain size)."""
    if shards > 1:
        pieces = [p.tensor_split(shards) for p in partials]
        return torch.cat([compression_tolerance(list(ps), kind) for ps in zip(*pieces)])
    if kind == "none":
        return torch.zeros_like(partials[0], dtype=torch.float32)
    if kind == "bf16":
        return sum(p.float().abs() for p in partials) * 2.0**-8
    bound = torch.zeros_like(partials[0], dtype=torch.float32)
    for p in partials:
        c = compress(p, "int8")
        bound += (c.scales * 127.0 / 254.0).repeat_interleave(INT8_BLOCK)[: p.numel()]
    return bound


def hierarchical_all_reduce(p2p: P2P, x: torch.Tensor, domain_size: int, compression: str = "none") -> torch.Tensor:
    """Sum ``x`` over all ranks, in place, by fast domains of ``domain_size`` consecutive ranks; returns x."""
    _check(p2p, domain_size, compression)
    n, r = p2p.size, p2p.rank
    if n == 1:
        return x
    flat = x.view(-1)
    leader = r - r % domain_size
    members = range(leader + 1, leader + domain_size)
    if r != leader:
        p2p.exchange([(leader, flat)], [])
        p2p.exchange([], [(leader, flat)])
        return x
    # 1. reduce in the domain, in rank order
    bufs = [torch.empty_like(flat) for _ in members]
    p2p.exchange([], list(zip(members, bufs)))
    for b in bufs:
        flat.add_(b)
    # 2. leaders exchange their partials over the slow link
    if n > domain_size:
        _exchange_sum(p2p, flat, list(range(0, n, domain_size)), compression)
    # 3. broadcast back in the domain
    p2p.exchange([(m, flat) for m in members], [])
    return x
