"""A two-level link model: ranks grouped in fast domains (NVLink inside a node), domains joined by a slow link
(the network between nodes). Framework-free, shared by the all-reduce emulation (backends/torch/allreduce.py,
``PacedP2P``) and the simulator's TP cost (backends/sim/cost_model.py), so both price a transfer alike.

A transfer of ``nbytes`` from rank a to rank b takes the alpha-beta time of its link::

    seconds(a, b, n) = latency + n / bandwidth      fast link when a and b share a domain, slow otherwise
    domain(rank)     = rank // domain_size           ranks [0, k) | [k, 2k) | ...   leader = first of each

Links are point-to-point and full duplex: transfers on distinct (src, dst) pairs do not share bandwidth
(each GPU has its own NVLink ports and NIC, as on H100/H200 nodes). The model also prices the two
all-reduce algorithms analytically (``ring_all_reduce_s``, ``hierarchical_all_reduce_s``), step by step in
the same order as the real implementations, so the simulator and the emulation agree. (``sharded_all_reduce_s``
too: the reduce-scatter / per-rank exchange / all-gather variant.)
"""

from __future__ import annotations

from dataclasses import dataclass

COMPRESSION_BYTES = {"none": 0.0, "bf16": 2.0, "int8": 1.0 + 4.0 / 256}  # per element on the slow link (0: as is)
INT8_BLOCK = 256  # elements per int8 scale (backends/torch/allreduce.py)


@dataclass(frozen=True, slots=True)
class LinkModel:
    """domain_size: ranks per fast domain. *_gbps: bandwidth in GB/s (1e9 bytes/s). *_latency_us: per message."""

    domain_size: int
    fast_gbps: float
    slow_gbps: float
    fast_latency_us: float = 5.0
    slow_latency_us: float = 50.0

    def __post_init__(self) -> None:
        if self.domain_size < 1:
            raise ValueError(f"domain_size must be >= 1, got {self.domain_size}")
        for name in ("fast_gbps", "slow_gbps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("fast_latency_us", "slow_latency_us"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def domain(self, rank: int) -> int:
        return rank // self.domain_size

    def same_domain(self, a: int, b: int) -> bool:
        return self.domain(a) == self.domain(b)

    def seconds(self, src: int, dst: int, nbytes: float) -> float:
        if self.same_domain(src, dst):
            return self.fast_latency_us * 1e-6 + nbytes / (self.fast_gbps * 1e9)
        return self.slow_latency_us * 1e-6 + nbytes / (self.slow_gbps * 1e9)

    # ---- analytic costs of the two algorithms (same steps as backends/torch/allreduce.py) ----

    def ring_all_reduce_s(self, world: int, nbytes: float) -> float:
        """Flat ring: 2(N-1) steps, each moving nbytes/N over every ring hop; a step lasts as long as its
        slowest hop (the ring r -> r+1 crosses every domain boundary)."""
        if world <= 1:
            return 0.0
        chunk = nbytes / world
        step = max(self.seconds(r, (r + 1) % world, chunk) for r in range(world))
        return 2 * (world - 1) * step

    def hierarchical_all_reduce_s(
        self, world: int, nbytes: float, compression: str = "none", elem_bytes: int = 4
    ) -> float:
        """Members -> leader (fast), leaders exchange compressed partials (slow, all pairs at once),
        leader -> members (fast). nbytes: the tensor's size, of ``elem_bytes``-wide elements."""
        if world <= 1:
            return 0.0
        k = min(self.domain_size, world)
        if world % k:
            raise ValueError(f"world {world} is not a multiple of domain_size {k}")
        leaders = world // k
        intra = self.seconds(0, 1, nbytes) if k > 1 else 0.0
        inter = 0.0
        if leaders > 1:
            per_elem = COMPRESSION_BYTES[compression] or elem_bytes
            inter = self.seconds(0, k, nbytes / elem_bytes * min(per_elem, elem_bytes))
        return 2 * intra + inter

    def sharded_all_reduce_s(self, world: int, nbytes: float, compression: str = "none", elem_bytes: int = 4) -> float:
        """Ring reduce-scatter in each domain (k - 1 fast steps of nbytes/k), each rank's shard exchanged
        with its peers in the other domains (slow, compressed, all at once), ring all-gather in the domain."""
        if world <= 1:
            return 0.0
        k = min(self.domain_size, world)
        if world % k:
            raise ValueError(f"world {world} is not a multiple of domain_size {k}")
        shard = nbytes / k
        intra = (k - 1) * self.seconds(0, 1, shard) if k > 1 else 0.0
        inter = 0.0
        if world > k:
            per_elem = COMPRESSION_BYTES[compression] or elem_bytes
            inter = self.seconds(0, k, shard / elem_bytes * min(per_elem, elem_bytes))
        return 2 * intra + inter
